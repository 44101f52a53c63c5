"""The fixed-point rules against the same rules spelled out on Python integers: the primitives of
`acceptmoe.methods.fixed`, the reference's effective rank and the torch verifier's batched one."""
import math

import torch

from acceptmoe.kernels.torch_verifier import effective_rank, log2_sizes
from acceptmoe.methods import effective_rank as reference_rank
from acceptmoe.methods.fixed import log2_fixed, log2_fixed_int


def python_log2_fixed(x: int) -> int:
    """log2(x) * 2^16 by the rule in plain Python: floor(log2 x), then 16 squarings of the Q1.30 mantissa,
    each truncated to 30 fractional bits; a square >= 2 gives a 1 bit and is halved."""
    e = x.bit_length() - 1
    m, out = x << (30 - e), e << 16
    for i in range(15, -1, -1):
        m = (m * m) >> 30
        if m >= 1 << 31:
            m >>= 1
            out |= 1 << i
    return out


def python_effective_rank(U: list[int], guard: int) -> int:
    """The smallest n >= 1 with S (log2 n + guard) >= S log2 S - sum U log2 U, clamped to the candidates."""
    cand = [u for u in U if u > 0]
    if not cand:
        return 0
    S = sum(cand)
    entropy = S * python_log2_fixed(S) - sum(u * python_log2_fixed(u) for u in cand)
    short = sum(1 for n in range(1, len(U) + 1) if S * (python_log2_fixed(n) + guard) < entropy)
    return min(short + 1, len(cand))


def test_log2_fixed_is_the_integer_rule():
    gen = torch.Generator().manual_seed(0)
    edges = [1 << j for j in range(31)] + [(1 << j) - 1 for j in range(2, 32)] + [(1 << j) + 1 for j in range(1, 31)]
    xs = list(range(1, 2049)) + edges + torch.randint(1, 2 ** 31, (3000,), generator=gen).tolist()
    got = log2_fixed(torch.tensor(xs)).tolist()
    assert got == [python_log2_fixed(x) for x in xs] == [log2_fixed_int(x) for x in xs]
    assert all(abs(g - math.log2(x) * 2 ** 16) < 2 for g, x in zip(got, xs, strict=True))
    assert log2_fixed(torch.tensor([[5, 6], [7, 8]])).shape == (2, 2)      # any shape


def test_log2_sizes_is_a_cached_constant():
    a = log2_sizes(37, torch.device("cpu"))
    assert a is log2_sizes(37, torch.device("cpu"))
    assert a.tolist() == [python_log2_fixed(n) for n in range(1, 38)]


def test_effective_rank_over_rows_is_the_integer_rule():
    gen = torch.Generator().manual_seed(1)
    for trial in range(60):
        E = 1 + trial % 23
        scale = (3, 2 ** 10, 2 ** 22)[trial % 3]
        demand = torch.randint(0, scale, (4, E), generator=gen) * (torch.rand(4, E, generator=gen) < 0.7)
        demand[0] = 0                                                      # a row without candidates
        guard = (0, 9, 3000)[trial % 3]
        got = effective_rank(demand, guard)
        want = [python_effective_rank(row, guard) for row in demand.tolist()]
        assert got.tolist() == want == [reference_rank([u for u in row if u > 0], guard) for row in demand.tolist()]
