"""The verifier's torch backend: every block of a step, one MoE layer per call, in pure tensor code.

Same contract as the Triton kernel (`verify.Verifier`): logits [B, T, E] -> VerifierOutput, no host
synchronisation, no Python branching on tensor values, padding tokens ignored by the selection. It must
agree exactly with the per-block reference (`acceptmoe.methods.select`, `prune_nonresident`, `route`);
every ranking is the project's one rule (`acceptmoe.methods.topk`).
"""
from __future__ import annotations

import torch
from torch import Tensor

from acceptmoe.methods import Router, SelectorConfig, Selection
from acceptmoe.methods.routing import route_in
from acceptmoe.methods.selectors import block_sum
from acceptmoe.methods.topk import order_desc, rank_desc

from .verify import Verifier, VerifierOutput


def select_batched(spec, router: Router, cfg: SelectorConfig, logits: Tensor, alpha: Tensor,
                   valid: Tensor) -> Selection:
    """Selection with eligible [B, E] from logits [B, T, E], commitment weights alpha [B, T] and valid [B, T]."""
    z = logits.float()
    E = z.shape[-1]
    no_anchor = torch.zeros(z.shape[:-2] + (E,), dtype=torch.bool, device=z.device)
    sizing, score = spec.sizing, spec.score
    vmask = valid[..., None]                                                           # [B, T, 1]
    total = lambda terms: block_sum(terms * vmask, cfg.score_bits)                     # [B, E]
    if score == "router-mass":
        mass = total(torch.softmax(z, -1))
        return Selection(rank_desc(mass) < cfg.budget, mass, no_anchor)
    demand = "gate" if score == "votes" else cfg.demand_score
    r, member = router.gates(z, demand)                                                # [B, T, E]
    if sizing == "all":
        return Selection(~no_anchor, total(r), no_anchor)
    if score == "votes":
        votes, mass = total(member.float()), total(r)
        return Selection(rank_desc(votes, mass) < cfg.budget, votes, no_anchor)
    u = total(alpha[..., None] * r)                                                    # [B, E]
    anchor = member[..., 0, :]                                                         # [B, E]
    rank = rank_desc(u.masked_fill(anchor, float("-inf")))                             # anchors rank last
    if sizing == "fixed":
        n = cfg.budget - anchor.sum(-1)                                                # [B]
    else:
        n = effective_rank_batched(u, ~anchor & (u > 0), cfg.rank_tolerance)           # [B]
    return Selection(anchor | (rank < n[..., None]), u, anchor)


def effective_rank_batched(u: Tensor, candidates: Tensor, tolerance: float) -> Tensor:
    """n_er [...] long over the positive-demand candidates of u [..., E]; 0 where there are none."""
    d = torch.where(candidates, u.double(), 0.0)                                       # [..., E]
    q = d / d.sum(-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    h = -torch.where(candidates, q * q.clamp_min(1e-300).log(), 0.0).sum(-1)          # [...]
    n = torch.ceil(torch.exp(h) * (1.0 - tolerance)).long()
    count = candidates.sum(-1)
    return torch.where(count > 0, n.clamp(min=1).minimum(count), 0)


def prune_batched(sel: Selection, resident: Tensor, cfg: SelectorConfig, min_size: int = 0) -> Tensor:
    """Residency-aware pruning of eligible [..., E]; the rule of `acceptmoe.methods.prune_nonresident`."""
    u = sel.utility.double()                                                           # [..., E]
    cand = sel.eligible & ~resident & ~sel.anchor                                      # [..., E]
    order = order_desc(sel.utility).flip(-1)                                           # ascending u, ties: higher index
    u_sorted = torch.where(cand.gather(-1, order), u.gather(-1, order), 0.0)          # [..., E]
    prefix_mass = torch.zeros_like(u).scatter(-1, order, u_sorted.cumsum(-1))         # [..., E]
    prefix_count = torch.zeros_like(order).scatter(-1, order, cand.gather(-1, order).long().cumsum(-1))
    budget = cfg.prune_rho * torch.where(sel.eligible, u, 0.0).sum(-1, keepdim=True)
    size = sel.eligible.sum(-1, keepdim=True)
    drop = cand & (prefix_mass <= budget) & (size - prefix_count >= max(cfg.prune_min_set, min_size))
    return sel.eligible & ~drop


class TorchVerifier(Verifier):
    """The torch backend of `make_verifier`: `select_batched`, optional `prune_batched`, then `route_in`."""

    def _run(self, logits: Tensor, resident: Tensor | None) -> VerifierOutput:
        B, T, _ = logits.shape
        valid = (torch.arange(T, device=logits.device) < self.num_tokens[:, None]).float()   # [B, T]
        sel = select_batched(self.spec, self.router, self.cfg, logits, self.alpha, valid)
        eligible = sel.eligible
        if resident is not None:
            eligible = prune_batched(sel, resident, self.cfg, self.router.top_k)
        ids, weights = route_in(logits, eligible, self.router)
        return VerifierOutput(ids, weights, eligible, sel.utility, sel.anchor)
