"""The referee's calibration requests as one runner: beta sensitivity, on-policy p_hat, B0 from training traces.

Per model, with Table 1's p_hat (Standard SD traces, natural routing) and B0 (first evaluation prompts) from
`spine.budgets.pair_budgets`:
1. on-policy traces: AcceptMoE itself (natural p_hat) on each calibration source's training prompts ->
   `onpolicy/<model>/<source>-<split>.{traces.jsonl,json}`: p_hat recounted under AcceptMoE's own masked
   routing, and B0 from these training-split traces by the B0 rule (`b0-train/<model>/<task>.json`);
2. graded evaluation runs (Table 1's generation settings, stop at EOS) per pair: Standard SD; AcceptMoE at
   each beta with the natural p_hat; AcceptMoE with the on-policy p_hat; AcceptMoE-B at B0 (evaluation
   prompts) and at B0 (training split) when they differ. One variant at a time over every pair, AcceptMoE's
   first (the engine that traced on-policy serves them on; an engine configured per method, such as an SGLang
   server, then serves each once).
Rows resume like every runner (`spine.grading`); the tables are `study.tables`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from acceptmoe.engine.trace import commitment_table
from acceptmoe.evals.tasks import get_task
from acceptmoe.methods import B0_METHOD, BASELINE, CommitmentTable, Variant, fixed_twin

from ..spine import calibration
from ..spine.b0 import decide_b0
from ..spine.budgets import pair_budgets
from ..spine.config import Pair
from ..spine.engines import Loaded, opened, set_threads
from ..spine.grading import PairRun, run_graded
from ..spine.prompts import prompt_ids
from ..spine.runs import Run, SampleLog, unit_key, write_json
from ..spine.tracelog import TraceLog
from .config import ONPOLICY, CalibrationStudyConfig, beta_variant


def onpolicy_table(loaded: Loaded, cfg: CalibrationStudyConfig, source: str, natural: CommitmentTable, root: Path):
    """AcceptMoE's own traces on the source's training prompts -> (on-policy CommitmentTable, traces)."""
    w, name = cfg.world, loaded.model.name
    split = w.calibration.split
    log = TraceLog(root / "onpolicy" / name / f"{source}-{split}.traces.jsonl")
    task = get_task(source)
    examples = calibration.calibration_examples(dataclasses.replace(
        w, calibration=dataclasses.replace(w.calibration, prompts=cfg.train_prompts())), source)
    plan = loaded.plan(Variant(B0_METHOD), commitment=natural.p_hat)
    for index, ex in enumerate(examples):
        if ex["id"] in log:
            continue
        ids = prompt_ids(loaded.tokenizer, task.messages(ex), loaded.model)
        gen = loaded.engine.generate(ids, plan, w.max_new_tokens(loaded.model),
                                     w.sampling.options(name, source, split, ex["id"], trace_layers=True))
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


@dataclass(frozen=True)
class StudyPair:
    """One pair's inputs to its graded variants: the natural and on-policy tables, B0 (eval, train)."""
    task: str
    natural: CommitmentTable
    onpolicy: CommitmentTable
    b0s: tuple[int, int]


def run_variant(loaded: Loaded, cfg: CalibrationStudyConfig, pair: StudyPair, variant: Variant,
                samples: SampleLog) -> None:
    task = get_task(pair.task)
    run = PairRun(loaded, task, task.load(cfg.world.eval_split, cfg.eval_prompts()), samples)
    table = pair.onpolicy if variant.tag == ONPOLICY.tag else pair.natural
    units = [(i, unit_key("study", loaded.model.name, pair.task, variant.name, ex["id"]))
             for i, ex in enumerate(run.examples)]
    relabel = lambda row, v=variant: dataclasses.replace(row, phase="sweep", variant=v.name)   # noqa: E731
    run_graded(run, loaded.plan(variant, commitment=table.p_hat), units, relabel=relabel)


def run_pairs(loaded: Loaded, cfg: CalibrationStudyConfig, pairs: list[StudyPair], samples: SampleLog) -> None:
    """Each pair's graded variants, one variant at a time over the pairs, AcceptMoE's variants first."""
    each = {pair.task: eval_variants(cfg, *pair.b0s) for pair in pairs}
    variants = list(dict.fromkeys(v for vs in each.values() for v in vs))
    for variant in sorted(variants, key=lambda v: v.method != B0_METHOD):      # stable: otherwise as listed
        for pair in pairs:
            if variant in each[pair.task]:
                run_variant(loaded, cfg, pair, variant, samples)


def run_experiment(cfg: CalibrationStudyConfig, run: Run) -> None:
    set_threads(cfg.world)
    w, samples = cfg.world, SampleLog(run.path / "samples.jsonl")
    budgets = pair_budgets(w, run.path, cfg.budgets_from, cfg.limit)
    for model in w.models:
        with opened(model, cfg.world, run.path) as loaded:
            pairs = []
            for source in calibration.sources(w):
                task0 = next(t for t in w.tasks if w.calibration.source(t) == source)
                natural = budgets[Pair(model.name, task0)].table
                onpolicy, traces = onpolicy_table(loaded, cfg, source, natural, run.path)
                b0_train = dataclasses.replace(decide_b0(traces, w.b0), source=source)
                for task in [t for t in w.tasks if w.calibration.source(t) == source]:
                    out = run.path / "b0-train" / model.name / f"{task}.json"
                    out.parent.mkdir(parents=True, exist_ok=True)
                    write_json(out, b0_train.to_json())
                    b0s = (budgets[Pair(model.name, task)].b0, b0_train.b0)
                    print(f"{model.name} {task}: B0 eval {b0s[0]}, B0 train {b0s[1]}", flush=True)
                    pairs.append(StudyPair(task, natural, onpolicy, b0s))
            run_pairs(loaded, cfg, sorted(pairs, key=lambda p: w.tasks.index(p.task)), samples)
