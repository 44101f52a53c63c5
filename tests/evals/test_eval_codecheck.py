"""EvalPlus-style code grading (acceptmoe.evals.codecheck): the value codec, the sanitiser, the verdict
decided in the parent (no trick in the program's own process passes), and `__main__` blocks."""
import collections
import math
import textwrap

import pytest

from acceptmoe.evals import codec
from acceptmoe.evals.codecheck import (
    RESULT_MARK,
    CodeProblem,
    assert_inputs,
    compare,
    expected_outputs,
    grade_many,
    sanitize,
)
from acceptmoe.evals.tasks import get_task

# ---------------------------------------------------------------------------------------------- codec


class SubInt(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize("value", [
    None, True, False, 0, -7, 2**53, 2**200, -(2**70), 1.5, -0.0, float("inf"), float("-inf"), "", "naïve \udc80",
    [], [1, [2, (3, 4.5)]], (), ("a",), {1, 2}, frozenset({"x", (1, 2)}), {"a": 1, 2: [3], (1, 2): {4}},
    complex(1, -2), b"\x00\xff", {"nested": {"d": ({1}, frozenset())}}, collections.Counter("abca"),
    collections.OrderedDict([(2, "b"), (1, "a")]), collections.deque([1, (2,)]),
])
def test_codec_round_trip_keeps_value_and_type(value):
    back = codec.loads(codec.dumps(value))
    assert back == value and type(back) is type(value)
    if isinstance(value, (list, tuple)):
        assert [type(v) for v in back] == [type(v) for v in value]


def test_codec_defaultdict_is_a_dict_and_large_values_travel_as_digests():
    assert codec.loads(codec.dumps(collections.defaultdict(list, {1: [2]}))) == {1: [2]}
    big, cap = {(i, str(i)) for i in range(2000)}, 1000
    same, other = codec.encode_result(set(sorted(big, reverse=True)), cap), codec.encode_result(big | {(-1, "")}, cap)
    assert codec.decode(codec.encode_result(big, cap)) == codec.decode(same) != codec.decode(other)
    assert isinstance(codec.decode(same), codec.Digest)
    assert codec.decode(codec.encode_result(list(big), cap)) != codec.decode(same)  # a list is not a set
    assert codec.encode_result([1, 2]) == [1, 2]
    assert isinstance(codec.decode(codec.encode_result(10 ** 5000, cap)), codec.Digest)  # an int's size counts


def test_codec_nan_round_trips():
    assert math.isnan(codec.loads(codec.dumps(float("nan"))))


@pytest.mark.parametrize("value", [object(), iter([1]), float, lambda: 1])
def test_codec_values_that_are_not_data_become_opaque(value):
    back = codec.loads(codec.dumps([value]))[0]
    assert isinstance(back, codec.Opaque) and back != value and back != 3 and back != [1]


def test_codec_subclasses_travel_as_their_data_with_their_name():
    """A subclass comes back as a class of the codec's own with the program's name and the built-in type's
    behaviour: its data is compared, its own __eq__ never runs on this side."""
    Point = collections.namedtuple("Point", "x y")
    back = codec.loads(codec.dumps([SubInt(3), Point(1, 2), type("L", (list,), {})([1]), Point(3, 4)]))
    assert back[0] == 3 and back[0] != 4 and type(back[0]) is not int and back[0].type_name.endswith("SubInt")
    assert back[1] == (1, 2) and type(back[1]) is not tuple and type(back[1]) is type(back[3])
    assert back[2] == [1] and isinstance(back[2], list)


def test_codec_numbers_of_other_types_keep_their_type():
    import decimal
    import fractions

    import numpy as np
    values = [fractions.Fraction(1, 3), decimal.Decimal("1.10"), np.float64(0.5), np.int32(7), np.bool_(True),
              np.array([[1.5, 2.0]], dtype=np.float32), np.zeros((0, 3))]
    back = codec.loads(codec.dumps(values))
    for old, new in zip(values, back, strict=False):
        assert type(new) is type(old)
        assert (np.array_equal(new, old) and new.shape == old.shape) if isinstance(old, np.ndarray) else new == old
    assert str(back[1]) == "1.10" and back[5].dtype == np.float32


def test_codec_refuses_crafted_hash_collisions():
    """20k distinct ints with one hash (multiples of 2**61 - 1) would take quadratic time to put in a set."""
    colliding = {"s": [(2 ** 61 - 1) * k for k in range(1, 20_001)]}
    with pytest.raises(codec.DecodeError, match="share one hash"):
        codec.decode(colliding)
    assert codec.decode({"s": [1, 1.0, True, 2]}) == {1, 2}  # equal members are not collisions


def test_codec_cuts_deep_nesting():
    deep = [1]
    for _ in range(codec.MAX_DEPTH + 2):
        deep = [deep]
    inner = codec.loads(codec.dumps(deep))
    while isinstance(inner, list):
        inner = inner[0]
    assert isinstance(inner, codec.Opaque)


@pytest.mark.parametrize("text", ['{"t": 1}', '{"z": []}', '{"t": [], "s": []}', '{"s": [[1]]}', '{"c": [1]}',
                                  '{"o": 3}', "[1, 2", '{"d": [[1]]}'])
def test_codec_rejects_anything_else(text):
    with pytest.raises(codec.DecodeError):
        codec.loads(text)


# ---------------------------------------------------------------------------------------------- sanitiser


def test_sanitiser_keeps_entry_point_and_dependencies_and_drops_main_and_stray_code():
    code = textwrap.dedent("""\
        import math
        SCALE = 2
        def helper(x):
            return x * SCALE
        def unused():
            return 0
        def f(x):
            return helper(math.floor(x))
        print(f(3))
        if __name__ == "__main__":
            input()
        """)
    out = sanitize(code, "f")
    assert "import math" in out and "def helper" in out and "SCALE = 2" in out and "def f" in out
    assert "unused" not in out and "print(" not in out and "__main__" not in out


def test_assert_inputs_reads_literal_arguments():
    asserts = ["assert f(3, [1, 2]) == 5", "assert candidate('a', (1,)) is None", "assert set(f({1})) == {1}"]
    assert assert_inputs(asserts, "f") == [[3, [1, 2]], ["a", (1,)], [{1}]]
    with pytest.raises(ValueError, match="no call to f"):
        assert_inputs(["assert g(1) == 2"], "f")
    with pytest.raises(ValueError, match="not literals"):
        assert_inputs(["assert f(x) == 2"], "f")


# ---------------------------------------------------------------------------------------------- verdicts

ADD = CodeProblem("test/add", "add", "def add(a, b):\n    return a + b\n",
                  (("base", [[1, 2], [10, -3], [0.5, 0.25]]), ("plus", [[[1], [2]], [(1,), (2, 3)], ["a", "b"]])))
RIGHT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"


def _grade(*codes, problem=ADD):
    return grade_many([problem] * len(codes), list(codes))


def test_right_and_wrong_answers_with_base_and_plus():
    right, wrong, base_only = _grade(RIGHT, WRONG, "def add(a, b):\n    return a + b if type(a) is not list else []\n")
    assert right.passed("base") and right.passed("plus")
    assert not wrong.passed("base") and not wrong.passed("plus") and "input 0" in wrong.sets["base"].reason
    assert base_only.passed("base") and not base_only.passed("plus")


def test_output_printing_and_input_reading_do_not_matter():
    noisy = "import sys\ndef add(a, b):\n    print('x' * 100000)\n    sys.stderr.write('y')\n    return a + b\n"
    reads = "def add(a, b):\n    try:\n        input()\n    except OSError:\n        pass\n    return a + b\n"
    bare = "def add(a, b):\n    input()\n    return a + b\n"
    noisy_v, reads_v, bare_v = _grade(noisy, reads, bare)
    assert noisy_v.passed("plus") and reads_v.passed("plus")
    assert not bare_v.passed("base") and "OSError" in bare_v.sets["base"].reason  # stdin as EvalPlus's swallow_io


def test_exceptions_timeouts_and_missing_entry_points_fail():
    slow = "def add(a, b):\n    while True:\n        pass\n"
    raises = "def add(a, b):\n    raise ValueError('no')\n"
    missing = "def plus(a, b):\n    return a + b\n"
    broken = "def add(a, b) return a + b\n"
    verdicts = _grade(slow, raises, missing, broken)
    assert not any(v.passed("base") for v in verdicts)
    assert "TimeoutException" in verdicts[0].sets["base"].reason  # evalplus's time_limit, inside the sandbox
    assert "ValueError" in verdicts[1].sets["base"].reason
    assert "KeyError" in verdicts[2].sets["base"].reason and "SyntaxError" in verdicts[3].sets["base"].reason


# Each trick runs inside the function the harness calls, on top of a wrong answer: if it could forge a
# pass, WRONG would pass. None may.
TRICKS = {
    "print the sandbox's pass token early": """
        import os, sys
        def add(a, b):
            frame = sys._getframe()
            while frame is not None:
                if "nonce" in frame.f_locals:
                    os.write(1, b"\\n" + frame.f_locals["nonce"] + b"\\n")
                    os._exit(0)
                frame = frame.f_back
            return a - b
        """,
    "patch the exit paths": """
        import os, sys
        def add(a, b):
            os._exit = sys.exit = lambda *args: None
            raise SystemExit(0)
        """,
    "sys.settrace skipping the harness's calls": """
        import sys
        def add(a, b):
            frame = sys._getframe().f_back
            done = max(no for _, _, no in frame.f_code.co_lines() if no)
            def jump(fr, event, arg):
                if event == "line" and fr is frame:
                    fr.f_lineno = done
                return jump
            frame.f_trace = jump
            sys.settrace(jump)
            return a - b
        """,
    "an object whose __eq__ is always True": """
        class Anything:
            def __eq__(self, other):
                return True
            __hash__ = object.__hash__
        def add(a, b):
            return Anything()
        """,
    "a subclass of int whose __eq__ is always True": """
        class Int(int):
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__
        def add(a, b):
            return Int(0)
        """,
    "forge the harness's result lines, then exit 0": """
        import os, json
        def add(a, b):
            for i in range(3):
                os.write(1, ("\\n%s%s\\n" % (MARK, json.dumps({"i": i, "value": 0, "seconds": 0}))).encode())
            os.write(1, ("\\n%s%s\\n" % (MARK, json.dumps({"done": 3}))).encode())
            os._exit(0)
        """,
    "forge the right answers before the harness writes its own": """
        import os, json
        SENT = []
        def add(a, b):
            if not SENT:
                SENT.append(1)
                for i, v in enumerate([3, 7, 0.75]):
                    os.write(1, ("\\n%s%s\\n" % (MARK, json.dumps({"i": i, "value": v, "seconds": 0}))).encode())
                os.write(1, ("\\n%s%s\\n" % (MARK, json.dumps({"done": 3}))).encode())
            return a - b
        """,
    "silence the harness's writer": """
        import sys
        def add(a, b):
            g = sys._getframe().f_back.f_globals
            g["_write"] = lambda *args: None
            return a - b
        """,
    "exit 0 early": """
        import os
        def add(a, b):
            os._exit(0)
        """,
    "exit 0 while loading": """
        import os
        os._exit(0)
        def add(a, b):
            return a + b
        """,
}


@pytest.mark.parametrize("name", sorted(TRICKS))
def test_no_trick_in_the_programs_own_process_passes(name):
    code = f"MARK = {RESULT_MARK!r}\n" + textwrap.dedent(TRICKS[name])
    verdict = _grade(code)[0]
    assert not verdict.passed("base") and not verdict.passed("plus"), verdict


def test_the_forged_lines_would_have_been_right():
    """Control for the forging tricks: the same right answers, returned by the function, pass."""
    fixed = CodeProblem("test/add3", "add", RIGHT, (("base", [[1, 2], [10, -3], [0.5, 0.25]]),))
    assert _grade("def add(a, b):\n    return [3, 7, 0.75][[1, 10, 0.5].index(a)]\n", problem=fixed)[0].passed("base")


def test_code_tasks_are_sanitised_before_the_tricks_can_run():
    task = get_task("humaneval")
    ex = task.load(limit=1)[0]
    token_trick = textwrap.dedent(TRICKS["print the sandbox's pass token early"]).replace("def add(a, b)", "def trick()")
    reply = f"```python\n{token_trick}\ntrick()\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    assert not task.score(ex, reply).correct


# ---------------------------------------------------------------------------------------------- __main__ blocks

MAIN_BLOCKS = {
    "unittest.main()": "if __name__ == '__main__':\n    import unittest\n    unittest.main()\n",
    "input()": "if __name__ == '__main__':\n    n = int(input())\n    print(n)\n",
}


@pytest.mark.parametrize("block", sorted(MAIN_BLOCKS))
def test_a_right_answer_followed_by_a_main_block_passes(block):
    he, mbpp = get_task("humaneval"), get_task("mbpp")
    ex = he.load(limit=1)[0]
    reply = f"```python\n{ex['prompt']}{ex['canonical_solution']}\n\n{MAIN_BLOCKS[block]}```"
    score = he.score(ex, reply)
    assert score.correct and score.details["plus"] and "__main__" not in score.extracted
    ex = mbpp.load(limit=1)[0]
    score = mbpp.score(ex, f"```python\n{ex['canonical_solution']}\n\n{MAIN_BLOCKS[block]}```")
    assert score.correct and score.details["plus"]


@pytest.mark.parametrize("name", ["tiny-humaneval", "tiny-mbpp"])
def test_tiny_code_tasks_use_the_same_grading(name):
    task = get_task(name)
    ex = task.load("test", limit=1)[0]
    main = MAIN_BLOCKS["input()"]
    reply = ex["reference"] + "\n\n" + main
    scores = task.score_many([ex, ex], [reply, reply.replace("return", "return None and")])
    assert scores[0].correct and not scores[1].correct and scores[0].details["base_status"] == "passed"
    # the expected outputs are the reference's, run in the sandbox: they match the asserts' literals
    asserts = ex["test"] if name == "tiny-humaneval" else "\n".join(ex["test_list"])
    literals = [line.rsplit("==", 1)[1].strip() for line in asserts.splitlines() if "assert" in line]
    (expected,) = expected_outputs([task.problem(ex)])
    assert [repr(v) for v in expected["base"].values] == literals


# ---------------------------------------------------------------------------------------------- comparison rules


def test_float_tolerance_and_types_follow_evalplus():
    assert compare("plain", "f", [[]], [1.0 + 1e-7], [1.0], 0) == [True]  # atol raised to 1e-6 for floats
    assert compare("plain", "f", [[]], [1.0 + 1e-5], [1.0], 0) == [False]
    assert compare("plain", "f", [[], []], [1.0, 5.0 + 5e-7], [1.0, 5.0], 0) == [True, True]
    assert compare("plain", "f", [[]], [[1.0, 2.0 + 1e-7]], [[1.0, 2.0]], 0) == [True]
    assert compare("plain", "f", [[]], [(1.0, 2.0 + 1e-7)], [[1.0, 2.0]], 0) == [False]  # type differs
    assert compare("plain", "f", [[]], [1], [1.0], 0) == [True]  # 1 == 1.0, as in Python
    assert compare("plain", "f", [[]], [codec.Opaque("x")], [1], 0) == [False]
    assert compare("mbpp", "similar_elements", [[]], [(5, 4)], [(4, 5)], 0) == [True]  # set-equality oracle
    assert compare("plain", "similar_elements", [[]], [(5, 4)], [(4, 5)], 0) == [False]


def test_the_float_tolerance_is_chosen_by_the_expected_value_never_by_the_output():
    """EvalPlus raises atol when the expected value is a float (or floats): a float output for an int
    expectation raises nothing, so a later near-miss on ints fails; an int output for a float expectation
    is compared with the tolerance."""
    assert compare("plain", "f", [[], []], [5.0, [1, 2.0000001]], [5, [1, 2]], 0) == [True, False]
    assert compare("plain", "f", [[]], [[1, 2]], [[1.0000001, 2.0]], 0) == [True]
    assert compare("plain", "f", [[], []], [[1, 2], [3, 4.0000001]], [[1.0000001, 2.0], [3, 4]], 0) == [True, True]
    import evalplus.eval as evaluation
    assert not evaluation.is_floats(5) and evaluation.is_floats([1.0000001, 2.0]) and not evaluation.is_floats([1, 2])
