"""The small-function library behind tiny-humaneval and tiny-mbpp.

An `Op` is one function idea: the kind of its arguments, a docstring sentence (naming the arguments), an
MBPP-style task phrase (naming only "a list", "a string", ...), candidate function names and a body
template. `{a}`/`{b}` are argument names and `{k}` a drawn constant, so the model must copy names and
numbers from the prompt rather than memorise whole functions. Expected outputs come from executing the
reference body itself, so prompt examples, hidden tests and the reference always agree.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

LIST_ARGS = ("nums", "values", "numbers", "arr", "xs", "lst", "items", "data")
STR_ARGS = ("s", "text", "word", "string", "name")
INT_ARGS = ("n", "x", "num", "value")
PAIR_ARGS = (("a", "b"), ("x", "y"), ("m", "n"), ("first", "second"), ("p", "q"))
LETTERS = "abdeilmnorst"


@dataclass(frozen=True)
class Op:
    kind: str            # "list" | "str" | "int" | "pair"
    doc: str             # docstring sentence; {a} {b} argument names, {k} constant
    task: str            # MBPP phrase after "Write a function to"; {k} constant
    names: tuple[str, ...]
    body: str            # body lines without the 4-space function indent; {a} {b} {k}
    k: tuple | None = None   # ("int", lo, hi) or ("char",) for the constant, None when there is none


OPS = (
    Op("list", "Return the sum of the numbers in {a}.", "find the sum of all numbers in a list",
       ("sum_list", "list_sum", "total", "add_all"), "return sum({a})"),
    Op("list", "Return the largest number in {a}.", "find the largest number in a list",
       ("largest", "max_value", "find_max", "biggest"), "return max({a})"),
    Op("list", "Return the smallest number in {a}.", "find the smallest number in a list",
       ("smallest", "min_value", "find_min", "lowest"), "return min({a})"),
    Op("list", "Return how many numbers in {a} are greater than {k}.",
       "count how many numbers in a list are greater than {k}",
       ("count_greater", "count_above", "num_larger", "how_many_above"),
       "return len([v for v in {a} if v > {k}])", ("int", 0, 15)),
    Op("list", "Return how many numbers in {a} are less than {k}.",
       "count how many numbers in a list are less than {k}",
       ("count_less", "count_below", "num_smaller"), "return len([v for v in {a} if v < {k}])", ("int", 1, 15)),
    Op("list", "Return a list of the even numbers in {a}.", "get the even numbers from a list",
       ("evens", "even_numbers", "keep_even", "filter_even"), "return [v for v in {a} if v % 2 == 0]"),
    Op("list", "Return a list of the odd numbers in {a}.", "get the odd numbers from a list",
       ("odds", "odd_numbers", "keep_odd", "filter_odd"), "return [v for v in {a} if v % 2 == 1]"),
    Op("list", "Return a new list with each number in {a} multiplied by {k}.",
       "multiply each number in a list by {k}", ("scale", "multiply_all", "times_each", "scaled"),
       "return [v * {k} for v in {a}]", ("int", 2, 9)),
    Op("list", "Return a new list with {k} added to each number in {a}.", "add {k} to each number in a list",
       ("shift", "add_to_all", "increase", "plus_each"), "return [v + {k} for v in {a}]", ("int", 1, 20)),
    Op("list", "Return the sum of the squares of the numbers in {a}.", "find the sum of squares of a list",
       ("sum_squares", "square_sum", "sum_of_squares"), "return sum(v * v for v in {a})"),
    Op("list", "Return True if {k} is in {a}, otherwise False.", "check whether {k} is in a list",
       ("contains", "has_value", "includes", "is_present"), "return {k} in {a}", ("int", 0, 12)),
    Op("list", "Return the last element of {a}.", "get the last element of a list",
       ("last", "last_item", "get_last", "final_element"), "return {a}[-1]"),
    Op("list", "Return the sum of the first and last elements of {a}.",
       "find the sum of the first and last elements of a list",
       ("ends_sum", "first_plus_last", "edge_sum"), "return {a}[0] + {a}[-1]"),
    Op("list", "Return the product of the numbers in {a}.", "find the product of all numbers in a list",
       ("product", "multiply_list", "list_product"), "result = 1\nfor v in {a}:\n    result *= v\nreturn result"),
    Op("list", "Return {a} in reverse order.", "reverse a list",
       ("reverse_list", "reversed_list", "flip"), "return {a}[::-1]"),
    Op("list", "Return the numbers in {a} sorted from smallest to largest.", "sort a list in ascending order",
       ("sort_list", "sorted_values", "ascending"), "return sorted({a})"),
    Op("list", "Return the difference between the largest and smallest number in {a}.",
       "find the difference between the largest and smallest number in a list",
       ("spread", "value_range", "max_minus_min"), "return max({a}) - min({a})"),
    Op("list", "Return how many times {k} appears in {a}.", "count how many times {k} appears in a list",
       ("count_value", "occurrences", "count_of"), "return {a}.count({k})", ("int", 0, 9)),
    Op("str", "Return {a} reversed.", "reverse a string", ("reverse", "reverse_string", "backwards"),
       "return {a}[::-1]"),
    Op("str", "Return {a} in upper case.", "convert a string to upper case", ("to_upper", "shout", "upper_case"),
       "return {a}.upper()"),
    Op("str", "Return how many times the letter '{k}' appears in {a}.",
       "count how many times the letter '{k}' appears in a string",
       ("count_letter", "letter_count", "count_char"), "return {a}.count('{k}')", ("char",)),
    Op("str", "Return True if {a} reads the same forwards and backwards, otherwise False.",
       "check whether a string is a palindrome", ("is_palindrome", "palindrome", "check_palindrome"),
       "return {a} == {a}[::-1]"),
    Op("str", "Return the number of vowels in {a}.", "count the vowels in a string",
       ("count_vowels", "vowel_count", "num_vowels"), "return sum(1 for ch in {a} if ch in 'aeiou')"),
    Op("str", "Return the number of characters in {a}.", "find the length of a string",
       ("length", "str_len", "char_count"), "return len({a})"),
    Op("str", "Return {a} repeated {k} times.", "repeat a string {k} times", ("repeat", "echo", "duplicate"),
       "return {a} * {k}", ("int", 2, 4)),
    Op("str", "Return the first character of {a}.", "get the first character of a string",
       ("first_char", "initial", "first_letter"), "return {a}[0]"),
    Op("str", "Return {a} with every '{k}' removed.", "remove every '{k}' from a string",
       ("remove_letter", "strip_char", "drop_char"), "return {a}.replace('{k}', '')", ("char",)),
    Op("str", "Return True if {a} starts with the letter '{k}', otherwise False.",
       "check whether a string starts with the letter '{k}'", ("starts_with", "begins_with", "has_prefix"),
       "return {a}.startswith('{k}')", ("char",)),
    Op("int", "Return the square of {a}.", "find the square of a number", ("square", "squared", "sq"),
       "return {a} * {a}"),
    Op("int", "Return True if {a} is even, otherwise False.", "check whether a number is even",
       ("is_even", "even", "check_even"), "return {a} % 2 == 0"),
    Op("int", "Return the sum of all integers from 1 to {a}.", "find the sum of the integers from 1 to n",
       ("sum_to", "triangle", "sum_up_to"), "return sum(range(1, {a} + 1))"),
    Op("int", "Return the factorial of {a}.", "compute the factorial of a number",
       ("factorial", "fact", "factorial_of"), "result = 1\nfor i in range(2, {a} + 1):\n    result *= i\nreturn result"),
    Op("int", "Return {a} multiplied by {k}.", "multiply a number by {k}", ("times", "multiply", "scale_number"),
       "return {a} * {k}", ("int", 2, 12)),
    Op("int", "Return True if {a} is divisible by {k}, otherwise False.",
       "check whether a number is divisible by {k}", ("divisible", "is_multiple", "divides"),
       "return {a} % {k} == 0", ("int", 2, 9)),
    Op("int", "Return the sum of the digits of {a}.", "find the sum of the digits of a number",
       ("digit_sum", "sum_digits", "add_digits"), "return sum(int(d) for d in str({a}))"),
    Op("pair", "Return the sum of {a} and {b}.", "add two numbers", ("add", "add_two", "plus"), "return {a} + {b}"),
    Op("pair", "Return the larger of {a} and {b}.", "find the larger of two numbers",
       ("larger", "max_of_two", "bigger"), "return max({a}, {b})"),
    Op("pair", "Return {a} minus {b}.", "subtract the second number from the first",
       ("subtract", "minus", "difference"), "return {a} - {b}"),
    Op("pair", "Return the product of {a} and {b}.", "multiply two numbers", ("mul", "product_of", "times_two"),
       "return {a} * {b}"),
    Op("pair", "Return the absolute difference between {a} and {b}.",
       "find the absolute difference of two numbers", ("abs_diff", "distance", "gap"), "return abs({a} - {b})"),
)


def draw_constant(op: Op, rng: random.Random) -> int | str | None:
    if op.k is None:
        return None
    if op.k[0] == "char":
        return rng.choice(LETTERS)
    return rng.randint(op.k[1], op.k[2])


def draw_args(op: Op, rng: random.Random, k) -> tuple:
    """One argument tuple for `op` (inputs kept small so outputs stay short)."""
    if op.kind == "list":
        hi = 6 if op.names[0] == "product" else 20
        vals = [rng.randint(0, hi) for _ in range(rng.randint(2, 4 if hi == 6 else 6))]
        if isinstance(k, int) and rng.random() < 0.5:
            vals[rng.randrange(len(vals))] = k
        return (vals,)
    if op.kind == "str":
        word = "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 7)))
        if "palindrome" in op.task and rng.random() < 0.5:
            word = word[: len(word) // 2 + 1] + word[: len(word) // 2][::-1]
        if isinstance(k, str) and rng.random() < 0.5:  # make the letter matter in half of the inputs
            at = 0 if "startswith" in op.body else rng.randrange(len(word))
            word = word[:at] + k + word[at + 1:]
        return (word,)
    if op.kind == "int":
        hi = {"factorial": 7, "sum_to": 20, "digit_sum": 9999}.get(op.names[0], 30)
        return (rng.randint(0 if op.names[0] != "square" else 1, hi),)
    return (rng.randint(0, 30), rng.randint(0, 30))


def body(op: Op, arg_names: tuple[str, ...], k) -> str:
    """The function body, indented by four spaces (no trailing newline)."""
    text = op.body.format(a=arg_names[0], b=arg_names[-1], k=k)
    return "\n".join("    " + line for line in text.split("\n"))


def arg_names_for(op: Op, rng: random.Random) -> tuple[str, ...]:
    return {"list": lambda: (rng.choice(LIST_ARGS),), "str": lambda: (rng.choice(STR_ARGS),),
            "int": lambda: (rng.choice(INT_ARGS),), "pair": lambda: rng.choice(PAIR_ARGS)}[op.kind]()


def function_source(name: str, arg_names: tuple[str, ...], body_text: str) -> str:
    return f"def {name}({', '.join(arg_names)}):\n{body_text}\n"


def evaluate(source: str, name: str, args: tuple):
    """Run the reference function in-process (trusted, generated code) to get an expected output."""
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - the source is our own template, not model output
    return namespace[name](*args)


def call_text(name: str, args: tuple) -> str:
    return f"{name}({', '.join(repr(a) for a in args)})"


def distinct_args(op: Op, rng: random.Random, k, n: int) -> list[tuple]:
    """`n` different argument tuples (at most 50 draws)."""
    seen: list[tuple] = []
    for _ in range(50):
        args = draw_args(op, rng, k)
        if args not in seen:
            seen.append(args)
        if len(seen) == n:
            break
    return seen
