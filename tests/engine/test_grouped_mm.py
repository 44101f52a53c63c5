"""`expert_math.grouped_mm` takes torch's grouped-matmul kernel exactly where the kernel accepts the operands
(`kernel_layout`, held here to the kernel's own verdict on every layout of a grid), and the path of one call
never depends on an earlier one: a model whose sizes the kernel refuses (a hidden size that is not a multiple of
16 bytes) runs the per-group loop, and the next well-shaped pass still takes the kernel."""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from acceptmoe.engine.expert_math import FELL_BACK, grouped_mm, kernel_layout, native_grouped_mm


def layouts():
    for dtype, (M, K, N, G) in itertools.product(
            (torch.float32, torch.bfloat16), itertools.product((4, 6, 16), (3, 4, 5, 8, 12), (3, 4, 10, 16), (2, 3))):
        for x_t, w_t, skip_row in itertools.product((False, True), repeat=3):
            x = torch.randn(K, M, dtype=dtype).t() if x_t else torch.randn(M, K, dtype=dtype)    # [M, K]
            w = torch.randn(G, N, K, dtype=dtype).transpose(1, 2) if w_t else torch.randn(G, K, N, dtype=dtype)
            yield (x[1:] if skip_row else x), w, G


def test_the_layout_rule_is_the_kernels_own():
    seen = {True: 0, False: 0}
    for x, w, G in layouts():
        offs = torch.tensor([x.shape[0] * (g + 1) // G for g in range(G)], dtype=torch.int32)
        try:
            F.grouped_mm(x, w, offs=offs)
            takes = True
        except RuntimeError:
            takes = False
        assert (kernel_layout(x) and kernel_layout(w)) == takes, (x.shape, x.stride(), w.shape, w.stride())
        seen[takes] += 1
    assert min(seen.values()) > 100                   # the grid holds layouts of both kinds


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_odd_shaped_call_does_not_change_the_next_ones_path(dtype):
    assert native_grouped_mm(torch.device("cpu"), dtype)
    offs = torch.tensor([3, 6], dtype=torch.int32)
    odd_x, odd_w = torch.randn(6, 5, dtype=dtype), torch.randn(2, 5, 3, dtype=dtype)        # 20-byte rows: refused
    before = FELL_BACK.get(("cpu", dtype), 0)
    torch.testing.assert_close(grouped_mm(odd_x, odd_w, offs)[:3], odd_x[:3] @ odd_w[0])
    assert FELL_BACK[("cpu", dtype)] == before + 1
    x, w = torch.randn(6, 8, dtype=dtype), torch.randn(2, 8, 16, dtype=dtype)
    grouped_mm(x, w, offs)
    assert FELL_BACK[("cpu", dtype)] == before + 1    # the kernel, not the loop


def test_no_native_kernel_for_float64_on_cpu():
    assert not native_grouped_mm(torch.device("cpu"), torch.float64)
    x, w = torch.randn(4, 3, dtype=torch.float64), torch.randn(2, 3, 2, dtype=torch.float64)
    torch.testing.assert_close(grouped_mm(x, w, torch.tensor([1, 4], dtype=torch.int32))[1:], x[1:] @ w[1])
