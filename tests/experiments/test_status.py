"""`./reproduce.sh status RUN_DIR` and the running progress line, one implementation (`spine.progress`): a real
Table 1 run on the runner tests' tiny random world (runner_world) in its own process, read while it runs
(the process stopped after its first unit, so "during" is certain) and after it ends; a run that failed after
a result (its error and its stale lock); a folder that is not a run (one `error:` line, exit code 2)."""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from acceptmoe.errors import UserError
from acceptmoe.experiments.spine.config import load_experiment
from acceptmoe.experiments.spine.options import run_to_completion
from acceptmoe.experiments.spine.progress import Estimate, RunProgress, line, read_progress
from acceptmoe.experiments.spine.runs import SampleLog, open_run, release_run
from acceptmoe.experiments.status import report
from acceptmoe.experiments.table1.config import Table1Config

import runner_world as world

REPO = Path(__file__).resolve().parents[2]
UNITS = re.compile(r"(\d+)/(\d+) units \(\d+%\) \[calibration (\d+)/(\d+), generation (\d+)/(\d+)\]")


def status(run: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "acceptmoe", "status", str(run)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


@pytest.fixture(scope="module")
def preset(tmp_path_factory):
    root = tmp_path_factory.mktemp("status")
    return world.write_preset(root, world.make_models(root / "models"), limit=2)


def test_status_reads_a_real_run_while_it_runs_and_after(preset, tmp_path):
    """The run prints the progress line on stderr as units finish; stopped after its first line, status names
    the process holding the lock, units done / total per kind (calibration 2 prompts x 2 tasks; 2 prompts x
    2 tasks x 6 methods), a rate and an ETA; once it ends, every unit is done, the rows are the generations,
    and the last progress line and status agree."""
    results = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "acceptmoe", "table1", "--preset", str(preset), "--results",
                             str(results)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        first = next(ln for ln in proc.stderr if UNITS.search(ln))
        proc.send_signal(signal.SIGSTOP)
        (run,) = [p.parent for p in results.rglob("config.json")]
        during = status(run)
    finally:
        proc.send_signal(signal.SIGCONT)
    rest, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, rest[-2000:]
    assert first.startswith("rand calibrate tiny-gsm: 1/28 units (4%) [calibration 1/4, generation 0/24]"), first
    assert during.returncode == 0, during.stderr
    text = during.stdout
    assert f"state: running (pid {proc.pid} holds the run's lock)" in text, text
    assert "experiment: table1, preset test" in text
    done, total, cal, cal_total, gen, gen_total = map(int, UNITS.search(text).groups())
    assert (total, cal_total, gen_total) == (28, 4, 24) and 1 <= done < total and done == cal + gen
    assert f"rows written: {gen}" in text and re.search(r"rate: [\d.]+ units/(s|min) over this session", text)
    assert re.search(r"ETA \d+:\d\d:\d\d \(about \d\d:\d\d UTC\)", text) and "last error" not in text
    after = status(run).stdout
    assert "state: finished" in after and "units: 28/28 units (100%) [calibration 4/4, generation 24/24]" in after
    assert "rows written: 24" in after and "nothing left" in after
    last = (run / "units.jsonl").read_text().splitlines()
    assert len(last) == 28 and {json.loads(ln)["kind"] for ln in last} == {"calibration", "generation"}


def test_a_failed_run_shows_its_last_error_and_its_stale_lock(tmp_path):
    """A run that fails after its first unit keeps its folder, records the error, and, its process gone (here:
    its lock let go), status says no process holds the lock, names the pid the lock file still carries, and
    how to resume; the rate and ETA come from the session's own unit times."""
    run = open_run("table1", "tiny", load_experiment(Table1Config, "tiny", {"limit": 1}), root=tmp_path)

    def one_unit_then_fail():
        bar = RunProgress.start(run.path, {"generation": (4, 1)}, show=False)
        SampleLog(run.path / "samples.jsonl").append("unit-1", {"correct": True})
        bar.tick("generation")
        raise UserError("the disk went away")

    with pytest.raises(UserError):
        run_to_completion("table1", run, one_unit_then_fail)
    release_run(run.path)
    text = status(run.path).stdout
    assert f"lock file names pid {os.getpid()}, which holds it no longer" in text
    assert f"resume with ./reproduce.sh table1 --resume {run.path}" in text
    assert "units: 2/4 units (50%)" in text and "rows written: 1" in text and "once resumed at this rate" in text
    assert re.search(r"last error: \S+ \(after 2/4 units\): UserError: the disk went away", text), text


def test_a_resumed_session_counts_from_its_own_start(tmp_path):
    """Units finished before the session started are in its done count, not in its rate: a session that
    started 100 s ago with 10 of 40 done and has finished 5 since runs at 0.05 units/s, 25 left: ETA 500 s."""
    (tmp_path / "config.json").write_text(json.dumps({"experiment": "table1", "preset": "tiny"}))
    bar = RunProgress.start(tmp_path, {"z": (30, 10), "b": (10, 0)}, show=False)     # kinds in the run's order
    old = (bar.started - dt.timedelta(hours=1)).isoformat()
    with open(tmp_path / "units.jsonl", "w") as f:                            # a previous session's units
        f.writelines(json.dumps({"kind": "z", "time": old}) + "\n" for _ in range(10))
    for kind in "zzbbb":
        bar.tick(kind)
    snap = read_progress(tmp_path)
    assert snap is not None and snap.done == {"z": 12, "b": 3} and snap.session_units == 5
    e = snap.estimate(snap.started + dt.timedelta(seconds=100))
    assert e.units_done == 15 and e.rate == pytest.approx(0.05) and e.eta_s == pytest.approx(500)
    assert line(e) == "15/40 units (38%) [z 12/30, b 3/10], 3.00 units/min, ETA 0:08:20"
    assert line(bar.estimate(bar.started + dt.timedelta(seconds=100))) == line(e)    # the running line: the same
    assert Estimate({"a": 0}, {"a": 3}, 0, 5.0).eta_s is None                # no unit yet: no rate, no ETA
    # a unit stamped in the session's own millisecond: the rate counts the stamps' resolution, never "no rate"
    assert Estimate({"a": 1}, {"a": 3}, 1, 0.0).rate == pytest.approx(1000.0)
    assert "units: 15/40 units (38%) [z 12/30, b 3/10]" in report(tmp_path)


def test_units_of_ray_workers_are_counted_per_worker_this_session(tmp_path):
    """Under --cluster each unit names its worker: the running line and status count each worker's units of
    this session (a previous session's are not counted); units without a worker (in process) add nothing."""
    (tmp_path / "config.json").write_text(json.dumps({"experiment": "table1", "preset": "tiny"}))
    bar = RunProgress.start(tmp_path, {"generation": (10, 2)}, show=False)
    old = (bar.started - dt.timedelta(hours=1)).isoformat()
    with open(tmp_path / "units.jsonl", "w") as f:
        f.writelines(json.dumps({"kind": "generation", "time": old, "worker": "w0"}) + "\n" for _ in range(2))
    for worker in ("w1", "w0", "w1", None):
        bar.tick("generation", "d", worker)
    snap = read_progress(tmp_path)
    assert snap is not None and snap.workers == {"w0": 1, "w1": 2} and snap.session_units == 4
    e = snap.estimate(snap.started + dt.timedelta(seconds=60))
    assert line(e) == "6/10 units (60%), 4.00 units/min, ETA 0:01:00, per worker: w0 1, w1 2"
    assert line(bar.estimate(bar.started + dt.timedelta(seconds=60))) == line(e)
    assert "workers: 2 (units this session: w0 1, w1 2)" in report(tmp_path)
    lines = [json.loads(ln) for ln in (tmp_path / "units.jsonl").read_text().splitlines()]
    assert [u.get("worker") for u in lines[2:]] == ["w1", "w0", "w1", None]    # in process: no worker field


def test_a_folder_that_is_not_a_run_is_one_error_line(tmp_path):
    for folder in (tmp_path, tmp_path / "missing"):
        out = status(folder)
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert out.stderr.startswith(f"error: {folder} is not a run folder") and out.stderr.count("\n") == 1
