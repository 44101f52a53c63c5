"""Residency-aware pruning (AcceptMoE under expert offloading), per block and layer: the reference.

H is the layer's resident set before the pass, A the anchor. C = S \\ H \\ A sorted by ascending utility
(ties: higher expert index first), i.e. the ranking order of `topk.order_desc` walked from its end.
Remove the longest prefix D of C with sum_{e in D} u_e <= rho * sum_{e in S} u_e and |S| - |D| >= s_min,
evaluated exactly on the scores' fixed-point integers with rho as a multiple of 2^-16 (`fixed.py`).
With everything resident, C is empty and S is unchanged.
"""
from __future__ import annotations

from torch import Tensor

from .config import SelectorConfig
from .fixed import LOG2_BITS, rho_fixed, to_fixed
from .selectors import Selection
from .topk import order_desc


def prune_nonresident(sel: Selection, resident: Tensor, cfg: SelectorConfig, min_size: int = 0) -> Tensor:
    """bool [E]: S \\ D. resident: bool [E], the layer's resident experts before the pass.

    The set never shrinks below max(cfg.prune_min_set, min_size); callers pass the router's top_k as
    min_size so that methods without an anchor keep at least k experts."""
    eligible = sel.eligible.clone()
    u = to_fixed(sel.utility, cfg.score_bits).tolist()                  # exact integers
    budget = rho_fixed(cfg.prune_rho) * sum(u[e] for e in range(len(u)) if sel.eligible[e])
    size = int(sel.eligible.sum())
    candidates = {e for e in range(len(u)) if sel.eligible[e] and not resident[e] and not sel.anchor[e]}
    removed_mass = 0
    for e in (e for e in reversed(order_desc(sel.utility).tolist()) if e in candidates):
        if size - 1 < max(cfg.prune_min_set, min_size) or (removed_mass + u[e]) << LOG2_BITS > budget:
            break
        removed_mass += u[e]
        size -= 1
        eligible[e] = False
    return eligible
