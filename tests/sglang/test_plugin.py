"""The SGLang plugin's pure parts, in the project's environment: settings, tree recovery, per-request sets,
and the clear stop of `--engine sglang` where SGLang or a CUDA GPU is missing."""
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import pytest
import torch

from acceptmoe.errors import UserError
from acceptmoe.kernels import make_verifier
from acceptmoe.methods import BlockInfo, CommitmentTable, Fit, Router, Variant, select
from acceptmoe.serving.sglang.config import (
    PluginConfigError,
    Watched,
    for_plan,
    load_config,
    restart_reason,
    settings,
    to_env,
)
from acceptmoe.serving.sglang.runtime import Limits, Runtime
from acceptmoe.serving.sglang.tree import links_from_parents, parents_from_links
from acceptmoe.tools.bench.plugin_host import count_host_reads


def installed() -> bool:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return bool(version("sglang"))
    except PackageNotFoundError:
        return False

ROOT = Path(__file__).resolve().parents[2]


def random_parents(rng: random.Random, n: int) -> list[int]:
    return [-1] + [rng.randrange(i) for i in range(1, n)]


def test_parents_recovered_from_first_child_and_sibling_links():
    rng = random.Random(0)
    for n in [1, 2, 3, 7, 16, 64]:
        trees = [random_parents(rng, n) for _ in range(4)]
        links = [links_from_parents(p) for p in trees]
        first = torch.tensor([f for f, _ in links])
        sibling = torch.tensor([s for _, s in links])
        assert parents_from_links(first, sibling).tolist() == trees


def test_chain_and_star_trees():
    chain, star = list(range(-1, 63)), [-1] + [0] * 63
    for tree in (chain, star):
        f, s = links_from_parents(tree)
        assert parents_from_links(torch.tensor([f]), torch.tensor([s])).tolist() == [tree]


@pytest.mark.parametrize("method,budget", [("acceptmoe", None), ("acceptmoe-b", 12), ("count-b", 12),
                                           ("moe-spec", 12), ("standard-sd", None)])
def test_per_request_sets_equal_the_reference_selector(method, budget):
    """The plugin's settings bound to SGLang's router: its verifier, with rows reserved for more requests than
    are in flight (as the plugin reserves them), gives each request the reference's set."""
    rng = random.Random(1)
    env = {"ACCEPTMOE_METHOD": method, "ACCEPTMOE_P_HAT": "1,0.7,0.4,0.2,0.1,0.05,0.02,0.01,0.01"}
    if budget:
        env["ACCEPTMOE_BUDGET"] = str(budget)
    plan = load_config(env).bind(Fit(Router.preset("softmax_topk", top_k=4), 32, max_depth=8))
    blocks = [BlockInfo.from_parents(random_parents(rng, n)) for n in (9, 5, 9)]
    logits = torch.randn(3, 9, 32, generator=torch.Generator().manual_seed(2))
    verifier = make_verifier("torch", plan)
    verifier.prepare(blocks, pad_to=9, rows=8)
    got = verifier(logits, route=False)
    assert got.ids is None
    for b, block in enumerate(blocks):
        want = select(plan, logits[b, : block.num_tokens], block)
        assert torch.equal(got.eligible[b], want.eligible), (method, b)


def test_settings_from_environment_and_file(tmp_path):
    table = CommitmentTable(max_depth=2, proposed=[4, 8, 8], committed=[4, 4, 2])
    table.save(tmp_path / "p.json")
    (tmp_path / "s.yaml").write_text(f"method: acceptmoe\ncommitment: {tmp_path / 'p.json'}\nbeta: 0.25\n")
    cfg = load_config({"ACCEPTMOE_SGLANG_CONFIG": str(tmp_path / "s.yaml"), "ACCEPTMOE_BETA": "1.0"})
    assert (cfg.method, dict(cfg.variant.overrides)["beta"], cfg.p_hat) == ("acceptmoe", 1.0, table.p_hat)  # env wins
    assert load_config(to_env(cfg)) == cfg
    assert load_config({}).method is None and not load_config({}).restricts
    (tmp_path / "b.json").write_text(json.dumps({"method": "count-b", "b0": 12, "selector": {"score_bits": 20}}))
    fixed = load_config({"ACCEPTMOE_SGLANG_CONFIG": str(tmp_path / "b.json")})
    plan = fixed.bind(Fit(Router.preset("softmax_topk", 4), 32, 5))
    assert plan.budget == 12 and plan.selector.score_bits == 20 and fixed.variant.budget is None
    assert load_config(to_env(fixed)) == fixed                         # the backend's way: b0 and a base selector


@pytest.mark.parametrize("env,needle", [
    ({"ACCEPTMOE_METHOD": "vanilla-ar"}, "not a verifier method"),
    ({"ACCEPTMOE_METHOD": "count-b"}, "needs a budget"),
    ({"ACCEPTMOE_METHOD": "acceptmoe"}, "needs commitment probabilities"),
    ({"ACCEPTMOE_METHOD": "acceptmoe", "ACCEPTMOE_BUDGET": "8", "ACCEPTMOE_P_HAT": "1,0.5"}, "fixed-budget methods only"),
    ({"ACCEPTMOE_METHOD": "moe-spec", "ACCEPTMOE_BUDGET": "x"}, "must be an integer"),
    ({"ACCEPTMOE_PRUNE": "on"}, "offloaded"),
    ({"ACCEPTMOE_METHOD": "acceptmoe", "ACCEPTMOE_P_HAT": "0.5,0.2"}, "p_hat[0] must be 1.0"),
    ({"ACCEPTMOE_SGLANG_CONFIG": "/nonexistent.json"}, "no such file"),
    ({"ACCEPTMOE_METHOD": "count-b", "ACCEPTMOE_B0": "8", "ACCEPTMOE_SELECTOR": '{"rho": 1}'}, "ACCEPTMOE_SELECTOR must map"),
    ({"ACCEPTMOE_BETA": "0.3"}, "need ACCEPTMOE_METHOD"),
])
def test_bad_settings_are_one_clear_error(env, needle):
    with pytest.raises(PluginConfigError) as err:
        load_config(env)
    assert isinstance(err.value, UserError) and needle in str(err.value)


def test_unknown_key_in_settings_file(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps({"method": "moe-spec", "budget": 8, "bugdet": 9}))
    with pytest.raises(PluginConfigError, match="bugdet"):
        load_config({"ACCEPTMOE_SGLANG_CONFIG": str(tmp_path / "s.json")})


@pytest.mark.skipif(installed(), reason="checks the stop where SGLang is missing")
def test_engine_sglang_stops_with_one_line_where_it_cannot_run(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "acceptmoe", "table1", "--engine", "sglang", "--limit", "2",
                           "--results", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "sglang==0.5.23" in lines[0], proc.stderr
    assert not any(tmp_path.iterdir())          # stopped before creating a run folder


def test_output_lengths_cut_the_last_step_to_the_tokens_returned():
    from acceptmoe.serving.sglang.runtime import output_lengths

    assert output_lengths([3, 4, 2], 10) == [3, 4, 2]              # 1 prefill token + 9
    assert output_lengths([3, 4, 6], 10) == [3, 4, 2]              # cut at max_new_tokens or EOS
    assert output_lengths([3, 4, 6], 1) == []


class _TopKOut(NamedTuple):           # the shape of SGLang's StandardTopKOutput
    topk_weights: torch.Tensor
    topk_ids: torch.Tensor


def _natural_topk(topk, hidden, logits):
    w, ids = torch.topk(torch.softmax(logits.float(), -1), 4, -1)
    return _TopKOut(w / w.sum(-1, keepdim=True), ids)


@pytest.mark.parametrize("method,budget", [("acceptmoe", None), ("acceptmoe-b", 8), ("count-b", 8),
                                           ("moe-spec", 8), ("standard-sd", None)])
def test_in_forward_work_is_one_graph_reading_static_buffers(method, budget, tmp_path):
    """What runs inside the model forward compiles as one graph (no host sync, no value-dependent branch or
    shape: what CUDA-graph capture needs) and, like a replayed graph, picks up new trees through its buffers,
    which the step's start fills from SGLang's linked lists without reading anything on the host."""
    env = {"ACCEPTMOE_METHOD": method, "ACCEPTMOE_P_HAT": "1,.8,.5,.3,.2,.1,.05,.02",
           "ACCEPTMOE_TRACE": str(tmp_path / "steps.jsonl")}
    if budget:
        env["ACCEPTMOE_BUDGET"] = str(budget)
    rt = Runtime(load_config(env))
    cfg = load_config(env)
    rt.start(Limits(requests=4, depth=7))               # depth: what SGLang's speculative_num_steps would give
    topk = _topk_module()
    rng = random.Random(5)
    trees = [random_parents(rng, 8) for _ in range(4)]
    def begin(step_trees):
        links = [links_from_parents(t) for t in step_trees]
        spec = SimpleNamespace(draft_token_num=8, retrieve_next_token=torch.tensor([f for f, _ in links]),
                               retrieve_next_sibling=torch.tensor([s for _, s in links]))
        with count_host_reads() as reads:
            rt.begin_verify(spec, len(step_trees))
        return reads["n"]

    assert begin(trees[:3]) == 0
    z = torch.randn(32, 32, generator=torch.Generator().manual_seed(6))
    hidden = z[:, :0]
    eager = rt.restrict(topk, _natural_topk, hidden, z)                 # the warm-up pass allocates the buffers
    compiled = torch.compile(lambda h, x: rt.restrict(topk, _natural_topk, h, x), backend="eager", fullgraph=True)
    plan = cfg.bind(Fit(Router.preset("softmax_topk", 4), 32, 7))
    for step, step_trees in enumerate([trees[:3], trees[1:]]):
        if step:                                                         # next step: new trees, same buffers
            assert begin(step_trees) == 0
        want = rt.restrict(topk, _natural_topk, hidden, z)
        rec = rt.records[0, :3].clone()
        rt.records.zero_()
        got = compiled(hidden, z)
        assert torch.equal(got.topk_ids, want.topk_ids) and torch.equal(rt.records[0, :3], rec)
        for b, tree in enumerate(step_trees):
            ref = select(plan, z.view(4, 8, 32)[b], BlockInfo.from_parents(tree))
            assert ref.eligible[got.topk_ids.view(4, 8, 4)[b]].all()
            assert int(rec[b, 1]) == int(ref.eligible.sum())             # LAYER_FIELDS[1]: set_size
    assert eager is not None


def _topk_module(renormalize=True, layer=0):
    return SimpleNamespace(topk_config=SimpleNamespace(use_grouped_topk=False, scoring_func="softmax",
                                                       correction_bias=None, custom_routing_function=None,
                                                       num_shared_topk_slots=0, top_k=4, renormalize=renormalize,
                                                       routed_scaling_factor=None),
                           layer_id=layer, is_draft=False)


def _verify_input(trees):
    links = [links_from_parents(t) for t in trees]
    return SimpleNamespace(draft_token_num=len(trees[0]), retrieve_next_token=torch.tensor([f for f, _ in links]),
                           retrieve_next_sibling=torch.tensor([s for _, s in links]))


def test_only_tensor_parallel_rank_zero_writes_records(tmp_path):
    trees = [random_parents(random.Random(0), 8) for _ in range(2)]
    for rank, written in ((0, True), (1, False)):
        path = tmp_path / f"steps{rank}.jsonl"
        rt = Runtime(load_config({"ACCEPTMOE_TRACE": str(path)}))
        rt.start(Limits(requests=2, depth=7, rank=rank))
        rt.begin_verify(_verify_input(trees), 2)
        rt.restrict(_topk_module(), _natural_topk, None, torch.randn(16, 32))
        rt.end_pass()
        rt.finish_step(["a", "b"], torch.tensor([[0, -1], [8, -1]]), 8)
        assert path.exists() == written
        if written:
            assert [json.loads(line)["rid"] for line in path.read_text().splitlines()] == ["a", "b"]


def test_a_node_sglang_left_unlinked_hangs_under_the_root():
    """SGLang's tree kernel skips a node whose parent was not selected (no link reaches it): it gets the root as
    parent (how its attention row computed it) and the block stays well formed."""
    first, sibling = links_from_parents([-1, 0, 1, 1, 0])
    first[4] = -1                              # node 4 (a leaf) ...
    sibling[1] = -1                            # ... no longer reached from the root's child list
    parents = parents_from_links(torch.tensor([first]), torch.tensor([sibling]))[0].tolist()
    assert parents == [-1, 0, 1, 1, 0]         # node 4's parent was the root anyway; now an inner node:
    first, sibling = links_from_parents([-1, 0, 1, 2, 2])
    first[2] = 3
    sibling[3] = -1                            # node 4 unlinked
    parents = parents_from_links(torch.tensor([first]), torch.tensor([sibling]))[0].tolist()
    assert parents == [-1, 0, 1, 2, 0]
    BlockInfo.from_parents(parents)


def test_a_pass_larger_than_the_server_limits_is_refused():
    rt = Runtime(load_config({"ACCEPTMOE_METHOD": "count-b", "ACCEPTMOE_BUDGET": "8"}))
    rt.start(Limits(requests=2, depth=7))
    with pytest.raises(UserError, match="exceeds the 2 rows"):
        rt.begin_verify(_verify_input([random_parents(random.Random(1), 8) for _ in range(3)]), 3)


def test_test_switches_are_refused_under_cuda_graphs(tmp_path):
    for env in ({"ACCEPTMOE_DUMP": str(tmp_path)}, {"ACCEPTMOE_FORCE_DECODE": "1"}):
        rt = Runtime(load_config({"ACCEPTMOE_TRACE": str(tmp_path / "s.jsonl"), **env}))
        rt.start(Limits(requests=4, depth=5))
        with pytest.raises(PluginConfigError, match="--disable-cuda-graph"):
            rt.begin_capture(SimpleNamespace(max_bs=4, captured_req_width=8))


def test_a_non_renormalising_router_needs_the_standard_output_format():
    class Bypassed(NamedTuple):          # the shape of SGLang's BypassedTopKOutput: no ids, no weights
        hidden_states: torch.Tensor
        router_logits: torch.Tensor

    z = torch.randn(8, 32)
    for renormalize in (False, True):
        rt = Runtime(load_config({"ACCEPTMOE_METHOD": "count-b", "ACCEPTMOE_BUDGET": "8"}))
        rt.start(Limits(requests=1, depth=7))
        rt.begin_verify(_verify_input([random_parents(random.Random(2), 8)]), 1)
        fused = lambda t, h, g: Bypassed(h, g)          # noqa: E731
        if not renormalize:
            with pytest.raises(UserError, match="Bypassed output format"):
                rt.restrict(_topk_module(renormalize=False), fused, z[:, :0], z)
        else:           # renormalising routers: the -inf mask is all a fused format needs
            out = rt.restrict(_topk_module(renormalize=True), fused, z[:, :0], z)
            assert torch.isinf(out.router_logits).any()


def test_a_non_renormalising_router_restricted_and_recorded_keeps_the_unmasked_gates(tmp_path):
    """Standard output format, a router without renormalisation, the pass recorded: the chosen experts' weights
    are the unmasked softmax's, and the records are taken over the [B, n, E] logits (one pass, no error)."""
    rt = Runtime(load_config({"ACCEPTMOE_METHOD": "count-b", "ACCEPTMOE_BUDGET": "8",
                              "ACCEPTMOE_TRACE": str(tmp_path / "steps.jsonl")}))
    rt.start(Limits(requests=1, depth=7))
    rt.begin_verify(_verify_input([random_parents(random.Random(2), 8)]), 1)
    z = torch.randn(8, 32, generator=torch.Generator().manual_seed(3))
    out = rt.restrict(_topk_module(renormalize=False), _natural_topk, z[:, :0], z)
    want = torch.softmax(z.float(), -1).gather(1, out.topk_ids.long())
    assert torch.allclose(out.topk_weights, want) and int(rt.records[0, 0, 1]) == 8     # set_size: the budget


def test_standard_sd_unrecorded_passes_straight_through():
    assert not Runtime(load_config({"ACCEPTMOE_METHOD": "standard-sd"})).active
    assert not Runtime(load_config({})).active
    assert Runtime(load_config({"ACCEPTMOE_METHOD": "acceptmoe", "ACCEPTMOE_P_HAT": "1,0.5"})).active


# ----- one server for consecutive plans: the settings file, read again between generations -----
FIT = Fit(Router.preset("softmax_topk", 4), 32, 7)
TREES = [random_parents(random.Random(7), 8) for _ in range(3)]
LOGITS = torch.randn(24, 32, generator=torch.Generator().manual_seed(8))       # [B * n, E], n = 8
P_HAT = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)


def _replace_settings(path: Path, plan) -> None:
    """What the backend does between generations: a new settings file renamed over the old one."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(settings(for_plan(plan))))
    os.replace(tmp, path)


def _served_sets(rt: Runtime) -> torch.Tensor:
    """One verify pass of TREES through the runtime: the set each request's logits were masked to, bool [B, E]."""
    seen = {}

    def orig(topk, hidden, logits):
        seen["logits"] = logits
        return _natural_topk(topk, hidden, logits)
    rt.begin_verify(_verify_input(TREES), len(TREES))
    rt.restrict(_topk_module(), orig, LOGITS[:, :0], LOGITS)
    rt.end_pass()
    return torch.isfinite(seen["logits"].view(3, 8, 32)[:, 0])


def _reference_sets(plan) -> torch.Tensor:
    return torch.stack([select(plan, LOGITS.view(3, 8, 32)[b], BlockInfo.from_parents(t)).eligible
                        for b, t in enumerate(TREES)])


def test_a_replaced_settings_file_is_served_from_the_next_pass(tmp_path):
    """The backend serves consecutive plans from one server by replacing the plugin's settings file between
    generations; the plugin looks before each target pass (one stat) and serves the new settings from that pass
    on. Before any CUDA graph is captured (a CPU) every setting may change, the method included."""
    path = tmp_path / "plugin.json"
    plans = [Variant("acceptmoe").bind(FIT, commitment=P_HAT),
             Variant("acceptmoe", overrides=(("beta", 4.0),)).bind(FIT, commitment=(1.0,) + (0.05,) * 7),
             Variant("count-b", budget=8).bind(FIT)]
    _replace_settings(path, plans[0])
    watched = Watched({"ACCEPTMOE_SGLANG_CONFIG": str(path)})
    rt = Runtime(watched.cfg, source=watched)                    # as plugin.load makes it
    rt.start(Limits(requests=4, depth=7))
    rt.refresh()
    assert rt.cfg is watched.cfg and watched.poll() is None      # nothing changed: nothing read
    served = [_served_sets(rt)]
    for plan in plans[1:]:
        _replace_settings(path, plan)
        rt.refresh()                                             # what plugin._around_forward does first
        assert rt.cfg == for_plan(plan) and watched.poll() is None
        served.append(_served_sets(rt))
    for plan, sets in zip(plans, served, strict=True):
        assert torch.equal(sets, _reference_sets(plan)), plan.name
    assert not torch.equal(served[0], served[1]) and not torch.equal(served[1], served[2])   # each change mattered


def test_after_a_graph_capture_only_the_commitment_inputs_change_on_the_same_buffers(tmp_path):
    """Once SGLang captured the verify graphs, they replay the verifier's calls on its buffers: new p_hat and beta
    (written into those buffers before each step) are served by the same verifier; a new budget or method is
    refused with a message to start a new server (the backend restarts instead: `config.restart_reason`)."""
    first = Variant("acceptmoe").bind(FIT, commitment=P_HAT)
    rt = Runtime(for_plan(first, trace=str(tmp_path / "steps.jsonl")))
    rt.start(Limits(requests=4, depth=7))
    rt.captured = True                                           # what plugin._around_capture marks at capture
    _served_sets(rt)
    verifier, alpha = rt.verifier, rt.verifier.step.alpha
    new = Variant("acceptmoe", overrides=(("beta", 4.0),)).bind(FIT, commitment=(1.0,) + (0.05,) * 7)
    rt.reconfigure(for_plan(new, trace=str(tmp_path / "steps.jsonl")))
    assert torch.equal(_served_sets(rt), _reference_sets(new)) and not torch.equal(_reference_sets(new),
                                                                                    _reference_sets(first))
    assert rt.verifier is verifier and rt.verifier.step.alpha is alpha
    for other in (Variant("count-b", budget=8).bind(FIT), Variant("acceptmoe-b", budget=8).bind(FIT, commitment=P_HAT),
                  Variant("acceptmoe", overrides=(("demand_score", "softmax"),)).bind(FIT, commitment=P_HAT)):
        with pytest.raises(PluginConfigError, match="start a new server"):
            rt.reconfigure(for_plan(other, trace=str(tmp_path / "steps.jsonl")))
    with pytest.raises(PluginConfigError, match="recording"):
        rt.reconfigure(for_plan(new))


def test_restart_reason_names_what_a_captured_graph_holds():
    """The backend's rule for starting a new server: without captured graphs never (the plugin reads everything
    again); with them, when the plan restricts differently or makes other verifier calls."""
    sd = Variant("standard-sd").bind(FIT)
    am = Variant("acceptmoe").bind(FIT, commitment=P_HAT)
    am_beta = Variant("acceptmoe", overrides=(("beta", 1.0),)).bind(FIT, commitment=(1.0,) + (0.5,) * 7)
    cb8, cb12 = Variant("count-b").bind(FIT, b0=8), Variant("count-b").bind(FIT, b0=12)
    for a, b in ((sd, am), (am, am_beta), (cb8, cb12), (am, cb8)):
        assert restart_reason(for_plan(a), for_plan(b), FIT, captured=False) is None
    assert restart_reason(for_plan(am), for_plan(am_beta), FIT, captured=True) is None
    assert restart_reason(for_plan(cb8), for_plan(Variant("count-b", budget=8).bind(FIT)), FIT, captured=True) is None
    assert "restricts" in restart_reason(for_plan(sd), for_plan(am), FIT, captured=True)
    for a, b in ((cb8, cb12), (am, cb8)):
        assert "verifier calls" in restart_reason(for_plan(a), for_plan(b), FIT, captured=True)


def test_rebind_serves_new_commitment_inputs_from_the_same_triton_buffers():
    """`Verifier.rebind` (the fused kernel under the interpreter): a new p_hat and beta give the sets a fresh
    verifier of the new plan gives, from the buffers a captured graph reads; other calls are refused."""
    fit = Fit(Router.preset("softmax_topk", 4), 32, 3)
    blocks = [BlockInfo.from_parents([-1, 0, 0, 1, 2, 3]), BlockInfo.from_parents([-1, 0, 1, 1, 2, 2])]
    z = torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(3))
    old = Variant("acceptmoe").bind(fit, commitment=(1.0, 0.9, 0.8, 0.7))
    new = Variant("acceptmoe", overrides=(("beta", 4.0),)).bind(fit, commitment=(1.0, 0.05, 0.05, 0.05))
    verifier = make_verifier("triton", old)
    verifier.prepare(blocks, rows=4)
    buffers = dict(verifier.buffers)
    before = verifier(z, route=False).eligible
    verifier.rebind(new)
    verifier.prepare(blocks, rows=4)
    fresh = make_verifier("triton", new)
    fresh.prepare(blocks, rows=4)
    after = verifier(z, route=False).eligible
    assert torch.equal(after, fresh(z, route=False).eligible) and not torch.equal(after, before)
    assert verifier.buffers.keys() == buffers.keys() and all(verifier.buffers[k] is v for k, v in buffers.items())
    assert verifier.step is buffers[(4, 6)]
    with pytest.raises(UserError, match="other verifier calls"):
        verifier.rebind(Variant("acceptmoe-b", budget=8).bind(fit, commitment=(1.0, 0.9, 0.8, 0.7)))


# ----- the served model's router -----
def test_the_plugin_routes_as_the_served_models_config_says():
    """GPT-OSS routes top-k then softmax: its config, read by the project's parser, gives the plugin that router
    (near ties of the gates' fixed-point truncation then select what the native engine selects)."""
    from transformers import GptOssConfig, Qwen3MoeConfig

    from acceptmoe.serving.sglang.plugin import limits_of
    runner = lambda hf: SimpleNamespace(model_config=SimpleNamespace(hf_config=hf))     # noqa: E731
    configs = {"topk_softmax": GptOssConfig(), "softmax_topk": Qwen3MoeConfig(norm_topk_prob=True)}
    served = {name: limits_of(runner(hf)).router for name, hf in configs.items()}
    assert all(router.name == name for name, router in served.items())
    parents = [-1, 0, 0, 1, 1, 2, 3, 4]
    z = torch.round(torch.randn(8, 32, generator=torch.Generator().manual_seed(2450)) * 4) / 4   # tied logits
    sets = {}
    for kind, router in served.items():
        rt = Runtime(load_config({"ACCEPTMOE_METHOD": "count-b", "ACCEPTMOE_BUDGET": "8"}))
        rt.start(Limits(requests=1, depth=3, router=router))
        seen = {}

        def orig(topk, hidden, logits):
            seen["logits"] = logits  # noqa: B023 (called in this iteration)
            return _natural_topk(topk, hidden, logits)
        rt.begin_verify(_verify_input([parents]), 1)
        rt.restrict(_topk_module(), orig, z[:, :0], z)
        sets[kind] = torch.isfinite(seen["logits"][0])
        plan = Variant("count-b", budget=8).bind(Fit(Router.preset(kind, 4), 32, 3))
        assert rt.verifier.plan.router == plan.router                     # the family's router at SGLang's top-k
        assert torch.equal(sets[kind], select(plan, z, BlockInfo.from_parents(parents)).eligible)
    assert not torch.equal(sets["softmax_topk"], sets["topk_softmax"])


# ----- memory from the run -----
def test_pools_are_sized_from_the_run():
    """Requests in flight, each its prompt and generation plus one speculative step, at the checkpoints' KV width;
    on a GPU the share of free memory the weights and pools need, at most the cap."""
    from acceptmoe.engine.tree import TreeShape
    from acceptmoe.experiments.spine.config import load_world
    from acceptmoe.serving.sglang.memory import size_pools

    tiny = ROOT / "models" / "tiny"
    pools = size_pools(tiny / "target", tiny / "draft", TreeShape(5, 10, 64), "float32", requests=16,
                       request_tokens=2304)
    assert pools.tokens_per_request == 2304 + 5 * 10 + 64
    assert pools.kv_bytes_per_token == 2 * 2 * 32 * 4 * (4 + 1)          # K and V, 2 heads of 32, fp32, 4 + 1 layers
    assert pools.max_total_tokens == 16 * 2418
    assert pools.weight_bytes == sum(f.stat().st_size for f in tiny.glob("*/*.safetensors"))
    assert pools.server_args("cpu") == {"max_running_requests": 16, "max_total_tokens": 16 * 2418}
    need = pools.need_bytes
    assert pools.server_args("cuda", free_bytes=need * 4)["mem_fraction_static"] == 0.25
    assert pools.server_args("cuda", free_bytes=need // 2, cap=0.9)["mem_fraction_static"] == 0.9
    world = load_world("tiny")
    generation = world.generation                       # the longest generation: graded or timed
    assert world.serving.settings(world, world.models[0]) == {
        "tp": 1, "dp": 1, "router": "round_robin", "overlap": False, "memory_cap": 0.9, "requests": generation.batch,
        "request_tokens": 2048 + max(generation.max_new_tokens, generation.timed_tokens), "disable_cuda_graph": True}
