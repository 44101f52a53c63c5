"""The calibration study's tables, from its saved files only: beta sensitivity, p_hat natural vs on-policy,
B0 from evaluation vs training prompts.

    text = write_study("results/calibration-study/tiny/<run-id>")   # also behind ./reproduce.sh tables
"""
from __future__ import annotations

import json
from pathlib import Path

from acceptmoe.methods import BASELINE, CommitmentTable, Variant

from ..spine import calibration, render
from ..spine.b0 import B0Decision
from ..spine.budgets import used_budgets
from ..spine.config import from_saved
from ..spine.records import graded_records
from ..spine.runs import SampleLog
from .config import ONPOLICY, CalibrationStudyConfig, beta_variant


def study_records(rows: list[dict], resamples: int) -> list[dict]:
    """Accuracy (with the paired difference vs Standard SD), tau and set size per (pair, variant)."""
    out = []
    for pair in dict.fromkeys((r["model"], r["task"]) for r in rows):
        pair_rows = [r for r in rows if (r["model"], r["task"]) == pair]
        out += graded_records(pair_rows, tuple(dict.fromkeys(r["variant"] for r in pair_rows)), resamples)
    return out


def _f(x, d: int = 2) -> str:
    return "-" if x is None else f"{x:.{d}f}"


def variant_md(records: list[dict], title: str, keep) -> str:
    header = ["Model", "Task", "Variant", "accuracy (%)", "vs SD (pp) [interval]", "tau", "set size"]
    rows = [[r["model"], r["task"], r["variant"], _f(r["accuracy"], 1),
             "-" if r.get("accuracy_diff") is None else
             f"{r['accuracy_diff']:+.1f} [{r['accuracy_diff_low']:+.1f}, {r['accuracy_diff_high']:+.1f}]",
             _f(r["tau"]), _f(r["mean_set_size"], 1)] for r in records if keep(r["variant"])]
    return render.markdown(header, rows, title)


def phat_md(run_dir: Path, cfg: CalibrationStudyConfig) -> tuple[str, list[dict]]:
    recs = []
    for model in cfg.world.models:
        for source in calibration.sources(cfg.world):
            f = run_dir / "onpolicy" / model.name / f"{source}-{cfg.world.calibration.split}.json"
            if f.is_file():
                on = CommitmentTable.load(f)
                recs.append({"model": model.name, "source": source, "natural": on.provenance["p_hat_used"],
                             "onpolicy": list(on.p_hat), "onpolicy_prompts": on.provenance["prompts"]})
    header = ["Model", "Source", "depth", "p_hat natural (Standard SD)", "p_hat on-policy (AcceptMoE)"]
    rows = [[r["model"], r["source"], str(d), _f(a, 3), _f(b, 3)]
            for r in recs for d, (a, b) in enumerate(zip(r["natural"], r["onpolicy"], strict=False))]
    return render.markdown(header, rows, "Commitment probabilities: natural-routing calibration vs AcceptMoE's "
                                         "own (masked) routing on the same training prompts"), recs


def b0_md(run_dir: Path, cfg: CalibrationStudyConfig, records: list[dict]) -> tuple[str, list[dict]]:
    used = used_budgets(run_dir, cfg.world)
    acc = {(r["model"], r["task"], r["budget"]): r["accuracy"] for r in records if r["budget"] is not None}
    recs = []
    for pair in cfg.world.pairs():
        ft = run_dir / "b0-train" / pair.model / f"{pair.task}.json"
        if pair in used and ft.is_file():
            e, t = B0Decision.from_json(used[pair]["decision"]), B0Decision.load(ft)
            recs.append({"model": pair.model, "task": pair.task, "b0_eval": e.b0, "eval_mean": e.mean_set_size,
                         "eval_prompts": e.n_prompts, "b0_train": t.b0, "train_mean": t.mean_set_size,
                         "train_prompts": t.n_prompts, "train_limited": t.limited,
                         "accuracy_at_eval_b0": acc.get((*pair, e.b0)),
                         "accuracy_at_train_b0": acc.get((*pair, t.b0))})
    header = ["Model", "Task", "B0 eval (mean, prompts)", "B0 train (mean, prompts)", "acc. @ eval B0", "acc. @ train B0"]
    rows = [[r["model"], r["task"], f"{r['b0_eval']} ({r['eval_mean']:.2f}, {r['eval_prompts']})",
             f"{r['b0_train']} ({r['train_mean']:.2f}, {r['train_prompts']}"
             f"{', limited: the rule asked for more' if r['train_limited'] else ''})", _f(r["accuracy_at_eval_b0"], 1),
             _f(r["accuracy_at_train_b0"], 1)] for r in recs]
    return render.markdown(header, rows, "B0 from the first evaluation prompts vs from training-split AcceptMoE "
                                         "traces (same rule), and AcceptMoE-B's accuracy at each"), recs


def write_study(run_dir: str | Path) -> str:
    run_dir = Path(run_dir)
    cfg = from_saved(CalibrationStudyConfig, json.loads((run_dir / "config.json").read_text())["config"])
    records = study_records(list(SampleLog(run_dir / "samples.jsonl")), cfg.bootstrap_resamples)
    betas = {beta_variant(b).name for b in cfg.betas} | {Variant(BASELINE).name}
    p_md, p_recs = phat_md(run_dir, cfg)
    b_md, b_recs = b0_md(run_dir, cfg, records)
    md = "\n".join([f"# Calibration study ({cfg.preset} preset)\n",
                    variant_md(records, "Beta sensitivity (natural p_hat)", lambda v: v in betas),
                    variant_md(records, "On-policy p_hat vs natural (beta as configured in Table 1)",
                               lambda v: v in (Variant(BASELINE).name, ONPOLICY.name,
                                               beta_variant(cfg.world.selector.beta).name)),
                    p_md, b_md])
    (run_dir / "calibration-study.md").write_text(md)
    (run_dir / "calibration-study.csv").write_text(render.csv_text(records))
    (run_dir / "calibration-study-b0.csv").write_text(render.csv_text(b_recs))
    (run_dir / "calibration-study-phat.csv").write_text(render.csv_text(
        [{"model": r["model"], "source": r["source"], "depth": d, "natural": a, "onpolicy": b}
         for r in p_recs for d, (a, b) in enumerate(zip(r["natural"], r["onpolicy"], strict=False))]))
    return md


