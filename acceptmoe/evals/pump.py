"""Feeding a sandboxed program its stdin and reading its stdout as it comes, under the parent's clock.

`pump(proc, payload, timeout_s, keep, watch)` writes the payload, reads stdout in chunks and keeps at most
`keep` bytes of its head and of its tail (the rest is counted and dropped, so what a program writes never
grows the parent), and waits for the exit until the wall-clock timeout. A `Watch` sees every chunk with
the time it arrived and may stop the program: for a reason of its own (`Watch.stop`, e.g. a result line
that came too late or more output than it accepts) or because a deadline of its own passed
(`Watch.deadline`), also after stdout closed, while the program has not exited. The caller kills the
program's process group when `Pumped.timed_out` or `Pumped.stopped` is set.
"""
from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import time
from dataclasses import dataclass
from typing import NamedTuple

CHUNK = 1 << 16


class Stop(NamedTuple):
    """Why a watch stops a program; `timeout`: the reason is a time limit."""
    reason: str
    timeout: bool = False


class Watch:
    """Looks at a program's stdout while it runs (override what you need)."""

    def feed(self, data: bytes, now: float) -> None:
        """`data` arrived at monotonic time `now`."""

    def deadline(self) -> float | None:
        """Monotonic time by which `stop` must be asked again (None: no deadline of the watch's own)."""
        return None

    def stop(self, now: float) -> Stop | None:
        """Why the program must stop now (None: let it run)."""
        return None


@dataclass
class Pumped:
    head: bytes
    tail: bytes
    total: int          # bytes the program wrote to stdout
    timed_out: bool     # the wall-clock timeout passed
    stopped: Stop | None  # why the watch stopped the program


def pump(proc: subprocess.Popen, payload: bytes, timeout_s: float, keep: int, watch: Watch | None = None) -> Pumped:
    """Run `proc` (stdin and stdout pipes) to its end or until a limit; see the module docstring."""
    end = time.monotonic() + timeout_s
    head, tail, total = bytearray(), bytearray(), 0
    stdin, stdout = proc.stdin, proc.stdout
    pending = memoryview(payload)
    sel = selectors.DefaultSelector()
    os.set_blocking(stdin.fileno(), False)
    sel.register(stdout, selectors.EVENT_READ)
    sel.register(stdin, selectors.EVENT_WRITE)
    writing, reading = True, True
    timed_out, stopped = False, None
    try:
        while reading:
            now = time.monotonic()
            if watch is not None:
                stopped = watch.stop(now)
                if stopped is not None:
                    break
            if now >= end:
                timed_out = True
                break
            until = end if watch is None else min(end, watch.deadline() or end)
            for key, _ in sel.select(max(0.0, until - now)):
                if key.fileobj is stdin:
                    try:
                        sent = os.write(stdin.fileno(), pending[:CHUNK])
                    except (BrokenPipeError, BlockingIOError) as exc:
                        sent = 0 if isinstance(exc, BlockingIOError) else len(pending)
                    pending = pending[sent:]
                    if not len(pending):
                        sel.unregister(stdin)
                        stdin.close()
                        writing = False
                    continue
                data = os.read(stdout.fileno(), CHUNK)
                if not data:
                    reading = False
                    break
                total += len(data)
                if len(head) < keep:
                    head += data[: keep - len(head)]
                tail += data
                if len(tail) > 2 * keep + CHUNK:
                    del tail[: len(tail) - keep]
                if watch is not None:
                    watch.feed(data, time.monotonic())
        while not (timed_out or stopped):  # stdout closed: wait for the exit, under the watch's deadline too
            until = end if watch is None else min(end, watch.deadline() or end)
            try:
                proc.wait(timeout=max(0.0, until - time.monotonic()))
                break
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                stopped = watch.stop(now) if watch is not None else None
                timed_out = stopped is None and now >= end
    finally:
        sel.close()
        if writing:
            with contextlib.suppress(OSError):
                stdin.close()
    return Pumped(bytes(head), bytes(tail[-keep:]) if keep else b"", total, timed_out, stopped)
