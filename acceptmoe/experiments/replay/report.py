"""The replay's tables and figure, rebuilt from its run folder only (config.json, replay.json, bandwidth.json,
samples.jsonl).

Per store and variant, over the step passes (verification passes; decode steps for Vanilla AR) of the
replayed generations, each pass's seconds the median over rounds:
- `ms/pass`: measured expert seconds per target pass (replayed layers' sum x L_t / n, see `runner`);
- `engine ms/pass`: the engine's own expert seconds on the same passes, recorded with the routes (CPU runs;
  shown when the replay runs the recorded model's own shape, dtype, device and store: the two must agree);
- `experts/layer`, `loads/layer`: experts used and loaded per replayed layer and pass; `hit rate` = used
  experts already in the pool / used;
- `read MB`, `moved MB`: expert bytes per target pass in the shape's format (what the GPU bounds use): used
  experts x dense bytes, loads x stored bytes;
- `bound ms <device>`: read / memory bandwidth + moved / host-to-device bandwidth (loads not overlapped, as
  the store runs them), published numbers; `local` uses this machine's measured bandwidths and the bytes of
  the dtype it ran; `measured / local bound` says how far the measured time is from bytes / bandwidth.
Speedups over the reference (Standard SD): per step pass and per output token, with paired bootstrap
intervals over prompts (the same prompts for every variant; stratified by task; `intervals`), each record
saying its unit, n and whether n reaches `stats.MIN_UNITS` (`interval_*`; fewer: too few for a verdict,
stated in the table and the figures' captions), set against the recorded placebo's interval where there is
one (`beyond_placebo`), and the H200 bound's ratio.
- `routes`: which routes a row replayed (what made them; whether they pruned against the recorded pool, which
  has no resident counterpart: resident AcceptMoE is the recording's AcceptMoE with pruning off);
- whole-pass bound (`bounds`, `costs.passbytes`): per output token, the step's expert bytes plus its
  non-expert weights, KV cache and draft passes, at the paper's GPU for the store and H200, the link at its
  published peak and measured-typical figure; the measured ratio against the expert bytes and FLOPs ratios;
- `step passes after EOS`: replayed passes that start after the reply ended by itself (where the recording
  run's rows say).

Figures: replay.{png,pdf} (every store side by side), and per store the paper-shape panel of Figure 3
(resident: fig3.{png,pdf}) or Figure 4 (offloaded: fig4.{png,pdf}), drawn beside the tiny engine's own ratio,
each panel's caption naming what its intervals rest on.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from acceptmoe.errors import UserError
from acceptmoe.evals.stats import MIN_UNITS
from acceptmoe.methods import METHODS

from ..spine import render
from ..spine.paper import PAPER_GPUS
from ..spine.runs import REPO, NothingToTabulate, SampleLog
from . import intervals
from .bounds import add_bounds, devices, model_for
from .source import PLACEBO, find_recording


def _load(run_dir: Path) -> tuple[dict, dict, dict, list[dict]]:
    run_dir = Path(run_dir)
    cfg = json.loads((run_dir / "config.json").read_text())["config"]
    plan = json.loads((run_dir / "replay.json").read_text())
    bw = json.loads((run_dir / "bandwidth.json").read_text())
    ratios = run_dir / "engine-ratios.json"
    plan["engine_ratios"] = json.loads(ratios.read_text()) if ratios.is_file() else {}
    rows = list(SampleLog(run_dir / "samples.jsonl"))
    if not rows:
        raise NothingToTabulate(f"{run_dir}: no finished replay rows yet; run or resume it first")
    return cfg, plan, bw, rows


def gen_order(gen: dict, position: int) -> tuple:
    """A replayed generation's place: (repetition, prompt index, task) as the plan orders its keys; rows
    without them (hand-made ones) by their position."""
    return (gen["rep"], gen["index"], gen["task"]) if "task" in gen else (0, position, "")


def generation_rounds(rows: list[dict], store: str, variant: str) -> list[list[dict]]:
    """Each replayed generation of a store and variant with its replays by round, in the plan's key order. A
    row holds one generation (or, in runs made before prompts were interleaved, a variant's whole sequence)."""
    by_key: dict[tuple, list[dict]] = {}
    for r in sorted((r for r in rows if r["store"] == store and r["variant"] == variant), key=lambda r: r["round"]):
        for g, gen in enumerate(r["generations"]):
            by_key.setdefault(gen_order(gen, g), []).append(gen)
    return [by_key[k] for k in sorted(by_key)]


def per_generation(rows: list[dict], store: str, variant: str) -> dict[str, np.ndarray] | None:
    """Per generation totals over step passes (seconds: per pass the median over rounds), with each
    generation's name and task (the interval's unit and stratum)."""
    gens = generation_rounds(rows, store, variant)
    if not gens:
        return None
    out = {k: [] for k in ("seconds", "passes", "output", "tokens", "used", "loads", "hits", "engine_s",
                           "after_eos")}
    match, natural, names, tasks = [], [], [], []
    for g, replays in enumerate(gens):
        first = replays[0]
        step = np.array([k != "prefill" for k in first["kinds"]])
        secs = np.median(np.array([r["seconds"] for r in replays]), axis=0)
        out["seconds"].append(secs[step].sum())
        out["passes"].append(step.sum())
        for name in ("output", "tokens", "used", "loads", "hits", "engine_s"):
            out[name].append(np.asarray(first[name], dtype=float)[step].sum())
        out["after_eos"].append(after_eos(first))
        match.append(first["counters_match"])
        natural.append("natural_tokens" in first)
        names.append("/".join(map(str, gen_order(first, g))))
        tasks.append(first.get("task", ""))
    arrays = {k: np.asarray(v, dtype=float) for k, v in out.items()}
    arrays["match"] = np.array([m for m in match if m is not None], dtype=bool)
    arrays["natural_recorded"] = np.array(natural, dtype=bool)
    arrays["names"], arrays["tasks"] = np.array(names), np.array(tasks)
    return arrays


def after_eos(gen: dict) -> int:
    """Step passes of a replayed generation that start after its reply ended by itself (their work outputs only
    the continuation past EOS); 0 where the reply has no EOS among its tokens or the run did not say."""
    end = gen.get("natural_tokens")
    if end is None:
        return 0
    before = np.cumsum([0, *gen["output"]])[:-1]              # tokens output before each pass (prefill's included)
    step = np.array([k != "prefill" for k in gen["kinds"]])
    return int(((before >= end) & step).sum())


def routes_of(cfg: dict, plan: dict) -> dict:
    """variant -> {"method", "prune"} of the replayed routes: recorded in replay.json, or (runs made before it
    was) read from the recording's files, named in the run's config."""
    if "routes" in plan:
        return plan["routes"]
    rec = plan["recording"]
    source = Path(cfg["source"]) if Path(cfg["source"]).is_absolute() else REPO / cfg["source"]
    try:
        return find_recording(source, rec["phase"], rec["model"]).routes()
    except UserError:
        return {}


def records(run_dir: Path) -> list[dict]:
    cfg, plan, bw, rows = _load(run_dir)
    shape, scale, n = plan["shape"], plan["scale"], plan["layers"]
    bytes_gpu = (shape["dense_bytes"], shape["stored_bytes"])
    local = plan["local_bytes"]
    rec, devices = plan["recording"], cfg["devices"]
    recorded_store = rec["store"] if rec["store"] == "resident" else f"offloaded-{rec['slots']}"
    out = []
    for store in plan["stores"]:
        ref = per_generation(rows, store, rec["variants"][0])
        for variant in rec["variants"]:
            g = per_generation(rows, store, variant)
            if g is None:
                continue
            P = g["passes"].sum()
            used, loads = g["used"].sum() / P, g["loads"].sum() / P             # per pass, replayed layers
            read, moved = used * scale * bytes_gpu[0], loads * scale * bytes_gpu[1]
            ms = g["seconds"].sum() / P * scale * 1e3
            lbound = (used * scale * local[0] / (bw["memory_gbps"] * 1e9)
                      + loads * scale * local[1] / (bw["copy_gbps"] * 1e9)) * 1e3
            r = {"store": store, "variant": variant, "generations": int(g["passes"].size), "passes": int(P),
                 "experts_per_layer": used / n, "loads_per_layer": loads / n,
                 "hit_rate": g["hits"].sum() / g["used"].sum() if g["used"].sum() else None,
                 "ms_per_pass": ms, "ms_per_token": g["seconds"].sum() / g["output"].sum() * scale * 1e3,
                 "tokens_per_pass": g["output"].sum() / P, "routed_per_pass": g["tokens"].sum() / P,
                 "after_eos_share": (g["after_eos"].sum() / P) if g["natural_recorded"].all() else None,
                 "engine_ratio": (plan["engine_ratios"].get("ratios", {}).get(variant)
                                  if plan["engine_ratios"].get("store") == store else None),
                 "engine_ms_per_pass": (g["engine_s"].sum() / P * scale * 1e3)
                 if plan["same_shape"] and store == recorded_store else None,
                 "read_mb": read / 1e6, "moved_mb": moved / 1e6,
                 "bound_ms_local": lbound, "measured_over_local_bound": ms / lbound if lbound else None,
                 "counters_match": f"{int(g['match'].sum())}/{g['match'].size}" if g["match"].size else "n/a"}
            for d in devices:
                r[f"bound_ms_{d['name']}"] = (read / (d["memory_gbps"] * 1e9) + moved / (d["h2d_gbps"] * 1e9)) * 1e3
            if ref is not None and variant != rec["variants"][0]:
                r.update(speedup_fields(ref, g, cfg))
            out.append(r)
    for r in out:                                         # bound ratio against the reference's bound, same store
        base = next(b for b in out if b["store"] == r["store"] and b["variant"] == rec["variants"][0])
        d0 = devices[0]["name"] if devices else None
        if d0 and r is not base:
            r[f"bound_speedup_{d0}"] = base[f"bound_ms_{d0}"] / r[f"bound_ms_{d0}"]
            r[f"bound_speedup_per_token_{d0}"] = r[f"bound_speedup_{d0}"] * r["tokens_per_pass"] / base["tokens_per_pass"]
    add_bounds(out, cfg, plan, routes_of(cfg, plan), rec["variants"][0])
    intervals.add_placebo(out, PLACEBO)
    for r in out:
        r["routes"] = routes_label(r)
    return out


def speedup_fields(ref: dict, g: dict, cfg: dict) -> dict:
    """The paired speedups over the reference on the prompts both replayed (`intervals`); none without one."""
    a, b = intervals.paired(ref, g)
    if not a["names"].size:
        return {}
    return intervals.speedups(a, b, cfg["bootstrap_resamples"], cfg["seed"])


def routes_label(r: dict) -> str:
    """Which routes a record replayed, in words: what made them, and whether they fit its store."""
    if r["method"] is None:
        return "not recorded"
    label = METHODS[r["method"]].label + (", pruned against the recorded pool" if r["prune"] else
                                          ", pruning off" if METHODS[r["method"]].prunes_when_offloaded else "")
    return label + (" (no resident counterpart)" if r["prune"] and r["store"] == "resident" else "")


def _f(v, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def tables(run_dir: Path) -> str:
    cfg, plan, bw, _ = _load(run_dir)
    recs = records(run_dir)
    devices = [d["name"] for d in cfg["devices"]]
    shape, rec = plan["shape"], plan["recording"]
    head = [f"Replay of {rec['model']} {rec['phase']} routes ({rec['store']}"
            f"{', X = ' + str(rec['slots']) if rec.get('slots') else ''}) at {shape['name']} "
            f"({shape['hidden_size']} x {shape['intermediate_size']}, {shape['format']}, {shape['num_layers']} MoE "
            f"layers) on {plan['device']} in {plan['dtype']}",
            f"- dtype: {plan['dtype_reason']}",
            f"- layers: {plan['rules']['layers']}", f"- pool: {plan['rules']['pool']}",
            f"- generations: {units_line(recs, plan, cfg)}",
            f"- rounds: {cfg['repeats']} ({plan['rules'].get('order', OLD_ORDER)}); bandwidth here: memory "
            f"{bw['memory_gbps']:.1f} GB/s, copy {bw['copy_gbps']:.1f} GB/s ({bw['how']['memory']}; "
            f"{bw['how']['copy']})", ""]
    header = ["store", "variant", "passes", "experts/layer", "loads/layer", "hit rate", "ms/pass",
              "engine ms/pass", "read MB", "moved MB", "bound ms local", "measured / local bound",
              *[f"bound ms {d}" for d in devices], "counters = run"]
    rows = [[r["store"], r["variant"], str(r["passes"]), _f(r["experts_per_layer"], "{:.1f}"),
             _f(r["loads_per_layer"], "{:.1f}"), _f(r["hit_rate"], "{:.3f}"), _f(r["ms_per_pass"], "{:.1f}"),
             _f(r["engine_ms_per_pass"], "{:.1f}"), _f(r["read_mb"], "{:.0f}"), _f(r["moved_mb"], "{:.0f}"),
             _f(r["bound_ms_local"], "{:.1f}"), _f(r["measured_over_local_bound"], "{:.2f}"),
             *[_f(r[f"bound_ms_{d}"], "{:.3f}") for d in devices], r["counters_match"]] for r in recs]
    ref = rec["variants"][0]
    d0 = devices[0] if devices else None
    return ("\n".join(head) + "\n" + render.markdown(header, rows, "Expert work per target step pass")
            + "\n" + speedup_md(recs, ref, d0) + "\n" + whole_pass_md(recs, cfg, plan) + "\n"
            + regime_md(recs, ref, d0))


OLD_ORDER = "each variant's generations in sequence, variant order rotated by one per round"


def units_line(recs: list[dict], plan: dict, cfg: dict) -> str:
    """The intervals' unit, n, strata and resamples, and the fewest units a verdict rests on."""
    r = next((r for r in recs if "interval_n" in r), None)
    tasks = [name.split("/")[0] for name in plan["generations"]]
    what = r["interval_per_task"] if r else intervals.units_text(len(tasks), intervals.per_task(tasks), False)
    return (f"{len(plan['generations'])} per variant, one per prompt; the intervals resample {intervals.UNIT} "
            f"({what}; percentile bootstrap, {cfg['bootstrap_resamples']} resamples); a verdict rests on at least "
            f"{MIN_UNITS} {intervals.UNIT} (`stats.MIN_UNITS`)")


def _ci(r: dict, key: str) -> str:
    return f"{r[key]:.3f} [{r[key + '_low']:.3f}, {r[key + '_high']:.3f}]"


def speedup_md(recs: list[dict], ref: str, d0: str | None) -> str:
    mine = [r for r in recs if "speedup_per_pass" in r]
    placebo = any("placebo_per_token" in r for r in mine)
    header = ["store", "variant", f"{ref} / variant per pass [95% CI]", "per output token [95% CI]",
              "n prompts", "verdict", *(["placebo per token [95% CI]", "beyond placebo"] if placebo else []),
              f"{d0} bound per pass", f"{d0} bound per token", "tiny engine tokens/s ratio (recorded run)"]
    rows = [[r["store"], r["variant"], _ci(r, "speedup_per_pass"), _ci(r, "speedup_per_token"),
             str(r.get("interval_n", r["generations"])), verdict_units(r),
             *([_ci(r, "placebo_per_token") if "placebo_per_token" in r else "-", BEYOND[r.get("beyond_placebo")]]
               if placebo else []),
             _f(r.get(f"bound_speedup_{d0}"), "{:.3f}"), _f(r.get(f"bound_speedup_per_token_{d0}"), "{:.3f}"),
             _f(r["engine_ratio"], "{:.3f}")] for r in mine]
    return render.markdown(header, rows, f"Speedup of expert work over {ref} (paired bootstrap over "
                                         f"{intervals.UNIT})")


BEYOND = {1: "above", -1: "below", 0: "no", None: "-"}


def verdict_units(r: dict) -> str:
    """Whether a record's interval rests on enough units for a verdict (`stats.enough_units`), in words."""
    n = r.get("interval_n", r["generations"])
    if r.get("interval_enough_units"):
        return f"{n} >= {MIN_UNITS} {intervals.UNIT}: enough"
    return f"{n} < {MIN_UNITS} {intervals.UNIT}: too few, no verdict"


def caption(mine: list[dict]) -> str:
    """A figure panel's second title line: what its intervals rest on."""
    r = next((r for r in mine if "interval_n" in r), None)
    if r is None:
        return "no interval"
    too_few = f"\ntoo few for a verdict ({r['interval_n']} < {MIN_UNITS} {intervals.UNIT})"
    return f"95% CI over {r['interval_summary']}" + (too_few if not r["interval_enough_units"] else "")


def paper_gpu(store: str) -> str:
    """The GPU the paper measured this store's throughput on."""
    return PAPER_GPUS["resident" if store == "resident" else "offloaded"]


def _gpus(store: str, names: list[str]) -> list[str]:
    """The whole-pass columns of a store: the paper's GPU for it, and H200 (every device is in the CSV)."""
    return list(dict.fromkeys(n for n in (paper_gpu(store), "H200") if n in names))


def whole_pass_md(recs: list[dict], cfg: dict, plan: dict) -> str:
    model, missing = model_for(plan)
    if model is None:
        return f"**Whole-pass bound**\n\nnot computed: {missing}\n"
    d = model.describe(cfg["world"]["tree"]["num_steps"])
    names = [g.name for g in devices(cfg)]
    out = [f"**Whole-pass bound per output token** ({d['source']}: non-expert target weights "
           f"{d['target_bytes'] / 1e6:.0f} MB, KV cache at {d['context']} tokens {d['kv_bytes'] / 1e6:.0f} MB, "
           f"draft passes per step {d['draft_step_bytes'] / 1e6:.0f} MB; links: published peak / measured-typical, "
           f"`costs.shapes.GPUS`)", ""]
    for store in dict.fromkeys(r["store"] for r in recs):
        mine = [r for r in recs if r["store"] == store]
        gpus = _gpus(store, names)
        links = ("", "_typical_link") if store != "resident" else ("",)
        cols = [(g, k) for g in gpus for k in links]
        header = ["store", "variant", "routes", "non-expert MB/step", "expert MB/step",
                  *[f"ms/token {g}{' typical link' if k else ''}" for g, k in cols],
                  *[f"speedup {g}{' typical link' if k else ''}" for g, k in cols]]
        rows = [[store, r["variant"], r["routes"], _f(r.get("nonexpert_mb_per_pass"), "{:.0f}"),
                 _f(r["read_mb"], "{:.0f}"), *[_f(r.get(f"whole_ms_per_token_{g}{k}"), "{:.3f}") for g, k in cols],
                 *[_f(r.get(f"whole_speedup_per_token_{g}{k}"), "{:.3f}") for g, k in cols]] for r in mine]
        out.append(render.markdown(header, rows))
    return "\n".join(out)


def regime_md(recs: list[dict], ref: str, d0: str | None) -> str:
    header = ["store", "variant", "measured per token", f"expert bytes ratio ({d0})", "expert FLOPs ratio",
              "measured lies", "step passes after EOS"]
    rows = [[r["store"], r["variant"], f"{r['speedup_per_token']:.3f}", _f(r.get(f"bound_speedup_per_token_{d0}"),
             "{:.3f}"), _f(r["flops_speedup_per_token"], "{:.3f}"), r.get("regime", "-"),
             "not recorded" if r["after_eos_share"] is None else f"{100 * r['after_eos_share']:.0f} %"]
            for r in recs if "speedup_per_token" in r]
    return render.markdown(header, rows, f"Measured ratios over {ref} against their bounds: a time that follows "
                                         f"bytes gives the bytes ratio, one that follows expert FLOPs (routed "
                                         f"tokens x top-k per output token) the FLOPs ratio")


def write_outputs(run_dir: Path) -> tuple[str, list[Path]]:
    run_dir = Path(run_dir)
    text = tables(run_dir)
    recs = records(run_dir)
    written = [run_dir / "replay.md", run_dir / "replay.csv"]
    written[0].write_text(text)
    written[1].write_text(render.csv_text(recs))
    shape = json.loads((run_dir / "replay.json").read_text())["shape"]["name"]
    stores = list(dict.fromkeys(r["store"] for r in recs))
    written += figure(recs, stores, run_dir / "replay", "")
    for store in stores:                      # the paper-shape panel of Figure 3 (resident) / Figure 4 (offloaded)
        name = "fig3" if store == "resident" else "fig4"
        written += figure(recs, [store], run_dir / name,
                          f"{'Figure 3' if name == 'fig3' else 'Figure 4'} at {shape}'s expert shape: ")
    return text, written


def figure(recs: list[dict], stores: list[str], stem: Path, title: str) -> list[Path]:
    """One panel per store: each variant's speedup over the reference per output token: the tiny engine's own
    measured tokens/s ratio (the recorded run), the replay's measured expert time at the target shape (95% CI),
    the first device's expert bytes / bandwidth bound and the whole-pass bound at the paper's GPU for the store.
    Routes pruned against the recorded pool are left out of the resident panel (no resident counterpart)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(stores), figsize=(5.5 * len(stores), 3.6), squeeze=False)
    for ax, store in zip(axes[0], stores, strict=True):
        mine = [r for r in recs if r["store"] == store and "speedup_per_token" in r
                and not (r["prune"] and store == "resident")]
        bound = next((k for k in (mine[0] if mine else {}) if k.startswith("bound_speedup_per_token_")), None)
        gpu = paper_gpu(store)
        whole = f"whole_speedup_per_token_{gpu}" if any(f"whole_speedup_per_token_{gpu}" in r for r in mine) else None
        series = [("tiny engine, tokens/s", "engine_ratio", None),
                  ("replay, expert time", "speedup_per_token", ("speedup_per_token_low", "speedup_per_token_high")),
                  (f"{bound.removeprefix('bound_speedup_per_token_')} expert bytes bound" if bound else "bound", bound,
                   None),
                  (f"{gpu} whole-pass bound", whole, None)]
        xs, width = np.arange(len(mine)), 0.8 / len(series)
        for i, (label, key, ci) in enumerate(series):
            ys = [r.get(key) if key else None for r in mine]
            pos = [x - 0.4 + width * (i + 0.5) for x, y in zip(xs, ys, strict=True) if y is not None]
            vals = [y for y in ys if y is not None]
            err = None
            if ci:
                err = [[r[key] - r[ci[0]] for r in mine], [r[ci[1]] - r[key] for r in mine]]
            if vals:
                ax.bar(pos, vals, width, yerr=err, capsize=2, label=label, color=f"C{i}")
        ax.axhline(1.0, color="black", lw=0.6)
        ax.set_xticks(xs, [r["variant"] for r in mine], rotation=15, fontsize=8)
        ax.set_ylabel("speedup over the reference, per token")
        ax.set_title(f"{title}{store}\n{caption(mine)}", fontsize=8)
        if mine:
            ax.legend(fontsize=6)
    fig.tight_layout()
    out = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    for p in out:
        fig.savefig(p, dpi=150, metadata={"CreationDate": None} if p.suffix == ".pdf" else None)  # reproducible bytes
    plt.close(fig)
    return out


def rebuild(run_dir: str | Path) -> str:
    """`./reproduce.sh tables` (this experiment's record names it): every output again from the saved files;
    returns the Markdown."""
    return write_outputs(Path(run_dir))[0]
