"""Every form of reply EvalPlus reads gets EvalPlus's verdicts, on real HumanEval+ and MBPP+ problems: (a) a
whole solution as plain text, (b) a base model's completion of the prompt (for HumanEval the function's
body alone, EvalPlus's `prompt + completion`), (c) a chat reply with prose around a fenced block. Each form
has right and wrong replies; our call (`Task.score_many`, default rules, response_format "plain") and
`evalplus.evaluate` itself (`evalplus_replies.evalplus_verdicts`) grade the same replies."""
import pytest

from acceptmoe.evals.tasks import get_task

from evalplus_replies import Case, graded_on_a_loaded_machine

# task id -> (right, wrong): HumanEval bodies (the prompt's signature and docstring precede them), MBPP functions
HUMANEVAL = {
    "HumanEval/2": ("\n    return number - int(number)\n", "\n    return round(number - int(number), 2)\n"),
    "HumanEval/23": ("\n    return len(string)\n", "\n    return len(string.strip())\n"),
    "HumanEval/38": ("\n    return encode_cyclic(encode_cyclic(s))\n",  # calls the helper the prompt defines
                     "\n    return encode_cyclic(s)\n"),
    "HumanEval/12": ("    if not strings:\n        return None\n    return max(strings, key=len)\n",
                     "    if not strings:\n        return None\n    return sorted(strings, key=len)[-1]\n"),
}
MBPP = {
    "Mbpp/2": ("def similar_elements(test_tup1, test_tup2):\n    return tuple(set(test_tup1) & set(test_tup2))\n",
               "def similar_elements(test_tup1, test_tup2):\n    return tuple(set(test_tup1))\n"),
    "Mbpp/3": ("import math\n\n\ndef is_not_prime(n):\n    if n == 1:\n        return True\n"
               "    return any(n % i == 0 for i in range(2, int(math.sqrt(n)) + 1))\n",
               "def is_not_prime(n):\n    return n % 2 == 0\n"),
    "Mbpp/17": ("def square_perimeter(a):\n    return 4 * a\n", "def square_perimeter(a):\n    return int(4 * a)\n"),
}
FORMS = ("whole solution", "completion", "chat reply")


def _chat(code: str) -> str:
    return f"Here is the function.\n\n```python\n{code.rstrip()}\n```\n\nIt passes the examples in the docstring."


def _cases() -> list[Case]:
    cases = []
    for dataset, replies in (("humaneval", HUMANEVAL), ("mbpp", MBPP)):
        for ex in get_task(dataset).load():
            if ex["id"] not in replies:
                continue
            for verdict, code in zip(("right", "wrong"), replies[ex["id"]], strict=False):
                whole = ex["prompt"] + code if dataset == "humaneval" else code
                cases += [Case(dataset, ex, f"whole solution, {verdict}", whole),
                          Case(dataset, ex, f"completion, {verdict}", code, completion=True),
                          Case(dataset, ex, f"chat reply, {verdict}", _chat(whole))]
    cases.append(next(Case("humaneval", c.example, "chat reply, the prompt's helper left out",  # EvalPlus: NameError
                           _chat("def decode_cyclic(s: str):\n    return encode_cyclic(encode_cyclic(s))\n"))
                      for c in cases if c.example["id"] == "HumanEval/38"))
    assert len(cases) == 6 * (len(HUMANEVAL) + len(MBPP)) + 1
    return cases


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """(case, our (base, plus), EvalPlus's (base, plus), our Grade) for every case."""
    cases, out = _cases(), []
    for dataset in ("humaneval", "mbpp"):
        mine = [c for c in cases if c.dataset == dataset]
        ours, theirs = graded_on_a_loaded_machine(dataset, mine, tmp_path_factory.mktemp(dataset))
        out += [(c, (g.correct, g.details["plus"]), their, g) for c, g, their in zip(mine, ours, theirs, strict=False)]
    return out


@pytest.mark.parametrize("form", FORMS)
def test_each_form_of_reply_gets_evalplus_evaluates_verdicts(graded, form):
    mine = [row for row in graded if row[0].name.startswith(form)]
    mismatches = [(c.example["id"], c.name, our, their, g.details.get("base_reason", ""), g.extracted[:200])
                  for c, our, their, g in mine if our != their]
    assert mismatches == [], "\n".join(map(str, mismatches))
    assert {c.example["id"] for c, *_ in mine} == set(HUMANEVAL) | set(MBPP)
    assert {our for _, our, *_ in mine} >= {(True, True), (False, False)}  # the replies separate right from wrong
    assert all(our == (True, True) for c, our, *_ in mine if c.name.endswith("right"))
