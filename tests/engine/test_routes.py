"""Recorded routes (`engine.routes`): recording changes nothing a generation computes, the file holds every
target pass in order with what the store received, its counters, and (offloaded) a pool state that puts a
fresh store exactly where the run's was."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from acceptmoe.engine import load_engine
from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.routes import Routes
from acceptmoe.methods import Variant

P_HAT = (1.0, 0.8, 0.6, 0.4, 0.2, 0.1)
PROMPT = [5, 17, 300, 4, 9, 77]


def _plan(engine, method):
    return Variant(method).bind(engine.fit, commitment=P_HAT, b0=32)


@pytest.mark.parametrize("store,slots,method", [("resident", None, "standard-sd"), ("resident", None, "vanilla-ar"),
                                                ("offloaded", 40, "acceptmoe")])
def test_recording_changes_nothing_and_holds_every_pass(store, slots, method, tmp_path):
    plain = load_engine("models/tiny", store=store, slots=slots)
    recorded = load_engine("models/tiny", store=store, slots=slots)
    a = plain.generate(PROMPT, _plan(plain, method), 30, GenerationOptions(ignore_eos=True))
    recorded.reset_counters()
    b = recorded.generate(PROMPT, _plan(recorded, method), 30, GenerationOptions(ignore_eos=True, record_routes=True))
    assert a.routes is None and b.tokens == a.tokens and b.accept_lengths == a.accept_lengths
    assert [blk.path for blk in b.trace.blocks] == [blk.path for blk in a.trace.blocks]

    b.routes.save(tmp_path / "g.npz")
    routes = Routes.load(tmp_path / "g.npz")
    kinds = routes.kinds()
    step = "decode" if method == "vanilla-ar" else "verify"
    assert kinds == ["prefill"] + [step] * len(b.accept_lengths)
    passes = list(routes.passes())
    assert [p.output_tokens for p in passes] == [1] + b.accept_lengths
    assert passes[0].ids.shape[1] == len(PROMPT)
    L, k = len(recorded.model.store.layer_ids), recorded.model.config.moe.top_k
    assert all(p.ids.shape[0] == L and p.ids.shape[2] == k for p in passes)
    assert all(np.isfinite(p.expert_s) and p.expert_s > 0 for p in passes)      # CPU: measured per pass
    # the counters of the generation, per layer, sum to the engine's
    totals = recorded.counters()
    for name in ("hits", "misses", "loads"):
        assert sum(c[name] for c in routes.meta["counters"].values()) == totals[name]
    # used experts per pass and layer, from the ids, equal the store's events (hits + misses)
    used = sum(int(torch.unique(p.ids[l]).numel()) for p in passes for l in range(L))
    assert used == totals["hits"] + totals["misses"]
    assert (routes.pool() is None) == (store == "resident")
    if store == "offloaded":
        # residency at pass start: every used expert that was resident is a hit
        hits = sum(int(p.resident[l][torch.unique(p.ids[l])].sum()) for p in passes for l in range(L))
        assert hits == totals["hits"]


def test_routes_of_static_passes_equal_eager():
    """Same passes, same experts; the gate weights (stored in fp16) agree to rounding: a static pass attends over
    every slot under a mask, so its reductions run in another order than the eager pass's."""
    eager = load_engine("models/tiny", steps="eager")
    static = load_engine("models/tiny", steps="static")
    outs = [e.generate(PROMPT, _plan(e, "acceptmoe"), 20, GenerationOptions(ignore_eos=True, record_routes=True)).routes
            for e in (eager, static)]
    assert outs[0].kinds() == outs[1].kinds()
    assert np.array_equal(outs[0].arrays["ids"], outs[1].arrays["ids"])
    np.testing.assert_allclose(outs[0].arrays["weights"].astype(np.float32),
                               outs[1].arrays["weights"].astype(np.float32), rtol=2e-3, atol=1e-6)


def test_restored_pool_replays_the_same_loads_and_hits():
    """A store put into a recorded pool state loads, hits and evicts exactly as the store it came from."""
    engine = load_engine("models/tiny", store="offloaded", slots=24)
    plan = _plan(engine, "standard-sd")
    engine.generate(PROMPT, plan, 20, GenerationOptions(ignore_eos=True))          # a warm, partly full pool
    engine.reset_counters()
    gen = engine.generate(PROMPT[::-1], plan, 20, GenerationOptions(ignore_eos=True, record_routes=True))
    fresh = load_engine("models/tiny", store="offloaded", slots=24).model.store
    fresh.restore_pool(gen.routes.pool())
    x = torch.zeros(1, engine.model.config.hidden_size)
    for p in gen.routes.passes():
        for i, layer in enumerate(fresh.layer_ids):
            fresh.run(layer, x.expand(p.ids.shape[1], -1).contiguous(), p.ids[i], p.weights[i])
    mine = fresh.stats()["layers"]
    for layer in fresh.layer_ids:
        want = gen.routes.meta["counters"][str(layer)]
        assert (mine[layer]["hits"], mine[layer]["misses"], mine[layer]["loads"]) == \
               (want["hits"], want["misses"], want["loads"])
    assert sum(want["loads"] for want in gen.routes.meta["counters"].values()) > 0     # the case is not trivial
