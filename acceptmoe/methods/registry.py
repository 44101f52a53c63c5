"""The method registry: the six methods by name, what each does, and the selector functions.

A method is a name plus a `MethodSpec`; a selector is a pure function registered under the method name with
`@register_selector`. Vanilla AR does not speculate; Standard SD verifies with all experts eligible.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Literal

Sizing = Literal["none", "all", "fixed", "self"]


@dataclass(frozen=True)
class MethodSpec:
    name: str
    speculates: bool          # drafts and verifies a tree (False: plain greedy decoding)
    sizing: Sizing            # none (no verification), all (S = all experts), fixed (B), self (effective rank)
    score: str | None         # what the selector ranks by: votes, router mass, commitment utility
    anchor: bool              # root anchor A = K_root always in S
    needs_commitment: bool    # needs p_hat

    @property
    def needs_budget(self) -> bool:
        return self.sizing == "fixed"

    @property
    def restricts(self) -> bool:
        """True when verification routes inside a selected subset of experts."""
        return self.sizing in ("fixed", "self")


_SPECS = (
    MethodSpec("vanilla-ar", speculates=False, sizing="none", score=None, anchor=False, needs_commitment=False),
    MethodSpec("standard-sd", speculates=True, sizing="all", score=None, anchor=False, needs_commitment=False),
    MethodSpec("count-b", speculates=True, sizing="fixed", score="votes", anchor=False, needs_commitment=False),
    MethodSpec("moe-spec", speculates=True, sizing="fixed", score="router-mass", anchor=False, needs_commitment=False),
    MethodSpec("acceptmoe-b", speculates=True, sizing="fixed", score="commitment", anchor=True, needs_commitment=True),
    MethodSpec("acceptmoe", speculates=True, sizing="self", score="commitment", anchor=True, needs_commitment=True),
)
METHODS: "MappingProxyType[str, MethodSpec]" = MappingProxyType({s.name: s for s in _SPECS})

_SELECTORS: dict[str, Callable] = {}


class UnknownMethodError(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; show it plainly
        return self.args[0]


def get_method(name: str) -> MethodSpec:
    try:
        return METHODS[name]
    except KeyError:
        raise UnknownMethodError(f"unknown method {name!r}; valid methods: {', '.join(METHODS)}") from None


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
