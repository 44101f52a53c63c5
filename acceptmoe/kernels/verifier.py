"""The fused verifier kernel: one launch per MoE layer selects each block's eligible set S and routes inside it.

Shapes (B verification blocks padded to T tokens, E experts, router top-k K):

    logits     [B, T, E]  fp32 | fp16 | bf16 router logits of one layer (math is fp32)
    alpha      [B, T]     fp32 commitment weights (`acceptmoe.methods.commitment_weights`; zeros otherwise)
    num_tokens [B]        int  valid tokens per block (a prefix of T; the rest is padding, ignored by selection)
    resident   [E] | [B, E] bool  the layer's resident experts before the pass (enables residency pruning)
    ->
    eligible   [B, E]     bool  the final set S (after pruning, when a resident mask is given)
    utility    [B, E]     fp32  the score the method ranked by (votes, router mass, commitment utility, gate mass)
    anchor     [B, E]     bool  the root's natural top-k (commitment methods), else all False
    ids        [B, T, K]  int64 constrained top-k inside S, best first (Eq. 2)
    weights    [B, T, K]  fp32  their gating weights (router semantics of `acceptmoe.methods.routing`)

One program handles one block: softmax over experts, natural top-k per token (ties: lower index), the
method's score summed over the block's valid tokens, the root anchor, sizing (fixed budget or effective
rank), optional residency-aware pruning, then constrained top-k per token. Ranking is pairwise over the
experts, the rule of `acceptmoe.methods.topk` (value descending, ties to the lower index); block scores are
fixed-point sums (`acceptmoe.methods.selectors.block_sum`); effective rank and pruning run in fp64 as in
the torch backend (`batched.py`). Fixed shapes, no host synchronisation: safe to capture in a
CUDA graph. Every method-dependent choice is a `tl.constexpr` enum, so each method compiles its own code.
"""
from __future__ import annotations

from enum import IntEnum

import torch
import triton
import triton.language as tl
from torch import Tensor

from acceptmoe.methods import Router, SelectorConfig

from .verify import Verifier, VerifierInputError, VerifierOutput


class Score(IntEnum):
    """What the selector ranks by (and reports as utility)."""
    GATE_MASS = 0    # standard-sd: no ranking, S = all experts; utility = natural gate mass
    VOTES = 1        # count-b: natural top-k votes, ties by gate mass
    ROUTER_MASS = 2  # moe-spec: full-softmax mass over all experts
    COMMITMENT = 3   # acceptmoe, acceptmoe-b: sum_t alpha_t r[t, e], with the root anchor


class Sizing(IntEnum):
    ALL = 0     # every expert eligible
    FIXED = 1   # budget B (anchor counted in B)
    SELF = 2    # anchor plus effective rank of the residual demand


class RouterMode(IntEnum):
    SOFTMAX_TOPK_RENORM = 0  # softmax, top-k, renormalise over the k (Qwen3 norm_topk_prob)
    SOFTMAX_TOPK_RAW = 1     # softmax, top-k, keep the unmasked softmax probabilities
    TOPK_SOFTMAX = 2         # top-k of logits, softmax over the k (GPT-OSS)


class Demand(IntEnum):
    GATE = 0     # r = the model's own post-top-k weight
    SOFTMAX = 1  # r = full-softmax probability restricted to K_t


class Prune(IntEnum):
    OFF = 0
    NONRESIDENT = 1  # residency-aware pruning of non-resident, non-anchor experts


@triton.jit
def _topk(z, avail, offs_e, offs_k, K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr):
    """Per-row top-K of z [BT, BE] among `avail` [BT, BE]: member [BT, BE], ids [BT, BK], values [BT, BK].

    Largest value first; ties go to the lower expert index."""
    BLOCK_E: tl.constexpr = z.shape[1]
    member = tl.zeros(z.shape, dtype=tl.int1)
    ids = tl.zeros((BLOCK_T, BLOCK_K), dtype=tl.int32)
    vals = tl.full((BLOCK_T, BLOCK_K), float("-inf"), dtype=tl.float32)
    for i in tl.static_range(K):
        open_ = avail & (member == 0)                                                   # [BT, BE]
        best = tl.max(tl.where(open_, z, float("-inf")), axis=1)                         # [BT]
        hit = open_ & (z == best[:, None])                                               # [BT, BE]
        idx = tl.min(tl.where(hit, offs_e[None, :], BLOCK_E), axis=1)                    # [BT]
        member = member | (offs_e[None, :] == idx[:, None])
        ids = tl.where(offs_k[None, :] == i, idx[:, None], ids)
        vals = tl.where(offs_k[None, :] == i, best[:, None], vals)
    return member, ids, vals


@triton.jit
def _slot_weights(vals, row_max, row_sum, ROUTER: tl.constexpr):
    """Gating weights [BT, BK] of the chosen logits vals [BT, BK] (unused slots hold -inf)."""
    if ROUTER == 1:  # SOFTMAX_TOPK_RAW: the unmasked softmax probability
        weights = tl.exp(vals - row_max[:, None]) / row_sum[:, None]
    else:            # renormalised over the chosen k (equal for masking before or after the softmax)
        ex = tl.exp(vals - tl.max(vals, axis=1)[:, None])                                # [BT, BK]
        weights = ex / tl.sum(ex, axis=1)[:, None]
    return weights


@triton.jit
def _rank_desc(primary, secondary, e_in, offs_e, HAS_SECONDARY: tl.constexpr):
    """rank [BE] int32, 0 = best: primary desc, then secondary desc, then lower index (padding never beats)."""
    p_i, p_j = primary[:, None], primary[None, :]                                        # [i, j]
    beats = p_j > p_i
    tie = p_j == p_i
    if HAS_SECONDARY:
        s_i, s_j = secondary[:, None], secondary[None, :]
        beats = beats | (tie & (s_j > s_i))
        tie = tie & (s_j == s_i)
    beats = (beats | (tie & (offs_e[None, :] < offs_e[:, None]))) & e_in[None, :]
    return tl.sum(beats.to(tl.int32), axis=1)


@triton.jit
def _effective_rank(u, cand, tolerance):
    """n_er = ceil(exp(H(q)) * (1 - tol)) over the candidates of u [BE], clamped to [1, count]; 0 if none."""
    d = tl.where(cand, u.to(tl.float64), 0.0)                                            # [BE]
    total = tl.maximum(tl.sum(d, axis=0), 2.2250738585072014e-308)
    q = d / total
    h = -tl.sum(tl.where(cand, q * tl.log(tl.maximum(q, 1e-300)), 0.0), axis=0)
    n = tl.ceil(tl.exp(h) * (1.0 - tolerance)).to(tl.int32)
    count = tl.sum(cand.to(tl.int32), axis=0)
    return tl.where(count > 0, tl.minimum(tl.maximum(n, 1), count), 0)


@triton.jit
def _prune(eligible, u, anchor, resident, offs_e, rho, min_set):
    """S minus the longest ascending-utility prefix of non-resident, non-anchor members that fits the
    rerouting budget rho * sum_S u and keeps |S| >= min_set (ties: higher index first); fp64 like the reference."""
    cand = eligible & (resident == 0) & (anchor == 0)                                    # [BE]
    u64 = u.to(tl.float64)
    u_i, u_j = u64[:, None], u64[None, :]                                                # [i, j]
    before = (u_j < u_i) | ((u_j == u_i) & (offs_e[None, :] >= offs_e[:, None]))        # j at or before i
    before = before & cand[None, :] & cand[:, None]
    prefix_mass = tl.sum(tl.where(before, u_j, 0.0), axis=1)                             # [BE]
    prefix_count = tl.sum(before.to(tl.int32), axis=1)
    budget = rho * tl.sum(tl.where(eligible, u64, 0.0), axis=0)
    size = tl.sum(eligible.to(tl.int32), axis=0)
    drop = cand & (prefix_mass <= budget) & (size - prefix_count >= min_set)
    return eligible & (drop == 0)


@triton.jit
def _block_sum(terms, vmask, scale, unit):
    """fp32 [BE]: the valid tokens' terms [BT, BE] in fixed point (multiples of unit = 1 / scale), summed
    exactly in int32 (`acceptmoe.methods.selectors.block_sum`)."""
    q = tl.where(vmask, (terms * scale).to(tl.int32), 0)                                 # [BT, BE]
    return tl.sum(q, axis=0).to(tl.float32) * unit


@triton.jit
def _select(probs, member, r_gate, r_demand, alpha, valid, e_in, offs_t, offs_e, budget, tolerance, scale, unit,
            SCORE: tl.constexpr, SIZING: tl.constexpr):
    """eligible [BE], utility [BE] fp32, anchor [BE] of one block from its per-token gates [BT, BE]."""
    vmask = valid[:, None]                                                               # [BT, 1]
    no_anchor = offs_e < 0                                                               # [BE] all False
    if SCORE == 0:    # GATE_MASS (standard-sd): S = all experts
        utility = _block_sum(r_demand, vmask, scale, unit)
        eligible, anchor = e_in, no_anchor
    elif SCORE == 1:  # VOTES, ties by gate mass
        utility = _block_sum(tl.where(member, 1.0, 0.0), vmask, scale, unit)
        mass = _block_sum(r_gate, vmask, scale, unit)
        eligible = e_in & (_rank_desc(utility, mass, e_in, offs_e, True) < budget)
        anchor = no_anchor
    elif SCORE == 2:  # ROUTER_MASS (moe-spec)
        utility = _block_sum(probs, vmask, scale, unit)
        eligible = e_in & (_rank_desc(utility, utility, e_in, offs_e, False) < budget)
        anchor = no_anchor
    else:             # COMMITMENT: anchor A = K_root; the rest ranked by utility, anchors last
        utility = _block_sum(alpha[:, None] * r_demand, vmask, scale, unit)              # [BE]
        anchor = tl.sum((member & (offs_t[:, None] == 0)).to(tl.int32), axis=0) > 0      # [BE]
        rank = _rank_desc(tl.where(anchor, -1.0, utility), utility, e_in, offs_e, False)
        if SIZING == 1:   # FIXED: B - |A| more experts
            n = budget - tl.sum(anchor.to(tl.int32), axis=0)
        else:             # SELF: effective rank of the residual demand
            n = _effective_rank(utility, e_in & (anchor == 0) & (utility > 0), tolerance)
        eligible = e_in & (anchor | (rank < n))
    return eligible, utility, anchor


@triton.jit
def _verifier_kernel(
    logits_ptr, alpha_ptr, ntok_ptr, resident_ptr, params_ptr,
    eligible_ptr, utility_ptr, anchor_ptr, ids_ptr, weights_ptr,
    T, E, budget, min_set, scale, unit,
    s_lb, s_lt, s_le, s_ab, s_at, s_rb, s_re,
    K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr,
    SCORE: tl.constexpr, SIZING: tl.constexpr, ROUTER: tl.constexpr, DEMAND: tl.constexpr,
    PRUNE: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    offs_t = tl.arange(0, BLOCK_T)
    offs_e = tl.arange(0, BLOCK_E)
    offs_k = tl.arange(0, BLOCK_K)
    t_in, e_in = offs_t < T, offs_e < E
    valid = t_in & (offs_t < tl.load(ntok_ptr + b))                                      # [BT]
    ptrs = logits_ptr + b * s_lb + offs_t[:, None].to(tl.int64) * s_lt + offs_e[None, :] * s_le
    z = tl.load(ptrs, mask=t_in[:, None] & e_in[None, :], other=0.0).to(tl.float32)
    z = tl.where(e_in[None, :], z, float("-inf"))                                        # [BT, BE]

    row_max = tl.max(z, axis=1)                                                          # [BT]
    ex = tl.exp(z - row_max[:, None])
    row_sum = tl.sum(ex, axis=1)
    probs = ex / row_sum[:, None]                                                        # [BT, BE]
    rows = offs_t[:, None] >= 0                                                          # [BT, 1] all True
    member, _, _ = _topk(z, e_in[None, :] & rows, offs_e, offs_k, K, BLOCK_T, BLOCK_K)  # natural K_t
    if ROUTER == 1:   # SOFTMAX_TOPK_RAW: the unmasked softmax probability
        r_gate = tl.where(member, probs, 0.0)
    else:             # renormalised over K_t
        r_gate = tl.where(member, ex / tl.sum(tl.where(member, ex, 0.0), axis=1)[:, None], 0.0)
    if DEMAND == 1:   # SOFTMAX
        r_demand = tl.where(member, probs, 0.0)
    else:
        r_demand = r_gate
    alpha = tl.zeros((BLOCK_T,), dtype=tl.float32)
    if SCORE == 3:    # COMMITMENT
        alpha = tl.load(alpha_ptr + b * s_ab + offs_t * s_at, mask=valid, other=0.0)
    rho = tl.load(params_ptr)                                                            # fp64
    tolerance = tl.load(params_ptr + 1)                                                  # fp64
    eligible, utility, anchor = _select(probs, member, r_gate, r_demand, alpha, valid, e_in, offs_t, offs_e,
                                        budget, tolerance, scale, unit, SCORE, SIZING)
    if PRUNE == 1:    # NONRESIDENT
        resident = tl.load(resident_ptr + b * s_rb + offs_e * s_re, mask=e_in, other=1)
        eligible = _prune(eligible, utility, anchor, resident, offs_e, rho, min_set)

    _, ids, vals = _topk(z, eligible[None, :] & rows, offs_e, offs_k, K, BLOCK_T, BLOCK_K)  # inside S
    weights = _slot_weights(vals, row_max, row_sum, ROUTER)                              # [BT, BK]
    out_e = b * E + offs_e
    tl.store(eligible_ptr + out_e, eligible.to(tl.int8), mask=e_in)
    tl.store(utility_ptr + out_e, utility, mask=e_in)
    tl.store(anchor_ptr + out_e, anchor.to(tl.int8), mask=e_in)
    out_k = (b * T + offs_t[:, None]) * K + offs_k[None, :]                              # [BT, BK]
    k_mask = t_in[:, None] & (offs_k[None, :] < K)
    tl.store(ids_ptr + out_k, ids.to(tl.int64), mask=k_mask)
    tl.store(weights_ptr + out_k, weights, mask=k_mask)


# ----------------------------------------------------------------------------------------------- wrapper

MAX_TILE = 1 << 16  # elements of one block's [T, E] tile (and of the [E, E] ranking tile)

_SCORES = {"votes": Score.VOTES, "router-mass": Score.ROUTER_MASS, "commitment": Score.COMMITMENT}
_SIZINGS = {"all": Sizing.ALL, "fixed": Sizing.FIXED, "self": Sizing.SELF}


def router_mode(router: Router) -> RouterMode:
    if router.kind == "topk_softmax":
        return RouterMode.TOPK_SOFTMAX
    return RouterMode.SOFTMAX_TOPK_RENORM if router.renormalize else RouterMode.SOFTMAX_TOPK_RAW


class TritonVerifier(Verifier):
    """The Triton backend of `make_verifier`: one launch per MoE layer, one program per block.

    Construction copies rho and the rank tolerance to the device once (make it before a CUDA-graph
    capture); a call only allocates the outputs and launches. On CPU it runs under TRITON_INTERPRET=1."""

    def __init__(self, method: str, router: Router, cfg: SelectorConfig, num_experts: int,
                 device: torch.device | str = "cuda"):
        super().__init__(method, router, cfg, num_experts, device)
        self.params = torch.tensor([cfg.prune_rho, cfg.rank_tolerance], dtype=torch.float64, device=self.device)
        self.meta = dict(
            K=router.top_k,
            SCORE=int(_SCORES.get(self.spec.score, Score.GATE_MASS)),
            SIZING=int(_SIZINGS[self.spec.sizing]),
            ROUTER=int(router_mode(router)),
            DEMAND=int(Demand.SOFTMAX if cfg.demand_score == "softmax" else Demand.GATE),
        )

    def _check(self, logits: Tensor, resident: Tensor | None) -> None:
        super()._check(logits, resident)
        _, T, E = logits.shape
        block_e = triton.next_power_of_2(E)
        if triton.next_power_of_2(T) * block_e > MAX_TILE or block_e * block_e > MAX_TILE:
            raise VerifierInputError(f"a block of T={T} tokens and E={E} experts exceeds the kernel's tile of "
                                     f"{MAX_TILE} elements; use the torch backend or smaller blocks")

    def _run(self, logits: Tensor, resident: Tensor | None) -> VerifierOutput:
        B, T, E = logits.shape
        dev, K = logits.device, self.router.top_k
        out = VerifierOutput(
            ids=torch.empty(B, T, K, dtype=torch.int64, device=dev),
            weights=torch.empty(B, T, K, dtype=torch.float32, device=dev),
            eligible=torch.empty(B, E, dtype=torch.bool, device=dev),
            utility=torch.empty(B, E, dtype=torch.float32, device=dev),
            anchor=torch.empty(B, E, dtype=torch.bool, device=dev))
        res = resident.view(torch.uint8) if resident is not None else out.eligible.view(torch.uint8)
        res_b, res_e = (0, res.stride(0)) if res.dim() == 1 else res.stride()
        block_t, block_e = triton.next_power_of_2(T), triton.next_power_of_2(E)
        _verifier_kernel[(B,)](
            logits, self.alpha, self.num_tokens, res, self.params,
            out.eligible.view(torch.uint8), out.utility, out.anchor.view(torch.uint8), out.ids, out.weights,
            T, E, self.cfg.budget or E, self.min_set, float(2 ** self.cfg.score_bits), 2.0 ** -self.cfg.score_bits,
            *logits.stride(), *self.alpha.stride(), res_b, res_e,
            BLOCK_T=block_t, BLOCK_E=block_e, BLOCK_K=triton.next_power_of_2(K),
            PRUNE=int(Prune.NONRESIDENT if resident is not None else Prune.OFF),
            num_warps=4 if block_t * block_e <= 2048 else 8, **self.meta)
        return out
