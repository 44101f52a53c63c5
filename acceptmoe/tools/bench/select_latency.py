"""Benchmark: selection + constrained routing latency per MoE layer on the CPU.

Side by side in one run, for each method: the per-block torch reference (`select` + `route`), the batched
verifier's torch backend (`make_verifier("torch", ...)`: `prepare` once per verification step, then one
call per layer on one block) and the same verifier on several blocks at once (cost per block). The Triton
backend's compiled form is measured by `bench-kernel`. Prints medians over many calls, each on the next of
`POOL` different logits tensors: timing one tensor again and again lets the CPU learn its sort (branch
prediction) and reports about a third of the real cost.

    ./reproduce.sh bench-select [--tokens 64 --experts 128 --top-k 8 --blocks 4 --repeats 200]
"""
from __future__ import annotations

import itertools
import statistics
import time

import torch

from acceptmoe.commands import command, parser
from acceptmoe.kernels import make_verifier
from acceptmoe.methods import BlockInfo, Fit, Router, Variant, route, select, verifier_methods

SPECULATING = verifier_methods()   # an admitting method verifies with its selector's verifier
POOL = 64                         # distinct router-logit tensors the timed calls cycle through


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


def run(tokens: int, experts: int, top_k: int, blocks: int, repeats: int, threads: int) -> list[dict]:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    block = BlockInfo.from_parents(eagle_like_parents(tokens))
    router = Router.preset("softmax_topk", top_k=top_k, renormalize=True)
    pool = [torch.randn(blocks, tokens, experts) for _ in range(POOL)]              # [B, T, E] each
    fresh = itertools.cycle(range(POOL))
    p_hat = tuple([1.0] + [0.8 ** d for d in range(1, block.max_depth + 1)])
    rows = []
    for method in SPECULATING:
        fit = Fit(router, experts, max_depth=block.max_depth)
        plan = Variant(method).bind(fit, commitment=p_hat, b0=max(top_k, experts // 4))

        def reference():
            z = pool[next(fresh)][0]
            route(z, select(plan, z, block).eligible, router)  # noqa: B023 (called in this iteration)

        one = make_verifier("torch", plan)
        one.prepare([block])
        many = make_verifier("torch", plan)
        many.prepare([block] * blocks)
        rows.append({
            "method": method,
            "reference_ms": median_ms(reference, max(20, repeats // 4)),
            "prepare_ms": median_ms(lambda: one.prepare([block]), repeats),  # noqa: B023 (called in this iteration)
            "verifier_ms": median_ms(lambda: one(pool[next(fresh)][:1]), repeats),  # noqa: B023 (called in this iteration)
            "batched_ms_per_block": median_ms(lambda: many(pool[next(fresh)]), max(20, repeats // 4)) / blocks,  # noqa: B023 (called in this iteration)
            "set_size": float(many(pool[0]).eligible.sum(-1).float().mean()),
        })
    return rows


def format_table(rows: list[dict], tokens: int, experts: int, top_k: int, blocks: int, threads: int) -> str:
    head = (f"selection + routing per layer, T={tokens} E={experts} k={top_k}, CPU {threads} thread(s), "
            f"median ms ('{blocks} blocks' = one call on [{blocks}, T, E] / {blocks})")
    lines = [head, "",
             f"| method | reference | prepare (per step) | torch verifier (per layer) | {blocks} blocks, per block "
             f"| mean set |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['reference_ms']:.3f} | {r['prepare_ms']:.3f} | {r['verifier_ms']:.3f} "
                     f"| {r['batched_ms_per_block']:.3f} | {r['set_size']:.1f} |")
    return "\n".join(lines)


@command("bench-select", "selection + routing latency per layer (reference vs batched path)")
def main(argv: list[str] | None = None) -> int:
    p = parser("bench-select")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--experts", type=int, default=128)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    rows = run(a.tokens, a.experts, a.top_k, a.blocks, a.repeats, a.threads)
    print(format_table(rows, a.tokens, a.experts, a.top_k, a.blocks, a.threads))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
