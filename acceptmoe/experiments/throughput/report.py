"""Tables and figures of a throughput run folder, rebuilt from its `config.json` and `samples.jsonl` only.

    text, written = write_outputs(run_dir)        # also behind ./reproduce.sh tables / figures

Per phase present in the run: `resident` -> throughput-resident.{md,csv}, fig3.{png,pdf}; `offload-timed` ->
throughput-offload.{md,csv}, fig4.{png,pdf}; `offload-counters` -> table2.{md,csv,tex}; `sweep` ->
sweep.{md,csv,png,pdf}; a run with the sweep and both offload phases (./reproduce.sh fig5) -> fig5.{png,pdf,csv}.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..spine import render
from ..spine.budgets import used_budgets
from ..spine.paper import claim
from ..spine.records import graded_records
from ..spine.runs import NothingToTabulate, SampleLog
from . import figures
from .config import ThroughputConfig, throughput_config_from_saved
from .records import HEADLINE, counter_records, headline, means, self_sized_vs_best
from .timing import BASELINE, POOLED, Boot, after_eos_pooled, timed_records, versus


def fmt(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


NOT_RECORDED = "not recorded"


def share(x: float | None) -> str:
    return NOT_RECORDED if x is None else f"{100 * x:.0f} %"


def _verdict(r: dict, prefix: str = "") -> str:
    beyond = r.get(f"{prefix}beyond_placebo")
    return "" if beyond is None else {1: "faster", -1: "slower", 0: "within the placebo's"}[beyond]


def _interval(r: dict, prefix: str = "") -> str:
    if r.get(f"{prefix}ratio_low") is None:
        return "-"
    return f"[{fmt(r[f'{prefix}ratio_low'], 3)}, {fmt(r[f'{prefix}ratio_high'], 3)}] ({r[f'{prefix}ratio_n']} prompts)"


def throughput_md(records: list[dict], title: str, labels: dict, pooled_eos: dict) -> str:
    header = ["Model", "Task", "Variant", "reps", "tok/s", "min-max", "ratio vs SD", "95 % interval",
              "mean of reps", "beyond placebo", "tau", "ms/step", "host load", "after EOS"]
    rows = [[r["model"], r["task"], labels[r["variant"]], str(r["reps"]), fmt(r["tokens_per_s"], 1),
             f"{fmt(r['tokens_per_s_min'], 1)}-{fmt(r['tokens_per_s_max'], 1)}", fmt(r.get("ratio_vs_standard_sd"), 3),
             _interval(r), fmt(r.get("ratio_mean_of_reps"), 3), _verdict(r), fmt(r["tau"]),
             fmt(r["ms_per_step"], 1), fmt(r.get("load_avg_1m"), 2), share(r.get("after_eos_share"))]
            for r in records]
    rows.append(["Pooled over variants", "", "", "", "", "", "", "", "", "", "", "", "", share(pooled_eos.get("all"))])
    return render.markdown(header, rows, f"{title}: throughput = total tokens / total timed seconds; ratio vs SD = the "
                                         f"paper's pooled ratio (total tokens / total seconds of each) over cells "
                                         f"(prompt, repetition) whose variants ran back to back in a rotated order, "
                                         f"with its 95 % two-way interval (prompts, stratified by task in a pooled "
                                         f"row, and the repetitions, drawn once for all prompts) and the mean of the per-repetition "
                                         f"ratios; beyond placebo: whether the interval clears the placebo's (Standard "
                                         f"SD timed twice); host load = mean 1-minute load average; after EOS = "
                                         f"share of timed tokens generated after the reply's own EOS (EOS ignored)")


def natural_md(records: list[dict], title: str, labels: dict, min_tokens: int) -> str:
    header = ["Model", "Task", "Variant", "prompts", "tok/s", "ratio vs SD", "95 % interval", "mean of reps",
              "beyond placebo", "tau"]
    rows = [[r["model"], r["task"], labels[r["variant"]], str(r["natural_prompts"]), fmt(r["natural_tokens_per_s"], 1),
             fmt(r.get("natural_ratio_vs_standard_sd"), 3), _interval(r, "natural_"),
             fmt(r.get("natural_ratio_mean_of_reps"), 3), _verdict(r, "natural_"), fmt(r["natural_tau"])]
            for r in records]
    return render.markdown(header, rows, f"{title}, natural text: each generation timed only up to its own EOS (its "
                                         f"tokens, steps and seconds up to there, prefill included), over the prompts "
                                         f"whose reply is at least {min_tokens} tokens in every variant and "
                                         f"repetition; ratios pooled as above")


def table2_rows(records: list[dict], pooled: list[dict], labels: dict) -> tuple[list[str], list[list[str]], int]:
    header = ["Model", "Task", "Variant", "KB/token", "vs SD (%)", "hit rate (%)", "vs SD (pp)", "stall (%)",
              "us/load", "tok/s", "set size", "accuracy (%)"]
    row = lambda r, a, b: [a, b, labels[r["variant"]], fmt(_kb(r["bytes_per_token"]), 1),
                           _change(r, "traffic_change_pct"), fmt(_pct(r["hit_rate"]), 1),
                           _change(r, "hit_rate_change_pp"), fmt(_pct(r["stall_share"]), 1),
                           fmt(r.get("us_per_load"), 1), fmt(r.get("tokens_per_s"), 1),
                           fmt(r.get("mean_set_size"), 1), fmt(r.get("accuracy"), 1)]
    rows = [row(r, r["model"], r["task"]) for r in records]
    fields = ("bytes_per_token", "traffic_change_pct", "hit_rate", "hit_rate_change_pp", "stall_share",
              "us_per_load", "tokens_per_s", "mean_set_size", "accuracy")
    summary = len(rows)
    rows += [row(r, r["model"], "pooled over tasks") for r in pooled]
    rows += [row({"variant": v, **m}, "Mean over pairs", "") for v, m in means(records, fields).items()]
    return header, rows, summary


def _change(r: dict, field: str) -> str:
    """A change vs Standard SD, with its interval over prompts where the record has one (a pooled row)."""
    if r.get(f"{field}_low") is None:
        return fmt(r.get(field), 1)
    return f"{fmt(r[field], 1)} [{fmt(r[f'{field}_low'], 1)}, {fmt(r[f'{field}_high'], 1)}]"


def _kb(x):
    return None if x is None else x / 1024


def _pct(x):
    return None if x is None else 100 * x


def sweep_md(records: list[dict], best: list[dict], labels: dict) -> str:
    header = ["Model", "Task", "Variant", "budget", "accuracy (%)", "interval", "vs SD (pp)", "set size", "tau"]
    rows = [[r["model"], r["task"], labels[r["variant"]], fmt(r["budget"], 0), fmt(r["accuracy"], 1),
             f"[{fmt(r['accuracy_low'], 1)}, {fmt(r['accuracy_high'], 1)}]", fmt(r.get("accuracy_diff"), 1),
             fmt(r["mean_set_size"], 1), fmt(r["tau"])] for r in records]
    h2 = ["Model", "Task", "best B (chosen on)", "judged on", "best acc.", "AcceptMoE acc.", "diff (pp)", "95 % interval"]
    r2 = [[b["model"], b["task"], "-" if b["best_budget"] is None else f"{b['best_budget']} ({b['chosen_on']} prompts)",
           f"{b['judged_on']} prompts", fmt(b["best_accuracy"], 1), fmt(b["acceptmoe_accuracy"], 1),
           fmt(b["diff_pp"], 1), f"[{fmt(b['diff_low'], 1)}, {fmt(b['diff_high'], 1)}]"] for b in best]
    return (render.markdown(header, rows, "Fixed-budget sweep: accuracy with bootstrap intervals over prompts")
            + "\n" + render.markdown(h2, r2, "Self-sized AcceptMoE vs the best fixed budget: the budget chosen on the "
                                             "even-indexed prompts of each pair, the difference judged on the "
                                             "odd-indexed ones (paired interval; pooled: the mean over pairs)"))


def _range(vals: list[float], unit: str) -> str:
    return "-" if not vals else f"{sum(vals) / len(vals):+.1f} {unit} mean ({min(vals):+.1f} to {max(vals):+.1f})"


def paper_comparison(timed: dict[str, list[dict]], counters: list[dict], pooled: list[dict],
                     prune_throughput: list, prune: tuple[str, str] | None, labels: dict) -> str:
    """AcceptMoE vs Standard SD (and pruning on vs off) as measured in this run (`records.headline`), beside
    the paper's claims (`spine.paper`); timed ratios pooled per model with their intervals."""
    h, rows = headline(timed, counters, pooled, prune), []
    for phase, claim_id in (("resident", "resident-throughput"), ("offload-timed", "offload-throughput")):
        for r in [x for x in h.get(phase, []) if x["task"] == POOLED] or h.get(phase, []):
            rows.append([f"{phase} throughput, AcceptMoE / Standard SD ({r['model']}, {r['task']})",
                         f"{r['ratio_vs_standard_sd']:.3f}x {_interval(r)}; {_verdict(r) or 'no placebo'}",
                         claim(claim_id).paper])
    if "traffic" in h:
        rows.append(["H2D traffic per output token vs Standard SD", _range(h["traffic"], "%"), claim("h2d-traffic").paper])
        rows.append(["cache hit rate vs Standard SD", _range(h["hit_rate"], "pp"), claim("hit-rate").paper])
        for v, part in ((BASELINE, "Standard SD"), (HEADLINE, "AcceptMoE")):
            share = h["stall"][v]
            rows.append([f"fetch-stall share, {labels[v]}", fmt(None if share is None else 100 * share, 1) + " %",
                         claim("stall-share").part(part).paper])
    pruning = claim("pruning")
    for key, name, unit, quantity in (("prune_traffic", "traffic", "%", "traffic"),
                                      ("prune_hit_rate", "hit rate", "pp", "hit rate")):
        if key in h:
            rows.append([f"pruning on vs off: {quantity}", _range(h[key], unit), pruning.part(name).paper])
    for model, task, iv in prune_throughput:
        if task == POOLED or len(prune_throughput) == 1:
            rows.append([f"pruning on vs off: offloaded throughput ({model}, {task})",
                         f"{100 * (iv.estimate - 1):+.1f} % [{100 * (iv.low - 1):+.1f}, {100 * (iv.high - 1):+.1f}]",
                         pruning.part("throughput").paper])
    if not rows:
        return ""
    return render.markdown(["quantity", "this run", "paper"], rows, "This run beside the paper's headline numbers")


def write(run_dir: Path, name: str, text: str, written: list[Path]) -> None:
    (run_dir / name).write_text(text)
    written.append(run_dir / name)


def load_run(run_dir: Path) -> tuple[ThroughputConfig, list[dict]]:
    cfg = throughput_config_from_saved(json.loads((run_dir / "config.json").read_text())["config"])
    return cfg, list(SampleLog(run_dir / "samples.jsonl"))


@dataclass
class RunRecords:
    """Every record a throughput run's saved rows give, per phase present (what the tables and claims read)."""
    cfg: ThroughputConfig
    rows: list[dict]
    timed: dict[str, list[dict]] = field(default_factory=dict)   # resident / offload-timed -> timing.timed_records
    natural: dict[str, list[dict]] = field(default_factory=dict)  # the same phases, natural-text protocol
    counters: list[dict] = field(default_factory=list)           # Table 2, per pair
    pooled: list[dict] = field(default_factory=list)             # Table 2, per model over its tasks
    sweep: list[dict] = field(default_factory=list)              # the sweep's graded records
    best: list[dict] = field(default_factory=list)               # self-sized vs the best fixed budget (held out)
    prune_throughput: list = field(default_factory=list)         # (model, task, interval) pruning on over off

    @property
    def boot(self) -> Boot:
        bs = self.cfg.world.bootstrap
        return Boot(self.cfg.bootstrap_resamples, bs.confidence, bs.seed)


def load_records(run_dir: str | Path) -> RunRecords:
    cfg, rows = load_run(Path(run_dir))
    out = RunRecords(cfg, rows)
    boot = out.boot
    for phase in ("resident", "offload-timed"):
        if phase in cfg.phases:
            out.timed[phase] = timed_records(rows, phase, cfg.names(phase), cfg.prompts(phase), boot)
            out.natural[phase] = timed_records(rows, phase, cfg.names(phase), cfg.prompts(phase), boot, natural=True,
                                               min_tokens=cfg.natural_min_tokens)
    prune = cfg.pruning_pair()
    if prune and "offload-timed" in cfg.phases:
        out.prune_throughput = versus(rows, "offload-timed", *prune, cfg.names("offload-timed"),
                                      cfg.prompts("offload-timed"), boot)
    if "offload-counters" in cfg.phases:
        out.counters = counter_records(rows, cfg.names("offload-counters"), boot)
        if out.counters:
            out.pooled = counter_records(rows, cfg.names("offload-counters"), boot, pooled=True)
    if "sweep" in cfg.phases:
        out.sweep = graded_records(rows, cfg.names("sweep"), cfg.bootstrap_resamples)
        out.best = self_sized_vs_best(rows, cfg.sweep_roles(), boot)
    return out


def write_outputs(run_dir: str | Path) -> tuple[str, list[Path]]:
    """Every table and figure the run's saved rows allow; returns (Markdown, files written)."""
    run_dir = Path(run_dir)
    got = load_records(run_dir)
    cfg, timed, counters, pooled, sweep = got.cfg, got.timed, got.counters, got.pooled, got.sweep
    parts, written = [f"# {run_dir.parent.parent.name} ({cfg.preset} preset)\n"], []
    labels, roles, prune = cfg.labels(), cfg.sweep_roles(), cfg.pruning_pair()
    for phase, stem, title in (("resident", "fig3", "Resident"),
                               ("offload-timed", "fig4", f"Offloaded (X = {cfg.offload.slots})")):
        recs = timed.get(phase)
        if recs:
            name = "throughput-" + phase.split("-")[0]
            md = throughput_md(recs, title, labels, after_eos_pooled(recs, got.rows, phase))
            natural = got.natural.get(phase)
            md += "\n" + (natural_md(natural, title, labels, cfg.natural_min_tokens) if natural else
                          f"{title}, natural text (timed up to each reply's own EOS): {NOT_RECORDED} (rows written "
                          f"before where a reply ends was saved)\n")
            write(run_dir, f"{name}.md", md, written)
            write(run_dir, f"{name}.csv", render.csv_text(_flat(recs)), written)
            if natural:
                write(run_dir, f"{name}-natural.csv", render.csv_text(natural), written)
            written += figures.figure_throughput(recs, cfg.names(phase), title, run_dir / stem, labels)
            parts.append((run_dir / f"{name}.md").read_text())
    if counters:
        h, r, s = table2_rows(counters, pooled, labels)
        md = render.markdown(h, r, f"Table 2: offloading counters (X = {cfg.offload.slots} slots per layer), one "
                                   f"instrumented run, prefill included; changes vs Standard SD (pooled rows: with their 95 % "
                                   f"interval over prompts, stratified by task)")
        write(run_dir, "table2.md", md, written)
        write(run_dir, "table2.csv", render.csv_text(counters + pooled), written)
        write(run_dir, "table2.tex", render.latex(h, r, "Offloading traffic, hit rate and stall share.",
                                                  "tab:table2", s), written)
        parts.append(md)
    if sweep:
        write(run_dir, "sweep.md", sweep_md(sweep, got.best, labels), written)
        write(run_dir, "sweep.csv", render.csv_text(sweep), written)
        written += figures.figure_sweep(sweep, run_dir / "sweep", roles)
        parts.append(sweep_md(sweep, got.best, labels))
    if {"sweep", "offload-timed", "offload-counters"} <= set(cfg.phases) and (sweep or counters):
        written += figures.figure5(sweep, counters, timed.get("offload-timed", []), run_dir / "fig5", roles,
                                   prune or (), labels)
        write(run_dir, "fig5.csv", render.csv_text(_flat(sweep + counters + timed.get("offload-timed", []))), written)
    used = used_budgets(run_dir, cfg.world)
    if used:
        rows_b = [[pair.model, pair.task, str(u["b0"]), f"{u['decision']['mean_set_size']:.2f}",
                   str(u["decision"]["n_prompts"]), " ".join(f"{p:.3f}" for p in u["p_hat"]), u["source"]]
                  for pair, u in used.items()]
        parts.append(render.markdown(["Model", "Task", "B0", "mean set size", "prompts", "p_hat by depth", "from"],
                                     rows_b, "Budgets used: B0 (AcceptMoE's mean set size, docs/method.md's rule) and "
                                             "p_hat (Standard SD on the training split)"))
    comparison = paper_comparison(timed, counters, pooled, got.prune_throughput, prune, labels)
    if comparison:
        write(run_dir, "paper-comparison.md", comparison, written)
        parts.append(comparison)
    if not written:
        raise NothingToTabulate(f"{run_dir}: no phase has a finished pair yet")
    return "\n".join(parts), written


def _flat(records: list[dict]) -> list[dict]:
    """Records with one column set (the union of keys, in first-seen order) and lists as strings."""
    keys = list(dict.fromkeys(k for r in records for k in r))
    return [{k: (" ".join(map(str, r[k])) if isinstance(r.get(k), list) else r.get(k)) for k in keys} for r in records]



def rebuild(run_dir: str | Path) -> str:
    """`./reproduce.sh tables` (this experiment's record names it): every output again from the saved files;
    returns the Markdown."""
    return write_outputs(Path(run_dir))[0]
