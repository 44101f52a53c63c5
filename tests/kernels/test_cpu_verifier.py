"""The compiled CPU backend's own parts: its top-k rows and the engine's natural routing against the
project's ranking rule and `Router.natural`, bit for bit, and what happens where no C compiler is found.
Its sets and ids against the reference run with the other backends in test_verifier_kernel.py."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

from acceptmoe.kernels import make_verifier, natural, resolve_backend
from acceptmoe.kernels.cpu_verifier import available, topk_rows
from acceptmoe.methods import ROUTER_NAMES, Fit, Router, Variant, first_k_in, order_desc, topk_ids

ROUTERS = [Router.preset("softmax_topk", 1), Router.preset("softmax_topk", 1, renormalize=False),
           Router.preset("topk_softmax", 1)]


def tied(shape, gen) -> torch.Tensor:
    """Logits on a coarse grid: many ties inside each row, signed zeros among them."""
    z = torch.randint(-3, 4, shape, generator=gen).float() / 2
    return torch.where(torch.rand(shape, generator=gen) < 0.2, -0.0 * torch.ones(shape), z)


def test_the_library_builds_here():
    assert available(), "cc should build cpu_select.c on this machine"
    assert resolve_backend("auto", "cpu") == "cpu"


@pytest.mark.parametrize("E, k", [(8, 1), (60, 3), (128, 8), (12, 12), (33, 7)])
def test_topk_rows_is_the_ranking_rule_with_ties_and_masks(E, k):
    gen = torch.Generator().manual_seed(E * 31 + k)
    for z in (torch.randn(3, 5, E, generator=gen), tied((3, 5, E), gen)):
        assert torch.equal(topk_rows(z, k), topk_ids(z, k))
        allowed = torch.rand(3, E, generator=gen) < 0.6
        allowed[:, :k] = True                                        # at least k per block
        want = first_k_in(order_desc(z), allowed[:, None, :], k)     # the rule's restricted top-k
        assert torch.equal(topk_rows(z, k, allowed), want)


@pytest.mark.parametrize("router", ROUTERS, ids=lambda r: f"{r.name}-{r.renormalize}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_natural_routing_is_router_natural_bit_for_bit(router, dtype):
    gen = torch.Generator().manual_seed(1)
    for k in (1, 2, 4, 8):
        r = dataclasses.replace(router, top_k=k)
        for z in (torch.randn(17, 64, generator=gen).to(dtype), tied((2, 9, 64), gen).to(dtype)):
            ids, weights = natural(r, z)
            want_ids, want_weights = r.natural(z)
            assert torch.equal(ids, want_ids)
            assert torch.equal(weights, want_weights)                 # the same float ops: identical bits


def test_every_output_is_the_torch_backends_bit_for_bit():
    """The verifier cases of test_verifier_kernel (ties, padding, resident masks, every method): ids, sets
    and anchors equal, and weights and utilities with identical bits, not merely close."""
    from test_verifier_kernel import CASES, SPECULATING, make_inputs, plan_for
    from test_verifier_kernel import ROUTERS as KINDS
    for case in CASES:
        blocks, p_hat, logits, resident = make_inputs(case)
        router = dataclasses.replace(KINDS[case.router], top_k=case.k)
        for method in SPECULATING:
            plan = plan_for(method, case, p_hat, router, max(b.max_depth for b in blocks))
            outs = []
            for backend in ("cpu", "torch"):
                verifier = make_verifier(backend, plan)
                verifier.prepare(blocks, pad_to=case.T)
                outs.append(verifier(logits, resident))
            for name, x, y in zip(outs[0]._fields, *outs, strict=True):
                assert torch.equal(x, y), f"{method} {case}: {name}"


def test_a_set_smaller_than_top_k_is_named():
    from acceptmoe.kernels import VerifierInputError
    with pytest.raises(VerifierInputError, match="fewer than top_k=4"):
        topk_rows(torch.randn(1, 2, 8), 4, torch.tensor([[True, True, False, False, False, False, False, True]]))


def test_without_a_compiler_auto_is_torch_and_cpu_is_one_error_line(tmp_path):
    """A fresh cache and no compiler: `auto` falls back to the torch backend (and natural routing to
    `Router.natural`); asking for `cpu` names the problem and the fix."""
    code = """
import json, torch
from acceptmoe.kernels import make_verifier, natural, resolve_backend
from acceptmoe.methods import Fit, Router, Variant
router = Router.preset("softmax_topk", 2)
plan = Variant("acceptmoe").bind(Fit(router, 16, 2), commitment=(1.0, 0.8, 0.5))
out = {"auto": resolve_backend("auto", "cpu"), "natural": natural(router, torch.randn(3, 16))[0].shape[-1]}
try:
    make_verifier("cpu", plan)
except Exception as e:
    out["error"] = [type(e).__name__, str(e)]
print(json.dumps(out))
"""
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc"), "ACCEPTMOE_CACHE": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["auto"] == "torch" and out["natural"] == 2
    name, message = out["error"]
    assert name == "CompilerMissing" and "needs a C compiler" in message and "use backend 'torch'" in message


def test_the_cpu_backend_refuses_another_device():
    from acceptmoe.kernels import VerifierInputError
    plan = Variant("acceptmoe").bind(Fit(Router.preset("softmax_topk", 2), 16, 2), commitment=(1.0, 0.8, 0.5))
    with pytest.raises(VerifierInputError, match="runs on the CPU"):
        make_verifier("cpu", plan, "meta")


@pytest.mark.skipif(not available(), reason="no C compiler")
def test_natural_routing_through_the_library_is_the_routers_for_every_preset():
    """The engine's natural routing (`natural`: the library ranks each router's values) gives `Router.natural`'s
    ids and weights bit for bit for every preset, the grouped one with its selection bias."""
    gen = torch.Generator().manual_seed(11)
    logits, bias = torch.randn(2, 9, 32, generator=gen) * 2, torch.randn(32, generator=gen) * 0.3
    routers = [Router.preset(name, 4) for name in ROUTER_NAMES] + [
        Router.preset("softmax_topk", 4, renormalize=False),
        Router.preset("sigmoid_grouped", 4, groups=8, group_top=3, scale=2.5)]
    for router in routers:
        b = bias if router.biased else None
        for got, want in zip(natural(router, logits, b), router.natural(logits, bias=b), strict=True):
            assert torch.equal(got, want), router
