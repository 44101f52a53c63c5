"""The Table 1 experiment's frozen config: experiment defaults + a preset + command-line overrides.

    cfg = load_table1_config("tiny", {"limit": 2})

Sources, later ones winning (nested sections merge key by key):
1. `configs/experiments/table1.yaml`: experiment-level settings (methods, calibration sources, the B0
   rule, bootstrap settings, selector knobs).
2. `configs/presets/<preset>.yaml`: the world the experiment runs in (models, tasks, device, dtype, tree
   shape) plus its `table1:` section (prompt limit, max_new_tokens, calibration prompts). A preset may also
   hold sections for other experiments (`EXPERIMENT_SECTIONS`); they are ignored here.
3. overrides (dotted keys allowed), e.g. from `--limit` and `--methods`.

Unknown keys anywhere are errors that list the valid keys.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from acceptmoe.errors import UserError

from acceptmoe.evals.tasks import TASK_MODULES
from acceptmoe.experiments.runs import REPO, ConfigKeyError, from_dict
from acceptmoe.engine.tree import TreeShape
from acceptmoe.methods import B0_METHOD, METHODS, SelectorConfig, get_method

PRESETS_DIR = REPO / "configs" / "presets"
EXPERIMENT_YAML = REPO / "configs" / "experiments" / "table1.yaml"
EXPERIMENT_SECTIONS = ("table1", "throughput", "calibration-study", "fig3", "fig4", "table2", "fig5", "sweep")
RESPONSE_FORMATS = ("plain", "harmony")
FORBIDDEN_IN_NAMES = ("|", "/", "\\", " ")


class Table1ConfigError(UserError, ValueError):
    """A Table 1 config that cannot run; the message names the field and the fix."""


@dataclass(frozen=True)
class ModelSpec:
    name: str                                   # short label used in row keys, folders and tables
    target: str                                 # target checkpoint: a folder (relative to the repo) or hub id
    draft: str                                  # its EAGLE-3 draft: a folder or hub id
    response_format: str = "plain"              # plain | harmony (GPT-OSS: grade the final channel only)
    chat_template_kwargs: dict = field(default_factory=dict)   # extra apply_chat_template arguments

    def __post_init__(self) -> None:
        bad = [c for c in FORBIDDEN_IN_NAMES if c in self.name]
        if not self.name or bad:
            raise Table1ConfigError(f"model name {self.name!r} must be non-empty without {bad}: it names "
                                    f"folders and row keys; use e.g. 'qwen3-30b'")
        if self.response_format not in RESPONSE_FORMATS:
            raise Table1ConfigError(f"model {self.name}: response_format {self.response_format!r} is not one "
                                    f"of {RESPONSE_FORMATS}")


@dataclass(frozen=True)
class CalibrationConfig:
    prompts: int = 64                           # training prompts per (model, calibration source)
    max_new_tokens: int | None = None           # None = the experiment's max_new_tokens
    split: str = "train"                        # the split calibration draws from (never the eval split)
    sources: dict = field(default_factory=dict)  # eval task -> task whose `split` calibrates it (default itself)

    def source(self, task: str) -> str:
        return self.sources.get(task, task)


@dataclass(frozen=True)
class B0Config:
    prompts: int = 50                           # B0 from the first 50 evaluation prompts ...
    fallback_prompts: int = 100                 # ... or 100 if the interval crosses a rounding boundary
    confidence: float = 0.95
    resamples: int = 10_000
    seed: int = 0


@dataclass(frozen=True)
class BootstrapConfig:
    confidence: float = 0.95                    # intervals over prompts in the table
    resamples: int = 10_000
    seed: int = 0


@dataclass(frozen=True)
class Table1Config:
    preset: str
    models: tuple[ModelSpec, ...]
    tasks: tuple[str, ...]
    max_new_tokens: int
    limit: int | None = None                    # evaluation prompts per task (None: the whole split)
    eval_split: str = "test"
    device: str = "cpu"
    dtype: str = "float32"
    threads: int | None = None                  # torch CPU threads (None: torch's default)
    tree: TreeShape = TreeShape()
    methods: tuple[str, ...] = tuple(METHODS)
    selector: SelectorConfig = SelectorConfig()
    trace_layers: bool = True                   # per-layer trace fields for every method (acceptmoe: always)
    calibration: CalibrationConfig = CalibrationConfig()
    b0: B0Config = B0Config()
    bootstrap: BootstrapConfig = BootstrapConfig()

    def __post_init__(self) -> None:
        models = tuple(m if isinstance(m, ModelSpec) else from_dict(ModelSpec, m, "models[]") for m in self.models)
        object.__setattr__(self, "models", models)
        object.__setattr__(self, "tasks", tuple(self.tasks))
        object.__setattr__(self, "methods", tuple(self.methods))
        _validate(self)


def _validate(cfg: Table1Config) -> None:
    names = [m.name for m in cfg.models]
    if not names or len(set(names)) != len(names):
        raise Table1ConfigError(f"models need unique names, got {names}")
    for t in cfg.tasks + tuple(cfg.calibration.sources.values()):
        if t not in TASK_MODULES:
            raise Table1ConfigError(f"unknown task {t!r}; valid tasks: {', '.join(TASK_MODULES)}")
    for m in cfg.methods:
        get_method(m)
    if len(set(cfg.methods)) != len(cfg.methods) or not cfg.methods:
        raise Table1ConfigError(f"methods must be a non-empty list without repeats, got {list(cfg.methods)}")
    fixed = [m for m in cfg.methods if METHODS[m].needs_budget]
    if fixed and B0_METHOD not in cfg.methods:
        raise Table1ConfigError(f"{fixed} run at the budget B0, which comes from {B0_METHOD}'s traces: "
                                f"add {B0_METHOD} to methods")
    if cfg.limit is not None and cfg.limit < 1:
        raise Table1ConfigError(f"limit must be a positive number of prompts or null, got {cfg.limit}")
    if cfg.max_new_tokens < 1 or cfg.calibration.prompts < 1:
        raise Table1ConfigError("max_new_tokens and calibration.prompts must be >= 1")
    if cfg.selector.budget is not None or cfg.selector.p_hat is not None:
        raise Table1ConfigError("selector.budget and selector.p_hat are set by the runner (B0 and the "
                                "calibrated commitment table): remove them from the config")
    if cfg.calibration.split == cfg.eval_split:
        raise Table1ConfigError(f"calibration.split {cfg.calibration.split!r} is the evaluation split: "
                                f"p_hat must never come from evaluation prompts")


# ----- loading -----
def preset_path(preset: str | Path) -> Path:
    """A preset name (configs/presets/<name>.yaml) or a path to a preset YAML."""
    p = Path(preset)
    if p.suffix in (".yaml", ".yml"):
        return p
    path = PRESETS_DIR / f"{preset}.yaml"
    if not path.is_file():
        known = sorted(x.stem for x in PRESETS_DIR.glob("*.yaml"))
        raise FileNotFoundError(f"no preset {preset!r} ({path}); known presets: {known}")
    return path


def read_yaml(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} not found")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigKeyError(f"{path}: the top level must be a mapping of config keys")
    return data


def deep_merge(base: dict, top: dict) -> dict:
    """`top` over `base`; nested mappings merge key by key, everything else is replaced."""
    out = dict(base)
    for k, v in top.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def dotted(overrides: dict) -> dict:
    """{"calibration.prompts": 8} -> {"calibration": {"prompts": 8}}."""
    out: dict = {}
    for key, value in overrides.items():
        node = out
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def load_table1_config(preset: str | Path, overrides: dict | None = None,
                       experiment_yaml: Path = EXPERIMENT_YAML) -> Table1Config:
    path = preset_path(preset)
    pre = read_yaml(path)
    section = pre.pop("table1", None) or {}
    for other in EXPERIMENT_SECTIONS:
        pre.pop(other, None)
    merged = deep_merge(deep_merge(deep_merge(read_yaml(experiment_yaml), pre), section), dotted(overrides or {}))
    return from_dict(Table1Config, merged, where=f"{experiment_yaml.name} + {path.name}")


def config_from_saved(saved: dict) -> Table1Config:
    """The config of an existing run folder (its config.json's "config")."""
    return from_dict(Table1Config, saved, where="config.json")

