"""Numbers of the throughput experiments from saved sample rows only (pure functions, no models).

- `throughput_records(rows, phase, variants, prompts, center)`: per (pair, variant) throughput = total tokens /
  total timed seconds, per repetition; across repetitions the pooled value (resident: all repetitions'
  tokens / all their seconds) or the median (offloaded); the ratio to Standard SD per repetition (two numbers
  measured side by side on the same engine) and across repetitions its mean (resident) or median
  (offloaded), min, max and standard deviation; tau pooled.
  Only repetitions in which every variant finished every prompt of the pair count.
- `after_eos(rows)`: the share of timed tokens generated after the reply's natural end (its first EOS; the
  forced protocol runs on past it), pooled; None where a row does not record its end (rows written before
  `NaturalEnd`). `natural_records(...)`: the natural-text protocol beside the forced one: each generation
  timed only up to its own EOS (its tokens and steps up to there, prefill included), pooled over the prompts
  whose reply is at least `min_tokens` long in every variant of the pair; ratios and spread as above.
- `counter_metrics(rows)`: host-to-device bytes and loads per output token, hit rate = hits / (hits + misses),
  stall share = seconds the compute stalled for loads (`wait_s`, not the copies' own `copy_s`) / timed
  seconds, stall microseconds per load, all pooled over the rows.
- `counter_records(rows, variants, bootstrap)`: Table 2: those per (pair, variant), accuracy with a bootstrap
  interval over prompts, and the change vs Standard SD (traffic %, hit rate pp, stall share pp).
- the sweep's accuracy, mean set size and tau per (pair, variant): `spine.records.graded_records`.
- `means(records, fields)`: unweighted means over pairs per variant.
- `headline(timed, counters, prune)`: the paper's headline quantities as the run measured them (the self-sized
  method vs Standard SD, pruning on vs off), per pair; `pruning_accuracy(rows, prune, resamples)`: accuracy
  with pruning minus without, paired over the counters run's prompts (pooled over pairs), with its interval.
"""
from __future__ import annotations

from dataclasses import dataclass

import statistics
from collections import defaultdict

import numpy as np

from acceptmoe.methods import B0_METHOD, METHODS, Variant
from acceptmoe.methods import BASELINE as BASELINE_METHOD

from ..spine.config import Pair
from ..spine.records import accuracy_fields, aligned_rows, rate

BASELINE = Variant(BASELINE_METHOD).name     # ratios and changes are taken against this variant
HEADLINE = Variant(B0_METHOD).name    # the self-sized method the paper's headline numbers are about
NO_TAU = {Variant(n).name for n, s in METHODS.items() if not s.speculates}    # one token per step, no tree


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


def throughput_records(rows, phase: str, variants: tuple[str, ...], prompts: int, center: str) -> list[dict]:
    """center: "pooled" (resident protocol) or "median" (offloaded protocol)."""
    out = []
    for (model, task), pair_rows in by_pair(rows, phase).items():
        reps = complete_reps(pair_rows, variants, prompts)
        if not reps:
            continue
        tput = {v: [rate(reps[r][v], "tokens", "wall_s") for r in reps] for v in variants}
        for v in variants:
            all_rows = [x for r in reps for x in reps[r][v]]
            rec = {"model": model, "task": task, "variant": v, "reps": len(reps), "prompts": prompts,
                   "tokens": sum(x["tokens"] for x in all_rows),
                   "tokens_per_s": rate(all_rows, "tokens", "wall_s") if center == "pooled" else statistics.median(tput[v]),
                   "tokens_per_s_min": min(tput[v]), "tokens_per_s_max": max(tput[v]),
                   "tau": rate(all_rows, "accepted", "steps") if v not in NO_TAU else None,
                   "ms_per_step": 1e3 * rate(all_rows, "decode_s", "steps"),
                   "load_avg_1m": statistics.fmean(x["load_avg_1m"] for x in all_rows)
                   if all("load_avg_1m" in x for x in all_rows) else None,
                   "after_eos_share": after_eos(all_rows)}
            if BASELINE in variants:
                ratios = [a / b for a, b in zip(tput[v], tput[BASELINE])]
                mid = statistics.fmean(ratios) if center == "pooled" else statistics.median(ratios)
                rec.update(ratio_vs_standard_sd=mid,
                           ratio_min=min(ratios), ratio_max=max(ratios),
                           ratio_std=statistics.stdev(ratios) if len(ratios) > 1 else 0.0,
                           ratios_per_rep=[round(x, 4) for x in ratios])
            out.append(rec)
    return out


def natural_length(row: dict) -> int:
    """Tokens of the reply up to and including its own EOS (all timed tokens where it has none)."""
    return row["tokens"] if row["natural_tokens"] is None else row["natural_tokens"]


def after_eos(rows: list[dict]) -> float | None:
    if not rows or any("natural_tokens" not in r for r in rows):
        return None
    return sum(r["tokens"] - natural_length(r) for r in rows) / sum(r["tokens"] for r in rows)


def after_eos_pooled(records: list[dict], rows: list[dict], phase: str) -> dict[str, float | None]:
    """variant -> the after-EOS share over every pair's rows the records counted, and "all" over every variant."""
    counted = {(r["model"], r["task"], r["variant"]) for r in records}
    mine = [r for r in rows if r.get("phase") == phase and (r["model"], r["task"], r["variant"]) in counted]
    out = {v: after_eos([r for r in mine if r["variant"] == v]) for v in dict.fromkeys(x["variant"] for x in records)}
    return {**out, "all": after_eos(mine)}


def natural_records(rows, phase: str, variants: tuple[str, ...], prompts: int, center: str,
                    min_tokens: int) -> list[dict]:
    """The natural-text protocol per (pair, variant); none for a pair whose rows do not record their ends."""
    out = []
    for (model, task), pair_rows in by_pair(rows, phase).items():
        reps = complete_reps(pair_rows, variants, prompts)
        if not reps or after_eos(pair_rows) is None:
            continue
        keep = [i for i in range(prompts)
                if all(natural_length(reps[r][v][i]) >= min_tokens for r in reps for v in variants)]
        if not keep:
            continue
        tput = {v: [sum(natural_length(reps[r][v][i]) for i in keep) / sum(reps[r][v][i]["natural_s"] for i in keep)
                    for r in reps] for v in variants}
        for v in variants:
            sel = [reps[r][v][i] for r in reps for i in keep]
            rec = {"model": model, "task": task, "variant": v, "reps": len(reps), "natural_prompts": len(keep),
                   "natural_tokens": sum(natural_length(x) for x in sel),
                   "natural_tokens_per_s": (sum(natural_length(x) for x in sel) / sum(x["natural_s"] for x in sel)
                                            if center == "pooled" else statistics.median(tput[v])),
                   "natural_tau": (sum(natural_length(x) - 1 for x in sel) / sum(x["natural_steps"] for x in sel)
                                   if v not in NO_TAU else None)}
            if BASELINE in variants:
                ratios = [a / b for a, b in zip(tput[v], tput[BASELINE])]
                rec.update(natural_ratio_vs_standard_sd=statistics.fmean(ratios) if center == "pooled"
                           else statistics.median(ratios), natural_ratio_min=min(ratios), natural_ratio_max=max(ratios))
            out.append(rec)
    return out


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


POOLED = "pooled"          # the task label of a model's records pooled over its tasks


def counter_records(rows, variants: tuple[str, ...], resamples: int, pooled: bool = False) -> list[dict]:
    """Table 2 per (pair, variant) from the instrumented run, with changes vs Standard SD; `pooled`: per
    (model, variant) over all the model's pairs instead (each pair on the prompts every variant finished)."""
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
                   **accuracy_fields(aligned[v], None if v == BASELINE else aligned.get(BASELINE), resamples)}
            if base:
                rec.update(traffic_change_pct=100 * (m["bytes_per_token"] / base["bytes_per_token"] - 1)
                           if base["bytes_per_token"] else None,
                           hit_rate_change_pp=100 * (m["hit_rate"] - base["hit_rate"]),
                           stall_share_change_pp=100 * (m["stall_share"] - base["stall_share"]))
            out.append(rec)
    return out


@dataclass(frozen=True)
class SweepRoles:
    """Which sweep variants are the fixed budgets, the self-sized reference and the baseline (by name)."""
    fixed: tuple[str, ...]
    fixed_label: str
    self_sized: str | None
    baseline: str | None = BASELINE


def self_sized_vs_best(records: list[dict], roles: SweepRoles) -> list[dict]:
    """Per pair: the self-sized variant's accuracy minus the best fixed budget's (pp), and which budget was best."""
    out = []
    for pair in dict.fromkeys((r["model"], r["task"]) for r in records):
        recs = [r for r in records if (r["model"], r["task"]) == pair]
        fixed = [r for r in recs if r["variant"] in roles.fixed]
        self_sized = [r for r in recs if r["variant"] == roles.self_sized]
        if fixed and self_sized:
            best = max(fixed, key=lambda r: (r["accuracy"], -r["budget"]))
            out.append({"model": pair[0], "task": pair[1], "best_budget": best["budget"],
                        "best_accuracy": best["accuracy"], "acceptmoe_accuracy": self_sized[0]["accuracy"],
                        "acceptmoe_set_size": self_sized[0]["mean_set_size"],
                        "diff_pp": self_sized[0]["accuracy"] - best["accuracy"]})
    return out


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


def mean_ratio_spread(records: list[dict]) -> dict[str, dict]:
    """variant -> the mean over pairs of the per-repetition ratios, per repetition (min, max across them)."""
    out = {}
    for v in dict.fromkeys(r["variant"] for r in records):
        per_rep = [r["ratios_per_rep"] for r in records if r["variant"] == v and "ratios_per_rep" in r]
        n = min((len(x) for x in per_rep), default=0)
        if n:
            reps = [float(np.mean([x[i] for x in per_rep])) for i in range(n)]
            out[v] = {"per_rep": reps, "min": min(reps), "max": max(reps)}
    return out


def mean_of(records: list[dict], variant: str, field: str):
    vals = [r.get(field) for r in records if r["variant"] == variant]
    return sum(vals) / len(vals) if vals and None not in vals else None


def per_pair_change(a: list[dict], b: list[dict], field: str, pct: bool) -> list[float]:
    """Per pair: records `a` vs records `b` (e.g. pruning on vs off), as % change or pp difference."""
    base = {(r["model"], r["task"]): r[field] for r in b}
    return [100 * (r[field] / base[(r["model"], r["task"])] - 1) if pct else 100 * (r[field] - base[(r["model"], r["task"])])
            for r in a if (r["model"], r["task"]) in base and r[field] is not None and base[(r["model"], r["task"])]]


def headline(timed: dict[str, list[dict]], counters: list[dict], prune: tuple[str, str] | None) -> dict:
    """The paper's headline quantities (docs/method.md, "The paper's claims") as one run measured them; a key
    is present only where the run has what it needs:
    `resident`, `offload-timed`: the self-sized method's throughput ratio to Standard SD, per pair (records);
    `traffic` (%), `hit_rate` (pp): its change vs Standard SD per pair; `stall`: variant -> mean stall share
    over pairs (Standard SD and the self-sized method); `prune_traffic` (%), `prune_hit_rate` (pp),
    `prune_throughput` (%, offloaded timed): pruning on vs off per pair."""
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
    on_name, off_name = prune or (None, None)
    on = [r for r in counters if r["variant"] == on_name]
    off = [r for r in counters if r["variant"] == off_name]
    if on and off:
        out["prune_traffic"] = per_pair_change(on, off, "bytes_per_token", True)
        out["prune_hit_rate"] = per_pair_change(on, off, "hit_rate", False)
    on_t = [r for r in timed.get("offload-timed", []) if r["variant"] == on_name]
    off_t = [r for r in timed.get("offload-timed", []) if r["variant"] == off_name]
    if on_t and off_t:
        out["prune_throughput"] = per_pair_change(on_t, off_t, "tokens_per_s", True)
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
