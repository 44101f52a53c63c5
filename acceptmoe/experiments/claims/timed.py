"""What the throughput runs (fig3, fig4, table2, sweep, fig5) and the replay say about the paper's claims.

Numbers come from the throughput records (`throughput.report.load_records`: `timing` for the timed ratios,
`records` for the counters and the sweep) and the replay's report (`replay.report.records`); this module picks
them and formats them. Every row is judged on a 95 % interval over prompts (timed ratios: the hierarchical
interval over prompts and their repetitions, pooled over a model's tasks; a timed ratio beside its run's
placebo); a claim of every pair also carries each pair's evidence, which rests on too few prompts for a verdict
at the tiny preset's sizes, so the pooled interval is judged (`verdict`).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from acceptmoe.methods import B0_METHOD, BASELINE, METHODS, REFERENCE, Variant

from ..replay import report as replay_report
from ..spine.paper import PAPER_GPUS, Claim, claim
from ..throughput import records as tp_records
from ..throughput import timing
from ..throughput.report import load_records
from .measured import CI, REPLAY, Measured, engine_measures, iv, meta, pp, where, world_of
from .verdict import Evidence

AR = Variant(REFERENCE).name
SD = Variant(BASELINE).name
CELLS = "prompts (x repetitions), stratified by task"
PROMPTS = "prompts, stratified by task"


def _label(r: dict, models: set[str]) -> str:
    return r["task"] if len(models) == 1 else f"{r['model']}/{r['task']}"


def _eos(got, phase: str) -> str:
    share = timing.after_eos_pooled(got.timed[phase], got.rows, phase)["all"]
    if share is None:
        return "after-EOS share not recorded"
    return f"{100 * share:.0f} % of timed tokens after EOS (all variants)"


def _pooled(recs: list[dict], variant: str) -> list[dict]:
    """A variant's pooled records (one per model), or its pair record where a model has one pair."""
    mine = [r for r in recs if r["variant"] == variant and "ratio_vs_standard_sd" in r]
    pooled = [r for r in mine if r["task"] == timing.POOLED]
    models = {r["model"] for r in pooled}
    return pooled + [r for r in mine if r["model"] not in models]


def _placebo(recs: list[dict], model: str) -> tuple[float, float] | None:
    p = next((r for r in _pooled(recs, timing.PLACEBO.name) if r["model"] == model), None)
    return None if p is None else (p["ratio_low"], p["ratio_high"])


def _ratio(x: dict, placebo) -> str:
    text = (f"{x['ratio_vs_standard_sd']:.3f}x pooled ratio ({x['task']}, {x['ratio_n']} prompts x {x['reps']} reps; "
            f"mean of per-repetition ratios {x['ratio_mean_of_reps']:.3f})")
    return text + (f"; placebo [{placebo[0]:.3f}, {placebo[1]:.3f}]" if placebo else "; no placebo timed")


# ----- throughput runs (fig3, fig4, table2, sweep, fig5) -----
def throughput_rows(run: Path) -> list[Measured]:
    got = load_records(run)
    cfg, prune = got.cfg, got.cfg.pruning_pair()
    world = meta(run)["world"]
    base = dict(measures=engine_measures(world), run=where(run), world=world_of(world))
    out = []
    for phase, claim_id in (("resident", "resident-throughput"), ("offload-timed", "offload-throughput")):
        if phase in got.timed:
            out += _ratio_rows(got, phase, claim_id, base)
    if "offload-timed" in got.timed:
        out += _versus_ar(got, base)
    out += _counter_rows(got, base)
    acc = tp_records.pruning_accuracy(got.rows, prune, cfg.bootstrap_resamples)
    if acc:
        est, lo, hi = acc["accuracy_diff"], acc["accuracy_diff_low"], acc["accuracy_diff_high"]
        out.append(Measured("pruning", "accuracy", f"{pp(est)} pp over {acc['prompts']} prompts (pooled over pairs)",
                            iv(lo, hi), est, lo, hi, bounds=CI, unit="prompts", n=acc["prompts"], **base))
    out += _sweep_rows(got, base)
    return out


def _ratio_rows(got, phase: str, claim_id: str, base: dict) -> list[Measured]:
    """The self-sized method's pooled ratio to Standard SD beside its placebo, and (resident) every pair's."""
    recs = got.timed[phase]
    out = []
    for x in _pooled(recs, tp_records.HEADLINE):
        placebo = _placebo(recs, x["model"])
        out.append(Measured(claim_id, "", f"{_ratio(x, placebo)}; {_eos(got, phase)}", iv(x["ratio_low"],
                            x["ratio_high"], 3, sign=False), x["ratio_vs_standard_sd"], x["ratio_low"], x["ratio_high"],
                            bounds=CI, unit=CELLS, n=x["ratio_n"], placebo=placebo, **base))
        if phase == "resident":
            pairs = [r for r in recs if r["variant"] == tp_records.HEADLINE and r["model"] == x["model"]
                     and r["task"] != timing.POOLED]
            models = {r["model"] for r in recs}
            ev = tuple(Evidence(r["ratio_vs_standard_sd"], r["ratio_low"], r["ratio_high"], CI, _label(r, models),
                                "prompts", r["ratio_n"], placebo) for r in pairs)
            r = [e.estimate for e in ev]
            out.append(Measured("resident-all-pairs", "", f"per pair {min(r):.3f}-{max(r):.3f}x (faster on "
                                f"{sum(v > 1 for v in r)} of {len(r)} pairs by the pooled ratio)",
                                f"per pair {min(e.low for e in ev):.3f} to {max(e.high for e in ev):.3f} (95 %)",
                                x["ratio_vs_standard_sd"], x["ratio_low"], x["ratio_high"], bounds=CI, pairs=ev,
                                unit=CELLS, n=x["ratio_n"], placebo=placebo, **base))
    return out


def _versus_rows(got, claim_id: str, a: str, b: str, base: dict, every_pair: bool) -> list[Measured]:
    """a's offloaded throughput over b's, pooled per model (and per pair where the claim is of every pair)."""
    cfg = got.cfg
    if not {a, b} <= set(cfg.names("offload-timed")):
        return []                               # the run did not time both
    found = timing.versus(got.rows, "offload-timed", a, b, cfg.names("offload-timed"), cfg.prompts("offload-timed"),
                          got.boot)
    recs, out = got.timed["offload-timed"], []
    models = {m for m, _, _ in found}
    for model in models:
        mine = [(t, i) for m, t, i in found if m == model]
        pooled = next((i for t, i in mine if t == timing.POOLED), mine[0][1])
        placebo = _placebo(recs, model)
        pairs = tuple(Evidence(i.estimate, i.low, i.high, CI, t if len(models) == 1 else f"{model}/{t}", "prompts",
                               i.n, placebo) for t, i in mine if t != timing.POOLED) if every_pair else ()
        ours = f"{pooled.estimate:.3f}x pooled over {pooled.n} prompts ({model})"
        if pairs:
            ours += (f"; per pair {min(p.estimate for p in pairs):.3f}-{max(p.estimate for p in pairs):.3f} (faster on "
                     f"{sum(p.estimate > 1 for p in pairs)} of {len(pairs)})")
        out.append(Measured(claim_id, "", ours, iv(pooled.low, pooled.high, 3, sign=False), pooled.estimate,
                            pooled.low, pooled.high, bounds=CI, pairs=pairs, unit=CELLS, n=pooled.n, placebo=placebo,
                            **base))
    return out


def _versus_ar(got, base: dict) -> list[Measured]:
    """Offloaded: AcceptMoE over Vanilla AR (every pair), and Standard SD over Vanilla AR."""
    return (_versus_rows(got, "offload-vs-ar", tp_records.HEADLINE, AR, base, every_pair=True)
            + _versus_rows(got, "offload-sd-vs-ar", SD, AR, base, every_pair=False))


def _change_row(claim_id: str, part: str, pooled: dict, field: str, per_pair: list[float], labels: list[str],
                unit: str, base: dict, placebo=None, invert: bool = False) -> Measured:
    """A counters change pooled over a model's tasks with its interval over prompts; each pair's point beside."""
    est, lo, hi, n = pooled[field], pooled[f"{field}_low"], pooled[f"{field}_high"], pooled[f"{field}_n"]
    if invert:
        est, lo, hi = _inverse(field, est), _inverse(field, hi), _inverse(field, lo)   # decreasing: ends swap
    pairs = tuple(Evidence(v, label=label, unit="prompts") for label, v in zip(labels, per_pair, strict=False))
    ours = (f"{est:+.1f} {unit} pooled over {n} prompts; per pair {min(per_pair):+.1f} to {max(per_pair):+.1f}"
            if per_pair else f"{est:+.1f} {unit} pooled over {n} prompts")
    return Measured(claim_id, part, ours, iv(lo, hi), est, lo, hi, bounds=CI, pairs=pairs, unit=PROMPTS, n=n,
                    placebo=placebo, **base)


def _inverse(field: str, x: float) -> float:
    """The change of the baseline vs the other variant, from the other's change vs the baseline."""
    return 100 * (1 / (1 + x / 100) - 1) if field == "traffic_change_pct" else -x


def _counter_rows(got, base: dict) -> list[Measured]:
    """The counters run: changes vs Standard SD (and pruning on vs off) pooled over a model's tasks."""
    out, pooled = [], {r["variant"]: r for r in got.pooled}
    me = [r for r in got.counters if r["variant"] == tp_records.HEADLINE]
    labels = [_label(r, {x["model"] for x in me}) for r in me]
    if tp_records.HEADLINE in pooled and "traffic_change_pct_low" in pooled[tp_records.HEADLINE]:
        mine = pooled[tp_records.HEADLINE]
        out.append(_change_row("h2d-traffic", "", mine, "traffic_change_pct", [r["traffic_change_pct"] for r in me],
                               labels, "%", base))
        out.append(_change_row("hit-rate", "", mine, "hit_rate_change_pp", [r["hit_rate_change_pp"] for r in me],
                               labels, "pp", base))
        placebo = pooled.get(timing.PLACEBO.name)
        noise = (placebo["stall_share_change_pp_low"], placebo["stall_share_change_pp_high"]) if placebo else None
        sd, mean = (100 * tp_records.mean_of(got.counters, v, "stall_share") for v in (SD, tp_records.HEADLINE))
        row = _change_row("stall-share", "", mine, "stall_share_change_pp", [r["stall_share_change_pp"] for r in me],
                          labels, "pp", base, placebo=noise)
        out.append(dataclasses.replace(row, ours=f"{METHODS[BASELINE].label} {sd:.1f} %, {METHODS[B0_METHOD].label} "
                                       f"{mean:.1f} % (mean over pairs); difference {row.ours}"
                                       + (f"; placebo [{noise[0]:+.1f}, {noise[1]:+.1f}] pp" if noise else ""),
                                       values=(sd, mean)))
    ar = [r for r in got.counters if r["variant"] == AR]
    if AR in pooled and "traffic_change_pct_low" in pooled[AR]:
        lab = [_label(r, {x["model"] for x in ar}) for r in ar]
        traffic = [_inverse("traffic_change_pct", r["traffic_change_pct"]) for r in ar]
        hits = [-r["hit_rate_change_pp"] for r in ar]
        out.append(_change_row("sd-vs-ar-offload-traffic", "traffic", pooled[AR], "traffic_change_pct", traffic, lab,
                               "%", base, invert=True))
        out.append(_change_row("sd-vs-ar-offload-traffic", "hit rate", pooled[AR], "hit_rate_change_pp", hits, lab,
                               "pp", base, invert=True))
    prune = got.cfg.pruning_pair()
    if prune:
        changes = tp_records.pooled_changes(got.rows, *prune, got.cfg.names("offload-counters"), got.boot)
        for model, ch in changes.items():
            for field, part, unit in (("traffic_change_pct", "traffic", "%"), ("hit_rate_change_pp", "hit rate", "pp")):
                i = ch[field]
                out.append(Measured("pruning", part, f"{i.estimate:+.1f} {unit} pooled over {i.n} prompts ({model})",
                                    iv(i.low, i.high), i.estimate, i.low, i.high, bounds=CI, unit=PROMPTS, n=i.n,
                                    **base))
        recs = got.timed.get("offload-timed", [])
        for model, task, i in got.prune_throughput:
            if task == timing.POOLED or len(got.prune_throughput) == 1:
                placebo = _placebo(recs, model)
                pct = (lambda x: 100 * (x - 1))                                        # noqa: E731
                noise = None if placebo is None else (pct(placebo[0]), pct(placebo[1]))
                out.append(Measured("pruning", "throughput", f"{pct(i.estimate):+.1f} % pooled over {i.n} prompts "
                                    f"x repetitions ({model})" + (f"; placebo [{noise[0]:+.1f}, {noise[1]:+.1f}] %"
                                                                 if noise else ""),
                                    iv(pct(i.low), pct(i.high)), pct(i.estimate), pct(i.low), pct(i.high), bounds=CI,
                                    unit=CELLS, n=i.n, placebo=noise, **base))
    return out


def _sweep_rows(got, base: dict) -> list[Measured]:
    """Self-sized vs the best fixed budget (chosen on one half of each pair's prompts, judged on the other),
    and the smallest budget vs the best, pooled over pairs; each pair's held-out estimate beside."""
    best = got.best
    if not best:
        return []
    pairs = [b for b in best if b["task"] != timing.POOLED]
    overall = next((b for b in best if b["task"] == timing.POOLED), pairs[0] if len(pairs) == 1 else None)
    labels = [_label(b, {x["model"] for x in pairs}) for b in pairs]
    out = []
    for claim_id, key, words in (("self-vs-best-fixed", "diff", "best budgets " + ", ".join(
            str(b["best_budget"]) for b in pairs)), ("small-budget-loss", "small_diff", "at B = " + ", ".join(
            str(b["small_budget"]) for b in pairs))):
        ev = tuple(Evidence(b[f"{key}_pp"], b[f"{key}_low"], b[f"{key}_high"], CI, label, "held-out prompts",
                            b["judged_on"]) for label, b in zip(labels, pairs, strict=True))
        vals = [e.estimate for e in ev]
        ours = f"{pp(sum(vals) / len(vals))} pp mean, {pp(min(vals))} worst ({len(vals)} pairs; {words})"
        if overall is None:
            out.append(Measured(claim_id, "", ours, "-", min(vals), None, None, pairs=ev, **base))
            continue
        lo, hi = overall[f"{key}_low"], overall[f"{key}_high"]
        out.append(Measured(claim_id, "", ours + f"; pooled {pp(overall[f'{key}_pp'])} pp on {overall['judged_on']} "
                            f"held-out prompts", iv(lo, hi), overall[f"{key}_pp"], lo, hi, bounds=CI, pairs=ev,
                            unit="held-out prompts (the best budget chosen on the others)", n=overall["judged_on"],
                            **base))
    return out


# ----- the replay -----
REPLAY_CLAIMS = {"resident": "resident-throughput"}   # any other (offloaded) store: offload-throughput
REPLAY_HINT = ("./reproduce.sh replay --run <a fig4 run made with --record-routes --offload-prompts 20> "
               "--shape qwen3-30b-a3b")


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
    placebo = ((r["placebo_per_token_low"], r["placebo_per_token_high"]) if r.get("placebo_per_token_low") is not None
               else None)
    if placebo:
        extra.append(f"placebo [{placebo[0]:.3f}, {placebo[1]:.3f}]")
    return Measured(REPLAY_CLAIMS.get(store, "offload-throughput"), "",
                    f"{est:.3f}x per output token, {store} store ({'; '.join(extra)})", iv(lo, hi, 3, sign=False),
                    est, lo, hi, measures=measures, kind=REPLAY, run=where(run), world=world_of(cfg["world"]),
                    bounds=CI, unit=r.get("interval_unit", "generations"), n=r.get("interval_n", r["generations"]),
                    placebo=placebo)


def claims_with_replay() -> list[Claim]:
    return [claim(c) for c in dict.fromkeys([*REPLAY_CLAIMS.values(), "offload-throughput"])]
