"""B0 per (model, task) from AcceptMoE routing traces only (never correctness).

METHOD.md: the pooled mean AcceptMoE set size over every block and layer of the first `b0.prompts` (50)
evaluation prompts, rounded to nearest with halves up; if its bootstrap interval (over prompts) crosses a
rounding boundary, the first `b0.fallback_prompts` (100) are used. With fewer evaluation prompts than that
(a `--limit` run) all of them are used, and the decision records it (`limited`).

    ./reproduce.sh b0 --run results/table1/tiny/<run-id>     # recompute and check every pair's B0
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from acceptmoe.evals.stats import choose_b0, totals_and_counts
from acceptmoe.experiments.runs import SampleLog, write_json
from acceptmoe.engine.trace import Trace
from acceptmoe.methods import B0_METHOD
from acceptmoe.commands import command, parser

from .common import RunPaths
from .config import B0Config, Table1Config, from_saved
from .tracelog import TraceLog


def set_sizes(trace: Trace) -> list[int]:
    """Every set size of one generation: one per (block, layer)."""
    if any(b.layers is None for b in trace.blocks):
        raise ValueError(f"trace {trace.meta.get('key')} has blocks without per-layer fields: B0 needs "
                         f"acceptmoe traces recorded with trace_layers=True")
    return [s for b in trace.blocks for s in b.layers["set_size"]]


def in_eval_order(traces: Sequence[Trace]) -> list[Trace]:
    """Traces sorted by evaluation index; the indices must be 0..n-1 (the first n prompts, none missing)."""
    ordered = sorted(traces, key=lambda t: t.meta["index"])
    indices = [t.meta["index"] for t in ordered]
    if indices != list(range(len(ordered))):
        raise ValueError(f"B0 needs the first prompts in order, found evaluation indices {indices[:10]}...")
    return ordered


def decide_b0(traces: Sequence[Trace], cfg: B0Config) -> dict:
    """The B0 decision for one pair from its acceptmoe traces (any order), as a JSON-ready dict."""
    ordered = in_eval_order(traces)
    n = len(ordered)
    if n == 0:
        raise ValueError("no acceptmoe traces: run acceptmoe on the evaluation prompts before deciding B0")
    first, fallback = min(cfg.prompts, n), min(cfg.fallback_prompts, n)
    totals, counts = totals_and_counts([set_sizes(t) for t in ordered[:fallback]])
    d = choose_b0(totals, counts, first=first, fallback=fallback, n_resamples=cfg.resamples,
                  confidence=cfg.confidence, seed=cfg.seed)
    iv = d.interval
    return {"b0": d.b0, "mean_set_size": iv.estimate, "low": iv.low, "high": iv.high, "n_prompts": d.n_prompts,
            "first_crossed": d.first_crossed, "crosses_boundary": d.crosses_boundary,
            # limited: the rule wanted more prompts than the pair has (50, or 100 once the first interval crossed x.5)
            "limited": n < (cfg.fallback_prompts if d.first_crossed else cfg.prompts), "available_prompts": n,
            "rule": {   # n: traces up to fallback_prompts
                "prompts": cfg.prompts, "fallback_prompts": cfg.fallback_prompts, "confidence": cfg.confidence,
                "resamples": cfg.resamples, "seed": cfg.seed}}


def first_traces(log: TraceLog, cfg: B0Config) -> list[Trace]:
    """The acceptmoe traces the rule can use: evaluation indices below `fallback_prompts`."""
    return log.read(where=lambda meta: meta["index"] < max(cfg.prompts, cfg.fallback_prompts))


def b0_for_pair(log: TraceLog, cfg: B0Config, out: Path) -> dict:
    """The saved decision if there is one (it fixed the budgets already run), else decide and save it."""
    if out.is_file():
        return json.loads(out.read_text())
    decision = decide_b0(first_traces(log, cfg), cfg)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, decision)
    return decision


@command("b0", "recompute and check B0 of a Table 1 run from its saved AcceptMoE traces")
def main(argv: list[str] | None = None) -> int:
    p = parser("b0")
    p.add_argument("--run", type=Path, required=True, metavar="RUN_DIR", help="a results/table1/... run folder")
    args = p.parse_args(argv)
    cfg = from_saved(Table1Config, json.loads((args.run / "config.json").read_text())["config"])
    paths, mismatches = RunPaths(args.run), 0
    finished = SampleLog(paths.samples)
    for spec in cfg.world.models:
        for task in cfg.world.tasks:
            trace_file = paths.traces(spec.name, task, B0_METHOD)
            if not trace_file.is_file():
                print(f"{spec.name} {task}: no acceptmoe traces yet")
                continue
            d = decide_b0(first_traces(TraceLog(trace_file, keep=finished), cfg.world.b0), cfg.world.b0)
            saved_file = paths.b0(spec.name, task)
            saved = json.loads(saved_file.read_text())["b0"] if saved_file.is_file() else None
            mismatches += saved is not None and saved != d["b0"]
            print(f"{spec.name} {task}: B0 = {d['b0']} (mean {d['mean_set_size']:.3f}, "
                  f"{cfg.world.b0.confidence:.0%} CI [{d['low']:.3f}, {d['high']:.3f}], first {d['n_prompts']} prompts"
                  f"{', limited' if d['limited'] else ''}); saved: {saved}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())
