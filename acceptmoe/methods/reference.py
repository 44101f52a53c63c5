"""The readable reference: one verification block, one MoE layer, the rules of docs/method.md step by step.

    >>> import torch
    >>> from acceptmoe.methods import BlockInfo, Fit, Router, Variant, prune, route, select
    >>> router, block = Router.preset("softmax_topk", top_k=2), BlockInfo.from_parents([-1, 0, 0, 1])
    >>> plan = Variant("acceptmoe").bind(Fit(router, 8, max_depth=2, store="offloaded"), commitment=(1.0, 0.8, 0.5))
    >>> logits = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))           # [T, E]
    >>> sel = select(plan, logits, block)                       # Selection(eligible, utility, anchor), [E] each
    >>> eligible = prune(sel, torch.zeros(8, dtype=torch.bool), plan)   # residency pruning: nothing resident
    >>> ids, weights = route(logits, eligible, router)          # constrained top-k (Eq. 2), [T, k] each
    >>> bool(eligible[ids].all()), int(sel.anchor.sum()), tuple(weights.shape)
    (True, 2, (4, 2))

It exists to be read and to check the batched backends (`acceptmoe.kernels`), which must agree with it
exactly on sets and ids. It is written in plain Python over exact integers and shares no code with them
beyond the documented primitives: the router's float arithmetic (`Router.scores`, `gates`, `weights`,
`probs`: softmax or sigmoid, gather, renormalisation in fp32, as the model computes them) and the fixed-point
helpers (`fixed`). It serves every `Score` and `Sizing` member and every routing axis value (checked when this
module loads, like every backend): the router's choice order over its choice values (`Router.scores`), groups
included, is its own (`choice_order`, `GROUPING`); the scoring, order, bias and renormalisation axes are the
shared float arithmetic's (`routing`'s tables).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .fixed import LOG2_BITS, log2_fixed_int, rank_guard, rho_fixed, truncate
from .registry import Score, Sizing, register_backend
from .routing import BIAS, ORDERS, RENORMALISE, SCORING, Router
from .tree import BlockInfo
from .variant import Plan


@dataclass(frozen=True, eq=False)
class Selection:
    eligible: Tensor  # bool [..., E], the set S
    utility: Tensor   # fp32 [..., E], the score the method ranked by
    anchor: Tensor    # bool [..., E], all False for methods without an anchor

    @property
    def size(self) -> Tensor:
        return self.eligible.sum(-1)


def best_first(values: list[float], ties: list[float] | None = None) -> list[int]:
    """Indices of `values` best first: value descending, then `ties` descending, then lower index (the
    project's one ranking rule, spelled out)."""
    ties = ties or [0.0] * len(values)
    return sorted(range(len(values)), key=lambda i: (-values[i], -ties[i], i))


def commitment_weight(p_hat: float, level_size: int, cfg) -> float:
    """alpha = p_hat[d]^beta * N_d^level_exponent for a node at depth d (the root: p_hat 1, N 1 -> 1)."""
    return float(np.float32(p_hat ** cfg.beta * level_size ** cfg.level_exponent))


def choice_order(router: Router, scores: list[float]) -> list[int]:
    """One token's experts in its router's choice order, best first, from the fp32 values the choice ranks
    (`Router.scores`: the logits, or the scores, plus the selection bias): docs/method.md, "Router kinds"."""
    return GROUPING[router.grouped](router, scores)


def _grouped(router: Router, scores: list[float]) -> list[int]:
    """The experts of the `group_top` groups with the largest sum of their two best scores (an fp32 sum; ties:
    the lower group) first, each part by score; ties: the lower index."""
    size = len(scores) // router.groups
    tops = [sorted(scores[g * size:(g + 1) * size], reverse=True)[:2] for g in range(router.groups)]
    chosen = set(best_first([float(np.float32(a) + np.float32(b)) for a, b in tops])[:router.group_top])
    return best_first([float(e // size in chosen) for e in range(len(scores))], scores)


# group-limited choice or not -> the choice order (`registry.ROUTING_AXES["grouped"]`)
GROUPING = {False: lambda router, scores: best_first(scores), True: _grouped}


def select(plan: Plan, logits: Tensor, block: BlockInfo, bias: Tensor | None = None,
           others: Tensor | None = None) -> Selection:
    """The eligible set of `plan`'s method for one block and one layer. logits [T, E]; bias [E] the layer's
    selection bias (a biased router; None: zero); others [B', E] the root logits of the pass's other
    blocks (read by a score that credits the batch, `Score.credits_batch`; None: the block verifies alone)."""
    spec, cfg = plan.spec, plan.selector
    if not spec.speculates:
        raise ValueError(f"method {spec.name!r} does not speculate, so it selects no set")
    assert spec.score is not None                       # a verification pass has a score (MethodSpec)
    T, E = block.num_tokens, plan.num_experts
    if tuple(logits.shape) != (T, E):
        raise ValueError(f"logits must be [T, E] = [{T}, {E}] (the block's tokens, the plan's experts), "
                         f"got {tuple(logits.shape)}")
    if block.max_depth > plan.fit.max_depth:
        raise ValueError(f"the block reaches depth {block.max_depth}, deeper than the plan's {plan.fit.max_depth}")
    z = logits.float()
    natural, gate, probs, demand = _natural(plan, z, bias)
    p_hat = cfg.p_hat or ()                             # Plan binds it for a method that needs commitment
    alpha = [commitment_weight(p_hat[d], n, cfg) if spec.needs_commitment else 1.0
             for d, n in zip(block.depth.tolist(), block.level_sizes[block.depth].tolist(), strict=True)]
    roots: tuple[list[list[int]], list] = ([], [])     # the other roots' K and demand weights
    if spec.score.credits_batch and others is not None and len(others) > 0:
        other_natural, _, _, other_demand = _natural(plan, others.float(), bias)
        roots = (other_natural, other_demand)
    tokens = _Tokens(probs, natural, gate, demand, alpha, cfg.score_bits, *roots)
    primary, secondary = SCORES[spec.score](tokens)                              # exact integers per expert
    # a block score is held as fp32 (the exact integer rounded to 24 significant bits), then ranked
    score = [float(np.float32(u)) for u in primary]
    utility = torch.tensor(score, dtype=torch.float32) * 2.0 ** -cfg.score_bits
    tie = [float(np.float32(s)) for s in secondary]

    anchor = set(natural[0]) if spec.anchor else set()
    rest = [e for e in best_first(score, tie) if e not in anchor]                 # non-anchor experts, best first
    n = SIZES[spec.sizing](plan, anchor, [int(score[e]) for e in rest if score[e] > 0])
    return Selection(_mask(anchor | set(rest[:n]), E), utility, _mask(anchor, E))


def _natural(plan: Plan, z: Tensor, bias: Tensor | None) -> tuple[list[list[int]], list, Tensor, list]:
    """Natural routing of fp32 logits [T, E]: K_t best first, the model's own gates r[t, K_t], the router's
    probabilities [T, E] and the demand score's weights on K_t."""
    router = plan.router
    natural = [choice_order(router, s)[:router.top_k] for s in router.scores(z, bias).tolist()]   # K_t, best first
    ids = torch.tensor(natural, dtype=torch.long)                                 # [T, k]
    gate = router.gates(z, ids).tolist()                                          # the model's own r[t, K_t]
    probs = router.probs(z)                                                       # [T, E]
    demand = gate if plan.selector.demand_score == "gate" else probs.gather(-1, ids).tolist()
    return natural, gate, probs, demand


def select_pass(plan: Plan, logits: Tensor, blocks: list[BlockInfo], bias: Tensor | None = None) -> list[Selection]:
    """Every block of one verification pass: logits [B, T, E] (block b's tokens are its first num_tokens rows,
    its root row 0) -> block b's selection, the roots of the other blocks passed as `others`."""
    roots = logits[: len(blocks), 0]
    return [select(plan, logits[b, : block.num_tokens], block, bias, torch.cat((roots[:b], roots[b + 1:])))
            for b, block in enumerate(blocks)]


@dataclass(frozen=True)
class _Tokens:
    """One block's per-token inputs to a score: the router's probabilities fp32 [T, E], K_t best first, the
    model's gates and the demand score's weights on K_t, the commitment weights alpha_t (1.0 where unused),
    score_bits; and the pass's other roots: their K and demand weights (empty for a block verified alone)."""
    probs: Tensor
    natural: list[list[int]]
    gate: list[list[float]]
    demand: list[list[float]]
    alpha: list[float]
    bits: int
    root_natural: Sequence[list[int]] = ()
    root_demand: Sequence[list[float]] = ()

    def on_members(self, term) -> list[int]:
        """Per expert: the sum over tokens t and their members e in K_t (rank j) of term(t, j), truncated."""
        out = [0] * self.probs.shape[1]
        for t, members in enumerate(self.natural):
            for j, e in enumerate(members):
                out[e] += _fixed(term(t, j), self.bits)
        return out


def _gate_mass(x: _Tokens) -> tuple[list[int], list[int]]:
    return x.on_members(lambda t, j: x.demand[t][j]), [0] * x.probs.shape[1]


def _votes(x: _Tokens) -> tuple[list[int], list[int]]:
    return x.on_members(lambda t, j: 1.0), x.on_members(lambda t, j: x.gate[t][j])    # ties: gate mass


def _router_mass(x: _Tokens) -> tuple[list[int], list[int]]:
    rows = truncate(x.probs, x.bits).tolist()                                       # every expert, every token
    return [sum(col) for col in zip(*rows, strict=True)], [0] * x.probs.shape[1]


def _commitment(x: _Tokens) -> tuple[list[int], list[int]]:
    term = lambda t, j: float(np.float32(x.alpha[t]) * np.float32(x.demand[t][j]))   # noqa: E731  fp32 product
    return x.on_members(term), [0] * x.probs.shape[1]


def _shared_commitment(x: _Tokens) -> tuple[list[int], list[int]]:
    """The block's commitment score plus, per other root of the pass, its terms alpha_root r[root, e] (a root's
    weight is every root's: depth 0, a level of one, this block's alpha[0]; 1 for p_hat[0] = 1)."""
    own, zeros = _commitment(x)
    for members, demand in zip(x.root_natural, x.root_demand, strict=True):
        for e, r in zip(members, demand, strict=True):
            own[e] += _fixed(float(np.float32(x.alpha[0]) * np.float32(r)), x.bits)
    return own, zeros


SCORES = {Score.GATE_MASS: _gate_mass, Score.VOTES: _votes, Score.ROUTER_MASS: _router_mass,
          Score.COMMITMENT: _commitment, Score.SHARED_COMMITMENT: _shared_commitment}

# how many non-anchor experts join the anchor, from (plan, anchor, the positive non-anchor demands best first)
SIZES = {
    Sizing.ALL: lambda plan, anchor, demand: plan.num_experts,
    Sizing.FIXED: lambda plan, anchor, demand: plan.selector.budget - len(anchor),
    Sizing.SELF: lambda plan, anchor, demand: effective_rank(demand, rank_guard(plan.selector.rank_tolerance)),
}


def effective_rank(demand: list[int], guard: int) -> int:
    """n_er of positive integer demands: the smallest n >= 1 with S (log2 n + guard) >= S log2 S - sum U
    log2 U (all log2 in 16-bit fixed point), at most len(demand); 0 for no demand."""
    if not demand:
        return 0
    S = sum(demand)
    entropy = S * log2_fixed_int(S) - sum(u * log2_fixed_int(u) for u in demand)      # S * H2, 2^-16 units
    for n in range(1, len(demand) + 1):
        if S * (log2_fixed_int(n) + guard) >= entropy:
            return n
    return len(demand)


def prune(sel: Selection, resident: Tensor, plan: Plan) -> Tensor:
    """bool [E]: S minus the longest prefix D of C = S \\ H \\ A in ascending utility (ties: the higher index
    first) with 2^16 sum_D U <= rho_fixed sum_S U and abs(S) - abs(D) >= plan.min_set (U: the scores' integers)."""
    cfg = plan.selector
    eligible, anchor, held = sel.eligible.tolist(), sel.anchor.tolist(), resident.tolist()
    U = [int(u * 2 ** cfg.score_bits) for u in sel.utility.tolist()]
    budget = rho_fixed(cfg.prune_rho) * sum(u for u, s in zip(U, eligible, strict=True) if s)
    size, removed = sum(eligible), 0
    walk = [e for e in reversed(best_first(sel.utility.tolist())) if eligible[e] and not held[e] and not anchor[e]]
    out = list(eligible)
    for e in walk:
        if size - 1 < plan.min_set or (removed + U[e]) << LOG2_BITS > budget:
            break
        removed, size, out[e] = removed + U[e], size - 1, False
    return torch.tensor(out, dtype=torch.bool)


def route(logits: Tensor, eligible: Tensor | None, router: Router,
          bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Constrained top-k routing (Eq. 2) of one block: logits [T, E], eligible bool [E] (one set for the
    block), [T, E] (one per token) or None (every expert); bias [E] the layer's selection bias (a biased
    router; None: zero) -> ids [T, k] long, weights [T, k] fp32."""
    z = logits.float()
    T, E = z.shape
    allowed = torch.ones(T, E, dtype=torch.bool) if eligible is None else eligible.cpu().expand(T, E)
    k = router.top_k
    ids = []
    for s, ok in zip(router.scores(z, bias).tolist(), allowed.tolist(), strict=True):
        members = [e for e in choice_order(router, s) if ok[e]]
        if len(members) < k:
            raise ValueError(f"eligible set has {len(members)} experts, fewer than top_k={k}")
        ids.append(members[:k])
    ids_t = torch.tensor(ids, dtype=torch.long, device=z.device)
    masked = z.masked_fill(~allowed.to(z.device), float("-inf"))
    return ids_t, router.weights(masked, ids_t, None if eligible is None else z)


def _fixed(term: float, bits: int) -> int:
    """One fp32 term in [0, 1] truncated to a multiple of 2^-bits, as an integer (`fixed.truncate`)."""
    return int(np.float32(term) * np.float32(2 ** bits))


def _mask(members: set[int], E: int) -> Tensor:
    out = torch.zeros(E, dtype=torch.bool)
    out[sorted(members)] = True
    return out


register_backend("reference", SCORES, SIZES, dict(scoring=SCORING, order=ORDERS, biased=BIAS, grouped=GROUPING,
                                                  renormalize=RENORMALISE))
