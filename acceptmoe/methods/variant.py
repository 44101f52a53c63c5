"""`Variant` (what an experiment asks for) and `Plan` (that variant checked against an engine, the one object
engines, verifiers, the SGLang plugin and the lm-eval backend accept).

    >>> from acceptmoe.methods import Fit, Router, Variant
    >>> Variant("acceptmoe-b", budget=24).name, Variant("acceptmoe", prune=False).label
    ('acceptmoe-b@24', 'AcceptMoE (no pruning)')
    >>> v = Variant("acceptmoe", overrides=(("beta", 1.0),))  # a selector knob changed (the beta study)
    >>> fit = Fit(Router.preset("softmax_topk", top_k=8), 128, max_depth=2)   # engine.fit in practice
    >>> plan = v.bind(fit, commitment=(1.0, 0.8, 0.5))       # p_hat; b0=... for fixed-budget methods
    >>> plan.selector.beta, plan.selector.p_hat, plan.prune
    (1.0, (1.0, 0.8, 0.5), False)
    >>> Variant("acceptmoe-b").bind(fit, commitment=(1.0, 0.8, 0.5), b0=4)
    Traceback (most recent call last):
    ...
    acceptmoe.methods.config.ConfigError: variant acceptmoe-b: budget B=4 must satisfy top_k=8 <= B <= E=128 (every token needs k eligible experts)

A variant is declared without run-time inputs and is hashable, so configs hold it. `bind` adds them (the
calibrated p_hat, the pair's matched budget B0, the experiment's base selector) and fits the variant to a
`Fit` (the target's router and expert count, the engine's tree depth and expert store). Every rule of a
method that depends on those is checked there, once (`Plan.__post_init__`); what depends only on the
variant is checked when it is declared. `Variant.name` identifies it in result rows and file names,
`Variant.label` is its display name; both are derived here and nothing parses them back.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .admission import VerifyCost
from .config import ConfigError, SelectorConfig
from .registry import METHODS, MethodSpec, get_method
from .routing import Router

# selector fields a variant may override; budget and p_hat are bound at run time
OVERRIDABLE = tuple(f.name for f in dataclasses.fields(SelectorConfig) if f.name not in ("budget", "p_hat"))
STORE_KINDS = ("resident", "offloaded")
VARIANT_KEYS = ("method", "budget", "prune", "overrides", "tag")


@dataclass(frozen=True)
class Variant:
    method: str                                      # a registry name (METHODS)
    budget: int | None = None                        # pinned budget; None: the pair's B0 for fixed-size methods
    prune: bool | None = None                        # residency pruning; None: the registry default under offload
    overrides: tuple[tuple[str, Any], ...] = ()      # selector fields that differ from the experiment's selector
    tag: str | None = None                           # names a variant of a study (e.g. "onpolicy": its own p_hat)

    def __post_init__(self) -> None:
        spec = get_method(self.method)
        object.__setattr__(self, "overrides", tuple((str(k), v) for k, v in dict(self.overrides).items()))
        bad = [k for k, _ in self.overrides if k not in OVERRIDABLE]
        if bad:
            raise ConfigError(f"variant {self.method}: cannot override {bad}; overridable selector fields: "
                              f"{', '.join(OVERRIDABLE)} (budget and p_hat are set by the runner)")
        if self.budget is not None and not spec.needs_budget:
            raise ConfigError(f"variant {self.method}: a budget applies to fixed-budget methods only "
                              f"({', '.join(n for n, s in METHODS.items() if s.needs_budget)})")
        if self.budget is not None and (isinstance(self.budget, bool) or not isinstance(self.budget, int)
                                        or self.budget < 1):
            raise ConfigError(f"variant {self.method}: budget must be a positive whole number, got {self.budget!r}")
        if self.prune and not spec.restricts:
            raise ConfigError(f"variant {self.method}: residency pruning applies to restricting methods only")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Variant:
        """A variant from plain data ({"method": ..., "budget": ..., "overrides": {...}}), the one parser
        configs, the lm-eval backend and the SGLang plugin share; unknown keys are errors."""
        unknown = sorted(set(data) - set(VARIANT_KEYS))
        if unknown:
            raise ConfigError(f"unknown variant key(s) {unknown}; valid: {', '.join(VARIANT_KEYS)}")
        if "method" not in data:
            raise ConfigError(f"a variant needs `method`; got keys {sorted(data)}")
        overrides = data.get("overrides") or ()
        overrides = tuple(overrides.items()) if isinstance(overrides, Mapping) else tuple(tuple(o) for o in overrides)
        return cls(data["method"], data.get("budget"), data.get("prune"), overrides, data.get("tag"))

    # ----- identity -----
    @property
    def spec(self) -> MethodSpec:
        return get_method(self.method)

    @property
    def name(self) -> str:
        """The row key of this variant: the method, then what sets it apart (stable across releases)."""
        out = self.method
        if self.prune is False:
            out += "-noprune"
        elif self.prune is True and not self.spec.prunes_when_offloaded:
            out += "-prune"
        if self.budget is not None:
            out += f"@{self.budget}"
        out += "".join(f"@{k}={v:g}" if isinstance(v, float) else f"@{k}={v}" for k, v in self.overrides)
        if self.tag:
            out += f"@{self.tag}"
        return out

    @property
    def label(self) -> str:
        """Display name: the registry label plus what sets this variant apart."""
        out = self.spec.label
        if self.spec.needs_budget:
            out += f"@{self.budget}" if self.budget is not None else "@B0"
        extras = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.overrides]
        extras += ["no pruning"] if self.prune is False else (["pruning"] if self.prune else [])
        extras += [self.tag] if self.tag else []
        return f"{out} ({', '.join(extras)})" if extras else out

    def describe(self) -> dict:
        """JSON-ready record of this variant as declared."""
        return {"name": self.name, "method": self.method, "budget": self.budget, "prune": self.prune,
                "overrides": {k: v for k, v in self.overrides}, "tag": self.tag}

    # ----- run time -----
    def bind(self, fit: Fit, *, commitment: Sequence[float] | None = None, b0: int | None = None,
             selector: SelectorConfig = SelectorConfig(), cost: VerifyCost | None = None) -> Plan:
        """This variant fitted to an engine: `selector` with the overrides, the budget (pinned, else `b0`),
        p_hat (`commitment`) and the verify-cost profile (`cost`, for an admitting method), each used only if
        the method needs it; checked once (see `Plan`)."""
        spec, fields = self.spec, dict(self.overrides)
        fields["budget"] = (self.budget if self.budget is not None else b0) if spec.needs_budget else None
        fields["p_hat"] = tuple(commitment) if spec.needs_commitment and commitment is not None else None
        return Plan(self, fit, dataclasses.replace(selector, **fields), self.prunes(fit.store),
                    cost if spec.admits else None)

    def prunes(self, store: str) -> bool:
        """Whether residency-aware pruning is on for this variant under an expert store of kind `store`: as
        pinned, else the registry's default under an offloaded store."""
        return self.prune if self.prune is not None else self.spec.prunes_when_offloaded and store == "offloaded"


@dataclass(frozen=True)
class Fit:
    """What a plan is fitted to: the target's router and experts per MoE layer, the deepest draft node a
    verification block can hold (the engine's tree `num_steps`) and its expert store."""
    router: Router
    num_experts: int
    max_depth: int
    store: str = "resident"

    def __post_init__(self) -> None:
        if self.store not in STORE_KINDS:
            raise ConfigError(f"unknown expert store {self.store!r}; valid: {', '.join(STORE_KINDS)}")
        wrong = self.router.check_experts(self.num_experts)
        if wrong:
            raise ConfigError(wrong)


@dataclass(frozen=True)
class Plan:
    """A variant with everything a generation needs, checked: made by `Variant.bind`."""
    variant: Variant
    fit: Fit
    selector: SelectorConfig     # complete: budget set for fixed-size methods, p_hat for commitment methods
    prune: bool                  # residency-aware pruning of S against the expert pool
    cost: VerifyCost | None = None   # the verify-cost profile an admitting method weighs its prefix with

    def __post_init__(self) -> None:
        spec, cfg, k, E = self.spec, self.selector, self.fit.router.top_k, self.fit.num_experts
        name = self.variant.name
        if spec.needs_budget:
            if cfg.budget is None:
                raise ConfigError(f"variant {name} needs a budget: pin one (Variant(budget=B)) or bind the pair's "
                                  f"B0 (variant.bind(..., b0=B)), with top_k={k} <= B <= E={E}")
            if not k <= cfg.budget <= E:
                raise ConfigError(f"variant {name}: budget B={cfg.budget} must satisfy top_k={k} <= B <= E={E} "
                                  f"(every token needs k eligible experts)")
        elif cfg.budget is not None:
            raise ConfigError(f"variant {name} takes no budget (got {cfg.budget})")
        if spec.needs_commitment:
            if cfg.p_hat is None:
                raise ConfigError(f"variant {name} needs commitment probabilities: bind a calibrated p_hat "
                                  f"(variant.bind(..., commitment=table.p_hat))")
            if len(cfg.p_hat) < self.fit.max_depth + 1:
                raise ConfigError(f"p_hat has {len(cfg.p_hat)} entries but blocks reach depth {self.fit.max_depth}: "
                                  f"give one per depth 0..{self.fit.max_depth} (calibrate with the same tree shape)")
        elif cfg.p_hat is not None:
            raise ConfigError(f"variant {name} takes no p_hat")
        if spec.admits and self.cost is None:
            raise ConfigError(f"variant {name} admits draft nodes under a verify-cost model: bind a profile "
                              f"(variant.bind(..., cost=acceptmoe.costs.verify.load_profile(...)); "
                              f"`./reproduce.sh profile-verify` measures one)")
        if not spec.admits and self.cost is not None:
            raise ConfigError(f"variant {name} admits every drafted node and takes no verify-cost profile")
        if self.cost is not None and self.fit.store == "offloaded" and self.cost.fetch_per_byte_s is None:
            raise ConfigError(f"variant {name}: the verify-cost profile ({self.cost.source or 'unnamed'}) has no "
                              f"fetch cost for an offloaded store: profile one with --store offloaded")
        if self.prune and self.fit.store != "offloaded":
            raise ConfigError(f"variant {name}: residency pruning needs an offloaded expert store (this one is "
                              f"{self.fit.store}); drop prune or open the engine with store='offloaded'")

    @property
    def spec(self) -> MethodSpec:
        return self.variant.spec

    @property
    def router(self) -> Router:
        return self.fit.router

    @property
    def num_experts(self) -> int:
        return self.fit.num_experts

    @property
    def name(self) -> str:
        return self.variant.name

    @property
    def label(self) -> str:
        return self.variant.label

    @property
    def budget(self) -> int | None:
        """The budget this generation uses (fixed-size methods), else None."""
        return self.selector.budget

    @property
    def min_set(self) -> int:
        """The smallest S residency pruning may leave: prune_min_set, and never fewer than top_k experts."""
        return max(self.selector.prune_min_set, self.fit.router.top_k)

    def describe(self) -> dict:
        """JSON-ready record of what generation uses (for traces)."""
        sel = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self.selector).items()}
        out = {"method": self.variant.method, "variant": self.name, "selector": sel, "prune": self.prune}
        if self.cost is not None:                    # admitting methods only: other records stay as they were
            out["admission"] = {"rule": self.spec.admission.value, "cost": self.cost.to_json()}
        return out
