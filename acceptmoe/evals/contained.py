"""Trusted code on untrusted text, outside the parent: one limited worker process per batch of calls.

Reading a reply (its Harmony final channel, its code block, evalplus's sanitiser) is trusted code, but
its cost is set by the text: evalplus's sanitiser tries every span of lines (about cubic in the lines),
recursion in `ast.parse` or tree-sitter can exhaust the stack, and a regex can be slow on crafted text.
`call_each("module:function", [args, ...], limits)` runs `function(*args)` for each argument list in a
worker interpreter (`python -I`, this package first on its path, an empty environment, its own session,
RLIMIT_AS and no core files), one call at a time with a wall-clock limit per call measured here. A call
that raises, runs past its limit, dies (a crash, the memory limit) or answers more than
`Limits.answer_bytes` gives that call's `Outcome` an error, never the caller's; after a time-out or a
death the worker is killed with its session and a fresh one takes the remaining calls; a healthy one
is kept for the next batch, and a kept one found gone before a call reached it (killed from outside while
idle) is replaced for that call, which never ran. Arguments and results are JSON. Only functions of `acceptmoe.evals` can be
named.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the folder holding the acceptmoe package
ALLOWED = "acceptmoe.evals."


@dataclass(frozen=True)
class Limits:
    call_s: float = 60.0          # wall-clock seconds per call
    start_s: float = 120.0        # for the worker to import the function's module
    memory_mb: int = 4096         # RLIMIT_AS of the worker
    answer_bytes: int = 64 << 20  # the longest answer line read back


@dataclass(frozen=True)
class Outcome:
    value: object = None
    error: str | None = None      # None when the call returned `value`

    @property
    def ok(self) -> bool:
        return self.error is None


_WORKER = r'''
import importlib, json, os, resource, sys
sys.path.insert(0, sys.argv[1])
memory = int(sys.argv[3]) << 20
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
module, _, name = sys.argv[2].partition(":")
fn = getattr(importlib.import_module(module), name)
answer = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1)
answer.write('{"ready": 1}\n')
answer.flush()
for line in sys.stdin:
    try:
        out = {"value": fn(*json.loads(line))}
    except BaseException as exc:
        out = {"error": "%s: %s" % (type(exc).__name__, str(exc)[:300])}
    try:
        text = json.dumps(out)
    except BaseException as exc:
        text = json.dumps({"error": "the answer is not JSON (%s)" % type(exc).__name__})
    answer.write(text + "\n")
    answer.flush()
'''


class _Worker:
    def __init__(self, function: str, limits: Limits):
        self.limits = limits
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "HOME": os.environ.get("HOME", "/")}
        self.proc = subprocess.Popen([sys.executable, "-I", "-c", _WORKER, str(ROOT), function, str(limits.memory_mb)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env, start_new_session=True)
        self.buffer = b""
        self.broken = False
        ready, error = self._answer(limits.start_s)
        if error is not None or ready != {"ready": 1}:
            self.close()
            raise RuntimeError(f"the worker for {function} did not start ({error or ready})")

    def call(self, args: list) -> Outcome:
        """The call's outcome; `_Unsent` if the worker was gone before the call reached it (not the call's doing:
        an idle worker can be killed from outside, e.g. by a serving engine's shutdown killing its process's
        children)."""
        try:
            self.proc.stdin.write(json.dumps(args).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError as exc:
            self.broken = True
            raise _Unsent(str(exc)) from None
        answer, error = self._answer(self.limits.call_s)
        if error is None and not (isinstance(answer, dict) and set(answer) in ({"value"}, {"error"})):
            error = "the worker's answer is malformed"
        if error is not None:
            self.broken = True
            return Outcome(error=error)
        return Outcome(value=answer.get("value"), error=answer.get("error"))

    def _answer(self, timeout_s: float):
        """(parsed answer line, None) or (None, why there is none)."""
        end = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                left = end - time.monotonic()
                if left <= 0:
                    return None, f"took longer than {timeout_s:g} s"
                if not sel.select(left):
                    continue
                data = os.read(fd, 1 << 16)
                if not data:
                    self.proc.wait()
                    return None, f"the worker died ({_death(self.proc.returncode)})"
                self.buffer += data
                if len(self.buffer) > self.limits.answer_bytes:
                    return None, f"the answer is longer than {self.limits.answer_bytes} bytes"
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            return json.loads(line), None
        except ValueError:
            return None, "the worker's answer is not JSON"

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()


class _Unsent(Exception):
    """The worker was gone before a call was written to it."""


def _death(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


_IDLE: dict[tuple[str, Limits], _Worker] = {}   # a healthy worker kept for the next batch of the same calls
_LOCK = threading.Lock()


def _close_idle() -> None:
    with _LOCK:
        while _IDLE:
            _IDLE.popitem()[1].close()


atexit.register(_close_idle)


def call_each(function: str, calls: list[list], limits: Limits = Limits()) -> list[Outcome]:
    """`function(*args)` for each `args` in `calls`, in a limited worker (see the module docstring). A
    worker that ends a batch healthy is kept for the next batch of the same function and limits."""
    if not function.startswith(ALLOWED) or ":" not in function:
        raise ValueError(f"only functions of {ALLOWED.rstrip('.')} run in the worker, got {function!r}")
    outcomes: list[Outcome] = []
    with _LOCK:
        worker = _IDLE.pop((function, limits), None)
    try:
        for args in calls:
            if worker is None:
                worker = _Worker(function, limits)
            try:
                outcome = worker.call(args)
            except _Unsent:    # the call never ran: a fresh worker takes it; a fresh one that cannot is an error
                worker.close()
                worker = _Worker(function, limits)
                try:
                    outcome = worker.call(args)
                except _Unsent as exc:
                    raise RuntimeError(f"a fresh worker for {function} died before it could take a call "
                                       f"({exc})") from None
            outcomes.append(outcome)
            if worker.broken:  # timed out, died, or answered too much: a fresh worker for the rest
                worker.close()
                worker = None
    except BaseException:
        if worker is not None:
            worker.close()
        raise
    if worker is not None:
        with _LOCK:
            old = _IDLE.pop((function, limits), None)
            _IDLE[(function, limits)] = worker
        if old is not None:
            old.close()
    return outcomes
