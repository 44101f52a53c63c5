"""B0 per (model, task) from AcceptMoE routing traces only (never correctness): a typed `B0Decision`.

docs/method.md ("B0"): the pooled mean AcceptMoE set size over every block and layer of the first
`b0.prompts` (50) evaluation prompts, rounded to nearest with halves up; if its bootstrap interval (over
prompts) crosses a rounding boundary, the first `b0.fallback_prompts` (100) are used. With fewer evaluation
prompts than that (a `--limit` run) all of them are used, and the decision records it (`limited`).

    >>> from acceptmoe.engine.trace import Trace
    >>> from acceptmoe.experiments.spine.b0 import decide_b0
    >>> from acceptmoe.experiments.spine.config import B0Config
    >>> def trace(index, sizes):                         # one block per entry, one set size per layer
    ...     t = Trace(meta={"index": index})
    ...     for step, s in enumerate(sizes):
    ...         t.add_block(step, [-1, 0], [0], [[0, s, 8, 10, s, 1.0]])
    ...     return t
    >>> d = decide_b0([trace(i, [30, 31]) for i in range(60)], B0Config(resamples=200))   # mean 30.5
    >>> d.b0, d.n_prompts, d.first_crossed                # halves up; no spread, so no fallback
    (31, 50, False)

`b0_for_pair(trace_log, world.b0, path)` saves the decision once and reads it back afterwards.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from acceptmoe.engine.trace import Trace
from acceptmoe.evals.stats import choose_b0, totals_and_counts

from .config import B0Config, ConfigKeyError, build
from .runs import write_json
from .tracelog import TraceLog


@dataclass(frozen=True)
class B0Decision:
    b0: int                       # the matched budget of the fixed-budget methods
    mean_set_size: float          # the pooled mean it rounds
    low: float                    # its bootstrap interval over prompts
    high: float
    n_prompts: int                # prompts the decision used (first, or fallback)
    first_crossed: bool           # the first prompts' interval crossed x.5, so the fallback prompts decided
    crosses_boundary: bool        # the deciding interval crosses x.5 as well
    limited: bool                 # the rule wanted more prompts than the pair has
    available_prompts: int
    rule: B0Config
    source: str | None = None     # the training task whose traces decided it (B0 from training traces)

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        return out if self.source is not None else {k: v for k, v in out.items() if k != "source"}

    @classmethod
    def from_json(cls, data: dict, where: str = "b0 decision") -> B0Decision:
        return build(cls, data, where)

    @classmethod
    def load(cls, path: Path) -> B0Decision:
        try:
            return cls.from_json(json.loads(path.read_text()), str(path))
        except json.JSONDecodeError as exc:
            raise ConfigKeyError(f"{path}: damaged B0 decision ({exc}); delete it to decide B0 again") from None


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


def decide_b0(traces: Sequence[Trace], cfg: B0Config) -> B0Decision:
    """The B0 decision for one pair from its acceptmoe traces (any order)."""
    ordered = in_eval_order(traces)
    n = len(ordered)
    if n == 0:
        raise ValueError("no acceptmoe traces: run acceptmoe on the evaluation prompts before deciding B0")
    first, fallback = min(cfg.prompts, n), min(cfg.fallback_prompts, n)
    totals, counts = totals_and_counts([set_sizes(t) for t in ordered[:fallback]])
    d = choose_b0(totals, counts, first=first, fallback=fallback, n_resamples=cfg.resamples,
                  confidence=cfg.confidence, seed=cfg.seed)
    iv = d.interval
    return B0Decision(b0=d.b0, mean_set_size=iv.estimate, low=iv.low, high=iv.high, n_prompts=d.n_prompts,
                      first_crossed=d.first_crossed, crosses_boundary=d.crosses_boundary,
                      limited=n < (cfg.fallback_prompts if d.first_crossed else cfg.prompts),
                      available_prompts=n, rule=cfg)


def first_traces(log: TraceLog, cfg: B0Config) -> list[Trace]:
    """The acceptmoe traces the rule can use: evaluation indices below `fallback_prompts`."""
    return log.read(where=lambda meta: meta["index"] < max(cfg.prompts, cfg.fallback_prompts))


def b0_for_pair(log: TraceLog, cfg: B0Config, out: Path) -> B0Decision:
    """The saved decision if there is one (it fixed the budgets already run), else decide and save it."""
    if out.is_file():
        return B0Decision.load(out)
    decision = decide_b0(first_traces(log, cfg), cfg)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, decision.to_json())
    return decision
