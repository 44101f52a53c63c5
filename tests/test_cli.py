"""The `./reproduce.sh` dispatcher: commands declare themselves, unknown ones list the valid ones, bad input
is one clear line with exit code 2."""
import importlib
import json
import subprocess
import sys

import pytest

from acceptmoe.commands import COMMANDS, declared
from acceptmoe.errors import UserError


def run(*args):
    return subprocess.run([sys.executable, "-m", "acceptmoe", *args], capture_output=True, text=True, timeout=300)


def test_every_declared_command_registers_when_its_module_is_imported():
    commands = declared()
    assert {"table1", "tables", "fig3", "fig4", "fig5", "table2", "sweep", "calibrate", "b0", "calibration-study",
            "train-tiny", "tiny-eval", "bench-engine"} <= set(commands)
    for name, d in commands.items():
        importlib.import_module(d.module)
        assert name in COMMANDS, f"{d.module} declares {name!r} but did not register it"
    assert set(COMMANDS) >= set(commands)


def test_help_lists_every_command_from_the_declarations():
    out = run("--help")
    assert out.returncode == 0
    for name, d in declared({"test": "reproduce.sh"}).items():
        assert name in out.stdout and (d.module == "" or d.help in out.stdout)


def test_unknown_command_lists_valid_ones():
    out = run("tabel1")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [out.stderr.strip()]
    assert "error: unknown command 'tabel1' (did you mean 'table1'?); valid: test, table1" in out.stderr


@pytest.mark.parametrize("args, message", [
    (("table1", "--methods", "acceptmoe-x", "--limit", "1"), "table1: unknown method 'acceptmoe-x' (did you mean 'acceptmoe-b'?); valid: vanilla-ar"),
    (("table1", "--limit", "0"), "error: argument --limit: must be at least 1, got 0"),
    (("table1", "--limit", "-1"), "error: argument --limit: must be at least 1, got -1"),
    (("fig3", "--resume", "no/such/run"), "error: --resume no/such/run: not a run folder"),
    (("table1", "--methods", "count-b"), "table1: ['count-b'] run at the budget B0, which comes from acceptmoe's traces"),
    (("table1", "--preset", "nope"), "no preset 'nope'"),
    (("bench-engine", "--tree", "5", "10", "1000"), "error: --tree 5 10 1000: num_draft_tokens - 1 = 999 exceeds"),
    (("bench-engine", "--tree", "5", "10"), "error: argument --tree: expected 3 arguments"),
])
def test_bad_input_is_one_clear_line(args, message):
    out = run(*args)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: ") and message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_bad_model_folder_is_a_clear_error(tmp_path):
    missing = run("bench-engine", "--model", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr


def _preset(tmp_path, edit) -> str:
    from pathlib import Path

    import yaml
    data = yaml.safe_load((Path(__file__).parents[1] / "configs/presets/tiny.yaml").read_text())
    edit(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(threads="two"), "bad.yaml.threads: expected null or int, got 'two' (str)"),
    (lambda d: d["tree"].update(topk=[10]), "bad.yaml.tree.topk: expected int, got [10] (list)"),
    (lambda d: d["table1"].update(methods="all"), "bad.yaml:table1.methods: expected a list, got 'all' (str)"),
    (lambda d: d.pop("models"), "bad.yaml.models: missing required key"),
    (lambda d: d["models"][0].pop("target"), "bad.yaml.models[0].target: missing required key"),
    (lambda d: d["models"][0].pop("draft"), "model 'tiny' has no draft, and standard-sd, "),   # a draft is optional
    (lambda d: d.update(tasks=["tiny-gsm", "tiny-gsn"]), "unknown task 'tiny-gsn' (did you mean 'tiny-gsm'?); valid: gsm8k"),
    (lambda d: d.update(device="cuda"), "device 'cuda': this machine has no CUDA GPU"),
])
def test_bad_presets_are_one_clear_line(tmp_path, edit, message):
    out = run("table1", "--preset", _preset(tmp_path, edit), "--limit", "1", "--results", str(tmp_path / "r"))
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: ") and message in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_resume_accepts_an_option_repeated_with_its_frozen_value():
    from acceptmoe.experiments.spine.options import check_resume_options
    frozen = {"limit": 3, "methods": ["acceptmoe"], "world": {"engine": "sglang"}}
    check_resume_options({"world.engine": "sglang", "limit": 3, "methods": ("acceptmoe",)}, frozen)
    with pytest.raises(UserError, match=r"drop --methods \(frozen: \['acceptmoe'\]\)"):
        check_resume_options({"methods": ["count-b"]}, frozen)


def test_yaml_syntax_and_resume_mistakes_are_one_clear_line(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("preset: tiny\nmodels: [\n  {name: x\n")
    frozen = tmp_path / "run"
    frozen.mkdir()
    (frozen / "config.json").write_text(json.dumps({"config": {"limit": 1, "world": {"engine": "native"}}}))
    cases = [(("table1", "--preset", str(broken)), "broken.yaml:4:1: YAML syntax error"),
             (("table1", "--resume", str(broken)), "not a run folder"),
             (("table1", "--resume", str(frozen), "--limit", "2"), "--resume continues a run with its frozen "
                                                                     "config: drop --limit (frozen: 1)"),
             (("table1", "--resume", str(frozen), "--limit", "1", "--engine", "sglang"),
              "drop --engine (frozen: 'native')")]
    for args, message in cases:
        out = run(*args)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
