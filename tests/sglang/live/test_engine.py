"""A live CPU `sglang.Engine` on the tiny target with the plugin installed through its entry point.

- restricting test switch: every plain decode pass's tokens form one block; the hooks run in the scheduler
  process, sets equal `acceptmoe.methods.select`, routed ids lie in the set and weights follow Eq. 2;
- no method: the hooks only record, and greedy tokens equal plain SGLang (plugin not loaded, run through the
  `EngineBackend` of `open_engine`) and transformers.
"""
import os

import pytest
import torch

from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.methods import BlockInfo, Fit, Router, Variant, route, select
from acceptmoe.serving.sglang.runtime import read_steps

from common import CPU_ARGS, PROMPTS, TARGET, engine, greedy

NEW = 8


@pytest.fixture(scope="module")
def restricted(tmp_path_factory):
    d = tmp_path_factory.mktemp("restricted")
    with engine(ACCEPTMOE_METHOD="count-b", ACCEPTMOE_BUDGET="8", ACCEPTMOE_FORCE_DECODE="1",
                ACCEPTMOE_DUMP=str(d / "dump"), ACCEPTMOE_TRACE=str(d / "steps.jsonl")) as eng:
        tokens = greedy(eng, max_new_tokens=NEW)
    return d, tokens


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("recorded")
    with engine(ACCEPTMOE_FORCE_DECODE="1", ACCEPTMOE_TRACE=str(d / "steps.jsonl")) as eng:
        tokens = greedy(eng, max_new_tokens=NEW)
    return d, tokens


@pytest.fixture(scope="module")
def plain(monkeypatch_module):
    """Plain SGLang (the whitelist excludes the acceptmoe plugin), driven through `open_engine`'s backend."""
    real = torch.cuda.is_available
    torch.cuda.is_available = lambda: True       # only the import guard asks; the engine is told device="cpu"
    try:
        from acceptmoe.serving.sglang.engine import open_engine
    finally:
        torch.cuda.is_available = real
    monkeypatch_module.setenv("SGLANG_PLUGINS", "no-such-plugin")
    backend = open_engine(TARGET, TARGET.parent / "draft", dtype=torch.float32, **CPU_ARGS)
    try:
        gens = backend.generate_many(PROMPTS, Variant("vanilla-ar").bind(backend.fit), max_new_tokens=NEW,
                                     options=GenerationOptions(ignore_eos=True))
    finally:
        backend.close()
    assert all(len(g.tokens) == NEW and g.stop_reason == "length" for g in gens)
    assert all(g.accept_lengths == [1] * (NEW - 1) and len(g.step_times) == NEW - 1 for g in gens)  # one per step
    assert backend.describe()["engine"] == "sglang" and backend.describe()["version"] == "0.5.23"
    return [g.tokens for g in gens]


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_hooks_restrict_decode_in_the_scheduler_process(restricted):
    d, _ = restricted
    passes = [torch.load(p) for p in sorted((d / "dump").glob("*.pt"))]
    layers = 4
    assert len(passes) == NEW - 1                             # every decode pass after prefill
    assert all(sorted(p["layers"]) == list(range(layers)) for p in passes)       # every MoE layer
    router = Router.preset("softmax_topk", top_k=8, renormalize=True)
    plan = Variant("count-b", budget=8).bind(Fit(router, 128, max_depth=1))     # a star block: depth 1
    for x in (layer for p in passes for layer in p["layers"].values()):
        assert passes[0]["pid"] != os.getpid()                # written by SGLang's scheduler subprocess
        logits, eligible = x["logits"], x["eligible"][0]      # one star block over the pass's tokens
        assert logits.shape[0] == len(PROMPTS)                # decode rows only: prefill never restricted
        block = BlockInfo.from_parents([-1] + [0] * (logits.shape[0] - 1))
        assert torch.equal(eligible, select(plan, logits, block).eligible)
        assert int(eligible.sum()) == 8
        assert eligible[x["topk_ids"].long()].all()          # every routed id in S
        ids, weights = route(logits, eligible, router)        # Eq. 2
        assert torch.equal(x["topk_ids"].long(), ids)
        torch.testing.assert_close(x["topk_weights"], weights)
    steps = read_steps(d / "steps.jsonl")["0"]
    assert len(steps) == NEW - 1
    for block in steps:
        assert block.layers["set_size"] == [8] * layers
        assert all(r <= 8 for r in block.layers["routed_union"])
        assert all(n >= r for n, r in zip(block.layers["natural_union"], block.layers["routed_union"], strict=True))


def test_no_method_outputs_equal_plain_sglang_and_transformers(recorded, plain):
    d, tokens = recorded
    assert tokens == plain
    steps = read_steps(d / "steps.jsonl")["0"]                # the hooks ran (recording only)
    assert len(steps) == NEW - 1 and all(b.layers["set_size"] == [128] * 4 for b in steps)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32).eval()
    for prompt, got in zip(PROMPTS, tokens, strict=False):
        ids = torch.tensor([prompt])
        with torch.no_grad():
            for _ in range(NEW):
                ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], 1)
        assert ids[0, len(prompt):].tolist() == got


def test_restriction_changes_the_tokens(restricted, plain):
    _, tokens = restricted
    assert tokens != plain                                    # count-b with B = top_k on 4 tokens restricts
