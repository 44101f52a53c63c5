"""Chat replies for the EvalPlus parity suite, built from the shipped canonical solutions: each one a shape a
model writes (prose around a fenced block, a `__main__` block, helpers, two code blocks, prints, threads,
an unused numpy import, a bare body) or a change of the returned value (numpy and stdlib number types,
subclasses and namedtuples, values near the float tolerance, wrong only on inputs larger than the base
ones, mutated inputs), plus replies that are too slow or use a builtin EvalPlus disables."""
from __future__ import annotations

PROBLEMS = {
    "humaneval": ["HumanEval/0", "HumanEval/2", "HumanEval/4", "HumanEval/12", "HumanEval/13", "HumanEval/22",
                  "HumanEval/32", "HumanEval/53", "HumanEval/107", "HumanEval/148"],
    "mbpp": ["Mbpp/2", "Mbpp/3", "Mbpp/17", "Mbpp/124", "Mbpp/137", "Mbpp/558", "Mbpp/581", "Mbpp/737"],
}
SLOW = {"HumanEval/53", "Mbpp/17"}   # also graded as too slow and as opening a file

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
