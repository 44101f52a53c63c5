"""Fixed-shape target passes (`acceptmoe.engine.graphs`): what a CUDA graph captures, run eagerly on CPU.

The capture and replay themselves need CUDA (`./reproduce.sh gpu-check`, check `graphs`); here the static
passes (device-scalar start, attention over the whole persistent cache) are checked against the eager
engine, which is the comparison that makes a replay trustworthy."""
from dataclasses import dataclass

import pytest
import torch

from acceptmoe.engine import Engine, TreeShape, load_engine
from acceptmoe.engine.engine import _verifier
from acceptmoe.engine.graphs import resolve_steps
from acceptmoe.errors import UserError
from acceptmoe.methods import METHODS, Variant

TINY = "models/tiny"
P_HAT = (1.0, 0.8, 0.64, 0.512, 0.41, 0.33)
PROMPTS = [[1, 17, 42, 99, 7, 300, 12], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]]


@pytest.fixture(scope="module")
def engines():
    return {mode: load_engine(TINY, steps=mode) for mode in ("eager", "static")}


def test_static_passes_equal_eager_for_every_method(engines):
    """Every method gives the same tokens. Attention over the masked whole cache sums in another order, so
    logits differ by float rounding (~1e-6) and a draft tree may differ where two candidates' scores are
    that close; where the trees agree, so do accepted paths and, to rounding, per-layer fields."""
    same_trees = 0
    for name in METHODS:
        variant = Variant(name).bind(engines["eager"].fit, commitment=P_HAT, b0=24)    # both engines' fit
        for ids in PROMPTS:
            static, eager = (engines[m].generate(ids, variant, 40, ignore_eos=True) for m in ("static", "eager"))
            assert static.tokens == eager.tokens, name
            for a, b in zip(static.trace.blocks, eager.trace.blocks):
                if a.parents != b.parents:
                    continue
                same_trees += 1
                assert a.path == b.path and (a.layers is None) == (b.layers is None)
                for field in (a.layers or {}):
                    assert a.layers[field] == pytest.approx(b.layers[field], rel=1e-3, abs=1e-5), (name, field)
    assert same_trees >= 20


def test_static_verify_pass_matches_eager_numerically(engines):
    """One tree-masked target pass, static against eager on the same inputs."""
    eng = engines["static"]
    gen = engines["eager"].generate(PROMPTS[1], Variant("standard-sd").bind(eng.fit), 12, ignore_eos=True)
    assert gen.tokens
    model = eng.model
    ids = torch.tensor(PROMPTS[1])
    logits = {}
    for mode, start in (("eager", 10), ("static", torch.tensor(10))):
        cache = model.new_cache(64)
        model.forward(ids[:10], torch.arange(10), cache, 0)
        mask = torch.ones(7, 7, dtype=torch.bool).tril()
        mask[4, 1] = mask[6, 3] = False
        logits[mode], _ = model.forward(ids[10:17], torch.tensor([10, 11, 12, 11, 12, 13, 12]), cache, start, mask=mask)
    assert torch.allclose(logits["static"], logits["eager"], atol=1e-4)
    assert torch.equal(logits["static"].argmax(-1), logits["eager"].argmax(-1))


def test_one_persistent_cache_regrows_and_ignores_stale_slots(engines):
    """Static passes reuse one cache: a longer generation regrows it (powers of two), and slots left by an
    earlier, longer generation are masked, so a generation's tokens do not depend on what ran before."""
    eng = engines["static"]
    variant = Variant("standard-sd").bind(eng.fit)
    short = eng.generate(PROMPTS[0], variant, 8, ignore_eos=True).tokens
    held = lambda: {name: c.max_len for name, c in eng.steps.caches.items()}  # noqa: E731
    before = held()
    assert set(before) == {"target", "draft"}
    long = eng.generate(PROMPTS[1], variant, 200, ignore_eos=True).tokens
    after = held()
    assert all(after[n] > before[n] and after[n] & (after[n] - 1) == 0 for n in after)
    assert eng.generate(PROMPTS[0], variant, 8, ignore_eos=True).tokens == short
    assert engines["eager"].generate(PROMPTS[1], variant, 200, ignore_eos=True).tokens == long


def test_trees_of_one_depth_share_a_verifier_that_never_replaces_a_shapes_buffers(engines):
    """Verifiers are cached per backend, plan and device, so two trees of one depth and different sizes bind
    equal plans and share one. Each block shape keeps its own step buffers for the verifier's life: after a
    generation with the other tree, the first tree's steps read the very tensors they read before (what a
    pass captured with the first tree replays from), and give the same tokens."""
    model, draft = engines["static"].model, engines["static"].draft
    wide, narrow = (Engine(model, draft, tree=TreeShape(3, 4, n), steps="static") for n in (12, 8))
    variant = Variant("acceptmoe").bind(wide.fit, commitment=P_HAT[:4])
    assert narrow.fit == wide.fit
    first = wide.generate(PROMPTS[0], variant, 8, ignore_eos=True)
    verifier = _verifier(wide.backend, variant, wide.device)
    held = verifier.buffers[(1, 12)]
    tensors = [(t, t.data_ptr()) for t in (held.alpha, held.num_tokens, held.valid)]
    narrow.generate(PROMPTS[0], variant, 8, ignore_eos=True)
    assert _verifier(narrow.backend, variant, narrow.device) is verifier and verifier.step.alpha.shape == (1, 8)
    again = wide.generate(PROMPTS[0], variant, 8, ignore_eos=True)
    assert verifier.buffers[(1, 12)] is held and verifier.step is held
    assert all(t is u and t.data_ptr() == ptr for (t, ptr), u in zip(tensors, (held.alpha, held.num_tokens,
                                                                               held.valid)))
    assert again.tokens == first.tokens
    assert [b.layers for b in again.trace.blocks] == [b.layers for b in first.trace.blocks]


def test_step_modes_resolve_and_refuse_what_cannot_run():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_steps("auto", cpu, "resident") == "eager"
    assert resolve_steps("auto", cuda, "resident") == "graphs"
    assert resolve_steps("auto", cuda, "offloaded") == "eager"
    assert resolve_steps("static", cpu, "offloaded") == "static"
    with pytest.raises(UserError, match="needs a CUDA device.*steps='static'"):
        resolve_steps("graphs", cpu, "resident")
    with pytest.raises(UserError, match="resident store"):
        resolve_steps("graphs", cuda, "offloaded")
    with pytest.raises(UserError, match="valid: auto, eager, static, graphs"):
        resolve_steps("fast", cpu, "resident")


def test_offloaded_store_runs_static_passes_with_the_same_counters():
    """The static passes are device-side for the offloaded store too (only the capture is refused)."""
    out = {}
    for mode in ("eager", "static"):
        eng = load_engine(TINY, store="offloaded", slots=32, steps=mode)
        gen = eng.generate(PROMPTS[1], Variant("acceptmoe").bind(eng.fit, commitment=P_HAT), 40, ignore_eos=True)
        out[mode] = gen.tokens, eng.counters()
    assert out["static"][0] == out["eager"][0]
    untimed = lambda c: {k: v for k, v in c.items() if k not in ("wait_s", "copy_s")}     # noqa: E731
    assert untimed(out["static"][1]) == untimed(out["eager"][1])


def test_static_passes_never_read_the_device(engines):
    """What a CUDA graph captures must not read a tensor on the host (`.item()`, `int()`, `.tolist()`,
    `nonzero`): count the aten ops of every static pass of a generation, per method. (The CPU-only
    branches, bincount and per-pair experts, have device twins in `store.group_counts` and
    `store.expert_path`.)"""
    from acceptmoe.experiments.bench.engine_speed import AtenCounter
    eng = engines["static"]
    seen: dict[str, int] = {}
    original = eng.steps.run

    @dataclass(frozen=True)
    class Watched:                                      # a step that counts the aten ops of the step it runs
        step: object

        def __call__(self, buf):
            with AtenCounter() as c:
                out = self.step(buf)
            for op, n in c.ops.items():
                seen[op] = seen.get(op, 0) + n
            return out

    eng.steps.run = lambda step, inputs: original(Watched(step), inputs)
    try:
        for name in METHODS:
            eng.generate(PROMPTS[0], Variant(name).bind(eng.fit, commitment=P_HAT, b0=24), 16, ignore_eos=True)
    finally:
        del eng.steps.run
    host_reads = {op: n for op, n in seen.items()
                  if op.split(".")[1] in ("_local_scalar_dense", "item", "nonzero", "unique", "masked_select")}
    assert seen and not host_reads, host_reads
    assert any(op.startswith("aten.index_copy") for op in seen)      # the static cache writes ran


def test_visible_slots_is_prefix_then_block_then_nothing():
    from acceptmoe.engine.kv import visible_slots
    block = torch.tensor([[True, False, False], [True, True, False], [True, False, True]])
    got = visible_slots(torch.arange(8), torch.tensor(2), block)
    want = torch.tensor([[1, 1, 1, 0, 0, 0, 0, 0],
                         [1, 1, 1, 1, 0, 0, 0, 0],
                         [1, 1, 1, 0, 1, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(got, want)
