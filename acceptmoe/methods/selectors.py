"""Verifier-side selectors, per block and layer: the readable reference.

Each selector maps one layer's router logits for one verification block, logits [T, E], to a `Selection`:
the eligible set S (bool [E]), the score it ranked by (`utility`, fp32 [E]) and the root anchor (bool [E]).
Every score is a `block_sum` over the block's tokens: per-token terms truncated to multiples of
2^-score_bits and added exactly, so any backend obtains the same numbers whatever its summation order;
sizing runs on those integers (`fixed.py`).
Ranking is always by score descending, ties by a secondary score where the method has one, then by the
lower expert index: the project's one rule, `topk.order_desc`. The batched verifier
(`acceptmoe.kernels.make_verifier`, torch and Triton backends) computes the same sets for many blocks at
once and must agree exactly with these functions.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .config import SelectorConfig, check_for_method
from .fixed import block_sum, effective_rank, rank_guard, to_fixed
from .registry import get_method, register_selector, selector_for
from .routing import Router
from .topk import order_desc
from .tree import BlockInfo


@dataclass(frozen=True, eq=False)
class Selection:
    eligible: Tensor  # bool [..., E]
    utility: Tensor   # fp32 [..., E], the score the method ranked by
    anchor: Tensor    # bool [..., E], all False for methods without an anchor

    @property
    def size(self) -> Tensor:
        return self.eligible.sum(-1)


def select(method: str, logits: Tensor, block: BlockInfo, router: Router, cfg: SelectorConfig) -> Selection:
    """The eligible set of `method` for one block and one layer. logits [T, E]."""
    spec = get_method(method)
    if logits.dim() != 2 or logits.shape[0] != block.num_tokens:
        raise ValueError(f"logits must be [T, E] with T={block.num_tokens} (the block's tokens), "
                         f"got {tuple(logits.shape)}")
    check_for_method(cfg, spec, router, logits.shape[1], block.max_depth)
    return selector_for(method)(logits, block, router, cfg)


def commitment_weights(block: BlockInfo, cfg: SelectorConfig) -> Tensor:
    """alpha_t = p_hat[d_t]^beta * N[d_t]^level_exponent, fp32 [T]; the root (d = 0, N_0 = 1) gets 1."""
    p = torch.tensor(cfg.p_hat, dtype=torch.float64)[block.depth]      # [T]
    n = block.level_sizes.to(torch.float64)[block.depth]               # [T]
    return (p.pow(cfg.beta) * n.pow(cfg.level_exponent)).float()


def effective_rank_size(demand: Tensor, cfg: SelectorConfig) -> int:
    """n_er: the effective rank exp(H(q)) of q = demand / sum(demand) over positive demand, guarded and
    rounded up (n >= exp(H) * (1 - rank_tolerance)), in [1, number of positive entries]; 0 without any.
    Evaluated in fixed point on the block scores' integers (`fixed.effective_rank`)."""
    return int(effective_rank(to_fixed(demand, cfg.score_bits), demand > 0, rank_guard(cfg.rank_tolerance)))


def _best(n: int, primary: Tensor, secondary: Tensor | None = None, exclude: Tensor | None = None) -> Tensor:
    """bool [E]: the n best experts by (primary, secondary) descending, then lower index; `exclude` never."""
    if exclude is not None:
        primary = primary.masked_fill(exclude, float("-inf"))
    mask = torch.zeros(primary.shape[-1], dtype=torch.bool)
    mask[order_desc(primary, secondary)[:n]] = True
    return mask


@register_selector("standard-sd")
def select_standard_sd(logits: Tensor, block: BlockInfo, router: Router, cfg: SelectorConfig) -> Selection:
    """S = all experts; utility is the natural gate mass sum_t r[t, e]."""
    r, _ = router.gates(logits, cfg.demand_score)                     # [T, E]
    E = logits.shape[1]
    return Selection(torch.ones(E, dtype=torch.bool), block_sum(r, cfg.score_bits), torch.zeros(E, dtype=torch.bool))


@register_selector("count-b")
def select_count_b(logits: Tensor, block: BlockInfo, router: Router, cfg: SelectorConfig) -> Selection:
    """Top-B experts by votes v_e = sum_t 1[e in K_t]; ties: larger gate mass, then lower index."""
    r, member = router.gates(logits, "gate")                          # [T, E]
    votes, mass = block_sum(member.float(), cfg.score_bits), block_sum(r, cfg.score_bits)   # [E], [E]
    E = logits.shape[1]
    return Selection(_best(cfg.budget, votes, mass), votes, torch.zeros(E, dtype=torch.bool))


@register_selector("moe-spec")
def select_moe_spec(logits: Tensor, block: BlockInfo, router: Router, cfg: SelectorConfig) -> Selection:
    """Top-B experts by m_e = sum_t softmax(z_t)[e] over all experts and tokens; ties: lower index."""
    mass = block_sum(torch.softmax(logits.float(), dim=-1), cfg.score_bits)   # [E]
    E = logits.shape[1]
    return Selection(_best(cfg.budget, mass), mass, torch.zeros(E, dtype=torch.bool))


def commitment_utility(logits: Tensor, block: BlockInfo, router: Router, cfg: SelectorConfig) -> tuple[Tensor, Tensor]:
    """u_e = sum_t alpha_t r[t, e] (fp32 [E]) and the root anchor A = K_root (bool [E])."""
    alpha = commitment_weights(block, cfg)                            # [T]
    r, member = router.gates(logits, cfg.demand_score)                # [T, E]
    u = block_sum(alpha[:, None] * r, cfg.score_bits)                 # [E]
    return u, member[0].clone()


@register_selector("acceptmoe-b")
def select_acceptmoe_b(logits: Tensor, block: BlockInfo, router: Router, cfg: SelectorConfig) -> Selection:
    """S = A plus the top (B - |A|) non-anchor experts by u_e (ties: lower index)."""
    u, anchor = commitment_utility(logits, block, router, cfg)
    n = cfg.budget - int(anchor.sum())
    return Selection(anchor | _best(n, u, exclude=anchor), u, anchor)


@register_selector("acceptmoe")
def select_acceptmoe(logits: Tensor, block: BlockInfo, router: Router, cfg: SelectorConfig) -> Selection:
    """S = A plus the top n_er non-anchor experts by u_e, n_er the effective rank of the residual demand."""
    u, anchor = commitment_utility(logits, block, router, cfg)
    n = effective_rank_size(u.masked_fill(anchor, 0.0), cfg)
    return Selection(anchor | _best(n, u, exclude=anchor), u, anchor)
