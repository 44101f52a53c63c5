"""Batched verification (`Engine.generate_batch`, `MoEModel.forward_batch`) on the tiny world: a method whose sets
one request determines gives every request its tokens, trace and routes alone; the batch-shared selector's sets
in a batched pass are the reference's `select_pass` over every block of that pass, routed by Eq. 2, and differ
from a request's own somewhere; a one-prompt batch is `generate`; Vanilla AR is refused."""
from __future__ import annotations

import pytest
import torch

from acceptmoe.engine import TreeShape, load_engine
from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.restriction import Restriction
from acceptmoe.errors import UserError
from acceptmoe.kernels import Verifier
from acceptmoe.methods import Variant, route, select, select_pass
from acceptmoe.paths import TINY

SHAPES = {"tree": TreeShape(3, 4, 12), "chain": TreeShape(3, 1, 4)}
P_HAT = (1.0, 0.7, 0.4, 0.2)
PROMPTS = [[5, 17, 300], [3, 9, 27, 81, 115, 89, 11], list(range(40, 60)), [900, 12], [7] * 9, [250, 251, 252]]
NEW = 24


@pytest.fixture(scope="module", params=list(SHAPES))
def engine(request):
    torch.set_num_threads(1)
    return load_engine(TINY, tree=SHAPES[request.param])


def _plan(engine, method):
    return Variant(method).bind(engine.fit, commitment=P_HAT, b0=12)


def _set_sizes(gen):
    return [b.layers["set_size"] for b in gen.trace.blocks]


@pytest.mark.parametrize("method", ["standard-sd", "acceptmoe", "count-b"])
def test_a_per_request_method_batched_is_each_request_alone(engine, method):
    plan = _plan(engine, method)
    alone = [engine.generate(p, plan, NEW, GenerationOptions(record_routes=True)) for p in PROMPTS]
    together = engine.generate_batch(PROMPTS, plan, NEW, GenerationOptions(record_routes=True))
    assert [g.tokens for g in together] == [g.tokens for g in alone]
    assert [g.accept_lengths for g in together] == [g.accept_lengths for g in alone]
    assert [_set_sizes(g) for g in together] == [_set_sizes(g) for g in alone]
    for a, b in zip(alone, together, strict=True):                 # what each request sent the experts, pass by pass
        va = [p.ids for p in a.routes.passes() if p.kind == "verify"]
        vb = [p.ids for p in b.routes.passes() if p.kind == "verify"]
        assert len(va) == len(vb) and all(torch.equal(x, y) for x, y in zip(va, vb, strict=True))


def test_a_one_prompt_batch_is_generate(engine):
    for method in ("acceptmoe-shared", "standard-sd"):
        plan = _plan(engine, method)
        (one,) = engine.generate_batch(PROMPTS[1:2], plan, NEW)
        alone = engine.generate(PROMPTS[1], plan, NEW)
        assert one.tokens == alone.tokens and _set_sizes(one) == _set_sizes(alone)


def test_batch_shared_sets_are_the_reference_over_the_whole_pass(engine, monkeypatch):
    plan, seen, prepared = _plan(engine, "acceptmoe-shared"), [], []
    real_route, real_prepare = Restriction.route, Verifier.prepare

    def spy_prepare(self, blocks, *args, **kwargs):   # spies read what the real calls got and gave; change nothing
        prepared.append(list(blocks))
        return real_prepare(self, blocks, *args, **kwargs)

    def spy(self, layer, logits):
        ids, weights = real_route(self, layer, logits)
        seen.append((self.blocks, prepared[-1], logits.clone(), ids.clone(), weights.clone()))
        return ids, weights

    monkeypatch.setattr(Restriction, "__call__", spy)                  # what MoEModel.forward calls
    monkeypatch.setattr(Verifier, "prepare", spy_prepare)
    gens = engine.generate_batch(PROMPTS, plan, NEW, GenerationOptions(ignore_eos=True))
    monkeypatch.undo()
    assert all(len(g.tokens) >= 1 for g in gens)
    credited = widest = 0
    for B, blocks, logits, ids, weights in seen:
        widest = max(widest, B)
        z = logits.view(B, -1, logits.shape[-1])
        T = z.shape[1]
        for b, want in enumerate(select_pass(plan, z, blocks)):
            got_ids, got_w = route(z[b], want.eligible, plan.router)                  # Eq. 2 inside S
            assert torch.equal(ids[b * T:(b + 1) * T], got_ids)
            torch.testing.assert_close(weights[b * T:(b + 1) * T], got_w)
            credited += not torch.equal(want.eligible, select(plan, z[b], blocks[b]).eligible)
    assert widest == len(PROMPTS) and credited > 0    # every request in one pass; the others' roots changed sets
    alone = [engine.generate(p, plan, NEW, GenerationOptions(ignore_eos=True)) for p in PROMPTS]
    assert [_set_sizes(g) for g in gens] != [_set_sizes(g) for g in alone]


def test_vanilla_ar_has_no_verify_pass_to_batch(engine):
    with pytest.raises(UserError, match="generate_many"):
        engine.generate_batch(PROMPTS, Variant("vanilla-ar").bind(engine.fit), NEW)

