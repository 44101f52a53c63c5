"""The fixed-point primitives every backend shares: block scores, effective-rank sizing and the pruning budget
are exact integer arithmetic on them, so every backend computes the same sets bit for bit (docs/method.md,
"Exact arithmetic").

- A block score is a sum over the block's tokens of per-token terms in [0, 1], each truncated to a multiple
  of 2^-bits (`truncate`); the integers are added, so a score does not depend on the order of summation.
- `log2_fixed` is a 16-fractional-bit log2 of an integer by repeated squaring (a deterministic integer
  algorithm, error below 2^-16), as a tensor function and for one Python int (`log2_fixed_int`).
- Effective rank, on the candidates' integer demand U (S = sum U): n_er is the smallest n >= 1 with
  S * (log2_fixed(n) + guard) >= S * log2_fixed(S) - sum_e U_e log2_fixed(U_e), i.e. n >= exp(H) (1 -
  rank_tolerance), clamped to the number of candidates; 0 without candidates. `rank_guard` = round(-log2(1
  - rank_tolerance) 2^16) keeps an effective rank that exceeds an integer by float error at that integer.
  log2_fixed takes integers below 2^31, so the candidates' total demand S must stay below 2^(31 - score_bits)
  units: a gate-based score adds at most 1 per token, so blocks of up to 511 tokens at 22 bits (the Triton
  kernel refuses longer ones).
- Pruning budget: a prefix D may be removed while 2^16 * sum_D U_e <= rho_fixed * sum_S U_e, with
  rho_fixed = round(prune_rho * 2^16).

Each backend implements the rules on top of these (the readable reference with Python integers, the torch
verifier with tensors, the Triton kernel in registers); nothing else is shared.
"""
from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

LOG2_BITS = 16          # fractional bits of log2_fixed, of the rank guard and of rho_fixed


def truncate(terms: Tensor, bits: int) -> Tensor:
    """int32 [...]: per-token terms in [0, 1] (fp32) truncated to multiples of 2^-bits, as integers."""
    return (terms.float() * float(2 ** bits)).to(torch.int32)


def to_fixed(score: Tensor, bits: int) -> Tensor:
    """int64 [...]: a block score (a multiple of 2^-bits below 2^(31 - bits)) as its exact integer."""
    return (score.float() * float(2 ** bits)).long()


def rank_guard(tolerance: float) -> int:
    """round(-log2(1 - tolerance) * 2^16): the effective-rank guard in log2_fixed units."""
    return round(-math.log2(1.0 - tolerance) * 2 ** LOG2_BITS)


def rho_fixed(rho: float) -> int:
    """round(rho * 2^16): the rerouting budget as a fraction of 2^16."""
    return round(rho * 2 ** LOG2_BITS)


def log2_fixed(x: Tensor) -> Tensor:
    """int64 [...]: log2(x) * 2^16 for integers 1 <= x < 2^31: integer part from the top bit, then 16
    fractional bits by squaring the Q1.30 mantissa (each square truncated to 30 fractional bits; bit i of
    the fraction is whether the i-th square reaches 2, which then halves it)."""
    x = x.long()
    pow2, place = _log2_constants(x.device)
    e = (x[..., None] >= pow2).sum(-1)                                     # floor(log2 x): #{j >= 1: x >= 2^j}
    m = x << (30 - e)                                                      # [2^30, 2^31): 1.xxx in Q1.30
    bits = [e]
    for _ in range(LOG2_BITS):
        square = m * m                                                     # Q2.60 in [2^60, 2^62)
        top = square >> 61                                                 # 1 where the square is >= 2
        m = square >> (30 + top)                                           # back to Q1.30, halved where top
        bits.append(top)
    return (torch.stack(bits, -1) * place).sum(-1)                         # e * 2^16 + sum_i bit_i 2^(15 - i)


def log2_fixed_int(x: int) -> int:
    """`log2_fixed` of one Python int 1 <= x < 2^31, step by step."""
    e = x.bit_length() - 1
    m, out = x << (30 - e), e << LOG2_BITS
    for i in range(LOG2_BITS):
        square = m * m
        top = square >> 61
        m = square >> (30 + top)
        out |= top << (LOG2_BITS - 1 - i)
    return out


@functools.cache
def _log2_constants(device: torch.device) -> tuple[Tensor, Tensor]:
    """int64 [31] 2^1..2^31 (the top-bit test) and [17] 2^16, 2^15, ..., 1 (the places of e and the 16
    fraction bits), made once per device."""
    return (torch.tensor([1 << j for j in range(1, 32)], device=device),
            torch.tensor([1 << j for j in range(LOG2_BITS, -1, -1)], device=device))
