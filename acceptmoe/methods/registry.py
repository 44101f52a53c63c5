"""The method registry: the six methods by name, what each does, and the selector functions.

A method is a name plus a `MethodSpec`; a selector is a pure function registered under the method name with
`@register_selector`. Vanilla AR does not speculate; Standard SD verifies with all experts eligible.

The registry is the only place that knows methods by name: its entries carry the display label, whether
residency-aware pruning is on by default under an offloaded expert store, and which method's traces decide
the matched budget B0 of the fixed-budget methods. Everything else asks a `MethodSpec` (or a `Variant`).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Literal

from acceptmoe.errors import UserError

Sizing = Literal["none", "all", "fixed", "self"]


@dataclass(frozen=True)
class MethodSpec:
    name: str
    speculates: bool          # drafts and verifies a tree (False: plain greedy decoding)
    sizing: Sizing            # none (no verification), all (S = all experts), fixed (B), self (effective rank)
    score: str | None         # what the selector ranks by: votes, router mass, commitment utility
    anchor: bool              # root anchor A = K_root always in S
    needs_commitment: bool    # needs p_hat
    label: str = ""           # display name in tables and figures
    prunes_when_offloaded: bool = False   # residency-aware pruning by default under an offloaded store
    sets_b0: bool = False     # its traces give B0, the matched budget of the fixed-budget methods

    @property
    def needs_budget(self) -> bool:
        return self.sizing == "fixed"

    @property
    def restricts(self) -> bool:
        """True when verification routes inside a selected subset of experts."""
        return self.sizing in ("fixed", "self")


_SPECS = (
    MethodSpec("vanilla-ar", speculates=False, sizing="none", score=None, anchor=False, needs_commitment=False,
               label="Vanilla AR"),
    MethodSpec("standard-sd", speculates=True, sizing="all", score=None, anchor=False, needs_commitment=False,
               label="Standard SD"),
    MethodSpec("count-b", speculates=True, sizing="fixed", score="votes", anchor=False, needs_commitment=False,
               label="Count-B"),
    MethodSpec("moe-spec", speculates=True, sizing="fixed", score="router-mass", anchor=False, needs_commitment=False,
               label="MoE-Spec"),
    MethodSpec("acceptmoe-b", speculates=True, sizing="fixed", score="commitment", anchor=True, needs_commitment=True,
               label="AcceptMoE-B"),
    MethodSpec("acceptmoe", speculates=True, sizing="self", score="commitment", anchor=True, needs_commitment=True,
               label="AcceptMoE", prunes_when_offloaded=True, sets_b0=True),
)
B0_METHOD: str = next(s.name for s in _SPECS if s.sets_b0)     # whose traces decide B0
BASELINE: str = "standard-sd"        # accuracy differences and throughput ratios are taken against it
REFERENCE: str = "vanilla-ar"        # relative accuracy change is taken against it
CALIBRATION: str = "standard-sd"     # p_hat is counted from its natural-routing traces
METHODS: "MappingProxyType[str, MethodSpec]" = MappingProxyType({s.name: s for s in _SPECS})

_SELECTORS: dict[str, Callable] = {}


class UnknownMethodError(UserError, KeyError):
    """A method name the registry does not have; the message lists the valid ones."""


def get_method(name: str) -> MethodSpec:
    try:
        return METHODS[name]
    except KeyError:
        raise UnknownMethodError(f"unknown method {name!r}; valid methods: {', '.join(METHODS)}") from None


def fixed_twin(name: str) -> str:
    """The fixed-budget method that ranks like `name` (AcceptMoE -> AcceptMoE-B): sizing held at a budget."""
    spec = get_method(name)
    for other in METHODS.values():
        if other.needs_budget and other.score == spec.score and other.anchor == spec.anchor:
            return other.name
    raise ValueError(f"method {name!r} has no fixed-budget counterpart")


def register_selector(name: str) -> Callable[[Callable], Callable]:
    get_method(name)

    def wrap(fn: Callable) -> Callable:
        _SELECTORS[name] = fn
        return fn
    return wrap


def selector_for(name: str) -> Callable:
    spec = get_method(name)
    if not spec.speculates:
        raise ValueError(f"method {name!r} does not speculate, so it has no verifier-side selector")
    return _SELECTORS[name]
