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


def ancestor_closed(parents: list[int], rng: random.Random) -> list[int]:
    """A random ancestor-closed subset of a tree's nodes, root first, ascending (what admission keeps)."""
    keep = {0}
    for t in range(1, len(parents)):
        if parents[t] in keep and rng.random() < 0.5:
            keep.add(t)
    return sorted(keep)


@pytest.mark.parametrize("method", [m for m in verifier_methods() if METHODS[m].needs_commitment])
def test_prepare_tree_with_admitted_tokens_selects_the_admitted_subtrees_sets(method):
    """Token-side admission in a fixed-width pass (the SGLang plugin): `prepare_tree(admitted=...)` over the whole
    trees selects exactly what `prepare` selects over each admitted subtree alone, the other tokens' logits
    present but weightless, also when a level keeps no node (N_d = 0 must not turn alpha into NaN)."""
    from acceptmoe.engine.admission import subtree_parents

    budget = 8 if METHODS[method].needs_budget else None
    plan = Variant(method, budget=budget).bind(Fit(Router.preset("softmax_topk", K), E, DEPTH), commitment=P_HAT)
    rng = random.Random(3)
    ts = trees(4, seed=7)
    keeps = [ancestor_closed(p, rng) for p in ts]
    keeps[0] = [0]                                   # the root alone: every deeper level empty
    mask = torch.zeros(len(ts), T, dtype=torch.bool)
    for b, keep in enumerate(keeps):
        mask[b, keep] = True
    z = torch.randn(len(ts), T, E, generator=torch.Generator().manual_seed(4))
    dev = make_verifier("torch", plan)
    dev.prepare_tree(torch.tensor(ts), rows=len(ts), admitted=mask)
    assert torch.isfinite(dev.step.alpha).all() and not dev.step.alpha[~mask].any()
    got = dev(z, route=False).eligible
    host = make_verifier("torch", plan)
    host.prepare([BlockInfo.from_parents(subtree_parents(p, k)) for p, k in zip(ts, keeps, strict=True)], pad_to=T)
    sub = torch.zeros_like(z)
    for b, keep in enumerate(keeps):
        sub[b, : len(keep)] = z[b, keep]
    assert torch.equal(got, host(sub, route=False).eligible)


def test_prepare_tree_refuses_admitted_tokens_for_a_score_without_commitment_weights():
    from acceptmoe.kernels.verifier import VerifierInputError

    plan = Variant("moe-spec", budget=8).bind(Fit(Router.preset("softmax_topk", K), E, DEPTH))
    with pytest.raises(VerifierInputError, match="commitment"):
        make_verifier("torch", plan).prepare_tree(torch.tensor(trees(1, 0)), admitted=torch.ones(1, T, dtype=torch.bool))
