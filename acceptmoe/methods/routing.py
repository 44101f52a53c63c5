"""Routers: the model's routing function, natural and inside an eligible set (the paper's Eq. 2), in tensor code.

Two routing functions cover the evaluated targets:
- `softmax_topk` (Qwen3-MoE, Mixtral): softmax over all E experts, top-k, renormalise over the k if
  `renormalize` (Qwen3's `norm_topk_prob`).
- `topk_softmax` (GPT-OSS): top-k of the raw logits, softmax over those k (always normalised).

Constrained routing sets the logits of ineligible experts to -inf and applies the same function. For a
router that renormalises over the chosen k, the weights equal the unmasked softmax probabilities of the
chosen experts renormalised (masking before or after the softmax gives the same weights). For a
non-renormalising `softmax_topk` router, our choice keeps the original unmasked softmax probabilities.
All math is fp32. The k experts are the k largest (masked) logits under the project's one ranking rule,
`topk` (value descending, ties to the lower expert index).

`Router.weights` is the gate arithmetic itself (softmax, gather, renormalisation: the model's float
formula), a primitive shared by every implementation that must produce the model's exact weights;
`route_in` is the batched routing the engine and the torch verifier run (no host synchronisation). The
readable reference `acceptmoe.methods.route` chooses the experts on its own and then calls `weights`.
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

    def weights(self, z: Tensor, ids: Tensor, unmasked: Tensor | None = None) -> Tensor:
        """The gating weights fp32 [..., T, k] of the chosen experts ids [..., T, k] (best first) under fp32
        logits z [..., T, E] (-inf outside S where routing is constrained); `unmasked`: the logits before
        masking (a non-renormalising router keeps their softmax probabilities; None: z is unmasked)."""
        if self.kind == "topk_softmax":
            return torch.softmax(z.gather(-1, ids), dim=-1)                # softmax over the chosen logits
        if not self.renormalize:
            return torch.softmax(z if unmasked is None else unmasked, dim=-1).gather(-1, ids)
        w = torch.softmax(z, dim=-1).gather(-1, ids)                       # [..., T, k]
        return w / w.sum(-1, keepdim=True)


def route_in(logits: Tensor, eligible: Tensor | None, router: Router,
             order: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Batched constrained routing (Eq. 2) without a size check (no host synchronisation): the caller
    guarantees abs(S) >= k. logits [..., T, E]; eligible [..., E] bool (one set per block, broadcast over its
    tokens), [..., T, E] (one per token) or None (all experts) -> ids [..., T, k] long, weights fp32.

    order: the ranking of the unmasked logits, `order_desc(logits.float())` [..., T, E], if the caller has
    it; the top-k inside S is then read from it (`first_k_in`) instead of sorting the masked logits again
    (the same ids for finite logits)."""
    z = logits.float()                                          # [..., T, E]
    k = router.top_k
    if eligible is not None and eligible.dim() == z.dim() - 1:
        eligible = eligible.unsqueeze(-2)                       # [..., 1, E]
    masked = z if eligible is None else z.masked_fill(~eligible, float("-inf"))
    if order is None:
        ids = topk_ids(masked, k)                               # [..., T, k], best first
    else:
        ids = order[..., :k] if eligible is None else first_k_in(order, eligible, k)
    return ids, router.weights(masked, ids, z if eligible is not None else None)
