"""`--cluster local`: Table 1's units on real Ray workers (the cluster extra), on the runner tests' tiny random
world (runner_world), against the same command in one process: the same tables and traces byte for byte and
the same rows (but for their timing fields); `status` and the progress line name the workers while the run
runs; a worker killed mid-run loses only its unit (Ray restarts it and runs the unit again), an interrupted
cluster run resumes without --cluster; bad --cluster values and a missing Ray are one `error:` line each."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import runner_world as world

pytest.importorskip("ray", reason="the cluster extra: pip install -e '.[cluster]'")

REPO = Path(__file__).resolve().parents[2]
TIMING = ("prefill_s", "decode_s")          # measured per generation: differ between any two runs
WORKERS = re.compile(r"per worker: ((?:w\d+ \d+(?:, )?)+)")


def table1(preset: Path, results: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "acceptmoe", "table1", "--preset", str(preset), "--results",
                             str(results), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO)


def finished(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, (out + err)[-3000:]
    return out


def run_dir(results: Path) -> Path:
    (run,) = [p.parent for p in results.rglob("config.json") if p.parent.parent.parent.name == "table1"]
    return run


def rows(run: Path) -> list[dict]:
    path = run / "samples.jsonl"
    return [{k: v for k, v in json.loads(ln).items() if k not in TIMING}
            for ln in (path.read_text().splitlines() if path.is_file() else [])]


def same_results(run: Path, reference: Path) -> None:
    """Tables, B0 decisions, calibration and traces byte for byte; rows equal but for timing; no key twice."""
    for name in ("table1.md", "table1.csv", "table1.tex"):
        assert (run / name).read_bytes() == (reference / name).read_bytes(), name
    for sub in ("traces", "b0", "calibration"):
        mine = sorted(p.relative_to(run) for p in (run / sub).rglob("*") if p.is_file())
        assert mine == sorted(p.relative_to(reference) for p in (reference / sub).rglob("*") if p.is_file())
        assert all((run / p).read_bytes() == (reference / p).read_bytes() for p in mine), sub
    keys = [r["key"] for r in rows(run)]
    assert len(keys) == len(set(keys))
    assert sorted(rows(run), key=lambda r: r["key"]) == sorted(rows(reference), key=lambda r: r["key"])


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The preset and its one-process run (the reference)."""
    root = tmp_path_factory.mktemp("cluster")
    preset = world.write_preset(root, world.make_models(root / "models"), limit=3)
    finished(table1(preset, root / "one"))
    return preset, run_dir(root / "one")


def test_a_cluster_run_gives_the_one_process_results_and_shows_its_workers(setup, tmp_path):
    """Two workers on this machine: stopped after its first unit, status names the workers and their units;
    once finished, the rows are written in the one-process order and every table, trace, calibration and B0
    file is the one-process run's, byte for byte; cluster.jsonl names the workers, engines.jsonl their engines."""
    preset, reference = setup
    proc = table1(preset, tmp_path, "--cluster", "local")
    try:
        first = next(ln for ln in proc.stderr if WORKERS.search(ln))
        proc.send_signal(signal.SIGSTOP)
        during = subprocess.run([sys.executable, "-m", "acceptmoe", "status", str(run_dir(tmp_path))],
                                capture_output=True, text=True, timeout=120, cwd=REPO)
    finally:
        proc.send_signal(signal.SIGCONT)
    finished(proc)
    run = run_dir(tmp_path)
    assert re.search(r"per worker: w\d 1$", first.strip()), first
    assert f"state: running (pid {proc.pid} holds the run's lock)" in during.stdout, during.stdout
    assert re.search(r"workers: [12] \(units this session: w\d \d+(, w\d \d+)?\)", during.stdout), during.stdout
    same_results(run, reference)
    assert [r["key"] for r in rows(run)] == [r["key"] for r in rows(reference)]
    assert run.name.rsplit("-", 1)[1] == reference.name.rsplit("-", 1)[1]     # the config's hash: --cluster no part
    config = json.loads((run / "config.json").read_text())
    assert config["config"] == json.loads((reference / "config.json").read_text())["config"]
    (session,) = [json.loads(ln) for ln in (run / "cluster.jsonl").read_text().splitlines()]
    assert session["cluster"] == "local" and [w["worker"] for w in session["workers"]] == ["w0", "w1"]
    assert session["per_worker"] == {"num_cpus": 1}
    engines = [json.loads(ln) for ln in (run / "engines.jsonl").read_text().splitlines()]
    assert sorted(e["worker"] for e in engines) == ["w0", "w1"] and {e["model"] for e in engines} == {"rand"}
    units = [json.loads(ln) for ln in (run / "units.jsonl").read_text().splitlines()]
    assert {u["worker"] for u in units} == {"w0", "w1"}      # both workers generated units


def test_a_killed_worker_loses_only_its_unit_and_an_interrupted_run_resumes_without_cluster(setup, tmp_path):
    """A worker process killed (SIGKILL) once rows are being written: Ray restarts it and it generates again; the run,
    interrupted (Ctrl-C) after that, keeps its rows and resumes in one process (--cluster is no part of the
    config); the finished run has every row once and the one-process run's tables."""
    preset, reference = setup
    proc = table1(preset, tmp_path, "--cluster", "local")
    stopped = False
    try:
        next(ln for ln in proc.stderr if WORKERS.search(ln))
        run = run_dir(tmp_path)
        deadline = time.monotonic() + 300
        while len(rows(run)) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        victim = json.loads((run / "cluster.jsonl").read_text().splitlines()[0])["workers"][0]
        os.kill(victim["pid"], signal.SIGKILL)
        killed_at = len((run / "units.jsonl").read_text().splitlines())
        while time.monotonic() < deadline:     # the restarted worker finishes a unit after the kill
            later = [json.loads(ln) for ln in (run / "units.jsonl").read_text().splitlines()[killed_at:]]
            if any(u.get("worker") == victim["worker"] for u in later) or proc.poll() is not None:
                break
            time.sleep(0.2)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            stopped = True
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert any(u.get("worker") == victim["worker"] for u in later), "the killed worker never came back"
    assert proc.returncode == (130 if stopped else 0), (out + err)[-3000:]
    if stopped:
        assert "interrupted; finished rows are saved" in out
        keys = [r["key"] for r in rows(run)]
        assert len(keys) == len(set(keys)) and 2 <= len(keys) < 36
        resumed = subprocess.run([sys.executable, "-m", "acceptmoe", "table1", "--resume", str(run),
                                  "--allow-code-change"],   # the tree may be dirty here
                                 capture_output=True, text=True, timeout=900, cwd=REPO)
        assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    same_results(run, reference)


@pytest.mark.parametrize("value, message", [
    ("", "--cluster '': give auto, local or a Ray address"),
    ("head node", "--cluster 'head node': give auto, local or a Ray address"),
    ("somewhere", "--cluster 'somewhere': not auto, local or a Ray address (host:port, ray://host:port)"),
    ("127.0.0.1:1", "--cluster 127.0.0.1:1: nothing answers there"),   # refused at once, not Ray's retries
])
def test_a_bad_cluster_value_is_one_error_line(value, message, tmp_path):
    out = subprocess.run([sys.executable, "-m", "acceptmoe", "table1", "--limit", "1", "--results", str(tmp_path),
                          "--cluster", value], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 2 and out.stderr.strip().startswith(f"error: {message}"), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


def test_a_missing_ray_is_one_error_line_naming_the_extra(tmp_path):
    """Ray not importable (as on an install without the cluster extra): one line naming the extra, exit 2."""
    code = ("import sys; sys.modules['ray'] = None; from acceptmoe.cli import main; "
            f"sys.exit(main(['table1', '--limit', '1', '--results', {str(tmp_path)!r}, '--cluster', 'local']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == ("error: --cluster needs Ray, which is not installed here: pip install -e "
                                  "'.[cluster]' (or run without --cluster, in this process)"), out.stderr
    assert not list(tmp_path.iterdir())
