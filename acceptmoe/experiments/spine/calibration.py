"""Calibration: Standard SD on a training split, counted into a CommitmentTable (p_hat) per (model, source).

Each evaluation task is calibrated on `calibration.sources[task]` (default: the task itself), split
`calibration.split` (train), first `calibration.prompts` examples; greedy, natural routing, stopping at
EOS or the calibration max_new_tokens. Tasks with the same source share one table. The Standard SD traces
are kept next to the table, one per prompt, so an interrupted calibration resumes where it stopped.

    tables = {source: calibrate_source(loaded, world, source, paths) for source in sources(world)}
"""
from __future__ import annotations

from collections.abc import Callable

from acceptmoe.engine.trace import commitment_table
from acceptmoe.evals.tasks import get_task
from acceptmoe.methods import CALIBRATION, CommitmentTable, Variant

from .cluster import generations
from .config import WorldConfig
from .engines import Loaded
from .layout import RunPaths
from .prompts import prompt_ids
from .tracelog import TraceLog

Progress = Callable[[str, "str | None"], None]     # (what finished, the worker that generated it; None: here)


def sources(world: WorldConfig) -> list[str]:
    """The calibration source tasks this config needs, in task order, without repeats."""
    return list(dict.fromkeys(world.calibration.source(t) for t in world.tasks))


def calibration_examples(world: WorldConfig, source: str) -> list[dict]:
    task = get_task(source)
    if world.calibration.split not in task.splits:
        raise ValueError(f"calibration source {source!r} has no {world.calibration.split!r} split (splits: "
                         f"{task.splits}); map it to a task that has one under calibration.sources")
    return task.load(world.calibration.split, world.calibration.prompts)


def calibrate_source(loaded: Loaded, world: WorldConfig, source: str, paths: RunPaths,
                     progress: Progress = lambda *_: None) -> CommitmentTable:
    """The source's CommitmentTable for this model: loaded if saved, else computed (resuming traces)."""
    name, split = loaded.model.name, world.calibration.split
    out = paths.calibration(name, source, split)
    if out.is_file():
        return CommitmentTable.load(out)
    task = get_task(source)
    examples = calibration_examples(world, source)
    log = TraceLog(paths.calibration_traces(name, source, split))
    max_new = world.max_new_tokens(loaded.model)
    plan = loaded.plan(Variant(CALIBRATION))
    todo = [ex for ex in examples if ex["id"] not in log]
    calls = ((prompt_ids(loaded.tokenizer, task.messages(ex), loaded.model), plan, max_new,
              world.sampling.options(name, source, split, ex["id"], trace_layers=False)) for ex in todo)
    for ex, (worker, gen) in zip(todo, generations(loaded.engine, calls), strict=True):   # in process: lazily
        log.append(ex["id"], gen.trace)
        progress(f"{name} calibrate {source}", worker)
    by_key = {t.meta["key"]: t for t in log.read()}
    traces = [by_key[ex["id"]] for ex in examples]
    provenance = {"target": loaded.model.target, "draft": loaded.model.draft, "task": source, "split": split,
                  "task_version": task.version, "prompts": len(examples), "max_new_tokens": max_new,
                  "calibrates": [t for t in world.tasks if world.calibration.source(t) == source],
                  "dtype": world.dtype, "device": world.device}
    if not world.sampling.greedy:                 # p_hat under sampling is its own; greedy provenance unchanged
        provenance["sampling"] = world.sampling.options().sampling()
    table = commitment_table(traces, max_depth=world.tree.num_steps, provenance=provenance)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.save(out)
    return table


def counts(world: WorldConfig, paths: RunPaths, model: str) -> tuple[int, int]:
    """(calibration prompts of `model` in the whole run, those finished) (for the progress line)."""
    total = done = 0
    for source in sources(world):
        examples = calibration_examples(world, source)
        total += len(examples)
        if paths.calibration(model, source, world.calibration.split).is_file():
            done += len(examples)
            continue
        log = TraceLog(paths.calibration_traces(model, source, world.calibration.split))
        done += sum(ex["id"] in log for ex in examples)
    return total, done


def pending(world: WorldConfig, paths: RunPaths, model: str) -> int:
    """Calibration prompts still to run for `model`."""
    total, done = counts(world, paths, model)
    return total - done
