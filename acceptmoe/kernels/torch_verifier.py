"""The verifier's torch backend: every block of a step, one MoE layer per call, in pure tensor code.

Same contract as the Triton kernel (`verifier.Verifier`): logits [B, T, E] -> VerifierOutput, no host
synchronisation, no Python branching on tensor values, padding tokens ignored by the selection. Each
`Score` and each `Sizing` member is one entry of `SCORES` / `SIZES` below, any combination served, and each
routing axis value is an entry of the routing tables (`acceptmoe.methods.routing`: `SCORING`, `ORDERS`, `BIAS`,
`GROUPING`, `RENORMALISE`; the router's order, read by the selection and by `route_in`) (declared to the
registry when this module loads). It must agree
exactly with the readable reference (`acceptmoe.methods.select`, `prune`, `route`), which it shares no code
with beyond the documented primitives (`Router.scores`, `gates`, `probs`, `acceptmoe.methods.fixed`); every
ranking is the project's one rule (`acceptmoe.methods.topk`).
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor

from acceptmoe.methods import Plan, Score, Selection, Sizing, order_desc, rank_desc, register_backend, route_in
from acceptmoe.methods.fixed import LOG2_BITS, log2_fixed, rank_guard, rho_fixed, to_fixed, truncate
from acceptmoe.methods.routing import BIAS, GROUPING, ORDERS, RENORMALISE, SCORING

from .verifier import StepBuffers, Verifier, VerifierOutput


def block_sum(terms: Tensor, bits: int) -> Tensor:
    """fp32 [..., E]: the sum over tokens (dim -2) of terms [..., T, E] in [0, 1], each truncated to a
    multiple of 2^-bits (`fixed.truncate`); the integer sum is exact, then held as fp32."""
    return truncate(terms, bits).sum(-2).float() * float(2.0 ** -bits)


class Gates:
    """One layer's natural routing of B blocks, dense [B, T, E], computed when first read (MoE-Spec without
    an anchor reads none of it): K_t membership, the model's own gate r[t, e] on it (zero outside K_t) and
    the demand score's weight (`demand_score`: the gate, or the router's probabilities restricted to K_t).
    Plain lazy attributes (no `functools.cached_property`, whose lock torch.compile cannot trace)."""

    def __init__(self, plan: Plan, z: Tensor, order: Tensor):
        self.plan, self.z, self.order = plan, z, order        # fp32 logits [B, T, E] and the router's order
        self._ids: Tensor | None = None
        self._weights: Tensor | None = None
        self._member: Tensor | None = None
        self._gate: Tensor | None = None
        self._demand: Tensor | None = None

    def _natural(self) -> Tensor:
        if self._ids is None:
            self._ids = self.order[..., :self.plan.router.top_k]                         # [B, T, k]
            self._weights = self.plan.router.gates(self.z, self._ids)                  # [B, T, k]
        return self._ids

    def _dense(self, values: Tensor) -> Tensor:
        return torch.zeros_like(self.z).scatter(-1, self._natural(), values)            # [B, T, E]

    @property
    def member(self) -> Tensor:
        if self._member is None:
            ids = self._natural()
            self._member = torch.zeros(self.z.shape, dtype=torch.bool, device=self.z.device).scatter(-1, ids, True)
        return self._member

    @property
    def gate(self) -> Tensor:
        if self._gate is None:
            self._natural()
            assert self._weights is not None                                            # set by _natural
            self._gate = self._dense(self._weights)
        return self._gate

    @property
    def demand(self) -> Tensor:
        if self._demand is None:
            self._demand = self.gate if self.plan.selector.demand_score == "gate" else \
                self._dense(self.plan.router.probs(self.z).gather(-1, self._natural()))
        return self._demand


def shared_sum(g: Gates, s: StepBuffers, bits: int) -> Tensor:
    """fp32 [B, E]: each block's commitment terms plus the root terms (alpha_root r) of the step's other blocks,
    all truncated, added as integers (padding rows have alpha 0), then held as fp32."""
    own = truncate(g.demand * s.alpha[..., None], bits).sum(-2)                       # [B, E] int64
    roots = truncate(g.demand[:, 0] * s.alpha[:, :1], bits)                           # [B, E] each block's root
    return (own + roots.sum(0, keepdim=True) - roots).float() * float(2.0 ** -bits)


# score -> (primary [B, E], secondary [B, E] | None) from the gates, alpha [B, T] and valid [B, T]
SCORES = {
    Score.GATE_MASS: lambda g, s, bits: (block_sum(g.demand * s.valid[..., None], bits), None),
    Score.VOTES: lambda g, s, bits: (block_sum(g.member.float() * s.valid[..., None], bits),
                                     block_sum(g.gate * s.valid[..., None], bits)),            # ties: gate mass
    Score.ROUTER_MASS: lambda g, s, bits: (block_sum(g.plan.router.probs(g.z) * s.valid[..., None], bits), None),
    Score.COMMITMENT: lambda g, s, bits: (block_sum(g.demand * s.alpha[..., None], bits), None),
    Score.SHARED_COMMITMENT: lambda g, s, bits: (shared_sum(g, s, bits), None),
}


def _ranked(primary: Tensor, secondary: Tensor | None, anchor: Tensor, n: Tensor) -> Tensor:
    """bool [B, E]: the anchor plus the n [B] best non-anchor experts (anchors rank last)."""
    return anchor | (rank_desc(primary.masked_fill(anchor, float("-inf")), secondary) < n[..., None])


# sizing -> eligible [B, E] from (plan, primary, secondary, anchor)
SIZES = {
    Sizing.ALL: lambda plan, u, sec, anchor: torch.ones_like(anchor),
    Sizing.FIXED: lambda plan, u, sec, anchor: _ranked(u, sec, anchor, plan.selector.budget - anchor.sum(-1)),
    Sizing.SELF: lambda plan, u, sec, anchor: _ranked(u, sec, anchor, effective_rank(
        to_fixed(u, plan.selector.score_bits).masked_fill(anchor, 0), rank_guard(plan.selector.rank_tolerance))),
}
register_backend("torch", SCORES, SIZES, dict(scoring=SCORING, order=ORDERS, biased=BIAS, grouped=GROUPING,
                                              renormalize=RENORMALISE))


def select_batched(plan: Plan, logits: Tensor, step: StepBuffers, order: Tensor | None = None,
                   bias: Tensor | None = None) -> Selection:
    """Selection with [B, E] fields from logits [B, T, E] and the step's buffers (first B rows); order: the
    router's order `Router.ranking` [B, T, E] when the caller has it (shared with the routing that follows)."""
    z = logits.float()
    g = Gates(plan, z, plan.router.ranking(z, bias) if order is None else order)
    assert plan.spec.score is not None                              # a verifier's method speculates: it has one
    primary, secondary = SCORES[plan.spec.score](g, step, plan.selector.score_bits)
    if plan.spec.anchor:
        anchor = g.member[..., 0, :]                                                     # [B, E]: K_root
    else:
        anchor = torch.zeros(z.shape[:-2] + z.shape[-1:], dtype=torch.bool, device=z.device)
    return Selection(SIZES[plan.spec.sizing](plan, primary, secondary, anchor), primary, anchor)


@functools.cache
def log2_sizes(num: int, device: torch.device) -> Tensor:
    """int64 [num]: log2_fixed(n) for the set sizes n = 1..num (a constant per width and device)."""
    return log2_fixed(torch.arange(1, num + 1, device=device))


def effective_rank(demand: Tensor, guard: int) -> Tensor:
    """n_er [...] long from fixed-point demand int64 [..., E] (candidates: demand > 0), `fixed`'s rule."""
    candidates = demand > 0
    S = demand.sum(-1, keepdim=True)                                       # [..., 1]
    log_u, log_s = log2_fixed(torch.cat((demand, S), -1).clamp_min(1)).split((demand.shape[-1], 1), -1)
    entropy = S * log_s - (demand * log_u).sum(-1, keepdim=True)           # [..., 1] S * H2, in 2^-16 units
    short = S * (log2_sizes(demand.shape[-1], demand.device) + guard) < entropy   # [..., E]: n < exp(H)(1 - tol)
    return torch.minimum(short.sum(-1) + 1, candidates.sum(-1))            # 0 without candidates


def prune_batched(plan: Plan, sel: Selection, resident: Tensor) -> Tensor:
    """Residency-aware pruning of eligible [..., E] against resident [E] | [..., E] (docs/method.md):
    the longest ascending-utility prefix of non-resident, non-anchor members within the rho budget that keeps
    abs(S) >= plan.min_set, on the scores' fixed-point integers."""
    cfg = plan.selector
    U = to_fixed(sel.utility, cfg.score_bits)                                          # [..., E] int64
    cand = sel.eligible & ~resident & ~sel.anchor                                      # [..., E]
    order = order_desc(sel.utility).flip(-1)                                           # ascending u, ties: higher index
    walk = cand.gather(-1, order)                                                      # [..., E] in walking order
    prefix_mass = torch.where(walk, U.gather(-1, order), 0).cumsum(-1)                 # [..., E]
    prefix_count = walk.cumsum(-1)                                                     # [..., E]
    total = (U * sel.eligible).sum(-1, keepdim=True)
    size = sel.eligible.sum(-1, keepdim=True)
    fits = (prefix_mass << LOG2_BITS) <= rho_fixed(cfg.prune_rho) * total
    drop = walk & fits & (size - prefix_count >= plan.min_set)                         # [..., E] in walking order
    return sel.eligible & ~torch.zeros_like(cand).scatter(-1, order, drop)


class TorchVerifier(Verifier):
    """The torch backend of `make_verifier`: `select_batched`, optional `prune_batched`, then `route_in`."""
    backend = "torch"

    def __init__(self, plan: Plan, device: torch.device | str = "cpu"):
        super().__init__(plan, device)
        log2_sizes(plan.num_experts, self.device)       # the effective rank's constant, made outside any pass

    def _run(self, logits: Tensor, resident: Tensor | None, route: bool, bias: Tensor | None) -> VerifierOutput:
        order = self.plan.router.ranking(logits, bias)         # [B, T, E] one ranking for selection and routing
        sel = select_batched(self.plan, logits, self.rows(logits.shape[0]), order)
        eligible = sel.eligible if resident is None else prune_batched(self.plan, sel, resident)
        ids, weights = route_in(logits, eligible, self.plan.router, order) if route else (None, None)
        return VerifierOutput(ids, weights, eligible, sel.utility, sel.anchor)
