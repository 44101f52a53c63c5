"""GPU check of the SGLang plugin: the tiny world served with EAGLE-3 under each method, CUDA graphs off and on,
compared with the native engine on the same prompts.

    python -m acceptmoe.serving.sglang.check [--world models/tiny] [--prompts 4] [--tokens 48]

Prints one table row per (method, graphs): mean accept length tau, mean set size over layers and steps, and
whether the greedy tokens equal the native engine's (Standard SD) and the same method with graphs off.
Needs SGLang and a CUDA GPU (the import of `engine` says so otherwise). The commitment table is calibrated
from the Standard SD run's own SGLang traces, and the fixed budgets are AcceptMoE's mean set size (B0's rule
of thumb), so the check exercises calibration from SGLang traces as well.
"""
from __future__ import annotations

import argparse
import random
from pathlib import Path

from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.trace import commitment_table
from acceptmoe.engine.tree import TreeShape
from acceptmoe.methods import B0_METHOD, CALIBRATION, METHODS, Variant

# natural routing first (its traces give p_hat), then the self-sized method (its set sizes give the budget),
# then the fixed-budget methods at that budget
ORDER = (CALIBRATION, B0_METHOD) + tuple(n for n, s in METHODS.items() if s.needs_budget)


def mean_set_size(gens) -> float:
    sizes = [s for g in gens for b in g.trace.blocks if b.layers for s in b.layers["set_size"]]
    return sum(sizes) / len(sizes) if sizes else float("nan")


def gpu_check(world: Path = Path("models/tiny"), num_prompts: int = 4, max_new_tokens: int = 48,
              tree: TreeShape = TreeShape(5, 10, 64), seed: int = 0) -> list[dict]:
    from acceptmoe.engine.engine import load_engine

    from .engine import open_engine

    rng = random.Random(seed)
    prompts = [[1] + [rng.randrange(3, 1000) for _ in range(rng.randrange(8, 24))] for _ in range(num_prompts)]
    native = load_engine(world, device="cuda", tree=tree)
    base = Variant(CALIBRATION).bind(native.fit)
    want = [native.generate(p, base, max_new_tokens, GenerationOptions(ignore_eos=True)).tokens for p in prompts]
    dtype = native.model.dtype
    native.close()                               # one engine at a time holds the device
    rows, tokens = [], {}
    for graphs in (False, True):
        # the native engine runs the checkpoint's dtype (fp32 for the tiny world): SGLang too, like with like
        backend = open_engine(world / "target", world / "draft", device="cuda", dtype=dtype, tree=tree,
                              disable_cuda_graph=not graphs, requests=num_prompts,
                              request_tokens=max(len(p) for p in prompts) + max_new_tokens)
        p_hat, budget = None, None
        for method in ORDER:
            plan = Variant(method).bind(backend.fit, commitment=p_hat, b0=budget)
            gens = backend.generate_many(prompts, plan, max_new_tokens, GenerationOptions(ignore_eos=True))
            if method == CALIBRATION:
                p_hat = commitment_table([g.trace for g in gens]).p_hat
            if method == B0_METHOD:
                budget = max(8, round(mean_set_size(gens)))
            toks = [g.tokens for g in gens]
            tokens[(method, graphs)] = toks
            taus = [g.mean_accept_length for g in gens]
            rows.append({"method": METHODS[method].label, "graphs": graphs, "tau": sum(taus) / len(taus),
                         "set_size": mean_set_size(gens),
                         "tokens=native": toks == want if method == CALIBRATION else None,
                         "tokens=graphs off": toks == tokens[(method, False)] if graphs else None})
        backend.close()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=Path, default=Path("models/tiny"))
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=48)
    args = ap.parse_args(argv)
    rows = gpu_check(args.world, args.prompts, args.tokens)
    cols = list(rows[0])
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols))
    bad = [r for r in rows if r["tokens=native"] is False or r["tokens=graphs off"] is False]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
