"""Records of graded rows, pooled per (model, task) pair and variant: what the sweep and the calibration study
tabulate, from saved sample rows only (pure functions, no models).

    graded_records(rows, phase, variants, resamples) -> one record per (pair, variant): accuracy with its
        bootstrap interval over prompts and the paired difference vs Standard SD, mean set size, tau
    rate(rows, num, den) -> sum(num) / sum(den) over rows (pooled, never a mean of per-row ratios)
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from acceptmoe.evals.stats import bootstrap_mean, paired_bootstrap_diff
from acceptmoe.methods import BASELINE as BASELINE_METHOD
from acceptmoe.methods import Variant

from .config import Pair

BASELINE = Variant(BASELINE_METHOD).name     # differences are taken against this variant


def rate(rows: list[dict], num: str, den: str) -> float | None:
    d = sum(r[den] for r in rows)
    return sum(r[num] for r in rows) / d if d else None


def accuracy_fields(rows: list[dict], base: list[dict] | None, resamples: int) -> dict:
    correct = np.array([r["correct"] for r in rows], float)
    acc = bootstrap_mean(correct, n_resamples=resamples)
    out = {"accuracy": 100 * acc.estimate, "accuracy_low": 100 * acc.low, "accuracy_high": 100 * acc.high}
    if base is not None:
        d = paired_bootstrap_diff(correct, np.array([r["correct"] for r in base], float), n_resamples=resamples)
        out.update(accuracy_diff=100 * d.estimate, accuracy_diff_low=100 * d.low, accuracy_diff_high=100 * d.high)
    return out


def aligned_rows(pair_rows: list[dict], variants: tuple[str, ...]) -> dict[str, list[dict]] | None:
    """variant -> rows on the prompts every variant finished (prompt order), or None if none."""
    per: dict = defaultdict(dict)
    for r in pair_rows:
        per[r["variant"]][r["example_id"]] = r
    ids = set.intersection(*(set(per.get(v, {})) for v in variants))
    if not ids:
        return None
    order = sorted(ids, key=lambda i: per[variants[0]][i]["index"])
    return {v: [per[v][i] for i in order] for v in variants}


def graded_records(rows, variants: tuple[str, ...], resamples: int, phase: str = "sweep") -> list[dict]:
    """Per (pair, variant) of `phase`: accuracy on the prompts every variant finished, with its interval and
    the paired difference vs the baseline, the pooled mean set size and tau."""
    out, pairs = [], defaultdict(list)
    for r in rows:
        if r.get("phase") == phase:
            pairs[Pair(r["model"], r["task"])].append(r)
    for (model, task), pair_rows in pairs.items():
        aligned = aligned_rows(pair_rows, variants)
        if aligned is None:
            continue
        for v in variants:
            rs = aligned[v]
            out.append({"model": model, "task": task, "variant": v, "budget": rs[0].get("budget"),
                        "prompts": len(rs), **accuracy_fields(rs, None if v == BASELINE else aligned.get(BASELINE), resamples),
                        "mean_set_size": rate(rs, "set_size_sum", "block_layers"),
                        "tau": rate(rs, "accepted", "steps")})
    return out
