"""`Verifier.prepare_tree` (a serving engine's verify step bound from parent lists on the device, no host read)
writes the same step buffers as `prepare` with the same blocks, and the verifier then selects the same sets."""
import random

import pytest
import torch

from acceptmoe.kernels import make_verifier
from acceptmoe.kernels.verifier import tree_depths
from acceptmoe.methods import METHODS, BlockInfo, Fit, Router, Variant, verifier_methods

E, K, T, DEPTH = 32, 4, 12, 4
P_HAT = (1.0, 0.8, 0.5, 0.3, 0.2)


def trees(n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parents, depth = [-1], [0]
        for t in range(1, T):
            p = rng.choice([i for i in range(t) if depth[i] < DEPTH])
            parents.append(p)
            depth.append(depth[p] + 1)
        out.append(parents)
    return out


def test_tree_depths_equal_the_block_rule():
    for seed in range(5):
        ts = trees(6, seed)
        got = tree_depths(torch.tensor(ts), DEPTH)
        assert got.tolist() == [BlockInfo.from_parents(p).depth.tolist() for p in ts]


@pytest.mark.parametrize("method", [m for m in verifier_methods() if METHODS[m].restricts])
def test_prepare_tree_equals_prepare(method):
    budget = 8 if METHODS[method].needs_budget else None
    plan = Variant(method, budget=budget).bind(Fit(Router.preset("softmax_topk", K), E, DEPTH), commitment=P_HAT)
    ts = trees(3, seed=1)
    host, dev = make_verifier("torch", plan), make_verifier("torch", plan)
    host.prepare([BlockInfo.from_parents(p) for p in ts], pad_to=T, rows=5)
    dev.prepare_tree(torch.tensor(ts), rows=5)
    for a, b in zip((host.step.alpha, host.step.num_tokens, host.step.valid),
                    (dev.step.alpha, dev.step.num_tokens, dev.step.valid), strict=True):
        assert torch.equal(a, b)
    z = torch.randn(3, T, E, generator=torch.Generator().manual_seed(2))
    assert torch.equal(host(z, route=False).eligible, dev(z, route=False).eligible)
