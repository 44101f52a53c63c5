"""The throughput experiments' section of the config spine: resident and offloaded throughput, the sweep.

    >>> from acceptmoe.experiments.throughput.config import load_throughput_config
    >>> cfg = load_throughput_config("tiny", phases=("resident",), overrides={"limit": 3})
    >>> cfg.prompts("resident"), cfg.names("resident"), cfg.world.generation.timed_tokens, cfg.prompt_set.order
    (3, ('vanilla-ar', 'standard-sd', 'moe-spec', 'acceptmoe-b', 'acceptmoe', 'standard-sd@placebo'), 30, 'longest_reply')

Sources: the world of the preset, then `configs/experiments/throughput.yaml` (the paper's protocol: methods,
repetitions, X = 48, sweep budgets), the preset's `throughput:` section (its sizes), overrides (dotted keys).
Throughput runs use the world's p_hat and B0 rules exactly as Table 1 does (read from a Table 1 run with
`budgets_from`, or computed by the same code into the run's `budgets/`). Timed generations are exactly
`world.generation.timed_tokens` long; graded ones (the sweep, the counters run's accuracy) stop at EOS.

A variant is a method name from the registry, or a mapping with the fields of `acceptmoe.methods.Variant`
(`{method: acceptmoe, prune: false}` is AcceptMoE without residency-aware pruning); configs hold `Variant`
objects, and the sweep builds its own (`sweep.method` at each of `sweep.budgets`).
"""
from __future__ import annotations

from dataclasses import dataclass

from acceptmoe.costs.fit import num_experts
from acceptmoe.methods import B0_METHOD, BASELINE, CALIBRATION, METHODS, Sizing, Variant, get_method

from ..spine.config import ConfigKeyError, WorldConfig, from_saved, load_experiment
from ..spine.engines import check_engine
from .records import SweepRoles
from .timing import PLACEBO

PHASES = ("resident", "offload-timed", "offload-counters", "sweep")
ThroughputConfigError = ConfigKeyError


@dataclass(frozen=True)
class PhaseConfig:
    """One timed phase: resident (Figure 3, `slots` null) or offloaded (Figure 4, X = `slots` per MoE layer)."""
    variants: tuple[Variant, ...] = ()    # fixed-budget methods run at B0 (the YAML lists the paper's set)
    prompts: int = 50                       # evaluation examples 0 .. prompts-1, in order
    warmup_index: int | None = None         # the untimed warm-up example (None: example `prompts`)
    repetitions: int = 5                    # each from a fresh engine, variants interleaved per prompt
    slots: int | None = None                # X device expert slots per MoE layer (offload only)


@dataclass(frozen=True)
class OffloadPhaseConfig(PhaseConfig):
    """The offloaded phase (docs/method.md, "Experimental protocol": offload): its own protocol's defaults."""
    prompts: int = 20                       # the frozen prompts: evaluation examples 0-19
    slots: int | None = 48                  # X of 128 experts per MoE layer on the device


@dataclass(frozen=True)
class SweepConfig:
    """Fixed-budget sweep (Figure 5): AcceptMoE-B at each budget, AcceptMoE and references, graded."""
    budgets: tuple[int, ...] = (16, 20, 24, 25, 28, 32, 40, 48)   # 25: the paper's own fixed budget
    method: str = ""                        # the fixed-budget method swept over `budgets`
    references: tuple[Variant, ...] = ()    # run once each beside the budgets
    prompts: int | None = None              # evaluation prompts per pair (None: resident.prompts)


ORDERS = ("index", "longest_reply")


@dataclass(frozen=True)
class PromptSet:
    """Which evaluation examples the timed phases time (the sweep always grades examples 0..n-1): `index`, the
    examples in order (the paper's protocol); `longest_reply`, the first `candidates` examples ordered by the
    length of the target's own greedy reply, longest first (ties: lower index), so timed tokens are reply text,
    not the continuation after EOS, where a world's replies are shorter than the timed window."""
    order: str = "index"                    # index (the paper) | longest_reply
    candidates: int = 300                   # longest_reply: how many of the first evaluation examples are measured


@dataclass(frozen=True)
class ThroughputConfig:
    SECTION = "throughput"
    world: WorldConfig
    phases: tuple[str, ...]
    limit: int | None = None                # caps every phase's prompts and the B0 prompts computed here
    budgets_from: str | None = None         # a Table 1 run folder: reuse its calibration/ and b0/ files
    resident: PhaseConfig = PhaseConfig()
    offload: OffloadPhaseConfig = OffloadPhaseConfig()
    sweep: SweepConfig = SweepConfig()
    bootstrap_resamples: int = 2000         # intervals over prompts (sweep accuracy, pruning accuracy)
    prompt_set: PromptSet = PromptSet()     # which evaluation examples the timed phases time
    natural_min_tokens: int = 16            # the natural-text protocol pools prompts whose replies are this long

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def preset(self) -> str:
        return self.world.preset

    def prompts(self, phase: str) -> int:
        """Evaluation prompts per pair of a phase, after --limit."""
        n = {"resident": self.resident.prompts, "offload-timed": self.offload.prompts,
             "offload-counters": self.offload.prompts,
             "sweep": self.sweep.prompts or self.resident.prompts}[phase]
        return min(n, self.limit) if self.limit else n

    def warmup_index(self, phase: str) -> int:
        sec = self.resident if phase == "resident" else self.offload
        return sec.prompts if sec.warmup_index is None else sec.warmup_index

    def variants(self, phase: str) -> tuple[Variant, ...]:
        """A phase's variants in their configured order; a timed phase (the counters run times its stalls) that
        times the baseline ends with its placebo (`PLACEBO`)."""
        if phase == "resident":
            return _with_placebo(self.resident.variants)
        if phase.startswith("offload"):
            return _with_placebo(self.offload.variants)
        return self.sweep_fixed() + self.sweep.references

    def names(self, phase: str) -> tuple[str, ...]:
        """The variants' row keys for a phase."""
        return tuple(v.name for v in self.variants(phase))

    def sweep_fixed(self) -> tuple[Variant, ...]:
        return tuple(Variant(self.sweep.method, budget=b) for b in self.sweep.budgets)

    def sweep_self_sized(self) -> str | None:
        """The name of the self-sizing reference of the sweep (its star in Figure 5), if any."""
        return next((v.name for v in self.sweep.references if v.spec.sizing is Sizing.SELF and not v.overrides), None)

    def pruning_pair(self) -> tuple[str, str] | None:
        """(pruning on, pruning off) variant names of the offload phases, if both are configured."""
        on = [v for v in self.offload.variants if v.prunes("offloaded")]
        for v_on in on:
            for v_off in self.offload.variants:
                if v_off.method == v_on.method and v_off.prune is False and v_off.overrides == v_on.overrides:
                    return v_on.name, v_off.name
        return None

    def sweep_roles(self) -> SweepRoles:
        """The sweep's roles by variant name (fixed budgets, self-sized reference) for tables and figures."""
        return SweepRoles(tuple(v.name for v in self.sweep_fixed()), get_method(self.sweep.method).label,
                          self.sweep_self_sized())

    def method_names(self) -> tuple[str, ...]:
        """Every method the run's phases generate with (p_hat's and B0's when budgets are computed here)."""
        names = [v.method for p in self.phases for v in self.variants(p)]
        budgets = (CALIBRATION, B0_METHOD) if needs_budgets(self) and self.budgets_from is None else ()
        return tuple(dict.fromkeys([*names, *budgets]))

    def labels(self) -> dict[str, str]:
        """name -> display label for every variant of every phase."""
        return {v.name: v.label for p in PHASES for v in self.variants(p)}


def _with_placebo(variants: tuple[Variant, ...]) -> tuple[Variant, ...]:
    return variants + ((PLACEBO,) if Variant(BASELINE) in variants else ())


def _validate(cfg: ThroughputConfig) -> None:
    bad = [p for p in cfg.phases if p not in PHASES]
    if bad or not cfg.phases:
        raise ThroughputConfigError(f"phases {list(cfg.phases)}: each must be one of {PHASES}")
    for sec in (cfg.resident, cfg.offload):
        names = [v.name for v in sec.variants]
        if len(set(names)) != len(names) or not names:
            raise ThroughputConfigError(f"variants must be a non-empty list without repeats, got {names}")
        if PLACEBO.name in names:
            raise ThroughputConfigError(f"variants {names}: a timed phase that times {BASELINE} adds its placebo "
                                        f"({PLACEBO.name}) itself: drop it from the list")
        if min(sec.prompts, sec.repetitions) < 1:
            raise ThroughputConfigError("prompts and repetitions must be >= 1")
    for r in cfg.sweep.references:
        if r.spec.needs_budget:
            raise ThroughputConfigError(f"sweep.references: {r.name!r} needs a budget; the sweep's budgets cover it")
    if not cfg.sweep.method or not get_method(cfg.sweep.method).needs_budget:
        raise ThroughputConfigError(f"sweep.method {cfg.sweep.method!r} does not take a budget; use one of "
                                    f"{[n for n, s in METHODS.items() if s.needs_budget]}")
    if cfg.prompt_set.order not in ORDERS:
        raise ThroughputConfigError(f"prompt_set.order {cfg.prompt_set.order!r}; valid: {', '.join(ORDERS)}")
    if cfg.prompt_set.order != "index":
        need = max(max(sec.prompts, sec.warmup_index if sec.warmup_index is not None else sec.prompts) + 1
                   for sec in (cfg.resident, cfg.offload))
        if cfg.prompt_set.candidates < need:
            raise ThroughputConfigError(f"prompt_set.candidates {cfg.prompt_set.candidates} < {need}: the timed "
                                        f"prompts and the warm-up are chosen among them; raise it")
    if cfg.natural_min_tokens < 1:
        raise ThroughputConfigError(f"natural_min_tokens must be >= 1, got {cfg.natural_min_tokens}")
    if cfg.limit is not None and cfg.limit < 1:
        raise ThroughputConfigError(f"limit must be a positive number of prompts or null, got {cfg.limit}")
    if any(b < 1 for b in cfg.sweep.budgets) or not cfg.sweep.budgets:
        raise ThroughputConfigError(f"sweep.budgets must be positive expert counts, got {list(cfg.sweep.budgets)}")
    if any(p.startswith("offload") for p in cfg.phases):
        check_engine(cfg.world.engine, "offloaded")
    if cfg.resident.slots is not None:
        raise ThroughputConfigError("resident.slots must be null: the resident phase keeps every expert on the device")
    if cfg.offload.slots is None or cfg.offload.slots < 1:
        raise ThroughputConfigError(f"offload.slots must be >= 1 (X expert slots per layer), got {cfg.offload.slots}")
    if any(p.startswith("offload") for p in cfg.phases):
        _check_slots(cfg)


def _check_slots(cfg: ThroughputConfig) -> None:
    """X slots per layer within every model's experts per layer (where its config.json is at hand)."""
    for model in cfg.world.models:
        experts = num_experts(model.target)
        if experts is not None and cfg.offload.slots > experts:
            raise ThroughputConfigError(
                f"throughput.offload.slots = {cfg.offload.slots} exceeds the {experts} experts per layer of model "
                f"{model.name!r}: set it to at most {experts} (the preset's `throughput: offload: slots:`), e.g. "
                f"{max(1, experts * 3 // 8)} keeps the paper's 48 of 128")


def needs_budgets(cfg: ThroughputConfig) -> bool:
    """True when a phase runs a method that needs p_hat or B0."""
    phases = [p for p in cfg.phases if p != "sweep"]
    variants = [v for p in phases for v in cfg.variants(p)] + (list(cfg.variants("sweep")) if "sweep" in cfg.phases else [])
    return any(v.spec.needs_calibration for v in variants)


def load_throughput_config(preset, phases: tuple[str, ...], overrides: dict | None = None) -> ThroughputConfig:
    return load_experiment(ThroughputConfig, preset, overrides, phases=list(phases))


def throughput_config_from_saved(saved: dict) -> ThroughputConfig:
    return from_saved(ThroughputConfig, saved)
