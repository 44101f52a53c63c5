"""A hand-built EAGLE verify pass through the plugin's hooks, with SGLang's own `EagleVerifyInput`,
`ForwardMode.TARGET_VERIFY` and `select_experts` (EAGLE-3 verify itself does not run on a CPU).

Several requests of different trees, one padded request (a CUDA-graph batch is padded to a captured size), a
draft-model layer: trees recovered from SGLang's linked lists must equal the draft trees, per-request sets
must equal `acceptmoe.methods.select` on the same logits, routing must stay inside them (Eq. 2), padding and
draft layers must pass through, and the records must be usable by calibration. The plugin's CUDA verifier (the
fused Triton kernel) runs the same pass under this environment's Triton interpreter, and its launch compiles
for sm_90 and sm_120 with this environment's Triton (SGLang's pin, not the project's)."""
import os
import random
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.layers.moe.topk import TopKConfig, select_experts
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.speculative.eagle_info import EagleVerifyInput

from acceptmoe.engine.trace import Trace
from acceptmoe.methods import BlockInfo, CommitmentTable, Fit, Router, route, select
from acceptmoe.serving.sglang import plugin
from acceptmoe.serving.sglang.config import load_config
from acceptmoe.serving.sglang.runtime import Runtime, read_steps
from acceptmoe.serving.sglang.tree import links_from_parents

E, K, N, LAYERS = 32, 4, 8, 2
P_HAT = (1.0, 0.8, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02)


def draft_trees(bs, seed=0):
    rng = random.Random(seed)
    return [[-1] + [rng.randrange(i) for i in range(1, N)] for _ in range(bs)]


def verify_input(trees, seq_lens):
    links = [links_from_parents(p) for p in trees]
    depth = [BlockInfo.from_parents(p).depth for p in trees]
    positions = torch.cat([d + s for d, s in zip(depth, seq_lens, strict=False)])
    bs = len(trees)
    return EagleVerifyInput(
        draft_token=torch.arange(bs * N), custom_mask=torch.ones(bs * N * N, dtype=torch.bool), positions=positions,
        retrieve_index=torch.arange(bs * N).view(bs, N), retrieve_next_token=torch.tensor([f for f, _ in links]),
        retrieve_next_sibling=torch.tensor([s for _, s in links]), retrieve_cum_len=None, spec_steps=N - 1, topk=2,
        draft_token_num=N, capture_hidden_mode=None, seq_lens_sum=int(sum(seq_lens)), seq_lens_cpu=torch.tensor(seq_lens))


def topk_module(layer, draft=False):
    return SimpleNamespace(topk_config=TopKConfig(top_k=K, renormalize=True), layer_id=layer, is_draft=draft)


def sglang_topk(topk, hidden, logits, *args, **kwargs):
    cfg = TopKConfig(top_k=K, renormalize=True, torch_native=True)
    return select_experts(hidden, logits, cfg, layer_id=topk.layer_id)


@pytest.mark.parametrize("method,budget,verifier", [("acceptmoe", None, "auto"), ("count-b", 8, "auto"),
                                                    ("moe-spec", 8, "auto"), ("acceptmoe-b", 8, "auto"),
                                                    ("acceptmoe", None, "triton"), ("count-b", 8, "triton")])
def test_verify_pass_sets_routing_and_records(tmp_path, method, budget, verifier):
    bs, padded = 3, 4
    trees = draft_trees(bs)
    env = {"ACCEPTMOE_METHOD": method, "ACCEPTMOE_TRACE": str(tmp_path / "steps.jsonl"),
           "ACCEPTMOE_DUMP": str(tmp_path / "dump"), "ACCEPTMOE_P_HAT": ",".join(map(str, P_HAT)),
           "ACCEPTMOE_VERIFIER": verifier}
    if budget:
        env["ACCEPTMOE_BUDGET"] = str(budget)
    plugin.RUNTIME = runtime = Runtime(load_config(env))
    batch = SimpleNamespace(spec_info=verify_input(trees, [11, 5, 30]), batch_size=bs,
                            forward_mode=ForwardMode.TARGET_VERIFY)
    runner = SimpleNamespace(is_draft_worker=False, req_to_token_pool=SimpleNamespace(size=8),
                             server_args=SimpleNamespace(speculative_num_steps=N - 1, max_running_requests=8))
    g = torch.Generator().manual_seed(3)
    logits = [torch.randn(padded * N, E, generator=g) for _ in range(LAYERS)]      # one padded request
    hidden = torch.zeros(padded * N, 16)
    outs, draft_out = [], None

    def model_forward(runner, batch):
        nonlocal draft_out
        for layer in range(LAYERS):
            outs.append(plugin._around_topk(sglang_topk, topk_module(layer), hidden, logits[layer]))
        draft_out = plugin._around_topk(sglang_topk, topk_module(0, draft=True), hidden, logits[0])
        return "logits"

    assert plugin._around_forward(model_forward, runner, batch) == "logits"
    assert runtime.mode is None
    assert runtime.verifier.backend == {"auto": "torch", "triton": "triton"}[verifier]    # a CPU: torch unless asked
    assert runtime.parents == trees                                  # trees recovered from the linked lists
    router = Router.preset("softmax_topk", top_k=K)
    plan = load_config(env).bind(Fit(router, E, max_depth=N - 1))          # the server's speculative_num_steps
    (dump,) = (torch.load(p) for p in sorted((tmp_path / "dump").glob("*.pt")))   # one file per pass
    assert sorted(dump["layers"]) == list(range(LAYERS))             # the draft layer was not restricted
    assert dump["parents"] == trees
    for layer, out in enumerate(outs):
        d = dump["layers"][layer]
        ids, weights = out.topk_ids.view(padded, N, K), out.topk_weights.view(padded, N, K)
        z = logits[layer].view(padded, N, E)
        for b, tree in enumerate(trees):
            want = select(plan, z[b], BlockInfo.from_parents(tree))
            assert torch.equal(d["eligible"][b], want.eligible), (method, layer, b)
            assert want.eligible[ids[b]].all()                       # every routed id inside S
            ref_ids, ref_w = route(z[b], want.eligible, router)      # Eq. 2
            assert torch.equal(ids[b].long(), ref_ids)
            torch.testing.assert_close(weights[b].float(), ref_w)
    nat = sglang_topk(topk_module(0), hidden, logits[0])
    assert torch.equal(draft_out.topk_ids, nat.topk_ids)             # draft layers route naturally

    # after verification: accepted paths (global indices, -1 padded) -> records in the native trace format
    accept_index = torch.full((bs, N), -1)
    paths = [BlockInfo.from_parents(t).path_to(N - 1) for t in trees]
    for b, p in enumerate(paths):
        accept_index[b, : len(p)] = torch.tensor(p) + b * N
    plugin._after_sample((None, None, accept_index), batch.spec_info,
                         SimpleNamespace(reqs=[SimpleNamespace(rid=f"r{b}") for b in range(bs)]))
    steps = read_steps(tmp_path / "steps.jsonl")
    assert sorted(steps) == ["r0", "r1", "r2"]
    for b in range(bs):
        (block,) = steps[f"r{b}"]
        assert block.parents == trees[b] and block.path == paths[b] and block.accept_length == len(paths[b])
        assert block.layers["layer"] == list(range(LAYERS))
        sizes = [int(dump["layers"][layer]["eligible"][b].sum()) for layer in range(LAYERS)]
        assert block.layers["set_size"] == sizes
        assert all(r <= s for r, s in zip(block.layers["routed_union"], sizes, strict=True))
    trace = Trace(meta={"method": method, "tree": {"num_steps": N - 1}}, blocks=steps["r0"])
    trace.save(tmp_path / "trace.jsonl")
    CommitmentTable.from_records([(b.parents, b.path) for b in Trace.load(tmp_path / "trace.jsonl").blocks],
                                 max_depth=N - 1)


def test_no_method_passes_everything_through(tmp_path):
    plugin.RUNTIME = Runtime(load_config({}))
    batch = SimpleNamespace(spec_info=verify_input(draft_trees(2), [3, 4]), batch_size=2,
                            forward_mode=ForwardMode.TARGET_VERIFY)
    runner = SimpleNamespace(is_draft_worker=False)
    z = torch.randn(2 * N, E, generator=torch.Generator().manual_seed(4))
    got = plugin._around_forward(lambda r, b: plugin._around_topk(sglang_topk, topk_module(0), z[:, :0], z),
                                 runner, batch)
    want = sglang_topk(topk_module(0), z[:, :0], z)
    assert torch.equal(got.topk_ids, want.topk_ids) and torch.equal(got.topk_weights, want.topk_weights)
    assert plugin.RUNTIME.calls == 0


COMPILE = """
from types import SimpleNamespace
import torch
from acceptmoe.serving.sglang import cpu
cpu.prepare_process()
from sglang.srt.layers.moe.topk import TopKConfig
from acceptmoe.kernels import triton_verifier
from acceptmoe.kernels.offline import capture_launch, compile_stats
from acceptmoe.serving.sglang.config import load_config
from acceptmoe.serving.sglang.runtime import Limits, Runtime
from acceptmoe.serving.sglang.tree import links_from_parents

for method, budget in (("acceptmoe", ""), ("count-b", "24")):
    rt = Runtime(load_config({"ACCEPTMOE_METHOD": method, "ACCEPTMOE_BUDGET": budget,
                              "ACCEPTMOE_P_HAT": "1,0.8,0.6,0.5,0.4,0.3", "ACCEPTMOE_VERIFIER": "triton"}))
    rt.start(Limits(requests=48, depth=5))
    first, sibling = links_from_parents([-1] + [(i - 1) // 10 for i in range(1, 64)])
    rt.begin_verify(SimpleNamespace(draft_token_num=64, retrieve_next_token=torch.tensor([first]),
                                    retrieve_next_sibling=torch.tensor([sibling])), 1)
    topk = SimpleNamespace(topk_config=TopKConfig(top_k=8, renormalize=True), layer_id=0, is_draft=False)
    z = torch.randn(64, 128, dtype=torch.bfloat16)        # the paper targets' router logits: bf16, 128 experts
    launch = capture_launch(triton_verifier, "_verifier_kernel",
                            lambda: rt.restrict(topk, lambda *a, **k: SimpleNamespace(), z[:, :0], z))
    for arch in (90, 120):
        stats = compile_stats(launch, arch)
        print(method, arch, stats.registers, stats.spill, stats.sass)
"""


def test_the_plugins_kernel_launch_compiles_for_sm90_and_sm120_with_this_triton():
    """The launch the plugin makes inside a verify pass (captured from its own runtime, not built by hand),
    compiled offline by the Triton installed beside SGLang: registers and no spills, per method and GPU."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}     # a compiler, not the interpreter
    proc = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines()]
    assert [(m, a) for m, a, *_ in rows] == [(m, a) for m in ("acceptmoe", "count-b") for a in ("90", "120")]
    assert all(int(regs) > 0 and int(spill) == 0 and int(sass) > 0 for _, _, regs, spill, sass in rows), rows
