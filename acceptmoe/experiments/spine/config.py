"""The config spine: one world, one small section per experiment, one strict loader.

    >>> from acceptmoe.experiments.spine.config import load_experiment
    >>> from acceptmoe.experiments.table1.config import Table1Config
    >>> cfg = load_experiment(Table1Config, "tiny", {"limit": 2})   # world + the table1 section + overrides
    >>> cfg.limit, cfg.world.tree.num_steps, [pair.task for pair in cfg.world.pairs()][:2]
    (2, 5, ['tiny-gsm', 'tiny-math'])
    >>> load_experiment(Table1Config, "tiny", {"world.tree.topk": "ten"})
    Traceback (most recent call last):
    ...
    acceptmoe.experiments.spine.config.ConfigKeyError: tiny.yaml.tree.topk: expected int, got 'ten' (str)

The world (`WorldConfig`) is everything the experiments share; an experiment's section (`Table1Config`,
`ThroughputConfig`, `CalibrationStudyConfig`, `ReplayConfig`) is a frozen dataclass with a `world` field and a
`SECTION` name. Their sources, later ones winning (the classes' defaults, `configs/world.yaml`, the preset;
`configs/experiments/<SECTION>.yaml`, the preset's `<SECTION>:` mapping, overrides as dotted keys) and where
each default lives: docs/architecture.md, "The config spine" and "Defaults".

`build(cls, data, where)` is the one loader: unknown keys, missing required keys, values of the wrong type and
values a config class rejects are `ConfigKeyError`s naming the dotted key (`tiny.yaml: world.tree.topk: expected
int, got 'ten' (str)`); YAML syntax errors name the file and line. Saved `config.json` files load through the
same function, so a run folder's frozen config is checked exactly like a fresh one.
"""
from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.tree import TreeShape
from acceptmoe.errors import UserError, shown
from acceptmoe.evals import stats
from acceptmoe.evals.tasks import TASKS
from acceptmoe.evals.tasks.from_file import register_file
from acceptmoe.methods import ConfigError, SelectorConfig, UnknownMethodError, Variant
from acceptmoe.serving.sglang.fleet import DEFAULT_POLICY, POLICIES
from acceptmoe.serving.sglang.memory import MEMORY_CAP
from acceptmoe.yamlfile import read_mapping

from .engines import check_engine
from .runs import REPO

CONFIGS = REPO / "configs"
PRESETS_DIR = CONFIGS / "presets"
WORLD_YAML = CONFIGS / "world.yaml"
RESPONSE_FORMATS = ("plain", "harmony")
FORBIDDEN_IN_NAMES = ("|", "/", "\\", " ")


class ConfigKeyError(UserError, ValueError):
    """A config key that is unknown, missing, of the wrong type or with an unusable value (dotted path named)."""


# ----- the generic loader -----
def read_yaml(path: Path) -> dict:
    """A YAML mapping (`acceptmoe.yamlfile`: a key given twice or an alias is refused, file and line named)."""
    return read_mapping(path, ConfigKeyError)


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


def build(cls: type, data: Any, where: str):
    """The frozen dataclass `cls` from plain data (YAML or JSON), every key and value checked."""
    if isinstance(data, cls):
        return data
    if cls in CUSTOM:
        return CUSTOM[cls](data, where)
    if not isinstance(data, dict):
        raise ConfigKeyError(f"{where}: expected a mapping of {cls.__name__} keys, got {shown(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigKeyError(f"{where}: unknown config key(s) {unknown} for {cls.__name__}; valid keys: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, f in fields.items():
        if name in data:
            kwargs[name] = _coerce(hints[name], data[name], f"{where}.{name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigKeyError(f"{where}.{name}: missing required key ({cls.__name__} has no default for it)")
    try:
        return cls(**kwargs)
    except UserError as exc:                   # a config class's own validation: say where
        raise type(exc)(f"{where}: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise ConfigKeyError(f"{where}: {exc}") from None


def _coerce(hint, value, where: str):
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and rest[0] in (int, float, str, bool):      # X | None: "expected null or X"
            try:
                return _coerce(rest[0], value, where)
            except ConfigKeyError as exc:
                raise ConfigKeyError(str(exc).replace(": expected ", ": expected null or ", 1)) from None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, where)
            except ConfigKeyError as exc:
                errors.append(str(exc))
        raise ConfigKeyError(errors[0] if len(errors) == 1 else
                             f"{where}: expected {_name(hint)}, got {shown(value)} ({type(value).__name__})")
    if origin is Literal:
        if value not in args:
            raise ConfigKeyError(f"{where}: expected one of {list(args)}, got {shown(value)}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigKeyError(f"{where}: expected a list, got {shown(value)} ({type(value).__name__})")
        if len(args) == 2 and args[1] is Ellipsis or not args:                 # tuple[X, ...]
            item = args[0] if args else Any
            return tuple(_coerce(item, v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):                                               # tuple[X, Y]
            raise ConfigKeyError(f"{where}: expected {len(args)} items, got {shown(value)}")
        return tuple(_coerce(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if hint is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigKeyError(f"{where}: expected a mapping, got {shown(value)} ({type(value).__name__})")
        return dict(value)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, where)
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint in (int, str, bool) and isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    raise ConfigKeyError(f"{where}: expected {_name(hint)}, got {shown(value)} ({type(value).__name__})")


def _name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _variant(data, where: str) -> Variant:
    """A variant in a config: a registry method name, or a mapping of `Variant` fields (`Variant.from_mapping`;
    saved configs of earlier releases also hold null `commitment` and `b0`, which are dropped)."""
    if isinstance(data, str):
        data = {"method": data}
    if not isinstance(data, dict):
        raise ConfigKeyError(f"{where}: a variant is a method name or a mapping, got {shown(data)}")
    data = {k: v for k, v in data.items() if not (k in ("commitment", "b0") and v is None)}
    try:
        return Variant.from_mapping(data)
    except UnknownMethodError as exc:          # keeps its type: the message lists the valid methods
        raise UnknownMethodError(f"{where}: {exc}") from None
    except (ConfigError, TypeError) as exc:    # the variant's own checks
        raise ConfigKeyError(f"{where}: {exc}") from None


CUSTOM: dict[type, Callable[[Any, str], Any]] = {Variant: _variant}


# ----- the world -----
class Pair(NamedTuple):
    """A (model, task) pair of the world: the key of per-pair files and results (never a joined string)."""
    model: str
    task: str


@dataclass(frozen=True)
class ModelEntry:
    """One model of the world: a target checkpoint with its EAGLE-3 draft and how its replies are read."""
    name: str                                   # short label used in row keys, folders and tables
    target: str                                 # target checkpoint: a folder (relative to the repo) or hub id
    draft: str | None = None                    # its EAGLE-3 draft: a folder or hub id; None: no draft (only
                                                # methods that do not speculate run; `train-draft` makes one)
    response_format: str = "plain"              # plain | harmony (GPT-OSS: grade the final channel only)
    chat_template_kwargs: dict = field(default_factory=dict)   # extra apply_chat_template arguments
    template_date: str | None = None            # a template that stamps today's date gets this one (YYYY-MM-DD)
    max_new_tokens: int | None = None           # this model's graded-generation cap (None: the world's)

    def __post_init__(self) -> None:
        bad = [c for c in FORBIDDEN_IN_NAMES if c in self.name]
        if not self.name or bad:
            raise ConfigKeyError(f"model name {self.name!r} must be non-empty without {bad}: it names folders and "
                                 f"row keys; use e.g. 'qwen3-30b'")
        if self.template_date is not None and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", self.template_date):
            raise ConfigKeyError(f"model {self.name}: template_date {self.template_date!r} is not YYYY-MM-DD")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ConfigKeyError(f"model {self.name}: max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.response_format not in RESPONSE_FORMATS:
            raise ConfigKeyError(f"model {self.name}: response_format {self.response_format!r} is not one of "
                                 f"{RESPONSE_FORMATS}")


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 256      # graded generations (accuracy, calibration, the sweep): stop at EOS or here
    timed_tokens: int = 256        # timed throughput generations: exactly this many tokens, EOS ignored
    batch: int = 16                # graded prompts handed to the engine at once (the native engine runs them
                                   # one after another; a serving engine keeps them in flight together)
    record_routes: bool = False    # save what every target pass sent to the experts, one file per generation
                                   # (`engine.routes`; routes/ in the run folder; read by `replay`)
    grading_workers: int | None = None   # processes grading replies while the engine generates the next batch
                                   # (None: `spine.grading.grading_workers` decides; 0: grade inline)

    def __post_init__(self) -> None:
        if min(self.max_new_tokens, self.timed_tokens, self.batch) < 1:
            raise ConfigKeyError(f"generation limits must be >= 1, got {self}")
        if self.grading_workers is not None and self.grading_workers < 0:
            raise ConfigKeyError(f"grading_workers must be >= 0 (0: grade inline), got {self.grading_workers}")


@dataclass(frozen=True)
class SamplingConfig:
    """How every generation of a run picks its tokens (docs/method.md, "Sampling"): the defaults are
    `GenerationOptions`' own (temperature 0: greedy), except `seed`: a run always seeds, and each request draws
    from its own stream, `GenerationOptions.for_request(model, task, split, prompt id)` of this seed, so a
    rerun or resume reproduces on one machine and no two prompts share a stream (the methods of one prompt
    share its stream)."""
    temperature: float = GenerationOptions.temperature
    top_k: int = GenerationOptions.top_k
    top_p: float = GenerationOptions.top_p
    seed: int = 0                                  # the run's seed (request seeds derive from it)

    def __post_init__(self) -> None:
        try:
            self.options()                         # GenerationOptions' checks, one place
        except UserError as exc:
            raise ConfigKeyError(str(exc)) from None

    @property
    def greedy(self) -> bool:
        return self.options().greedy

    def describe(self) -> str:
        """How the run decodes, in a table's words: "greedy", or the sampling settings."""
        if self.greedy:
            return "greedy"
        return (f"sampled at temperature {self.temperature:g} (top-k {self.top_k or 'off'}, top-p {self.top_p:g}, "
                f"seed {self.seed})")

    def options(self, *identity: str | int, **recording) -> GenerationOptions:
        """The options of one request named by `identity` (model, task, split, prompt id), with `recording`'s
        fields (ignore_eos, trace_layers, record_routes)."""
        base = GenerationOptions(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, seed=self.seed,
                                 **recording)
        return base.for_request(*identity) if identity else base


@dataclass(frozen=True)
class CalibrationConfig:
    prompts: int = 64                           # training prompts per (model, calibration source)
    split: str = "train"                        # the split calibration draws from (never the eval split)
    sources: dict = field(default_factory=dict)  # eval task -> task whose `split` calibrates it (default itself)

    def source(self, task: str) -> str:
        return self.sources.get(task, task)


@dataclass(frozen=True)
class B0Config:
    """docs/method.md's B0 rule; its defaults are the rule's constants in `acceptmoe.evals.stats`."""
    prompts: int = stats.B0_PROMPTS             # B0 from the first 50 evaluation prompts ...
    fallback_prompts: int = stats.B0_FALLBACK_PROMPTS   # ... or 100 if the interval crosses a rounding boundary
    confidence: float = stats.CONFIDENCE
    resamples: int = stats.RESAMPLES
    seed: int = stats.SEED


@dataclass(frozen=True)
class ServingConfig:
    """Settings of a serving engine (`engine: sglang`): its parallelism, graph and scheduling modes, and what its
    memory pools are sized for. The native engine ignores them."""
    tp: int = 1                                 # tensor parallelism (SGLang tp_size): GPUs per model copy
    dp: int = 1                                 # data parallelism: model copies serving the requests in flight
                                                # (accuracy runs across a node's GPUs)
    router: str = DEFAULT_POLICY                # dp > 1: the policy of SGLang's router in front of dp servers
                                                # (serving.sglang.fleet.POLICIES), or none: SGLang's dp_size
    cuda_graphs: bool = True                    # capture verify passes as CUDA graphs (GPU only)
    overlap: bool = False                       # SGLang's overlap scheduler; the paper measured with it off
    prompt_tokens: int = 2048                   # the longest prompt the KV pools are sized for
    memory_cap: float = MEMORY_CAP              # GPU: the most of the free device memory an engine may keep

    def __post_init__(self) -> None:
        if self.tp < 1 or self.dp < 1:
            raise ConfigKeyError(f"serving.tp and serving.dp must be >= 1, got {self}")
        if self.router not in (*POLICIES, "none"):
            raise ConfigKeyError(f"serving.router: {self.router!r} is not a router policy; valid: "
                                 f"{', '.join(POLICIES)}, or none (SGLang's in-process dp controller)")
        if self.prompt_tokens < 1 or not 0 < self.memory_cap <= 1:
            raise ConfigKeyError(f"serving.prompt_tokens must be >= 1 and serving.memory_cap in (0, 1], got {self}")

    def settings(self, world: WorldConfig, model: ModelEntry) -> dict:
        """Keyword settings for the engine's opener: parallelism, graphs and overlap, and its pools: the most
        requests any phase keeps in flight (`generation.batch`), each up to `prompt_tokens` plus the longest
        generation of `model` (graded or timed)."""
        out = {"tp": self.tp, "dp": self.dp, "router": None if self.router == "none" else self.router,
               "overlap": self.overlap, "memory_cap": self.memory_cap,
               "requests": world.generation.batch,
               "request_tokens": self.prompt_tokens + max(world.max_new_tokens(model), world.generation.timed_tokens)}
        if not self.cuda_graphs or not str(world.device).startswith("cuda"):
            out["disable_cuda_graph"] = True
        return out


@dataclass(frozen=True)
class BootstrapConfig:
    """Intervals over prompts in the tables; defaults from `acceptmoe.evals.stats`."""
    confidence: float = stats.CONFIDENCE
    resamples: int = stats.RESAMPLES
    seed: int = stats.SEED


@dataclass(frozen=True)
class WorldConfig:
    preset: str
    models: tuple[ModelEntry, ...]
    tasks: tuple[str, ...]
    task_files: tuple[str, ...] = ()            # YAML task declarations (evals.tasks.from_file), registered first
    engine: str = "native"                      # which EngineBackend runs the models (experiments.engines)
    eval_split: str = "test"
    device: str = "cpu"
    dtype: str = "float32"
    threads: int | None = None                  # torch CPU threads (None: torch's default)
    tree: TreeShape = TreeShape()
    selector: SelectorConfig = SelectorConfig()
    generation: GenerationConfig = GenerationConfig()
    sampling: SamplingConfig = SamplingConfig()
    calibration: CalibrationConfig = CalibrationConfig()
    b0: B0Config = B0Config()
    bootstrap: BootstrapConfig = BootstrapConfig()
    serving: ServingConfig = ServingConfig()
    verify_cost: str | None = None              # verify-cost profile JSON for admitting methods (profile-verify;
                                                # None: the committed tiny-world CPU profile, costs/profiles)

    def pairs(self) -> list[Pair]:
        """Every (model, task) pair, models in order, then tasks."""
        return [Pair(m.name, t) for m in self.models for t in self.tasks]

    def max_new_tokens(self, model: ModelEntry) -> int:
        """The graded-generation cap of `model` (its own, else the world's)."""
        return model.max_new_tokens or self.generation.max_new_tokens

    def __post_init__(self) -> None:
        check_engine(self.engine)
        if self.generation.record_routes:
            check_engine(self.engine, routes=True)
        if not self.sampling.greedy:
            check_engine(self.engine, sampling_on=self.device)
        names = [m.name for m in self.models]
        if not names or len(set(names)) != len(names):
            raise ConfigKeyError(f"models need unique names, got {names}")
        for f in self.task_files:                  # absolute, or relative to the repository like model folders
            register_file(f if Path(f).is_absolute() else REPO / f)
        for t in self.tasks + tuple(self.calibration.sources.values()):
            if t not in TASKS:
                raise ConfigKeyError(str(TASKS.unknown(t)))
        if self.calibration.prompts < 1:
            raise ConfigKeyError("calibration.prompts must be >= 1")
        if self.calibration.split == self.eval_split:
            raise ConfigKeyError(f"calibration.split {self.calibration.split!r} is the evaluation split: p_hat must "
                                 f"never come from evaluation prompts")
        if self.selector.budget is not None or self.selector.p_hat is not None:
            raise ConfigKeyError("selector.budget and selector.p_hat are set by the runner (B0 and the calibrated "
                                 "commitment table): remove them from the config")


# ----- loading -----
def preset_path(preset: str | Path) -> Path:
    """A preset name (configs/presets/<name>.yaml) or a path to a preset YAML."""
    p = Path(preset)
    if p.suffix in (".yaml", ".yml"):
        return p
    path = PRESETS_DIR / f"{preset}.yaml"
    if not path.is_file():
        known = sorted(x.stem for x in PRESETS_DIR.glob("*.yaml"))
        raise ConfigKeyError(f"no preset {str(preset)!r} ({path}); known presets: {known}, or give a YAML path")
    return path


@functools.lru_cache(maxsize=1)
def sections() -> tuple[str, ...]:
    """The experiment section names a preset may hold (one per configs/experiments/*.yaml)."""
    return tuple(sorted(p.stem for p in (CONFIGS / "experiments").glob("*.yaml")))


def beside(folder: Path, value):
    """A path a YAML in `folder` names: a relative one that exists there is that file or folder (kept
    relative to the repository when inside it, else absolute); anything else stays as written (a folder
    relative to the repository, or a hub id)."""
    if not isinstance(value, str) or Path(value).is_absolute() or not (folder / value).exists():
        return value
    found = (folder / value).resolve()
    return str(found.relative_to(REPO)) if found.is_relative_to(REPO) else str(found)


def _paths_beside(data: dict, folder: Path) -> dict:
    """The preset's model folders and task files, relative paths read against the preset's own folder."""
    out = dict(data)
    if isinstance(out.get("models"), list):
        out["models"] = [{**m, **{k: beside(folder, m[k]) for k in ("target", "draft") if k in m}}
                         if isinstance(m, dict) else m for m in out["models"]]
    if isinstance(out.get("task_files"), list):
        out["task_files"] = [beside(folder, f) for f in out["task_files"]]
    return out


def load_world(preset: str | Path, overrides: dict | None = None) -> WorldConfig:
    """The world of `preset` (configs/world.yaml, then the preset without its sections, then overrides); a
    relative path in the preset that exists beside it is read there (`beside`)."""
    path = preset_path(preset)
    data = _paths_beside({k: v for k, v in read_yaml(path).items() if k not in sections()}, path.parent)
    return build(WorldConfig, deep_merge(deep_merge(read_yaml(WORLD_YAML), data), dotted(overrides or {})),
                 f"{path.name}")


def load_experiment(cls: type, preset: str | Path, overrides: dict | None = None, **fixed):
    """`cls` (an experiment section) from the world of `preset`, the section's YAML, the preset's section and
    `overrides` (dotted keys; `world.`-prefixed ones change the world); `fixed` are values the command sets
    itself (e.g. throughput phases)."""
    path = preset_path(preset)
    overrides = dict(overrides or {})
    world = {k.split(".", 1)[1]: overrides.pop(k) for k in list(overrides) if k.startswith("world.")}
    if "world" in overrides:
        raise ConfigKeyError("override world keys one by one with dotted keys, e.g. world.tasks")
    section = read_yaml(path).get(cls.SECTION) or {}
    data = deep_merge(deep_merge(read_yaml(CONFIGS / "experiments" / f"{cls.SECTION}.yaml"), section),
                      dotted(overrides))
    return build(cls, {**data, **fixed, "world": load_world(path, world)}, f"{path.name}:{cls.SECTION}")


def from_saved(cls: type, saved: dict):
    """An experiment's config from its run folder's config.json ("config"), checked like a fresh one.
    Run folders written before the world/section split are upgraded on the fly (`upgrade`)."""
    return build(cls, upgrade(saved), "config.json")


_WORLD_KEYS = ("preset", "models", "tasks", "eval_split", "device", "dtype", "threads", "tree", "selector",
               "calibration", "b0", "bootstrap")


def upgrade(saved: dict) -> dict:
    """A saved config in the current layout. Before the world/section split, Table 1's config was flat (world
    keys beside methods, limit, max_new_tokens) and other experiments embedded it as `table1`; timed phases
    carried their own `max_new_tokens`. Values are kept; only their places change."""
    if "world" in saved:
        return saved
    if "table1" not in saved:                                        # a flat Table 1 config
        world, section = _old_world(saved)
        return {**section, "world": world}
    out = {k: v for k, v in saved.items() if k not in ("table1", "preset")}
    world, old_t1 = _old_world(saved["table1"])
    for phase in ("resident", "offload"):
        if phase in out:
            out[phase] = dict(out[phase])
            world["generation"]["timed_tokens"] = out[phase].pop("max_new_tokens", GenerationConfig.timed_tokens)
    if "sweep" in out:
        out["sweep"] = {k: v for k, v in out["sweep"].items() if k != "max_new_tokens"}
        out["sweep"]["prompts"] = out["sweep"].get("prompts") or old_t1.get("limit")
    if "betas" in out:                                               # the calibration study
        out["prompts"] = out.get("prompts") or old_t1.get("limit")
    return {**out, "world": world}


def _old_world(flat: dict) -> tuple[dict, dict]:
    """(world, Table 1 section) from a flat pre-split Table 1 config."""
    world = {k: flat[k] for k in _WORLD_KEYS if k in flat}
    calibration = dict(world.get("calibration", {}))
    cal_tokens = calibration.pop("max_new_tokens", None)
    if cal_tokens not in (None, flat.get("max_new_tokens")):
        raise ConfigKeyError(f"config.json: calibration.max_new_tokens {cal_tokens} differs from max_new_tokens; "
                             f"this run predates one generation limit per world and cannot be upgraded")
    world["calibration"] = calibration
    world["generation"] = {"max_new_tokens": flat.get("max_new_tokens", GenerationConfig.max_new_tokens)}
    section = {k: flat[k] for k in ("methods", "limit", "trace_layers") if k in flat}
    return world, section
