"""What each experiment's saved run says about the paper's claims: one `Measured` per (claim, part).

Every number comes from the experiment's own record builders, never recomputed here: Table 1 from
`table1.table.build_table1` (and `mean_diff` for two methods), the throughput runs from
`throughput.report.load_records` and `throughput.records.headline` / `pruning_accuracy` /
`self_sized_vs_best` / `mean_ratio_spread`, the calibration study from `study.tables`, the replay from
`replay.report.records`. This module only picks the values and formats them.

    READERS[experiment](run_dir) -> [Measured, ...]
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from acceptmoe.methods import B0_METHOD, BASELINE, METHODS, Score, Variant

from ..replay import report as replay_report
from ..spine.config import from_saved
from ..spine.paper import Claim, claim
from ..spine.runs import REPO, NothingToTabulate, SampleLog
from ..study import tables as study_tables
from ..study.config import CalibrationStudyConfig
from ..table1 import table as table1_table
from ..throughput import records as tp_records
from ..throughput.report import load_records

ENGINE = "engine"          # the kinds of measurement a claim can have: the tiny engine itself, or the replay
REPLAY = "replay"


@dataclass(frozen=True)
class Measured:
    claim: str
    part: str                 # "" for a claim reported in one row
    ours: str
    interval: str             # "[low, high]" (95 %), a min-max over repetitions or per pair, or "-"
    estimate: float | None    # what the direction is checked on (and the worlds spread is taken over)
    low: float | None         # the 95 % interval's ends where the run gives one
    high: float | None
    values: tuple[float, ...] = ()   # for `increasing` / `decrease` directions
    measures: str = ""
    kind: str = ENGINE
    run: str = ""
    world: str = ""           # which trained world the run used (its target checkpoints)
    note: str = ""            # e.g. a row from another rule than the claim's own
    spread: tuple[float, ...] = ()   # a row across worlds: each world's estimate
    worlds: int = 0                  # a row across worlds: how many (0: a row of one run)


def where(run: Path) -> str:
    run = Path(run).resolve()
    return str(run.relative_to(REPO)) if run.is_relative_to(REPO) else str(run)


def _meta(run: Path) -> dict:
    return json.loads((Path(run) / "config.json").read_text())["config"]


def _world(world: dict) -> str:
    return ", ".join(m["target"] for m in world["models"])


def _device(device: str) -> str:
    return "GPU run" if str(device).startswith("cuda") else "CPU"


def _engine_measures(world: dict) -> str:
    d = _device(world["device"])
    return "tiny engine on CPU" if d == "CPU" else "tiny engine, GPU run"


def _pp(x: float) -> str:
    return f"{x:+.1f}"


def _iv(low: float, high: float, digits: int = 1, sign: bool = True) -> str:
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    return f"[{f.format(low)}, {f.format(high)}]"


def _range(vals: list[float], unit: str) -> tuple[str, str]:
    mean = sum(vals) / len(vals)
    return f"{mean:+.1f} {unit} mean over {len(vals)} pairs", f"per pair {min(vals):+.1f} to {max(vals):+.1f}"


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
    world = _meta(run)["world"]
    return _table1_measured(_built(run), dict(measures=_engine_measures(world), run=where(run), world=_world(world)))


def _table1_measured(t: table1_table.Table1, base: dict) -> list[Measured]:
    """Every Table 1 claim from a built table (a run's, or one world's view of a worlds run); a claim whose
    methods the run did not include is left out (the table then says it is not measured)."""
    out = []
    m = t.means.get(B0_METHOD, {})
    if m.get("diff_vs_standard_sd") is not None:
        per_pair = [abs(r["diff_vs_standard_sd"]) for r in t.records if r["method"] == B0_METHOD]
        est, lo, hi = m["diff_vs_standard_sd"], m["diff_low"], m["diff_high"]
        out.append(Measured("accuracy-vs-sd", "", f"{_pp(est)} pp over {m['pairs']} pairs (max abs per pair "
                            f"{max(per_pair):.1f})", _iv(lo, hi), est, lo, hi, **base))
    fixed = [f for f in METHODS if METHODS[f].needs_budget and f in t.means]
    if len(fixed) > 1:
        accs = tuple(t.means[f]["accuracy"] for f in fixed)
        out.append(Measured("matched-budget", "", " / ".join(f"{a:.1f}" for a in accs) + " % ("
                            + " / ".join(METHODS[f].label for f in fixed) + ")", "-", None, None, None, accs, **base))
    ours, theirs = _fixed(Score.COMMITMENT), _fixed(Score.ROUTER_MASS)
    if ours in t.means and theirs in t.means:
        est, lo, hi = table1_table.mean_diff(t, ours, theirs)
        out.append(Measured("matched-budget-gap", "", f"{_pp(est)} pp over {len(t.aligned)} pairs", _iv(lo, hi),
                            est, lo, hi, **base))
    b0 = [d.b0 for d in t.b0.values()]
    if b0:
        out.append(Measured("b0-range", "", f"{min(b0)} to {max(b0)} experts ({len(b0)} pairs)", "-",
                            None, None, None, **base))
    tau = {meth: [r["tau"] for r in t.records if r["method"] == meth] for meth in (B0_METHOD, BASELINE)}
    if all(tau.values()):
        a, s = (sum(v) / len(v) for v in tau.values())
        out.append(Measured("tau-parity", "", f"{METHODS[B0_METHOD].label} {a:.2f}, {METHODS[BASELINE].label} "
                            f"{s:.2f} (ratio {a / s:.3f})", "-", a / s, None, None, **base))
    return out


# ----- the worlds study (Table 1 over independently trained worlds) -----
def _paired(claim_id: str) -> tuple[str, str] | None:
    """The two methods whose paired accuracy difference a Table 1 claim is (None: not a difference)."""
    return {"accuracy-vs-sd": (B0_METHOD, BASELINE),
            "matched-budget-gap": (_fixed(Score.COMMITMENT), _fixed(Score.ROUTER_MASS))}.get(claim_id)


def worlds_rows(run: Path) -> list[Measured]:
    """A worlds run: each Table 1 claim per world (`table1.table.for_model`), reported as one row across the
    worlds: the mean of the per-world estimates, for a paired difference the interval that resamples worlds
    and then prompts within each world's pairs (`table1.table.worlds_interval`), every world's estimate in
    `spread` (the worlds column)."""
    t, world = _built(run), _meta(run)["world"]
    names = [m["name"] for m in world["models"]]
    views = {name: table1_table.for_model(t, name) for name in names}
    base = dict(measures=_engine_measures(world), run=where(run), world=f"{len(names)} worlds ({_world(world)})")
    per = {name: _table1_measured(v, base) for name, v in views.items() if v.records}
    out = []
    for first in next(iter(per.values()), []):
        group = [next((m for m in rows if (m.claim, m.part, m.note) == (first.claim, first.part, first.note)), None)
                 for rows in per.values()]
        if None in group:
            continue
        out.append(_across(first, group, views, t.cfg.world.bootstrap, base))
    return out


def _across(first: Measured, group: list[Measured], views: dict, bs, base: dict) -> Measured:
    W, note = len(group), f"across {len(group)} worlds"
    est = [m.estimate for m in group]
    mean = sum(est) / W if None not in est else None
    values = tuple(sum(v) / W for v in zip(*(m.values for m in group))) if all(m.values for m in group) else ()
    lo = hi = None
    pair = _paired(first.claim)
    if pair is not None:
        diffs = {name: [100 * (np.array([r["correct"] for r in rows[pair[0]]], float)
                               - np.array([r["correct"] for r in rows[pair[1]]], float)) for rows in v.aligned.values()]
                 for name, v in views.items() if v.records}
        lo, hi = table1_table.worlds_interval(diffs, bs)
    if pair is not None:
        ours = f"{_pp(mean)} pp mean over {W} worlds"
    elif values:
        ordered = sum(all(a < b for a, b in zip(m.values, m.values[1:])) for m in group)
        ours = " / ".join(f"{x:.1f}" for x in values) + f" % mean over {W} worlds (ordered so in {ordered} of {W})"
    elif mean is not None:
        ours = f"{mean:.3f} mean over {W} worlds"
    else:
        ours = "; ".join(m.ours for m in group)
    return Measured(first.claim, first.part, ours, "-" if lo is None else _iv(lo, hi), mean, lo, hi, values,
                    spread=tuple(e for e in est if e is not None), note=note, worlds=W, **base)


# ----- throughput runs (fig3, fig4, table2, sweep, fig5) -----
def throughput_rows(run: Path) -> list[Measured]:
    got = load_records(run)
    cfg, prune = got.cfg, got.cfg.pruning_pair()
    world = _meta(run)["world"]
    base = dict(measures=_engine_measures(world), run=where(run), world=_world(world))
    h = tp_records.headline(got.timed, got.counters, prune)
    out = []
    for phase, claim_id in (("resident", "resident-throughput"), ("offload-timed", "offload-throughput")):
        if phase in h:
            r = [x["ratio_vs_standard_sd"] for x in h[phase]]
            mean = sum(r) / len(r)
            spread = tp_records.mean_ratio_spread(got.timed[phase]).get(tp_records.HEADLINE)
            reps = (f"repetitions {spread['min']:.3f}-{spread['max']:.3f} (mean over pairs, {len(spread['per_rep'])} "
                    f"reps)" if spread else "-")
            center = "mean" if phase == "resident" else "mean of per-pair medians"
            out.append(Measured(claim_id, "", f"{mean:.3f}x {center} over {len(r)} pairs (per pair {min(r):.3f}-"
                                f"{max(r):.3f}), tokens/s", reps, mean, None, None, **base))
    for key, claim_id, unit in (("traffic", "h2d-traffic", "%"), ("hit_rate", "hit-rate", "pp")):
        if key in h:
            ours, spread = _range(h[key], unit)
            out.append(Measured(claim_id, "", ours, spread, sum(h[key]) / len(h[key]), None, None, **base))
    if "stall" in h and None not in h["stall"].values():
        sd, acc = (100 * h["stall"][v] for v in (tp_records.BASELINE, tp_records.HEADLINE))
        out.append(Measured("stall-share", "", f"{METHODS[BASELINE].label} {sd:.1f} %, {METHODS[B0_METHOD].label} "
                            f"{acc:.1f} % (mean over pairs)", "-", None, None, None, (sd, acc), **base))
    for key, part, unit in (("prune_traffic", "traffic", "%"), ("prune_hit_rate", "hit rate", "pp"),
                            ("prune_throughput", "throughput", "%")):
        if h.get(key):
            ours, spread = _range(h[key], unit)
            out.append(Measured("pruning", part, ours, spread, sum(h[key]) / len(h[key]), None, None, **base))
    acc = tp_records.pruning_accuracy(got.rows, prune, cfg.bootstrap_resamples)
    if acc:
        est, lo, hi = acc["accuracy_diff"], acc["accuracy_diff_low"], acc["accuracy_diff_high"]
        out.append(Measured("pruning", "accuracy", f"{_pp(est)} pp over {acc['prompts']} prompts (pooled over pairs)",
                            _iv(lo, hi), est, lo, hi, **base))
    best = tp_records.self_sized_vs_best(got.sweep, cfg.sweep_roles()) if got.sweep else []
    if best:
        d = [b["diff_pp"] for b in best]
        out.append(Measured("self-vs-best-fixed", "", f"{_pp(sum(d) / len(d))} pp mean, {_pp(min(d))} worst "
                            f"({len(d)} pairs; best budgets {', '.join(str(b['best_budget']) for b in best)})",
                            "-", min(d), None, None, **base))
    return out


# ----- the calibration study -----
def study_rows(run: Path) -> list[Measured]:
    """B0 by the same rule from training-split traces (reviewer request 4), beside Table 1's."""
    cfg = from_saved(CalibrationStudyConfig, _meta(run))
    records = study_tables.study_records(list(SampleLog(Path(run) / "samples.jsonl")), cfg.bootstrap_resamples)
    _, recs = study_tables.b0_md(Path(run), cfg, records)
    if not recs:
        return []
    b0 = [r["b0_train"] for r in recs]
    world = _meta(run)["world"]
    return [Measured("b0-range", "", f"{min(b0)} to {max(b0)} experts ({len(b0)} pairs)", "-", None, None, None, measures=_engine_measures(world), run=where(run),
                     world=_world(world), note="from training-split traces")]


# ----- the replay -----
REPLAY_CLAIMS = {"resident": "resident-throughput"}   # any other (offloaded) store: offload-throughput


def replay_rows(run: Path) -> list[Measured]:
    recs = replay_report.records(Path(run))
    plan = json.loads((Path(run) / "replay.json").read_text())
    cfg = _meta(run)
    shape, device = plan["shape"]["name"], plan["device"]
    measures = f"expert-work replay at {shape}'s shape ({_device(device)})"
    me = Variant(B0_METHOD).name
    out = []
    for store in dict.fromkeys(r["store"] for r in recs):
        mine = [r for r in recs if r["store"] == store]
        ref = next(r["variant"] for r in mine if "speedup_per_token" not in r)
        r = next((r for r in mine if r["variant"] == me and "speedup_per_token" in r), None)
        if r is None or ref != Variant(BASELINE).name:
            continue
        bound = next((k for k in r if k.startswith("bound_speedup_per_token_")), None)
        extra = [f"{bound.removeprefix('bound_speedup_per_token_')} bytes/bandwidth bound {r[bound]:.3f}x"] if bound else []
        if r.get("engine_ratio") is not None:
            extra.append(f"recorded run's tiny engine {r['engine_ratio']:.3f}x")
        est, lo, hi = r["speedup_per_token"], r["speedup_per_token_low"], r["speedup_per_token_high"]
        out.append(Measured(REPLAY_CLAIMS.get(store, "offload-throughput"), "",
                            f"{est:.3f}x per output token, {store} store ({'; '.join(extra)})",
                            _iv(lo, hi, 3, sign=False), est, lo, hi, measures=measures, kind=REPLAY,
                            run=where(run), world=_world(cfg["world"])))
    return out


READERS: dict[str, Callable[[Path], list[Measured]]] = {
    "table1": table1_rows, **{e: throughput_rows for e in ("fig3", "fig4", "table2", "sweep", "fig5")},
    "calibration-study": study_rows, "replay": replay_rows, "worlds": worlds_rows}

# Claims the replay speaks to as well: without a replay run they get a row saying how to make one.
REPLAY_HINT = ("./reproduce.sh replay --run <a fig4 run made with --record-routes> --shape qwen3-30b-a3b")


def claims_with_replay() -> list[Claim]:
    return [claim(c) for c in dict.fromkeys([*REPLAY_CLAIMS.values(), "offload-throughput"])]
