"""gpu-check's timing rows: median ms per step (`gpu_experts.timed`: CUDA events on CUDA) and aten operations per
step, on the tiny world (the engine's own steps) and on a random MoE of a layer shape (`layer`). Each row that
ran through `StepGraphs` names the mode that actually ran (`ran_as`): "graphs", "static", or
"graphs->eager (reason)" where a capture fell back, never a requested mode that did not run.
"""
from __future__ import annotations

import statistics

import torch

from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.graphs import StepGraphs
from acceptmoe.methods import B0_METHOD, BASELINE, REFERENCE, Variant

from ..gpu_experts import timed
from .base import P_HAT
from .layer import QWEN3_30B_LAYERS, layer_work


def aten_ops(fn) -> int:
    from acceptmoe.tools.bench.engine_speed import AtenCounter
    with AtenCounter() as c:
        fn()
    return c.total


def ran_as(now: dict, before: dict | None = None) -> str:
    """The mode passes ran in, from `StepGraphs.describe()` dicts: its mode, or "graphs->eager (reasons)" for the
    captures that fell back (those recorded in `now` since `before`, taken earlier; all of them when None)."""
    earlier = before["fallbacks"] if before else {}
    reasons = sorted({why for key, why in now["fallbacks"].items() if key not in earlier})
    return f"{now['mode']}->eager ({'; '.join(reasons)})" if reasons else now["mode"]


def _row(step: str, fn, device, repeats: int) -> dict:
    return {"step": step, "ms": timed(fn, device, repeats), "aten_ops": aten_ops(fn)}


def time_layer_shape(device, shape: dict = QWEN3_30B_LAYERS, dtype=torch.bfloat16, context: int = 256,
                     tree_tokens: int = 64, repeats: int = 20) -> list[dict]:
    """Decode step, verify step (natural and AcceptMoE routing), selection per layer, aten ops per step, on a
    random model of `shape` after a `context`-token prefill: eager, then the same passes through StepGraphs
    (captured CUDA graphs on CUDA, the static passes run eagerly elsewhere), each labelled as it ran."""
    device = torch.device(device)
    work = layer_work(device, shape, dtype, context, tree_tokens)
    model, verifier, (one, _), (tree, _) = work.model, work.verifier, work.decode, work.verify
    cache = work.prefilled(context + tree_tokens + 1)

    def policy(layer, logits):
        out = verifier(logits[None], None)
        return out.ids[0], out.weights[0]

    fwd = lambda x, **kw: lambda: model.forward(x["ids"], x["positions"], cache, context, **kw)      # noqa: E731
    E = model.config.moe.num_experts
    logits = torch.randn(tree_tokens, E, generator=torch.Generator().manual_seed(1)).to(device)
    rows = [_row("decode step (1 token)", fwd(one), device, repeats),
            _row(f"verify step ({tree_tokens} tokens, natural routing)", fwd(tree, mask=tree["mask"]), device, repeats),
            _row(f"verify step ({tree_tokens} tokens, AcceptMoE)", fwd(tree, mask=tree["mask"], policy=policy),
                 device, repeats),
            _row(f"selection + routing, one layer ({model.config.num_layers} layers)",
                 lambda: verifier(logits[None], None), device, repeats)]
    steps = StepGraphs(device, "graphs" if device.type == "cuda" else "static", state=(model.store.tally,))
    names = {"decode": "decode step (1 token", "verify, natural routing": f"verify step ({tree_tokens} tokens, "
             "natural routing", "verify, AcceptMoE": f"verify step ({tree_tokens} tokens, AcceptMoE"}
    for name, (step, (x, _)) in work.passes(steps).items():
        before = steps.describe()
        row = _row("", lambda: steps.run(step, x), device, repeats)  # noqa: B023 (called in this iteration)
        rows.append({**row, "step": f"{names[name]}, {ran_as(steps.describe(), before)})"})
    return rows


def time_tiny(engine, prompts: list[list[int]], tokens: int) -> list[dict]:
    """Median target-step time (drafting included for SD), tokens/s, tau and aten ops per step, labelled with the
    mode the engine's steps ran in (`ran_as`: a fallback so far in this engine shows; with CUDA graphs the aten
    count is that of a replay)."""
    from acceptmoe.tools.bench.engine_speed import ours_ops
    rows = []
    for method in (REFERENCE, BASELINE, B0_METHOD):
        variant = Variant(method).bind(engine.fit, commitment=P_HAT)
        steps, n, wall, taus = [], 0, 0.0, []
        for ids in prompts:
            t0 = engine.clock()
            g = engine.generate(ids, variant, tokens, GenerationOptions(ignore_eos=True, trace_layers=False))
            wall += engine.clock() - t0
            steps += g.step_times
            n += len(g.tokens)
            taus.append(g.mean_accept_length)
        ops = ours_ops(engine, prompts[0], variant)
        rows.append({"step": f"tiny {method} step ({ran_as(engine.steps.describe())})",
                     "ms": 1e3 * statistics.median(steps), "tokens_per_s": n / wall, "tau": statistics.mean(taus),
                     "aten_ops": ops})
    return rows
