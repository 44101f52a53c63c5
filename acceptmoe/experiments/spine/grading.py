"""Graded generations: one (model, task) pair's prompts under one plan, generated, graded and saved as rows.

    pair = PairRun(loaded, get_task("tiny-gsm"), examples, samples)
    run_graded(pair, plan, units, log=trace_log)      # units: (example index, unit key); finished keys skipped
    run_graded(pair, plan, units, routes_as="table1") # with generation.record_routes: routes/table1/... too

What Table 1, the sweep, the calibration study and the budgets a throughput run computes share: prompts in
batches of `generation.batch` through `EngineBackend.generate_many` (an engine may run them concurrently),
each reply graded by its task and saved at once: its trace appended to `log` (if any) and its routes saved
(`routes_as`, when the world records routes) before its row goes to the sample log, all fsynced, so an
interrupted run resumes at the first unfinished unit, never duplicates a row and never loses a graded one. A
reply whose grading goes wrong is that reply's failure, with its reason in the row (`Task.score_many`); other
errors propagate: an exception is never recorded as an answer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from acceptmoe.evals.tasks import Task
from acceptmoe.methods import Plan

from .config import Pair
from .layout import RunPaths
from .engines import Loaded
from .prompts import decode, prompt_ids
from .rows import Generated, Graded, GradedRow, TraceStats
from .runs import SampleLog
from .tracelog import TraceLog

Progress = Callable[[str], None]


@dataclass
class PairRun:
    """One (model, task) pair in progress: its engine, evaluation examples and the sample log it writes."""
    loaded: Loaded
    task: Task
    examples: list[dict]
    samples: SampleLog

    @property
    def pair(self) -> Pair:
        return Pair(self.loaded.model.name, self.task.name)


def generated(pair: PairRun, indices: Sequence[int], plan: Plan, trace_layers: bool,
              record_routes: bool = False) -> list[tuple[list[int], object]]:
    """Generate the prompts at `indices` with `plan` in one `generate_many` call: (prompt ids, generation)
    per index, in order."""
    model, world = pair.loaded.model, pair.loaded.world
    prompts = [prompt_ids(pair.loaded.tokenizer, pair.task.messages(pair.examples[i]), model) for i in indices]
    extra = {"record_routes": True} if record_routes else {}
    gens = pair.loaded.engine.generate_many(prompts, plan, world.max_new_tokens(model), trace_layers=trace_layers,
                                            **extra)
    return list(zip(prompts, gens))


def _row(pair: PairRun, index: int, plan: Plan, ids: list[int], gen) -> tuple[GradedRow, object]:
    model, ex = pair.loaded.model, pair.examples[index]
    response = decode(pair.loaded.tokenizer, gen.tokens, model.response_format)
    grade = pair.task.score_many([ex], [response], response_format=model.response_format)[0]
    row = GradedRow(model.name, pair.task.name, pair.task.version, ex["id"], index, plan.variant.method,
                    plan.budget, Generated.of(gen, ids),
                    Graded(bool(grade.correct), grade.extracted, score_details=grade.details, response=response),
                    TraceStats.of(gen.trace))
    gen.trace.meta.update(model=model.name, task=pair.task.name, example_id=ex["id"], index=index)
    return row, gen


def run_graded(pair: PairRun, plan: Plan, units: Sequence[tuple[int, str]], *, trace_layers: bool = True,
               log: TraceLog | None = None, relabel: Callable[[GradedRow], GradedRow] = lambda row: row,
               progress: Progress = lambda _: None, routes_as: str | None = None) -> None:
    """Every unit (example index, unit key) not yet in the sample log, generated with `plan` and graded;
    `relabel` adds the experiment's fields to a row (the sweep's variant and phase, ...); `routes_as` names
    the phase under which the routes of these generations are saved when the world records routes."""
    todo = [(i, key) for i, key in units if key not in pair.samples]
    step = pair.loaded.world.generation.batch
    record = routes_as is not None and pair.loaded.world.generation.record_routes
    paths = RunPaths(pair.samples.path.parent)
    for start in range(0, len(todo), step):
        batch = todo[start:start + step]
        for (index, key), (ids, gen) in zip(batch, generated(pair, [i for i, _ in batch], plan, trace_layers, record)):
            row, gen = _row(pair, index, plan, ids, gen)     # graded and saved one unit at a time
            if log is not None:
                log.append(key, gen.trace)
            if record:
                save_routes(gen, paths.routes(routes_as, pair.pair, plan.name, 0, index), key)
            pair.samples.append(key, relabel(row).to_json())
            progress(f"{pair.pair.model} {pair.pair.task} {plan.name}")


def save_routes(gen, path, key: str) -> None:
    """A generation's routes to `path` (atomic), with the sample key that names it."""
    gen.routes.meta["unit"] = key
    gen.routes.save(path)
