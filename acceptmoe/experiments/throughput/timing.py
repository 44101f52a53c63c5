"""Timed numbers of the throughput phases from saved rows only: throughput and paired ratios over the cells
[prompt, repetition] the runner timed side by side (pure functions, no models; docs/method.md, "Experimental
protocol").

- `timed_records(rows, phase, variants, prompts, boot)`: per (pair, variant), then per (model, variant) pooled
  over the model's tasks (task `POOLED`): throughput = total tokens / total timed seconds, its per-repetition
  range, tau, ms per step, host load, the after-EOS share, and against Standard SD the paper's pooled ratio
  (total tokens / total seconds of each) with its two-way interval over prompts and repetitions
  (`stats.timed_ratio`, prompts stratified by task in a pooled record), the mean of the per-repetition
  ratios beside it, and on a pooled record whether the ratio lies beyond the placebo's (`stats.beyond_placebo`;
  the placebo's own record carries its ratio). `natural=True`: the natural-text protocol, each generation timed
  only up to its own EOS (its tokens and seconds up to there), over the prompts whose reply is at least
  `min_tokens` long in every variant and repetition.
- `versus(rows, phase, a, b, variants, prompts, boot)`: a over b (e.g. pruning on vs off, AcceptMoE vs Vanilla
  AR) per pair and pooled per model, as intervals.

Only repetitions in which every variant finished every prompt of the pair count; a pooled record uses the
repetitions every pair of the model finished.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from typing import NamedTuple

import numpy as np

from acceptmoe.evals import stats
from acceptmoe.methods import BASELINE as BASELINE_METHOD
from acceptmoe.methods import METHODS, Variant

from ..spine.config import Pair

BASELINE = Variant(BASELINE_METHOD).name     # ratios and changes are taken against this variant
# The placebo of a timed phase: the baseline timed a second time under its own name, interleaved like every
# variant; its ratio to the baseline is what the host's noise alone gives (`stats.beyond_placebo`).
PLACEBO = Variant(BASELINE_METHOD, tag="placebo")
NO_TAU = {Variant(n).name for n, s in METHODS.items() if not s.speculates}    # one token per step, no tree
POOLED = "pooled"                            # the task label of a model's records pooled over its tasks
UNIT = "prompts"                             # what a timed interval resamples (with the repetitions, crossed)


class Boot(NamedTuple):
    """The interval settings: resamples, confidence, seed."""
    resamples: int
    confidence: float
    seed: int


def by_pair(rows, phase: str) -> dict[Pair, list[dict]]:
    out: dict = defaultdict(list)
    for r in rows:
        if r.get("phase") == phase:
            out[Pair(r["model"], r["task"])].append(r)
    return dict(out)


def complete_reps(rows: list[dict], variants: tuple[str, ...], prompts: int) -> dict[int, dict[str, list[dict]]]:
    """rep -> variant -> rows (in prompt order), for repetitions where every variant has `prompts` rows."""
    grid: dict = defaultdict(lambda: defaultdict(list))
    for r in rows:
        grid[r["rep"]][r["variant"]].append(r)
    return {rep: {v: sorted(per[v], key=lambda r: r["index"]) for v in variants}
            for rep, per in sorted(grid.items()) if all(len(per.get(v, ())) == prompts for v in variants)}


def natural_length(row: dict) -> int:
    """Tokens of the reply up to and including its own EOS (all timed tokens where it has none)."""
    return row["tokens"] if row["natural_tokens"] is None else row["natural_tokens"]


def after_eos(rows: list[dict]) -> float | None:
    if not rows or any("natural_tokens" not in r for r in rows):
        return None
    return sum(r["tokens"] - natural_length(r) for r in rows) / sum(r["tokens"] for r in rows)


class Grid(NamedTuple):
    """One set of timed cells: per variant rows [prompt][rep], the prompts' task labels (strata)."""
    cells: dict[str, list[list[dict]]]
    strata: list[str]
    reps: int


def _grid(pair_rows: dict[Pair, list[dict]], variants: tuple[str, ...], prompts: int,
          natural_min: int | None) -> Grid | None:
    """The cells of `pair_rows`' pairs (their common complete repetitions), natural protocol: only the prompts
    whose reply reaches `natural_min` tokens in every variant and repetition."""
    reps = {pair: complete_reps(rs, variants, prompts) for pair, rs in pair_rows.items()}
    common = sorted(set.intersection(*(set(r) for r in reps.values()))) if reps else []
    if not common:
        return None
    cells: dict[str, list[list[dict]]] = {v: [] for v in variants}
    strata = []
    for pair, by_rep in reps.items():
        for i in range(prompts):
            row = {v: [by_rep[r][v][i] for r in common] for v in variants}
            if natural_min is not None and any(natural_length(x) < natural_min for xs in row.values() for x in xs):
                continue
            for v in variants:
                cells[v].append(row[v])
            strata.append(pair.task)
    if not strata:
        return None
    return Grid(cells, strata, len(common))


def _measure(natural: bool):
    """(tokens, seconds) of one timed row under the protocol."""
    if natural:
        return lambda r: (natural_length(r), r["natural_s"])
    return lambda r: (r["tokens"], r["wall_s"])


def _arrays(grid: Grid, v: str, natural: bool) -> tuple[np.ndarray, np.ndarray]:
    get = _measure(natural)
    pairs = np.array([[get(x) for x in prompt] for prompt in grid.cells[v]], dtype=np.float64)   # [P, R, 2]
    return pairs[..., 0], pairs[..., 1]


def ratio_of(grid: Grid, a: str, b: str, natural: bool, boot: Boot) -> tuple[stats.Interval, list[float]]:
    """a's throughput over b's on the grid's cells: the pooled ratio with its interval, and per repetition."""
    ta, sa = _arrays(grid, a, natural)
    tb, sb = _arrays(grid, b, natural)
    multi = len(set(grid.strata)) > 1
    iv = stats.timed_ratio(ta, sa, tb, sb, boot.resamples, boot.confidence, boot.seed,
                           strata=grid.strata if multi else None)
    per_rep = [float((ta[:, r].sum() / sa[:, r].sum()) / (tb[:, r].sum() / sb[:, r].sum())) for r in range(grid.reps)]
    return iv, per_rep


def _ratio_fields(prefix: str, iv: stats.Interval, per_rep: list[float]) -> dict:
    return {f"{prefix}ratio_vs_standard_sd": iv.estimate, f"{prefix}ratio_low": iv.low, f"{prefix}ratio_high": iv.high,
            f"{prefix}ratio_n": iv.n, f"{prefix}ratio_unit": UNIT,
            f"{prefix}ratio_mean_of_reps": statistics.fmean(per_rep),
            f"{prefix}ratio_min": min(per_rep), f"{prefix}ratio_max": max(per_rep),
            f"{prefix}ratios_per_rep": [round(x, 4) for x in per_rep]}


def _variant_fields(grid: Grid, v: str, natural: bool) -> dict:
    rows = [x for prompt in grid.cells[v] for x in prompt]
    t, s = _arrays(grid, v, natural)
    per_rep = [float(t[:, r].sum() / s[:, r].sum()) for r in range(grid.reps)]
    if natural:
        return {"natural_prompts": len(grid.strata), "natural_tokens": int(t.sum()),
                "natural_tokens_per_s": float(t.sum() / s.sum()),
                "natural_tau": (sum(natural_length(x) - 1 for x in rows) / sum(x["natural_steps"] for x in rows)
                                if v not in NO_TAU else None)}
    return {"prompts": len(grid.strata), "tokens": int(t.sum()), "tokens_per_s": float(t.sum() / s.sum()),
            "tokens_per_s_min": min(per_rep), "tokens_per_s_max": max(per_rep),
            "tau": sum(x["accepted"] for x in rows) / sum(x["steps"] for x in rows) if v not in NO_TAU else None,
            "ms_per_step": 1e3 * sum(x["decode_s"] for x in rows) / sum(x["steps"] for x in rows),
            "load_avg_1m": statistics.fmean(x["load_avg_1m"] for x in rows)
            if all("load_avg_1m" in x for x in rows) else None,
            "after_eos_share": after_eos(rows)}


def _records_of(model: str, task: str, grid: Grid, variants: tuple[str, ...], natural: bool, boot: Boot) -> list[dict]:
    prefix = "natural_" if natural else ""
    out = []
    ratios = {}
    for v in variants:
        rec = {"model": model, "task": task, "variant": v, "reps": grid.reps, **_variant_fields(grid, v, natural)}
        if BASELINE in variants:
            iv, per_rep = ratio_of(grid, v, BASELINE, natural, boot)
            ratios[v] = iv
            rec.update(_ratio_fields(prefix, iv, per_rep))
        out.append(rec)
    if task == POOLED and PLACEBO.name in ratios:
        for rec in out:
            if rec["variant"] in ratios and rec["variant"] not in (BASELINE, PLACEBO.name):
                rec[f"{prefix}beyond_placebo"] = stats.beyond_placebo(ratios[rec["variant"]], ratios[PLACEBO.name])
    return out


def timed_records(rows, phase: str, variants: tuple[str, ...], prompts: int, boot: Boot, natural: bool = False,
                  min_tokens: int = 1) -> list[dict]:
    """Per (pair, variant), then per (model, variant) pooled over its tasks (see the module)."""
    pairs = by_pair(rows, phase)
    if natural and any(after_eos(rs) is None for rs in pairs.values()):
        return []                        # rows written before where a reply ends was saved
    natural_min = min_tokens if natural else None
    out, models = [], defaultdict(dict)
    for pair, pair_rows in pairs.items():
        grid = _grid({pair: pair_rows}, variants, prompts, natural_min)
        if grid is not None:
            out += _records_of(pair.model, pair.task, grid, variants, natural, boot)
            models[pair.model][pair] = pair_rows
    for model, of_model in models.items():
        grid = _grid(of_model, variants, prompts, natural_min)
        if grid is not None and len(of_model) > 1:
            out += _records_of(model, POOLED, grid, variants, natural, boot)
    return out


def versus(rows, phase: str, a: str, b: str, variants: tuple[str, ...], prompts: int,
           boot: Boot) -> list[tuple[str, str, stats.Interval]]:
    """(model, task or POOLED, interval of a's throughput over b's) per pair, then pooled per model."""
    pairs = by_pair(rows, phase)
    out, models = [], defaultdict(dict)
    for pair, pair_rows in pairs.items():
        grid = _grid({pair: pair_rows}, variants, prompts, None)
        if grid is not None:
            out.append((pair.model, pair.task, ratio_of(grid, a, b, False, boot)[0]))
            models[pair.model][pair] = pair_rows
    for model, of_model in models.items():
        grid = _grid(of_model, variants, prompts, None)
        if grid is not None and len(of_model) > 1:
            out.append((model, POOLED, ratio_of(grid, a, b, False, boot)[0]))
    return out


def after_eos_pooled(records: list[dict], rows: list[dict], phase: str) -> dict[str, float | None]:
    """variant -> the after-EOS share over every pair's rows the records counted, and "all" over every variant."""
    counted = {(r["model"], r["task"], r["variant"]) for r in records}
    mine = [r for r in rows if r.get("phase") == phase and (r["model"], r["task"], r["variant"]) in counted]
    out = {v: after_eos([r for r in mine if r["variant"] == v]) for v in dict.fromkeys(x["variant"] for x in records)}
    return {**out, "all": after_eos(mine)}
