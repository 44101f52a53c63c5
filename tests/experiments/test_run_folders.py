"""Run folders under misuse: a second process on one folder, damaged or foreign config.json files, presets
that are not UTF-8, results on a read-only file system, on a regular file or on a full disk, and runs that
fail before their first result. Each ends in one `error:` line with exit code 2 (or leaves no folder).
The read-only and full file systems are real: bubblewrap mounts them for the command under test."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from acceptmoe.errors import UserError
from acceptmoe.experiments.spine.config import load_experiment
from acceptmoe.experiments.spine.options import run_to_completion
from acceptmoe.experiments.spine.runs import RunLocked, SampleLog, lock_run, open_run, release_run
from acceptmoe.experiments.table1.config import Table1Config

REPO = Path(__file__).resolve().parents[2]
BWRAP = shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason="bubblewrap mounts the read-only and full file systems")


def cli(*args, prefix=()):
    return subprocess.run([*prefix, sys.executable, "-m", "acceptmoe", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=REPO)


def one_error_line(out, message):
    assert out.returncode == 2, (out.returncode, out.stdout[-2000:], out.stderr[-2000:])
    assert "Traceback" not in out.stderr and out.stderr.startswith("error: ") and message in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def make_run(root: Path):
    run = open_run("table1", "tiny", load_experiment(Table1Config, "tiny", {"limit": 1}), root=root)
    release_run(run.path)  # this test process is not the one running it
    return run


def test_a_second_process_on_a_run_folder_refuses(tmp_path):
    run = make_run(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
                               "from acceptmoe.experiments.spine.runs import lock_run\n"
                               f"lock_run(Path({str(run.path)!r}))\nprint('held', flush=True)\ntime.sleep(120)\n"],
                              stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout.readline().strip() == "held"
        out = cli("table1", "--resume", run.path, "--allow-code-change")
        one_error_line(out, f"another process (pid {holder.pid}) is running this run folder")
        with pytest.raises(RunLocked):
            lock_run(run.path)
        with pytest.raises(RunLocked, match="another process"):  # the automatic resume of the same config too
            open_run("table1", "tiny", load_experiment(Table1Config, "tiny", {"limit": 1}), root=tmp_path)
    finally:
        holder.kill()
        holder.wait()
    lock_run(run.path)  # free again once the holder is gone
    release_run(run.path)


@pytest.mark.parametrize("text, message", [
    ('{"experiment": "table1", "config": {"wor', "config.json is damaged (JSONDecodeError"),
    (b'{"config": "\xff\xfe"}', "config.json is damaged (UnicodeDecodeError"),
    ('{"experiment": "table1", "config_hash": "x"}', "config.json has no 'config' mapping"),
    ('[1, 2]', "config.json has no 'config' mapping"),
])
def test_a_damaged_config_json_on_resume_is_one_line(tmp_path, text, message):
    run = make_run(tmp_path)
    meta = run.path / "config.json"
    meta.write_bytes(text if isinstance(text, bytes) else text.encode())
    one_error_line(cli("table1", "--resume", run.path), message)


def test_a_preset_with_bytes_that_are_not_utf8_is_one_line(tmp_path):
    preset = tmp_path / "latin1.yaml"
    preset.write_bytes((REPO / "configs/presets/tiny.yaml").read_bytes() + b"# caf\xe9\n")
    one_error_line(cli("table1", "--preset", preset, "--limit", "1", "--results", tmp_path / "r"),
                   "latin1.yaml: not UTF-8 text")


def test_results_naming_a_regular_file_is_one_line(tmp_path):
    target = tmp_path / "results.txt"
    target.write_text("not a folder")
    one_error_line(cli("table1", "--limit", "1", "--results", target), "a file, not a folder")
    below = tmp_path / "file"
    below.write_text("")
    one_error_line(cli("table1", "--limit", "1", "--results", below / "inside"), "cannot make the run folder")


@needs_bwrap
def test_results_on_a_read_only_file_system_is_one_line(tmp_path):
    (tmp_path / "ro").mkdir()
    prefix = (BWRAP, "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--ro-bind", tmp_path / "ro", tmp_path / "ro")
    out = cli("table1", "--limit", "1", "--results", tmp_path / "ro", prefix=prefix)
    one_error_line(out, "Read-only file system")
    assert list((tmp_path / "ro").iterdir()) == []


FILL = "import sys\ntry:\n    open(sys.argv[1], 'wb').write(b'x' * (1 << 20))\nexcept OSError:\n    pass\n"


@needs_bwrap
def test_a_full_disk_is_one_line_on_a_new_run_and_on_its_resume(tmp_path):
    """A 256 KiB tmpfs for the results, filled before the command runs: no half-made folder is left, and
    resuming a run folder on that disk is refused with one line too."""
    run = make_run(tmp_path / "seed")
    full = tmp_path / "full"
    full.mkdir()
    script = (f"cp -r {run.path} {full}/run && {sys.executable} -c \"$0\" {full}/filler && "
              f"{sys.executable} -m acceptmoe table1 --limit 1 --results {full}/results; echo \"rc=$?\" >&2; "
              f"{sys.executable} -m acceptmoe table1 --resume {full}/run --allow-code-change; echo \"rc=$?\" >&2; "
              f"find {full}/results -mindepth 1 -not -type d >&2; true")
    out = subprocess.run([BWRAP, "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--size", str(256 << 10),
                          "--tmpfs", str(full), "sh", "-c", script, FILL], capture_output=True, text=True, timeout=300,
                         cwd=REPO)
    lines = [line for line in out.stderr.strip().splitlines() if line.strip()]
    assert "Traceback" not in out.stderr, out.stderr
    fresh, fresh_rc, resumed, resumed_rc, *left = lines
    assert fresh.startswith("error: --results") and "No space left on device" in fresh and fresh_rc == "rc=2", lines
    assert resumed.startswith("error: --resume") and "No space left on device" in resumed and resumed_rc == "rc=2", lines
    assert left == []  # no file of a half-made run folder (its parents may stay, empty)


def test_a_run_that_fails_before_its_first_result_leaves_no_folder(tmp_path):
    cfg = load_experiment(Table1Config, "tiny", {"limit": 1})

    def fail():
        raise UserError("the model could not be loaded")

    run = open_run("table1", "tiny", cfg, root=tmp_path)
    with pytest.raises(UserError):
        run_to_completion("table1", run, fail)
    assert not run.path.exists() and not [p for p in run.path.parent.iterdir()]

    def interrupted():
        raise KeyboardInterrupt

    run = open_run("table1", "tiny", cfg, root=tmp_path)
    assert run_to_completion("table1", run, interrupted) is False and not run.path.exists()

    def one_row_then_fail():
        SampleLog(run.path / "samples.jsonl").append("unit-1", {"correct": True})
        raise UserError("stopped after one unit")

    run = open_run("table1", "tiny", cfg, root=tmp_path)
    with pytest.raises(UserError):
        run_to_completion("table1", run, one_row_then_fail)
    assert (run.path / "samples.jsonl").is_file()  # a run with results stays, to be resumed
    again = open_run("table1", "tiny", cfg, root=tmp_path)
    assert again.path == run.path and again.resumed


def test_a_new_run_folder_appears_only_with_its_config(tmp_path):
    run = open_run("table1", "tiny", load_experiment(Table1Config, "tiny", {"limit": 1}), root=tmp_path)
    assert json.loads((run.path / "config.json").read_text())["config_hash"]
    assert [p.name for p in run.path.parent.iterdir()] == [run.path.name]  # no partial folder beside it
