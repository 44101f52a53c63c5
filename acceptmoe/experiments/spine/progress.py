"""A run's progress: units done / total (per kind of unit), the rate and an ETA, from what the run folder records.
The one implementation behind the running experiment's progress line (`RunProgress`) and
`./reproduce.sh status` (`read_progress`, docs/commands.md).

Files in the run folder (beside `runs`' files):

    progress.json   written as a session starts: {"started", "pid", "kinds": [{"kind", "total", "done"}, ...]} in
                    the run's order, "done" the kind's units already finished then (counted from the run's own
                    logs by its runner)
    units.jsonl     one line per unit finished: {"kind", "time"} (UTC, ISO 8601), appended and flushed as each
                    unit's row (or trace) is saved; rows' bytes are untouched. Under --cluster a line also names
                    the Ray worker that generated the unit ({"worker": "w0"}), and the line gives each
                    worker's count this session
    errors.jsonl    one line per session that ended on an error: {"time", "error", "done", "total"}

    p = RunProgress.start(run.path, {"generation": (total, done)})   # runner, once per session
    p.tick("generation", "tiny tiny-gsm acceptmoe", "w0")            # after each unit's row is saved
    snap = read_progress(run.path)                                     # status: the same numbers, from the files
    line(snap.estimate(now))

Rate: units finished this session over the seconds since it started (model loads included); ETA: the units
left at that rate. A session is one process's run; a resumed run starts a new one.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from .runs import PROGRESS_NAME as PROGRESS
from .runs import write_json

UNITS, ERRORS = "units.jsonl", "errors.jsonl"
PRINT_EVERY_S = 10.0          # the progress line's interval when it is not drawn in place (a log, a pipe)
STAMP_S = 0.001               # the resolution of the times the files record (stamp's milliseconds)


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def stamp(t: dt.datetime) -> str:
    return t.isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class Estimate:
    """Units per kind (done, total), this session's finished units and seconds, and what follows from them."""
    done: dict[str, int]
    total: dict[str, int]
    session_units: int
    session_s: float
    workers: dict[str, int] = dataclasses.field(default_factory=dict)   # worker -> its units this session

    @property
    def units_done(self) -> int:
        return sum(self.done.values())

    @property
    def units_total(self) -> int:
        return sum(self.total.values())

    @property
    def rate(self) -> float | None:
        """Units per second this session, None before its first unit. Seconds below the stamps' resolution count
        as that resolution: units that finished within the millisecond the session started still have a rate."""
        return self.session_units / max(self.session_s, STAMP_S) if self.session_units else None

    @property
    def eta_s(self) -> float | None:
        left = self.units_total - self.units_done
        return None if self.rate is None else max(left, 0) / self.rate


def clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def rate_text(rate: float | None) -> str:
    if rate is None:
        return "rate -"
    return f"{rate:.2f} units/s" if rate >= 1 else f"{rate * 60:.2f} units/min"


def units_text(e: Estimate) -> str:
    """'12/40 units (30%)', with each kind's count where there are several."""
    pct = f" ({100 * e.units_done / e.units_total:.0f}%)" if e.units_total else ""
    kinds = f" [{', '.join(f'{k} {e.done[k]}/{e.total[k]}' for k in e.total)}]" if len(e.total) > 1 else ""
    return f"{e.units_done}/{e.units_total} units{pct}{kinds}"


def line(e: Estimate) -> str:
    """The progress line: units done / total (per kind), the rate and the ETA."""
    eta = "-" if e.eta_s is None else clock(e.eta_s)
    return f"{units_text(e)}, {rate_text(e.rate)}, ETA {eta}{workers_text(e)}"


def workers_text(e: Estimate) -> str:
    """', per worker: w0 5, w1 4' (units each Ray worker generated this session), or nothing in process."""
    return f", per worker: {', '.join(f'{w} {n}' for w, n in sorted(e.workers.items()))}" if e.workers else ""


class RunProgress:
    """A session's progress: records each finished unit in `units.jsonl` and prints the progress line (in place
    on a terminal, else every `PRINT_EVERY_S` seconds and at the last unit)."""

    def __init__(self, folder: Path, kinds: dict[str, tuple[int, int]], show: bool, stream: TextIO):
        self.folder, self.show, self.stream = Path(folder), show, stream
        self.total = {k: t for k, (t, _) in kinds.items()}
        self.done = {k: d for k, (_, d) in kinds.items()}
        self.started, self.session_units, self.printed = now_utc(), 0, 0.0
        self.workers: dict[str, int] = {}
        self.inplace = show and stream.isatty()

    @classmethod
    def start(cls, folder: Path, kinds: dict[str, tuple[int, int]], show: bool = True,
              stream: TextIO | None = None) -> RunProgress:
        """A new session of the run in `folder`; `kinds`: kind -> (units in the whole run, units done now)."""
        p = cls(folder, kinds, show, stream or sys.stderr)
        write_json(p.folder / PROGRESS, {"started": stamp(p.started), "pid": os.getpid(),       # kinds in run order
                                          "kinds": [{"kind": k, "total": t, "done": d} for k, (t, d) in kinds.items()]})
        return p

    def estimate(self, at: dt.datetime | None = None) -> Estimate:
        return Estimate(dict(self.done), dict(self.total), self.session_units,
                        ((at or now_utc()) - self.started).total_seconds(), dict(self.workers))

    def tick(self, kind: str, desc: str = "", worker: str | None = None) -> None:
        """One unit of `kind` finished (its row or trace saved); `worker`: the Ray worker that generated it."""
        t = now_utc()
        entry = {"kind": kind, "time": stamp(t)} | ({"worker": worker} if worker is not None else {})
        with open(self.folder / UNITS, "a") as f:
            f.write(json.dumps(entry) + "\n")
        self.done[kind] = self.done.get(kind, 0) + 1
        if worker is not None:
            self.workers[worker] = self.workers.get(worker, 0) + 1
        self.session_units += 1
        if not self.show:
            return
        last = sum(self.done.values()) >= sum(self.total.values())
        if self.inplace or last or time.monotonic() - self.printed >= PRINT_EVERY_S or self.session_units == 1:
            text = f"{desc}: {line(self.estimate(t))}" if desc else line(self.estimate(t))
            self.stream.write(f"\r{text}\x1b[K" if self.inplace else f"{text}\n")
            if self.inplace and last:
                self.stream.write("\n")
            self.stream.flush()
            self.printed = time.monotonic()

    def reporter(self, kind: str):
        """A `Progress` callback (desc, worker=None) for the runners' functions: each call is one unit of
        `kind`."""
        return lambda desc, worker=None: self.tick(kind, desc, worker)


@dataclass(frozen=True)
class Snapshot:
    """What `progress.json` and `units.jsonl` say: the latest session's start and counts, its finished units."""
    started: dt.datetime
    pid: int | None
    total: dict[str, int]
    done: dict[str, int]
    session_units: int
    last_unit: dt.datetime | None
    workers: dict[str, int] = dataclasses.field(default_factory=dict)

    def estimate(self, at: dt.datetime | None) -> Estimate:
        """At `at` (now, while the run runs); None: at its last unit (a run that has stopped)."""
        end = at or self.last_unit or self.started
        return Estimate(dict(self.done), dict(self.total), self.session_units, (end - self.started).total_seconds(),
                        dict(self.workers))


def read_progress(folder: Path) -> Snapshot | None:
    """The run's progress from its files; None if it records none (an experiment that keeps no progress, or a
    run made before progress was recorded)."""
    try:
        meta = json.loads((Path(folder) / PROGRESS).read_text())
        started = dt.datetime.fromisoformat(meta["started"])
        kinds = {str(v["kind"]): (int(v["total"]), int(v["done"])) for v in meta["kinds"]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    done, units, last, workers = {k: d for k, (_, d) in kinds.items()}, 0, None, {}
    for entry in _lines(Path(folder) / UNITS):
        try:
            t = dt.datetime.fromisoformat(entry["time"])
        except (KeyError, TypeError, ValueError):
            continue
        if t >= started:
            done[entry.get("kind", "?")] = done.get(entry.get("kind", "?"), 0) + 1
            units, last = units + 1, t
            if isinstance(entry.get("worker"), str):
                workers[entry["worker"]] = workers.get(entry["worker"], 0) + 1
    return Snapshot(started, meta.get("pid"), {k: t for k, (t, _) in kinds.items()}, done, units, last, workers)


def record_error(folder: Path, exc: BaseException) -> None:
    """Append the error that ended this session to `errors.jsonl` (with the progress it had reached)."""
    snap = read_progress(folder)
    entry = {"time": stamp(now_utc()), "error": f"{type(exc).__name__}: {exc}".strip()[:2000],
             "done": sum(snap.done.values()) if snap else None, "total": sum(snap.total.values()) if snap else None}
    try:
        with open(Path(folder) / ERRORS, "a") as f:
            f.write(json.dumps(entry) + "\n")
    except OSError:               # the error itself may be the disk's; it still propagates with its traceback
        pass


def last_error(folder: Path) -> dict | None:
    entries = _lines(Path(folder) / ERRORS)
    return entries[-1] if entries else None


def _lines(path: Path) -> list[dict]:
    """The JSON lines of `path` that parse (a torn last line is skipped)."""
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for raw in text.splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out
