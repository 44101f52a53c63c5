"""gpu-check's CUDA-graph checks: replayed passes equal the same static passes run eagerly, every capture held.

- `check_graphs` (check `graphs`): the tiny world, every method, steps "graphs" = "static" = "eager" in tokens
  and traces;
- `check_layer_graphs` (check `layer-graphs`): a random model at Qwen3-30B-A3B's layer shape in bf16 (resident
  experts: torch's grouped_mm on sm_90 / sm_100, else the experts kernel, `expert_path`), its decode and verify
  passes (natural routing and AcceptMoE's fused verifier) captured with steps "graphs", each replayed on two
  inputs against the static pass on its own cache.
Both FAIL on any capture that fell back to eager (`StepGraphs.describe()["fallbacks"]`) and when nothing was
replayed (`graphs_verdict`); without CUDA nothing is captured: SKIP with the reason (`check_graphs` still
compares static with eager there).
"""
from __future__ import annotations

from pathlib import Path

import torch

from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.graphs import StepGraphs
from acceptmoe.methods import METHODS, Variant

from .base import P_HAT, verdict
from .layer import QWEN3_30B_LAYERS, layer_work

LAYER_TOL = 1e-2        # replay vs static, max |difference| / max |logit|: far below a replay that read stale inputs


def graphs_verdict(agree: bool, steps: dict | None) -> str:
    """FAIL on any disagreement; without captures (no CUDA: steps None) SKIP; else PASS only if graphs were
    replayed and no capture fell back."""
    if not agree:
        return "FAIL"
    if steps is None:
        return "SKIP"
    return verdict(steps["replays"] > 0 and not steps["fallbacks"])


def check_graphs(device, model_dir: Path = Path("models/tiny")) -> dict:
    """On the tiny world, every method: steps="graphs" gives the tokens and the trace of steps="static" (the
    same passes run eagerly), whose tokens equal "eager"'s; graphs were replayed and no capture fell back.
    Without CUDA only static = eager runs: FAIL if they differ, else SKIP (the graphs themselves unchecked)."""
    from acceptmoe.costs.verify import load_profile
    from acceptmoe.engine import load_engine
    device = torch.device(device)
    modes = ("eager", "static", "graphs") if device.type == "cuda" else ("eager", "static")
    engines = {mode: load_engine(model_dir, device=device, steps=mode) for mode in modes}
    prompts = [[1, 17, 42, 99, 7, 300, 12], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]]
    rows = []
    for name in METHODS:
        for i, ids in enumerate(prompts):
            out = {}
            for mode, engine in engines.items():
                plan = Variant(name).bind(engine.fit, commitment=P_HAT, b0=24, cost=load_profile())
                gen = engine.generate(ids, plan, 24, GenerationOptions(ignore_eos=True))
                out[mode] = (gen.tokens, gen.trace.lines())
            row = {"method": name, "prompt": i, "static_equal_eager": out["static"][0] == out["eager"][0]}
            if "graphs" in out:
                row["graphs_equal_static"] = out["graphs"] == out["static"]
            rows.append(row)
    steps = engines["graphs"].steps.describe() if "graphs" in engines else None
    agree = all(r["static_equal_eager"] and r.get("graphs_equal_static", True) for r in rows)
    return {"check": "graphs", "verdict": graphs_verdict(agree, steps), "rows": rows, "steps": steps,
            **({} if steps else {"reason": "CUDA graphs need CUDA (static = eager checked)"})}


def check_layer_graphs(device, shape: dict = QWEN3_30B_LAYERS, dtype=torch.bfloat16, context: int = 256,
                       tree_tokens: int = 64) -> dict:
    """Decode and verify passes of a random model of `shape` captured as CUDA graphs (module docstring): each
    replay's logits within LAYER_TOL of the static pass's on the same inputs (and whether bit for bit), no
    capture fallen back. SKIP without CUDA."""
    device = torch.device(device)
    if device.type != "cuda":
        return {"check": "layer-graphs", "verdict": "SKIP", "reason": "CUDA graphs need CUDA"}
    work = layer_work(device, shape, dtype, context, tree_tokens)
    state = (work.model.store.tally,)
    static, graphs = StepGraphs(device, "static", state=state), StepGraphs(device, "graphs", state=state)
    rows = []
    for (name, (want_step, inputs)), (_, (step, _)) in zip(work.passes(static).items(), work.passes(graphs).items(),
                                                           strict=True):
        for i, x in enumerate(inputs):
            want = static.run(want_step, x)[0].float()                                 # [T, V]
            got = graphs.run(step, x)[0].float()
            err = float((got - want).abs().max() / want.abs().max())
            rows.append({"pass": name, "input": i, "rel_max_err": err, "bit_equal": torch.equal(got, want)})
    steps = graphs.describe()
    return {"check": "layer-graphs", "verdict": graphs_verdict(all(r["rel_max_err"] <= LAYER_TOL for r in rows), steps),
            "shape": {**shape, "dtype": str(dtype).removeprefix("torch.")}, "tolerance": LAYER_TOL, "rows": rows,
            "steps": steps}
