"""gpu-check's engine checks on the tiny world: lossless speculative decoding, the offloaded store's pinned host
memory and its counted loads, and the replay of recorded routes at a paper expert shape.

- lossless: Standard SD = Vanilla AR token for token, resident and offloaded;
- pinned:   the offloaded store's host experts are page-locked, the pinned bytes are those of the experts
            (`pinned_bytes() <= PINNED_SLACK * host_expert_bytes()`, and not 0 on CUDA), and a generation's loads
            were counted and their copies timed (the copies' seconds give the load bandwidth; the stall seconds
            are reported beside them);
- replay:   Standard SD and AcceptMoE routes recorded on the offloaded engine, replayed through the same store at
            Qwen3-30B-A3B's expert shape in bf16 (`experiments.replay`): the replayed pool equals the recorded one
            at every pass.
"""
from __future__ import annotations

from pathlib import Path

from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.methods import B0_METHOD, BASELINE, REFERENCE, Variant

from .base import P_HAT, verdict

PINNED_SLACK = 1.1      # pinned bytes may exceed the experts' by alignment and the store's read buffer, not more


def check_lossless(engines: dict, prompts: list[list[int]], tokens: int, variant: Variant = Variant(BASELINE)) -> dict:
    """`variant` (Standard SD: lossless by construction) on every engine (resident and offloaded) = Vanilla AR
    on the resident one, token for token."""
    rows, ok = [], True
    for i, ids in enumerate(prompts):
        resident = engines["resident"]
        ar = resident.generate(ids, Variant(REFERENCE).bind(resident.fit), tokens,
                               GenerationOptions(ignore_eos=True)).tokens
        for store, eng in engines.items():
            plan = variant.bind(eng.fit, commitment=P_HAT, b0=eng.router.top_k)
            sd = eng.generate(ids, plan, tokens, GenerationOptions(ignore_eos=True, trace_layers=False))
            same = sd.tokens == ar
            rows.append({"prompt": i, "store": store, "equal": same, "tau": sd.mean_accept_length})
            ok &= same
    return {"check": "lossless", "verdict": verdict(ok), "variant": variant.name, "tokens": tokens, "rows": rows}


def check_pinned(engine) -> dict:
    """The offloaded store's pinned host memory against its experts' bytes (both printed), and a generation's
    loads counted and timed. Pinning is a CUDA matter: on a CPU the bytes are reported and the verdict is SKIP."""
    store = engine.model.store
    tensors = [t for layer in store.host.values() for t in layer.values()]
    s = store.stats()["total"]
    pinned = all(t.is_pinned() for t in tensors) if store.cuda else None
    gbps = s["bytes"] / s["copy_s"] / 1e9 if s["copy_s"] > 0 else None
    sizes = {"pinned_bytes": store.pinned_bytes(), "host_expert_bytes": store.host_expert_bytes()}
    return {"check": "pinned", "verdict": pinned_verdict(pinned, s["loads"], s["copy_s"], **sizes), "pinned": pinned,
            **sizes, "loads": s["loads"], "bytes": s["bytes"], "copy_s": s["copy_s"], "wait_s": s["wait_s"],
            "load_gb_per_s": gbps, "hit_rate": s["hit_rate"]}


def pinned_verdict(pinned: bool | None, loads: int, copy_s: float, pinned_bytes: int, host_expert_bytes: int) -> str:
    """SKIP without CUDA (pinned None); PASS only for pinned host experts holding between 1 byte and PINNED_SLACK
    times their bytes in page-locked memory, whose loads were counted and their copies timed."""
    if pinned is None:
        return "SKIP"
    sized = 0 < pinned_bytes <= PINNED_SLACK * host_expert_bytes
    return verdict(pinned and sized and loads > 0 and copy_s > 0)


def check_replay(engine, prompts: list[list[int]], tokens: int, device, folder: Path,
                 shape: str = "qwen3-30b-a3b") -> tuple[dict, list[dict]]:
    """Routes of Standard SD and AcceptMoE recorded on `engine` (offloaded), replayed at `shape` on `device`
    (`experiments.replay`): PASS when the replayed pool agrees with the recorded one at every pass; the
    records (ms per target pass beside the bytes / bandwidth bounds) go to the timing table."""
    from acceptmoe.experiments.replay import report
    from acceptmoe.experiments.replay.config import load_replay_config
    from acceptmoe.experiments.replay.runner import run_replay
    from acceptmoe.experiments.spine.config import Pair
    from acceptmoe.experiments.spine.layout import RunPaths
    from acceptmoe.experiments.spine.runs import open_run
    paths = RunPaths(folder / "recorded")
    for method in (REFERENCE, B0_METHOD):
        plan = Variant(method).bind(engine.fit, commitment=P_HAT)
        for i, ids in enumerate(prompts[:2]):
            gen = engine.generate(ids, plan, tokens, GenerationOptions(ignore_eos=True, record_routes=True))
            gen.routes.save(paths.routes("gpu-check", Pair("tiny", "prompts"), plan.name, 0, i))
    cfg = load_replay_config("tiny", {"source": str(paths.root), "shape": shape, "device": str(device),
                                      "generations": 2, "passes_per_generation": 8, "repeats": 2})
    run = open_run("replay", "tiny", cfg, root=folder / "replay")
    run_replay(cfg, run, show_progress=False)
    recs = report.records(run.path)
    offloaded = [r for r in recs if r["store"] != "resident"]
    agreed = [r["counters_match"].split("/") for r in offloaded]                  # "agreeing/compared"
    ok = bool(agreed) and all(a == n and n != "0" for a, n in agreed)
    return {"check": "replay", "verdict": verdict(ok), "shape": shape,
            "counters": {r["variant"]: r["counters_match"] for r in offloaded}}, recs
