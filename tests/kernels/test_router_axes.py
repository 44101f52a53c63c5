"""The routing axes combine freely: every value of every axis (`registry.ROUTING_AXES`) in every combination a
router can take routes the same in every backend (the readable reference, torch, cpu, the Triton kernel under
the interpreter), so a router no preset names yet is data, not code: sets and ids exactly, weights bit for bit
between the reference and torch and cpu (the same float primitives), to 1e-6 for the kernel."""
from __future__ import annotations

import itertools

import pytest
import torch

from acceptmoe.kernels import make_verifier
from acceptmoe.methods import BlockInfo, Fit, Order, Router, Scoring, SelectorConfig, Variant, prune, route, select_pass
from acceptmoe.methods.registry import ROUTING_AXES

E, K = 16, 2
BLOCKS = [BlockInfo.from_parents([-1, 0, 0, 1, 2, 2]), BlockInfo.from_parents([-1, 0, 1])]


def routers() -> list[Router]:
    """Every combination of axis values a router can take (a softmax after the top-k always normalises)."""
    out = []
    for scoring, order, biased, grouped, renorm in itertools.product(*ROUTING_AXES.values()):
        if scoring is Scoring.SOFTMAX and order is Order.TOPK_THEN_SCORE and not renorm:
            continue
        out.append(Router(scoring, order, K, renorm, biased, groups=4, group_top=2 if grouped else 4,
                          scale=1.5 if biased else 1.0))
    return out


ROUTERS = routers()


def test_the_combinations_cover_every_axis_value():
    for axis, values in ROUTING_AXES.items():
        assert {r.axes[axis] for r in ROUTERS} == set(values), axis
    assert len(ROUTERS) == 28


def _logits(seed: int, tied: bool) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(len(BLOCKS), max(b.num_tokens for b in BLOCKS), E, generator=gen) * 2
    if tied:                                                   # a coarse bf16 grid: ties inside every row
        z = (torch.round(z * 2) / 2).to(torch.bfloat16)
    for i, b in enumerate(BLOCKS):
        z[i, b.num_tokens:] = 0
    return z


@pytest.mark.parametrize("router", ROUTERS, ids=lambda r: "-".join(
    [r.scoring.value, r.order.value] + [a for a in ("biased", "grouped") if r.axes[a]]
    + ["renorm" if r.renormalize else "raw"]))
def test_every_combination_routes_the_same_in_every_backend(router):
    bias = torch.randn(E, generator=torch.Generator().manual_seed(5)) * 0.3 if router.biased else None
    resident = torch.arange(E) % 3 == 0
    for seed, tied in ((1, False), (2, True)):
        logits = _logits(seed, tied)
        for method in ("acceptmoe", "count-b", "moe-spec"):
            plan = Variant(method).bind(Fit(router, E, 2, "offloaded"), commitment=(1.0, 0.8, 0.5), b0=6,
                                        selector=SelectorConfig(prune_min_set=K + 1, prune_rho=0.3))
            want = []
            for b, sel in enumerate(select_pass(plan, logits.float(), BLOCKS, bias)):
                eligible = prune(sel, resident, plan) if plan.prune else sel.eligible
                want.append((eligible, sel.utility, *route(logits[b, :BLOCKS[b].num_tokens], eligible, router, bias)))
            for backend in ("torch", "cpu", "triton"):
                verifier = make_verifier(backend, plan, "cpu")
                verifier.prepare(BLOCKS)
                out = verifier(logits, resident if plan.prune else None, bias=bias)
                for b, (eligible, utility, ids, weights) in enumerate(want):
                    what = f"{backend} {method} block {b} seed {seed}"
                    n = BLOCKS[b].num_tokens
                    assert torch.equal(out.eligible[b], eligible) and torch.equal(out.ids[b, :n], ids), what
                    torch.testing.assert_close(out.utility[b], utility, rtol=0, atol=1e-6)
                    if backend == "triton":
                        torch.testing.assert_close(out.weights[b, :n], weights, rtol=1e-6, atol=1e-6)
                    else:
                        assert torch.equal(out.weights[b, :n], weights), what
