"""SGLang's own EAGLE-3 loop on a CPU with the tiny world: its scheduler, `EAGLEWorkerV2`, draft passes, tree
building, TARGET_VERIFY pass and greedy acceptance, unmodified (the CPU ops and the tree-masked backend come
from `acceptmoe.serving.sglang.cpu`), with the paper's tree (5 steps, top-10, 64 tokens), fp32, on prompts of the
four tiny tasks (their test splits' first examples, chat-formatted), all requests in flight at once:

- Standard SD in SGLang = plain SGLang decoding = the native engine's Standard SD, token for token (20 prompts);
- the trees the plugin recovers from real verify passes are the trees SGLang verified (its tree mask lets each
  node see exactly the recovered ancestors), and the plugin's records agree with SGLang's own accept counts;
- every restricting method's sets equal `acceptmoe.methods.select` on SGLang's trees and logits, and routing
  stays inside them (Eq. 2): live for AcceptMoE and Count-B, and for every restricting method through the
  plugin's runtime on the real verify passes recorded live.

- the native engine builds SGLang's trees and accepts the same paths (its drafter follows SGLang's draft rule).
"""
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.layers.moe.topk import TopKConfig, select_experts

from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.tree import TreeShape, ancestor_mask
from acceptmoe.methods import (
    METHODS,
    BlockInfo,
    CommitmentTable,
    Fit,
    Router,
    Variant,
    route,
    select,
    select_pass,
    verifier_methods,
)
from acceptmoe.serving.sglang.config import load_config
from acceptmoe.serving.sglang.runtime import Limits, Runtime, output_lengths, read_steps

from common import ROOT, engine, task_prompts
from ties import same_routing

TREE = TreeShape(5, 10, 64)
NEW = 16
ROUTER = Router.preset("softmax_topk", top_k=8, renormalize=True)
EAGLE = dict(speculative_algorithm="EAGLE3", speculative_draft_model_path=str(ROOT / "models" / "tiny" / "draft"),
             speculative_num_steps=TREE.num_steps, speculative_eagle_topk=TREE.topk,
             speculative_num_draft_tokens=TREE.num_draft_tokens)
SERVE = dict(max_running_requests=24, max_total_tokens=8192)
BUDGET = 24


@pytest.fixture(scope="module")
def prompts():
    return task_prompts(20)


def run(prompts, spec: bool, **plugin_env):
    with engine(server={**(EAGLE if spec else {}), **SERVE}, **plugin_env) as eng:
        outs = eng.generate(input_ids=prompts, sampling_params={"temperature": 0.0, "max_new_tokens": NEW,
                                                                "ignore_eos": True})
    return [list(o["output_ids"]) for o in outs], [o["meta_info"] for o in outs]


def passes(folder):
    return [torch.load(p) for p in sorted(folder.glob("*.pt"))]


@pytest.fixture(scope="module")
def plain(prompts):
    return run(prompts, spec=False, SGLANG_PLUGINS="no-such-plugin")[0]


@pytest.fixture(scope="module")
def standard(prompts, tmp_path_factory):
    d = tmp_path_factory.mktemp("standard")
    tokens, meta = run(prompts, spec=True, ACCEPTMOE_METHOD="standard-sd", ACCEPTMOE_TRACE=str(d / "steps.jsonl"),
                       ACCEPTMOE_DUMP=str(d / "dump"))
    return SimpleNamespace(tokens=tokens, meta=meta, steps=read_steps(d / "steps.jsonl"), passes=passes(d / "dump"))


@pytest.fixture(scope="module")
def native(prompts):
    from acceptmoe.engine.engine import load_engine

    eng = load_engine(ROOT / "models" / "tiny", device="cpu", tree=TREE)
    plan = Variant("standard-sd").bind(eng.fit)
    return [eng.generate(p, plan, NEW, GenerationOptions(ignore_eos=True)) for p in prompts]


@pytest.fixture(scope="module")
def p_hat(standard):
    """The commitment table calibrated on SGLang's own Standard SD records."""
    blocks = [b for rid in standard.steps for b in standard.steps[rid]]
    return CommitmentTable.from_records([(b.parents, b.path) for b in blocks], max_depth=TREE.num_steps).p_hat


@pytest.fixture(scope="module", params=[("acceptmoe", None), ("count-b", BUDGET)], ids=["acceptmoe", "count-b"])
def restricted(request, prompts, p_hat, tmp_path_factory):
    method, budget = request.param
    d = tmp_path_factory.mktemp(method)
    env = dict(ACCEPTMOE_METHOD=method, ACCEPTMOE_DUMP=str(d / "dump"), ACCEPTMOE_TRACE=str(d / "steps.jsonl"))
    env.update(ACCEPTMOE_BUDGET=str(budget)) if budget else env.update(ACCEPTMOE_P_HAT=",".join(map(repr, p_hat)))
    tokens, meta = run(prompts[:6], spec=True, **env)
    plan = Variant(method, budget=budget).bind(Fit(ROUTER, 128, TREE.num_steps), commitment=p_hat)
    return SimpleNamespace(plan=plan, tokens=tokens, meta=meta, passes=passes(d / "dump"),
                           steps=read_steps(d / "steps.jsonl"))


def test_standard_sd_in_sglang_equals_plain_decoding_and_the_native_engine(standard, plain, native):
    assert len(standard.tokens) == 20 and all(len(t) == NEW for t in standard.tokens)
    assert standard.tokens == plain
    assert standard.tokens == [g.tokens for g in native]
    assert all(m["spec_verify_ct"] > 0 for m in standard.meta)              # SGLang's EAGLE-3 loop ran


def test_recovered_trees_are_the_trees_sglang_verified(standard):
    verify = [p for p in standard.passes if "mask" in p]
    assert verify and all(sorted(p["layers"]) == [0, 1, 2, 3] for p in verify)
    assert max(p["mask"].shape[0] for p in verify) > 1                     # several requests in one pass
    checked = 0
    for p in verify:
        for b, parents in enumerate(p["parents"]):
            assert len(parents) == TREE.num_draft_tokens
            block = BlockInfo.from_parents(parents)                       # well formed, topological
            assert block.max_depth <= TREE.num_steps
            assert torch.equal(ancestor_mask(torch.tensor(parents)), p["mask"][b])   # what attention saw
            checked += 1
    assert checked >= 20


def test_records_agree_with_sglang_accept_counts(standard):
    for meta in standard.meta:
        blocks = standard.steps[str(meta["id"])]
        assert len(blocks) == meta["spec_verify_ct"]
        lengths = [b.accept_length for b in blocks]
        assert sum(output_lengths(lengths, NEW)) == NEW - 1                 # the first token comes from prefill
        for b in blocks:
            assert b.path[0] == 0 and BlockInfo.from_parents(b.parents).path_to(b.path[-1]) == b.path


def test_native_engine_builds_sglang_trees_and_accepts_the_same_paths(standard, native):
    """The native drafter follows SGLang's draft rule (beam slots), so on the same prompts both engines verify
    the same trees step by step and accept the same paths, hence the same accept lengths."""
    steps = 0
    for meta, gen in zip(standard.meta, native, strict=False):
        ours = [(b.parents, b.path) for b in standard.steps[str(meta["id"])]]
        theirs = [(b.parents, b.path) for b in gen.trace.blocks]
        assert ours == theirs, meta["id"]
        steps += len(ours)
    assert steps >= 20 * 3


def test_live_restricted_sets_equal_select_on_sglang_trees(restricted):
    n = TREE.num_draft_tokens
    checked = 0
    for p in (p for p in restricted.passes if "mask" in p):
        for layer, rec in p["layers"].items():
            z = rec["logits"]
            for b, parents in enumerate(p["parents"]):
                want = select(restricted.plan, z[b * n:(b + 1) * n], BlockInfo.from_parents(parents))
                assert torch.equal(rec["eligible"][b], want.eligible), (layer, b)
                ids = rec["topk_ids"][b * n:(b + 1) * n].long()
                ref_ids, ref_w = route(z[b * n:(b + 1) * n], want.eligible, ROUTER)        # Eq. 2
                assert same_routing(z[b * n:(b + 1) * n], want.eligible, ids, ref_ids), (layer, b)
                torch.testing.assert_close(rec["topk_weights"][b * n:(b + 1) * n], ref_w)
                checked += 1
    assert checked >= 4 * 6
    sizes = [s for blocks in restricted.steps.values() for b in blocks for s in b.layers["set_size"]]
    assert sizes and max(sizes) < 128                                         # the sets restrict


def test_restricted_tokens_and_sets_equal_the_native_engine(restricted, prompts, p_hat):
    """Same trees, same sets, same routing: a restricting method's tokens and per-layer set sizes in SGLang
    equal the native engine's on the same prompts with the same plan."""
    from acceptmoe.engine.engine import load_engine

    eng = load_engine(ROOT / "models" / "tiny", device="cpu", tree=TREE)
    plan = restricted.plan.variant.bind(eng.fit, commitment=p_hat)
    gens = [eng.generate(p, plan, NEW, GenerationOptions(ignore_eos=True)) for p in prompts[:6]]
    assert restricted.tokens == [g.tokens for g in gens]
    for meta, gen in zip(restricted.meta, gens, strict=False):
        ours = restricted.steps[str(meta["id"])]
        assert [b.layers["set_size"] for b in ours] == [b.layers["set_size"] for b in gen.trace.blocks]


@pytest.mark.parametrize("method", [m for m in verifier_methods() if METHODS[m].restricts])   # admitting: native only
def test_every_restricting_method_through_the_runtime_on_real_passes(method, standard, p_hat):
    """The plugin's runtime, fed the verify passes SGLang ran live (their linked-list trees and router logits),
    gives `select`'s sets and Eq. 2 routing for every restricting method."""
    n = TREE.num_draft_tokens
    budget = BUDGET if METHODS[method].needs_budget else None
    env = {"ACCEPTMOE_METHOD": method, "ACCEPTMOE_P_HAT": ",".join(map(repr, p_hat))}
    if budget:
        env["ACCEPTMOE_BUDGET"] = str(budget)
    cfg = load_config(env)
    plan = cfg.bind(Fit(ROUTER, 128, TREE.num_steps))
    checked = 0
    for p in [p for p in standard.passes if "mask" in p][:6]:
        runtime = Runtime(cfg)
        runtime.start(Limits(requests=24, depth=TREE.num_steps))
        bs = p["next_token"].shape[0]
        runtime.begin_verify(SimpleNamespace(draft_token_num=n, retrieve_next_token=p["next_token"],
                                             retrieve_next_sibling=p["next_sibling"]), bs)
        assert runtime.tree.tolist() == p["parents"]                    # on the device until the pass ends
        for layer, rec in p["layers"].items():
            z = rec["logits"][: bs * n]
            topk = SimpleNamespace(topk_config=TopKConfig(top_k=8, renormalize=True), layer_id=layer, is_draft=False)
            out = runtime.restrict(topk, lambda t, h, g: select_experts(
                h, g, TopKConfig(top_k=8, renormalize=True, torch_native=True), layer_id=layer), z[:, :0], z)  # noqa: B023 (called in this iteration)
            blocks = [BlockInfo.from_parents(parents) for parents in p["parents"]]
            for b, want in enumerate(select_pass(plan, z.view(bs, n, -1), blocks)):      # beside the pass's roots
                ref_ids, _ = route(z[b * n:(b + 1) * n], want.eligible, ROUTER)
                got = out.topk_ids[b * n:(b + 1) * n].long()
                assert same_routing(z[b * n:(b + 1) * n], want.eligible, got, ref_ids), (method, layer, b)
                checked += 1
        runtime.end_pass()
    assert checked > 0
