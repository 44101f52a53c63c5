"""MXFP4 (OCP microscaling FP4) expert weights, as GPT-OSS checkpoints store them.

A weight matrix [R, C] is stored as `blocks` uint8 [R, C/32, 16] (two E2M1 values per byte, low nibble
first) and `scales` uint8 [R, C/32] (one shared power-of-two exponent per 32 values, biased by 127).
Value = FP4_VALUES[nibble] * 2 ** (scale - 127). GPT-OSS keeps expert weights packed; `dequantize` runs on
whatever device the packed bytes live (the ExpertStore calls it once per expert and load, never per use).
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor

FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
BLOCK = 32


def dequantize(blocks: Tensor, scales: Tensor, dtype: torch.dtype = torch.bfloat16) -> Tensor:
    """blocks [..., G, 16] uint8, scales [..., G] uint8 -> [..., G * 32] in `dtype`."""
    if blocks.shape[:-1] != scales.shape or blocks.shape[-1] != BLOCK // 2:
        raise ValueError(f"MXFP4 blocks {tuple(blocks.shape)} and scales {tuple(scales.shape)} do not match: "
                         "expected blocks [..., G, 16] with scales [..., G]")
    lut = _lut(blocks.device)
    lo = lut[(blocks & 0x0F).long()]                                     # [..., G, 16]
    hi = lut[(blocks >> 4).long()]                                       # [..., G, 16]
    vals = torch.stack((lo, hi), dim=-1).flatten(-2)                     # [..., G, 32]
    exp = scales.to(torch.int32) - 127                                   # [..., G]
    out = torch.ldexp(vals, exp.unsqueeze(-1).float())                   # [..., G, 32]
    return out.flatten(-2).to(dtype)                                     # [..., G * 32]


@functools.lru_cache(maxsize=8)
def _lut(device: torch.device) -> Tensor:
    """FP4_VALUES as an fp32 table on `device`, uploaded once."""
    return torch.tensor(FP4_VALUES, dtype=torch.float32, device=device)


def quantize(w: Tensor) -> tuple[Tensor, Tensor]:
    """Round-to-nearest MXFP4 of w [..., C] (C a multiple of 32) -> blocks [..., C/32, 16], scales [..., C/32].

    The shared exponent is the smallest one that keeps every value of the block within +-6; used to build
    quantised test checkpoints."""
    if w.shape[-1] % BLOCK:
        raise ValueError(f"last dimension {w.shape[-1]} is not a multiple of {BLOCK}")
    x = w.float().reshape(*w.shape[:-1], w.shape[-1] // BLOCK, BLOCK)   # [..., G, 32]
    amax = x.abs().amax(-1).clamp_min(2.0 ** -126)                       # [..., G]
    exp = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)            # [..., G]
    scaled = x / torch.pow(2.0, exp).unsqueeze(-1)                       # [..., G, 32] within +-6
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32, device=w.device)
    codes = (scaled.unsqueeze(-1) - lut).abs().argmin(-1).to(torch.uint8)  # [..., G, 32]
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)                  # [..., G, 16]
    scales = (exp + 127).to(torch.uint8)
    return blocks.contiguous(), scales.contiguous()
