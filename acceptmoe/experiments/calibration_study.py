"""The referee's calibration requests as one command: beta sensitivity, on-policy p_hat, B0 from training traces.

    ./reproduce.sh calibration-study [--preset tiny|paper] [--limit N] [--budgets-from TABLE1_RUN] [--resume RUN_DIR]

Per model, with Table 1's p_hat (Standard SD traces, natural routing) and B0 (first evaluation prompts) from
`budgets.pair_budgets`:
1. on-policy traces: AcceptMoE itself (natural p_hat) on each calibration source's training prompts ->
   `onpolicy/<model>/<source>-<split>.{traces.jsonl,json}`: p_hat recounted under AcceptMoE's own masked
   routing, and B0 from these training-split traces by METHOD.md's rule (`b0-train/<model>/<task>.json`);
2. graded evaluation runs (Table 1's generation settings, stop at EOS) per pair: Standard SD; AcceptMoE at
   each beta with the natural p_hat; AcceptMoE with the on-policy p_hat; AcceptMoE-B at B0 (evaluation
   prompts) and at B0 (training split) when they differ.
Writes `calibration-study.{md,csv}` (beta table, p_hat table, B0 table). Rows resume like every runner.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from acceptmoe.evals.tasks import get_task
from acceptmoe.experiments.runs import Run, SampleLog, unit_key, write_json
from acceptmoe.engine.trace import commitment_table
from acceptmoe.methods import B0_METHOD, BASELINE, CommitmentTable, Variant, fixed_twin
from acceptmoe.commands import command, parser

from . import calibrate, render
from .accuracy import PairContext, free_device_memory, run_unit
from .b0 import decide_b0
from .budgets import pair_budgets, used_budgets
from .common import (RunPaths, add_budgets_option, add_run_options, load_model, open_or_resume, run_to_completion,
                     set_threads)
from .config import ConfigKeyError, Table1Config, WorldConfig, from_saved, load_experiment
from .perf_tables import sweep_records
from .prompts import prompt_ids
from .tracelog import TraceLog

EXPERIMENT = "calibration-study"


@dataclass(frozen=True)
class CalibrationStudyConfig:
    SECTION = EXPERIMENT
    world: WorldConfig
    betas: tuple[float, ...] = (0.25, 0.5, 1.0)
    prompts: int | None = None              # evaluation prompts per pair (None: the world's B0 prompts)
    limit: int | None = None                # caps evaluation and training prompts (quick runs)
    budgets_from: str | None = None         # a Table 1 run folder: reuse its p_hat and B0
    bootstrap_resamples: int = 2000

    def __post_init__(self) -> None:
        if not self.betas or any(b < 0 for b in self.betas):
            raise ConfigKeyError(f"betas must be a non-empty list of non-negative exponents, got {list(self.betas)}")

    @property
    def preset(self) -> str:
        return self.world.preset

    def eval_prompts(self) -> int:
        n = self.prompts or self.world.b0.prompts
        return min(n, self.limit) if self.limit else n

    def train_prompts(self) -> int:
        n = self.world.calibration.prompts
        return min(n, self.limit) if self.limit else n


def load_study_config(preset: str | Path, overrides: dict | None = None) -> CalibrationStudyConfig:
    return load_experiment(CalibrationStudyConfig, preset, overrides)


def beta_variant(beta: float) -> Variant:
    """The self-sized method at selector exponent beta (natural p_hat)."""
    return Variant(B0_METHOD, overrides=(("beta", float(beta)),))


ONPOLICY = Variant(B0_METHOD, tag="onpolicy")       # its p_hat recounted under its own routing


def onpolicy_table(loaded, cfg: CalibrationStudyConfig, source: str, natural: CommitmentTable, root: Path):
    """AcceptMoE's own traces on the source's training prompts -> (on-policy CommitmentTable, traces)."""
    w, name = cfg.world, loaded.spec.name
    split = w.calibration.split
    log = TraceLog(root / "onpolicy" / name / f"{source}-{split}.traces.jsonl")
    task = get_task(source)
    examples = calibrate.calibration_examples(dataclasses.replace(
        w, calibration=dataclasses.replace(w.calibration, prompts=cfg.train_prompts())), source)
    for index, ex in enumerate(examples):
        if ex["id"] in log:
            continue
        ids = prompt_ids(loaded.tokenizer, task.messages(ex), loaded.spec)
        gen = loaded.engine.generate(ids, Variant(B0_METHOD).bind(commitment=natural.p_hat),
                                     w.max_new_tokens(loaded.spec), trace_layers=True)
        gen.trace.meta.update(index=index, example_id=ex["id"])
        log.append(ex["id"], gen.trace)
    traces = log.read()
    table = commitment_table(traces, max_depth=w.tree.num_steps,
                             provenance={"task": source, "split": split, "prompts": len(traces),
                                         "p_hat_used": list(natural.p_hat)})
    table.save(root / "onpolicy" / name / f"{source}-{split}.json")
    return table, traces


def eval_variants(cfg: CalibrationStudyConfig, b0_eval: int, b0_train: int) -> list[Variant]:
    """The graded variants of one pair: the baseline, each beta, on-policy p_hat, the fixed twin at both B0s."""
    out = [Variant(BASELINE)] + [beta_variant(b) for b in cfg.betas] + [ONPOLICY]
    return out + [Variant(fixed_twin(B0_METHOD), budget=b) for b in dict.fromkeys((b0_eval, b0_train))]


def run_pair(loaded, cfg: CalibrationStudyConfig, task: str, natural, onpolicy, b0s: tuple[int, int],
             samples: SampleLog) -> None:
    examples = get_task(task).load(cfg.world.eval_split, cfg.eval_prompts())
    ctx = PairContext(loaded, get_task(task), examples, natural, Table1Config(cfg.world, trace_layers=True),
                      RunPaths(Path()), samples)
    for variant in eval_variants(cfg, *b0s):
        table = onpolicy if variant.tag == ONPOLICY.tag else natural
        for index, ex in enumerate(examples):
            key = unit_key("study", loaded.spec.name, task, variant.name, ex["id"])
            if key not in samples:
                row, _ = run_unit(ctx, index, variant.bind(commitment=table.p_hat))
                samples.append(key, dataclasses.replace(row, phase="sweep", variant=variant.name).to_json())


def run_experiment(cfg: CalibrationStudyConfig, run: Run) -> None:
    set_threads(cfg.world)
    w, samples = cfg.world, SampleLog(run.path / "samples.jsonl")
    budgets = pair_budgets(w, run.path, cfg.budgets_from, cfg.limit)
    for spec in w.models:
        loaded = load_model(spec, cfg.world, run.path)
        for source in calibrate.sources(w):
            task0 = next(t for t in w.tasks if w.calibration.source(t) == source)
            natural = budgets[(spec.name, task0)].table
            onpolicy, traces = onpolicy_table(loaded, cfg, source, natural, run.path)
            b0_train = decide_b0(traces, w.b0)
            for task in [t for t in w.tasks if w.calibration.source(t) == source]:
                out = run.path / "b0-train" / spec.name / f"{task}.json"
                out.parent.mkdir(parents=True, exist_ok=True)
                write_json(out, {**b0_train, "source": source})
                b0s = (budgets[(spec.name, task)].b0, b0_train["b0"])
                print(f"{spec.name} {task}: B0 eval {b0s[0]}, B0 train {b0s[1]}", flush=True)
                run_pair(loaded, cfg, task, natural, onpolicy, b0s, samples)
        del loaded
        free_device_memory()


# ----- tables, from saved files only -----
def study_records(rows: list[dict], resamples: int) -> list[dict]:
    """Accuracy (with the paired difference vs Standard SD), tau and set size per (pair, variant)."""
    out = []
    for pair in dict.fromkeys((r["model"], r["task"]) for r in rows):
        pair_rows = [r for r in rows if (r["model"], r["task"]) == pair]
        out += sweep_records(pair_rows, tuple(dict.fromkeys(r["variant"] for r in pair_rows)), resamples)
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
    for spec in cfg.world.models:
        for source in calibrate.sources(cfg.world):
            f = run_dir / "onpolicy" / spec.name / f"{source}-{cfg.world.calibration.split}.json"
            if f.is_file():
                on = CommitmentTable.load(f)
                recs.append({"model": spec.name, "source": source, "natural": on.provenance["p_hat_used"],
                             "onpolicy": list(on.p_hat), "onpolicy_prompts": on.provenance["prompts"]})
    header = ["Model", "Source", "depth", "p_hat natural (Standard SD)", "p_hat on-policy (AcceptMoE)"]
    rows = [[r["model"], r["source"], str(d), _f(a, 3), _f(b, 3)]
            for r in recs for d, (a, b) in enumerate(zip(r["natural"], r["onpolicy"]))]
    return render.markdown(header, rows, "Commitment probabilities: natural-routing calibration vs AcceptMoE's "
                                         "own (masked) routing on the same training prompts"), recs


def b0_md(run_dir: Path, cfg: CalibrationStudyConfig, records: list[dict]) -> tuple[str, list[dict]]:
    used = used_budgets(run_dir)
    acc = {(r["model"], r["task"], r["budget"]): r["accuracy"] for r in records if r["budget"] is not None}
    recs = []
    for spec in cfg.world.models:
        for task in cfg.world.tasks:
            ft = run_dir / "b0-train" / spec.name / f"{task}.json"
            if f"{spec.name}|{task}" in used and ft.is_file():
                e, t = used[f"{spec.name}|{task}"]["decision"], json.loads(ft.read_text())
                recs.append({"model": spec.name, "task": task, "b0_eval": e["b0"], "eval_mean": e["mean_set_size"],
                             "eval_prompts": e["n_prompts"], "b0_train": t["b0"], "train_mean": t["mean_set_size"],
                             "train_prompts": t["n_prompts"], "accuracy_at_eval_b0": acc.get((spec.name, task, e["b0"])),
                             "accuracy_at_train_b0": acc.get((spec.name, task, t["b0"]))})
    header = ["Model", "Task", "B0 eval (mean, prompts)", "B0 train (mean, prompts)", "acc. @ eval B0", "acc. @ train B0"]
    rows = [[r["model"], r["task"], f"{r['b0_eval']} ({r['eval_mean']:.2f}, {r['eval_prompts']})",
             f"{r['b0_train']} ({r['train_mean']:.2f}, {r['train_prompts']})", _f(r["accuracy_at_eval_b0"], 1),
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
         for r in p_recs for d, (a, b) in enumerate(zip(r["natural"], r["onpolicy"]))]))
    return md


@command("calibration-study", "beta sensitivity, on-policy p_hat, B0 from training-split traces")
def main(argv: list[str] | None = None) -> int:
    p = parser("calibration-study")
    add_run_options(p, "cap on evaluation and training prompts (quick runs)")
    add_budgets_option(p)
    args = p.parse_args(argv)
    cfg, run = open_or_resume(EXPERIMENT, args, lambda o: load_study_config(args.preset, o),
                              lambda saved: from_saved(CalibrationStudyConfig, saved))
    if not run_to_completion(EXPERIMENT, run, lambda: run_experiment(cfg, run)):
        return 130
    print(write_study(run.path))
    return 0
