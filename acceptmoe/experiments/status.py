"""`./reproduce.sh status RUN_DIR`: a run's state read from its folder, while it runs or after (no model runs,
nothing written).

    experiment and preset          config.json
    state                          running (a process holds the folder's lock: `runs.lock_holder`), finished
                                   (summary.json), or stopped (no holder: interrupted or failed; resume it)
    units done / total, per kind   progress.json and units.jsonl (`spine.progress`, the running line's numbers)
    rows written                   samples.jsonl's lines
    rate and ETA                   this session's units over its seconds (`spine.progress.Estimate`)
    workers                        under --cluster: each Ray worker's units this session (units.jsonl)
    last error                     errors.jsonl (`spine.progress.record_error`)

A folder that is not a run is one `error:` line (exit code 2). docs/commands.md shows the output.
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from acceptmoe.commands import command, parser

from .spine.progress import clock, last_error, now_utc, rate_text, read_progress, units_text
from .spine.runs import lock_holder, recorded_experiment


def rows_written(run: Path) -> int:
    """Complete lines of samples.jsonl (read only: a running run's torn last line is not counted)."""
    try:
        return (run / "samples.jsonl").read_bytes().count(b"\n")
    except OSError:
        return 0


def preset_of(run: Path) -> str:
    try:
        return str(json.loads((run / "config.json").read_text()).get("preset", "?"))
    except (OSError, ValueError, AttributeError):
        return "?"


def state_line(run: Path, experiment: str) -> tuple[str, bool]:
    """The run's state in words, and whether it is running now."""
    held, pid = lock_holder(run)
    if held:
        return f"running (pid {pid} holds the run's lock)", True
    if (run / "summary.json").is_file():
        return "finished (summary.json written)", False
    stale = f"; its lock file names pid {pid}, which holds it no longer" if pid else ""
    return (f"stopped: no process holds the run's lock{stale} (interrupted or failed); resume with "
            f"./reproduce.sh {experiment} --resume {run}"), False


def report(run: Path, at: dt.datetime | None = None) -> str:
    """The status text of run folder `run` (`at`: the time it is read at; default now)."""
    experiment = recorded_experiment(run)               # not a run folder: RunFolderError, one error line
    state, running = state_line(run, experiment)
    out = [f"run: {run}", f"experiment: {experiment}, preset {preset_of(run)}", f"state: {state}"]
    snap = read_progress(run)
    if snap is None:
        out.append("units: not recorded (this run keeps no progress.json: an experiment that records none, or a "
                   "run made before progress was recorded); rows written below")
    out.append(f"rows written: {rows_written(run)}")
    if snap is not None:
        e = snap.estimate((at or now_utc()) if running else None)
        out.insert(3, f"units: {units_text(e)}")
        since = f"this session (since {snap.started.strftime('%Y-%m-%d %H:%M:%S')} UTC, {snap.session_units} units)"
        left = e.units_total - e.units_done
        if left <= 0:
            eta = "nothing left"
        elif e.eta_s is None:
            eta = "ETA - (no unit finished this session yet)"
        else:
            end = (at or now_utc()) + dt.timedelta(seconds=e.eta_s)
            eta = (f"ETA {clock(e.eta_s)} (about {end.strftime('%H:%M')} UTC)" if running
                   else f"ETA {clock(e.eta_s)} once resumed at this rate")
        out.append(f"rate: {rate_text(e.rate)} over {since}; {eta}")
        if e.workers:
            out.append(f"workers: {len(e.workers)} (units this session: "
                       f"{', '.join(f'{w} {n}' for w, n in sorted(e.workers.items()))})")
    err = last_error(run)
    if err is not None:
        where = f" (after {err['done']}/{err['total']} units)" if err.get("total") is not None else ""
        out.append(f"last error: {err.get('time', '?')}{where}: {err.get('error', '?')}")
    return "\n".join(out)


@command("status", "a run's state from its folder, while it runs or after: units, rows, rate, ETA, lock, last error")
def main(argv: list[str] | None = None) -> int:
    p = parser("status")
    p.add_argument("run", type=Path, metavar="RUN_DIR", help="a run folder, e.g. results/table1/tiny/<run-id>")
    args = p.parse_args(argv)
    print(report(args.run))
    return 0
