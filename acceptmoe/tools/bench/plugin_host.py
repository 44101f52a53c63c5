"""Benchmark: the SGLang plugin's own work per verify step, on this CPU, through its real hooks.

One verify step is what SGLang's worker does around a TARGET_VERIFY pass: the `ModelRunner.forward` hook
(trees from the verify input's linked lists, the verifier's step buffers), the `TopK.forward` hook in every
MoE layer (selection, the logit mask, records), and the acceptance hook (records paired with the accepted
paths). SGLang's own routing inside the layers is a plain top-k here and is timed alone as `routing`, so
`plugin` is the hooks' cost beyond it (on this CPU it includes the selection arithmetic, which a GPU runs in
the fused kernel). Also counted per step: host reads, the `Tensor.cpu`, `.tolist` and `.item` calls the hooks
make (each one a synchronisation when its tensor is on a GPU; calls on host copies count too). Medians over
`--repeats` steps, the settings taking turns step by step, at batches 1, 4, 16 and 64 requests per verify pass
(the server's rows sized for the largest), 64-token trees, E = 128, top-8, 48 MoE layers; per step and per
request. The batch-shared selector (`acceptmoe-shared`) is timed beside AcceptMoE: its sets read the pass's
other requests. So are two methods with token-side admission that count experts (`standard-sd-prefix`, the
composition `acceptmoe-costed`): each step also ranks every request's drafted nodes on the host, cuts SGLang's
links, and reads the pass's unions back to refit each request's growth (docs/sglang.md, "Token-side
admission"); their drafts' survival is a product of random probabilities along each path.

    ./reproduce.sh bench-plugin [--layers 48 --repeats 20 --batches 1 4 16 64]
"""
from __future__ import annotations

import random
import statistics
import time
from contextlib import contextmanager
from types import SimpleNamespace

import torch

from acceptmoe.commands import command, parser
from acceptmoe.costs.verify import DEFAULT_PROFILE
from acceptmoe.methods import B0_METHOD, BASELINE, METHODS, Router
from acceptmoe.serving.sglang import plugin
from acceptmoe.serving.sglang.config import load_config
from acceptmoe.serving.sglang.runtime import Limits, Runtime
from acceptmoe.serving.sglang.tree import links_from_parents

E, K, N, DEPTH = 128, 8, 64, 5
P_HAT = "1.0,0.7,0.5,0.35,0.25,0.2"
SHARED = next(name for name, spec in METHODS.items() if spec.score is not None and spec.score.credits_batch)
# the admitting methods whose rule counts experts: one that routes naturally, one that restricts (the composition)
TRUNCATING, COMPOSED = (next(name for name, spec in METHODS.items() if spec.admits and spec.admission.models_experts
                             and spec.restricts == restricts) for restricts in (False, True))
SETTINGS = {
    BASELINE: {"ACCEPTMOE_METHOD": BASELINE},
    B0_METHOD: {"ACCEPTMOE_METHOD": B0_METHOD, "ACCEPTMOE_P_HAT": P_HAT},
    SHARED: {"ACCEPTMOE_METHOD": SHARED, "ACCEPTMOE_P_HAT": P_HAT},
    f"{B0_METHOD} + trace": {"ACCEPTMOE_METHOD": B0_METHOD, "ACCEPTMOE_P_HAT": P_HAT, "ACCEPTMOE_TRACE": "{trace}"},
    TRUNCATING: {"ACCEPTMOE_METHOD": TRUNCATING, "ACCEPTMOE_COST": str(DEFAULT_PROFILE)},
    COMPOSED: {"ACCEPTMOE_METHOD": COMPOSED, "ACCEPTMOE_P_HAT": P_HAT, "ACCEPTMOE_COST": str(DEFAULT_PROFILE)},
}


def eagle_tree(rng: random.Random) -> list[int]:
    """A 64-node tree of depth <= 5 in topological order (parents earlier), bushy like EAGLE's."""
    parents, depth = [-1], [0]
    for t in range(1, N):
        p = rng.choice([i for i in range(t) if depth[i] < DEPTH])
        parents.append(p)
        depth.append(depth[p] + 1)
    return parents


@contextmanager
def count_host_reads():
    """Count Tensor.cpu / tolist / item calls (host reads) made inside the block."""
    counts = {"n": 0}
    originals = {name: getattr(torch.Tensor, name) for name in ("cpu", "tolist", "item")}

    def wrap(fn):
        def counted(self, *a, **k):
            counts["n"] += 1
            return fn(self, *a, **k)
        return counted
    for name, fn in originals.items():
        setattr(torch.Tensor, name, wrap(fn))
    try:
        yield counts
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)


def routing(topk, hidden, logits):
    w, ids = torch.softmax(logits.float(), -1).topk(K, -1)
    return SimpleNamespace(topk_weights=w / w.sum(-1, keepdim=True), topk_ids=ids.int())


def survival(parents: list[int], rng: random.Random) -> list[float]:
    """Each drafted node's survival (nodes 1..N-1): its parent's times a random draft probability."""
    out = [1.0]
    for p in parents[1:]:
        out.append(out[p] * rng.uniform(0.05, 0.95))
    return out[1:]


def one_step(bs: int, layers: int, rng: random.Random):
    trees = [eagle_tree(rng) for _ in range(bs)]
    scores = torch.tensor([survival(p, rng) for p in trees])                 # [bs, N-1], SGLang's draft layout
    links = [links_from_parents(p) for p in trees]
    spec = SimpleNamespace(draft_token_num=N, retrieve_next_token=torch.tensor([f for f, _ in links]),
                           retrieve_next_sibling=torch.tensor([s for _, s in links]), spec_steps=DEPTH,
                           custom_mask=None, draft_token=None, positions=None)
    batch = SimpleNamespace(spec_info=spec, batch_size=bs,
                            forward_mode=SimpleNamespace(is_target_verify=lambda: True, is_decode=lambda: False))
    logits = [torch.randn(bs * N, E) for _ in range(layers)]
    accept = torch.full((bs, DEPTH + 1), -1)
    accept[:, 0] = torch.arange(bs) * N
    reqs = SimpleNamespace(reqs=[SimpleNamespace(rid=f"r{b}") for b in range(bs)])
    batch.rids = [r.rid for r in reqs.reqs]
    return batch, logits, accept, reqs, scores


def time_steps(settings: dict, bs: int, layers: int, repeats: int, trace_path: str, rows: int) -> list[dict]:
    """Every setting at `bs` requests per pass, in a server whose rows are sized for `rows` requests: the settings
    take turns step by step (each its own runtime), so a load on the machine falls on all of them alike."""
    runtimes = {name: Runtime(load_config({k: v.format(trace=trace_path) for k, v in env.items()}))
                for name, env in settings.items()}
    runner = SimpleNamespace(is_draft_worker=False, device="bench",          # not "cpu": no SGLang backend to check
                             req_to_token_pool=SimpleNamespace(size=rows),
                             max_running_requests=rows,
                             server_args=SimpleNamespace(speculative_num_steps=DEPTH, max_running_requests=rows))
    for runtime in runtimes.values():       # the served model's router and experts (a family's config in SGLang)
        runtime.start(Limits(rows, DEPTH, 0, Router.preset("softmax_topk", K), E))
    rng = random.Random(0)
    topks = [SimpleNamespace(topk_config=SimpleNamespace(
        top_k=K, renormalize=True, use_grouped_topk=False, scoring_func="softmax", correction_bias=None,
        custom_routing_function=None, num_shared_topk_slots=0, routed_scaling_factor=None), layer_id=i, is_draft=False)
        for i in range(layers)]
    steps = [one_step(bs, layers, rng) for _ in range(4)]
    seen = {name: ([], [], []) for name in settings}                      # step, routing alone, host reads
    for r in range(repeats + 3):
        batch, logits, accept, reqs, scores = steps[r % len(steps)]
        links = (batch.spec_info.retrieve_next_token.clone(), batch.spec_info.retrieve_next_sibling.clone())

        def forward(runner, batch):
            return [plugin._around_topk(routing, topks[i], None, logits[i]) for i in range(layers)]  # noqa: B023 (called in this iteration)
        for name, runtime in runtimes.items():
            plugin.RUNTIME = runtime
            batch.spec_info.retrieve_next_token.copy_(links[0])       # admission cut the last setting's links
            batch.spec_info.retrieve_next_sibling.copy_(links[1])
            t0 = time.perf_counter()
            with count_host_reads() as c:
                plugin._after_draft((None, torch.arange(N - 1).expand(len(scores), N - 1), None), [scores[:, None]],
                                    None, None)
                plugin._around_forward(forward, runner, batch)
                plugin._after_sample((None, None, accept), batch.spec_info, reqs)
            t1 = time.perf_counter()
            for i in range(layers):
                routing(None, None, logits[i])
            t2 = time.perf_counter()
            if r >= 3:
                for out, value in zip(seen[name], (t1 - t0, t2 - t1, c["n"]), strict=True):
                    out.append(value)
    rows_out = []
    for name, (total, bare, reads) in seen.items():
        med, route_ms = statistics.median(total) * 1e3, statistics.median(bare) * 1e3
        rows_out.append({"setting": name, "batch": bs, "step_ms": med, "routing_ms": route_ms,
                         "plugin_ms": med - route_ms, "host_reads": statistics.median(reads)})
    return rows_out


@command("bench-plugin", "the SGLang plugin's own host time and host reads per verify step (batch 1, 4, 16, 64)")
def main(argv: list[str] | None = None) -> int:
    import tempfile

    p = parser("bench-plugin")
    p.add_argument("--layers", type=int, default=48)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 64])
    args = p.parse_args(argv)
    torch.manual_seed(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for bs in args.batches:
            rows += time_steps(SETTINGS, bs, args.layers, args.repeats, f"{tmp}/steps.jsonl", max(args.batches))
    print(f"plugin work per verify step ({args.layers} MoE layers, {N}-token trees, E={E}, top-{K}; medians of "
          f"{args.repeats} steps; this CPU)")
    print("| setting | batch | step ms | routing alone ms | plugin ms | plugin ms per request | host reads |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['setting']} | {r['batch']} | {r['step_ms']:.2f} | {r['routing_ms']:.2f} | {r['plugin_ms']:.2f} "
              f"| {r['plugin_ms'] / r['batch']:.3f} | {r['host_reads']:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
