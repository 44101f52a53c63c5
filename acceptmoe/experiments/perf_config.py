"""The throughput experiments' frozen config: resident and offloaded throughput, the fixed-budget sweep.

    cfg = load_throughput_config("tiny", phases=("resident",), overrides={"limit": 3})

Sources, later ones winning (nested sections merge key by key):
1. `configs/experiments/throughput.yaml`: the paper's protocol (methods, repetitions, 256 tokens, X = 48,
   sweep budgets).
2. the preset's `throughput:` section (its sizes: prompts per pair, budgets for its expert count).
3. overrides (dotted keys), e.g. `--limit`.

The world (models, tasks, device, dtype, threads, tree, selector) and the calibration and B0 rules are the
preset's Table 1 config, embedded as `table1`, so throughput runs use exactly Table 1's p_hat and B0
(read from a Table 1 run with `budgets_from`, or computed by the same code into the run's `budgets/`).

A variant is a method name, or `acceptmoe-noprune` (AcceptMoE without residency-aware pruning). Unknown
keys anywhere are errors that list the valid keys.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from acceptmoe.experiments.runs import REPO, from_dict, to_jsonable
from acceptmoe.methods import METHODS, MethodSpec, get_method

from .config import Table1Config, deep_merge, dotted, load_table1_config, preset_path, read_yaml

EXPERIMENT_YAML = REPO / "configs" / "experiments" / "throughput.yaml"
PRESET_SECTION = "throughput"
PHASES = ("resident", "offload-timed", "offload-counters", "sweep")
EXTRA_VARIANTS = {"acceptmoe-noprune": ("acceptmoe", False)}   # name -> (method, prune)


class ThroughputConfigError(ValueError):
    """A throughput config that cannot run; the message names the field and the fix."""


def variant_method(variant: str) -> tuple[str, bool | None]:
    """(method, prune) of a variant; prune None = the engine's default (on for acceptmoe when offloaded)."""
    if variant in EXTRA_VARIANTS:
        return EXTRA_VARIANTS[variant]
    if variant not in METHODS:
        raise ThroughputConfigError(f"unknown variant {variant!r}; valid: {', '.join([*METHODS, *EXTRA_VARIANTS])}")
    return variant, None


def parse_variant(label: str) -> tuple[str, bool | None, int | None]:
    """(method, prune, budget) of a variant label; `acceptmoe-b@24` fixes the budget at 24 (the sweep)."""
    name, _, budget = label.partition("@")
    method, prune = variant_method(name)
    return method, prune, int(budget) if budget else None


def variant_spec(variant: str) -> MethodSpec:
    return get_method(parse_variant(variant)[0])


@dataclass(frozen=True)
class ResidentConfig:
    """Resident throughput (Figure 3): every expert on the device."""
    variants: tuple[str, ...] = ("vanilla-ar", "standard-sd", "moe-spec", "acceptmoe-b", "acceptmoe")
    prompts: int = 50                       # evaluation examples 0 .. prompts-1, in order
    warmup_index: int | None = None         # the untimed warm-up example (None: example `prompts`, i.e. 50)
    max_new_tokens: int = 256               # exactly this many tokens, EOS ignored
    repetitions: int = 3                    # each from a fresh engine, variant order rotated


@dataclass(frozen=True)
class OffloadConfig:
    """Offloaded throughput (Figure 4) and its instrumented counters run (Table 2)."""
    variants: tuple[str, ...] = ("vanilla-ar", "standard-sd", "acceptmoe", "acceptmoe-noprune")
    slots: int = 48                         # X: device expert slots per MoE layer
    prompts: int = 20                       # the frozen prompts: evaluation examples 0 .. prompts-1
    warmup_index: int | None = None
    max_new_tokens: int = 256
    repetitions: int = 3                    # timed repetitions (median reported); counters: one more run


@dataclass(frozen=True)
class SweepConfig:
    """Fixed-budget sweep (Figure 5): AcceptMoE-B at each budget, AcceptMoE and references, graded."""
    budgets: tuple[int, ...] = (16, 20, 24, 28, 32, 40, 48)
    references: tuple[str, ...] = ("standard-sd", "acceptmoe")   # run once each beside the budgets
    prompts: int | None = None              # evaluation prompts per pair (None: the Table 1 limit)
    max_new_tokens: int | None = None       # None: Table 1's max_new_tokens (stops at EOS, like Table 1)


@dataclass(frozen=True)
class ThroughputConfig:
    preset: str
    phases: tuple[str, ...]
    table1: Table1Config
    limit: int | None = None                # caps every phase's prompts and the B0 prompts computed here
    budgets_from: str | None = None         # a Table 1 run folder: reuse its calibration/ and b0/ files
    resident: ResidentConfig = ResidentConfig()
    offload: OffloadConfig = OffloadConfig()
    sweep: SweepConfig = SweepConfig()
    bootstrap_resamples: int = 2000         # intervals over prompts (sweep accuracy, pruning accuracy)

    def __post_init__(self) -> None:
        object.__setattr__(self, "phases", tuple(self.phases))
        _validate(self)

    def prompts(self, phase: str) -> int:
        """Evaluation prompts per pair of a phase, after --limit."""
        n = {"resident": self.resident.prompts, "offload-timed": self.offload.prompts,
             "offload-counters": self.offload.prompts,
             "sweep": self.sweep.prompts or self.table1.limit or self.resident.prompts}[phase]
        return min(n, self.limit) if self.limit else n

    def warmup_index(self, phase: str) -> int:
        sec = self.resident if phase == "resident" else self.offload
        return sec.prompts if sec.warmup_index is None else sec.warmup_index

    def sweep_max_new_tokens(self) -> int:
        return self.sweep.max_new_tokens or self.table1.max_new_tokens

    def variants(self, phase: str) -> tuple[str, ...]:
        if phase == "resident":
            return self.resident.variants
        if phase.startswith("offload"):
            return self.offload.variants
        return tuple(f"acceptmoe-b@{b}" for b in self.sweep.budgets) + self.sweep.references


def _validate(cfg: ThroughputConfig) -> None:
    bad = [p for p in cfg.phases if p not in PHASES]
    if bad or not cfg.phases:
        raise ThroughputConfigError(f"phases {list(cfg.phases)}: each must be one of {PHASES}")
    for sec in (cfg.resident, cfg.offload):
        for v in sec.variants:
            variant_method(v)
        if len(set(sec.variants)) != len(sec.variants) or not sec.variants:
            raise ThroughputConfigError(f"variants must be a non-empty list without repeats, got {list(sec.variants)}")
        if min(sec.prompts, sec.max_new_tokens, sec.repetitions) < 1:
            raise ThroughputConfigError("prompts, max_new_tokens and repetitions must be >= 1")
    for r in cfg.sweep.references:
        if get_method(r).needs_budget:
            raise ThroughputConfigError(f"sweep.references: {r!r} needs a budget; the sweep's budgets cover it")
    if cfg.limit is not None and cfg.limit < 1:
        raise ThroughputConfigError(f"limit must be a positive number of prompts or null, got {cfg.limit}")
    if any(b < 1 for b in cfg.sweep.budgets) or not cfg.sweep.budgets:
        raise ThroughputConfigError(f"sweep.budgets must be positive expert counts, got {list(cfg.sweep.budgets)}")
    if cfg.offload.slots < 1:
        raise ThroughputConfigError(f"offload.slots must be >= 1, got {cfg.offload.slots}")


def needs_budgets(cfg: ThroughputConfig) -> bool:
    """True when a phase runs a method that needs p_hat or B0."""
    phases = [p for p in cfg.phases if p != "sweep"]
    variants = [v for p in phases for v in cfg.variants(p)] + (["acceptmoe"] if "sweep" in cfg.phases else [])
    return any(variant_spec(v).needs_commitment or variant_spec(v).needs_budget for v in variants)


def load_throughput_config(preset: str | Path, phases: tuple[str, ...], overrides: dict | None = None,
                           experiment_yaml: Path = EXPERIMENT_YAML) -> ThroughputConfig:
    path = preset_path(preset)
    table1 = load_table1_config(path)
    section = read_yaml(path).get(PRESET_SECTION) or {}
    merged = deep_merge(deep_merge(read_yaml(experiment_yaml), section), dotted(overrides or {}))
    merged.update(preset=table1.preset, phases=list(phases), table1=to_jsonable(table1))
    return from_dict(ThroughputConfig, merged, where=f"{experiment_yaml.name} + {path.name}:{PRESET_SECTION}")


def throughput_config_from_saved(saved: dict) -> ThroughputConfig:
    return from_dict(ThroughputConfig, saved, where="config.json")
