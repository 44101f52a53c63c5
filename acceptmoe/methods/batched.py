"""Fast selection for many layers or blocks at once: `BlockSelector`.

Validation and the per-token weights are computed once per verification block (`prepare`); each call then
runs pure tensor code on logits [..., T, E] (any leading dims: layers, or blocks padded to one T) with no
Python branching on tensor values. It must agree exactly with the per-block reference in `selectors.py`;
ranking uses pairwise comparisons (score desc, secondary desc, index asc), the same rule the Triton
kernel implements.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from .config import SelectorConfig, check_for_method
from .registry import MethodSpec, get_method
from .routing import Router
from .selectors import Selection, commitment_weights
from .tree import BlockInfo


def rank_desc(primary: Tensor, secondary: Tensor | None = None) -> Tensor:
    """rank [..., E] long, 0 = best: primary desc, then secondary desc, then lower index."""
    E = primary.shape[-1]
    idx = torch.arange(E, device=primary.device)
    pi, pj = primary.unsqueeze(-1), primary.unsqueeze(-2)            # [..., E, 1], [..., 1, E]
    beats, tie = pj > pi, pj == pi                                    # [..., i, j]: j beats i
    if secondary is not None:
        si, sj = secondary.unsqueeze(-1), secondary.unsqueeze(-2)
        beats = beats | (tie & (sj > si))
        tie = tie & (sj == si)
    beats = beats | (tie & (idx[None, :] < idx[:, None]))
    return beats.sum(-1)


def effective_rank_batched(u: Tensor, candidates: Tensor, tolerance: float) -> Tensor:
    """n_er [...] long over the positive-demand candidates of u [..., E]; 0 where there are none."""
    d = torch.where(candidates, u.double(), 0.0)                      # [..., E]
    q = d / d.sum(-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    h = -torch.where(candidates, q * q.clamp_min(1e-300).log(), 0.0).sum(-1)   # [...]
    n = torch.ceil(torch.exp(h) * (1.0 - tolerance)).long()
    count = candidates.sum(-1)
    return torch.where(count > 0, n.clamp(min=1).minimum(count), 0)


class BlockSelector:
    """A method's selector bound to one block (or padded blocks), router and config."""

    def __init__(self, method: str, blocks: BlockInfo | Sequence[BlockInfo], router: Router,
                 cfg: SelectorConfig, num_experts: int, device: torch.device | str = "cpu"):
        self.spec: MethodSpec = get_method(method)
        if not self.spec.speculates:
            raise ValueError(f"method {method!r} does not speculate, so it has no verifier-side selector")
        single = isinstance(blocks, BlockInfo)
        blist = [blocks] if single else list(blocks)
        check_for_method(cfg, self.spec, router, num_experts, max(b.max_depth for b in blist))
        self.router, self.cfg, self.num_experts = router, cfg, num_experts
        T = max(b.num_tokens for b in blist)
        valid = torch.zeros(len(blist), T)
        alpha = torch.zeros(len(blist), T)
        for i, b in enumerate(blist):
            valid[i, : b.num_tokens] = 1.0
            if self.spec.needs_commitment:
                alpha[i, : b.num_tokens] = commitment_weights(b, cfg)
        self.valid = (valid[0] if single else valid).to(device)       # [T] or [B, T]
        self.alpha = (alpha[0] if single else alpha).to(device)       # [T] or [B, T]

    def __call__(self, logits: Tensor) -> Selection:
        """logits [..., T, E] (for padded blocks: [..., B, T, E]) -> Selection with eligible [..., E]."""
        z = logits.float()
        E = z.shape[-1]
        no_anchor = torch.zeros(z.shape[:-2] + (E,), dtype=torch.bool, device=z.device)
        sizing, score = self.spec.sizing, self.spec.score
        if score == "router-mass":
            mass = (torch.softmax(z, -1) * self.valid[..., None]).sum(-2)             # [..., E]
            return Selection(rank_desc(mass) < self.cfg.budget, mass, no_anchor)
        demand = "gate" if score == "votes" else self.cfg.demand_score
        r, member = self.router.gates(z, demand)                                       # [..., T, E]
        if sizing == "all":
            return Selection(~no_anchor, (r * self.valid[..., None]).sum(-2), no_anchor)
        if score == "votes":
            votes = (member.float() * self.valid[..., None]).sum(-2)                  # [..., E]
            mass = (r * self.valid[..., None]).sum(-2)
            return Selection(rank_desc(votes, mass) < self.cfg.budget, votes, no_anchor)
        u = (self.alpha[..., None] * r).sum(-2)                                        # [..., E]
        anchor = member[..., 0, :]                                                     # [..., E]
        rank = rank_desc(torch.where(anchor, -1.0, u))                                 # anchors rank last
        if sizing == "fixed":
            n = self.cfg.budget - anchor.sum(-1)                                       # [...]
        else:
            n = effective_rank_batched(u, ~anchor & (u > 0), self.cfg.rank_tolerance)  # [...]
        return Selection(anchor | (rank < n[..., None]), u, anchor)


def prune_batched(sel: Selection, resident: Tensor, cfg: SelectorConfig, min_size: int = 0) -> Tensor:
    """Residency-aware pruning for eligible [..., E]; the same rule as `pruning.prune_nonresident`."""
    u = sel.utility.double()                                                           # [..., E]
    cand = sel.eligible & ~resident & ~sel.anchor                                      # [..., E]
    E = u.shape[-1]
    idx = torch.arange(E, device=u.device)
    ui, uj = u.unsqueeze(-1), u.unsqueeze(-2)                                          # [..., i, j]
    before = (uj < ui) | ((uj == ui) & (idx[None, :] >= idx[:, None]))                # j at or before i
    before = before & cand.unsqueeze(-2) & cand.unsqueeze(-1)
    prefix_mass = (before.double() * uj).sum(-1)                                       # [..., E]
    prefix_count = before.sum(-1)                                                      # [..., E]
    budget = cfg.prune_rho * torch.where(sel.eligible, u, 0.0).sum(-1, keepdim=True)
    size = sel.eligible.sum(-1, keepdim=True)
    drop = cand & (prefix_mass <= budget) & (size - prefix_count >= max(cfg.prune_min_set, min_size))
    return sel.eligible & ~drop
