"""Table 1's runner: every method on every (model, task) pair, greedy, one sample row per (prompt, method).

Order per model: calibrate every source task (`spine.calibration`), then per task: B0's method (AcceptMoE)
on every evaluation prompt (its traces give B0, `spine.b0`), the fixed-budget methods at B0, then the rest
(Vanilla AR, Standard SD). Each unit's trace is appended to `traces/<model>/<task>/<method>.jsonl`, then its
row to `samples.jsonl` (`spine.grading.run_graded`), so an interrupted run resumes at the first unfinished
unit and never duplicates a row.

Row fields: the prompt (model, task, example id and index, method, budget), the graded response and grade,
the generated token ids and stop reason, accept lengths (tau = mean accepted length per target step), per-layer
set-size and union statistics from the trace (sums and means over every block and layer), and timing.
"""
from __future__ import annotations

from typing import Callable

from tqdm import tqdm

from acceptmoe.evals.tasks import get_task
from acceptmoe.methods import METHODS, CommitmentTable, Variant

from ..spine import calibration
from ..spine.b0 import B0Decision, b0_for_pair
from ..spine.config import ModelEntry, Pair
from ..spine.engines import opened, set_threads
from ..spine.grading import PairRun, run_graded
from ..spine.layout import RunPaths
from ..spine.runs import Run, SampleLog, unit_key
from ..spine.tracelog import TraceLog
from .config import Table1Config

Progress = Callable[[str], None]


def method_order(methods: tuple[str, ...]) -> list[str]:
    """The method whose traces give B0 first, then the fixed-budget methods (at B0), then the rest."""
    ordered = [m for m in METHODS if m in methods]
    first = [m for m in ordered if METHODS[m].sets_b0]
    fixed = [m for m in ordered if METHODS[m].needs_budget]
    return first + fixed + [m for m in ordered if m not in first + fixed]


def run_pair(run: PairRun, table: CommitmentTable, cfg: Table1Config, paths: RunPaths,
             progress: Progress) -> B0Decision | None:
    """All methods on one pair in the required order; returns the B0 decision (None without B0's method)."""
    decision = None
    for method in method_order(cfg.methods):
        plan = run.loaded.plan(Variant(method), commitment=table.p_hat, b0=decision.b0 if decision else None)
        log = TraceLog(paths.traces(run.pair, method), keep=run.samples)
        units = [(i, unit_key(run.pair.model, run.pair.task, ex["id"], method)) for i, ex in enumerate(run.examples)]
        run_graded(run, plan, units, trace_layers=cfg.trace_layers or plan.spec.sets_b0, log=log, progress=progress,
                   routes_as="table1")
        if plan.spec.sets_b0:
            decision = b0_for_pair(log, cfg.world.b0, paths.b0(run.pair))
    return decision


def eval_examples(cfg: Table1Config) -> dict[str, list[dict]]:
    return {t: get_task(t).load(cfg.world.eval_split, cfg.limit) for t in cfg.world.tasks}


def pending_units(cfg: Table1Config, model: str, examples: dict[str, list[dict]], samples: SampleLog) -> int:
    return sum(unit_key(model, t, ex["id"], meth) not in samples
               for t in cfg.world.tasks for ex in examples[t] for meth in cfg.methods)


def run_model(model: ModelEntry, cfg: Table1Config, paths: RunPaths, samples: SampleLog,
              examples: dict[str, list[dict]], progress: Progress) -> None:
    """Calibration and every pair of one model (the engine is closed when this returns)."""
    with opened(model, cfg.world, paths.root) as loaded:
        tables = {s: calibration.calibrate_source(loaded, cfg.world, s, paths, progress)
                  for s in calibration.sources(cfg.world)}
        for task in cfg.world.tasks:
            run = PairRun(loaded, get_task(task), examples[task], samples)
            run_pair(run, tables[cfg.world.calibration.source(task)], cfg, paths, progress)


def saved_b0(cfg: Table1Config, paths: RunPaths) -> dict[Pair, B0Decision]:
    """{pair: B0 decision} for every pair that has one."""
    return {pair: B0Decision.load(paths.b0(pair)) for pair in cfg.world.pairs() if paths.b0(pair).is_file()}


def run_experiment(cfg: Table1Config, run: Run, show_progress: bool = True) -> dict[Pair, B0Decision]:
    """Calibration, B0 and every method on every pair into `run`; returns {pair: B0 decision}. Models with
    nothing left to run are not loaded."""
    set_threads(cfg.world)
    paths, samples = RunPaths(run.path), SampleLog(run.path / "samples.jsonl")
    examples = eval_examples(cfg)
    todo = {m.name: pending_units(cfg, m.name, examples, samples) + calibration.pending(cfg.world, paths, m.name)
            for m in cfg.world.models}
    with tqdm(total=sum(todo.values()), disable=not show_progress, unit="gen", dynamic_ncols=True) as bar:
        def progress(desc: str) -> None:
            bar.set_description(desc, refresh=False)
            bar.update(1)
        for model in cfg.world.models:
            if todo[model.name]:
                run_model(model, cfg, paths, samples, examples, progress)
    return saved_b0(cfg, paths)


def run_summary(cfg: Table1Config, run: Run) -> dict:
    """`run_experiment`, then what a finished run's summary records: the B0 decision of every pair."""
    decisions = run_experiment(cfg, run)
    return {"b0": [{"model": pair.model, "task": pair.task, **d.to_json()} for pair, d in decisions.items()]}
