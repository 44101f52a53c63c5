"""Bad inputs through the real command line, each ending in one bounded `error:` line with exit code 2: a preset
with a key given twice (YAML would keep the last silently), a YAML alias bomb (refused before it expands), a
damaged draft `model.safetensors`, a truncated or non-JSON target `config.json`; and the loaders' own rules."""
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acceptmoe.engine.config import CheckpointError, ModelConfig
from acceptmoe.engine.eagle3 import Eagle3Draft
from acceptmoe.errors import MESSAGE_CHARS, UserError, shown
from acceptmoe.experiments.spine.config import ConfigKeyError, read_yaml

REPO = Path(__file__).resolve().parents[2]
TINY = (REPO / "configs/presets/tiny.yaml").read_text()


def cli(*args):
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "acceptmoe", *map(str, args)], capture_output=True, text=True,
                         timeout=300, cwd=REPO)
    return out, time.monotonic() - start


def one_error_line(out, message):
    """Exit code 2 and, after any progress lines, one `error:` line of bounded length naming `message`."""
    assert out.returncode == 2, (out.returncode, out.stdout[-2000:], out.stderr[-2000:])
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in out.stderr and len(errors) == 1 and message in errors[0], out.stderr[-3000:]
    assert out.stderr.strip().splitlines()[-1] == errors[0] and len(errors[0]) < MESSAGE_CHARS + 100


def test_a_preset_with_a_key_given_twice_is_one_line_naming_the_key_and_line(tmp_path):
    preset = tmp_path / "twice.yaml"
    preset.write_text(TINY + "dtype: bfloat16\n")
    line = len(preset.read_text().splitlines())
    out, _ = cli("table1", "--preset", preset, "--limit", "1", "--results", tmp_path / "r")
    one_error_line(out, f"twice.yaml:{line}:1: YAML syntax error: the key 'dtype' is given twice")


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    """Nine levels of nine aliases: 9**9 leaves once expanded (before: 21 s and a 580 MB error line)."""
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    preset = tmp_path / "bomb.yaml"
    preset.write_text(TINY + "\n".join(levels) + "\n")
    out, took = cli("table1", "--preset", preset, "--limit", "1", "--results", tmp_path / "r")
    one_error_line(out, "an alias (*name) is not allowed")
    assert took < 60


def test_the_loader_refuses_duplicates_at_any_depth_and_keeps_distinct_keys(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("a: {b: 1, c: 2}\nd: [{e: 1}, {e: 2}]\n")
    assert read_yaml(path) == {"a": {"b": 1, "c": 2}, "d": [{"e": 1}, {"e": 2}]}
    path.write_text("a:\n  - {e: 1, e: 2}\n")
    with pytest.raises(ConfigKeyError, match=r"x.yaml:2:\d+: .*the key 'e' is given twice"):
        read_yaml(path)
    path.write_text("1: a\n1: b\n")
    with pytest.raises(ConfigKeyError, match="the key 1 is given twice"):
        read_yaml(path)


@pytest.mark.parametrize("reader", ["tiny world", "plugin settings"])
def test_every_yaml_config_is_read_by_the_one_strict_reader(tmp_path, reader):
    """The tiny world's config and the SGLang plugin's settings refuse a key given twice and an alias as the
    presets do (one reader, `acceptmoe.yamlfile`), each as its own error type naming the file and line."""
    from acceptmoe.serving.sglang.config import PluginConfigError, _read_file
    from acceptmoe.tiny.config import TinyConfigError, load
    read, error = {"tiny world": (load, TinyConfigError), "plugin settings": (_read_file, PluginConfigError)}[reader]
    path = tmp_path / "settings.yaml"
    path.write_text("seed: 1\nseed: 2\n")
    with pytest.raises(error, match=r"settings.yaml:2:1: .*the key 'seed' is given twice"):
        read(path)
    path.write_text("a: &x [1]\nb: *x\n")
    with pytest.raises(error, match="an alias"):
        read(path)


def test_a_value_shown_in_a_message_is_cut_and_a_message_is_bounded():
    deep = [[[["x" * 10_000] * 1000] * 1000]]
    assert len(shown(deep)) <= 300 and len(shown("y" * 10**6)) <= 300
    text = str(UserError("problem " + "z" * 100_000 + " fix"))
    assert len(text) <= MESSAGE_CHARS and text.startswith("problem ") and text.endswith(" fix")
    assert str(UserError("short")) == "short"


def _world(tmp_path: Path) -> Path:
    """A copy of the tiny world and a preset that names it."""
    for part in ("target", "draft"):
        shutil.copytree(REPO / "models/tiny" / part, tmp_path / part)
    preset = tmp_path / "copy.yaml"
    preset.write_text(TINY.replace("models/tiny/target", str(tmp_path / "target"))
                      .replace("models/tiny/draft", str(tmp_path / "draft")))
    return preset


@pytest.mark.parametrize("damage", ["truncated", "not json", "a list"])
def test_a_damaged_target_config_json_is_one_line_naming_the_file(tmp_path, damage):
    preset = _world(tmp_path)
    config = tmp_path / "target/config.json"
    text = config.read_text()
    config.write_text({"truncated": text[: len(text) // 2], "not json": "<html>404</html>", "a list": "[1, 2]"}[damage])
    out, _ = cli("table1", "--preset", preset, "--limit", "1", "--results", tmp_path / "r")
    one_error_line(out, str(config))
    with pytest.raises(CheckpointError, match="config.json"):
        ModelConfig.from_folder(tmp_path / "target")


@pytest.mark.parametrize("damage", ["truncated", "garbage header"])
def test_a_damaged_draft_checkpoint_is_one_line_naming_the_file(tmp_path, damage):
    preset = _world(tmp_path)
    weights = tmp_path / "draft/model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 3] if damage == "truncated" else b"\xff" * 64 + data[64:])
    with pytest.raises(CheckpointError, match="model.safetensors cannot be read"):
        Eagle3Draft.from_pretrained(tmp_path / "draft")
    out, _ = cli("table1", "--preset", preset, "--limit", "1", "--results", tmp_path / "r")
    one_error_line(out, str(weights))


def test_a_draft_config_json_that_is_not_json_is_a_checkpoint_error(tmp_path):
    shutil.copytree(REPO / "models/tiny/draft", tmp_path / "draft")
    (tmp_path / "draft/config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"], "hidden')
    with pytest.raises(CheckpointError, match="draft/config.json is not valid JSON"):
        Eagle3Draft.from_pretrained(tmp_path / "draft")


def test_more_offload_slots_than_experts_is_one_line_naming_the_key(tmp_path):
    """The tiny target has 128 experts per layer; X = 200 slots cannot be kept."""
    preset = tmp_path / "slots.yaml"
    preset.write_text(TINY.replace("  offload: {prompts: 20}", "  offload: {prompts: 20, slots: 200}"))
    assert "slots: 200" in preset.read_text()
    out, _ = cli("fig4", "--preset", preset, "--limit", "1", "--results", tmp_path / "r")
    one_error_line(out, "throughput.offload.slots = 200 exceeds the 128 experts per layer of model 'tiny'")
