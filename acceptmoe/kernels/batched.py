"""The verifier's torch backend: every block of a step, one MoE layer per call, in pure tensor code.

Same contract as the Triton kernel (`verify.Verifier`): logits [B, T, E] -> VerifierOutput, no host
synchronisation, no Python branching on tensor values, padding tokens ignored by the selection. It must
agree exactly with the per-block reference (`acceptmoe.methods.select`, `prune_nonresident`, `route`);
every ranking is the project's one rule (`acceptmoe.methods.topk`). Per-step inputs (the token weights)
are bound once in `prepare`, so a layer's call is only the selection and routing of its logits.
"""
from __future__ import annotations

import torch
from torch import Tensor

from acceptmoe.methods import Router, SelectorConfig, Selection
from acceptmoe.methods.routing import route_in
from acceptmoe.methods.fixed import (LOG2_BITS, block_sum, effective_rank, log2_sizes, rank_guard, rho_fixed,
                                     to_fixed)
from acceptmoe.methods.topk import order_desc, rank_desc

from .interface import Verifier, VerifierOutput


def select_batched(spec, router: Router, cfg: SelectorConfig, logits: Tensor, alpha: Tensor,
                   valid: Tensor, order: Tensor | None = None) -> Selection:
    """Selection with eligible [B, E] from logits [B, T, E], commitment weights alpha [B, T] (zero on
    padding), valid [B, T] (1.0 on a block's tokens, 0.0 on padding) and optionally the logits' ranking
    order [B, T, E] (`order_desc`, shared with the routing that follows)."""
    z = logits.float()
    sizing, score = spec.sizing, spec.score
    total = lambda terms, w: block_sum(terms * w, cfg.score_bits)                     # [B, E]
    no_anchor = lambda: torch.zeros(z.shape[:-2] + z.shape[-1:], dtype=torch.bool, device=z.device)
    if score == "router-mass":
        mass = total(torch.softmax(z, -1), valid[..., None])
        return Selection(rank_desc(mass) < cfg.budget, mass, no_anchor())
    demand = "gate" if score == "votes" else cfg.demand_score
    r, member = router.gates(z, demand, order)                                         # [B, T, E]
    if sizing == "all":
        anchor = no_anchor()
        return Selection(~anchor, total(r, valid[..., None]), anchor)
    if score == "votes":
        vmask = valid[..., None]                                                       # [B, T, 1]
        votes, mass = total(member.float(), vmask), total(r, vmask)
        return Selection(rank_desc(votes, mass) < cfg.budget, votes, no_anchor())
    u = total(r, alpha[..., None])                                                     # [B, E] sum_t alpha_t r
    anchor = member[..., 0, :]                                                         # [B, E]
    rank = rank_desc(u.masked_fill(anchor, float("-inf")))                             # anchors rank last
    if sizing == "fixed":
        n = cfg.budget - anchor.sum(-1)                                                # [B]
    else:
        residual = to_fixed(u, cfg.score_bits).masked_fill(anchor, 0)                  # [B, E] int64
        n = effective_rank(residual, residual > 0, rank_guard(cfg.rank_tolerance))     # [B]
    return Selection(anchor | (rank < n[..., None]), u, anchor)


def prune_batched(sel: Selection, resident: Tensor, cfg: SelectorConfig, min_size: int = 0) -> Tensor:
    """Residency-aware pruning of eligible [..., E]; the rule of `acceptmoe.methods.prune_nonresident`,
    on the scores' fixed-point integers (`acceptmoe.methods.fixed`)."""
    U = to_fixed(sel.utility, cfg.score_bits)                                          # [..., E] int64
    cand = sel.eligible & ~resident & ~sel.anchor                                      # [..., E]
    order = order_desc(sel.utility).flip(-1)                                           # ascending u, ties: higher index
    walk = cand.gather(-1, order)                                                      # [..., E] in walking order
    prefix_mass = torch.where(walk, U.gather(-1, order), 0).cumsum(-1)                 # [..., E]
    prefix_count = walk.cumsum(-1)                                                     # [..., E]
    total = (U * sel.eligible).sum(-1, keepdim=True)
    size = sel.eligible.sum(-1, keepdim=True)
    fits = (prefix_mass << LOG2_BITS) <= rho_fixed(cfg.prune_rho) * total
    drop = walk & fits & (size - prefix_count >= max(cfg.prune_min_set, min_size))     # [..., E] in walking order
    return sel.eligible & ~torch.zeros_like(cand).scatter(-1, order, drop)


class TorchVerifier(Verifier):
    """The torch backend of `make_verifier`: `select_batched`, optional `prune_batched`, then `route_in`."""

    def __init__(self, *args):
        super().__init__(*args)
        log2_sizes(self.num_experts, self.device)       # the effective rank's constant, made outside any pass
        self.valid: Tensor | None = None                # fp32 [B, T] 1.0 on a block's tokens, 0.0 on padding

    def _bind_tokens(self, reuse: bool) -> None:
        T = self.alpha.shape[1]
        valid = (torch.arange(T, device=self.device) < self.num_tokens[:, None]).float()      # [B, T]
        if reuse:
            self.valid.copy_(valid)
        else:
            self.valid = valid

    def _run(self, logits: Tensor, resident: Tensor | None) -> VerifierOutput:
        order = order_desc(logits.float())                     # [B, T, E] one ranking for selection and routing
        sel = select_batched(self.spec, self.router, self.cfg, logits, self.alpha, self.valid, order)
        eligible = sel.eligible
        if resident is not None:
            eligible = prune_batched(sel, resident, self.cfg, self.router.top_k)
        ids, weights = route_in(logits, eligible, self.router, order)
        return VerifierOutput(ids, weights, eligible, sel.utility, sel.anchor)
