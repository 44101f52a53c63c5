"""What each experiment's saved run says about the paper's claims: one `Measured` per (claim, part).

Every number comes from the experiment's own record builders, never recomputed here: Table 1 from
`table1.table.build_table1` (`mean_diff` for two methods' accuracy, the aligned rows for a per-pair tau ratio),
the calibration study from `study.tables`; the throughput runs and the replay in `timed`. This module only
picks the values and formats them.

    READERS[experiment](run_dir) -> [Measured, ...]
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from acceptmoe.evals.stats import paired_bootstrap_speedup
from acceptmoe.methods import B0_METHOD, BASELINE, METHODS, Score, fixed_twin

from ..spine.config import from_saved
from ..spine.runs import NothingToTabulate, SampleLog
from ..study import tables as study_tables
from ..study.config import CalibrationStudyConfig
from ..table1 import table as table1_table
from .beyond import admission_rows, batch_rows, divergence_rows
from .measured import CI, Measured, engine_measures, iv, meta, pp, where, world_of
from .timed import REPLAY_CLAIMS, REPLAY_HINT, claims_with_replay, replay_rows, throughput_rows
from .verdict import Evidence

__all__ = ["READERS", "REPLAY_CLAIMS", "REPLAY_HINT", "claims_with_replay"]


def _fixed(score: Score) -> str:
    """The fixed-budget method with this membership score (the matched-budget comparison's members)."""
    return next(m for m, s in METHODS.items() if s.needs_budget and s.score is score)


# ----- Table 1 -----
def _built(run: Path) -> table1_table.Table1:
    t = table1_table.build_table1(run)
    if not t.records:
        raise NothingToTabulate(f"{run} holds no pair finished by every method: finish it with --resume first")
    return t


def table1_rows(run: Path) -> list[Measured]:
    world = meta(run)["world"]
    return _table1_measured(_built(run), dict(measures=engine_measures(world), run=where(run), world=world_of(world)))


def _label(pair, t: table1_table.Table1) -> str:
    return pair.task if len({p.model for p in t.aligned}) == 1 else f"{pair.model}/{pair.task}"


def tau_ratios(t: table1_table.Table1, method: str, against: str) -> tuple[Evidence, ...]:
    """Per pair: `method`'s pooled tau over `against`'s on the same prompts, with its paired bootstrap interval."""
    bs, out = t.cfg.world.bootstrap, []
    for pair, rows in t.aligned.items():
        a, b = rows[method], rows[against]
        col = lambda rs, k: np.array([r[k] for r in rs], float)    # noqa: E731
        r = paired_bootstrap_speedup(col(a, "accepted"), col(a, "steps"), col(b, "accepted"), col(b, "steps"),
                                     bs.resamples, bs.confidence, bs.seed)
        out.append(Evidence(r.estimate, r.low, r.high, CI, _label(pair, t), PROMPTS, r.n))
    return tuple(out)


PROMPTS = "prompts"


def prompts_of(t: table1_table.Table1, method: str) -> int:
    """How many prompts a built table's paired comparisons of `method` rest on (every pair's aligned prompts)."""
    return sum(len(rows[method]) for rows in t.aligned.values() if method in rows)


def _tau_row(t: table1_table.Table1, claim_id: str, method: str, against: str, base: dict) -> Measured | None:
    tau = {m: {p: r["tau"] for r in t.records if r["method"] == m for p in [(r["model"], r["task"])]}
           for m in (method, against)}
    if not all(tau.values()) or not t.aligned:
        return None
    diffs = [tau[method][p] - tau[against][p] for p in tau[method]]
    a, s = (sum(v.values()) / len(v) for v in tau.values())
    pairs = tau_ratios(t, method, against)
    return Measured(claim_id, "", f"{METHODS[method].label} {a:.2f}, {METHODS[against].label} {s:.2f} (ratio "
                    f"{a / s:.3f}; per pair difference max abs {max(abs(d) for d in diffs):.2f}, median "
                    f"{float(np.median(diffs)):+.2f} tokens)",
                    f"per pair ratio {min(p.low for p in pairs):.3f} to {max(p.high for p in pairs):.3f} (95 %)",
                    a / s, None, None, pairs=pairs, unit=f"{PROMPTS} per pair", n=min(p.n for p in pairs), **base)


def _table1_measured(t: table1_table.Table1, base: dict) -> list[Measured]:
    """Every Table 1 claim from a built table (a run's, or one world's view of a worlds run); a claim whose
    methods the run did not include is left out (the table then says it is not measured)."""
    out = []
    m = t.means.get(B0_METHOD, {})
    if m.get("diff_vs_standard_sd") is not None:
        per_pair = [abs(r["diff_vs_standard_sd"]) for r in t.records if r["method"] == B0_METHOD]
        est, lo, hi = m["diff_vs_standard_sd"], m["diff_low"], m["diff_high"]
        out.append(Measured("accuracy-vs-sd", "", f"{pp(est)} pp over {m['pairs']} pairs (max abs per pair "
                            f"{max(per_pair):.1f})", iv(lo, hi), est, lo, hi, bounds=CI, unit=PROMPTS,
                            n=prompts_of(t, B0_METHOD), **base))
    twin = fixed_twin(B0_METHOD)
    if B0_METHOD in t.means and twin in t.means:
        est, lo, hi = table1_table.mean_diff(t, B0_METHOD, twin)
        acc = {m: {(r["model"], r["task"]): r["accuracy"] for r in t.records if r["method"] == m} for m in (B0_METHOD, twin)}
        gaps = [abs(acc[B0_METHOD][p] - acc[twin][p]) for p in acc[B0_METHOD] if p in acc[twin]]
        out.append(Measured("self-vs-fixed-b0", "", f"{pp(est)} pp over {len(gaps)} pairs (per pair abs difference "
                            f"{sum(gaps) / len(gaps):.2f} pp mean, {max(gaps):.2f} max)", iv(lo, hi), est, lo, hi,
                            bounds=CI, unit=PROMPTS, n=prompts_of(t, B0_METHOD), **base))
    fixed = [f for f in METHODS if METHODS[f].needs_budget and f in t.means]
    if len(fixed) > 1:
        accs = tuple(t.means[f]["accuracy"] for f in fixed)
        steps = tuple(Evidence(*table1_table.mean_diff(t, hi_, lo_), CI, f"{METHODS[hi_].label} - {METHODS[lo_].label}",
                               PROMPTS, prompts_of(t, hi_)) for lo_, hi_ in zip(fixed, fixed[1:], strict=False))
        out.append(Measured("matched-budget", "", " / ".join(f"{a:.1f}" for a in accs) + " % ("
                            + " / ".join(METHODS[f].label for f in fixed) + ")",
                            "steps " + ", ".join(iv(s.low, s.high) for s in steps), None, None, None, accs,
                            steps=steps, unit=PROMPTS, n=min(s.n for s in steps), **base))
    ours, theirs = _fixed(Score.COMMITMENT), _fixed(Score.ROUTER_MASS)
    if ours in t.means and theirs in t.means:
        est, lo, hi = table1_table.mean_diff(t, ours, theirs)
        out.append(Measured("matched-budget-gap", "", f"{pp(est)} pp over {len(t.aligned)} pairs", iv(lo, hi),
                            est, lo, hi, bounds=CI, unit=PROMPTS, n=prompts_of(t, ours), **base))
    b0 = [d.b0 for d in t.b0.values()]
    if b0:
        out.append(Measured("b0-range", "", f"{min(b0)} to {max(b0)} experts ({len(b0)} pairs)", "-",
                            None, None, None, unit="pairs", n=len(b0), **base))
    for claim_id, method, against in (("tau-parity", B0_METHOD, BASELINE), ("tau-parity-moe-spec", ours, theirs)):
        row = _tau_row(t, claim_id, method, against, base)
        if row is not None:
            out.append(row)
    return out


# ----- the worlds study (Table 1 over independently trained worlds) -----
def _paired(claim_id: str) -> tuple[str, str] | None:
    """The two methods whose paired accuracy difference a Table 1 claim is (None: not a difference)."""
    return {"accuracy-vs-sd": (B0_METHOD, BASELINE), "self-vs-fixed-b0": (B0_METHOD, fixed_twin(B0_METHOD)),
            "matched-budget-gap": (_fixed(Score.COMMITMENT), _fixed(Score.ROUTER_MASS))}.get(claim_id)


def worlds_rows(run: Path) -> list[Measured]:
    """A worlds run: each Table 1 claim per world (`table1.table.for_model`), reported as one row across the
    worlds: the mean of the per-world estimates, for a paired difference the interval that resamples worlds
    and then prompts within each world's pairs (`table1.table.worlds_interval`), every world's estimate in
    `spread` (the worlds column), and for a per-pair claim every world's pairs."""
    t, world = _built(run), meta(run)["world"]
    names = [m["name"] for m in world["models"]]
    views = {name: table1_table.for_model(t, name) for name in names}
    base = dict(measures=engine_measures(world), run=where(run), world=f"{len(names)} worlds ({world_of(world)})")
    per = {name: _table1_measured(v, base) for name, v in views.items() if v.records}
    out = []
    for first in next(iter(per.values()), []):
        group = {name: next((m for m in rows if (m.claim, m.part, m.note) == (first.claim, first.part, first.note)),
                            None) for name, rows in per.items()}
        if None in group.values():
            continue
        out.append(_across(first, group, views, t.cfg.world.bootstrap, base))
    return out


def _worlds_iv(views: dict, pair: tuple[str, str], bs) -> tuple[float, float]:
    diffs = {name: [np.array([r["correct"] for r in rows[pair[0]]], float)
                    - np.array([r["correct"] for r in rows[pair[1]]], float) for rows in v.aligned.values()]
             for name, v in views.items() if v.records}
    return table1_table.worlds_interval(diffs, bs)


def _across(first: Measured, group: dict[str, Measured], views: dict, bs, base: dict) -> Measured:
    W, note = len(group), f"across {len(group)} worlds"
    ms = list(group.values())
    est = [m.estimate for m in ms]
    mean = sum(est) / W if None not in est else None
    values = tuple(sum(v) / W for v in zip(*(m.values for m in ms), strict=False)) if all(m.values for m in ms) else ()
    lo = hi = None
    pair = _paired(first.claim)
    if pair is not None:
        lo, hi = _worlds_iv(views, pair, bs)
    steps = ()
    if first.steps:
        fixed = [f for f in METHODS if METHODS[f].needs_budget and all(f in v.means for v in views.values())]
        steps = tuple(Evidence(sum(s.estimate for s in col) / W, *_worlds_iv(views, (b, a), bs), CI, col[0].label,
                               WORLDS, W)
                      for a, b, col in zip(fixed, fixed[1:], zip(*(m.steps for m in ms), strict=False), strict=False))
    pairs = tuple(Evidence(p.estimate, p.low, p.high, p.bounds, f"{name}/{p.label}", p.unit, p.n)
                  for name, m in group.items() for p in m.pairs)
    if pair is not None:
        ours = f"{pp(mean)} pp mean over {W} worlds"
    elif values:
        ordered = sum(all(a < b for a, b in zip(m.values, m.values[1:], strict=False)) for m in ms)
        ours = " / ".join(f"{x:.1f}" for x in values) + f" % mean over {W} worlds (ordered so in {ordered} of {W})"
    elif mean is not None:
        ours = f"{mean:.3f} mean over {W} worlds"
    else:
        ours = "; ".join(m.ours for m in ms)
    interval = "-" if lo is None else iv(lo, hi)
    if steps:
        interval = "steps " + ", ".join(iv(s.low, s.high) for s in steps)
    if pairs:
        interval = f"per pair ratio {min(p.low for p in pairs):.3f} to {max(p.high for p in pairs):.3f} (95 %)"
    unit, n = (WORLDS, W) if pair is not None or steps else (first.unit, first.n)
    return Measured(first.claim, first.part, ours, interval, mean, lo, hi, values,
                    spread=tuple(e for e in est if e is not None), note=note, worlds=W,
                    bounds=CI if lo is not None else "", pairs=pairs, steps=steps, unit=unit, n=n, **base)


WORLDS = "worlds (then prompts within each)"


# ----- the calibration study -----
def study_rows(run: Path) -> list[Measured]:
    """B0 by the same rule from training-split traces (reviewer request 4), beside Table 1's."""
    cfg = from_saved(CalibrationStudyConfig, meta(run))
    records = study_tables.study_records(list(SampleLog(Path(run) / "samples.jsonl")), cfg.bootstrap_resamples)
    _, recs = study_tables.b0_md(Path(run), cfg, records)
    if not recs:
        return []
    b0 = [r["b0_train"] for r in recs]
    world = meta(run)["world"]
    limited = [r for r in recs if r["train_limited"]]
    note = "from training-split traces"
    if limited:
        note += f" ({len(limited)} of {len(recs)} pairs on fewer prompts than the rule asks: limited)"
    return [Measured("b0-range", "", f"{min(b0)} to {max(b0)} experts ({len(b0)} pairs)", "-", None, None, None,
                     measures=engine_measures(world), run=where(run), world=world_of(world),
                     note=note, unit="pairs", n=len(b0))]


READERS: dict[str, Callable[[Path], list[Measured]]] = {
    "table1": table1_rows, **{e: throughput_rows for e in ("fig3", "fig4", "table2", "sweep", "fig5")},
    "calibration-study": study_rows, "replay": replay_rows, "worlds": worlds_rows, "batch-study": batch_rows,
    "divergence": divergence_rows, "admission": admission_rows}
