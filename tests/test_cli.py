"""The `./reproduce.sh` dispatcher: unknown subcommands list the valid ones; bad input is one clear line."""
import subprocess
import sys

from acceptmoe.experiments.cli import COMMANDS


def run(*args):
    return subprocess.run([sys.executable, "-m", "acceptmoe", *args], capture_output=True, text=True, timeout=120)


def test_help_lists_every_subcommand():
    out = run("--help")
    assert out.returncode == 0
    for name in ("test", *COMMANDS):
        assert name in out.stdout


def test_unknown_subcommand_lists_valid_ones():
    out = run("tabel1")
    assert out.returncode == 2
    assert "unknown subcommand 'tabel1'" in out.stderr and "table1" in out.stderr


def test_bad_input_is_a_clear_error_without_traceback(tmp_path):
    out = run("table1", "--methods", "acceptmoe-x", "--limit", "1")
    assert out.returncode == 2
    assert "error: unknown method 'acceptmoe-x'; valid methods: vanilla-ar" in out.stderr
    assert "Traceback" not in out.stderr
    missing = run("bench-engine", "--model", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr
