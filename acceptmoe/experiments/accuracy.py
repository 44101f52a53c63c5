"""Accuracy runs: every method on every (model, task) pair, greedy, one sample row per (prompt, method).

Order per model: calibrate every source task, then per task: acceptmoe on every evaluation prompt (its
traces give B0), B0, the fixed-budget methods at B0, then the rest (Vanilla AR, Standard SD). Each unit's
trace is appended to `traces/<model>/<task>/<method>.jsonl`, then its row to `samples.jsonl` (both fsynced),
so an interrupted run resumes at the first unfinished unit and never duplicates a row. Errors propagate:
an exception is never recorded as an answer.

Row fields: the prompt (model, task, example id and index, method, budget), the graded response and score,
the generated token ids and stop reason, accept lengths (tau = mean accepted length per target step), per-layer set-size and
union statistics from the trace (sums and means over every block and layer), and timing.
"""
from __future__ import annotations

import gc
import json
from dataclasses import dataclass
from typing import Callable

import torch

from tqdm import tqdm

from acceptmoe.evals.tasks import Task, get_task
from acceptmoe.experiments.runs import Run, SampleLog, unit_key
from acceptmoe.engine.trace import Trace
from acceptmoe.methods import METHODS, CommitmentTable, Variant

from . import calibrate
from .b0 import b0_for_pair
from .common import Loaded, RunPaths, load_model, set_threads
from .config import ModelSpec, Table1Config
from .prompts import decode, prompt_ids
from .rows import Generated, Graded, GradedRow, TraceStats
from .tracelog import TraceLog

Progress = Callable[[str], None]


def method_order(methods: tuple[str, ...]) -> list[str]:
    """The method whose traces give B0 first, then the fixed-budget methods (at B0), then the rest."""
    ordered = [m for m in METHODS if m in methods]
    first = [m for m in ordered if METHODS[m].sets_b0]
    fixed = [m for m in ordered if METHODS[m].needs_budget]
    return first + fixed + [m for m in ordered if m not in first + fixed]


@dataclass
class PairContext:
    """One (model, task) pair in progress."""
    loaded: Loaded
    task: Task
    examples: list[dict]
    table: CommitmentTable
    cfg: Table1Config
    paths: RunPaths
    samples: SampleLog


def run_unit(ctx: PairContext, index: int, variant: Variant) -> tuple[GradedRow, Trace]:
    """Generate and grade one prompt with one variant (bound to its p_hat and budget): the row and the trace."""
    return run_units(ctx, [index], variant)[0]


def run_units(ctx: PairContext, indices: list[int], variant: Variant) -> list[tuple[GradedRow, Trace]]:
    """Generate several prompts with one variant in one `generate_many` call (an engine may run them
    concurrently), then grade each: (row, trace) per index, in order."""
    spec, cfg = ctx.loaded.spec, ctx.cfg
    prompts = [prompt_ids(ctx.loaded.tokenizer, ctx.task.messages(ctx.examples[i]), spec) for i in indices]
    gens = ctx.loaded.engine.generate_many(prompts, variant, cfg.world.max_new_tokens(spec),
                                           trace_layers=cfg.trace_layers or variant.spec.sets_b0)
    return [_graded(ctx, i, variant, ids, gen) for i, ids, gen in zip(indices, prompts, gens)]


def _graded(ctx: PairContext, index: int, variant: Variant, ids: list[int], gen) -> tuple[GradedRow, Trace]:
    spec, ex = ctx.loaded.spec, ctx.examples[index]
    response = decode(ctx.loaded.tokenizer, gen.tokens, spec.response_format)
    score = ctx.task.score_many([ex], [response], response_format=spec.response_format)[0]
    row = GradedRow(spec.name, ctx.task.name, ctx.task.version, ex["id"], index, variant.method,
                    variant.effective_budget, Generated.of(gen, ids),
                    Graded(bool(score.correct), score.extracted, score_details=score.details, response=response),
                    TraceStats.of(gen.trace))
    gen.trace.meta.update(model=spec.name, task=ctx.task.name, example_id=ex["id"], index=index)
    return row, gen.trace


def run_method(ctx: PairContext, variant: Variant, progress: Progress) -> TraceLog:
    """Every evaluation prompt of the pair with one (bound) method variant; finished units are skipped."""
    spec, task, method = ctx.loaded.spec.name, ctx.task.name, variant.method
    keys = [unit_key(spec, task, ex["id"], method) for ex in ctx.examples]
    log = TraceLog(ctx.paths.traces(spec, task, method), keep=ctx.samples)
    todo = [i for i, key in enumerate(keys) if key not in ctx.samples]
    step = ctx.cfg.world.generation.batch
    for start in range(0, len(todo), step):                  # each batch's rows are saved as soon as it returns
        for index, (row, trace) in zip(todo[start:start + step], run_units(ctx, todo[start:start + step], variant)):
            log.append(keys[index], trace)
            ctx.samples.append(keys[index], row.to_json())
            progress(f"{spec} {task} {method}")
    return log


def run_pair(ctx: PairContext, progress: Progress) -> dict | None:
    """All methods on one pair in the required order; returns the B0 decision (None without B0's method)."""
    decision = None
    for method in method_order(ctx.cfg.methods):
        variant = Variant(method).bind(commitment=ctx.table.p_hat if ctx.table else None,
                                       b0=decision["b0"] if decision else None)
        log = run_method(ctx, variant, progress)
        if variant.spec.sets_b0:
            decision = b0_for_pair(log, ctx.cfg.world.b0, ctx.paths.b0(ctx.loaded.spec.name, ctx.task.name))
    return decision


def eval_examples(cfg: Table1Config) -> dict[str, list[dict]]:
    return {t: get_task(t).load(cfg.world.eval_split, cfg.limit) for t in cfg.world.tasks}


def pending_units(cfg: Table1Config, model: str, examples: dict[str, list[dict]], samples: SampleLog) -> int:
    return sum(unit_key(model, t, ex["id"], meth) not in samples
               for t in cfg.world.tasks for ex in examples[t] for meth in cfg.methods)


def run_model(spec: ModelSpec, cfg: Table1Config, paths: RunPaths, samples: SampleLog,
              examples: dict[str, list[dict]], progress: Progress) -> None:
    """Calibration and every pair of one model (the engine is freed when this returns)."""
    loaded = load_model(spec, cfg.world, paths.root)
    tables = {s: calibrate.calibrate_source(loaded, cfg.world, s, paths, progress) for s in calibrate.sources(cfg.world)}
    for task in cfg.world.tasks:
        ctx = PairContext(loaded, get_task(task), examples[task], tables[cfg.world.calibration.source(task)],
                          cfg, paths, samples)
        run_pair(ctx, progress)


def saved_b0(cfg: Table1Config, paths: RunPaths) -> dict[str, dict]:
    """{"model|task": B0 decision} for every pair that has one."""
    files = {f"{m.name}|{t}": paths.b0(m.name, t) for m in cfg.world.models for t in cfg.world.tasks}
    return {k: json.loads(f.read_text()) for k, f in files.items() if f.is_file()}


def run_experiment(cfg: Table1Config, run: Run, show_progress: bool = True) -> dict[str, dict]:
    """Calibration, B0 and every method on every pair into `run`; returns {"model|task": B0 decision}.
    Models with nothing left to run are not loaded."""
    set_threads(cfg.world)
    paths, samples = RunPaths(run.path), SampleLog(run.path / "samples.jsonl")
    examples = eval_examples(cfg)
    todo = {m.name: pending_units(cfg, m.name, examples, samples) + calibrate.pending(cfg.world, paths, m.name)
            for m in cfg.world.models}
    with tqdm(total=sum(todo.values()), disable=not show_progress, unit="gen", dynamic_ncols=True) as bar:
        def progress(desc: str) -> None:
            bar.set_description(desc, refresh=False)
            bar.update(1)
        for spec in cfg.world.models:
            if todo[spec.name]:
                run_model(spec, cfg, paths, samples, examples, progress)
                free_device_memory()
    return saved_b0(cfg, paths)


def free_device_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
