"""`./reproduce.sh profile-verify`: the verify-cost profile of this machine (docs/method.md, "Token-side
admission"; the model and the fit: `acceptmoe.costs.verify`).

    ./reproduce.sh profile-verify                                  # the tiny world on CPU -> results/profile-verify/
    ./reproduce.sh profile-verify --model models/tiny --device cuda --out my-gpu.json
    ./reproduce.sh profile-verify --store offloaded --slots 32     # adds the fetch cost of the X-slot pool

It prints every timed point and the fitted parameters, and writes them as JSON (`--out`); a world that admits
reads such a file (`verify_cost:` in its preset; default: the committed tiny-world CPU profile,
acceptmoe/costs/profiles/tiny-cpu.json).
"""
from __future__ import annotations

import platform
import time
from pathlib import Path

import torch

from acceptmoe.commands import command, parser

DEFAULT_TOKENS = (1, 2, 4, 8, 16, 32)


@command("profile-verify", "time the native engine's verify pass over tree sizes and expert unions, fit the verify-cost model, save it as JSON")
def main(argv: list[str] | None = None) -> int:
    p = parser("profile-verify")
    p.add_argument("--model", default="models/tiny", help="folder with target/ (and draft/)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--store", default="resident", choices=("resident", "offloaded"))
    p.add_argument("--slots", type=int, default=None, help="X slots per layer of the offloaded store")
    p.add_argument("--tokens", type=int, nargs="+", default=list(DEFAULT_TOKENS), help="tree sizes (root included)")
    p.add_argument("--budgets", type=int, nargs="+", default=None,
                   help="fixed budgets (expert-union caps); default: top_k, 2 top_k, 4 top_k, ... below E")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--out", type=Path, default=Path("results/profile-verify/profile.json"))
    a = p.parse_args(argv)
    if min(a.tokens) < 1 or a.repeats < 1:
        p.error("--tokens and --repeats take positive numbers")
    if a.threads:
        torch.set_num_threads(a.threads)
    from acceptmoe.costs.verify import fit, profile, save_profile
    from acceptmoe.engine import load_engine
    from acceptmoe.engine.device import check_device

    check_device(a.device)
    engine = load_engine(a.model, device=a.device, store=a.store, slots=a.slots)
    k, E = engine.fit.router.top_k, engine.num_experts
    budgets = a.budgets or [b for b in (k, 2 * k, 4 * k, 8 * k, 16 * k) if b < E]
    bad = [b for b in budgets if not k <= b <= E]
    if bad:
        p.error(f"--budgets {bad}: each budget must satisfy top_k={k} <= B <= E={E}")
    samples = profile(engine, sorted(set(a.tokens)), budgets, a.repeats)
    store = engine.model.store
    expert_bytes = round(sum(store.expert_bytes.values()) / len(store.expert_bytes))
    source = (f"{Path(a.model).name} on {a.device} ({platform.machine()}, {torch.get_num_threads()} threads), "
              f"{a.store} store, profiled {time.strftime('%Y-%m-%d')}")
    cost = fit(samples, expert_bytes, len(store.layer_ids), source)
    meta = {"model": str(a.model), "device": a.device, "store": a.store, "slots": a.slots, "repeats": a.repeats,
            "threads": torch.get_num_threads(), "engine": engine.describe()}
    save_profile(a.out, cost, samples, meta)
    print(f"{'tokens':>6} {'budget':>6} {'experts/layer':>13} {'fetched/layer':>13} {'ms':>8} {'model ms':>8}")
    for s in samples:
        model_s = cost.seconds(s["tokens"], s["experts"], s["fetched"])
        print(f"{s['tokens']:>6} {s['budget'] or '-':>6} {s['experts']:>13.1f} {s['fetched']:>13.1f} "
              f"{1e3 * s['seconds']:>8.2f} {1e3 * model_s:>8.2f}")
    print(f"fixed {1e3 * cost.fixed_s:.3f} ms, per token {1e3 * cost.per_token_s:.4f} ms, per expert read "
          f"{1e3 * cost.per_byte_s * cost.expert_bytes * cost.moe_layers:.4f} ms per layer-set "
          f"({cost.expert_bytes} B per expert, {cost.moe_layers} MoE layers)"
          + (f", per expert fetched {1e3 * cost.fetch_per_byte_s * cost.expert_bytes * cost.moe_layers:.4f} ms"
             if cost.fetch_per_byte_s is not None else ""))
    print(f"written: {a.out}")
    return 0
