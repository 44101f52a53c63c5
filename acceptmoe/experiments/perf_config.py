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

A variant is a method name from the registry, or a mapping with the fields of `acceptmoe.methods.Variant`
(`{method: acceptmoe, prune: false}` is AcceptMoE without residency-aware pruning); configs hold `Variant`
objects, and the sweep builds its own (`sweep.method` at each of `sweep.budgets`). Unknown keys anywhere are
errors that list the valid keys.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from acceptmoe.errors import UserError
from acceptmoe.experiments.runs import REPO, from_dict, to_jsonable
from acceptmoe.methods import METHODS, Variant, get_method

from .config import Table1Config, deep_merge, dotted, load_table1_config, preset_path, read_yaml

EXPERIMENT_YAML = REPO / "configs" / "experiments" / "throughput.yaml"
PRESET_SECTION = "throughput"
PHASES = ("resident", "offload-timed", "offload-counters", "sweep")


class ThroughputConfigError(UserError, ValueError):
    """A throughput config that cannot run; the message names the field and the fix."""


def variant_of(item, where: str) -> Variant:
    """A config item -> Variant: a registry method name, or a mapping of Variant fields."""
    if isinstance(item, Variant):
        return item
    if isinstance(item, str):
        return Variant(item)
    if isinstance(item, dict):
        fields = {"method", "budget", "prune", "overrides", "tag", "commitment", "b0"}
        unknown = sorted(set(item) - fields)
        if unknown or "method" not in item:
            raise ThroughputConfigError(f"{where}: a variant mapping needs `method` and may have "
                                        f"{sorted(fields - {'commitment', 'b0'})}; got {sorted(item)}")
        data = dict(item)
        if isinstance(data.get("overrides"), dict):
            data["overrides"] = tuple(data["overrides"].items())
        return Variant(**data)
    raise ThroughputConfigError(f"{where}: a variant is a method name or a mapping, got {item!r}")


@dataclass(frozen=True)
class ResidentConfig:
    """Resident throughput (Figure 3): every expert on the device."""
    variants: tuple[Variant, ...] = ()    # fixed-budget methods run at B0 (the YAML lists the paper's set)
    prompts: int = 50                       # evaluation examples 0 .. prompts-1, in order
    warmup_index: int | None = None         # the untimed warm-up example (None: example `prompts`, i.e. 50)
    max_new_tokens: int = 256               # exactly this many tokens, EOS ignored
    repetitions: int = 3                    # each from a fresh engine, variant order rotated


@dataclass(frozen=True)
class OffloadConfig:
    """Offloaded throughput (Figure 4) and its instrumented counters run (Table 2)."""
    variants: tuple[Variant, ...] = ()    # the YAML lists the paper's set
    slots: int = 48                         # X: device expert slots per MoE layer
    prompts: int = 20                       # the frozen prompts: evaluation examples 0 .. prompts-1
    warmup_index: int | None = None
    max_new_tokens: int = 256
    repetitions: int = 3                    # timed repetitions (median reported); counters: one more run


@dataclass(frozen=True)
class SweepConfig:
    """Fixed-budget sweep (Figure 5): AcceptMoE-B at each budget, AcceptMoE and references, graded."""
    budgets: tuple[int, ...] = (16, 20, 24, 25, 28, 32, 40, 48)
    method: str = ""                        # the fixed-budget method swept over `budgets`
    references: tuple[Variant, ...] = ()    # run once each beside the budgets
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
        for name, sec in (("resident", self.resident), ("offload", self.offload), ("sweep", self.sweep)):
            field = "references" if name == "sweep" else "variants"
            items = tuple(variant_of(v, f"{name}.{field}[{i}]") for i, v in enumerate(getattr(sec, field)))
            object.__setattr__(sec, field, items)
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

    def variants(self, phase: str) -> tuple[Variant, ...]:
        if phase == "resident":
            return self.resident.variants
        if phase.startswith("offload"):
            return self.offload.variants
        return self.sweep_fixed() + self.sweep.references

    def names(self, phase: str) -> tuple[str, ...]:
        """The variants' row keys for a phase."""
        return tuple(v.name for v in self.variants(phase))

    def sweep_fixed(self) -> tuple[Variant, ...]:
        return tuple(Variant(self.sweep.method, budget=b) for b in self.sweep.budgets)

    def sweep_self_sized(self) -> str | None:
        """The name of the self-sizing reference of the sweep (its star in Figure 5), if any."""
        return next((v.name for v in self.sweep.references if v.spec.sizing == "self" and not v.overrides), None)

    def pruning_pair(self) -> tuple[str, str] | None:
        """(pruning on, pruning off) variant names of the offload phases, if both are configured."""
        on = [v for v in self.offload.variants if v.prunes("offloaded")]
        for v_on in on:
            for v_off in self.offload.variants:
                if v_off.method == v_on.method and v_off.prune is False and v_off.overrides == v_on.overrides:
                    return v_on.name, v_off.name
        return None

    def sweep_roles(self):
        """The sweep's roles by variant name (fixed budgets, self-sized reference) for tables and figures."""
        from .perf_tables import SweepRoles
        return SweepRoles(tuple(v.name for v in self.sweep_fixed()), get_method(self.sweep.method).label,
                          self.sweep_self_sized())

    def labels(self) -> dict[str, str]:
        """name -> display label for every variant of every phase."""
        return {v.name: v.label for p in PHASES for v in self.variants(p)}


def _validate(cfg: ThroughputConfig) -> None:
    bad = [p for p in cfg.phases if p not in PHASES]
    if bad or not cfg.phases:
        raise ThroughputConfigError(f"phases {list(cfg.phases)}: each must be one of {PHASES}")
    for sec in (cfg.resident, cfg.offload):
        names = [v.name for v in sec.variants]
        if len(set(names)) != len(names) or not names:
            raise ThroughputConfigError(f"variants must be a non-empty list without repeats, got {names}")
        if min(sec.prompts, sec.max_new_tokens, sec.repetitions) < 1:
            raise ThroughputConfigError("prompts, max_new_tokens and repetitions must be >= 1")
    for r in cfg.sweep.references:
        if r.spec.needs_budget:
            raise ThroughputConfigError(f"sweep.references: {r.name!r} needs a budget; the sweep's budgets cover it")
    if not cfg.sweep.method or not get_method(cfg.sweep.method).needs_budget:
        raise ThroughputConfigError(f"sweep.method {cfg.sweep.method!r} does not take a budget; use one of "
                                    f"{[n for n, s in METHODS.items() if s.needs_budget]}")
    if cfg.limit is not None and cfg.limit < 1:
        raise ThroughputConfigError(f"limit must be a positive number of prompts or null, got {cfg.limit}")
    if any(b < 1 for b in cfg.sweep.budgets) or not cfg.sweep.budgets:
        raise ThroughputConfigError(f"sweep.budgets must be positive expert counts, got {list(cfg.sweep.budgets)}")
    if cfg.offload.slots < 1:
        raise ThroughputConfigError(f"offload.slots must be >= 1, got {cfg.offload.slots}")


def needs_budgets(cfg: ThroughputConfig) -> bool:
    """True when a phase runs a method that needs p_hat or B0."""
    phases = [p for p in cfg.phases if p != "sweep"]
    variants = [v for p in phases for v in cfg.variants(p)] + (list(cfg.variants("sweep")) if "sweep" in cfg.phases else [])
    return any((v.spec.needs_commitment or v.spec.needs_budget) for v in variants)


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
