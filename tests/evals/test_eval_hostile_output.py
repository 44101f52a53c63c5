"""The grader cannot be crashed or stalled by what a graded program writes or returns, nor by the text of
a reply: one test per class (huge ints, deep nesting, crafted hash collisions, floods of output, huge
return values, replies that make the sanitiser recurse or take cubic time, programs that ignore SIGALRM).
Each hostile program is real and runs in the real sandbox; each ends as that reply's failure with its
reason, in seconds, and the parent's memory stays bounded (measured in a child process)."""
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from acceptmoe.evals import codec, readback
from acceptmoe.evals.codecheck import RESULT_MARK, CodeProblem, grade_many
from acceptmoe.evals.rules import CodeRules
from acceptmoe.evals.tasks import get_task

ONE = CodeProblem("test/one", "f", "def f(x):\n    return 1\n", (("base", [[0], [1]]),))
WIDE = CodeProblem("test/wide", "f", "def f(x):\n    return 'y' * 400_000\n", (("base", [[0]]),))  # lines up to ~860 KB
MARK = json.dumps(RESULT_MARK)

# Writes `payload` to every descriptor the program may hold, the harness's saved result descriptor included
# (a program can find it by trying them all).
FLOOD = """
import os
def _flood(payload):
    for fd in range(1, 64):
        try:
            os.write(fd, payload)
        except OSError:
            pass
"""


def _grade(code: str, problem: CodeProblem = ONE, rules: CodeRules = CodeRules()):
    start = time.monotonic()
    verdict = grade_many([problem], [textwrap.dedent(code)], rules=rules)[0]
    return verdict.sets["base"], time.monotonic() - start


def test_a_huge_int_return_value_is_a_failure_with_a_bounded_reason():
    base, took = _grade("def f(x):\n    return 10 ** 5000\n")
    assert not base.passed and "<int of 16610 bits>" in base.reason and len(base.reason) < 600 and took < 30
    big = CodeProblem("test/big", "f", "def f(x):\n    return 10 ** 5000 + x\n", (("base", [[0], [1]]),))
    assert _grade("def f(x):\n    return 10 ** 5000 + x\n", big)[0].passed
    assert readback.brief(10 ** 5000) == "<int of 16610 bits>"


def test_a_line_of_100k_nested_brackets_is_refused_without_recursion():
    line = b"[" * 100_000 + b"]" * 100_000
    assert readback.json_depth(line) == 100_000
    with pytest.raises(readback.Unreadable, match="nested deeper"):
        readback.parse_json(line)
    base, took = _grade(FLOOD + f"""
def f(x):
    _flood(b"\\n" + {MARK}.encode() + b'{{"called": 0}}\\n' + {MARK}.encode() + b'{{"i": 0, "seconds": 0, "value": '
           + b"[" * 100_000 + b"]" * 100_000 + b"}}\\n")
    return "y" * 400_000
""", WIDE)
    assert not base.passed and "nested deeper" in base.reason and took < 30


def test_20k_colliding_set_members_are_refused_in_linear_time():
    """Building such a set is quadratic in the program too, so it sends the encoded set itself."""
    base, took = _grade(FLOOD + f"""
def f(x):
    members = ",".join('{{"i": "%s"}}' % hex((2 ** 61 - 1) * k) for k in range(1, 20_001))
    _flood(b"\\n" + {MARK}.encode() + b'{{"called": 0}}\\n' + {MARK}.encode()
           + ('{{"i": 0, "seconds": 0, "value": {{"s": [%s]}}}}' % members).encode() + b"\\n")
    return "y" * 400_000
""", WIDE)
    assert not base.passed and "share one hash" in base.reason and took < 30
    start = time.monotonic()
    with pytest.raises(codec.DecodeError):
        codec.decode({"d": [[(2 ** 61 - 1) * k, 0] for k in range(1, 20_001)]})  # dict keys too
    assert time.monotonic() - start < 2


def test_set_equality_oracles_refuse_colliding_lists():
    """MBPP's set-equality tasks build set(out) in the parent: a returned list of colliding ints fails."""
    from acceptmoe.evals.codecheck import compare
    colliding = [(2 ** 61 - 1) * k for k in range(1, 20_001)]
    start = time.monotonic()
    assert compare("mbpp", "similar_elements", [[]], [colliding], [(1, 2)], 0) == [False]
    assert time.monotonic() - start < 2


def test_256_mib_of_stdout_is_cut_at_the_cap():
    base, took = _grade(FLOOD + """
def f(x):
    chunk = b"x" * (1 << 20)
    for _ in range(256):
        _flood(chunk)
    return 1
""")
    assert not base.passed and "the program wrote" in base.reason and took < 60


def test_printing_is_swallowed_as_evalplus_swallows_it():
    base, _ = _grade("import sys\ndef f(x):\n    print('x' * (8 << 20))\n    sys.stderr.write('y' * 1000)\n    return 1\n")
    assert base.passed, base.reason


def test_a_120_mib_return_value_travels_as_a_digest():
    """Against a 120 MiB expected value, whose own digest sets the time its encoding may take."""
    large = CodeProblem("test/large", "f", "def f(x):\n    return 'y' * (120 << 20)\n", (("base", [[0]]),))
    base, took = _grade("def f(x):\n    return 'x' * (120 << 20)\n", large)
    assert not base.passed and "Digest(" in base.reason and took < 60


def test_a_slow_program_that_ignores_sigalrm_fails_by_the_graders_clock():
    """The per-input limit is at least 1 s: a call that disables the alarm and takes 6 s is stopped by
    the parent, although it would return the right answer."""
    base, took = _grade("""
import signal, time
def f(x):
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.setitimer(signal.ITIMER_REAL, 0)
    end = time.monotonic() + 6
    while time.monotonic() < end:
        try:
            pass
        except BaseException:
            pass
    return 1
""")
    assert not base.passed and base.status == "timeout" and "measured by the grader" in base.reason
    assert took < 5.5


def test_a_run_that_sleeps_past_the_run_limit_fails():
    """EvalPlus's run limit, min(60 s, sum of per-input limits) + 2 s, measured from the harness's start."""
    rules = CodeRules(run_cap_s=1.0)
    base, took = _grade("import time\ntime.sleep(30)\ndef f(x):\n    return 1\n", rules=rules)
    assert not base.passed and "the run exceeded its time limit of 3.0 s" in base.reason and took < 20


def test_values_the_parent_cannot_compare_or_show_are_failures():
    """sNaN raises when compared; a Fraction of 60k-bit parts has no repr: each is the reply's failure."""
    base, _ = _grade("import decimal\ndef f(x):\n    return decimal.Decimal('sNaN')\n")
    assert not base.passed and "Decimal('sNaN')" in base.reason
    base, _ = _grade("import fractions\ndef f(x):\n    return fractions.Fraction(3 ** 40000, 2 ** 60000)\n")
    assert not base.passed and "Fraction" in base.reason and len(base.reason) < 600


# ------------------------------------------------------------------------------------------ reading replies


def _reply_grade(reply: str, rules: CodeRules = CodeRules()):
    task = get_task("mbpp")
    ex = task.load(limit=1)[0]
    start = time.monotonic()
    grade = task.score_many([ex], [reply], rules=rules)[0]
    return grade, time.monotonic() - start


def test_a_reply_that_makes_the_sanitiser_recurse_is_that_replys_failure():
    reply = "```python\ndef similar_elements(a, b):\n    n = 1\n    return " + "+".join(["n"] * 1000) + "\n```"
    grade, took = _reply_grade(reply)
    assert not grade.correct and "reading the reply failed: RecursionError" in grade.details["base_reason"]
    assert grade.details["base_status"] == "not run" and took < 60


def test_an_800_line_reply_is_cut_off_by_the_sanitisers_time_limit():
    """evalplus's sanitiser tries every span of lines (about cubic: 63 s for these 800 lines on a small
    machine); it runs in a worker with a limit per reply, here 3 s."""
    lines = [f"x{i} = {i}" if i % 2 else f"print(x{i - 1}) if x{i - 1} else None" for i in range(1, 801)]
    reply = "\n".join(lines) + "\ndef similar_elements(a, b):\n    return set(a) & set(b)\n"
    grade, took = _reply_grade(reply, CodeRules(sanitize_s=3.0))
    assert not grade.correct and "took longer than 3 s" in grade.details["base_reason"] and took < 30
    ok, _ = _reply_grade("```python\ndef similar_elements(a, b):\n    return tuple(set(a) & set(b))\n```",
                         CodeRules(sanitize_s=3.0))
    assert ok.correct  # the next reply gets a fresh worker


# ------------------------------------------------------------------------------------------ the parent's memory

_MEASURE = r"""
import json, sys, time
from acceptmoe.evals.codecheck import CodeProblem, grade_many
# 16 inputs whose expected values take 4 MB each: the caps are large (8 MiB per line, about 128 MiB in all)
problem = CodeProblem("test/large", "f", "def f(x):\n    return 'y' * 4_000_000\n", (("base", [[i] for i in range(16)]),))
grade_many([problem], ["def f(x):\n    return 1\n"])  # imports, the sandbox probe, the expected outputs
def hwm():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) // 1024
before, out = hwm(), {}
for name, code in json.loads(sys.argv[1]).items():
    start = time.monotonic()
    verdict = grade_many([problem], [code])[0].sets["base"]
    out[name] = {"passed": verdict.passed, "seconds": round(time.monotonic() - start, 2), "peak_mib": hwm(),
                 "reason": verdict.reason[:90]}
print(json.dumps({"before_mib": before, "after_mib": hwm(), "runs": out}))
"""

WORST = {
    "256 MiB of output in 1 MiB lines": FLOOD + "def f(x):\n    for _ in range(256):\n        _flood(b'x' * ((1 << 20) - 1) + b'\\n')\n    return 1\n",
    "256 MiB of output in one line": FLOOD + "def f(x):\n    for _ in range(256):\n        _flood(b'x' * (1 << 20))\n    return 1\n",
    "a 120 MiB return value": "def f(x):\n    return 'x' * (120 << 20)\n",
    "a return value of 10**5000": "def f(x):\n    return 10 ** 5000\n",
    "an 8 MB line of 4M nested brackets": FLOOD + f"""
def f(x):
    _flood(b"\\n" + {MARK}.encode() + b'{{"called": 0}}\\n' + {MARK}.encode() + b'{{"i": 0, "seconds": 0, "value": '
           + b"[" * 4_000_000 + b"]" * 4_000_000 + b"}}\\n")
    return 1
""",
    "200k colliding set members": FLOOD + f"""
def f(x):
    members = ",".join('{{"i": "%s"}}' % hex((2 ** 61 - 1) * k) for k in range(1, 200_001))
    _flood(b"\\n" + {MARK}.encode() + b'{{"called": 0}}\\n' + {MARK}.encode()
           + ('{{"i": 0, "seconds": 0, "value": {{"s": [%s]}}}}' % members).encode() + b"\\n")
    return 1
""",
}


def test_the_parents_memory_stays_bounded_on_the_worst_programs():
    """Peak resident memory (VmHWM) of a grading process before and after grading the worst programs,
    against a problem whose caps are large (8 MiB per line)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", _MEASURE, json.dumps(WORST)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(report, indent=1))
    assert not any(run["passed"] for run in report["runs"].values())
    assert all(run["seconds"] < 60 for run in report["runs"].values()), report
    assert report["after_mib"] - report["before_mib"] < 400, report


def test_a_kept_reading_worker_killed_while_idle_is_replaced_not_blamed_on_the_next_reply():
    """A serving engine's shutdown kills its process's children (SGLang's `kill_process_tree`), the kept reading
    worker among them: the next reply never reached that worker, so a fresh one reads it."""
    import signal

    from acceptmoe.evals import contained

    fn = "acceptmoe.evals.extract:extract_code"
    first = contained.call_each(fn, [["```python\nx = 1\n```"]])
    assert first[0].ok
    idle = [w for (name, _), w in contained._IDLE.items() if name == fn]
    assert len(idle) == 1
    os.killpg(idle[0].proc.pid, signal.SIGKILL)
    idle[0].proc.wait()
    again = contained.call_each(fn, [["```python\ny = 2\n```"]])
    assert again[0].ok and again[0].value == first[0].value.replace("x = 1", "y = 2"), again
