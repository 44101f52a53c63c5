"""Routers: the model's routing function, natural and inside an eligible set (the paper's Eq. 2), in tensor code.

Three routing functions (`RouterKind`, docs/method.md "Router kinds"):
- `SOFTMAX_TOPK` (Qwen3-MoE, Mixtral, OLMoE, Qwen2-MoE): softmax over all E experts, top-k, renormalise over
  the k if `renormalize` (Qwen3's `norm_topk_prob`).
- `TOPK_SOFTMAX` (GPT-OSS): top-k of the raw logits, softmax over those k (always normalised).
- `SIGMOID_GROUPED` (DeepSeek-V3): scores sigmoid(z); the choice ranks sigmoid(z) + a per-layer selection bias
  (`e_score_correction_bias`), inside the `group_top` of `groups` expert groups whose two best biased
  scores sum highest; the weights are the unbiased sigmoids of the chosen k, normalised over them (with
  transformers' 1e-20) if `renormalize`, times `scale` (`routed_scaling_factor`).

A router's choice is one order over the experts (`Router.order`): the logits descending for the softmax
kinds (exp is monotone), and for the grouped kind the experts of the token's chosen groups first, each part
by biased score descending; ties always to the lower index (`topk`). The natural top-k is its first k, and
constrained routing is its first k inside S (`first_k_in`): the groups are the token's own, chosen on
unmasked scores, so a set S of at least k experts always routes k, and S = every expert is natural routing.

For a router that renormalises over the chosen k, the weights equal the unmasked probabilities of the chosen
experts renormalised (masking before or after the softmax gives the same weights). For a non-renormalising
`SOFTMAX_TOPK` router, our choice keeps the original unmasked softmax probabilities. All math is fp32.

`Router.gates` (the chosen experts' share, in [0, 1]: what the selection scores sum), `Router.weights` (the
gates times `scale`: what the experts' outputs are multiplied by), `Router.probs` (the router's
probabilities over every expert) and `Router.scores` (what the choice ranks) are the model's float
arithmetic, primitives shared by every implementation that must produce the model's exact values;
`route_in` is the batched routing the engine and the torch verifier run (no host synchronisation). The
readable reference `acceptmoe.methods.route` chooses the experts on its own and then calls `weights`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .registry import ROUTER_KIND_NAMES, RouterKind
from .topk import first_k_in, order_desc, rank_desc, topk_ids

ROUTER_KINDS = ROUTER_KIND_NAMES.names()
NORM_EPS = 1e-20                 # the grouped kind's renormalisation: w / (sum w + 1e-20), as transformers


@dataclass(frozen=True)
class Router:
    kind: RouterKind             # a member, or its name (parsed by `RouterKind.parse`)
    top_k: int
    renormalize: bool = True
    groups: int = 1              # SIGMOID_GROUPED: expert groups (n_group), consecutive ids of E / groups each
    group_top: int = 1           # SIGMOID_GROUPED: groups a token's experts come from (topk_group)
    scale: float = 1.0           # SIGMOID_GROUPED: routed_scaling_factor on the weights

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", RouterKind.parse(self.kind))
        if self.top_k < 1:
            raise ValueError(f"router top_k must be >= 1, got {self.top_k}")
        if self.kind is RouterKind.TOPK_SOFTMAX and not self.renormalize:
            raise ValueError("topk_softmax always normalises over the chosen k: set renormalize=True")
        if self.kind is not RouterKind.SIGMOID_GROUPED and (self.groups, self.group_top, self.scale) != (1, 1, 1.0):
            raise ValueError(f"groups, group_top and scale belong to the sigmoid_grouped router, not {self.kind.value}")
        if not 1 <= self.group_top <= self.groups:
            raise ValueError(f"router group_top must be in [1, groups={self.groups}], got {self.group_top}")

    @property
    def biased(self) -> bool:
        """Whether the choice adds a per-layer selection bias [E] to the scores (`bias=` of the calls)."""
        return self.kind is RouterKind.SIGMOID_GROUPED

    def check_experts(self, num_experts: int) -> str | None:
        """What is wrong with this router over `num_experts` experts, or None (`Fit` raises it)."""
        if self.top_k > num_experts:
            return f"router top_k={self.top_k} exceeds the number of experts E={num_experts}"
        if num_experts % self.groups:
            return f"router groups={self.groups} do not divide the E={num_experts} experts"
        if self.groups > 1 and num_experts // self.groups < 2:
            return f"router groups of {num_experts // self.groups} expert: a group's score needs two"
        if self.group_top * (num_experts // self.groups) < self.top_k:
            return (f"router group_top={self.group_top} groups of {num_experts // self.groups} experts hold fewer "
                    f"than top_k={self.top_k}")
        return None

    def scores(self, z: Tensor, bias: Tensor | None = None) -> Tensor:
        """fp32 [..., T, E]: what the choice ranks (inside the chosen groups): the logits, or sigmoid(z) + bias."""
        return CHOICE[self.kind](z.float(), bias)

    def order(self, z: Tensor, bias: Tensor | None = None) -> Tensor:
        """ids [..., T, E] long: the router's choice order over every expert, best first (see the docstring)."""
        return ORDERS[self.kind](self, z.float(), bias)

    def in_groups(self, scores: Tensor) -> Tensor:
        """bool [..., T, E]: the experts of each token's `group_top` groups, ranked by the sum of their two
        best `scores` (fp32 [..., T, E]; ties: the lower group)."""
        if self.group_top == self.groups:                                                   # no limit
            return torch.ones_like(scores, dtype=torch.bool)
        size = scores.shape[-1] // self.groups
        best2 = scores.unflatten(-1, (self.groups, size)).topk(2, dim=-1).values.sum(-1)    # [..., T, G]
        chosen = rank_desc(best2) < self.group_top                                          # [..., T, G]
        return chosen.repeat_interleave(size, dim=-1)                                       # [..., T, E]

    def natural(self, logits: Tensor, order: Tensor | None = None,
                bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Unrestricted routing. logits [..., T, E] -> ids [..., T, k] long, weights [..., T, k] fp32.
        order: `self.order(logits)` [..., T, E] where the caller already has it (see `route_in`)."""
        return route_in(logits, None, self, order, bias)

    def probs(self, z: Tensor) -> Tensor:
        """fp32 [..., T, E]: the router's probability of every expert (MoE-Spec's router mass, the `softmax`
        demand score): softmax(z), or the sigmoids normalised over E."""
        return PROBS[self.kind](z.float())

    def gates(self, z: Tensor, ids: Tensor, unmasked: Tensor | None = None) -> Tensor:
        """The chosen experts' gates fp32 [..., T, k] in [0, 1] (ids [..., T, k], best first) under fp32 logits
        z [..., T, E] (-inf outside S where routing is constrained); `unmasked`: the logits before masking (a
        non-renormalising router keeps their probabilities; None: z is unmasked)."""
        return GATES[self.kind](self, z, ids, z if unmasked is None else unmasked)

    def weights(self, z: Tensor, ids: Tensor, unmasked: Tensor | None = None) -> Tensor:
        """The gating weights fp32 [..., T, k] the experts' outputs are multiplied by: `gates` times `scale`."""
        w = self.gates(z, ids, unmasked)
        return w * self.scale if self.kind is RouterKind.SIGMOID_GROUPED else w


def _softmax_topk(router: Router, z: Tensor, ids: Tensor, unmasked: Tensor) -> Tensor:
    if not router.renormalize:
        return torch.softmax(unmasked, dim=-1).gather(-1, ids)
    w = torch.softmax(z, dim=-1).gather(-1, ids)                           # [..., T, k]
    return w / w.sum(-1, keepdim=True)


def _sigmoid_grouped(router: Router, z: Tensor, ids: Tensor, unmasked: Tensor) -> Tensor:
    w = torch.sigmoid(unmasked.gather(-1, ids))                            # [..., T, k] unbiased
    return w / (w.sum(-1, keepdim=True) + NORM_EPS) if router.renormalize else w


def _sigmoid_probs(z: Tensor) -> Tensor:
    s = torch.sigmoid(z)                                                   # [..., T, E]
    return s / s.sum(-1, keepdim=True)


def _grouped_order(router: Router, z: Tensor, bias: Tensor | None) -> Tensor:
    s = router.scores(z, bias)                                             # [..., T, E]
    return order_desc(router.in_groups(s).float(), s)


# The kinds' arithmetic, one entry per `RouterKind` member (the torch backend's and the engine's routing)
CHOICE = {RouterKind.SOFTMAX_TOPK: lambda z, bias: z, RouterKind.TOPK_SOFTMAX: lambda z, bias: z,
          RouterKind.SIGMOID_GROUPED: lambda z, bias: torch.sigmoid(z) + (0.0 if bias is None else bias.float())}
ORDERS = {RouterKind.SOFTMAX_TOPK: lambda router, z, bias: order_desc(z),
          RouterKind.TOPK_SOFTMAX: lambda router, z, bias: order_desc(z),
          RouterKind.SIGMOID_GROUPED: _grouped_order}
PROBS = {RouterKind.SOFTMAX_TOPK: lambda z: torch.softmax(z, -1),
         RouterKind.TOPK_SOFTMAX: lambda z: torch.softmax(z, -1),
         RouterKind.SIGMOID_GROUPED: _sigmoid_probs}
GATES = {RouterKind.SOFTMAX_TOPK: _softmax_topk,
         RouterKind.TOPK_SOFTMAX: lambda router, z, ids, unmasked: torch.softmax(z.gather(-1, ids), dim=-1),
         RouterKind.SIGMOID_GROUPED: _sigmoid_grouped}


def route_in(logits: Tensor, eligible: Tensor | None, router: Router, order: Tensor | None = None,
             bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Batched constrained routing (Eq. 2) without a size check (no host synchronisation): the caller
    guarantees abs(S) >= k. logits [..., T, E]; eligible [..., E] bool (one set per block, broadcast over its
    tokens), [..., T, E] (one per token) or None (all experts); bias [E] the layer's selection bias (biased
    kinds; None: zero) -> ids [..., T, k] long, weights fp32.

    order: the router's choice order of the unmasked logits, `router.order(logits, bias)` [..., T, E], if the
    caller has it; the top-k inside S is then read from it (`first_k_in`) instead of ranking the masked
    logits again (the same ids for finite logits)."""
    z = logits.float()                                          # [..., T, E]
    k = router.top_k
    if eligible is not None and eligible.dim() == z.dim() - 1:
        eligible = eligible.unsqueeze(-2)                       # [..., 1, E]
    masked = z if eligible is None else z.masked_fill(~eligible, float("-inf"))
    if order is None and router.kind is RouterKind.SIGMOID_GROUPED:
        order = router.order(z, bias)                           # the groups are the token's own (unmasked)
    if order is None:
        ids = topk_ids(masked, k)                               # [..., T, k], best first
    else:
        ids = order[..., :k] if eligible is None else first_k_in(order, eligible, k)
    return ids, router.weights(masked, ids, z if eligible is not None else None)
