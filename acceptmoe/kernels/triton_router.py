"""The fused verifier kernel's router part: integer keys in a router's choice order, each router kind's gates and
weights, and a chunk of tokens' routing (`triton_verifier` holds the kernel and its wrapper).

A key is one int64 (fp32 values) or int32 (fp16 / bf16 logits) per expert: the value's orderable float bits,
then 65535 - index, so value descending with ties to the lower index (`acceptmoe.methods.topk`) is a plain
integer order. The softmax kinds key the logits (softmax is monotone); the grouped kind keys its biased
sigmoid scores, raised by 2^GROUP_BIT on each token's chosen groups (`Router.order`). Every router kind has
its `RouterMode` (a `tl.constexpr`, `ROUTER_MODES`), each branch on it names its modes, and a mode no branch
handles fails the compile (`tl.static_assert`), never a silent default.
"""
from __future__ import annotations

from enum import IntEnum

import triton
import triton.language as tl

from acceptmoe.methods import Router, RouterKind


class RouterMode(IntEnum):
    SOFTMAX_TOPK_RENORM = 0  # softmax, top-k, renormalise over the k (Qwen3 norm_topk_prob)
    SOFTMAX_TOPK_RAW = 1     # softmax, top-k, keep the unmasked softmax probabilities
    TOPK_SOFTMAX = 2         # top-k of logits, softmax over the k (GPT-OSS)
    SIGMOID_RENORM = 3       # sigmoid + bias, group-limited top-k, sigmoids renormalised over the k (DeepSeek-V3)
    SIGMOID_RAW = 4          # the same, the sigmoids kept as they are


class Demand(IntEnum):
    GATE = 0     # r = the model's own post-top-k weight
    SOFTMAX = 1  # r = the router's probability (`Router.probs`) restricted to K_t


# router kind -> its mode (a kernel variant) for a `Router`: the kernel's entry per `RouterKind` member
ROUTER_MODES = {
    RouterKind.SOFTMAX_TOPK: lambda r: RouterMode.SOFTMAX_TOPK_RENORM if r.renormalize else RouterMode.SOFTMAX_TOPK_RAW,
    RouterKind.TOPK_SOFTMAX: lambda r: RouterMode.TOPK_SOFTMAX,
    RouterKind.SIGMOID_GROUPED: lambda r: RouterMode.SIGMOID_RENORM if r.renormalize else RouterMode.SIGMOID_RAW,
}


def router_mode(router: Router) -> RouterMode:
    """The kernel variant of a router (`ROUTER_MODES`)."""
    return ROUTER_MODES[router.kind](router)


# The codes by name inside the kernel (Triton reads only constexpr globals).
SOFTMAX_TOPK_RENORM, SOFTMAX_TOPK_RAW, TOPK_SOFTMAX, SIGMOID_RENORM, SIGMOID_RAW = (tl.constexpr(int(x))
                                                                                   for x in RouterMode)
GATE, SOFTMAX = (tl.constexpr(int(x)) for x in Demand)
IDX_BITS = tl.constexpr(16)     # a key's low bits hold 65535 - expert index: ties go to the lower index
GROUP_BIT = tl.constexpr(48)    # above any fp32 key (|key| < 2^47): the grouped router's chosen groups rank first
NORM_EPS = tl.constexpr(1e-20)  # acceptmoe.methods.routing.NORM_EPS


@triton.jit
def known_router(ROUTER: tl.constexpr):
    """Fails the compile for a mode no branch handles (the kernel calls it first)."""
    tl.static_assert(ROUTER == SOFTMAX_TOPK_RENORM or ROUTER == SOFTMAX_TOPK_RAW or ROUTER == TOPK_SOFTMAX  # noqa: SIM109 (Triton: no `in` on tuples)
                     or ROUTER == SIGMOID_RENORM or ROUTER == SIGMOID_RAW, "unknown router mode")


@triton.jit
def _lowest(KEY64: tl.constexpr):
    """The smallest key (never selected)."""
    if KEY64:  # noqa: SIM108 (Triton: constexpr branch)
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
    elif ROUTER == SOFTMAX_TOPK_RENORM or ROUTER == TOPK_SOFTMAX:  # noqa: SIM109 (Triton: no `in` on tuples)
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
    if ROUTER == SIGMOID_RENORM or ROUTER == SIGMOID_RAW:                 # sigmoid(z) + bias, groups first # noqa: SIM109 (Triton: no `in` on tuples)
        bias = tl.load(bias_ptr + offs_e, mask=e_in, other=0.0)                          # [BE]
        keys = _logit_keys(tl.sigmoid(z) + bias[None, :], e_in[None, :], offs_e, True)
        if GROUP_TOP < GROUPS:
            keys = _groups_first(keys, e_in, offs_e, E, TC, GROUPS, GROUP_TOP, BLOCK_G)
    elif ROUTER == SOFTMAX_TOPK_RENORM or ROUTER == SOFTMAX_TOPK_RAW or ROUTER == TOPK_SOFTMAX:   # softmax: monotone # noqa: SIM109 (Triton: no `in` on tuples)
        keys = _logit_keys(raw, e_in[None, :], offs_e, KEY64)
    else:
        tl.static_assert(False, "_chunk: unknown router mode")
    row_max = tl.max(z, axis=1)
    row_sum = tl.sum(tl.exp(z - row_max[:, None]), axis=1)
    return keys, z, row_max, row_sum


@triton.jit
def _route_chunk(keys, z, row_max, row_sum, ids_ptr, weights_ptr, b, rows, offs_e, offs_k, T, route_scale,
                 K: tl.constexpr, ROUTER: tl.constexpr, LOGIT: tl.constexpr, KEY64: tl.constexpr):
    """Top-K of the (already masked) keys of one chunk, stored as ids [TC, K] and weights [TC, K]."""
    _, slots = _topk(keys, offs_k, K, True)                                      # [TC, BK]
    ids = 65535 - (slots & 65535).to(tl.int64)
    if ROUTER == SIGMOID_RENORM or ROUTER == SIGMOID_RAW:   # the chosen experts' unbiased sigmoids, gathered # noqa: SIM109 (Triton: no `in` on tuples)
        sig = tl.sigmoid(z)                                                              # [TC, BE]
        chosen = tl.zeros_like(slots).to(tl.float32)                                     # [TC, BK]
        for i in tl.static_range(K):
            id_i = tl.max(tl.where(offs_k[None, :] == i, ids, -1), axis=1)               # [TC]
            sig_i = tl.sum(tl.where(offs_e[None, :] == id_i[:, None], sig, 0.0), axis=1)
            chosen = tl.where(offs_k[None, :] == i, sig_i[:, None], chosen)
        weights = _sigmoid_weights(chosen, ROUTER) * route_scale
    elif ROUTER == SOFTMAX_TOPK_RENORM or ROUTER == SOFTMAX_TOPK_RAW or ROUTER == TOPK_SOFTMAX:  # noqa: SIM109 (Triton: no `in` on tuples)
        vals = tl.where(offs_k[None, :] < K, _key_logit(slots, LOGIT, KEY64), float("-inf"))  # past K: none
        weights = _slot_weights(vals, row_max, row_sum, ROUTER)
    else:
        tl.static_assert(False, "_route_chunk: unknown router mode")
    out = (b * T + rows[:, None]) * K + offs_k[None, :]                                  # [TC, BK]
    k_mask = (rows < T)[:, None] & (offs_k[None, :] < K)
    tl.store(ids_ptr + out, ids, mask=k_mask)
    tl.store(weights_ptr + out, weights, mask=k_mask)


@triton.jit
def _gates(z, member, row_max, row_sum, ROUTER: tl.constexpr, DEMAND: tl.constexpr):
    """Natural gates r [TC, BE] (zero outside K_t): the model's own (r_gate, `Router.gates`) and the demand
    score's (r_demand), and the router's probabilities over every expert (`Router.probs`)."""
    if ROUTER == SIGMOID_RENORM or ROUTER == SIGMOID_RAW:  # noqa: SIM109 (Triton: no `in` on tuples)
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
    if DEMAND == SOFTMAX:  # noqa: SIM108 (Triton: constexpr branch)
        r_demand = tl.where(member, probs, 0.0)
    else:
        r_demand = r_gate
    return r_gate, r_demand, probs
