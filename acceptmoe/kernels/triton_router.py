"""The fused verifier kernel's router part: integer keys in a router's choice order, its gates and weights, and a
chunk of tokens' routing (`triton_verifier` holds the kernel and its wrapper).

A key is one int64 (fp32 values) or int32 (fp16 / bf16 logits) per expert: the value's orderable float bits,
then 65535 - index, so value descending with ties to the lower index (`acceptmoe.methods.topk`) is a plain
integer order. A router that ranks its logits (`Router.ranks_logits`, the constexpr `RAW`) keys the raw logits;
any other keys its fp32 choice values (`Router.scores`: the scores or the logits, plus the bias), raised by
2^GROUP_BIT on each token's chosen groups where the choice is group-limited (`Router.ranking`). Every routing
axis is its own `tl.constexpr` code (`ROUTING_CODES`, one table per axis of `methods.registry.ROUTING_AXES`),
each branch on one names its values, and a code no branch handles fails the compile (`tl.static_assert`),
never a silent default.
"""
from __future__ import annotations

from enum import IntEnum
from typing import Any

import triton
import triton.language as tl

from acceptmoe.methods import Order, Router, Scoring


class Demand(IntEnum):
    GATE = 0     # r = the model's own post-top-k weight
    SOFTMAX = 1  # r = the router's probability (`Router.probs`) restricted to K_t


# Every routing axis value as the kernel's constexpr code (axis -> value -> code), one table per axis
SCORING_CODES = {Scoring.SOFTMAX: 0, Scoring.SIGMOID: 1}
ORDER_CODES = {Order.SCORE_THEN_TOPK: 0, Order.TOPK_THEN_SCORE: 1}
FLAG_CODES = {False: 0, True: 1}                   # the on/off axes: biased, grouped, renormalize
ROUTING_CODES: dict[str, dict[Any, int]] = {"scoring": SCORING_CODES, "order": ORDER_CODES, "biased": FLAG_CODES,
                                            "grouped": FLAG_CODES, "renormalize": FLAG_CODES}
ROUTING_ARGS = {"scoring": "SCORING", "order": "ORDER", "biased": "BIAS", "grouped": "GROUPED",
                "renormalize": "RENORM"}


def router_meta(router: Router) -> dict:
    """The kernel's router constexprs for `router`: one code per routing axis (`ROUTING_CODES`), its groups."""
    codes = {ROUTING_ARGS[axis]: ROUTING_CODES[axis][value] for axis, value in router.axes.items()}
    return dict(**codes, RAW=FLAG_CODES[router.ranks_logits], SCALED=FLAG_CODES[router.scale != 1.0],
                GROUPS=router.groups, GROUP_TOP=router.group_top, BLOCK_G=triton.next_power_of_2(router.groups))


# The codes by name inside the kernel (Triton reads only constexpr globals).
SOFTMAX, SIGMOID = (tl.constexpr(SCORING_CODES[s]) for s in (Scoring.SOFTMAX, Scoring.SIGMOID))
SCORE_THEN_TOPK, TOPK_THEN_SCORE = (tl.constexpr(ORDER_CODES[o]) for o in (Order.SCORE_THEN_TOPK,
                                                                           Order.TOPK_THEN_SCORE))
NO, YES = tl.constexpr(FLAG_CODES[False]), tl.constexpr(FLAG_CODES[True])
GATE, SOFTMAX_DEMAND = (tl.constexpr(int(x)) for x in Demand)
IDX_BITS = tl.constexpr(16)     # a key's low bits hold 65535 - expert index: ties go to the lower index
GROUP_BIT = tl.constexpr(48)    # above any fp32 key (|key| < 2^47): a token's chosen groups rank first
NORM_EPS = tl.constexpr(1e-20)  # acceptmoe.methods.routing.NORM_EPS (the sigmoid's renormalisation)


@triton.jit
def known_router(SCORING: tl.constexpr, ORDER: tl.constexpr, BIAS: tl.constexpr, GROUPED: tl.constexpr,
                 RENORM: tl.constexpr, RAW: tl.constexpr, SCALED: tl.constexpr):
    """Fails the compile for an axis code no branch handles (the kernel calls it first). Derived from the axes:
    RAW, whether the choice ranks the raw logits (`Router.ranks_logits`); SCALED, whether `scale` is not 1 (the
    weights are then multiplied by it: times 1 would change no bit)."""
    tl.static_assert(SCORING == SOFTMAX or SCORING == SIGMOID, "unknown router scoring code")  # noqa: SIM109 (Triton: no `in` on tuples)
    tl.static_assert(ORDER == SCORE_THEN_TOPK or ORDER == TOPK_THEN_SCORE, "unknown router order code")  # noqa: SIM109 (Triton: no `in` on tuples)
    tl.static_assert((BIAS == NO or BIAS == YES) and (GROUPED == NO or GROUPED == YES)  # noqa: SIM109 (Triton: no `in` on tuples)
                     and (RENORM == NO or RENORM == YES) and (RAW == NO or RAW == YES)  # noqa: SIM109 (Triton: no `in` on tuples)
                     and (SCALED == NO or SCALED == YES),  # noqa: SIM109 (Triton: no `in` on tuples)
                     "unknown router flag code")


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
    """Keys [TC, BE] of raw values (int64 for fp32, int32 for fp16/bf16): orderable float bits, then
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
    """The fp32 value a key of `_logit_keys` was made from."""
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
def _score_every(z, SCORING: tl.constexpr):
    """The score of every expert [TC, BE] of fp32 logits z (-inf outside E): the softmax or the sigmoid."""
    if SCORING == SOFTMAX:
        ex = tl.exp(z - tl.max(z, axis=1)[:, None])
        scores = ex / tl.sum(ex, axis=1)[:, None]
    elif SCORING == SIGMOID:
        scores = tl.sigmoid(z)
    else:
        tl.static_assert(False, "_score_every: unknown router scoring code")
    return scores


@triton.jit
def _choice_values(z, SCORING: tl.constexpr, ORDER: tl.constexpr):
    """What the choice ranks before the bias [TC, BE] (`Router.scores`): the scores, or the logits."""
    if ORDER == SCORE_THEN_TOPK:
        values = _score_every(z, SCORING)
    elif ORDER == TOPK_THEN_SCORE:
        values = z
    else:
        tl.static_assert(False, "_choice_values: unknown router order code")
    return values


@triton.jit
def _at_ids(tile, ids, offs_e, offs_k, K: tl.constexpr):
    """[TC, BK]: tile [TC, BE] at each token's chosen ids [TC, BK] (places past K hold 0)."""
    out = tl.zeros_like(ids).to(tl.float32)                                              # [TC, BK]
    for i in tl.static_range(K):
        id_i = tl.max(tl.where(offs_k[None, :] == i, ids, -1), axis=1)                   # [TC]
        v_i = tl.sum(tl.where(offs_e[None, :] == id_i[:, None], tile, 0.0), axis=1)
        out = tl.where(offs_k[None, :] == i, v_i[:, None], out)
    return out


@triton.jit
def _softmax_gates(vals, row_max, row_sum, ORDER: tl.constexpr, RENORM: tl.constexpr):
    """Gates [TC, BK] of the chosen logits vals [TC, BK] (unused places hold -inf) under a softmax."""
    if ORDER == SCORE_THEN_TOPK and RENORM == NO:     # the unmasked softmax probability
        weights = tl.exp(vals - row_max[:, None]) / row_sum[:, None]
    else:   # top-k then softmax, or renormalised over the chosen k (masking before or after the softmax gives
        ex = tl.exp(vals - tl.max(vals, axis=1)[:, None])                      # the same), [TC, BK]
        weights = ex / tl.sum(ex, axis=1)[:, None]
    return weights


@triton.jit
def _renormalised(scores, RENORM: tl.constexpr):
    """The chosen experts' sigmoids [TC, *] (zero elsewhere), over their sum + NORM_EPS if RENORM."""
    if RENORM == YES:
        out = scores / (tl.sum(scores, axis=1)[:, None] + NORM_EPS)
    elif RENORM == NO:
        out = scores
    else:
        tl.static_assert(False, "_renormalised: unknown router flag code")
    return out


@triton.jit
def _group_key(total, g):
    """int64 keys [TC] of fp32 group scores: orderable float bits, then 65535 - g (ties: the lower group)."""
    bits = tl.where(total == 0.0, 0, total.to(tl.int32, bitcast=True))
    return ((bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(tl.int64) << IDX_BITS) | (65535 - g)


@triton.jit
def _groups_first(keys, e_in, offs_e, E, TC: tl.constexpr, GROUPS: tl.constexpr, GROUP_TOP: tl.constexpr,
                  BLOCK_G: tl.constexpr):
    """keys [TC, BE] (int64, of fp32 values) raised by 2^GROUP_BIT on the experts of each token's GROUP_TOP
    groups (consecutive ids, E / GROUPS each) whose two best values sum highest (`Router.in_groups`)."""
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
           TC: tl.constexpr, SCORING: tl.constexpr, ORDER: tl.constexpr, BIAS: tl.constexpr,
           GROUPED: tl.constexpr, RAW: tl.constexpr, GROUPS: tl.constexpr, GROUP_TOP: tl.constexpr,
           BLOCK_G: tl.constexpr):
    """One chunk of a block's logits: keys [TC, BE] in the router's order (`Router.ranking`), fp32 logits
    [TC, BE] (-inf outside E), row max and sum."""
    t_in = rows < T
    ptrs = logits_ptr + b * s_lb + rows[:, None].to(tl.int64) * s_lt + offs_e[None, :] * s_le
    raw = tl.load(ptrs, mask=t_in[:, None] & e_in[None, :], other=0.0)
    z = tl.where(e_in[None, :], raw.to(tl.float32), float("-inf"))                       # [TC, BE]
    if RAW == YES:                               # the logits themselves (`Router.ranks_logits`)
        keys = _logit_keys(raw, e_in[None, :], offs_e, KEY64)
    else:                                        # fp32 choice values, plus the bias, groups first
        if BIAS == YES:
            bias = tl.load(bias_ptr + offs_e, mask=e_in, other=0.0)                      # [BE]
        values = _choice_values(z, SCORING, ORDER)
        if BIAS == YES:
            values = values + bias[None, :]
        keys = _logit_keys(values, e_in[None, :], offs_e, True)
        if GROUPED == YES:
            keys = _groups_first(keys, e_in, offs_e, E, TC, GROUPS, GROUP_TOP, BLOCK_G)
    row_max = tl.max(z, axis=1)
    row_sum = tl.sum(tl.exp(z - row_max[:, None]), axis=1)
    return keys, z, row_max, row_sum


@triton.jit
def _route_chunk(keys, z, row_max, row_sum, ids_ptr, weights_ptr, b, rows, offs_e, offs_k, T, route_scale,
                 K: tl.constexpr, SCORING: tl.constexpr, ORDER: tl.constexpr, RENORM: tl.constexpr,
                 RAW: tl.constexpr, SCALED: tl.constexpr, LOGIT: tl.constexpr, KEY64: tl.constexpr):
    """Top-K of the (already masked) keys of one chunk, stored as ids [TC, K] and weights [TC, K]."""
    _, slots = _topk(keys, offs_k, K, True)                                      # [TC, BK]
    ids = 65535 - (slots & 65535).to(tl.int64)
    if SCORING == SIGMOID:                       # the chosen experts' sigmoids, gathered
        weights = _renormalised(_at_ids(tl.sigmoid(z), ids, offs_e, offs_k, K), RENORM)
    elif SCORING == SOFTMAX:
        if RAW == YES:                           # the keys hold the logits
            vals = tl.where(offs_k[None, :] < K, _key_logit(slots, LOGIT, KEY64), float("-inf"))   # past K: none
        else:
            vals = tl.where(offs_k[None, :] < K, _at_ids(z, ids, offs_e, offs_k, K), float("-inf"))
        weights = _softmax_gates(vals, row_max, row_sum, ORDER, RENORM)
    else:
        tl.static_assert(False, "_route_chunk: unknown router scoring code")
    if SCALED == YES:
        weights = weights * route_scale
    out = (b * T + rows[:, None]) * K + offs_k[None, :]                                  # [TC, BK]
    k_mask = (rows < T)[:, None] & (offs_k[None, :] < K)
    tl.store(ids_ptr + out, ids, mask=k_mask)
    tl.store(weights_ptr + out, weights, mask=k_mask)


@triton.jit
def _gates(z, member, row_max, row_sum, SCORING: tl.constexpr, ORDER: tl.constexpr, RENORM: tl.constexpr,
           DEMAND: tl.constexpr):
    """Natural gates r [TC, BE] (zero outside K_t): the model's own (r_gate, `Router.gates`) and the demand
    score's (r_demand), and the router's probabilities over every expert (`Router.probs`)."""
    if SCORING == SIGMOID:
        sig = tl.sigmoid(z)                                                              # [TC, BE], 0 outside E
        probs = sig / tl.sum(sig, axis=1)[:, None]
        r_gate = _renormalised(tl.where(member, sig, 0.0), RENORM)
    elif SCORING == SOFTMAX:
        probs = tl.exp(z - row_max[:, None]) / row_sum[:, None]                          # [TC, BE]
        if ORDER == TOPK_THEN_SCORE:     # softmax over the chosen logits
            chosen = tl.where(member, tl.exp(z - row_max[:, None]), 0.0)
            r_gate = chosen / tl.sum(chosen, axis=1)[:, None]
        elif ORDER == SCORE_THEN_TOPK and RENORM == YES:
            chosen = tl.where(member, probs, 0.0)
            r_gate = chosen / tl.sum(chosen, axis=1)[:, None]
        elif ORDER == SCORE_THEN_TOPK and RENORM == NO:
            r_gate = tl.where(member, probs, 0.0)
        else:
            tl.static_assert(False, "_gates: unknown router order code")
    else:
        tl.static_assert(False, "_gates: unknown router scoring code")
    if DEMAND == SOFTMAX_DEMAND:  # noqa: SIM108 (Triton: constexpr branch)
        r_demand = tl.where(member, probs, 0.0)
    else:
        r_demand = r_gate
    return r_gate, r_demand, probs
