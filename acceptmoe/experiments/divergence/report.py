"""The divergence report from a run folder's saved rows only: per temperature and method, over every (model, task)
pair's prompts, the mean KL(restricted || natural) and total variation of the verify passes' next-token
distributions (each prompt's mean over its positions, then the mean over prompts), the acceptance length tau
(accepted tokens per target step, pooled over a prompt's steps) and the accuracy, each with a bootstrap
interval over prompts (`evals.stats`, the project's interval rules; prompts resampled within each pair).

    text = write_report(run_dir)      # writes divergence.md and divergence.csv, returns the Markdown
    cfg, rows = load(run_dir); paired(rows, cfg, "acceptmoe", "count-b")   # per temperature, paired over prompts

`paired` is a record builder for readers of results (the claims table), not part of the report's tables: one
method minus another on the same prompts (each prompt's own sampling stream, the same for every method), TV
by the bootstrap over prompts within each pair, accuracy by Newcombe's paired score interval
(`stats.paired_bootstrap_diff`, the rule of every paired 0/1 difference).
"""
from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from pathlib import Path

from acceptmoe.evals import stats

from ..spine.config import from_saved
from ..spine.runs import NothingToTabulate, SampleLog
from .config import DivergenceConfig

COLUMNS = ("temperature", "method", "prompts", "kl", "kl_low", "kl_high", "tv", "tv_low", "tv_high", "tau",
           "tau_low", "tau_high", "accuracy", "acc_low", "acc_high")


def summarise(rows: list[dict], cfg: DivergenceConfig) -> list[dict]:
    """One record per (temperature, method), in the config's order."""
    boot = cfg.world.bootstrap
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["temperature"], r["method"])].append(r)
    out = []
    for t in cfg.temperatures:
        for m in cfg.method_names():
            mine = sorted(groups.get((t, m), []), key=lambda r: (r["model"], r["task"], str(r["example_id"])))
            if not mine:
                continue
            strata = [f"{r['model']}|{r['task']}" for r in mine]
            rec = {"temperature": t, "method": m, "prompts": len(mine)}
            for name in ("kl", "tv"):
                vals = [r[name] for r in mine if r[name] is not None]
                if len(vals) == len(mine) and all(math.isfinite(v) for v in vals):
                    iv = stats.bootstrap_mean(vals, cfg.bootstrap_resamples, boot.confidence, boot.seed, strata)
                    rec |= {name: iv.estimate, f"{name}_low": iv.low, f"{name}_high": iv.high}
            tau = stats.bootstrap_ratio([r["accepted"] for r in mine], [r["steps"] for r in mine],
                                        cfg.bootstrap_resamples, boot.confidence, boot.seed, strata)
            acc = stats.bootstrap_mean([float(r["correct"]) for r in mine], cfg.bootstrap_resamples, boot.confidence,
                                       boot.seed, strata)
            rec |= {"tau": tau.estimate, "tau_low": tau.low, "tau_high": tau.high,
                    "accuracy": acc.estimate, "acc_low": acc.low, "acc_high": acc.high}
            out.append(rec)
    return out


def paired(rows: list[dict], cfg: DivergenceConfig, method: str, against: str) -> list[dict]:
    """Per temperature, `method` minus `against` on the prompts both ran: the mean TV difference and the accuracy
    difference (pp), each with its 95 % interval and the units it rests on; no TV keys where either side routes
    naturally (no divergence recorded)."""
    boot = cfg.world.bootstrap
    key = lambda r: (r["model"], r["task"], str(r["example_id"]))             # noqa: E731
    out = []
    for t in cfg.temperatures:
        by = {m: {key(r): r for r in rows if r["temperature"] == t and r["method"] == m} for m in (method, against)}
        both = sorted(set(by[method]) & set(by[against]))
        if not both:
            continue
        a, b = ([by[m][k] for k in both] for m in (method, against))
        strata = [f"{m}|{task}" for m, task, _ in both]
        rec: dict = {"temperature": t, "method": method, "against": against, "prompts": len(both)}
        tvs = [[r["tv"] for r in side] for side in (a, b)]
        if all(v is not None and math.isfinite(v) for side in tvs for v in side):
            iv = stats.paired_bootstrap_diff(*tvs, cfg.bootstrap_resamples, boot.confidence, boot.seed, strata)
            rec |= {"tv_diff": iv.estimate, "tv_diff_low": iv.low, "tv_diff_high": iv.high, "tv_diff_n": iv.n}
        acc = stats.paired_bootstrap_diff([float(r["correct"]) for r in a], [float(r["correct"]) for r in b],
                                          cfg.bootstrap_resamples, boot.confidence, boot.seed, strata)
        rec |= {"accuracy_diff": 100 * acc.estimate, "accuracy_diff_low": 100 * acc.low,
                "accuracy_diff_high": 100 * acc.high, "accuracy_diff_n": acc.n, "accuracy_diff_rule": acc.method}
        out.append(rec)
    return out


def _iv(rec: dict, name: str, low: str, high: str, fmt: str) -> str:
    if name not in rec:
        return "natural routing"
    return f"{rec[name]:{fmt}} [{rec[low]:{fmt}}, {rec[high]:{fmt}}]"


def markdown(records: list[dict], cfg: DivergenceConfig) -> str:
    pct = 100 * cfg.world.bootstrap.confidence
    s = cfg.world.sampling
    lines = [f"**Divergence from natural routing under sampling** (top-k {s.top_k or 'off'}, top-p {s.top_p:g}, "
             f"seed {s.seed}; {cfg.max_new_tokens} new tokens; {pct:.0f}% bootstrap intervals "
             f"over prompts). KL(restricted || natural) in nats and total variation of each verify pass's "
             f"next-token distribution at the accepted positions and the bonus, against one all-experts pass of the "
             f"same tree; tau: accepted tokens per target step.", "",
             "| T | Method | prompts | KL | TV | tau | accuracy |", "|---|---|---:|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['temperature']} | {r['method']} | {r['prompts']} | {_iv(r, 'kl', 'kl_low', 'kl_high', '.4f')} | "
                     f"{_iv(r, 'tv', 'tv_low', 'tv_high', '.4f')} | {_iv(r, 'tau', 'tau_low', 'tau_high', '.2f')} | "
                     f"{_iv(r, 'accuracy', 'acc_low', 'acc_high', '.2f')} |")
    return "\n".join(lines)


def load(run_dir: Path) -> tuple[DivergenceConfig, list[dict]]:
    """A run folder's saved config and rows."""
    run_dir = Path(run_dir)
    cfg = from_saved(DivergenceConfig, json.loads((run_dir / "config.json").read_text())["config"])
    return cfg, list(SampleLog(run_dir / "samples.jsonl"))


def write_report(run_dir: Path) -> str:
    run_dir = Path(run_dir)
    cfg, rows = load(run_dir)
    if not rows:
        raise NothingToTabulate(f"{run_dir}: no rows yet; run ./reproduce.sh divergence --resume {run_dir}")
    records = summarise(rows, cfg)
    text = markdown(records, cfg)
    (run_dir / "divergence.md").write_text(text + "\n")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    (run_dir / "divergence.csv").write_text(buf.getvalue())
    return text
