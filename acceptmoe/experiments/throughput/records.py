"""Numbers of the throughput experiments besides the timed ratios (`timing`), from saved sample rows only (pure
functions, no models).

- `counter_metrics(rows)`: host-to-device bytes and loads per output token, hit rate = hits / (hits + misses),
  stall share = seconds the compute stalled for loads (`wait_s`, not the copies' own `copy_s`) / timed
  seconds, stall microseconds per load, all pooled over the rows.
- `counter_records(rows, variants, bootstrap)`: Table 2: those per (pair, variant), accuracy with its interval
  over prompts, and the change vs Standard SD (traffic %, hit rate pp, stall share pp); `pooled`: per model over
  its tasks, each change with its interval over prompts stratified by task (`counter_change`).
- the sweep's accuracy, mean set size and tau per (pair, variant): `spine.records.graded_records`;
  `self_sized_vs_best(sweep, roles)`: the best fixed budget chosen on one half of each pair's prompts (the
  even-indexed) and judged on the other (`selection_split`), where the self-sized method is compared with it.
- `means(records, fields)`: unweighted means over pairs per variant.
- `headline(timed, counters, prune)`: the paper's headline quantities as the run measured them (the self-sized
  method vs Standard SD, pooled per model with its interval; pruning on vs off); `pruning_accuracy(rows, prune,
  resamples)`: accuracy with pruning minus without, paired over the counters run's prompts (pooled over pairs),
  with its interval.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from acceptmoe.evals import stats
from acceptmoe.methods import B0_METHOD, Variant

from ..spine.records import accuracy_fields, aligned_rows, rate
from .timing import BASELINE, NO_TAU, POOLED, Boot, by_pair  # noqa: F401  (NO_TAU: readers of these records)

HEADLINE = Variant(B0_METHOD).name    # the self-sized method the paper's headline numbers are about


def counter_metrics(rows: list[dict]) -> dict:
    tokens = sum(r["tokens"] for r in rows)
    events = sum(r["hits"] + r["misses"] for r in rows)
    wall = sum(r["wall_s"] for r in rows)
    return {"tokens": tokens, "bytes_per_token": sum(r["bytes"] for r in rows) / tokens if tokens else None,
            "loads_per_token": sum(r["loads"] for r in rows) / tokens if tokens else None,
            "hit_rate": sum(r["hits"] for r in rows) / events if events else None,
            "stall_share": sum(r["wait_s"] for r in rows) / wall if wall else None,
            "us_per_load": 1e6 * sum(r["wait_s"] for r in rows) / loads if (loads := sum(r["loads"] for r in rows)) else None,
            "tokens_per_s": tokens / wall if wall else None}


def _sums(rows: list[dict], *keys: str) -> np.ndarray:
    return np.array([[r[k] for k in keys] for r in rows], dtype=np.float64)      # [prompts, keys]


# change vs the baseline per resample: (mine [size, keys], base [size, keys]) summed over the drawn prompts
CHANGES = {
    "traffic_change_pct": (("bytes", "tokens"), lambda m, b: 100 * ((m[:, 0] / m[:, 1]) / (b[:, 0] / b[:, 1]) - 1)),
    "hit_rate_change_pp": (("hits", "misses"), lambda m, b: 100 * (m[:, 0] / m.sum(1) - b[:, 0] / b.sum(1))),
    "stall_share_change_pp": (("wait_s", "wall_s"), lambda m, b: 100 * (m[:, 0] / m[:, 1] - b[:, 0] / b[:, 1])),
}


def counter_change(mine: list[dict], base: list[dict], field: str, strata: list[str], boot: Boot) -> stats.Interval:
    """One of `CHANGES` of `mine` vs `base` (aligned prompt by prompt), with its interval over prompts
    (stratified by `strata`)."""
    keys, change = CHANGES[field]
    m, b = _sums(mine, *keys), _sums(base, *keys)

    def stat(idx):
        with np.errstate(invalid="ignore", divide="ignore"):
            return change(m[idx].sum(1), b[idx].sum(1))
    return stats.bootstrap(len(mine), stat, boot.resamples, boot.confidence, boot.seed,
                           strata if len(set(strata)) > 1 else None, finite_only=True)


def counter_records(rows, variants: tuple[str, ...], boot: Boot, pooled: bool = False) -> list[dict]:
    """Table 2 per (pair, variant) from the instrumented run, with changes vs Standard SD; `pooled`: per
    (model, variant) over all the model's pairs instead (each pair on the prompts every variant finished),
    each change with its interval over prompts stratified by task."""
    groups: dict = defaultdict(lambda: defaultdict(list))        # (model, task) -> variant -> rows
    for (model, task), pair_rows in by_pair(rows, "offload-counters").items():
        aligned = aligned_rows(pair_rows, variants)
        if aligned is not None:
            for v in variants:
                groups[(model, POOLED if pooled else task)][v] += aligned[v]
    out = []
    for (model, task), aligned in groups.items():
        base = counter_metrics(aligned[BASELINE]) if BASELINE in aligned else None
        for v in variants:
            m = counter_metrics(aligned[v])
            rec = {"model": model, "task": task, "variant": v, "prompts": len(aligned[v]), **m,
                   "mean_set_size": rate(aligned[v], "set_size_sum", "block_layers"),
                   **accuracy_fields(aligned[v], None if v == BASELINE else aligned.get(BASELINE), boot.resamples)}
            if base:
                rec.update(traffic_change_pct=100 * (m["bytes_per_token"] / base["bytes_per_token"] - 1)
                           if base["bytes_per_token"] else None,
                           hit_rate_change_pp=100 * (m["hit_rate"] - base["hit_rate"]),
                           stall_share_change_pp=100 * (m["stall_share"] - base["stall_share"]))
                if pooled and v != BASELINE:
                    strata = [r["task"] for r in aligned[v]]
                    for field in CHANGES:
                        iv = counter_change(aligned[v], aligned[BASELINE], field, strata, boot)
                        rec.update({f"{field}_low": iv.low, f"{field}_high": iv.high, f"{field}_n": iv.n})
            out.append(rec)
    return out


def pooled_changes(rows, a: str, b: str, variants: tuple[str, ...], boot: Boot) -> dict[str, dict[str, stats.Interval]]:
    """model -> field of `CHANGES` -> a's change vs b's over the counters run's prompts every variant finished,
    pooled over the model's tasks, with its interval (prompts stratified by task)."""
    mine: dict = defaultdict(lambda: ([], []))
    for (model, _), pair_rows in by_pair(rows, "offload-counters").items():
        aligned = aligned_rows(pair_rows, variants)
        if aligned is not None:
            mine[model][0].extend(aligned[a])
            mine[model][1].extend(aligned[b])
    return {model: {f: counter_change(x, y, f, [r["task"] for r in x], boot) for f in CHANGES}
            for model, (x, y) in mine.items() if x}


@dataclass(frozen=True)
class SweepRoles:
    """Which sweep variants are the fixed budgets, the self-sized reference and the baseline (by name)."""
    fixed: tuple[str, ...]
    fixed_label: str
    self_sized: str | None
    baseline: str | None = BASELINE


def selection_split(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """A pair's prompts split in two: the even-indexed choose the best fixed budget, the odd-indexed judge it."""
    return [r for r in rows if r["index"] % 2 == 0], [r for r in rows if r["index"] % 2 == 1]


def _accuracy(rows: list[dict]) -> float:
    return 100 * sum(r["correct"] for r in rows) / len(rows)


def self_sized_vs_best(rows, roles: SweepRoles, boot: Boot) -> list[dict]:
    """Per pair: the best fixed budget chosen on the even-indexed prompts (highest accuracy there; ties: the
    smaller budget), and on the odd-indexed ones the self-sized variant's accuracy minus that budget's (pp),
    with the paired interval; then the mean over pairs (task `POOLED`) with its interval over the held-out
    prompts of every pair."""
    if roles.self_sized is None:
        return []
    out, held = [], defaultdict(list)
    for (model, task), pair_rows in by_pair(rows, "sweep").items():
        aligned = aligned_rows(pair_rows, (*roles.fixed, roles.self_sized))
        if aligned is None:
            continue
        choose = {v: selection_split(aligned[v])[0] for v in roles.fixed}
        if not choose[roles.fixed[0]]:
            continue
        best = max(roles.fixed, key=lambda v: (_accuracy(choose[v]), -aligned[v][0]["budget"]))
        mine, theirs = selection_split(aligned[roles.self_sized])[1], selection_split(aligned[best])[1]
        if not mine:
            continue                          # one prompt: nothing held out to judge the choice on
        a, b = (np.array([r["correct"] for r in x], float) for x in (mine, theirs))
        iv = stats.paired_bootstrap_diff(a, b, boot.resamples, boot.confidence, boot.seed)
        smallest = min(roles.fixed, key=lambda v: aligned[v][0]["budget"])
        small = np.array([r["correct"] for r in selection_split(aligned[smallest])[1]], float)
        loss = stats.paired_bootstrap_diff(small, b, boot.resamples, boot.confidence, boot.seed)
        out.append({"model": model, "task": task, "best_budget": aligned[best][0]["budget"],
                    "chosen_on": len(choose[best]), "judged_on": len(mine),
                    "best_accuracy": _accuracy(theirs), "acceptmoe_accuracy": _accuracy(mine),
                    "acceptmoe_set_size": rate(mine, "set_size_sum", "block_layers"),
                    **_pp("diff", iv), "small_budget": aligned[smallest][0]["budget"], **_pp("small_diff", loss)})
        held[model].append((a, b, small))
    for model, pairs in held.items():
        if len(pairs) > 1:
            mine_, best_, small_ = ([x[i] for x in pairs] for i in range(3))
            iv = stats.mean_of_strata_diff(mine_, best_, boot.resamples, boot.confidence, boot.seed)
            loss = stats.mean_of_strata_diff(small_, best_, boot.resamples, boot.confidence, boot.seed)
            out.append({"model": model, "task": POOLED, "best_budget": None, "chosen_on": None,
                        "judged_on": sum(a.size for a in mine_), "best_accuracy": None, "acceptmoe_accuracy": None,
                        "acceptmoe_set_size": None, **_pp("diff", iv), "small_budget": None, **_pp("small_diff", loss)})
    return out


def _pp(name: str, iv: stats.Interval) -> dict:
    return {f"{name}_pp": 100 * iv.estimate, f"{name}_low": 100 * iv.low, f"{name}_high": 100 * iv.high}


def means(records: list[dict], fields: tuple[str, ...]) -> dict[str, dict]:
    """variant -> unweighted mean over pairs of each field (None where any pair lacks it)."""
    out: dict = {}
    for v in dict.fromkeys(r["variant"] for r in records):
        recs = [r for r in records if r["variant"] == v]
        out[v] = {"pairs": len(recs)}
        for f in fields:
            vals = [r.get(f) for r in recs]
            out[v][f] = float(np.mean(vals)) if vals and all(x is not None for x in vals) else None
    return out


def mean_of(records: list[dict], variant: str, field: str):
    vals = [r.get(field) for r in records if r["variant"] == variant]
    return sum(vals) / len(vals) if vals and None not in vals else None


def per_pair_change(a: list[dict], b: list[dict], field: str, pct: bool) -> list[float]:
    """Per pair: records `a` vs records `b` (e.g. pruning on vs off), as % change or pp difference."""
    base = {(r["model"], r["task"]): r[field] for r in b}
    return [100 * (r[field] / base[(r["model"], r["task"])] - 1) if pct else 100 * (r[field] - base[(r["model"], r["task"])])
            for r in a if (r["model"], r["task"]) in base and r[field] is not None and base[(r["model"], r["task"])]]


def headline(timed: dict[str, list[dict]], counters: list[dict], pooled: list[dict],
             prune: tuple[str, str] | None) -> dict:
    """The paper's headline quantities (docs/method.md, "The paper's claims") as one run measured them; a key
    is present only where the run has what it needs:
    `resident`, `offload-timed`: the self-sized method's timed records against Standard SD, per pair and pooled
    per model (task `POOLED`); `traffic` (%), `hit_rate` (pp): its change vs Standard SD per pair; `stall`:
    variant -> mean stall share over pairs (Standard SD and the self-sized method); `prune_traffic` (%),
    `prune_hit_rate` (pp): pruning on vs off per pair; `pooled_counters`: the self-sized method's pooled Table 2
    records (their changes with intervals)."""
    out: dict = {}
    for phase in ("resident", "offload-timed"):
        recs = [x for x in timed.get(phase, []) if x["variant"] == HEADLINE and "ratio_vs_standard_sd" in x]
        if recs:
            out[phase] = recs
    acc = [r for r in counters if r["variant"] == HEADLINE]
    if acc and "traffic_change_pct" in acc[0]:
        out["traffic"] = [r["traffic_change_pct"] for r in acc]
        out["hit_rate"] = [r["hit_rate_change_pp"] for r in acc]
        out["stall"] = {v: mean_of(counters, v, "stall_share") for v in (BASELINE, HEADLINE)}
        out["pooled_counters"] = [r for r in pooled if r["variant"] == HEADLINE]
    on_name, off_name = prune or (None, None)
    on = [r for r in counters if r["variant"] == on_name]
    off = [r for r in counters if r["variant"] == off_name]
    if on and off:
        out["prune_traffic"] = per_pair_change(on, off, "bytes_per_token", True)
        out["prune_hit_rate"] = per_pair_change(on, off, "hit_rate", False)
    return out


def pruning_accuracy(rows, prune: tuple[str, str] | None, resamples: int) -> dict | None:
    """Accuracy (pp) with pruning minus without on the counters run's prompts both finished, pooled over pairs,
    with a paired bootstrap interval over prompts; None without both variants."""
    if not prune:
        return None
    on, off = [], []
    for pair_rows in by_pair(rows, "offload-counters").values():
        aligned = aligned_rows(pair_rows, prune)
        if aligned is not None:
            on += aligned[prune[0]]
            off += aligned[prune[1]]
    if not on:
        return None
    return {"prompts": len(on), **accuracy_fields(on, off, resamples)}
