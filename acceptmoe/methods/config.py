"""SelectorConfig: every knob of the verifier-side selectors, validated on construction.

Fields where the paper is silent are our choices and are documented here:
- `demand_score`: `gate` uses the model's own post-top-k weight as r[t, e]; `softmax` the full-softmax
  probability restricted to K_t.
- `rank_tolerance`: relative guard on the effective-rank ceiling, n_er = ceil(exp(H) * (1 - tol)), so an
  effective rank that exceeds an integer only by float error (exp(H) = 3.0000001) gives that integer.
  Evaluated in fixed point: log2 with 16 fractional bits, the guard rounded to 2^-16 (`fixed.py`).
- `prune_rho`, `prune_min_set`: residency-aware pruning's rerouting budget (fraction of the set's utility
  that may be removed) and minimum set size. Defaults 0.1 and 16; swept in the pruning ablation. rho is
  applied as a multiple of 2^-16 (round(rho * 2^16) / 2^16) so the budget test is exact integer arithmetic.
- `score_bits`: every block score (votes, router mass, gate mass, commitment utility) is a sum over the
  block's tokens of per-token terms in [0, 1], each truncated to a multiple of 2^-score_bits (fixed
  point). Integer sums are exact and do not depend on the order of summation, so every backend (torch,
  the Triton kernel, any GPU) ranks the same scores and breaks the same ties. 22 bits keep a block of
  up to 511 tokens within the kernel's int32 sums; the truncation error (< 2.4e-7 per token) is far
  below the gap between experts that matter.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from acceptmoe.errors import UserError

DEMAND_SCORES = ("gate", "softmax")


class ConfigError(UserError, ValueError):
    """A selector configuration that cannot be used; the message names the field and the fix."""


@dataclass(frozen=True)
class SelectorConfig:
    budget: int | None = None               # B for fixed-size methods (count-b, moe-spec, acceptmoe-b)
    beta: float = 0.5                       # commitment sharpness: alpha_t = p_hat[d]^beta * N_d^level_exponent
    level_exponent: float = -0.5            # sublinear discount of wide tree levels
    p_hat: tuple[float, ...] | None = None  # commitment probability per depth, p_hat[0] = 1 (the root)
    demand_score: str = "gate"              # "gate" | "softmax" (see module docstring)
    rank_tolerance: float = 1e-4            # relative guard on ceil(exp(H))
    prune_rho: float = 0.1                  # residency pruning: utility fraction that may be rerouted
    prune_min_set: int = 16                 # residency pruning: never shrink S below this size
    score_bits: int = 22                    # block scores are sums of per-token terms in multiples of 2^-score_bits

    def __post_init__(self) -> None:
        if self.p_hat is not None and not isinstance(self.p_hat, tuple):
            object.__setattr__(self, "p_hat", tuple(float(p) for p in self.p_hat))
        if self.budget is not None and (not isinstance(self.budget, int) or self.budget < 1):
            raise ConfigError(f"budget must be a positive integer or None, got {self.budget!r}")
        if self.beta < 0:
            raise ConfigError(f"beta must be >= 0, got {self.beta}")
        if self.demand_score not in DEMAND_SCORES:
            raise ConfigError(f"demand_score must be one of {DEMAND_SCORES}, got {self.demand_score!r}")
        if not 0 <= self.rank_tolerance < 0.5:
            raise ConfigError(f"rank_tolerance must be in [0, 0.5), got {self.rank_tolerance}")
        if not 0 <= self.prune_rho <= 1:
            raise ConfigError(f"prune_rho must be in [0, 1], got {self.prune_rho}")
        if not isinstance(self.score_bits, int) or not 8 <= self.score_bits <= 22:
            raise ConfigError(f"score_bits must be an integer in [8, 22], got {self.score_bits!r}")
        if self.prune_min_set < 0:
            raise ConfigError(f"prune_min_set must be >= 0, got {self.prune_min_set}")
        if self.p_hat is not None:
            _check_p_hat(self.p_hat)


def _check_p_hat(p_hat: Sequence[float]) -> None:
    if len(p_hat) == 0:
        raise ConfigError("p_hat is empty: give one commitment probability per depth, starting with 1.0 for the root")
    bad = [(d, p) for d, p in enumerate(p_hat) if not 0.0 <= p <= 1.0]
    if bad:
        raise ConfigError(f"p_hat values must lie in [0, 1]; out of range at (depth, value): {bad}")
    if p_hat[0] != 1.0:
        raise ConfigError(f"p_hat[0] must be 1.0 (the root is always committed), got {p_hat[0]}")
