"""Routers: the model's routing function, one frozen record of axes, natural and inside an eligible set (the
paper's Eq. 2), in tensor code.

A `Router` is a value of the axes (docs/method.md, "Router kinds"; the axes and their values are
`registry.ROUTING_AXES`): `scoring` (softmax or sigmoid), `order` (score every expert then take the top-k, or
take the top-k logits then score them), `biased` (a per-layer selection bias [E] added to what the choice
ranks, `e_score_correction_bias`), `groups` / `group_top` (group-limited choice: the token's `group_top`
groups whose two best choice values sum highest rank first), `renormalize` (the chosen scores divided by their
sum, the sigmoid's with transformers' + 1e-20) and `scale` (`routed_scaling_factor` on the weights), with its
`top_k`. The routers of today's models are named values (`ROUTER_PRESETS`, `Router.preset`): `softmax_topk`
(Qwen3-MoE, Mixtral, OLMoE, Qwen2-MoE), `topk_softmax` (GPT-OSS), `sigmoid_grouped` (DeepSeek-V3, dots.llm1),
`topk_sigmoid` (Llama 4); another router is another value, not new code.

A router's choice is one order over the experts (`Router.ranking`) of its choice values (`Router.scores`): the
scores plus the bias after scoring (score then top-k), the logits plus the bias before it (top-k then score);
a softmax without a bias or groups ranks the logits themselves (our choice: the same order, as a softmax is
monotone within a token, without the rounding that ties distinct logits' probabilities), a sigmoid its
sigmoids as the models do (they saturate to 1.0 above 16.6). Group-limited, the token's groups rank first. Ties always go
to the lower index (`topk`). The natural top-k is its first k, and constrained routing is its first k inside
S (`first_k_in`): a set S of at least k experts always routes k, and S = every expert is natural routing.

The gates (`Router.gates`, in [0, 1]: what the selection scores sum) are the chosen experts' scores (scored
over every expert, or over the chosen k), renormalised if asked (the masked logits' scores: masking before or
after the score gives the same weights), else the unmasked scores (our choice for a non-renormalising softmax).
`Router.weights` are the gates times `scale`; `Router.probs` the router's probabilities over every expert. All
of it is the model's float arithmetic in fp32, primitives shared by every implementation that must produce the
model's exact values, each axis value once in the tables below (`SCORING`, `ORDERS`, `BIAS`, `GROUPING`,
`RENORMALISE`); `route_in` is the batched routing the engine and the torch verifier run (no host
synchronisation). The readable reference `acceptmoe.methods.route` chooses the experts on its own and then calls
`weights`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from acceptmoe.registry import Registry

from .registry import Order, Scoring, UnknownRouterError
from .topk import first_k_in, order_desc, rank_desc, topk_ids

NORM_EPS = 1e-20                 # the sigmoid's renormalisation: w / (sum w + 1e-20), as transformers


@dataclass(frozen=True)
class Router:
    """A target's routing function: one value of every routing axis, and its top-k (docs/method.md)."""
    scoring: Scoring             # a member, or its value ("softmax", "sigmoid")
    order: Order                 # a member, or its value ("score_then_topk", "topk_then_score")
    top_k: int = 1
    renormalize: bool = True     # divide the chosen experts' scores by their sum (norm_topk_prob)
    biased: bool = False         # the choice adds a per-layer selection bias [E] (the calls' `bias=`)
    groups: int = 1              # expert groups (n_group), consecutive ids of E / groups each
    group_top: int = 1           # groups a token's experts come from (topk_group); all groups: no limit
    scale: float = 1.0           # routed_scaling_factor on the weights

    def __post_init__(self) -> None:
        object.__setattr__(self, "scoring", _member(Scoring, self.scoring))
        object.__setattr__(self, "order", _member(Order, self.order))
        if self.top_k < 1:
            raise ValueError(f"router top_k must be >= 1, got {self.top_k}")
        if self.normalised and not self.renormalize:
            raise ValueError("a softmax after the top-k always normalises over the chosen k: set renormalize=True")
        if self.groups < 1 or not 1 <= self.group_top <= self.groups:
            raise ValueError(f"router group_top must be in [1, groups={self.groups}], got {self.group_top}")

    @classmethod
    def preset(cls, name: str, top_k: int, **fields) -> Router:
        """The preset called `name` (`ROUTER_PRESETS`; an unknown name is refused with the closest) with the
        model's `top_k` and any other fields (`renormalize`, `groups`, `group_top`, `scale`)."""
        return dataclasses.replace(ROUTER_PRESETS[name], top_k=top_k, **fields)

    @property
    def grouped(self) -> bool:
        """Whether the choice is group-limited (a token's experts come from `group_top` < `groups` groups)."""
        return self.group_top < self.groups

    @property
    def ranks_logits(self) -> bool:
        """Whether the choice ranks the logits themselves (no bias, no groups; top-k then score, or a score that
        ranks as its logits, `Scorer.ranks_logits`): a top-k of masked logits is then Eq. 2."""
        return not self.biased and not self.grouped and (self.order is Order.TOPK_THEN_SCORE
                                                         or SCORING[self.scoring].ranks_logits)

    @property
    def normalised(self) -> bool:
        """Whether the score alone normalises the chosen k (a softmax after the top-k): renormalising adds
        nothing, and is not done again."""
        return self.scoring is Scoring.SOFTMAX and self.order is Order.TOPK_THEN_SCORE

    @property
    def axes(self) -> dict[str, object]:
        """This router's value of every routing axis (`registry.ROUTING_AXES`)."""
        return {"scoring": self.scoring, "order": self.order, "biased": self.biased, "grouped": self.grouped,
                "renormalize": self.renormalize}

    @property
    def name(self) -> str:
        """The first preset with this scoring, order and bias, else those axes spelled out."""
        key = (self.scoring, self.order, self.biased)
        return next((n for n, r in ROUTER_PRESETS.items() if (r.scoring, r.order, r.biased) == key),
                    f"{self.scoring.value} {self.order.value}{' biased' if self.biased else ''}")

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
        """fp32 [..., T, E]: the choice values (inside the chosen groups): the logits, or the scores (score then
        top-k) or logits (top-k then score), plus the selection bias where the router has one (None: zero)."""
        z = z.float()
        values = z if self.ranks_logits else ORDERS[self.order].ranked(SCORING[self.scoring], z)
        return BIAS[self.biased](values, bias)

    def ranking(self, z: Tensor, bias: Tensor | None = None) -> Tensor:
        """ids [..., T, E] long: the router's choice order over every expert, best first (see the docstring)."""
        return GROUPING[self.grouped](self, self.scores(z, bias))

    def in_groups(self, scores: Tensor) -> Tensor:
        """bool [..., T, E]: the experts of each token's `group_top` groups, ranked by the sum of their two
        best `scores` (fp32 [..., T, E]; ties: the lower group)."""
        if not self.grouped:                                                                # no limit
            return torch.ones_like(scores, dtype=torch.bool)
        size = scores.shape[-1] // self.groups
        best2 = scores.unflatten(-1, (self.groups, size)).topk(2, dim=-1).values.sum(-1)    # [..., T, G]
        chosen = rank_desc(best2) < self.group_top                                          # [..., T, G]
        return chosen.repeat_interleave(size, dim=-1)                                       # [..., T, E]

    def natural(self, logits: Tensor, order: Tensor | None = None,
                bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Unrestricted routing. logits [..., T, E] -> ids [..., T, k] long, weights [..., T, k] fp32.
        order: `self.ranking(logits)` [..., T, E] where the caller already has it (see `route_in`)."""
        return route_in(logits, None, self, order, bias)

    def probs(self, z: Tensor) -> Tensor:
        """fp32 [..., T, E]: the router's probability of every expert (MoE-Spec's router mass, the `softmax`
        demand score): softmax(z), or the sigmoids normalised over E."""
        return SCORING[self.scoring].probs(z.float())

    def gates(self, z: Tensor, ids: Tensor, unmasked: Tensor | None = None) -> Tensor:
        """The chosen experts' gates fp32 [..., T, k] in [0, 1] (ids [..., T, k], best first) under fp32 logits
        z [..., T, E] (-inf outside S where routing is constrained); `unmasked`: the logits before masking (a
        non-renormalising router keeps their scores; None: z is unmasked)."""
        source = z if self.renormalize or unmasked is None else unmasked
        w = ORDERS[self.order].gates(SCORING[self.scoring], source, ids)
        return w if self.normalised else RENORMALISE[self.renormalize](w, SCORING[self.scoring].eps)

    def weights(self, z: Tensor, ids: Tensor, unmasked: Tensor | None = None) -> Tensor:
        """The gating weights fp32 [..., T, k] the experts' outputs are multiplied by: `gates` times `scale`."""
        w = self.gates(z, ids, unmasked)
        return w if self.scale == 1.0 else w * self.scale      # x * 1.0 is x: no operation a pass pays for


def _member(enum_type, value):
    """An axis member from itself or its value; another value is refused, naming the valid ones."""
    try:
        return enum_type(value)
    except ValueError:
        raise ValueError(f"router {enum_type.__name__.lower()} {value!r} is not one of "
                         f"{', '.join(m.value for m in enum_type)}") from None


@dataclass(frozen=True)
class Scorer:
    """One score function's float arithmetic over fp32 logits."""
    every: Callable[[Tensor], Tensor]             # [..., E] -> the score of every expert
    chosen: Callable[[Tensor, Tensor], Tensor]    # (z [..., E], ids [..., k]) -> the chosen's, scored over E
    within: Callable[[Tensor], Tensor]            # chosen logits [..., k] -> their scores among themselves
    probs: Callable[[Tensor], Tensor]             # [..., E] -> the router's probabilities (summing to one)
    eps: float                                    # added to the sum the chosen scores are renormalised by
    ranks_logits: bool                            # without bias or groups, score then top-k ranks the logits


@dataclass(frozen=True)
class Ordering:
    """Where an order puts the score: what its choice ranks, and the chosen experts' scores."""
    ranked: Callable[[Scorer, Tensor], Tensor]            # (scorer, z) -> the choice values before any bias
    gates: Callable[[Scorer, Tensor, Tensor], Tensor]     # (scorer, z, ids) -> the chosen experts' scores


def _sigmoid_probs(z: Tensor) -> Tensor:
    s = torch.sigmoid(z)                                                   # [..., T, E]
    return s / s.sum(-1, keepdim=True)


# Every routing axis value once (`registry.ROUTING_AXES`): the torch backend's, the engine's and the shared
# float arithmetic of every backend.
SCORING = {
    Scoring.SOFTMAX: Scorer(every=lambda z: torch.softmax(z, -1),
                            chosen=lambda z, ids: torch.softmax(z, -1).gather(-1, ids),
                            within=lambda zk: torch.softmax(zk, -1), probs=lambda z: torch.softmax(z, -1), eps=0.0,
                            ranks_logits=True),
    Scoring.SIGMOID: Scorer(every=torch.sigmoid, chosen=lambda z, ids: torch.sigmoid(z.gather(-1, ids)),
                            within=torch.sigmoid, probs=_sigmoid_probs, eps=NORM_EPS, ranks_logits=False),
}
ORDERS = {
    Order.SCORE_THEN_TOPK: Ordering(ranked=lambda scorer, z: scorer.every(z),
                                    gates=lambda scorer, z, ids: scorer.chosen(z, ids)),
    Order.TOPK_THEN_SCORE: Ordering(ranked=lambda scorer, z: z,
                                    gates=lambda scorer, z, ids: scorer.within(z.gather(-1, ids))),
}
BIAS: dict[bool, Callable[[Tensor, Tensor | None], Tensor]] = {
    False: lambda values, bias: values,
    True: lambda values, bias: values + (0.0 if bias is None else bias.float()),
}
GROUPING: dict[bool, Callable[[Router, Tensor], Tensor]] = {
    False: lambda router, s: order_desc(s),
    True: lambda router, s: order_desc(router.in_groups(s).float(), s),     # the token's groups first
}
RENORMALISE: dict[bool, Callable[[Tensor, float], Tensor]] = {
    False: lambda w, eps: w,
    True: lambda w, eps: w / (w.sum(-1, keepdim=True) + eps if eps else w.sum(-1, keepdim=True)),   # x + 0.0 is x
}

# The routers of today's models, by name: values of the record at top-1 (`Router.preset` sets a model's top-k
# and fields such as renormalize, groups and scale).
ROUTER_PRESETS: Registry[Router] = Registry("router preset", error=UnknownRouterError)
ROUTER_PRESETS.add("softmax_topk", Router(Scoring.SOFTMAX, Order.SCORE_THEN_TOPK))      # Qwen3-MoE, Mixtral, ...
ROUTER_PRESETS.add("topk_softmax", Router(Scoring.SOFTMAX, Order.TOPK_THEN_SCORE))      # GPT-OSS
ROUTER_PRESETS.add("sigmoid_grouped", Router(Scoring.SIGMOID, Order.SCORE_THEN_TOPK, biased=True))   # DeepSeek-V3
ROUTER_PRESETS.add("topk_sigmoid", Router(Scoring.SIGMOID, Order.TOPK_THEN_SCORE, renormalize=False))   # Llama 4
ROUTER_NAMES = ROUTER_PRESETS.names()


def route_in(logits: Tensor, eligible: Tensor | None, router: Router, order: Tensor | None = None,
             bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Batched constrained routing (Eq. 2) without a size check (no host synchronisation): the caller
    guarantees abs(S) >= k. logits [..., T, E]; eligible [..., E] bool (one set per block, broadcast over its
    tokens), [..., T, E] (one per token) or None (all experts); bias [E] the layer's selection bias (biased
    routers; None: zero) -> ids [..., T, k] long, weights fp32.

    order: the router's choice order of the unmasked logits, `router.ranking(logits, bias)` [..., T, E], if the
    caller has it; the top-k inside S is then read from it (`first_k_in`) instead of ranking the masked
    logits again (the same ids for finite logits)."""
    z = logits.float()                                          # [..., T, E]
    k = router.top_k
    if eligible is not None and eligible.dim() == z.dim() - 1:
        eligible = eligible.unsqueeze(-2)                       # [..., 1, E]
    masked = z if eligible is None else z.masked_fill(~eligible, float("-inf"))
    if order is None and not router.ranks_logits:
        order = router.ranking(z, bias)                         # groups and bias are the token's own (unmasked)
    if order is None:
        ids = topk_ids(masked, k)                               # [..., T, k], best first
    else:
        ids = order[..., :k] if eligible is None else first_k_in(order, eligible, k)
    return ids, router.weights(masked, ids, z if eligible is not None else None)
