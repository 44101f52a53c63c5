"""Benchmark: selection + constrained routing latency per MoE layer on the CPU.

Side by side in one run, for each method: the per-block torch reference (`select` + `route`), the
prepared fast path (`BlockSelector` called once per layer + `route`), and the fast path on all layers of a
block at once (per-layer cost = total / layers). Prints medians over many calls.

    ./reproduce.sh bench-select [--tokens 64 --experts 128 --top-k 8 --repeats 200]
"""
from __future__ import annotations

import statistics
import time

import torch

from acceptmoe.methods import BlockInfo, BlockSelector, Router, SelectorConfig, route, select
from acceptmoe.commands import command, parser

METHODS = ("standard-sd", "count-b", "moe-spec", "acceptmoe-b", "acceptmoe")


def eagle_like_parents(num_tokens: int, branching: int = 4) -> list[int]:
    """A bushy tree in topological order: node t's parent is (t - 1) // branching."""
    return [-1] + [(t - 1) // branching for t in range(1, num_tokens)]


def median_ms(fn, repeats: int, warmup: int = 10) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def run(tokens: int, experts: int, top_k: int, layers: int, repeats: int, threads: int) -> list[dict]:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    block = BlockInfo.from_parents(eagle_like_parents(tokens))
    router = Router("softmax_topk", top_k=top_k, renormalize=True)
    logits = torch.randn(layers, tokens, experts)
    p_hat = tuple([1.0] + [0.8 ** d for d in range(1, block.max_depth + 1)])
    rows = []
    for method in METHODS:
        budget = max(top_k, experts // 4) if method in ("count-b", "moe-spec", "acceptmoe-b") else None
        cfg = SelectorConfig(budget=budget, p_hat=p_hat)
        z = logits[0]

        def reference():
            route(z, select(method, z, block, router, cfg).eligible, router)

        fast = BlockSelector(method, block, router, cfg, experts)

        def per_layer():
            route(z, fast(z).eligible, router)

        def all_layers():
            route(logits, fast(logits).eligible, router)

        rows.append({
            "method": method,
            "reference_ms": median_ms(reference, max(20, repeats // 4)),
            "prepare_ms": median_ms(lambda: BlockSelector(method, block, router, cfg, experts), repeats),
            "fast_ms": median_ms(per_layer, repeats),
            "all_layers_ms_per_layer": median_ms(all_layers, max(20, repeats // 4)) / layers,
            "set_size": float(fast(logits).eligible.sum(-1).float().mean()),
        })
    return rows


def format_table(rows: list[dict], tokens: int, experts: int, top_k: int, layers: int, threads: int) -> str:
    head = (f"selection + routing per layer, T={tokens} E={experts} k={top_k}, CPU {threads} thread(s), "
            f"median ms ('all layers' = one call on [{layers}, T, E] / {layers})")
    lines = [head, "",
             "| method | reference | prepare (per block) | fast (per layer) | fast, all layers | mean set |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['reference_ms']:.3f} | {r['prepare_ms']:.3f} | {r['fast_ms']:.3f} "
                     f"| {r['all_layers_ms_per_layer']:.3f} | {r['set_size']:.1f} |")
    return "\n".join(lines)


@command("bench-select", "selection + routing latency per layer (reference vs batched path)")
def main(argv: list[str] | None = None) -> int:
    p = parser("bench-select")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--experts", type=int, default=128)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--layers", type=int, default=48)
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    rows = run(a.tokens, a.experts, a.top_k, a.layers, a.repeats, a.threads)
    print(format_table(rows, a.tokens, a.experts, a.top_k, a.layers, a.threads))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
