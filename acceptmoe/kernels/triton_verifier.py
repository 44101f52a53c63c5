"""The fused verifier kernel: one launch per MoE layer selects each block's eligible set S and routes inside it.

Shapes (B verification blocks padded to T tokens, E experts, router top-k K):

    logits     [B, T, E]  fp32 | fp16 | bf16 router logits of one layer (math is fp32)
    bias       [E]        fp32 the layer's selection bias (a biased router; zeros without one)
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
pass 1 takes each token's router probabilities and natural top-k (`triton_router`: keys, gates and weights
per routing axis value) and adds the method's per-token terms to the block scores (a score that credits the batch,
`Score.SHARED_COMMITMENT`, then adds the other blocks' root terms, TC roots per chunk: B / TC more chunks per
program), pass 2 routes every token inside the final set. In between, on [E] vectors: the root anchor,
ranking, sizing (fixed budget or effective rank) and optional residency-aware pruning.

Exactly the reference's rules (`acceptmoe.methods`), with no fp64 and no E x E tile:
- every ranking is one integer key per expert (orderable float bits, then 65535 - index), so value
  descending, ties to the lower index (`methods.topk`) is a plain integer order: a token's top-k is K
  max-reductions, a block's top-n is `tl.sort` and one threshold (the router's keys: `triton_router`);
- block scores are fixed-point sums in int32 (`methods.fixed.block_sum`); effective rank and the pruning
  budget are the integer arithmetic of `methods.fixed` (log2 by repeated squaring, rho in 2^-16 units).
Fixed shapes, no host synchronisation: safe to capture in a CUDA graph. Every method- and router-dependent
choice is a `tl.constexpr` enum (one per routing axis), so each method and router compiles only its own code; a
code no branch handles fails the compile (`tl.static_assert`), never a silent default.

Warps per specialisation (`choose_warps`): the first of `WARP_CHOICES` whose compiled binary does not spill
(local memory or STL/LDL in its SASS, read by `offline.binary_spills` with the Triton wheel's cuobjdump; where
that tool is missing, the driver's local-memory size of the loaded binary). The wrapper decides it at a
specialisation's first launch on a GPU from the binary Triton's JIT made, and keeps it for the process;
bench-kernel and the compile test apply the same function to the same launch compiled offline.
"""
from __future__ import annotations

import subprocess
from collections.abc import Callable
from enum import IntEnum
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from acceptmoe.methods import Plan, Score, Sizing, register_backend
from acceptmoe.methods.fixed import log2_fixed, rank_guard, rho_fixed

from .triton_router import (
    IDX_BITS,
    NO,
    ROUTING_CODES,
    Demand,
    _chunk,
    _gates,
    _lowest,
    _route_chunk,
    _topk,
    known_router,
    router_meta,
)
from .verifier import Verifier, VerifierInputError, VerifierOutput


class Prune(IntEnum):
    OFF = 0
    NONRESIDENT = 1  # residency-aware pruning of non-resident, non-anchor experts


# The registry's scores and sizings as the kernel's constexpr codes, and its routing axes' values
# (`triton_router.ROUTING_CODES`): every member of `Score`, of the verification sizings and every value of every
# routing axis has one (checked below when the module loads, like every backend).
SCORE_CODES = {Score.GATE_MASS: 0, Score.VOTES: 1, Score.ROUTER_MASS: 2, Score.COMMITMENT: 3, Score.SHARED_COMMITMENT: 4}
SIZING_CODES = {Sizing.ALL: 0, Sizing.FIXED: 1, Sizing.SELF: 2}
register_backend("triton", SCORE_CODES, SIZING_CODES, ROUTING_CODES)

# The codes by name inside the kernel (Triton reads only constexpr globals).
GATE_MASS, VOTES, ROUTER_MASS, COMMITMENT, SHARED_COMMITMENT = (tl.constexpr(SCORE_CODES[s]) for s in (
    Score.GATE_MASS, Score.VOTES, Score.ROUTER_MASS, Score.COMMITMENT, Score.SHARED_COMMITMENT))
ALL, FIXED, SELF = (tl.constexpr(SIZING_CODES[s]) for s in (Sizing.ALL, Sizing.FIXED, Sizing.SELF))
OFF, NONRESIDENT = tl.constexpr(int(Prune.OFF)), tl.constexpr(int(Prune.NONRESIDENT))
LOG2_BITS = tl.constexpr(16)    # acceptmoe.methods.fixed.LOG2_BITS


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
def known_codes(SCORE: tl.constexpr, SIZING: tl.constexpr, PRUNE: tl.constexpr):
    """Every Score, Sizing and Prune code has a branch below; any other fails the compile by name."""
    tl.static_assert(SCORE == GATE_MASS or SCORE == VOTES or SCORE == ROUTER_MASS or SCORE == COMMITMENT  # noqa: SIM109 (Triton: no `in` on tuples)
                     or SCORE == SHARED_COMMITMENT, "_verifier_kernel: unknown score code")
    tl.static_assert(SIZING == ALL or SIZING == FIXED or SIZING == SELF, "_verifier_kernel: unknown sizing code")  # noqa: SIM109 (Triton: no `in` on tuples)
    tl.static_assert(PRUNE == OFF or PRUNE == NONRESIDENT, "_verifier_kernel: unknown prune code")  # noqa: SIM109 (Triton: no `in` on tuples)


@triton.jit
def _verifier_kernel(
    logits_ptr, bias_ptr, alpha_ptr, ntok_ptr, resident_ptr, log2_ptr,
    eligible_ptr, utility_ptr, anchor_ptr, ids_ptr, weights_ptr,
    T, E, budget, min_set, rho_q, guard, scale, unit, route_scale,
    s_lb, s_lt, s_le, s_ab, s_at, s_rb, s_re,
    K: tl.constexpr, TC: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr,
    SCORE: tl.constexpr, SIZING: tl.constexpr, ANCHOR: tl.constexpr,
    SCORING: tl.constexpr, ORDER: tl.constexpr, BIAS: tl.constexpr, GROUPED: tl.constexpr, RENORM: tl.constexpr,
    RAW: tl.constexpr, SCALED: tl.constexpr, GROUPS: tl.constexpr, GROUP_TOP: tl.constexpr, BLOCK_G: tl.constexpr,
    DEMAND: tl.constexpr, PRUNE: tl.constexpr, ROUTE: tl.constexpr,
):
    known_router(SCORING, ORDER, BIAS, GROUPED, RENORM, RAW, SCALED)
    known_codes(SCORE, SIZING, PRUNE)
    LOGIT: tl.constexpr = logits_ptr.dtype.element_ty
    KEY64: tl.constexpr = (LOGIT == tl.float32) or (RAW == NO)                           # fp32 choice values
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
                                           KEY64, TC, SCORING, ORDER, BIAS, GROUPED, RAW, GROUPS, GROUP_TOP, BLOCK_G)
        if NATURAL:                  # the natural top-k is the routing
            _route_chunk(keys, z, row_max, row_sum, ids_ptr, weights_ptr, b, rows, offs_e, offs_k, T, route_scale,
                         K, SCORING, ORDER, RENORM, RAW, SCALED, LOGIT, KEY64)
        kth, _ = _topk(keys, offs_k, K, False)
        member = keys >= kth[:, None]                                                    # natural K_t
        r_gate, r_demand, probs = _gates(z, member, row_max, row_sum, SCORING, ORDER, RENORM, DEMAND)
        if SCORE == GATE_MASS:
            primary += _fixed(r_demand, valid, scale)
        elif SCORE == VOTES:
            primary += tl.sum(tl.where(valid[:, None] & member, 1, 0), axis=0)
            secondary += _fixed(r_gate, valid, scale)
        elif SCORE == ROUTER_MASS:
            primary += _fixed(probs, valid, scale)
        elif SCORE == COMMITMENT or SCORE == SHARED_COMMITMENT:  # noqa: SIM109 (Triton: no `in` on tuples)
            alpha = tl.load(alpha_ptr + b * s_ab + rows * s_at, mask=valid, other=0.0)
            primary += _fixed(alpha[:, None] * r_demand, valid, scale)
        else:
            tl.static_assert(False, "_verifier_kernel: unknown score code")
        if ANCHOR:                   # A = K_root
            anchor = anchor | (tl.max(tl.where(member & (rows == 0)[:, None], 1, 0), axis=0) > 0)
    if SCORE == SHARED_COMMITMENT:   # the other blocks' root terms: TC roots per chunk (block stride as row stride)
        n_blocks = tl.num_programs(0)
        for r0 in range(0, n_blocks, TC):
            roots = r0 + offs_c
            keys, z, row_max, row_sum = _chunk(logits_ptr, bias_ptr, 0, roots, e_in, offs_e, n_blocks, E, s_lb,
                                               s_lb, s_le, KEY64, TC, SCORING, ORDER, BIAS, GROUPED, RAW, GROUPS,
                                               GROUP_TOP, BLOCK_G)
            kth, _ = _topk(keys, offs_k, K, False)
            _, r_demand, _ = _gates(z, keys >= kth[:, None], row_max, row_sum, SCORING, ORDER, RENORM, DEMAND)
            other = (roots < n_blocks) & (roots != b)
            alpha = tl.load(alpha_ptr + roots.to(tl.int64) * s_ab, mask=other, other=0.0)   # 0 on padding rows
            primary += _fixed(alpha[:, None] * r_demand, other, scale)

    # the set S on [E] vectors
    if SCORE == VOTES:  # noqa: SIM108 (Triton: constexpr branch)
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
        else:                        # SELF (known_codes admits no other sizing here)
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
            keys, z, row_max, row_sum = _chunk(logits_ptr, bias_ptr, b, rows, e_in, offs_e, T, E, s_lb, s_lt,
                                               s_le, KEY64, TC, SCORING, ORDER, BIAS, GROUPED, RAW, GROUPS, GROUP_TOP,
                                               BLOCK_G)
            keys = tl.where(eligible[None, :], keys, outside)
            _route_chunk(keys, z, row_max, row_sum, ids_ptr, weights_ptr, b, rows, offs_e, offs_k, T, route_scale,
                         K, SCORING, ORDER, RENORM, RAW, SCALED, LOGIT, KEY64)


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


class TritonVerifier(Verifier):
    """The Triton backend of `make_verifier`: one launch per MoE layer, one program per block (blocks run on
    several SMs). A call only allocates the outputs and launches. On CPU it runs under TRITON_INTERPRET=1."""
    backend = "triton"

    def __init__(self, plan: Plan, device: torch.device | str = "cuda"):
        super().__init__(plan, device)
        cfg, spec, E = plan.selector, plan.spec, plan.num_experts
        assert spec.score is not None                # the base class refused a method without a verify pass
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
                         ANCHOR=spec.anchor, **router_meta(router),
                         DEMAND=int(Demand.SOFTMAX if cfg.demand_score == "softmax" else Demand.GATE))

    def _check(self, logits: Tensor, resident: Tensor | None) -> None:
        super()._check(logits, resident)
        max_tokens = (1 << (31 - self.plan.selector.score_bits)) - 1       # int32 fixed-point block sums
        B, T = logits.shape[:2]
        score = self.plan.spec.score
        assert score is not None                                            # a verifier's method speculates
        summed = T + (B - 1 if score.credits_batch else 0)                  # the other roots' terms too
        if summed > max_tokens:
            raise VerifierInputError(f"a block score sums {summed} tokens' terms (T={T}"
                                     f"{f' and {B - 1} other roots' if summed > T else ''}), more than {max_tokens} "
                                     f"(int32 sums of score_bits={self.plan.selector.score_bits} fixed point); lower "
                                     f"score_bits or split the pass")

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
