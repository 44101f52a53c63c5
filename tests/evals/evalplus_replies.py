"""Replies for the EvalPlus parity suites, and EvalPlus's own verdicts on them.

Replies built from the shipped canonical solutions: each one a shape a model writes (prose around a fenced
block, a `__main__` block, helpers, two code blocks, prints, threads, an unused numpy import, a bare body)
or a change of the returned value (numpy and stdlib number types, subclasses and namedtuples, values near
the float tolerance, wrong only on inputs larger than the base ones, mutated inputs), plus replies that are
too slow or use a builtin EvalPlus disables.

`evalplus_verdicts` grades `Case`s by `evalplus.evaluate` itself, offline on the repository's data: a
completion (`Case.completion`) as EvalPlus grades a base model's (`{"completion": ...}`, which evaluate
runs after the prompt), any other reply as evalplus.codegen reads a chat model's
(`evalplus.sanitize.sanitize(reply)`, then evaluate). `graded_on_a_loaded_machine` pairs those verdicts
with our call's (`Task.score_many`, default rules)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

PROBLEMS = {
    "humaneval": ["HumanEval/0", "HumanEval/2", "HumanEval/4", "HumanEval/12", "HumanEval/13", "HumanEval/22",
                  "HumanEval/32", "HumanEval/53", "HumanEval/107", "HumanEval/148"],
    "mbpp": ["Mbpp/2", "Mbpp/3", "Mbpp/17", "Mbpp/124", "Mbpp/137", "Mbpp/558", "Mbpp/581", "Mbpp/737"],
}
SLOW = {"HumanEval/53", "Mbpp/17"}   # also graded as too slow and as opening a file
COMPLETIONS = {"the body alone"}     # replies that are a base model's completion of the prompt

HELPERS = '''
def _wrong(out):
    if isinstance(out, bool):
        return not out
    if isinstance(out, (int, float)):
        return out + 1
    if isinstance(out, str):
        return out + "x"
    if isinstance(out, (list, tuple)):
        return type(out)(list(out) + [None])
    return 0 if out is None else None


def _typed(out):
    import collections
    import numpy as np
    if type(out) is bool:
        return np.bool_(out)
    if type(out) is int and abs(out) < 2 ** 62:
        return np.int64(out)
    if type(out) is float:
        return np.float64(out)
    if type(out) is str:
        return type("Text", (str,), {})(out)
    if type(out) is tuple:
        return collections.namedtuple("Result", [f"f{i}" for i in range(len(out))])(*out)
    return out


def _number(out):
    from decimal import Decimal
    from fractions import Fraction
    if type(out) is float:
        return Fraction(out)
    if type(out) is int:
        return Decimal(out)
    return out


def _near(out, delta):
    if type(out) is float:
        return out + delta
    if type(out) in (list, tuple) and out and all(type(v) is float for v in out):
        return type(out)(v + delta for v in out)
    return out
'''


def _fence(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def _wrapped(full: str, ep: str, body: str, expr: str = "out", helpers: bool = False) -> str:
    ref = full.replace(f"def {ep}(", f"def _ref_{ep}(", 1)
    lines = [f"    {line}" for line in body.splitlines() if line.strip()]
    return (f"{ref.rstrip()}\n{HELPERS if helpers else ''}\n\ndef {ep}(*args):\n    out = _ref_{ep}(*args)\n"
            + "".join(f"{line}\n" for line in lines) + f"    return {expr}\n")


def replies(task_id: str, full: str, ep: str, body_only: str | None, base_repr_len: int, sample) -> dict[str, str]:
    """name -> reply for one problem: `full` is the canonical program defining `ep`, `sample` one of its
    return values (the changes of a value apply to the types they change)."""
    out = {
        "prose around a fenced block": f"Here is a solution.\n\n{_fence(full)}\n\nIt handles the edge cases.",
        "a __main__ block": _fence(f"{full.rstrip()}\n\n\nif __name__ == '__main__':\n    print('demo')\n"
                                   f"    import unittest\n    unittest.main()\n"),
        "a helper": _fence(_wrapped(full, ep, "")),
        "wrong on inputs larger than the base ones":
            _fence(_wrapped(full, ep, f"if len(repr(args)) > {base_repr_len}:\n    return _wrong(out)", helpers=True)),
        "prints and writes to stderr": _fence(_wrapped(full, ep, "import sys\nprint('debug', repr(out)[:50])\n"
                                                                 "sys.stderr.write('log\\n')")),
        "a short wrong block, then the right one":
            f"First try:\n{_fence(f'def {ep}(*args):' + chr(10) + '    return None')}\nBetter:\n{_fence(full)}",
        "a long wrong block, then a short one": f"{_fence(_wrapped(full, ep, '', '_wrong(out)', helpers=True))}\n"
                                                f"Or simply:\n{_fence(f'def {ep}(*args):' + chr(10) + '    return None')}",
        "an unused numpy import": _fence(f"import numpy as np\n{full}"),
        "computed in a thread": _fence(_wrapped(full, ep, "import threading\nbox = []\n"
                                                          f"worker = threading.Thread(target=lambda: box.append(_ref_{ep}(*args)))\n"
                                                          "worker.start()\nworker.join()", "box[0]")),
        "numpy scalars, subclasses, namedtuples": _fence(_wrapped(full, ep, "", "_typed(out)", helpers=True)),
        "list arguments reversed after the call": _fence(_wrapped(full, ep, "for a in args:\n    if type(a) is list:\n"
                                                                              "        a.reverse()")),
    }
    if type(sample) in (int, float):
        out["Fraction and Decimal"] = _fence(_wrapped(full, ep, "", "_number(out)", helpers=True))
    if type(sample) is float or (type(sample) in (list, tuple) and sample and all(type(v) is float for v in sample)):
        out["floats 5e-7 off"] = _fence(_wrapped(full, ep, "", "_near(out, 5e-7)", helpers=True))
        out["floats 1e-4 off"] = _fence(_wrapped(full, ep, "", "_near(out, 1e-4)", helpers=True))
    if body_only is not None:
        out["the body alone"] = body_only
    if task_id in SLOW:
        out["too slow"] = _fence(_wrapped(full, ep, "import time\ntime.sleep(3)"))
        out["opens a file"] = _fence(_wrapped(full, ep, "open('/dev/null').close()"))
    return out


# ---------------------------------------------------------------------------------------------- evalplus.evaluate

class Case(NamedTuple):
    """One reply to one problem; `completion`: a base model's completion of the prompt (else a chat reply or
    a whole solution)."""

    dataset: str
    example: dict
    name: str
    reply: str
    completion: bool = False


EVALUATE = r"""
import os
import sys
from evalplus.evaluate import evaluate
evaluate(dataset=sys.argv[1], samples=sys.argv[2], parallel=int(sys.argv[3]), i_just_wanna_run=True)
sys.stdout.flush()
os._exit(0)  # the results are written; evaluate's stall-warning thread would keep the process up to 20 s more
"""


def _problem_lines(dataset: str, ids: set[str]) -> list[str]:
    """The lines of the shipped HumanEval+ or MBPP+ file (checksum-verified) that hold the problems `ids`."""
    from acceptmoe.evals.data import FILES, data_path, read_text, verify_checksum
    path = data_path(f"{dataset}-plus")
    verify_checksum(path, FILES[f"{dataset}-plus"].sha256)
    return [line for line in read_text(path).splitlines() if line.strip() and json.loads(line)["task_id"] in ids]


def evalplus_sample(case: Case) -> dict:
    """A sample as EvalPlus is given it: a completion as is (evaluate grades prompt + completion), any other
    reply sanitised as evalplus.codegen sanitises a chat model's."""
    from evalplus.sanitize import sanitize
    if case.completion:
        return {"task_id": case.example["id"], "completion": case.reply}
    return {"task_id": case.example["id"], "solution": sanitize(case.reply, case.example["entry_point"])}


def evalplus_verdicts(dataset: str, cases: list[Case], folder: Path, parallel: int = 2) -> list[tuple[bool, bool]]:
    """(base, plus) of each case by `evalplus.evaluate`, in a process of its own, offline on a data file
    holding just the cases' problems."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / f"{dataset}.jsonl"
    data.write_text("\n".join(_problem_lines(dataset, {c.example["id"] for c in cases})) + "\n")
    samples = folder / f"{dataset}-samples.jsonl"
    samples.write_text("".join(json.dumps(evalplus_sample(c)) + "\n" for c in cases))
    env = {**os.environ, "HUMANEVAL_OVERRIDE_PATH": str(data), "MBPP_OVERRIDE_PATH": str(data),
           "XDG_CACHE_HOME": str(folder / "cache")}
    done = subprocess.run([sys.executable, "-c", EVALUATE, dataset, str(samples), str(parallel)], capture_output=True,
                          text=True, env=env, timeout=1200, cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((folder / f"{dataset}-samples_eval_results.json").read_text())["eval"]
    seen: dict[str, int] = {}
    verdicts = []
    for case in cases:  # evalplus keeps each task's samples in the order they were read
        tid = case.example["id"]
        row = results[tid][seen.setdefault(tid, 0)]
        seen[tid] += 1
        base = row["base_status"] == "pass"
        verdicts.append((base, base and row["plus_status"] == "pass"))
    return verdicts


def _both(dataset: str, cases: list[Case], folder: Path, workers: int) -> tuple[list, list]:
    """Our grades and EvalPlus's verdicts of `cases`, each grader with `workers` processes."""
    from acceptmoe.evals.tasks import get_task
    ours = get_task(dataset).score_many([c.example for c in cases], [c.reply for c in cases], workers=workers)
    return ours, evalplus_verdicts(dataset, cases, folder, parallel=workers)


def graded_on_a_loaded_machine(dataset: str, cases: list[Case], folder: Path) -> tuple[list, list]:
    """`_both` with 2 workers, where a reply the two graders disagree on is graded once more by both, alone (one
    worker each): on a machine whose cores other jobs share, a wall-clock limit of either grader can pass while
    the program waits for a core. The second grading stands for those replies; a disagreement that repeats
    alone is a real one. find_zero's replies are not graded again (evalplus 0.3.1 fails them all)."""
    ours, theirs = _both(dataset, cases, folder, workers=2)
    again = [i for i, (grade, their) in enumerate(zip(ours, theirs, strict=False))
             if (grade.correct, grade.details["plus"]) != their and cases[i].example["entry_point"] != "find_zero"]
    if again:
        print(f"graded again alone after a disagreement: {[(cases[i].example['id'], cases[i].name) for i in again]}")
        ours_again, theirs_again = _both(dataset, [cases[i] for i in again], folder / "again", workers=1)
        for i, grade, their in zip(again, ours_again, theirs_again, strict=False):
            ours[i], theirs[i] = grade, their
    return ours, theirs
