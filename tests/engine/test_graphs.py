"""Fixed-shape target passes (`acceptmoe.engine.graphs`): what a CUDA graph captures, run eagerly on CPU.

The capture and replay themselves need CUDA (`./reproduce.sh gpu-check`, check `graphs`); here the static
passes (device-scalar start, attention over the cache bucket the step holds) are checked against the eager
engine, which is the comparison that makes a replay trustworthy, and the dispatch a replay runs (key lookup,
buffer copies) is run as graphs mode runs it."""
from dataclasses import dataclass

import pytest
import torch

from acceptmoe.costs.verify import load_profile
from acceptmoe.engine import Engine, TreeShape, load_engine
from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.eagle3 import DraftExtend, DraftLevel
from acceptmoe.engine.engine import _verifier
from acceptmoe.engine.graphs import StepGraphs, label, resolve_steps
from acceptmoe.engine.kv import BUCKET_FLOOR
from acceptmoe.engine.model import MoEModel
from acceptmoe.engine.passes import TargetPass
from acceptmoe.errors import UserError
from acceptmoe.methods import METHODS, Variant

from fixtures import tiny_gpt_oss, tiny_qwen3_moe

IGNORE_EOS = GenerationOptions(ignore_eos=True)        # every generation runs to its max_new_tokens

TINY = "models/tiny"
P_HAT = (1.0, 0.8, 0.64, 0.512, 0.41, 0.33)
COST = load_profile()        # the admitting methods' verify cost (the committed tiny-world CPU profile)
PROMPTS = [[1, 17, 42, 99, 7, 300, 12], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]]
LONG = [3 + (37 * i) % 1000 for i in range(180)]    # 180 + 90 tokens: passes cross the bucket at 256


@pytest.fixture(scope="module")
def engines():
    return {mode: load_engine(TINY, steps=mode) for mode in ("eager", "static")}


def test_static_passes_equal_eager_for_every_method(engines):
    """Every method gives the same tokens. Attention over the masked cache bucket sums in another order, so
    logits differ by float rounding (~1e-6) and a draft tree may differ where two candidates' scores are
    that close; where the trees agree, so do accepted paths and, to rounding, per-layer fields."""
    same_trees = 0
    for name in METHODS:
        variant = Variant(name).bind(engines["eager"].fit, commitment=P_HAT, b0=24, cost=COST)    # both engines' fit
        for ids in PROMPTS:
            static, eager = (engines[m].generate(ids, variant, 40, IGNORE_EOS) for m in ("static", "eager"))
            assert static.tokens == eager.tokens, name
            for a, b in zip(static.trace.blocks, eager.trace.blocks, strict=False):
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
    gen = engines["eager"].generate(PROMPTS[1], Variant("standard-sd").bind(eng.fit), 12, IGNORE_EOS)
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
    short = eng.generate(PROMPTS[0], variant, 8, IGNORE_EOS).tokens
    held = lambda: {name: c.max_len for name, c in eng.steps.caches.items()}  # noqa: E731
    before = held()
    assert set(before) == {"target", "draft"}
    long = eng.generate(PROMPTS[1], variant, 200, IGNORE_EOS).tokens
    after = held()
    assert all(after[n] > before[n] and after[n] & (after[n] - 1) == 0 for n in after)
    held = list(eng.steps.caches.values())
    kept = [key[0].cache for key in eng.steps.entries]
    assert kept and all(any(k is c or k in c._prefixes.values() for c in held) for k in kept)   # none dropped
    assert eng.generate(PROMPTS[0], variant, 8, IGNORE_EOS).tokens == short
    assert engines["eager"].generate(PROMPTS[1], variant, 200, IGNORE_EOS).tokens == long


def test_trees_of_one_depth_share_a_verifier_that_never_replaces_a_shapes_buffers(engines):
    """Verifiers are cached per backend, plan and device, so two trees of one depth and different sizes bind
    equal plans and share one. Each block shape keeps its own step buffers for the verifier's life: after a
    generation with the other tree, the first tree's steps read the very tensors they read before (what a
    pass captured with the first tree replays from), and give the same tokens."""
    model, draft = engines["static"].model, engines["static"].draft
    wide, narrow = (Engine(model, draft, tree=TreeShape(3, 4, n), steps="static") for n in (12, 8))
    variant = Variant("acceptmoe").bind(wide.fit, commitment=P_HAT[:4])
    assert narrow.fit == wide.fit
    first = wide.generate(PROMPTS[0], variant, 8, IGNORE_EOS)
    verifier = _verifier(wide.backend, variant, wide.device)
    held = verifier.buffers[(1, 12)]
    tensors = [(t, t.data_ptr()) for t in (held.alpha, held.num_tokens, held.valid)]
    narrow.generate(PROMPTS[0], variant, 8, IGNORE_EOS)
    assert _verifier(narrow.backend, variant, narrow.device) is verifier and verifier.step.alpha.shape == (1, 8)
    again = wide.generate(PROMPTS[0], variant, 8, IGNORE_EOS)
    assert verifier.buffers[(1, 12)] is held and verifier.step is held
    assert all(t is u and t.data_ptr() == ptr for (t, ptr), u in zip(tensors, (held.alpha, held.num_tokens,
                                                                               held.valid), strict=True))
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
        gen = eng.generate(PROMPTS[1], Variant("acceptmoe").bind(eng.fit, commitment=P_HAT), 40, IGNORE_EOS)
        out[mode] = gen.tokens, eng.counters()
    assert out["static"][0] == out["eager"][0]
    untimed = lambda c: {k: v for k, v in c.items() if k not in ("wait_s", "copy_s")}     # noqa: E731
    assert untimed(out["static"][1]) == untimed(out["eager"][1])


def test_static_passes_never_read_the_device(engines):
    """What a CUDA graph captures must not read a tensor on the host (`.item()`, `int()`, `.tolist()`,
    `nonzero`): count the aten ops of every static pass of a generation, per method. (The CPU-only
    branches, bincount and per-pair experts, have device twins in `store.group_counts` and
    `store.expert_path`.)"""
    from acceptmoe.tools.bench.engine_speed import AtenCounter
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
            eng.generate(PROMPTS[0], Variant(name).bind(eng.fit, commitment=P_HAT, b0=24, cost=COST), 16, IGNORE_EOS)
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


def test_static_passes_equal_eager_across_a_bucket_boundary(engines):
    """A generation whose context grows from one cache bucket into the next (256 -> 512 slots) gives eager's
    tokens under every method, through target decode and verify passes and draft levels and extensions held
    at both buckets."""
    eng = engines["static"]
    for name in METHODS:
        variant = Variant(name).bind(eng.fit, commitment=P_HAT, b0=24, cost=COST)
        static, eager = (engines[m].generate(LONG, variant, 90, IGNORE_EOS) for m in ("static", "eager"))
        assert static.tokens == eager.tokens, name
    held = {(type(key[0]).__name__, key[0].cache.max_len) for key in eng.steps.entries
            if isinstance(key[0], (TargetPass, DraftLevel, DraftExtend))}
    for kind in ("TargetPass", "DraftLevel", "DraftExtend"):
        assert {(kind, BUCKET_FLOOR), (kind, 2 * BUCKET_FLOOR)} <= held, (kind, held)


def test_keys_with_different_buckets_are_distinct(engines):
    """The bucket is part of the key: a step over another bucket is another key (its own buffers and graph);
    within a bucket the step is the same key. Prefixes are views: a static pass writes the cache itself."""
    model, draft = engines["static"].model, engines["static"].draft
    cache = model.new_cache(1024)
    a, b, c = (TargetPass(model, cache.upto(n)) for n in (100, 300, 400))
    assert (a.cache.max_len, b.cache.max_len, cache.upto(1000) is cache) == (256, 512, True)
    assert a != b and b == c and hash(b) == hash(c)
    dc = draft.new_cache(1024)
    assert DraftLevel(draft, dc.upto(250), 2) != DraftLevel(draft, dc.upto(260), 2)
    assert DraftExtend(draft, dc.upto(257)) == DraftExtend(draft, dc.upto(512))
    steps = StepGraphs("cpu", "static", state=(model.store.tally,))
    for start in (100, 300, 400):
        inputs = {"ids": torch.tensor([5]), "positions": torch.tensor([start]), "start": start}
        steps.run(TargetPass(model, cache.upto(start + 1)), inputs)
    assert sorted(key[0].cache.max_len for key in steps.entries) == [256, 512]
    assert cache.k[:, :, 300].abs().sum() > 0 and cache.pos[400] == 400       # written through the 512 view


def test_a_dispatch_renders_no_step_as_text_and_a_fallen_back_key_runs_static(engines, monkeypatch):
    """What runs per pass never turns the key into text (the step's repr prints the whole model): with the
    model's repr raising, static passes and graphs mode's dispatch run many times, and a key whose capture
    failed (what `_capture` records through `fall_back`) routes to the static pass, with the eager logits."""
    model = engines["static"].model
    inputs = {"ids": torch.tensor([5, 17, 300]), "positions": torch.arange(3), "start": 0}
    want, _ = model.forward(inputs["ids"], inputs["positions"], model.new_cache(64), 0)

    def no_text(self):
        raise AssertionError("a step was rendered as text")
    for mode in ("static", "graphs"):                    # graphs: dispatch, then the fallen-back key's route
        steps = StepGraphs("cpu", mode, state=(model.store.tally,))
        cache = steps.cache("target", 40, model.new_cache)
        key, entry = steps.dispatch(TargetPass(model, cache.upto(3)), inputs)
        if mode == "graphs":
            steps.fall_back(key, entry, "RuntimeError: capture refused")
        monkeypatch.setattr(MoEModel, "__repr__", no_text)
        for _ in range(50):
            logits = steps.run(TargetPass(model, cache.upto(3)), inputs)[0]        # a fresh step per pass
            assert torch.allclose(logits, want, atol=1e-5)
        monkeypatch.undo()
        assert len(steps.entries) == 1 and steps.replays == 0
    assert steps.describe()["fallbacks"] == {label(key): "RuntimeError: capture refused"}
    assert label(key).startswith("TargetPass(model=MoEModel, cache=KVCache[64], verifier=None")


@pytest.mark.parametrize("arch", ["qwen3_moe", "gpt_oss"])
def test_a_static_pass_over_its_bucket_equals_eager_with_stale_slots_after_it(tmp_path, arch):
    """A tree pass at start 300 over a 1024-slot persistent cache reads its 512-slot bucket: the logits are
    eager's, with every slot past the block holding stale keys and positions (GPT-OSS: sliding windows over
    the bucket's positions, sinks)."""
    {"qwen3_moe": tiny_qwen3_moe, "gpt_oss": tiny_gpt_oss}[arch](tmp_path)
    model = MoEModel.from_pretrained(tmp_path)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (307,), generator=g)
    eager, held = model.new_cache(320), model.new_cache(1024)
    held.k.normal_(generator=g), held.v.normal_(generator=g), held.pos.random_(0, 1000, generator=g)
    for cache in (eager, held):
        model.forward(ids[:300], torch.arange(300), cache, 0)
    mask = torch.ones(7, 7, dtype=torch.bool).tril()
    mask[4, 1] = mask[6, 3] = False
    positions = torch.tensor([300, 301, 302, 301, 302, 303, 302])
    want, _ = model.forward(ids[300:], positions, eager, 300, mask=mask)
    view = held.upto(307)
    got, _ = model.forward(ids[300:], positions, view, torch.tensor(300), mask=mask)
    assert view.max_len == 2 * BUCKET_FLOOR and torch.allclose(got, want, atol=1e-5)
    assert torch.equal(held.pos[300:307], positions)                    # written through the view
