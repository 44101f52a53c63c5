"""The replay's intervals: every rule is `acceptmoe.evals.stats`'s; this module only says what a unit is, which
strata it is drawn within, and writes the interval's fields onto a record.

- Unit: a prompt. Every variant replayed the same prompts (one recorded generation per prompt and variant),
  so a variant's ratio to the reference pairs them prompt by prompt (`stats.paired_bootstrap_speedup`: each
  resample draws prompts, keeping a prompt's two generations together); n is the number of prompts.
- Strata: the prompts' tasks (`strata=`), so every resample keeps each task's share, where every task holds
  at least `MIN_PER_STRATUM` prompts; a task with one prompt would be drawn as itself in every resample and
  add no spread, so then the plain bootstrap over prompts is used (`interval_strata` says which).
- Enough units: `stats.enough_units` (n >= `stats.MIN_UNITS`); an interval on fewer prompts says so
  (`interval_enough_units` false, `interval_note`), and the claims table gives it no verdict.
- Placebo: where the recording holds the reference's placebo (`source.PLACEBO`: the same routes under another
  name), its ratio is the replay host's noise, and each other ratio's interval is set against it
  (`stats.beyond_placebo`: +1 wholly above, -1 wholly below, 0 not beyond the noise).

    fields = speedups(ref, other, n_resamples, seed)     # ref / other: `report.per_generation` arrays
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from acceptmoe.evals import stats

UNIT = "prompts"         # what an interval resamples (the claims table's unit)
MIN_PER_STRATUM = 2
WHAT = ("pass", "passes"), ("token", "output")      # per step pass, per output token: (name, denominator)


def per_task(tasks) -> dict[str, int]:
    """task -> prompts, in order of first appearance."""
    return dict(Counter(tasks))


def strata(tasks) -> list[str] | None:
    """The task labels to resample within, or None (plain bootstrap) when a task holds too few prompts."""
    counts = per_task(tasks)
    return list(tasks) if min(counts.values()) >= MIN_PER_STRATUM else None


def units_text(n: int, counts: dict[str, int], stratified: bool) -> str:
    """The unit, n and strata in words (tables and figures)."""
    tasks = ", ".join(f"{t} {c}" for t, c in counts.items())
    return (f"n = {n} {UNIT} ({tasks}), paired, "
            + ("stratified by task" if stratified else "not stratified (a task holds one prompt)"))


def summary(n: int, counts: dict[str, int], stratified: bool) -> str:
    """The same, short (figure captions)."""
    low, high = min(counts.values()), max(counts.values())
    return (f"{n} {UNIT}, {low if low == high else f'{low}-{high}'} per task, "
            + ("stratified by task" if stratified else "not stratified"))


def note(iv: stats.Interval) -> str:
    """'' where the interval rests on enough prompts for a verdict (`stats.enough_units`), else why not."""
    return "" if stats.enough_units(iv) else (f"rests on {iv.n} {UNIT}, fewer than {stats.MIN_UNITS}: too few for "
                                              f"a verdict")


def speedups(ref: dict, other: dict, n_resamples: int, seed: int) -> dict:
    """The reference's expert time over the other's, per step pass and per output token, with their paired
    intervals over prompts and the unit fields (`ref` and `other` hold the same prompts in the same order)."""
    tasks = list(ref["tasks"])
    labels = strata(tasks)
    out = {}
    for unit, den in WHAT:
        iv = stats.paired_bootstrap_speedup(ref["seconds"], ref[den], other["seconds"], other[den], n_resamples,
                                            seed=seed, strata=labels)
        out[f"speedup_per_{unit}"], out[f"speedup_per_{unit}_low"], out[f"speedup_per_{unit}_high"] = \
            iv.estimate, iv.low, iv.high
    counts, stratified = per_task(tasks), labels is not None
    out.update({"interval_unit": UNIT, "interval_n": iv.n, "interval_per_task": units_text(iv.n, counts, stratified),
                "interval_summary": summary(iv.n, counts, stratified),
                "interval_strata": "task" if labels is not None else "none", "interval_method": iv.method,
                "interval_enough_units": stats.enough_units(iv), "interval_note": note(iv)})
    return out


def interval(r: dict, unit: str = "token") -> stats.Interval:
    """A record's interval back as a `stats.Interval` (per output token by default)."""
    return stats.Interval(r[f"speedup_per_{unit}"], r[f"speedup_per_{unit}_low"], r[f"speedup_per_{unit}_high"],
                          r["interval_n"], stats.CONFIDENCE, 0, 0, r["interval_method"])


def add_placebo(records: list[dict], placebo: str) -> None:
    """On every record with a speedup, in place: its store's placebo interval (per output token) and whether its
    own interval lies beyond it; nothing where the store has no placebo record."""
    for r in records:
        p = next((q for q in records if q["store"] == r["store"] and q["variant"] == placebo
                  and "interval_n" in q), None)
        if p is None or "interval_n" not in r:
            continue
        r["placebo_per_token"], r["placebo_per_token_low"], r["placebo_per_token_high"] = \
            p["speedup_per_token"], p["speedup_per_token_low"], p["speedup_per_token_high"]
        r["beyond_placebo"] = None if r is p else stats.beyond_placebo(interval(r), interval(p))


def paired(ref: dict, other: dict) -> tuple[dict, dict]:
    """Both variants' per-generation arrays on the prompts both replayed, in the reference's order."""
    common = [i for i, name in enumerate(ref["names"]) if name in set(other["names"])]
    where = {name: i for i, name in enumerate(other["names"])}
    mine = [where[ref["names"][i]] for i in common]
    return ({k: v[common] for k, v in ref.items() if _per_gen(v, ref)},
            {k: v[mine] for k, v in other.items() if _per_gen(v, other)})


def _per_gen(v, arrays: dict) -> bool:
    return isinstance(v, np.ndarray) and v.shape[:1] == arrays["names"].shape
