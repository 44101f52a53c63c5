"""Run folders, the strict config loader and resumable sample logs."""
import json
from dataclasses import dataclass, field

import pytest

from acceptmoe.experiments.spine.config import ConfigKeyError, build, dotted, read_yaml
from acceptmoe.experiments.spine.runs import SampleLog, config_hash, open_run


def load_config(cls, path, overrides=None):
    from acceptmoe.experiments.spine.config import deep_merge
    return build(cls, deep_merge(read_yaml(path), dotted(overrides or {})), str(path))


@dataclass(frozen=True)
class Inner:
    slots: int = 48
    rho: float = 0.1


@dataclass(frozen=True)
class Outer:
    name: str = "x"
    methods: tuple[str, ...] = ("standard-sd", "acceptmoe")
    inner: Inner = field(default_factory=Inner)


@dataclass(frozen=True)
class Needs:
    inner: Inner
    budget: int | None = None


def test_load_config_nested_and_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("name: tiny\nmethods: [acceptmoe]\ninner:\n  slots: 24\n")
    cfg = load_config(Outer, p, {"inner.rho": 0.2})
    assert cfg == Outer(name="tiny", methods=("acceptmoe",), inner=Inner(slots=24, rho=0.2))


def test_unknown_keys_are_errors_that_list_valid_keys(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("name: tiny\ninner:\n  slotz: 24\n")
    with pytest.raises(ConfigKeyError, match=r"unknown config key\(s\) \['slotz'\].*valid keys: \['rho', 'slots'\]"):
        load_config(Outer, p)


@pytest.mark.parametrize("text, match", [
    ("inner:\n  slots: many\n", r"c.yaml.inner.slots: expected int, got 'many' \(str\)"),
    ("inner:\n  slots: true\n", r"inner.slots: expected int, got True \(bool\)"),
    ("inner:\n  rho: [1]\n", r"inner.rho: expected float"),
    ("inner: 3\n", r"inner: expected a mapping of Inner keys"),
    ("methods: acceptmoe\n", r"methods: expected a list, got 'acceptmoe'"),
    ("methods: [1]\n", r"methods\[0\]: expected str, got 1"),
])
def test_wrong_types_name_the_dotted_key(tmp_path, text, match):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(ConfigKeyError, match=match):
        load_config(Outer, p)


def test_missing_required_keys_and_yaml_syntax_errors(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("budget: 3\n")
    with pytest.raises(ConfigKeyError, match=r"c.yaml.inner: missing required key"):
        load_config(Needs, p)
    p.write_text("inner:\n  slots: [1, 2\nbudget: 3\n")
    with pytest.raises(ConfigKeyError, match=r"c.yaml:3:\d+: YAML syntax error"):
        load_config(Needs, p)
    p.write_text("inner: {rho: 1}\n")                        # an int where a float is expected is fine
    assert load_config(Outer, p) == Outer(inner=Inner(rho=1.0))


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigKeyError, match="not found"):
        load_config(Outer, tmp_path / "nope.yaml")


def test_open_run_resumes_unfinished_same_config(tmp_path):
    cfg = Outer()
    first = open_run("exp", "tiny", cfg, root=tmp_path)
    assert not first.resumed
    meta = json.loads((first.path / "config.json").read_text())
    assert meta["config_hash"] == config_hash(cfg) and "git_commit" in meta["environment"]
    import torch
    env = meta["environment"]                    # the measured scope a float result's reproducibility has
    assert env["cpu"] and env["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    again = open_run("exp", "tiny", cfg, root=tmp_path)
    assert again.resumed and again.path == first.path
    first.finish({"done": True})
    third = open_run("exp", "tiny", cfg, root=tmp_path)
    assert not third.resumed and third.path != first.path
    other = open_run("exp", "tiny", Outer(name="y"), root=tmp_path)
    assert not other.resumed and other.path != third.path


def test_sample_log_resumes_without_duplicates_and_drops_torn_line(tmp_path):
    log = SampleLog(tmp_path / "samples.jsonl")
    log.append("p0/acceptmoe", {"correct": True})
    log.append("p1/acceptmoe", {"correct": False})
    with pytest.raises(KeyError, match="already"):
        log.append("p0/acceptmoe", {"correct": True})
    with open(tmp_path / "samples.jsonl", "a") as f:
        f.write('{"key": "p2/acceptmoe", "corr')          # a crash mid-write
    again = SampleLog(tmp_path / "samples.jsonl")
    assert len(again) == 2 and "p1/acceptmoe" in again and "p2/acceptmoe" not in again
    again.append("p2/acceptmoe", {"correct": True})
    lines = (tmp_path / "samples.jsonl").read_text().splitlines()
    assert [json.loads(l)["key"] for l in lines] == ["p0/acceptmoe", "p1/acceptmoe", "p2/acceptmoe"]


def test_trace_stats_cover_every_layer_field():
    import dataclasses as dc

    from acceptmoe.engine.trace import LAYER_FIELDS
    from acceptmoe.experiments.spine.rows import TraceStats
    names = {f.name for f in dc.fields(TraceStats)}
    assert names == {"blocks", "block_layers"} | {f"{n}_sum" for n in LAYER_FIELDS[1:]} \
        | {f"mean_{n}" for n in LAYER_FIELDS[1:]}
