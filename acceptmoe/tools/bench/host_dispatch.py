"""Benchmark: the host time of one target pass's dispatch through `StepGraphs`, at a paper model's shape.

What a CUDA-graph replay costs the host before `graph.replay()` (`StepGraphs.dispatch`: the key lookup, the
step compared with the one the graph was captured under, the inputs copied into the key's static buffers),
for the target's decode pass (1 token) and its verify pass (a 64-token tree, AcceptMoE's verifier, traced,
three aux layers), each call with a fresh step as the engine builds one per pass. The model is a skeleton:
a real `MoEModel` at the model's released config (layers, hidden size, heads, experts, vocabulary) whose
weights, experts and KV cache live on the `meta` device (nothing allocated), so the step, its hash, its
comparison and its repr are those of the real model; the inputs and buffers are on this CPU (a GPU's buffer
copies are kernel launches instead). Medians, p10 and p90 over `--calls` calls, in microseconds.

    ./reproduce.sh bench-host --shape qwen3-30b-a3b [--calls 2000 --context 300 --json]

`--shape` takes qwen3-30b-a3b, gpt-oss-120b (the paper's targets: their released config.json, shipped under
configs/models/<hub id>/), tiny or a model folder holding config.json. `--json` prints one JSON object
(`dispatch_us_median` is the verify pass's).
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from acceptmoe.commands import command, parser
from acceptmoe.costs.shapes import BUILTIN_FOLDERS
from acceptmoe.engine.config import ModelConfig
from acceptmoe.engine.graphs import StepGraphs
from acceptmoe.engine.model import MoEModel, _build_skeleton
from acceptmoe.engine.passes import TargetPass
from acceptmoe.engine.store import ExpertMath, make_store
from acceptmoe.errors import UserError
from acceptmoe.experiments.spine.options import positive_int
from acceptmoe.experiments.spine.runs import REPO
from acceptmoe.kernels import make_verifier
from acceptmoe.methods import B0_METHOD, Fit, Variant

TREE_TOKENS, DEPTH = 64, 5                    # the paper's verify pass: a 64-token tree of depth <= 5
P_HAT = (1.0, 0.8, 0.64, 0.512, 0.41, 0.33)
WARMUP = 10                                   # calls left out: the first makes the key's buffers

TARGETS = {"qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B-Instruct-2507",     # the paper's targets by hub id: their
           "gpt-oss-120b": "openai/gpt-oss-120b"}                    # released config.json under SHIPPED
SHIPPED = REPO / "configs" / "models"


def model_config(shape: str) -> ModelConfig:
    """A paper target's released config (`TARGETS`), `tiny`, or a model folder's config.json."""
    folder = SHIPPED / TARGETS[shape] if shape in TARGETS else BUILTIN_FOLDERS.get(shape, Path(shape))
    if not (folder / "config.json").is_file():
        raise UserError(f"unknown shape {shape!r}; valid: {', '.join([*TARGETS, *BUILTIN_FOLDERS])}, or a model "
                        f"folder holding config.json")
    return ModelConfig.from_folder(folder)


def skeleton(cfg: ModelConfig) -> MoEModel:
    """A MoEModel of `cfg` with every weight, expert and counter on the meta device (no memory)."""
    dtype = cfg.dtype
    state = dict(_build_skeleton(nn.Module(), cfg).named_parameters())                  # meta tensors
    E, H, I = cfg.moe.num_experts, cfg.hidden_size, cfg.moe.intermediate_size
    experts = {l: {"w1": torch.empty(E, 2 * I, H, dtype=dtype, device="meta"),
                   "w2": torch.empty(E, H, I, dtype=dtype, device="meta")} for l in cfg.moe.layer_ids}
    math = ExpertMath(cfg.moe.activation, dtype, cfg.moe.swiglu_alpha, cfg.moe.swiglu_limit)
    return MoEModel(cfg, make_store("resident", math, experts, E, "meta"), state, "meta", dtype)


def passes(model: MoEModel, context: int) -> dict[str, tuple]:
    """name -> (make a fresh step, its inputs): the decode pass and the traced AcceptMoE verify pass after
    `context` committed tokens, over the cache bucket each reads (as `Engine` builds them)."""
    cfg = model.config
    cache = model.new_cache(1 << (context + TREE_TOKENS).bit_length())                 # meta: nothing allocated
    plan = Variant(B0_METHOD).bind(Fit(model.router, cfg.moe.num_experts, DEPTH), commitment=P_HAT)
    verifier = make_verifier("torch", plan, "cpu")
    aux = tuple(range(3))                     # three captured layers, as an EAGLE-3 verify pass (which ones
                                              # does not change the dispatch)
    decode = {"ids": torch.tensor([5]), "positions": torch.tensor([context]), "start": context}
    verify = {"ids": torch.arange(TREE_TOKENS), "positions": torch.arange(context, context + TREE_TOKENS),
              "start": context, "mask": torch.ones(TREE_TOKENS, TREE_TOKENS, dtype=torch.bool).tril()}
    return {
        "decode": (lambda: TargetPass(model, cache.upto(context + 1)), decode),
        "verify": (lambda: TargetPass(model, cache.upto(context + TREE_TOKENS), verifier, False, True, aux),
                   verify),
    }


def time_dispatch(make, inputs: dict, calls: int) -> dict:
    """Microseconds of `StepGraphs.dispatch` per call (graphs mode; a fresh step each call, made untimed)."""
    steps = StepGraphs("cpu", "graphs")
    times = []
    for _ in range(calls + WARMUP):
        step = make()
        t0 = time.perf_counter_ns()
        steps.dispatch(step, inputs)
        times.append((time.perf_counter_ns() - t0) / 1e3)
    times = sorted(times[WARMUP:])
    rank = lambda q: times[round(q * (len(times) - 1))]  # noqa: E731
    return {"tokens": int(inputs["ids"].shape[0]), "median_us": statistics.median(times),
            "p10_us": rank(0.1), "p90_us": rank(0.9), "calls": calls}


def run(shape: str, calls: int, context: int) -> dict:
    cfg = model_config(shape)
    model = skeleton(cfg)
    rows = {name: time_dispatch(make, inputs, calls) for name, (make, inputs) in passes(model, context).items()}
    return {"shape": shape, "layers": cfg.num_layers, "hidden_size": cfg.hidden_size, "experts": cfg.moe.num_experts,
            "top_k": cfg.moe.top_k, "vocab_size": cfg.vocab_size, "context": context, "calls": calls,
            "dispatch_us_median": rows["verify"]["median_us"], "passes": rows}


def format_table(res: dict) -> str:
    lines = [f"host time of one target-pass dispatch (StepGraphs.dispatch: key lookup + input copies), "
             f"{res['shape']} skeleton ({res['layers']} layers, hidden {res['hidden_size']}, {res['experts']} experts "
             f"top-{res['top_k']}, vocab {res['vocab_size']}), context {res['context']}, {res['calls']} calls, "
             f"this CPU", "",
             "| pass | tokens | median us | p10 us | p90 us |", "|---|---|---|---|---|"]
    for name, r in res["passes"].items():
        lines.append(f"| {name} | {r['tokens']} | {r['median_us']:.1f} | {r['p10_us']:.1f} | {r['p90_us']:.1f} |")
    return "\n".join(lines)


@command("bench-host", "host time of one CUDA-graph dispatch (key lookup + input copies) per target pass, "
                       "decode and verify, at a paper model's shape (a meta-device skeleton)")
def main(argv: list[str] | None = None) -> int:
    p = parser("bench-host")
    p.add_argument("--shape", default="qwen3-30b-a3b",
                   help=f"{' | '.join([*TARGETS, *BUILTIN_FOLDERS])} | a model folder holding config.json")
    p.add_argument("--calls", type=positive_int, default=2000, help="timed dispatches per pass (default 2000)")
    p.add_argument("--context", type=positive_int, default=300,
                   help="committed tokens before the pass (default 300)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = p.parse_args(argv)
    res = run(args.shape, args.calls, args.context)
    print(json.dumps(res, sort_keys=True) if args.json else format_table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
