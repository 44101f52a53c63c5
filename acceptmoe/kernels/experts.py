"""A pass's routed experts in one Triton kernel, for dense (bf16 / fp16 / fp32) and MXFP4-packed weights.

Shapes (T tokens, top-k k, P = T * k (token, expert) pairs, G weight groups: experts, or slots of a pool):

    x        [T, H]                  activations (the compute dtype)
    group    [P] int                 the weight group of each pair (pair p belongs to token p // k)
    weights  [P] fp32 | None         each pair's routing weight, applied to its output (None: 1)
    w        {"w1": [G, 2I, H], "w2": [G, H, I]}                      dense, in x's dtype, or MXFP4-packed:
             {"w1_blocks": [G, 2I, H/32, 16] u8, "w1_scales": [G, 2I, H/32] u8, "w2_blocks", "w2_scales"}
             with optional biases "b1" [G, 2I], "b2" [G, H]
    ->
    out      [P, H]                  each pair's weighted expert output, in pair order (x's dtype)

    out = experts(x, w, group, k, num_groups, activation="swiglu")     # then out.view(T, k, H).sum(1)

The pairs are sorted by group into tiles of BLOCK_M rows that never straddle two groups (`align`: device
ops only, padded with an out-of-range pair id), so each tile multiplies one group's weights. One kernel runs
in two stages over those tiles: stage 1, h = act(x @ w1^T + b1) with the gate and up rows of one column block
accumulated side by side (SwiGLU's gate/up halves, or GPT-OSS's interleaved rows with its clamped SwiGLU);
stage 2, out = (h @ w2^T + b2) * routing weight, written to each pair's row. MXFP4 tiles are dequantised in
registers (E2M1 codes and a power-of-two scale per 32 values, exactly `acceptmoe.engine.mxfp4.dequantize`),
so packed experts stay packed in device memory. The grid is fixed by P and G (the largest tile count, tiles
past the real count exit at once), nothing is read on the host: a CUDA graph can capture it. A pair whose
group is `skip` (the offloaded store's zero slot) gets no tile and an output row of zeros.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch import Tensor

ACTIVATIONS = {"swiglu": 0, "clamped_swiglu": 1}
BLOCK_M = 16            # pairs per tile (tl.dot's smallest M)
MXFP4_GROUP = 32        # values per shared scale


def max_tiles(pairs: int, num_groups: int, block_m: int = BLOCK_M) -> int:
    """An upper bound on the tiles any routing of `pairs` pairs over `num_groups` groups needs: each
    non-empty group rounds up once."""
    return triton.cdiv(pairs, block_m) + min(num_groups, pairs)


def align(group: Tensor, num_groups: int, block_m: int = BLOCK_M, skip: int | None = None) -> tuple[Tensor, Tensor]:
    """Pairs sorted by group into block-aligned tiles, with device ops only.

    group [P] -> rows [max_tiles * block_m] int32 (the pair id at each tile row, P where padding),
                 tile_group [max_tiles] int32 (the group of each tile, -1 past the last tile)."""
    P, G = group.numel(), num_groups
    tiles = max_tiles(P, G, block_m)
    dev = group.device
    g = group.reshape(-1).long()
    if skip is not None:
        g = torch.where(g == skip, G, g)                                # skipped pairs: a dropped group G
    counts = torch.zeros(G + 1, dtype=torch.long, device=dev).index_add_(0, g, torch.ones_like(g))   # [G+1]
    padded = (counts[:G] + block_m - 1) // block_m * block_m           # [G] rows per group, tile-aligned
    pad_end = padded.cumsum(0)                                          # [G]
    pad_start = torch.cat([pad_end.new_zeros(1), pad_end[:-1], pad_end[-1:]])   # [G+1], G -> past the end
    start = torch.cat([counts.new_zeros(1), counts.cumsum(0)[:-1]])    # [G+1] first sorted index per group
    sorted_g, order = torch.sort(g, stable=True)                       # [P] each
    dest = pad_start[sorted_g] + torch.arange(P, device=dev) - start[sorted_g]   # [P]
    dest = torch.where(sorted_g == G, tiles * block_m, dest)           # dropped pairs: the spare row
    rows = torch.full((tiles * block_m + 1,), P, dtype=torch.int32, device=dev)
    rows.index_copy_(0, dest, order.to(torch.int32))
    tile_start = torch.arange(tiles, device=dev) * block_m             # [tiles]
    tile_group = torch.searchsorted(pad_end, tile_start, right=True)   # [tiles] first group ending past it
    tile_group = torch.where(tile_group < G, tile_group, -1).to(torch.int32)
    return rows[:-1], tile_group


@triton.jit
def _fp4(codes):
    """E2M1 codes (0..15, int32) -> fp32 values: sign bit 3, exponent bits 2..1, mantissa bit 0."""
    e = (codes >> 1) & 3
    m = (codes & 1).to(tl.float32)
    mag = tl.where(e == 0, m * 0.5, (1.0 + m * 0.5) * tl.exp2((e - 1).to(tl.float32)))
    return tl.where((codes & 8) != 0, -mag, mag)


@triton.jit
def _weight_tile(w_ptr, s_ptr, g, rows, k0, R, K, row_ok,
                 BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, MXFP4: tl.constexpr, DTYPE: tl.constexpr):
    """Group g's weight rows `rows` [BLOCK_N], columns k0..k0+BLOCK_K, as a [BLOCK_K, BLOCK_N] tile in DTYPE."""
    if MXFP4:
        kb = k0 // 2 + tl.arange(0, BLOCK_K // 2)                       # byte columns
        ok = row_ok[:, None] & (kb[None, :] < K // 2)
        byte = tl.load(w_ptr + (g * R + rows[:, None]).to(tl.int64) * (K // 2) + kb[None, :], mask=ok,
                       other=0).to(tl.int32)                            # [N, BK/2]
        vals = tl.reshape(tl.join(_fp4(byte & 15), _fp4(byte >> 4)), (BLOCK_N, BLOCK_K))   # low nibble first
        ks = k0 // 32 + tl.arange(0, BLOCK_K // 32)
        sc = tl.load(s_ptr + (g * R + rows[:, None]).to(tl.int64) * (K // 32) + ks[None, :],
                     mask=row_ok[:, None] & (ks[None, :] < K // 32), other=127).to(tl.float32)   # [N, BK/32]
        vals = tl.reshape(vals, (BLOCK_N, BLOCK_K // 32, 32)) * tl.exp2(sc - 127.0)[:, :, None]
        tile = tl.trans(tl.reshape(vals, (BLOCK_N, BLOCK_K)).to(DTYPE))
    else:
        kk = k0 + tl.arange(0, BLOCK_K)
        ok = row_ok[None, :] & (kk[:, None] < K)
        tile = tl.load(w_ptr + (g * R + rows[None, :]).to(tl.int64) * K + kk[:, None], mask=ok, other=0.0)
    return tile


@triton.jit
def _experts_kernel(
    a_ptr, w_ptr, s_ptr, b_ptr, out_ptr, rw_ptr, rows_ptr, tile_group_ptr,
    P, TOPK, K, N, R,                   # pairs, top-k, reduction width, output width, weight rows per group
    alpha, limit,
    STAGE: tl.constexpr,                # 1: h = act(x w1^T + b1) -> out [tiles * BM, I]; 2: out = (h w2^T + b2) * rw
    ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RW: tl.constexpr, MXFP4: tl.constexpr,
    DTYPE: tl.constexpr, PRECISION: tl.constexpr, DOT_F32: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    tile = tl.program_id(0)
    g = tl.load(tile_group_ptr + tile)
    if g < 0:
        return
    pos = tile * BLOCK_M + tl.arange(0, BLOCK_M)                        # [BM] tile rows
    pair = tl.load(rows_ptr + pos)
    valid = pair < P
    if STAGE == 1:  # noqa: SIM108 (Triton: constexpr branch)
        a_row = pair // TOPK                                            # x rows by token
    else:
        a_row = pos                                                     # h rows by tile row
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)              # [BN] output columns
    n_ok = n < N
    if STAGE == 1:
        gate_rows = 2 * n if ACT == 1 else n                            # GPT-OSS interleaves gate and up rows
        up_rows = 2 * n + 1 if ACT == 1 else n + N
    else:
        gate_rows = n
        up_rows = n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + a_row[:, None].to(tl.int64) * K + kk[None, :], mask=valid[:, None] & (kk[None, :] < K),
                    other=0.0)                                          # [BM, BK]
        wg = _weight_tile(w_ptr, s_ptr, g, gate_rows, k0, R, K, n_ok, BLOCK_K, BLOCK_N, MXFP4, DTYPE)
        if DOT_F32:                                                     # exact upcast (see `experts`)
            a = a.to(tl.float32)
            wg = wg.to(tl.float32)
        acc = tl.dot(a, wg, acc, input_precision=PRECISION)
        if STAGE == 1:
            wu = _weight_tile(w_ptr, s_ptr, g, up_rows, k0, R, K, n_ok, BLOCK_K, BLOCK_N, MXFP4, DTYPE)
            if DOT_F32:
                wu = wu.to(tl.float32)
            acc_up = tl.dot(a, wu, acc_up, input_precision=PRECISION)
    if HAS_BIAS:
        acc += tl.load(b_ptr + g * R + gate_rows, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        if STAGE == 1:
            acc_up += tl.load(b_ptr + g * R + up_rows, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    if STAGE == 1:
        if ACT == 1:                                                    # clamped SwiGLU (GPT-OSS)
            gate = tl.minimum(acc, limit)
            up = tl.minimum(tl.maximum(acc_up, -limit), limit)
            acc = (up + 1.0) * (gate * tl.sigmoid(gate * alpha))
        else:                                                           # SwiGLU: silu(gate) * up
            acc = acc * tl.sigmoid(acc) * acc_up
        out_row = pos
    else:
        if HAS_RW:
            acc = acc * tl.load(rw_ptr + pair, mask=valid, other=0.0).to(tl.float32)[:, None]
        out_row = pair
    tl.store(out_ptr + out_row[:, None].to(tl.int64) * N + n[None, :], acc.to(DTYPE),
             mask=valid[:, None] & n_ok[None, :])


_TL_DTYPES = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


def is_packed(w: dict[str, Tensor]) -> bool:
    """Whether the weights are MXFP4-packed (`w1_blocks` ...) rather than dense (`w1`, `w2`)."""
    return "w1_blocks" in w


def _operand(w: dict[str, Tensor], name: str) -> tuple[Tensor, Tensor, int, int]:
    """(weights, scales or a dummy, rows per group, reduction width) of `w1` or `w2`."""
    if is_packed(w):
        blocks, scales = w[f"{name}_blocks"], w[f"{name}_scales"]   # [G, R, K/32, 16], [G, R, K/32]
        return blocks, scales, blocks.shape[1], blocks.shape[2] * MXFP4_GROUP
    dense = w[name]                                                     # [G, R, K]
    return dense, dense, dense.shape[1], dense.shape[2]


def experts(x: Tensor, w: dict[str, Tensor], group: Tensor, k: int, num_groups: int, activation: str = "swiglu",
            weights: Tensor | None = None, skip: int | None = None, alpha: float = 1.702, limit: float = 7.0,
            block_n: int = 64, block_k: int = 64, num_warps: int | None = None) -> Tensor:
    """Every pair's expert output, weighted: see the module docstring. x [T, H], group [P] -> [P, H].
    num_warps None: 4 for 16-bit compute, 8 for fp32 (with 4, fp32 tiles spill on sm_120 at GPT-OSS's shape;
    `./reproduce.sh bench-kernel`)."""
    num_warps = num_warps or (8 if x.dtype == torch.float32 else 4)
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")
    if x.dtype not in _TL_DTYPES:
        raise ValueError(f"experts: compute dtype {x.dtype} is not one of {', '.join(map(str, _TL_DTYPES))}")
    if block_k % MXFP4_GROUP or block_n < 16 or block_k < 16:
        raise ValueError(f"block_k must be a multiple of {MXFP4_GROUP} and block sizes at least 16")
    x = x.contiguous()
    T, H = x.shape
    P = group.numel()
    w1, s1, R1, K1 = _operand(w, "w1")                                 # R1 = 2I rows, K1 = H
    w2, s2, R2, K2 = _operand(w, "w2")                                 # R2 = H rows, K2 = I
    I = R1 // 2
    if K1 != H or R2 != H or K2 != I or P != T * k:
        raise ValueError(f"experts: x [{T}, {H}], {P} pairs at top-{k}, w1 rows {R1} x {K1}, w2 rows {R2} x {K2} "
                         f"do not fit (need w1 [G, 2I, H], w2 [G, H, I], P = T * k)")
    rows, tile_group = align(group, num_groups, BLOCK_M, skip)
    tiles = tile_group.numel()
    h = torch.empty(tiles * BLOCK_M, I, dtype=x.dtype, device=x.device)
    out = torch.zeros(P, H, dtype=x.dtype, device=x.device)
    dtype, precision = _TL_DTYPES[x.dtype], ("ieee" if x.dtype == torch.float32 else "tf32")
    # The Triton interpreter's bf16 tl.dot multiplies the raw bits: there the bf16 operands are upcast (exact)
    # and multiplied in fp32, the same products a GPU's bf16 MMA accumulates in fp32.
    dot_f32 = x.dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    rw = weights.reshape(-1).float().contiguous() if weights is not None else out
    b1, b2 = w.get("b1"), w.get("b2")
    common = dict(ACT=ACTIVATIONS[activation], HAS_RW=weights is not None, MXFP4=is_packed(w), DTYPE=dtype,
                  PRECISION="ieee" if dot_f32 else precision, DOT_F32=dot_f32, BLOCK_M=BLOCK_M, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=num_warps)
    _experts_kernel[(tiles, triton.cdiv(I, block_n))](
        x, w1, s1, b1 if b1 is not None else x, h, rw, rows, tile_group, P, k, H, I, R1, alpha, limit,
        STAGE=1, HAS_BIAS=b1 is not None, **common)
    _experts_kernel[(tiles, triton.cdiv(H, block_n))](
        h, w2, s2, b2 if b2 is not None else x, out, rw, rows, tile_group, P, k, I, H, R2, alpha, limit,
        STAGE=2, HAS_BIAS=b2 is not None, **common)
    return out
