"""The experts kernel (`acceptmoe.kernels.experts`, under the Triton interpreter: conftest) against the plain
per-expert definition (`gpu_experts.reference`: `ExpertMath` one pair at a time, in float64 on the same rounded
inputs; gpu-check runs the same comparison on a GPU):
every compute dtype, both activations, dense and MXFP4-packed weights, with and without biases, ragged and
empty groups, a skipped group, and T from 1 to 128."""
from __future__ import annotations

import pytest
import torch

from acceptmoe.kernels.experts import align, experts, max_tiles
from acceptmoe.tools.gpu_experts import TOL, ragged_groups, reference, small_weights

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _check(T, k, G, activation, dtype, packed, bias, group, skip=None, H=64, I=32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ops, dense = small_weights(G, H, I, dtype, packed, bias, gen)
    x = torch.randn(T, H, generator=gen).to(dtype)
    rw = torch.rand(T, k, generator=gen)
    out = experts(x, ops, group, k, G, activation, weights=rw, skip=skip)
    ref = reference(activation, x, dense, group, k, rw, skip)
    assert out.shape == (T * k, H) and out.dtype == dtype
    scale = ref.abs().max().item() or 1.0
    err = (out.double() - ref).abs().max().item()
    assert err <= TOL[dtype] * scale, (err, scale)
    if skip is not None:
        assert not out[group == skip].any()


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("activation", ["swiglu", "clamped_swiglu"])
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "mxfp4"])
def test_every_dtype_activation_and_weight_format(dtype, activation, packed):
    T, k, G = 7, 4, 12
    group = torch.randint(0, G, (T * k,), generator=torch.Generator().manual_seed(3))
    _check(T, k, G, activation, dtype, packed, bias=activation == "clamped_swiglu", group=group)


@pytest.mark.parametrize("T", [1, 2, 17, 128])
def test_token_counts_from_1_to_128_with_ragged_and_empty_groups(T):
    k, G = 4, 60
    group = ragged_groups(T * k, G, torch.Generator().manual_seed(T))   # most pairs in 3 groups, many empty
    _check(T, k, G, "swiglu", torch.float32, packed=False, bias=False, group=group)


def test_widths_that_are_not_tile_multiples_and_biases():
    group = torch.tensor([2, 0, 2, 2, 1, 0])
    _check(3, 2, 3, "clamped_swiglu", torch.float32, packed=False, bias=True, group=group, H=96, I=40)
    _check(3, 2, 3, "clamped_swiglu", torch.bfloat16, packed=True, bias=True, group=group, H=96, I=64)


def test_pairs_in_the_skipped_group_are_zero():
    """The offloaded store's zero slot: pairs outside the current wave contribute nothing and get no tile."""
    group = torch.tensor([4, 1, 4, 0, 4, 4, 2, 4])
    _check(4, 2, 5, "swiglu", torch.float32, packed=False, bias=True, group=group, skip=4)


def test_align_puts_each_group_in_its_own_tiles_within_the_bound():
    group = torch.tensor([3, 0, 3, 3, 1, 0, 3, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5])
    rows, tile_group = align(group, 7, block_m=4, skip=1)
    P = group.numel()
    assert tile_group.numel() == max_tiles(P, 7, 4) and rows.numel() == 4 * tile_group.numel()
    seen = []
    for t, g in enumerate(tile_group.tolist()):
        pairs = [p for p in rows[4 * t: 4 * t + 4].tolist() if p < P]
        if g < 0:
            assert not pairs
            continue
        assert pairs and all(group[p] == g for p in pairs) and pairs == sorted(pairs)   # stable within a group
        seen += pairs
    assert sorted(seen) == [p for p in range(P) if group[p] != 1]                     # skip=1 dropped, rest once
