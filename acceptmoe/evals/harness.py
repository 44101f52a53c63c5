"""The harness: the trusted program that calls a candidate's entry point on each test input in the
sandbox, and the parent's reading of what it sends back (`SetWatch`), by the parent's own clock and caps.

In the sandbox (`program`): codec's source, evalplus's `evalplus/eval/utils.py` (its `swallow_io`,
`time_limit` and `reliability_guard`, as shipped), then the runner, which does what
`evalplus.eval.unsafe_execute` does: it applies `reliability_guard` (when `guard`), executes the code in
a fresh namespace (`exec(code, {})`) and calls the entry point on each input under `time_limit` and
`swallow_io`, stopping at the first exception. Before the guard it imports the modules the code imports
that evalplus's own process has loaded by then (`preloads`: there they are already in `sys.modules`, and
some, numpy among them, cannot be imported once `open` is gone). Where unsafe_execute compares, the runner
reports: before
the code runs, the program's own stdout and stderr file descriptors are pointed at /dev/null and the
result lines go to a saved descriptor; it reports "start", then "loaded" (or the exception's type name),
then per input "called" as soon as the call returns and then its value (`codec.encode_result` under that
input's byte cap), or the exception's type name, then "done".

In the parent (`SetWatch`, a `pump.Watch`): the result lines are read under a cap per line and in all
(`readback.LineReader`), parsed with bounded depth and decoding (`readback`; named subclasses into the
run's own `codec.Names`, so one program's values never change how another's decode), and checked against
the protocol (start, loaded, then per input "called" and its value or an error, inputs 0, 1, ... once
each, done). One clock covers all of the program's work, calling, encoding and finalisers alike, and
every deadline runs from a line only the harness writes before the code runs ("start") or from a line
that, sent early, only brings the next deadline closer; so a program that writes result lines of its own
gains no time. Input i's value arrives within `limits_s[i] + grace(limits_s[i]) + encode_s[i]` of the
line before it (`encode_limits`: from the canonical value's own encoding time; the harness's own
`time_limit` stops an honest call at `limits_s[i]`, as in EvalPlus, and its encoding at `encode_s[i]` +
GRACE_S; the grace covers a busy parent's delays in reading), the whole run within `run_s` plus every
`encode_s[i]` of the "start" line, and the program ends within EXIT_S of "done" (the value's finaliser runs
before its line is sent, the rest's in that window), else the set fails and the program is killed. A
program that ignores SIGALRM is stopped all the same. Each value goes to `judge(i, value)` as it arrives
and is then dropped (unless `keep`), so the parent holds one value at a time; the first failure stops the
program (EvalPlus's fast_check). Anything that goes wrong while reading is that set's failure, with its
reason.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from acceptmoe.evals import codec, readback
from acceptmoe.evals.pump import Stop, Watch

RESULT_MARK = "@@acceptmoe-result "
GRACE_S = 1.0          # beyond an input's limit (at least; half the limit when that is more), for the
                       # parent's own delays in reading
LINE_OVERHEAD = 512    # bytes of a result line besides its value

_RUNNER = r'''
import os as _os, sys as _sys, time as _time
def _name(exc):
    try:
        return str(type(exc).__name__)[:100]
    except BaseException:
        return "?"
def _run(code, entry_point, inputs, limits, encode_limits, caps, guard, preload):
    out = _os.dup(1)
    null = _os.open(_os.devnull, _os.O_WRONLY)
    _os.dup2(null, 1)
    _os.dup2(null, 2)
    write = _os.write
    def emit(record):
        write(out, ("\n%s%s\n" % (_MARK, json.dumps(record, separators=(",", ":"), allow_nan=False))).encode())
    emit({"start": 1})
    for name in preload:  # what the process evalplus runs code in has loaded before its guard
        try:
            __import__(name)
        except BaseException:
            pass
    if guard:
        _evalplus.reliability_guard(maximum_memory_bytes=None)  # the sandbox sets the memory limits
    exec_globals = {}
    try:
        with _evalplus.swallow_io():
            exec(code, exec_globals)
            fn = exec_globals[entry_point]
    except BaseException as exc:
        emit({"load_error": _name(exc)})
        return
    emit({"loaded": 1})
    for i, inp in enumerate(inputs):
        start = _time.perf_counter()
        try:
            if limits is None:
                with _evalplus.swallow_io():
                    value = fn(*inp)
            else:
                with _evalplus.time_limit(limits[i]):
                    with _evalplus.swallow_io():
                        value = fn(*inp)
        except BaseException as exc:
            emit({"i": i, "error": _name(exc)})
            return
        seconds = _time.perf_counter() - start
        emit({"called": i})
        try:
            if encode_limits is None:
                encoded = encode_result(value, caps[i])
            else:
                with _evalplus.time_limit(encode_limits[i]):
                    encoded = encode_result(value, caps[i])
            del value  # its finaliser runs now, on this input's clock
        except BaseException as exc:
            emit({"i": i, "error": "encoding its value raised " + _name(exc)})
            return
        emit({"i": i, "value": encoded, "seconds": seconds})
    emit({"done": len(inputs)})
    _os.dup2(out, 1)
'''


def _evalplus_utils() -> str:
    import evalplus.eval.utils as utils
    return Path(utils.__file__).read_text()


def harness_source() -> str:
    """Everything of the program but its code and inputs (part of the expected outputs' cache key)."""
    utils = repr(_evalplus_utils())
    return (f"{Path(codec.__file__).read_text()}\n_MARK = {RESULT_MARK!r}\n"
            f"import types as _types\n_evalplus = _types.ModuleType('evalplus_eval_utils')\n"
            f"exec(compile({utils}, 'evalplus/eval/utils.py', 'exec'), _evalplus.__dict__)\n{_RUNNER}\n")


_IMPORT = re.compile(r"^[ \t]*import[ \t]+([^#\n]+)|^[ \t]*from[ \t]+([\w.]+)[ \t]+import\b", re.M)


def imported(code: str) -> list[str]:
    """The modules `code`'s import statements name (and their parent packages), read line by line."""
    names = []
    for plain, source in _IMPORT.findall(code):
        for part in ([source] if source else plain.split(",")):
            name = part.strip().split(" ")[0].rstrip("\\").strip()
            pieces = name.split(".")
            names += [".".join(pieces[:i]) for i in range(1, len(pieces) + 1) if all(p.isidentifier() for p in pieces)]
    return list(dict.fromkeys(names))


@lru_cache(maxsize=1)
def evalplus_loaded() -> frozenset[str]:
    """The modules loaded in a process that has imported `evalplus.evaluate`, as the processes evalplus runs
    code in have (they are forked from it): there `import numpy` after `reliability_guard` finds numpy
    loaded, while importing it afresh needs the `open` the guard removes."""
    done = subprocess.run([sys.executable, "-I", "-c", "import json, sys\nimport evalplus.evaluate\n"
                           "print(json.dumps(sorted(sys.modules)))"], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"evalplus.evaluate could not be imported: {done.stderr[-500:]}")
    return frozenset(json.loads(done.stdout))


def preloads(code: str) -> list[str]:
    """The modules `code` imports that evalplus's process has loaded before its guard."""
    loaded = evalplus_loaded()
    return [name for name in imported(code) if name in loaded]


def program(code: str, entry_point: str, inputs: list, limits_s: list[float] | None, caps: list[int],
            guard: bool, preload: list[str] = (), encode_s: list[float] | None = None) -> str:
    """The sandboxed program: the harness, then the call on the embedded code and inputs. `limits_s` None:
    no per-input time limit (the canonical solution, as evalplus's trusted_exec). `encode_s`: each value's
    encoding limit (`encode_limits`; None: none). `preload`: modules imported before the guard
    (`preloads`)."""
    limits = None if limits_s is None else [float(s) for s in limits_s]
    encode = None if encode_s is None else [float(s) + GRACE_S for s in encode_s]  # the parent's clock is the limit
    args = ", ".join([repr(code), repr(entry_point), f"decode(json.loads({codec.dumps(inputs)!r}))", repr(limits),
                      repr(encode), repr([int(c) for c in caps]), repr(bool(guard)), repr(list(preload))])
    return f"{harness_source()}_run({args})\n"


ENCODE_MIN_S = 0.5     # for encoding one value, at least (beyond ENCODE_FACTOR x the canonical value's time)
ENCODE_FACTOR = 4.0    # as EvalPlus's DEFAULT_GT_TIME_LIMIT_FACTOR for calls
EXIT_S = 5.0           # from "done" to the program's exit (its finalisers run there; a loaded machine's delays)


def grace(limit_s: float) -> float:
    """Seconds beyond an input's limit before the parent stops the program (see the module docstring)."""
    return max(GRACE_S, 0.5 * limit_s)


def encode_limits(reference_s: list[float]) -> list[float]:
    """Each value's encoding limit: ENCODE_MIN_S + ENCODE_FACTOR x the time the canonical value took from
    "called" to its value line (a digest of a large value takes seconds; a small value microseconds)."""
    return [ENCODE_MIN_S + ENCODE_FACTOR * t for t in reference_s]


def allowance(encode_s: list[float] | None) -> float:
    """Seconds a whole run may take beyond its run limit: every value's encoding limit and EXIT_S (the
    fixed allowance of the sandbox's wall-clock deadline on the program)."""
    return sum(encode_s or ()) + EXIT_S


def _text(value) -> str:
    """A name the harness sent, shown as it is (at most 100 characters)."""
    return value[:100] if isinstance(value, str) else readback.brief(value, 100)


class SetWatch(Watch):
    """The parent's reading of one harness run (see the module docstring). After the run: `passed()`,
    `failure` (why not), `returned` (inputs that returned), `values`/`seconds` when `keep`."""

    def __init__(self, n_inputs: int, limits_s: list[float] | None, run_s: float, caps: list[int],
                 judge: Callable[[int, object], str | None] | None = None, keep: bool = False,
                 total_cap: int | None = None, encode_s: list[float] | None = None,
                 names: codec.Names | None = None):
        line_cap = max(caps, default=0) + LINE_OVERHEAD
        self.reader = readback.LineReader(line_cap, total_cap or sum(caps) + LINE_OVERHEAD * (n_inputs + 8))
        self.n, self.limits_s, self.run_s, self.judge, self.keep = n_inputs, limits_s, run_s, judge, keep
        self.encode_s = encode_s
        self.names = codec.Names() if names is None else names  # this run's own named subclasses
        self.caps = caps
        self.values: list = []
        self.seconds: list[float] = []
        self.encode_seconds: list[float] = []  # from "called" to the value line, per input (when `keep`)
        self.phase = "starting"
        self.started_at = self.last_at = 0.0
        self.returned = 0
        self.encoding_since: float | None = None  # arrival of the current input's "called"
        self.done_at: float | None = None
        self.done = False
        self.failure: str | None = None
        self.timeout = False
        self._mark = RESULT_MARK.encode()

    def passed(self) -> bool:
        return self.done and self.failure is None and self.returned == self.n

    def _fail(self, reason: str, timeout: bool = False) -> None:
        if self.failure is None:
            self.failure, self.timeout = reason, timeout

    def feed(self, data: bytes, now: float) -> None:
        if self.failure is not None:
            return
        try:
            for line in self.reader.feed(data):
                if line.startswith(self._mark):
                    self._record(readback.parse_json(line[len(self._mark):]), now)
                if self.failure is not None:
                    return
            if self.reader.overflow:
                self._fail(self.reader.overflow)
        except readback.Unreadable as exc:
            self._fail(f"malformed result line: {exc}")
        except Exception as exc:  # whatever the reading hit is this set's failure, never the grader's
            self._fail(f"the grader could not read a result ({type(exc).__name__}: {readback.brief(str(exc), 160)})")

    def _clock(self, now: float) -> tuple[float, str] | None:
        """(the next deadline, what passing it means), or None while no limit runs."""
        if self.phase == "starting":
            return None
        if self.done_at is not None:
            return self.done_at + EXIT_S, f"the program did not end within {EXIT_S:.0f} s of its last result"
        run_end = self.started_at + self.run_s + sum(self.encode_s or ())
        if self.phase == "loaded" and self.limits_s is not None and self.returned < self.n:
            limit, encode = self.limits_s[self.returned], (self.encode_s or [0.0] * self.n)[self.returned]
            end = self.last_at + limit + grace(limit) + encode
            if end < run_end:
                return end, (f"input {self.returned} exceeded its time limit of {limit:.2f} s and "
                             f"{encode:.2f} s to encode its value (measured by the grader)")
        return run_end, f"the run exceeded its time limit of {self.run_s:.1f} s (measured by the grader)"

    def _late(self, now: float) -> str | None:
        clock = self._clock(now)
        return clock[1] if clock is not None and now > clock[0] else None

    def _record(self, record, now: float) -> None:
        if not isinstance(record, dict):
            return self._fail("malformed result line")
        if self.done:
            return self._fail("a result line after the last one")
        late = self._late(now)
        if late:
            return self._fail(late, timeout=True)
        if self.phase == "starting":
            if record != {"start": 1}:
                return self._fail("the harness did not start")
            self.phase, self.started_at, self.last_at = "started", now, now
        elif self.phase == "started":
            if "load_error" in record:
                return self._fail(f"loading the code raised {_text(record['load_error'])}")
            if record != {"loaded": 1}:
                return self._fail("unexpected result line while loading")
            self.phase, self.last_at = "loaded", now
        elif "done" in record:
            if record != {"done": self.n} or self.returned != self.n or self.encoding_since is not None:
                return self._fail("result lines do not cover every input")
            self.done, self.done_at = True, now
        elif "called" in record:
            if record != {"called": self.returned} or self.encoding_since is not None or self.returned >= self.n:
                return self._fail("result lines out of order")
            self.encoding_since = now
        elif record.get("i") != self.returned or type(record.get("i")) is not int:
            self._fail("result lines out of order")
        elif "error" in record:
            self._fail(f"input {self.returned} raised {_text(record['error'])}")
        elif "value" in record and isinstance(record.get("seconds"), (int, float)) and self.encoding_since is not None:
            encoding_s, self.encoding_since = now - self.encoding_since, None
            value = readback.decode_value(record["value"], self.names)
            if self.judge is not None:
                reason = self.judge(self.returned, value)
                if reason:
                    return self._fail(reason)
            if self.keep:
                self.values.append(value)
                self.seconds.append(float(record["seconds"]))
                self.encode_seconds.append(encoding_s)
            self.returned += 1
            self.last_at = now
        else:
            self._fail("malformed result line")

    def deadline(self) -> float | None:
        if self.failure is not None:
            return None
        clock = self._clock(0.0)
        return None if clock is None else clock[0] + 0.001

    def stop(self, now: float) -> Stop | None:
        if self.failure is None:
            late = self._late(now)
            if late:
                self._fail(late, timeout=True)
        return None if self.failure is None else Stop(self.failure, self.timeout)
