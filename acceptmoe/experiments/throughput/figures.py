"""Figures 3, 4 and 5 with matplotlib (Agg backend), drawn from `perf_tables` records only.

Each `figure*` function takes records and a path stem and writes `<stem>.png` and `<stem>.pdf`.
- Figure 3 / 4: throughput per (model, task) pair and variant, whiskers = min and max over repetitions;
  beside it the pooled ratio to Standard SD with its 95 % interval (prompts, then their repetitions).
- Figure 5: (a) the fixed-budget sweep: accuracy of AcceptMoE-B vs budget per pair with bootstrap intervals,
  AcceptMoE's self-sized point at its mean set size; (b-e) residency-aware pruning on vs off: traffic per
  token, hit rate, throughput, accuracy; (f) the fetch-stall share per variant.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .records import SweepRoles  # noqa: E402

Labels = dict  # variant name -> display label (`Variant.label`, from the run's config)


def _save(fig, stem: Path) -> list[Path]:
    out = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    fig.tight_layout()
    for p in out:
        fig.savefig(p, dpi=150, metadata={"CreationDate": None} if p.suffix == ".pdf" else None)  # reproducible bytes
    plt.close(fig)
    return out


def _pairs(records: list[dict]) -> list[tuple[str, str]]:
    return list(dict.fromkeys((r["model"], r["task"]) for r in records))


def _grouped_bars(ax, records: list[dict], value: str, low: str | None, high: str | None, variants,
                  labels: Labels) -> None:
    pairs = _pairs(records)
    width = 0.8 / max(1, len(variants))
    for j, v in enumerate(variants):
        recs = {(r["model"], r["task"]): r for r in records if r["variant"] == v}
        xs, ys, errs = [], [], [[], []]
        for i, p in enumerate(pairs):
            r = recs.get(p)
            if r is None or r.get(value) is None:
                continue
            xs.append(i - 0.4 + width * (j + 0.5))
            ys.append(r[value])
            errs[0].append(r[value] - r[low] if low else 0)
            errs[1].append(r[high] - r[value] if high else 0)
        ax.bar(xs, ys, width, yerr=errs if low else None, capsize=2, label=labels.get(v, v))
    ax.set_xticks(range(len(pairs)), [f"{m}\n{t}" for m, t in pairs], fontsize=7)


def figure_throughput(records: list[dict], variants, title: str, stem: Path, labels: Labels) -> list[Path]:
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
    _grouped_bars(a, records, "tokens_per_s", "tokens_per_s_min", "tokens_per_s_max", variants, labels)
    a.set_ylabel("output tokens / s")
    a.set_title(f"{title}: throughput (whiskers: min-max over repetitions)", fontsize=9)
    a.legend(fontsize=7)
    if any("ratio_vs_standard_sd" in r for r in records):
        _grouped_bars(b, records, "ratio_vs_standard_sd", "ratio_low", "ratio_high", variants, labels)
        b.axhline(1.0, color="grey", lw=0.8, ls="--")
        b.set_ylabel("ratio to Standard SD")
        b.set_title("pooled ratio to Standard SD (whiskers: 95 % interval, prompts x repetitions)", fontsize=9)
    return _save(fig, stem)


def sweep_panel(ax, records: list[dict], roles: SweepRoles) -> None:
    for model, task in _pairs(records):
        recs = [r for r in records if (r["model"], r["task"]) == (model, task)]
        fixed = sorted((r for r in recs if r["variant"] in roles.fixed), key=lambda r: r["budget"])
        line = ax.errorbar([r["budget"] for r in fixed], [r["accuracy"] for r in fixed],
                           yerr=[[r["accuracy"] - r["accuracy_low"] for r in fixed],
                                 [r["accuracy_high"] - r["accuracy"] for r in fixed]],
                           marker="o", ms=3, capsize=2, label=f"{task} {roles.fixed_label}")
        colour = line[0].get_color()
        for r in recs:
            if r["variant"] == roles.self_sized:
                ax.plot([r["mean_set_size"]], [r["accuracy"]], marker="*", ms=12, color=colour, ls="none")
            if r["variant"] == roles.baseline:
                ax.axhline(r["accuracy"], color=colour, lw=0.7, ls=":")
    ax.set_xlabel("budget B (star: AcceptMoE self-sized, at its mean set size)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("fixed-budget sweep (dotted: Standard SD)", fontsize=9)
    ax.legend(fontsize=6)


def figure_sweep(records: list[dict], stem: Path, roles: SweepRoles) -> list[Path]:
    fig, ax = plt.subplots(figsize=(6, 4))
    sweep_panel(ax, records, roles)
    return _save(fig, stem)


def figure5(sweep: list[dict], counters: list[dict], timed: list[dict], stem: Path, roles: SweepRoles,
            prune: tuple[str, str] | tuple[()], labels: Labels) -> list[Path]:
    """prune: the (pruning on, pruning off) variant names, or () when the run has no such pair."""
    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5))
    a, b, c, d, e, f = axes.flatten()
    if sweep:
        sweep_panel(a, sweep, roles)
    pc = [r for r in counters if r["variant"] in prune]
    pt = [r for r in timed if r["variant"] in prune]
    pc = [{**r, "kb_per_token": r["bytes_per_token"] / 1024, "hit_rate_pct": 100 * r["hit_rate"],
           "stall_pct": 100 * r["stall_share"]} for r in pc]
    panels = [(b, pc, "kb_per_token", None, None, "host-to-device KB per output token"),
              (c, pc, "hit_rate_pct", None, None, "cache hit rate (%)"),
              (d, pt, "tokens_per_s", "tokens_per_s_min", "tokens_per_s_max", "offloaded tokens / s"),
              (e, pc, "accuracy", "accuracy_low", "accuracy_high", "accuracy (%), reply up to first EOS")]
    for ax, recs, value, low, high, title in panels:
        if recs:
            _grouped_bars(ax, recs, value, low, high, prune, labels)
        ax.set_title(f"pruning on vs off: {title}", fontsize=9)
    if counters:
        stall = [{**r, "stall_pct": 100 * r["stall_share"]} for r in counters]
        _grouped_bars(f, stall, "stall_pct", None, None, list(dict.fromkeys(r["variant"] for r in counters)), labels)
        f.set_title("share of wall time waiting for expert loads (%)", fontsize=9)
        f.legend(fontsize=6)
    b.legend(fontsize=7)
    return _save(fig, stem)
