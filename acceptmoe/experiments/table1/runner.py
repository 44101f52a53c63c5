"""Table 1's runner: every method on every (model, task) pair, greedy, one sample row per (prompt, method).

Order per model, one method at a time over every task (an engine configured per method, such as an SGLang
server, then serves each method once): calibrate every source task (`spine.calibration`, Standard SD), Standard
SD, B0's method (AcceptMoE) on every evaluation prompt (its traces give each pair's B0, `spine.b0`), the
fixed-budget methods at B0, then the rest (Vanilla AR). Each unit's trace is appended to
`traces/<model>/<task>/<method>.jsonl`, then its row to `samples.jsonl` (`spine.grading.run_graded`), so an
interrupted run resumes at the first unfinished unit and never duplicates a row.

Row fields: the prompt (model, task, example id and index, method, budget), the graded response and grade,
the generated token ids and stop reason, accept lengths (tau = mean accepted length per target step), per-layer
set-size and union statistics from the trace (sums and means over every block and layer), and timing.
"""
from __future__ import annotations

from collections.abc import Callable

from acceptmoe.evals.tasks import get_task
from acceptmoe.methods import B0_METHOD, CALIBRATION, METHODS, CommitmentTable, Variant

from ..spine import calibration
from ..spine.b0 import B0Decision, b0_for_pair
from ..spine.config import ModelEntry, Pair
from ..spine.engines import opened, set_threads
from ..spine.grading import PairRun, run_graded
from ..spine.layout import RunPaths
from ..spine.progress import RunProgress
from ..spine.runs import Run, SampleLog, unit_key
from ..spine.tracelog import TraceLog
from .config import Table1Config

Progress = Callable[[str, "str | None"], None]


def method_order(methods: tuple[str, ...]) -> list[str]:
    """Calibration's method first (the engine that calibrated serves it on), then the method whose traces give B0,
    then the fixed-budget methods (at B0), then the rest."""
    ordered = [m for m in METHODS if m in methods]
    first = [m for m in ordered if m == CALIBRATION] + [m for m in ordered if m == B0_METHOD]
    fixed = [m for m in ordered if METHODS[m].needs_budget]
    return first + fixed + [m for m in ordered if m not in first + fixed]


def needs_calibration(methods: tuple[str, ...]) -> bool:
    """Whether a method needs p_hat (`MethodSpec.needs_calibration`): the references alone calibrate nothing."""
    return any(METHODS[m].needs_calibration for m in methods)


def run_method(run: PairRun, method: str, table: CommitmentTable | None, b0: B0Decision | None, cfg: Table1Config,
               paths: RunPaths, progress: Progress) -> B0Decision | None:
    """One method on one pair (fixed budgets at the pair's B0); returns the pair's B0 decision when the method
    sets it, else `b0` unchanged. `table` is None where no method calibrates."""
    plan = run.loaded.plan(Variant(method), commitment=table.p_hat if table else None, b0=b0.b0 if b0 else None)
    log = TraceLog(paths.traces(run.pair, method), keep=run.samples)
    units = [(i, unit_key(run.pair.model, run.pair.task, ex["id"], method)) for i, ex in enumerate(run.examples)]
    run_graded(run, plan, units, trace_layers=cfg.trace_layers or method == B0_METHOD, log=log, progress=progress,
               routes_as="table1")
    return b0_for_pair(log, cfg.world.b0, paths.b0(run.pair)) if method == B0_METHOD else b0


def eval_examples(cfg: Table1Config) -> dict[str, list[dict]]:
    return {t: get_task(t).load(cfg.world.eval_split, cfg.limit) for t in cfg.world.tasks}


def unit_counts(cfg: Table1Config, model: str, examples: dict[str, list[dict]], samples: SampleLog,
                paths: RunPaths) -> dict[str, tuple[int, int]]:
    """kind -> (units of `model` in the whole run, those finished): calibration prompts (where a method needs
    p_hat) and graded (prompt, method) generations."""
    keys = [unit_key(model, t, ex["id"], meth) for t in cfg.world.tasks for ex in examples[t] for meth in cfg.methods]
    out = {"calibration": calibration.counts(cfg.world, paths, model)} if needs_calibration(cfg.methods) else {}
    return {**out, "generation": (len(keys), sum(k in samples for k in keys))}


def run_model(model: ModelEntry, cfg: Table1Config, paths: RunPaths, samples: SampleLog,
              examples: dict[str, list[dict]], bar: RunProgress) -> None:
    """Calibration, then each method on every pair of one model (the engine is closed when this returns)."""
    progress = bar.reporter("generation")
    with opened(model, cfg.world, paths.root, pooled=True) as loaded:
        tables = {s: calibration.calibrate_source(loaded, cfg.world, s, paths, bar.reporter("calibration"))
                  for s in calibration.sources(cfg.world)} if needs_calibration(cfg.methods) else {}
        runs = [PairRun(loaded, get_task(task), examples[task], samples) for task in cfg.world.tasks]
        b0: dict[str, B0Decision | None] = {task: None for task in cfg.world.tasks}
        for method in method_order(cfg.methods):
            for run in runs:
                table = tables.get(cfg.world.calibration.source(run.task.name))
                b0[run.task.name] = run_method(run, method, table, b0[run.task.name], cfg, paths, progress)


def saved_b0(cfg: Table1Config, paths: RunPaths) -> dict[Pair, B0Decision]:
    """{pair: B0 decision} for every pair that has one."""
    return {pair: B0Decision.load(paths.b0(pair)) for pair in cfg.world.pairs() if paths.b0(pair).is_file()}


def run_experiment(cfg: Table1Config, run: Run, show_progress: bool = True) -> dict[Pair, B0Decision]:
    """Calibration, B0 and every method on every pair into `run`; returns {pair: B0 decision}. Models with
    nothing left to run are not loaded."""
    set_threads(cfg.world)
    paths, samples = RunPaths(run.path), SampleLog(run.path / "samples.jsonl")
    examples = eval_examples(cfg)
    counts = {m.name: unit_counts(cfg, m.name, examples, samples, paths) for m in cfg.world.models}
    kinds = {k: (sum(c[k][0] for c in counts.values()), sum(c[k][1] for c in counts.values()))
             for k in next(iter(counts.values()))}
    bar = RunProgress.start(run.path, kinds, show=show_progress)
    for model in cfg.world.models:
        if any(total > done for total, done in counts[model.name].values()):
            run_model(model, cfg, paths, samples, examples, bar)
    return saved_b0(cfg, paths)


def run_summary(cfg: Table1Config, run: Run) -> dict:
    """`run_experiment`, then what a finished run's summary records: the B0 decision of every pair."""
    decisions = run_experiment(cfg, run)
    return {"b0": [{"model": pair.model, "task": pair.task, **d.to_json()} for pair, d in decisions.items()]}
