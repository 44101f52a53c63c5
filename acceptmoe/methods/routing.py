"""Routers: natural top-k routing and constrained routing inside an eligible set (the paper's Eq. 2).

Two routing functions cover the evaluated targets:
- `softmax_topk` (Qwen3-MoE, Mixtral): softmax over all E experts, top-k, renormalise over the k if
  `renormalize` (Qwen3's `norm_topk_prob`).
- `topk_softmax` (GPT-OSS): top-k of the raw logits, softmax over those k (always normalised).

Constrained routing sets the logits of ineligible experts to -inf and applies the same function. For a
router that renormalises over the chosen k, the weights equal the unmasked softmax probabilities of the
chosen experts renormalised (masking before or after the softmax gives the same weights). For a
non-renormalising `softmax_topk` router, our choice keeps the original unmasked softmax probabilities.
All math is fp32. The k experts are the k largest (masked) logits under the project's one ranking rule,
`topk.topk` (value descending, ties to the lower expert index); the softmax is monotonic, so this is the
top-k of the probabilities, with the tie rule stated.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from .topk import first_k_in, topk_ids

RouterKind = Literal["softmax_topk", "topk_softmax"]
ROUTER_KINDS = ("softmax_topk", "topk_softmax")


@dataclass(frozen=True)
class Router:
    kind: RouterKind
    top_k: int
    renormalize: bool = True

    def __post_init__(self) -> None:
        if self.kind not in ROUTER_KINDS:
            raise ValueError(f"unknown router kind {self.kind!r}; valid kinds: {', '.join(ROUTER_KINDS)}")
        if self.top_k < 1:
            raise ValueError(f"router top_k must be >= 1, got {self.top_k}")
        if self.kind == "topk_softmax" and not self.renormalize:
            raise ValueError("topk_softmax always normalises over the chosen k: set renormalize=True")

    def natural(self, logits: Tensor, order: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Unrestricted routing. logits [..., T, E] -> ids [..., T, k] long, weights [..., T, k] fp32.
        order: `order_desc(logits)` [..., T, E] where the caller already has it (see `route_in`)."""
        return route_in(logits, None, self, order)

    def gates(self, logits: Tensor, score: str = "gate", order: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Dense natural gating weights r [..., T, E] (zero outside K_t) and membership [..., T, E] bool.

        score="gate": the model's own post-top-k weight. score="softmax": the full-softmax probability of
        the chosen experts (restricted to K_t). order: as in `natural`."""
        ids, weights = self.natural(logits, order)
        if score == "softmax":
            weights = torch.softmax(logits.float(), dim=-1).gather(-1, ids)
        elif score != "gate":
            raise ValueError(f"unknown demand_score {score!r}; valid: gate, softmax")
        r = torch.zeros(logits.shape, dtype=torch.float32, device=logits.device).scatter(-1, ids, weights)
        member = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device).scatter(-1, ids, True)
        return r, member


def route(logits: Tensor, eligible: Tensor | None, router: Router) -> tuple[Tensor, Tensor]:
    """Constrained top-k routing (Eq. 2).

    logits [..., T, E]; eligible [..., E] bool (one set per block, broadcast over its T tokens), [..., T, E]
    bool (one set per token) or None (all experts). Returns ids [..., T, k] long, weights [..., T, k] fp32.
    """
    k = router.top_k
    if eligible is not None:
        n_min = int(eligible.sum(-1).min()) if eligible.numel() else 0
        if n_min < k:
            raise ValueError(f"eligible set has {n_min} experts, fewer than top_k={k}")
    return route_in(logits, eligible, router)


def route_in(logits: Tensor, eligible: Tensor | None, router: Router,
             order: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """`route` without its size check (no host synchronisation): the caller guarantees |S| >= k.

    order: the ranking of the unmasked logits, `order_desc(logits.float())` [..., T, E], if the caller has
    it; the top-k inside S is then read from it (`first_k_in`) instead of sorting the masked logits again
    (the same ids for finite logits)."""
    z = logits.float()                                          # [..., T, E]
    k = router.top_k
    if eligible is not None:
        if eligible.dim() == z.dim() - 1:
            eligible = eligible.unsqueeze(-2)                   # [..., 1, E]
        z = z.masked_fill(~eligible, float("-inf"))
    if order is None:
        ids = topk_ids(z, k)                                    # [..., T, k], best first
    else:
        ids = order[..., :k] if eligible is None else first_k_in(order, eligible, k)
    if router.kind == "topk_softmax":
        return ids, torch.softmax(z.gather(-1, ids), dim=-1)   # softmax over the chosen logits
    weights = torch.softmax(z, dim=-1).gather(-1, ids)          # [..., T, k]
    if router.renormalize:
        weights = weights / weights.sum(-1, keepdim=True)
    elif eligible is not None:
        weights = torch.softmax(logits.float(), dim=-1).gather(-1, ids)
    return ids, weights
