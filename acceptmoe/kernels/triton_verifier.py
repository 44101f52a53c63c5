"""The fused verifier kernel: one launch per MoE layer selects each block's eligible set S and routes inside it.

Shapes (B verification blocks padded to T tokens, E experts, router top-k K):

    logits     [B, T, E]  fp32 | fp16 | bf16 router logits of one layer (math is fp32)
    bias       [E]        fp32 the layer's selection bias (the sigmoid_grouped router; zeros without one)
    alpha      [B, T]     fp32 commitment weights (`acceptmoe.methods.commitment_weights`; zeros otherwise)
    num_tokens [B]        int  valid tokens per block (a prefix of T; the rest is padding, ignored by selection)
    resident   [E] | [B, E] bool  the layer's resident experts before the pass (enables residency pruning)
    ->
    ids        [B, T, K]  int64 constrained top-k inside S, best first (Eq. 2)
    weights    [B, T, K]  fp32  their gating weights (router semantics of `acceptmoe.methods.routing`)
    eligible   [B, E]     bool  the final set S (after pruning, when a resident mask is given)
    utility    [B, E]     fp32  the score the method ranked by (votes, router mass, commitment utility, gate mass)
    anchor     [B, E]     bool  the root's natural top-k (commitment methods), else all False

One program handles one block, in two passes over chunks of TC tokens (so registers do not grow with T):
pass 1 takes each token's softmax and natural top-k and adds the method's per-token terms to the block
scores, pass 2 routes every token inside the final set. In between, on [E] vectors: the root anchor,
ranking, sizing (fixed budget or effective rank) and optional residency-aware pruning.

Exactly the reference's rules (`acceptmoe.methods`), with no fp64 and no E x E tile:
- every ranking is one integer key per expert (orderable float bits, then 65535 - index), so value
  descending, ties to the lower index (`methods.topk`) is a plain integer order: a token's top-k is K
  max-reductions, a block's top-n is `tl.sort` and one threshold; the grouped router's keys are its biased
  sigmoid scores with a bit above them for the token's chosen groups (`Router.order`);
- block scores are fixed-point sums in int32 (`methods.fixed.block_sum`); effective rank and the pruning
  budget are the integer arithmetic of `methods.fixed` (log2 by repeated squaring, rho in 2^-16 units).
Fixed shapes, no host synchronisation: safe to capture in a CUDA graph. Every method- and router-dependent
choice is a `tl.constexpr` enum, so each method and router kind compiles only its own code; a code no branch
handles fails the compile (`tl.static_assert`), never a silent default.

Warps per specialisation (`choose_warps`): the first of `WARP_CHOICES` whose compiled binary does not spill
(local memory or STL/LDL in its SASS, read by `offline.binary_spills` with the Triton wheel's cuobjdump; where
that tool is missing, the driver's local-memory size of the loaded binary). The wrapper decides it at a
specialisation's first launch on a GPU from the binary Triton's JIT made, and keeps it for the process;
bench-kernel and the compile test apply the same function to the same launch compiled offline.
"""
from __future__ import annotations

import subprocess
from enum import IntEnum
from typing import Callable, NamedTuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from acceptmoe.methods import Plan, Router, RouterKind, Score, Sizing, register_backend
from acceptmoe.methods.fixed import log2_fixed, rank_guard, rho_fixed

from .verifier import Verifier, VerifierInputError, VerifierOutput


class RouterMode(IntEnum):
    SOFTMAX_TOPK_RENORM = 0  # softmax, top-k, renormalise over the k (Qwen3 norm_topk_prob)
    SOFTMAX_TOPK_RAW = 1     # softmax, top-k, keep the unmasked softmax probabilities
    TOPK_SOFTMAX = 2         # top-k of logits, softmax over the k (GPT-OSS)
    SIGMOID_RENORM = 3       # sigmoid + bias, group-limited top-k, sigmoids renormalised over the k (DeepSeek-V3)
    SIGMOID_RAW = 4          # the same, the sigmoids kept as they are


class Demand(IntEnum):
    GATE = 0     # r = the model's own post-top-k weight
    SOFTMAX = 1  # r = full-softmax probability restricted to K_t


class Prune(IntEnum):
    OFF = 0
    NONRESIDENT = 1  # residency-aware pruning of non-resident, non-anchor experts


# The registry's scores and sizings as the kernel's constexpr codes: every member of `Score` and of the
# verification sizings has one (checked below when the module loads, like every backend).
SCORE_CODES = {Score.GATE_MASS: 0, Score.VOTES: 1, Score.ROUTER_MASS: 2, Score.COMMITMENT: 3}
SIZING_CODES = {Sizing.ALL: 0, Sizing.FIXED: 1, Sizing.SELF: 2}
# router kind -> its mode (a kernel variant) for a `Router`
ROUTER_MODES = {
    RouterKind.SOFTMAX_TOPK: lambda r: RouterMode.SOFTMAX_TOPK_RENORM if r.renormalize else RouterMode.SOFTMAX_TOPK_RAW,
    RouterKind.TOPK_SOFTMAX: lambda r: RouterMode.TOPK_SOFTMAX,
    RouterKind.SIGMOID_GROUPED: lambda r: RouterMode.SIGMOID_RENORM if r.renormalize else RouterMode.SIGMOID_RAW,
}
register_backend("triton", SCORE_CODES, SIZING_CODES, ROUTER_MODES)

# The codes by name inside the kernel (Triton reads only constexpr globals).
GATE_MASS, VOTES, ROUTER_MASS, COMMITMENT = (tl.constexpr(SCORE_CODES[s]) for s in
                                             (Score.GATE_MASS, Score.VOTES, Score.ROUTER_MASS, Score.COMMITMENT))
ALL, FIXED, SELF = (tl.constexpr(SIZING_CODES[s]) for s in (Sizing.ALL, Sizing.FIXED, Sizing.SELF))
SOFTMAX_TOPK_RENORM, SOFTMAX_TOPK_RAW, TOPK_SOFTMAX, SIGMOID_RENORM, SIGMOID_RAW = (tl.constexpr(int(x))
                                                                                   for x in RouterMode)
GATE, SOFTMAX = (tl.constexpr(int(x)) for x in Demand)
NONRESIDENT = tl.constexpr(int(Prune.NONRESIDENT))
IDX_BITS = tl.constexpr(16)     # a key's low bits hold 65535 - expert index: ties go to the lower index
LOG2_BITS = tl.constexpr(16)    # acceptmoe.methods.fixed.LOG2_BITS
GROUP_BIT = tl.constexpr(48)    # above any fp32 key (|key| < 2^47): the grouped router's chosen groups rank first
NORM_EPS = tl.constexpr(1e-20)  # acceptmoe.methods.routing.NORM_EPS


@triton.jit
def _lowest(KEY64: tl.constexpr):
    """The smallest key (never selected)."""
    if KEY64:
        low = tl.full((), 1, tl.int64) << 63
    else:
        low = tl.full((), 1, tl.int32) << 31
    return low


@triton.jit
def _logit_keys(raw, e_ok, offs_e, KEY64: tl.constexpr):
    """Keys [TC, BE] of raw logits (int64 for fp32, int32 for fp16/bf16): orderable float bits, then
    65535 - e. -0.0 ranks as 0.0; experts outside e_ok get the lowest key."""
    if KEY64:
        bits = tl.where(raw == 0.0, 0, raw.to(tl.int32, bitcast=True))
        key = (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(tl.int64)
    else:
        bits = tl.where(raw == 0.0, 0, raw.to(tl.int16, bitcast=True).to(tl.int32))
        key = bits ^ ((bits >> 15) & 0x7FFF)
    key = (key << IDX_BITS) | (65535 - offs_e)[None, :]
    return tl.where(e_ok, key, tl.full((), 1, key.dtype) << (key.dtype.primitive_bitwidth - 1))   # lowest


@triton.jit
def _key_logit(key, LOGIT: tl.constexpr, KEY64: tl.constexpr):
    """The fp32 logit a key of `_logit_keys` was made from."""
    ordered = key >> IDX_BITS
    if KEY64:
        bits = (ordered ^ ((ordered >> 31) & 0x7FFFFFFF)).to(tl.int32)
        value = bits.to(tl.float32, bitcast=True)
    else:
        bits = (ordered ^ ((ordered >> 15) & 0x7FFF)).to(tl.int16)
        value = bits.to(LOGIT, bitcast=True).to(tl.float32)
    return value


@triton.jit
def _topk(keys, offs_k, K: tl.constexpr, SLOTS: tl.constexpr):
    """Per-row top-K of unique keys [TC, BE], one max-reduction per place: the K-th key [TC] (membership is
    keys >= it) and, if SLOTS, the keys of places 0..K-1 [TC, BK], best first."""
    low = tl.full((), 1, keys.dtype) << (keys.dtype.primitive_bitwidth - 1)                # the lowest key
    last = tl.max(keys, axis=1)                                                          # [TC]
    slots = tl.where(offs_k[None, :] == 0, last[:, None], low)                           # [TC, BK]
    for i in tl.static_range(1, K):
        last = tl.max(tl.where(keys < last[:, None], keys, low), axis=1)
        if SLOTS:
            slots = tl.where(offs_k[None, :] == i, last[:, None], slots)
    return last, slots


@triton.jit
def _slot_weights(vals, row_max, row_sum, ROUTER: tl.constexpr):
    """Gating weights [TC, BK] of the chosen logits vals [TC, BK] (unused places hold -inf), softmax kinds."""
    if ROUTER == SOFTMAX_TOPK_RAW:   # the unmasked softmax probability
        weights = tl.exp(vals - row_max[:, None]) / row_sum[:, None]
    elif ROUTER == SOFTMAX_TOPK_RENORM or ROUTER == TOPK_SOFTMAX:
        ex = tl.exp(vals - tl.max(vals, axis=1)[:, None])   # renormalised over the chosen k (masking before or
        weights = ex / tl.sum(ex, axis=1)[:, None]          # after the softmax gives the same), [TC, BK]
    else:
        tl.static_assert(False, "_slot_weights: not a softmax router mode")
    return weights


@triton.jit
def _sigmoid_weights(sig, ROUTER: tl.constexpr):
    """Gates [TC, BK] of the chosen experts' sigmoids sig [TC, BK] (unused places hold 0), sigmoid kinds."""
    if ROUTER == SIGMOID_RENORM:
        gates = sig / (tl.sum(sig, axis=1)[:, None] + NORM_EPS)
    elif ROUTER == SIGMOID_RAW:
        gates = sig
    else:
        tl.static_assert(False, "_sigmoid_weights: not a sigmoid router mode")
    return gates


@triton.jit
def _group_key(total, g):
    """int64 keys [TC] of fp32 group scores: orderable float bits, then 65535 - g (ties: the lower group)."""
    bits = tl.where(total == 0.0, 0, total.to(tl.int32, bitcast=True))
    return ((bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(tl.int64) << IDX_BITS) | (65535 - g)


@triton.jit
def _groups_first(keys, e_in, offs_e, E, TC: tl.constexpr, GROUPS: tl.constexpr, GROUP_TOP: tl.constexpr,
                  BLOCK_G: tl.constexpr):
    """keys [TC, BE] (int64, of fp32 scores) raised by 2^GROUP_BIT on the experts of each token's GROUP_TOP
    groups (consecutive ids, E / GROUPS each) whose two best scores sum highest (`Router.in_groups`)."""
    size = E // GROUPS
    group = offs_e // size                                                               # [BE]
    low = _lowest(True)
    offs_g = tl.arange(0, BLOCK_G)
    gkeys = tl.full([TC, BLOCK_G], -9223372036854775807 - 1, tl.int64)                  # [TC, BG] lowest
    for g in tl.static_range(GROUPS):
        mine = ((group == g) & e_in)[None, :]                                            # [1, BE]
        best = tl.max(tl.where(mine, keys, low), axis=1)                                 # [TC] unique keys
        second = tl.max(tl.where(mine & (keys < best[:, None]), keys, low), axis=1)
        total = _key_logit(best, tl.float32, True) + _key_logit(second, tl.float32, True)    # fp32, as topk(2).sum
        gkeys = tl.where(offs_g[None, :] == g, _group_key(total, g)[:, None], gkeys)
    kth, _ = _topk(gkeys, offs_g, GROUP_TOP, False)
    chosen = gkeys >= kth[:, None]                                                       # [TC, BG]
    inside = keys < low                                                                  # [TC, BE] all False
    for g in tl.static_range(GROUPS):
        picked = tl.max(tl.where((offs_g[None, :] == g) & chosen, 1, 0), axis=1) > 0    # [TC]
        inside = inside | (picked[:, None] & (group == g)[None, :])
    return tl.where(inside & e_in[None, :], keys + (tl.full((), 1, tl.int64) << GROUP_BIT), keys)


@triton.jit
def _chunk(logits_ptr, bias_ptr, b, rows, e_in, offs_e, T, E, s_lb, s_lt, s_le, KEY64: tl.constexpr,
           TC: tl.constexpr, ROUTER: tl.constexpr, GROUPS: tl.constexpr, GROUP_TOP: tl.constexpr,
           BLOCK_G: tl.constexpr):
    """One chunk of a block's logits: keys [TC, BE] in the router's order (`Router.order`), fp32 logits
    [TC, BE] (-inf outside E), row max and sum."""
    t_in = rows < T
    ptrs = logits_ptr + b * s_lb + rows[:, None].to(tl.int64) * s_lt + offs_e[None, :] * s_le
    raw = tl.load(ptrs, mask=t_in[:, None] & e_in[None, :], other=0.0)
    z = tl.where(e_in[None, :], raw.to(tl.float32), float("-inf"))                       # [TC, BE]
    if ROUTER == SIGMOID_RENORM or ROUTER == SIGMOID_RAW:             # sigmoid(z) + bias, the token's groups first
        bias = tl.load(bias_ptr + offs_e, mask=e_in, other=0.0)                          # [BE]
        keys = _logit_keys(tl.sigmoid(z) + bias[None, :], e_in[None, :], offs_e, True)
        if GROUP_TOP < GROUPS:
            keys = _groups_first(keys, e_in, offs_e, E, TC, GROUPS, GROUP_TOP, BLOCK_G)
    else:                            # the logits (softmax is monotone)
        keys = _logit_keys(raw, e_in[None, :], offs_e, KEY64)
    row_max = tl.max(z, axis=1)
    row_sum = tl.sum(tl.exp(z - row_max[:, None]), axis=1)
    return keys, z, row_max, row_sum


@triton.jit
def _route_chunk(keys, z, row_max, row_sum, ids_ptr, weights_ptr, b, rows, offs_e, offs_k, T, route_scale,
                 K: tl.constexpr, ROUTER: tl.constexpr, LOGIT: tl.constexpr, KEY64: tl.constexpr):
    """Top-K of the (already masked) keys of one chunk, stored as ids [TC, K] and weights [TC, K]."""
    _, slots = _topk(keys, offs_k, K, True)                                      # [TC, BK]
    ids = 65535 - (slots & 65535).to(tl.int64)
    if ROUTER == SIGMOID_RENORM or ROUTER == SIGMOID_RAW:             # the chosen experts' unbiased sigmoids, gathered from the logits
        sig = tl.sigmoid(z)                                                              # [TC, BE]
        chosen = tl.zeros_like(slots).to(tl.float32)                                     # [TC, BK]
        for i in tl.static_range(K):
            id_i = tl.max(tl.where(offs_k[None, :] == i, ids, -1), axis=1)               # [TC]
            sig_i = tl.sum(tl.where(offs_e[None, :] == id_i[:, None], sig, 0.0), axis=1)
            chosen = tl.where(offs_k[None, :] == i, sig_i[:, None], chosen)
        weights = _sigmoid_weights(chosen, ROUTER) * route_scale
    else:
        vals = tl.where(offs_k[None, :] < K, _key_logit(slots, LOGIT, KEY64), float("-inf"))  # past K: none
        weights = _slot_weights(vals, row_max, row_sum, ROUTER)
    out = (b * T + rows[:, None]) * K + offs_k[None, :]                                  # [TC, BK]
    k_mask = (rows < T)[:, None] & (offs_k[None, :] < K)
    tl.store(ids_ptr + out, ids, mask=k_mask)
    tl.store(weights_ptr + out, weights, mask=k_mask)


@triton.jit
def _gates(z, member, row_max, row_sum, ROUTER: tl.constexpr, DEMAND: tl.constexpr):
    """Natural gates r [TC, BE] (zero outside K_t): the model's own (r_gate, `Router.gates`) and the demand
    score's (r_demand), and the router's probabilities over every expert (`Router.probs`)."""
    if ROUTER == SIGMOID_RENORM or ROUTER == SIGMOID_RAW:
        sig = tl.sigmoid(z)                                                              # [TC, BE], 0 outside E
        probs = sig / tl.sum(sig, axis=1)[:, None]
        r_gate = _sigmoid_weights(tl.where(member, sig, 0.0), ROUTER)
    else:
        probs = tl.exp(z - row_max[:, None]) / row_sum[:, None]                          # [TC, BE]
        if ROUTER == SOFTMAX_TOPK_RAW:
            r_gate = tl.where(member, probs, 0.0)
        elif ROUTER == SOFTMAX_TOPK_RENORM:
            chosen = tl.where(member, probs, 0.0)
            r_gate = chosen / tl.sum(chosen, axis=1)[:, None]
        elif ROUTER == TOPK_SOFTMAX:     # softmax over the chosen logits
            chosen = tl.where(member, tl.exp(z - row_max[:, None]), 0.0)
            r_gate = chosen / tl.sum(chosen, axis=1)[:, None]
        else:
            tl.static_assert(False, "_gates: unknown router mode")
    if DEMAND == SOFTMAX:
        r_demand = tl.where(member, probs, 0.0)
    else:
        r_demand = r_gate
    return r_gate, r_demand, probs


@triton.jit
def _fixed(terms, valid, scale):
    """int32 [BE]: the valid rows' terms [TC, BE] in [0, 1] truncated to multiples of 1 / scale, summed
    (`acceptmoe.methods.fixed.block_sum`)."""
    return tl.sum(tl.where(valid[:, None], (terms * scale).to(tl.int32), 0), axis=0)


@triton.jit
def _top_n(key, n, KEY64: tl.constexpr):
    """bool [BE]: the n largest of the unique keys [BE] (never the lowest key); none when n <= 0."""
    low = _lowest(KEY64)
    ranked = tl.sort(key, descending=True)                                               # [BE]
    pos = tl.arange(0, key.shape[0])
    threshold = tl.max(tl.where(pos == n - 1, ranked, low), axis=0)
    return (key >= threshold) & (key != low) & (n > 0)


@triton.jit
def _score_keys(score, offs_e):
    """int64 keys [BE] of non-negative fp32 scores: score descending, then lower index."""
    return (score.to(tl.int32, bitcast=True).to(tl.int64) << IDX_BITS) | (65535 - offs_e)


@triton.jit
def _log2_fixed(x):
    """int64: log2(x) * 2^16 for integers 1 <= x < 2^31 (`acceptmoe.methods.fixed.log2_fixed`)."""
    e = x * 0
    e = tl.where((x >> (e + 16)) > 0, e + 16, e)
    e = tl.where((x >> (e + 8)) > 0, e + 8, e)
    e = tl.where((x >> (e + 4)) > 0, e + 4, e)
    e = tl.where((x >> (e + 2)) > 0, e + 2, e)
    e = tl.where((x >> (e + 1)) > 0, e + 1, e)
    m = x << (30 - e)                                                                    # Q1.30 mantissa
    out = e << LOG2_BITS
    for j in tl.static_range(LOG2_BITS):
        m = (m * m) >> 30
        top = m >= (tl.full((), 1, tl.int64) << 31)
        m = tl.where(top, m >> 1, m)
        out = out | (top.to(tl.int64) << (LOG2_BITS - 1 - j))
    return out


@triton.jit
def _effective_rank(U, cand, log2_n, e_in, guard):
    """n_er: the smallest n >= 1 with S (log2 n + guard) >= S log2 S - sum U log2 U over the candidates'
    fixed-point demand U [BE] int64, clamped to their count; 0 without candidates (`methods.fixed`).
    log2_n [BE]: log2_fixed(1..E), for the set sizes n = 1..E (e_in)."""
    U = tl.where(cand, U, 0)
    S = tl.sum(U, axis=0)
    weighted = tl.sum(U * _log2_fixed(tl.maximum(U, 1)), axis=0)
    entropy = S * _log2_fixed(tl.maximum(S, 1)) - weighted                               # S * H2 in 2^-16 units
    short = e_in & (S * (log2_n + guard) < entropy)
    count = tl.sum(cand.to(tl.int32), axis=0)
    n = tl.minimum(tl.sum(short.to(tl.int32), axis=0) + 1, count)
    return tl.where(count > 0, n, 0)


@triton.jit
def _prune(eligible, utility, anchor, resident, offs_e, scale, rho_q, min_set):
    """S minus the longest ascending-utility prefix (ties: higher index first) of non-resident, non-anchor
    members with 2^16 * sum U <= rho_q * sum_S U that keeps |S| >= min_set, in integers (`methods.fixed`)."""
    cand = eligible & (resident == 0) & (anchor == 0)                                     # [BE]
    high = ~(tl.full((), 1, tl.int64) << 63)
    key = tl.where(cand, _score_keys(utility, offs_e), high)                            # ascending walk order
    walked = tl.sort(key)                                                                # candidates first
    in_walk = walked != high
    u_walked = tl.where(in_walk, (walked >> IDX_BITS).to(tl.int32), 0).to(tl.float32, bitcast=True)
    prefix = tl.cumsum((u_walked * scale).to(tl.int64), axis=0)                          # [BE] fixed point
    total = tl.sum(tl.where(eligible, (utility * scale).to(tl.int64), 0), axis=0)
    size = tl.sum(eligible.to(tl.int32), axis=0)
    pos = tl.arange(0, key.shape[0])
    fits = in_walk & ((prefix << LOG2_BITS) <= rho_q * total) & (size - (pos + 1) >= min_set)
    dropped = tl.sum(fits.to(tl.int32), axis=0)                                          # a prefix of the walk
    last = tl.max(tl.where(pos < dropped, walked, 0), axis=0)
    return eligible & ~(cand & (key <= last) & (dropped > 0))


@triton.jit
def _verifier_kernel(
    logits_ptr, bias_ptr, alpha_ptr, ntok_ptr, resident_ptr, log2_ptr,
    eligible_ptr, utility_ptr, anchor_ptr, ids_ptr, weights_ptr,
    T, E, budget, min_set, rho_q, guard, scale, unit, route_scale,
    s_lb, s_lt, s_le, s_ab, s_at, s_rb, s_re,
    K: tl.constexpr, TC: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr,
    SCORE: tl.constexpr, SIZING: tl.constexpr, ANCHOR: tl.constexpr, ROUTER: tl.constexpr,
    GROUPS: tl.constexpr, GROUP_TOP: tl.constexpr, BLOCK_G: tl.constexpr,
    DEMAND: tl.constexpr, PRUNE: tl.constexpr, ROUTE: tl.constexpr,
):
    tl.static_assert(ROUTER == SOFTMAX_TOPK_RENORM or ROUTER == SOFTMAX_TOPK_RAW or ROUTER == TOPK_SOFTMAX
                     or ROUTER == SIGMOID_RENORM or ROUTER == SIGMOID_RAW, "unknown router mode")
    LOGIT: tl.constexpr = logits_ptr.dtype.element_ty
    KEY64: tl.constexpr = (LOGIT == tl.float32) or (ROUTER == SIGMOID_RENORM) or (ROUTER == SIGMOID_RAW)
    NATURAL: tl.constexpr = ROUTE and (SIZING == ALL) and (PRUNE != NONRESIDENT)   # S = all: route in pass 1
    b = tl.program_id(0).to(tl.int64)
    offs_c = tl.arange(0, TC)
    offs_e = tl.arange(0, BLOCK_E)
    offs_k = tl.arange(0, BLOCK_K)
    e_in = offs_e < E
    n_valid = tl.load(ntok_ptr + b)

    # pass 1: per-token softmax and natural top-k; the block's fixed-point scores and the root anchor
    primary = tl.zeros((BLOCK_E,), dtype=tl.int32)                                       # [BE] scores
    secondary = tl.zeros((BLOCK_E,), dtype=tl.int32)                                     # count-b: gate mass
    anchor = offs_e < 0                                                                  # [BE] all False
    for t0 in range(0, T, TC):
        rows = t0 + offs_c
        valid = (rows < T) & (rows < n_valid)
        keys, z, row_max, row_sum = _chunk(logits_ptr, bias_ptr, b, rows, e_in, offs_e, T, E, s_lb, s_lt, s_le,
                                           KEY64, TC, ROUTER, GROUPS, GROUP_TOP, BLOCK_G)
        if NATURAL:                  # the natural top-k is the routing
            _route_chunk(keys, z, row_max, row_sum, ids_ptr, weights_ptr, b, rows, offs_e, offs_k, T, route_scale,
                         K, ROUTER, LOGIT, KEY64)
        kth, _ = _topk(keys, offs_k, K, False)
        member = keys >= kth[:, None]                                                    # natural K_t
        r_gate, r_demand, probs = _gates(z, member, row_max, row_sum, ROUTER, DEMAND)
        if SCORE == GATE_MASS:
            primary += _fixed(r_demand, valid, scale)
        elif SCORE == VOTES:
            primary += tl.sum(tl.where(valid[:, None] & member, 1, 0), axis=0)
            secondary += _fixed(r_gate, valid, scale)
        elif SCORE == ROUTER_MASS:
            primary += _fixed(probs, valid, scale)
        else:                        # COMMITMENT
            alpha = tl.load(alpha_ptr + b * s_ab + rows * s_at, mask=valid, other=0.0)
            primary += _fixed(alpha[:, None] * r_demand, valid, scale)
        if ANCHOR:                   # A = K_root
            anchor = anchor | (tl.max(tl.where(member & (rows == 0)[:, None], 1, 0), axis=0) > 0)

    # the set S on [E] vectors
    if SCORE == VOTES:
        utility = primary.to(tl.float32)
    else:
        utility = primary.to(tl.float32) * unit
    if SIZING == ALL:
        eligible = e_in
    else:                            # A plus the n best non-anchor experts
        if SCORE == VOTES:           # votes desc, then gate mass desc, then lower index
            mass_bits = (secondary.to(tl.float32) * unit).to(tl.int32, bitcast=True).to(tl.int64)
            key = (primary.to(tl.int64) << 47) | (mass_bits << IDX_BITS) | (65535 - offs_e)
        else:
            key = _score_keys(utility, offs_e)
        if SIZING == FIXED:
            n = budget - tl.sum(anchor.to(tl.int32), axis=0)
        else:
            log2_n = tl.load(log2_ptr + offs_e, mask=e_in, other=0)                       # log2 of 1..E
            n = _effective_rank((utility * scale).to(tl.int64), e_in & ~anchor & (utility > 0), log2_n, e_in,
                                guard)
        eligible = e_in & (anchor | _top_n(tl.where(e_in & ~anchor, key, _lowest(True)), n, True))
    if PRUNE == NONRESIDENT:
        resident = tl.load(resident_ptr + b * s_rb + offs_e * s_re, mask=e_in, other=1)
        eligible = _prune(eligible, utility, anchor, resident, offs_e, scale, rho_q, min_set)
    out_e = b * E + offs_e
    tl.store(eligible_ptr + out_e, eligible.to(tl.int8), mask=e_in)
    tl.store(utility_ptr + out_e, utility, mask=e_in)
    tl.store(anchor_ptr + out_e, anchor.to(tl.int8), mask=e_in)

    # pass 2: route every token inside S
    if ROUTE and not NATURAL:
        outside = _lowest(KEY64)
        for t0 in range(0, T, TC):
            rows = t0 + offs_c
            keys, z, row_max, row_sum = _chunk(logits_ptr, bias_ptr, b, rows, e_in, offs_e, T, E, s_lb, s_lt, s_le,
                                               KEY64, TC, ROUTER, GROUPS, GROUP_TOP, BLOCK_G)
            keys = tl.where(eligible[None, :], keys, outside)
            _route_chunk(keys, z, row_max, row_sum, ids_ptr, weights_ptr, b, rows, offs_e, offs_k, T, route_scale,
                         K, ROUTER, LOGIT, KEY64)


# ----------------------------------------------------------------------------------------------- wrapper

MAX_EXPERTS = 1 << 12   # experts per layer the key layout and the [E] vectors allow
TC_MAX = 4              # tokens per chunk: the [TC, BE] tiles of a chunk, whatever the warps
WARP_CHOICES = (4, 8)   # num_warps in the order tried (`choose_warps`): 4 runs the fewest instructions; 8 halves
                        # each thread's share of the tiles and of the [BE] sorts where 4 spills (pruning at
                        # E = 256, or fp32 keys on sm_120)


def choose_warps(spills: Callable[[int], bool]) -> int:
    """num_warps of one specialisation: the first of WARP_CHOICES whose binary compiled with that many warps does
    not spill (`spills(w)`), else the first. The one rule, applied at a specialisation's first launch on a GPU
    and to the same launch compiled offline (bench-kernel, tests/kernels/test_kernel_compile.py)."""
    return next((w for w in WARP_CHOICES if not spills(w)), WARP_CHOICES[0])


class Chosen(NamedTuple):
    """What `choose_warps` decided for one specialisation launched in this process."""
    num_warps: int
    spills: bool          # the chosen binary still spills (every choice did)


_CHOSEN: dict[tuple, Chosen] = {}    # a launch's specialisation (device, logits dtype, ints, constexprs) -> choice


def chosen() -> list[Chosen]:
    """Every specialisation this process launched on a GPU, with its warps (gpu-check reports them)."""
    return list(_CHOSEN.values())


def _warps_on_gpu(grid: tuple, args: tuple, kwargs: dict) -> int:
    """`choose_warps` for a CUDA launch, from the binaries Triton's JIT compiles for this device (kept in its
    cache, so the launch that follows compiles nothing); once per specialisation and process."""
    key = (args[0].device, args[0].dtype) + tuple(a for a in args if not isinstance(a, Tensor)) \
        + tuple(sorted(kwargs.items()))
    choice = _CHOSEN.get(key)
    if choice is None:
        from .offline import binary_spills
        seen = {}

        def spills(w: int) -> bool:
            compiled = _verifier_kernel.warmup(*args, grid=grid, **{**kwargs, "num_warps": w})
            try:
                seen[w] = binary_spills(compiled.asm["cubin"])
            except (OSError, subprocess.CalledProcessError):   # a Triton without its cuobjdump: the driver's
                compiled._init_handles()                          # local memory of the loaded binary
                seen[w] = compiled.n_spills > 0
            return seen[w]
        w = choose_warps(spills)
        choice = _CHOSEN[key] = Chosen(w, seen[w])
    return choice.num_warps


def router_mode(router: Router) -> RouterMode:
    """The kernel variant of a router (`ROUTER_MODES`, one entry per `RouterKind`)."""
    return ROUTER_MODES[router.kind](router)


class TritonVerifier(Verifier):
    """The Triton backend of `make_verifier`: one launch per MoE layer, one program per block (blocks run on
    several SMs). A call only allocates the outputs and launches. On CPU it runs under TRITON_INTERPRET=1."""
    backend = "triton"

    def __init__(self, plan: Plan, device: torch.device | str = "cuda"):
        super().__init__(plan, device)
        cfg, spec, E = plan.selector, plan.spec, plan.num_experts
        if E > MAX_EXPERTS:
            raise VerifierInputError(f"E={E} experts exceed the kernel's {MAX_EXPERTS}; use the torch backend")
        # log2_fixed(n) for the set sizes n = 1..E the effective rank compares against
        self.log2_n = log2_fixed(torch.arange(1, E + 1)).to(self.device)
        self.no_bias = torch.zeros(E, dtype=torch.float32, device=self.device)   # a router without a bias
        router = plan.router
        self.fixed = dict(budget=cfg.budget or E, min_set=plan.min_set, rho_q=rho_fixed(cfg.prune_rho),
                          guard=rank_guard(cfg.rank_tolerance), scale=float(2 ** cfg.score_bits),
                          unit=2.0 ** -cfg.score_bits, route_scale=float(router.scale))
        self.meta = dict(K=router.top_k, SCORE=SCORE_CODES[spec.score], SIZING=SIZING_CODES[spec.sizing],
                         ANCHOR=spec.anchor, ROUTER=int(router_mode(router)), GROUPS=router.groups,
                         GROUP_TOP=router.group_top, BLOCK_G=triton.next_power_of_2(router.groups),
                         DEMAND=int(Demand.SOFTMAX if cfg.demand_score == "softmax" else Demand.GATE))

    def _check(self, logits: Tensor, resident: Tensor | None) -> None:
        super()._check(logits, resident)
        max_tokens = (1 << (31 - self.plan.selector.score_bits)) - 1       # int32 fixed-point block sums
        if logits.shape[1] > max_tokens:
            raise VerifierInputError(f"blocks of T={logits.shape[1]} tokens exceed {max_tokens} (int32 sums of "
                                     f"score_bits={self.plan.selector.score_bits} fixed point); lower score_bits "
                                     f"or split")

    def tiles(self, T: int, E: int) -> dict:
        """Tile sizes of a launch for blocks of T tokens and E experts (warps: `choose_warps`)."""
        return dict(TC=min(triton.next_power_of_2(T), TC_MAX), BLOCK_E=triton.next_power_of_2(E),
                    BLOCK_K=triton.next_power_of_2(self.plan.router.top_k))

    def _run(self, logits: Tensor, resident: Tensor | None, route: bool, bias: Tensor | None) -> VerifierOutput:
        B, T, E = logits.shape
        dev, K = logits.device, self.plan.router.top_k
        step = self.rows(B)
        ids = torch.empty(B, T, K, dtype=torch.int64, device=dev) if route else None
        weights = torch.empty(B, T, K, dtype=torch.float32, device=dev) if route else None
        out = VerifierOutput(ids, weights, eligible=torch.empty(B, E, dtype=torch.bool, device=dev),
                             utility=torch.empty(B, E, dtype=torch.float32, device=dev),
                             anchor=torch.empty(B, E, dtype=torch.bool, device=dev))
        res = resident.view(torch.uint8) if resident is not None else out.eligible.view(torch.uint8)
        res_b, res_e = (0, res.stride(0)) if res.dim() == 1 else res.stride()
        args = (logits, self.no_bias if bias is None else bias, step.alpha, step.num_tokens, res, self.log2_n,
                out.eligible.view(torch.uint8), out.utility, out.anchor.view(torch.uint8),
                ids if route else out.utility, weights if route else out.utility,      # unused without routing
                T, E)
        kwargs = dict(**self.fixed, s_lb=logits.stride(0), s_lt=logits.stride(1), s_le=logits.stride(2),
                      s_ab=step.alpha.stride(0), s_at=step.alpha.stride(1), s_rb=res_b, s_re=res_e,
                      PRUNE=int(Prune.NONRESIDENT if resident is not None else Prune.OFF), ROUTE=route,
                      **self.tiles(T, E), **self.meta)
        warps = _warps_on_gpu((B,), args, kwargs) if dev.type == "cuda" else WARP_CHOICES[0]
        _verifier_kernel[(B,)](*args, **kwargs, num_warps=warps)
        return out
