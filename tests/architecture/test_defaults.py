"""Each default is defined once (docs/architecture.md, "Defaults"): a config class holds its own defaults, the
statistics rules' constants live in `evals.stats`, and a config YAML (configs/world.yaml, configs/experiments/)
sets only what its class leaves unset (no default, or an empty one: None, (), "", {}). A YAML value beside a
code default would be the same default set twice, or two that disagree."""
from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from acceptmoe.evals import stats
from acceptmoe.experiments.spine.catalog import ordered
from acceptmoe.experiments.spine.config import CONFIGS, WORLD_YAML, B0Config, BootstrapConfig, WorldConfig, read_yaml

EMPTY = (None, (), "", {}, [])
SECTIONS = tuple(r.load(r.config) for r in ordered() if r.config)     # every experiment's section, from its record


def _default(field: dataclasses.Field):
    """The field's default, as the loader fills it (a nested mapping is built from its own class's defaults)."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None                                      # required: the YAML gives it


def set_twice(cls: type, data: dict, where: str) -> list[str]:
    """Dotted keys of `data` that set a field of `cls` that already has a non-empty default in code."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    out = []
    for key, value in data.items():
        assert key in fields, f"{where}.{key}: not a field of {cls.__name__}"
        default = _default(fields[key])
        if isinstance(value, dict) and dataclasses.is_dataclass(hints[key]):
            out += set_twice(hints[key], value, f"{where}.{key}")
        elif not any(default == e and type(default) is type(e) for e in EMPTY):
            out.append(f"{where}.{key}: {value!r} (code default {default!r}, {cls.__name__})")
    return out


@pytest.mark.parametrize("cls, path", [(WorldConfig, WORLD_YAML),
                                       *((c, CONFIGS / "experiments" / f"{c.SECTION}.yaml") for c in SECTIONS)])
def test_a_config_yaml_sets_only_what_its_class_leaves_unset(cls, path: Path):
    bad = set_twice(cls, read_yaml(path), path.name)
    assert not bad, "defaults set in YAML and in code (keep the one in code; docs/architecture.md, Defaults):\n" + \
        "\n".join(bad)


def test_the_statistics_defaults_are_the_rules_constants():
    """B0's rule and the tables' intervals read `evals.stats`, where the functions take them as defaults."""
    assert B0Config() == B0Config(stats.B0_PROMPTS, stats.B0_FALLBACK_PROMPTS, stats.CONFIDENCE, stats.RESAMPLES,
                                  stats.SEED)
    assert BootstrapConfig() == BootstrapConfig(stats.CONFIDENCE, stats.RESAMPLES, stats.SEED)


def test_the_scan_finds_a_default_set_twice():
    assert set_twice(WorldConfig, {"selector": {"beta": 0.5, "budget": None}, "eval_split": "test"}, "w") == [
        "w.selector.beta: 0.5 (code default 0.5, SelectorConfig)", "w.eval_split: 'test' (code default 'test', "
        "WorldConfig)"]
