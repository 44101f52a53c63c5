"""`Variant`: what an experiment asks an engine to run — a method plus everything that parameterises it.

    v = Variant("acceptmoe")                                  # the method as the registry defines it
    v = Variant("acceptmoe-b", budget=24)                     # a pinned budget (the sweep)
    v = Variant("acceptmoe", prune=False)                     # AcceptMoE without residency-aware pruning
    v = Variant("acceptmoe", overrides=(("beta", 1.0),))      # a selector knob changed (the beta study)
    gen = engine.generate(prompt_ids, v.bind(commitment=table, b0=30), max_new_tokens=96)

A variant is declared without run-time inputs (the calibrated commitment table, the matched budget B0 of the
pair) and bound to them just before generation with `bind`. Its `name` identifies it in result rows and
file names; its `label` is its display name. Both are derived here and only here from the registry entry
and the fields, so no code anywhere else builds or parses method strings.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence



from .config import ConfigError, SelectorConfig
from .registry import METHODS, MethodSpec, get_method

# selector fields a variant may override; budget and p_hat are bound at run time
OVERRIDABLE = tuple(f.name for f in dataclasses.fields(SelectorConfig) if f.name not in ("budget", "p_hat"))


@dataclass(frozen=True)
class Variant:
    method: str                                      # a registry name (METHODS)
    budget: int | None = None                        # pinned budget; None: the pair's B0 for fixed-size methods
    prune: bool | None = None                        # residency pruning; None: the registry default under offload
    overrides: tuple[tuple[str, Any], ...] = ()      # selector fields that differ from the experiment's selector
    tag: str | None = None                           # names a variant of a study (e.g. "onpolicy": its own p_hat)
    # bound at run time (`bind`), never part of the name:
    commitment: tuple[float, ...] | None = None      # p_hat per depth
    b0: int | None = None                            # the pair's matched budget

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
        if self.prune and not spec.restricts:
            raise ConfigError(f"variant {self.method}: residency pruning applies to restricting methods only")
        if self.commitment is not None:
            object.__setattr__(self, "commitment", tuple(float(p) for p in self.commitment))

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

    # ----- run time -----
    def bind(self, commitment: Sequence[float] | None = None, b0: int | None = None) -> "Variant":
        """This variant with the pair's calibrated p_hat and B0 (each used only if the method needs it)."""
        return dataclasses.replace(self, commitment=tuple(commitment) if commitment is not None
                                   and self.spec.needs_commitment else None,
                                   b0=b0 if self.spec.needs_budget else None)

    @property
    def effective_budget(self) -> int | None:
        """The budget generation uses: the pinned one, else the bound B0 (fixed-size methods only)."""
        return self.budget if self.budget is not None else self.b0

    def selector_config(self, base: SelectorConfig) -> SelectorConfig:
        """`base` with this variant's overrides, budget and p_hat (validated by SelectorConfig)."""
        fields = dict(self.overrides)
        if self.spec.needs_budget:
            if self.effective_budget is None:
                raise ConfigError(f"variant {self.name} needs a budget: pin one (Variant(budget=B)) or bind the "
                                f"pair's B0 (variant.bind(b0=...))")
            fields["budget"] = self.effective_budget
        if self.spec.needs_commitment:
            if self.commitment is None:
                raise ConfigError(f"variant {self.name} needs commitment probabilities: bind a calibrated "
                                f"p_hat (variant.bind(commitment=table.p_hat))")
            fields["p_hat"] = self.commitment
        return dataclasses.replace(base, **fields)

    def prunes(self, store_kind: str) -> bool:
        """Whether residency-aware pruning is on for this variant under an expert store of `store_kind`."""
        if self.prune is not None:
            return self.prune
        return self.spec.prunes_when_offloaded and store_kind == "offloaded"

    def describe(self) -> dict:
        """JSON-ready record of this variant (for traces and rows)."""
        return {"name": self.name, "method": self.method, "budget": self.effective_budget, "prune": self.prune,
                "overrides": {k: v for k, v in self.overrides}, "tag": self.tag}

