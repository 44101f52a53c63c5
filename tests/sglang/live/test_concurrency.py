"""SGLang at concurrency: eight requests in flight through SGLang's own EAGLE-3 worker with the plugin, one server
per draft shape (the tiny preset's tree, 5 steps / top-10 / 64 tokens, and a chain, 3 steps / top-1 / 4 tokens,
as SGLang's adaptive speculation and MLCommons' interactive GPT-OSS scenario draft), the plans switched in place
through the plugin's settings file (`SGLangBackend`):

- Standard SD with every request in flight gives each request the tokens it gets alone (batch 1), and some
  verify pass held at least four requests;
- the batch-shared selector (`acceptmoe-shared`, whose sets depend on the other requests of the pass) restricts
  live, and every request's set in every dumped verify pass equals the reference recomputed on SGLang's trees
  and logits for that pass (`select_pass`), with Eq. 2 routing inside it; somewhere the other roots' credit
  changed a set, so the cross-request part is exercised, not only the per-request one.
"""
from types import SimpleNamespace

import pytest
import torch

from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.tree import TreeShape
from acceptmoe.methods import BlockInfo, CommitmentTable, Variant, route, select, select_pass

from common import ROOT, task_prompts
from ties import same_routing

SHAPES = {"tree": TreeShape(5, 10, 64), "chain": TreeShape(3, 1, 4)}
NEW = 12


def passes(folder):
    """The dumped verify passes (those with a tree mask), in order."""
    return [p for p in (torch.load(f) for f in sorted(folder.glob("*.pt"))) if "mask" in p]


@pytest.fixture(scope="module", params=list(SHAPES))
def served(request, tmp_path_factory):
    from acceptmoe.serving.sglang.engine import open_engine

    shape, dump = SHAPES[request.param], tmp_path_factory.mktemp(request.param)
    prompts = task_prompts(8)
    backend = open_engine(ROOT / "models" / "tiny" / "target", ROOT / "models" / "tiny" / "draft", device="cpu",
                          dtype="float32", tree=shape, dump=str(dump), skip_tokenizer_init=True,
                          max_running_requests=8, max_total_tokens=4096, log_level="error")
    try:
        sd = Variant("standard-sd").bind(backend.fit)
        alone = [backend.generate(p, sd, NEW, GenerationOptions(ignore_eos=True)) for p in prompts]
        together = backend.generate_many(prompts, sd, NEW, GenerationOptions(ignore_eos=True))
        records = [(b.parents, b.path) for g in together for b in g.trace.blocks]
        p_hat = CommitmentTable.from_records(records, max_depth=shape.num_steps).p_hat
        plan = Variant("acceptmoe-shared").bind(backend.fit, commitment=p_hat)
        shared = backend.generate_many(prompts, plan, NEW, GenerationOptions(ignore_eos=True))
        assert backend.starts == 1                                   # one server per shape, plans switched in place
    finally:
        backend.close()
    return SimpleNamespace(shape=shape, prompts=prompts, alone=alone, together=together, plan=plan, shared=shared,
                           sd_passes=passes(dump / sd.name), shared_passes=passes(dump / plan.name))


def test_standard_sd_at_concurrency_gives_each_request_its_tokens_alone(served):
    assert len(served.prompts) == 8
    assert [g.tokens for g in served.together] == [g.tokens for g in served.alone]
    assert all(len(g.tokens) == NEW for g in served.together)
    assert max(len(p["parents"]) for p in served.sd_passes) >= 4           # several requests in one pass
    assert all(len(b.parents) == served.shape.num_draft_tokens for g in served.together for b in g.trace.blocks)


def test_batch_shared_sets_equal_the_reference_on_each_live_pass(served):
    plan, n = served.plan, served.shape.num_draft_tokens
    assert all(len(g.tokens) == NEW for g in served.shared)
    checked, credited, widest = 0, 0, 0
    for p in served.shared_passes:
        blocks = [BlockInfo.from_parents(parents) for parents in p["parents"]]
        bs, widest = len(blocks), max(widest, len(blocks))
        for layer, rec in p["layers"].items():
            z = rec["logits"][: bs * n].view(bs, n, -1)
            for b, (block, want) in enumerate(zip(blocks, select_pass(plan, z, blocks), strict=True)):
                assert torch.equal(rec["eligible"][b], want.eligible), (layer, b)
                ids, weights = route(z[b], want.eligible, plan.router)                      # Eq. 2
                got = rec["topk_ids"][b * n:(b + 1) * n].long()
                assert same_routing(z[b], want.eligible, got, ids), (layer, b)
                torch.testing.assert_close(rec["topk_weights"][b * n:(b + 1) * n], weights)
                credited += not torch.equal(want.eligible, select(plan, z[b], block).eligible)
                checked += 1
    assert widest >= 4 and checked >= 4 * 4
    assert credited > 0                                          # the other requests' roots changed some sets
    sizes = [s for g in served.shared for b in g.trace.blocks for s in b.layers["set_size"]]
    assert sizes and max(sizes) < 128                            # the sets restrict
