"""What the throughput runs (fig3, fig4, table2, sweep, fig5) and the replay say about the paper's claims.

Numbers come from the throughput records (`throughput.report.load_records`, `throughput.records`) and the
replay's report (`replay.report.records`); this module picks them, gives each the interval the verdict is
judged on (a spread over repetitions where the run repeats, per pair where the paper speaks of every pair) and
formats them. A claim of every pair carries each pair's evidence: its spread over repetitions, or its point
estimate where the run measures it once (the counters run).
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from acceptmoe.methods import B0_METHOD, BASELINE, METHODS, REFERENCE, Variant

from ..replay import report as replay_report
from ..spine.paper import PAPER_GPUS, Claim, claim
from ..throughput import records as tp_records
from ..throughput.report import load_records
from .measured import (CI, REPLAY, REPS, Measured, engine_measures, iv, meta, pair_range, points, pp, where,
                       world_of)
from .verdict import Evidence

AR = Variant(REFERENCE).name
ACROSS = "spread over pairs"


def _label(r: dict, models: set[str]) -> str:
    return r["task"] if len(models) == 1 else f"{r['model']}/{r['task']}"


def _per_rep(recs: list[dict], variant: str) -> dict[tuple[str, str], list[float]]:
    """(model, task) -> the variant's per-repetition ratio to Standard SD."""
    return {(r["model"], r["task"]): r["ratios_per_rep"] for r in recs if r["variant"] == variant
            and "ratios_per_rep" in r}


def _versus(recs: list[dict], num: str, den: str, center: str) -> list[tuple[dict, list[float], float]]:
    """Per pair: (the numerator's record, per-repetition num / den tokens/s ratios (both taken in the same
    repetition against Standard SD), their centre)."""
    a, b = _per_rep(recs, num), _per_rep(recs, den)
    out = []
    for r in recs:
        key = (r["model"], r["task"])
        if r["variant"] == num and key in b:
            ratios = [x / y for x, y in zip(a[key], b[key])]
            out.append((r, ratios, statistics.fmean(ratios) if center == "mean" else statistics.median(ratios)))
    return out


def _eos(got, phase: str) -> str:
    share = tp_records.after_eos_pooled(got.timed[phase], got.rows, phase)["all"]
    if share is None:
        return "after-EOS share not recorded"
    return f"{100 * share:.0f} % of timed tokens after EOS (all variants)"


# ----- throughput runs (fig3, fig4, table2, sweep, fig5) -----
def throughput_rows(run: Path) -> list[Measured]:
    got = load_records(run)
    cfg, prune = got.cfg, got.cfg.pruning_pair()
    world = meta(run)["world"]
    base = dict(measures=engine_measures(world), run=where(run), world=world_of(world))
    h = tp_records.headline(got.timed, got.counters, prune)
    out = []
    for phase, claim_id, center in (("resident", "resident-throughput", "mean"),
                                    ("offload-timed", "offload-throughput", "median")):
        if phase in h:
            out += _ratio_rows(got, phase, claim_id, center, h, base)
    if "offload-timed" in got.timed:
        out += _versus_ar(got, base)
    out += _counter_rows(got, h, base)
    acc = tp_records.pruning_accuracy(got.rows, prune, cfg.bootstrap_resamples)
    if acc:
        est, lo, hi = acc["accuracy_diff"], acc["accuracy_diff_low"], acc["accuracy_diff_high"]
        out.append(Measured("pruning", "accuracy", f"{pp(est)} pp over {acc['prompts']} prompts (pooled over pairs)",
                            iv(lo, hi), est, lo, hi, bounds=CI, **base))
    out += _sweep_rows(got, base)
    return out


def _ratio_rows(got, phase: str, claim_id: str, center: str, h: dict, base: dict) -> list[Measured]:
    """The self-sized method's ratio to Standard SD: the mean over pairs with its spread over repetitions, and
    (resident) every pair's own spread over repetitions."""
    recs = h[phase]
    models = {r["model"] for r in recs}
    r = [x["ratio_vs_standard_sd"] for x in recs]
    mean = sum(r) / len(r)
    spread = tp_records.mean_ratio_spread(got.timed[phase]).get(tp_records.HEADLINE)
    reps = (f"repetitions {spread['min']:.3f}-{spread['max']:.3f} (mean over pairs, {len(spread['per_rep'])} reps)"
            if spread else "-")
    label = "mean" if center == "mean" else "mean of per-pair medians"
    ours = (f"{mean:.3f}x {label} over {len(r)} pairs (per pair {min(r):.3f}-{max(r):.3f}), tokens/s; "
            f"{_eos(got, phase)}")
    lo, hi = (spread["min"], spread["max"]) if spread else (None, None)
    out = [Measured(claim_id, "", ours, reps, mean, lo, hi, bounds=REPS if spread else "", **base)]
    if phase == "resident":
        pairs = tuple(Evidence(x["ratio_vs_standard_sd"], x["ratio_min"], x["ratio_max"], REPS, _label(x, models))
                      for x in recs)
        out.append(Measured("resident-all-pairs", "", f"per pair {min(r):.3f}-{max(r):.3f}x (faster on "
                            f"{sum(x > 1 for x in r)} of {len(r)} pairs by the mean over repetitions)",
                            "per pair min-max over repetitions", min(r), None, None, pairs=pairs, **base))
    return out


def _versus_ar(got, base: dict) -> list[Measured]:
    """Offloaded: AcceptMoE over Vanilla AR per pair, and Standard SD over Vanilla AR on the mean over pairs,
    each per repetition (both sides measured in the same repetition)."""
    recs, out = got.timed["offload-timed"], []
    models = {r["model"] for r in recs}
    acc = _versus(recs, tp_records.HEADLINE, AR, "median")
    if acc:
        vals = [c for _, _, c in acc]
        pairs = tuple(Evidence(c, min(x), max(x), REPS, _label(r, models)) for r, x, c in acc)
        out.append(Measured("offload-vs-ar", "", f"per pair {min(vals):.3f}-{max(vals):.3f}x (median over "
                            f"repetitions; faster on {sum(v > 1 for v in vals)} of {len(vals)} pairs)",
                            "per pair min-max over repetitions", min(vals), None, None, pairs=pairs, **base))
    sd = [(r, [1 / x for x in ratios]) for r, ratios, _ in _versus(recs, AR, BASELINE, "median")]
    if sd:
        n = min(len(x) for _, x in sd)
        per_rep = [statistics.fmean(x[i] for _, x in sd) for i in range(n)]
        centre = statistics.fmean(statistics.median(x) for _, x in sd)
        out.append(Measured("offload-sd-vs-ar", "", f"{centre:.3f}x mean of per-pair medians over {len(sd)} pairs "
                            f"(per pair {min(statistics.median(x) for _, x in sd):.3f}-"
                            f"{max(statistics.median(x) for _, x in sd):.3f})",
                            f"repetitions {min(per_rep):.3f}-{max(per_rep):.3f} (mean over pairs, {n} reps)",
                            centre, min(per_rep), max(per_rep), bounds=REPS, **base))
    return out


def _counter_rows(got, h: dict, base: dict) -> list[Measured]:
    """The counters run (measured once: per-pair point estimates; the overall cell is their spread)."""
    out = []
    acc = [r for r in got.counters if r["variant"] == tp_records.HEADLINE]
    labels = [_label(r, {x["model"] for x in acc}) for r in acc]
    for key, claim_id, part, unit in (("traffic", "h2d-traffic", "", "%"), ("hit_rate", "hit-rate", "", "pp"),
                                      ("prune_traffic", "pruning", "traffic", "%"),
                                      ("prune_hit_rate", "pruning", "hit rate", "pp")):
        if h.get(key):
            out.append(_spread_row(claim_id, part, h[key], labels, unit, base))
    if h.get("prune_throughput"):
        on, off = got.cfg.pruning_pair()
        models = {r["model"] for r in got.timed["offload-timed"]}
        each = _versus(got.timed["offload-timed"], on, off, "median")      # the same pairs, in the same order
        ours, spread = pair_range(h["prune_throughput"], "%")
        pairs = tuple(Evidence(c, 100 * (min(x) - 1), 100 * (max(x) - 1), REPS, _label(r, models))
                      for (r, x, _), c in zip(each, h["prune_throughput"], strict=True))
        out.append(Measured("pruning", "throughput", ours, spread, sum(h["prune_throughput"]) / len(each), None, None,
                            pairs=pairs, **base))
    if "stall" in h and None not in h["stall"].values():
        sd, me = (100 * h["stall"][v] for v in (tp_records.BASELINE, tp_records.HEADLINE))
        base_rows = {(r["model"], r["task"]): r for r in got.counters if r["variant"] == tp_records.BASELINE}
        diffs = [100 * (r["stall_share"] - base_rows[(r["model"], r["task"])]["stall_share"]) for r in acc]
        out.append(Measured("stall-share", "", f"{METHODS[BASELINE].label} {sd:.1f} %, {METHODS[B0_METHOD].label} "
                            f"{me:.1f} % (mean over pairs)", f"difference per pair {min(diffs):+.1f} to "
                            f"{max(diffs):+.1f} pp", sum(diffs) / len(diffs), None, None, (sd, me),
                            pairs=points(labels, diffs), **base))
    ar = {(r["model"], r["task"]): r for r in got.counters if r["variant"] == AR}
    sd_rows = [r for r in got.counters if r["variant"] == tp_records.BASELINE and (r["model"], r["task"]) in ar]
    if sd_rows:
        lab = [_label(r, {x["model"] for x in sd_rows}) for r in sd_rows]
        traffic = [100 * (r["bytes_per_token"] / ar[(r["model"], r["task"])]["bytes_per_token"] - 1) for r in sd_rows]
        hits = [100 * (r["hit_rate"] - ar[(r["model"], r["task"])]["hit_rate"]) for r in sd_rows]
        out.append(_spread_row("sd-vs-ar-offload-traffic", "traffic", traffic, lab, "%", base))
        out.append(_spread_row("sd-vs-ar-offload-traffic", "hit rate", hits, lab, "pp", base))
    return out


def _spread_row(claim_id: str, part: str, vals: list[float], labels: list[str], unit: str, base: dict) -> Measured:
    ours, spread = pair_range(vals, unit)
    return Measured(claim_id, part, ours, spread, sum(vals) / len(vals), min(vals), max(vals), bounds=ACROSS,
                    pairs=points(labels, vals), **base)


def _sweep_rows(got, base: dict) -> list[Measured]:
    roles = got.cfg.sweep_roles()
    best = tp_records.self_sized_vs_best(got.sweep, roles) if got.sweep else []
    if not best:
        return []
    labels = [_label(b, {x["model"] for x in best}) for b in best]
    d = [b["diff_pp"] for b in best]
    out = [Measured("self-vs-best-fixed", "", f"{pp(sum(d) / len(d))} pp mean, {pp(min(d))} worst ({len(d)} pairs; "
                    f"best budgets {', '.join(str(b['best_budget']) for b in best)})", "-", min(d), None, None,
                    pairs=points(labels, d), **base)]
    small = []
    for b in best:
        fixed = [r for r in got.sweep
                 if (r["model"], r["task"]) == (b["model"], b["task"]) and r["variant"] in roles.fixed]
        low = min(fixed, key=lambda r: r["budget"])
        small.append((low["budget"], low["accuracy"] - b["best_accuracy"]))
    loss = [x for _, x in small]
    out.append(Measured("small-budget-loss", "", f"{pp(min(loss))} to {pp(max(loss))} pp at B = "
                        f"{', '.join(str(b) for b, _ in small)} ({len(loss)} pairs)", "-", max(loss), None, None,
                        pairs=points(labels, loss), **base))
    return out


# ----- the replay -----
REPLAY_CLAIMS = {"resident": "resident-throughput"}   # any other (offloaded) store: offload-throughput
REPLAY_HINT = ("./reproduce.sh replay --run <a fig4 run made with --record-routes> --shape qwen3-30b-a3b")


def _store_kind(store: str) -> str:
    return "resident" if store == "resident" else "offloaded"


def replay_rows(run: Path) -> list[Measured]:
    """Per store, the self-sized method as it runs with that store: its routes with pruning as the method
    prunes there (resident: pruning off), over the reference; the measures column names the routes."""
    recs = replay_report.records(Path(run))
    plan = json.loads((Path(run) / "replay.json").read_text())
    cfg = meta(run)
    shape, device = plan["shape"]["name"], plan["device"]
    me = Variant(B0_METHOD)
    out = []
    for store in dict.fromkeys(r["store"] for r in recs):
        mine = [r for r in recs if r["store"] == store]
        ref = next(r["variant"] for r in mine if "speedup_per_token" not in r)
        r = next((r for r in mine if r["method"] == B0_METHOD and r["prune"] == me.prunes(_store_kind(store))
                  and "speedup_per_token" in r), None)
        if r is None or ref != Variant(BASELINE).name:
            continue
        out.append(_replay_row(r, store, shape, device, run, cfg))
    return out


def _replay_row(r: dict, store: str, shape: str, device: str, run: Path, cfg: dict) -> Measured:
    gpu = PAPER_GPUS[_store_kind(store)]
    bound = next((k for k in r if k.startswith("bound_speedup_per_token_")), None)
    extra = [f"{bound.removeprefix('bound_speedup_per_token_')} expert bytes bound {r[bound]:.3f}x"] if bound else []
    whole = [f"{r[k]:.3f}x" + (" (typical link)" if k.endswith("_typical_link") else "")
             for k in (f"whole_speedup_per_token_{gpu}", f"whole_speedup_per_token_{gpu}_typical_link") if k in r]
    if whole:
        extra.append(f"{gpu} whole-pass bound {' / '.join(whole)}")
    if r.get("engine_ratio") is not None:
        extra.append(f"recorded run's tiny engine {r['engine_ratio']:.3f}x")
    est, lo, hi = r["speedup_per_token"], r["speedup_per_token_low"], r["speedup_per_token_high"]
    measures = f"expert-work replay at {shape}'s shape ({'GPU run' if device.startswith('cuda') else 'CPU'}), " \
               f"routes: {r['routes']}"
    return Measured(REPLAY_CLAIMS.get(store, "offload-throughput"), "",
                    f"{est:.3f}x per output token, {store} store ({'; '.join(extra)})", iv(lo, hi, 3, sign=False),
                    est, lo, hi, measures=measures, kind=REPLAY, run=where(run), world=world_of(cfg["world"]),
                    bounds=CI)


def claims_with_replay() -> list[Claim]:
    return [claim(c) for c in dict.fromkeys([*REPLAY_CLAIMS.values(), "offload-throughput"])]
