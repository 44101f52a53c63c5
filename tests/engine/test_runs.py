"""Run folders, strict configs and resumable sample logs."""
import json
from dataclasses import dataclass, field

import pytest

from acceptmoe.experiments.runs import ConfigKeyError, SampleLog, config_hash, load_config, open_run


@dataclass(frozen=True)
class Inner:
    slots: int = 48
    rho: float = 0.1


@dataclass(frozen=True)
class Outer:
    name: str = "x"
    methods: tuple = ("standard-sd", "acceptmoe")
    inner: Inner = field(default_factory=Inner)


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


def test_missing_config_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_config(Outer, tmp_path / "nope.yaml")


def test_open_run_resumes_unfinished_same_config(tmp_path):
    cfg = Outer()
    first = open_run("exp", "tiny", cfg, root=tmp_path)
    assert not first.resumed
    meta = json.loads((first.path / "config.json").read_text())
    assert meta["config_hash"] == config_hash(cfg) and "git_commit" in meta["environment"]
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
