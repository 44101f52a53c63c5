"""One typed row per experiment: what one line of a run's `samples.jsonl` holds, built in one place.

- `GradedRow`: one greedy generation graded like Table 1 — a (model, task, prompt, method) of Table 1, and
  (with `variant`, `phase`) a point of the fixed-budget sweep or of the calibration study.
- `TimedRow`: one timed generation of a throughput phase (exactly `timed_tokens` long, EOS ignored), with the
  expert store's counters and where the reply ended by itself (`NaturalEnd`); in the instrumented offload run
  also its `Graded` reply.
- `TraceStats`: sums and means over every verification block and MoE layer of one generation's trace
  (one pair of fields per `acceptmoe.engine.trace.LAYER_FIELDS` entry after `layer`).

Rows are written flat (`to_json`: nested parts inlined, unset optional parts left out), so tables read plain
mappings and rows written before these types existed read the same way.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from acceptmoe.engine.trace import LAYER_FIELDS, Trace

from .prompts import prompt_hash


@dataclass(frozen=True)
class TraceStats:
    blocks: int                        # verification blocks (target steps after prefill)
    block_layers: int                  # (block, MoE layer) pairs with per-layer fields recorded
    set_size_sum: float
    mean_set_size: float | None
    anchor_size_sum: float
    mean_anchor_size: float | None
    natural_union_sum: float
    mean_natural_union: float | None
    routed_union_sum: float
    mean_routed_union: float | None
    utility_kept_sum: float
    mean_utility_kept: float | None

    @classmethod
    def of(cls, trace: Trace) -> TraceStats:
        layered = [b.layers for b in trace.blocks if b.layers is not None]
        count = sum(len(layers["set_size"]) for layers in layered)
        out: dict = {"blocks": len(trace.blocks), "block_layers": count}
        for name in LAYER_FIELDS[1:]:
            total = float(sum(sum(layers[name]) for layers in layered))
            out[f"{name}_sum"] = total
            out[f"mean_{name}"] = total / count if count else None
        return cls(**out)


@dataclass(frozen=True)
class Generated:
    """What one generation measured (from the engine's `Generation`)."""
    output_ids: list[int]
    tokens: int
    stop_reason: str
    prompt_tokens: int
    prompt_sha: str                    # sha256 of the prompt's token ids (first 16 hex digits)
    steps: int                         # target steps after prefill
    accepted: int                      # tokens those steps committed
    tau: float                         # accepted / steps: mean accepted length per target step
    prefill_s: float
    decode_s: float

    @classmethod
    def of(cls, gen, prompt_ids: Sequence[int]) -> Generated:
        return cls(list(gen.tokens), len(gen.tokens), gen.stop_reason, len(prompt_ids), prompt_hash(prompt_ids),
                   len(gen.accept_lengths), sum(gen.accept_lengths), gen.mean_accept_length, gen.prefill_time,
                   sum(gen.step_times))


@dataclass(frozen=True)
class NaturalEnd:
    """Where a timed generation's reply ended by itself (EOS ignored, it ran on): its first EOS. Tokens up to
    and including it, the target steps up to the one that output it, and those steps' seconds with the
    prefill's (the engine's own timers). Without an EOS among the timed tokens `natural_tokens` is None: every
    timed token is the reply's own text."""
    natural_tokens: int | None
    natural_steps: int
    natural_s: float

    @classmethod
    def of(cls, gen, eos: set[int]) -> NaturalEnd:
        n = next((i + 1 for i, t in enumerate(gen.tokens) if t in eos), None)
        steps, out = len(gen.accept_lengths), len(gen.tokens)
        if n is not None:
            steps, out = 0, 1                                    # tokens[0] comes from the prefill
            while out < n:
                out += gen.accept_lengths[steps]
                steps += 1
        return cls(n, steps, gen.prefill_time + sum(gen.step_times[:steps]))


@dataclass(frozen=True)
class Graded:
    """A reply's grade."""
    correct: bool
    extracted: object
    reply_tokens: int | None = None    # the graded prefix (timed runs grade the reply up to its first EOS)
    score_details: dict | None = None
    response: str | None = None


@dataclass(frozen=True)
class GradedRow:
    model: str
    task: str
    task_version: object
    example_id: str
    index: int
    method: str
    budget: int | None
    generated: Generated
    graded: Graded
    stats: TraceStats
    variant: str | None = None         # the sweep's and the study's variant name (Table 1: the method itself)
    phase: str | None = None
    rep: int | None = None
    wall_s: float | None = None        # the sweep: prefill + decode seconds

    def to_json(self) -> dict:
        return _flat(self)


@dataclass(frozen=True)
class TimedRow:
    phase: str
    rep: int
    model: str
    task: str
    variant: str
    example_id: str
    index: int
    budget: int | None
    generated: Generated
    wall_s: float                      # the engine's clock around generate (device synchronised)
    store: str
    load_avg_1m: float                 # the host's 1-minute load average (other processes distort timings)
    loads: int                         # expert-store counters of this generation (prefill included)
    bytes: int
    hits: int
    misses: int
    wait_s: float                      # seconds the compute stalled for loads
    passes: int
    graded: Graded | None = None       # the instrumented run: the reply up to its first EOS, graded
    stats: TraceStats | None = None
    copy_s: float | None = None        # seconds the loads' copies took, where the engine's store times them
                                       # (absent from the row otherwise, and from rows written before it)
    natural: NaturalEnd | None = None  # where the reply ended by itself (absent from rows written before it)

    def to_json(self) -> dict:
        return _flat(self)


COUNTER_FIELDS = ("loads", "bytes", "hits", "misses", "wait_s", "passes")    # what every engine's counters give
_DROP_WHEN_GENERATED = ("output_ids", "stop_reason")     # timed rows keep the numbers, not the tokens


def _flat(row) -> dict:
    out: dict = {}
    for f in dataclasses.fields(row):
        value = getattr(row, f.name)
        if dataclasses.is_dataclass(value):
            part = dataclasses.asdict(value)
            if isinstance(row, TimedRow) and f.name == "generated":
                part = {k: v for k, v in part.items() if k not in _DROP_WHEN_GENERATED}
            out.update({k: v for k, v in part.items() if not (f.name == "graded" and v is None)})
        elif value is not None or f.name not in ("variant", "phase", "rep", "wall_s", "graded", "stats", "copy_s",
                                                 "natural"):
            out[f.name] = value
    return out
