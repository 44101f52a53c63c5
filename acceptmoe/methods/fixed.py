"""Block scores, effective-rank sizing and the pruning budget in fixed point: exact in any backend.

Block scores are sums over a block's tokens of per-token terms in [0, 1]. Each term is truncated to a
multiple of 2^-score_bits and the integers are added, so a score does not depend on the order of
summation (torch, the Triton kernel on any GPU and the interpreter all obtain the same numbers). Sizing
and pruning then run on those integers with integer arithmetic only (no fp64, no transcendental
function), so the Triton kernel evaluates them exactly as written here:

- effective rank: with U_e the candidates' fixed-point demand and S = sum U_e, the entropy in bits is
  H2 = log2 S - sum_e U_e log2 U_e / S. `log2_fixed` is a 16-fractional-bit log2 of an integer by repeated
  squaring (a deterministic integer algorithm, error below 2^-16 in practice). n_er is the smallest n >= 1
  with S * (log2_fixed(n) + guard) >= S * log2_fixed(S) - sum_e U_e log2_fixed(U_e), i.e.
  n >= exp(H) * (1 - rank_tolerance), clamped to the number of candidates; 0 without candidates. `guard`
  = round(-log2(1 - rank_tolerance) * 2^16) keeps an effective rank that exceeds an integer by float
  error (exp(H) = 3.0000001) at that integer.
- pruning budget: a prefix D may be removed while 2^16 * sum_D U_e <= rho_q * sum_S U_e, with
  rho_q = round(prune_rho * 2^16).
"""
from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

LOG2_BITS = 16          # fractional bits of log2_fixed, of the rank guard and of rho_q


def block_sum(terms: Tensor, bits: int) -> Tensor:
    """fp32 [..., E]: sum over tokens (dim -2) of terms [..., T, E] in [0, 1], each truncated to a multiple of
    2^-bits; the integer sum is exact, so the result does not depend on the order of summation."""
    q = (terms.float() * float(2 ** bits)).to(torch.int32)                 # [..., T, E] fixed point
    return q.sum(-2).float() * float(2.0 ** -bits)


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


@functools.lru_cache(maxsize=None)
def _log2_constants(device: torch.device) -> tuple[Tensor, Tensor]:
    """int64 [31] 2^1..2^31 (the top-bit test) and [17] 2^16, 2^15, ..., 1 (the places of e and the 16
    fraction bits), made once per device."""
    return (torch.tensor([1 << j for j in range(1, 32)], device=device),
            torch.tensor([1 << j for j in range(LOG2_BITS, -1, -1)], device=device))


@functools.lru_cache(maxsize=None)
def log2_sizes(num: int, device: torch.device) -> Tensor:
    """int64 [num]: log2_fixed(n) for the set sizes n = 1..num (a constant per width and device)."""
    return log2_fixed(torch.arange(1, num + 1, device=device))


def effective_rank(demand: Tensor, candidates: Tensor, guard: int) -> Tensor:
    """n_er [...] long from fixed-point demand int64 [..., E] over candidates bool [..., E] (demand > 0 there)."""
    U = demand * candidates                                                # [..., E]
    S = U.sum(-1, keepdim=True)                                            # [..., 1]
    log_u, log_s = log2_fixed(torch.cat((U, S), -1).clamp_min(1)).split((U.shape[-1], 1), -1)
    entropy = S * log_s - (U * log_u).sum(-1, keepdim=True)                # [..., 1] S * H2, in 2^-16 units
    short = S * (log2_sizes(U.shape[-1], U.device) + guard) < entropy      # [..., E]: n < exp(H)(1 - tol)
    return torch.minimum(short.sum(-1) + 1, candidates.sum(-1))            # 0 without candidates
