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

Grading can overlap generation (`generation.grading_workers`, resolved by `grading_workers`): replies are then
graded in worker processes (their own main threads, so math_verify keeps its time limits; code still runs in
the sandbox) while the engine generates the next batch, and rows are saved in unit order as their grades
arrive. Inline grading (the default on a CPU engine, which would share its cores with the graders) grades and
saves each reply before the next is graded. Either way the rows are the same.
"""
from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from acceptmoe.evals.tasks import Grade, Task, get_task
from acceptmoe.evals.tasks.from_file import file_of, register_file
from acceptmoe.methods import Plan

from .cluster import PooledEngine, generations
from .config import Pair
from .engines import Loaded
from .layout import RunPaths
from .prompts import decode, prompt_ids
from .rows import Generated, Graded, GradedRow, TraceStats
from .runs import SampleLog
from .tracelog import TraceLog

Progress = Callable[[str, "str | None"], None]     # (what finished, the worker that generated it; None: here)


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
    prompts, options = _requests(pair, indices, trace_layers, record_routes)
    gens = pair.loaded.engine.generate_many(prompts, plan, pair.loaded.world.max_new_tokens(pair.loaded.model),
                                            options)
    return list(zip(prompts, gens, strict=True))


def _requests(pair: PairRun, indices: Sequence[int], trace_layers: bool, record_routes: bool) -> tuple[list, list]:
    """The prompt ids and generation options of the prompts at `indices`."""
    model, world = pair.loaded.model, pair.loaded.world
    prompts = [prompt_ids(pair.loaded.tokenizer, pair.task.messages(pair.examples[i]), model) for i in indices]
    options = [world.sampling.options(model.name, pair.task.name, world.eval_split, pair.examples[i]["id"],
                                      trace_layers=trace_layers, record_routes=record_routes) for i in indices]
    return prompts, options


def produced(pair: PairRun, todo: Sequence[tuple[int, str]], plan: Plan, trace_layers: bool,
             record_routes: bool) -> Iterator[tuple[int, str, list[int], object, str | None]]:
    """(example index, unit key, prompt ids, generation, worker) per unit of `todo`, in order, lazily: in
    batches of `generation.batch` on an in-process engine (worker None), or every unit at once on a pooled
    one (`spine.cluster`: each prompt a Ray task; worker: the one that ran it)."""
    if isinstance(pair.loaded.engine, PooledEngine):
        prompts, options = _requests(pair, [i for i, _ in todo], trace_layers, record_routes)
        max_new = pair.loaded.world.max_new_tokens(pair.loaded.model)
        calls = [(ids, plan, max_new, o) for ids, o in zip(prompts, options, strict=True)]
        for (index, key), ids, (worker, gen) in zip(todo, prompts, generations(pair.loaded.engine, calls),
                                                    strict=True):
            yield index, key, ids, gen, worker
        return
    step = pair.loaded.world.generation.batch
    for start in range(0, len(todo), step):
        batch = todo[start:start + step]
        for (index, key), (ids, gen) in zip(batch, generated(pair, [i for i, _ in batch], plan, trace_layers,
                                                             record_routes), strict=True):
            yield index, key, ids, gen, None


def grading_workers(world) -> int:
    """Worker processes grading replies while the engine generates (`generation.grading_workers`; None: none
    on a CPU engine, whose cores the graders would take, else up to 4, leaving a core to the engine's host)."""
    chosen = world.generation.grading_workers
    if chosen is not None:
        return chosen
    return 0 if str(world.device) == "cpu" else max(0, min(4, (os.cpu_count() or 1) - 1))


def grade_reply(task: str, example: dict, response: str, response_format: str, task_file=None) -> Grade:
    """One reply's grade (what a grading worker runs; inline grading calls it too); `task_file`: the YAML a
    task declared in a file came from, registered again in the worker's fresh process."""
    if task_file is not None:
        register_file(task_file)
    return get_task(task).score_many([example], [response], response_format=response_format)[0]


@contextmanager
def grading_pool(workers: int) -> Iterator[ProcessPoolExecutor | None]:
    """`workers` spawned grading processes for the length of a `with` block (None: grade inline). Spawned, not
    forked: the parent may hold a CUDA context."""
    if workers == 0:
        yield None
        return
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@dataclass
class Reply:
    """A generated reply on its way to the sample log: its unit, prompt, generation, response and grade."""
    index: int
    key: str
    ids: list[int]
    gen: object
    response: str
    grade: Future | Grade
    worker: str | None = None


def _reply(pair: PairRun, index: int, key: str, ids: list[int], gen, pool: ProcessPoolExecutor | None,
           worker: str | None = None) -> Reply:
    model, ex = pair.loaded.model, pair.examples[index]
    response = decode(pair.loaded.tokenizer, gen.tokens, model.response_format)
    args = (pair.task.name, ex, response, model.response_format, file_of(pair.task.name))
    grade = pair.task.score_many([ex], [response], response_format=model.response_format)[0] if pool is None \
        else pool.submit(grade_reply, *args)
    return Reply(index, key, ids, gen, response, grade, worker)


def _row(pair: PairRun, plan: Plan, reply: Reply) -> GradedRow:
    model, ex, gen = pair.loaded.model, pair.examples[reply.index], reply.gen
    grade = reply.grade
    row = GradedRow(model.name, pair.task.name, pair.task.version, ex["id"], reply.index, plan.variant.method,
                    plan.budget, Generated.of(gen, reply.ids),
                    Graded(bool(grade.correct), grade.extracted, score_details=grade.details, response=reply.response),
                    TraceStats.of(gen.trace))
    gen.trace.meta.update(model=model.name, task=pair.task.name, example_id=ex["id"], index=reply.index)
    return row


def run_graded(pair: PairRun, plan: Plan, units: Sequence[tuple[int, str]], *, trace_layers: bool = True,
               log: TraceLog | None = None, relabel: Callable[[GradedRow], GradedRow] = lambda row: row,
               progress: Progress = lambda *_: None, routes_as: str | None = None) -> None:
    """Every unit (example index, unit key) not yet in the sample log, generated with `plan` and graded;
    `relabel` adds the experiment's fields to a row (the sweep's variant and phase, ...); `routes_as` names
    the phase under which the routes of these generations are saved when the world records routes."""
    todo = [(i, key) for i, key in units if key not in pair.samples]
    record = routes_as is not None and pair.loaded.world.generation.record_routes
    paths = RunPaths(pair.samples.path.parent)

    def save(reply: Reply) -> None:                          # its trace and routes first, then its row
        row = _row(pair, plan, reply)
        if log is not None:
            log.append(reply.key, reply.gen.trace)
        if record:
            save_routes(reply.gen, paths.routes(routes_as, pair.pair, plan.name, 0, reply.index), reply.key)
        pair.samples.append(reply.key, relabel(row).to_json())
        progress(f"{pair.pair.model} {pair.pair.task} {plan.name}", reply.worker)

    waiting: deque[Reply] = deque()                           # generated, in unit order, not yet saved
    with grading_pool(grading_workers(pair.loaded.world)) as pool:
        try:
            for index, key, ids, gen, worker in produced(pair, todo, plan, trace_layers, record):
                waiting.append(_reply(pair, index, key, ids, gen, pool, worker))
                _save_ready(waiting, save, wait=False)
            _save_ready(waiting, save, wait=True)
        finally:                                              # a stop keeps every reply graded before it
            _save_ready(waiting, save, wait=False, quiet=True)


def _save_ready(waiting: deque, save: Callable[[Reply], None], wait: bool, quiet: bool = False) -> None:
    """Save the replies at the front of `waiting` whose grades are in (all of them when `wait`), in order;
    `quiet` (while another error propagates) stops at the first grade that failed instead of raising."""
    while waiting:
        grade = waiting[0].grade
        if isinstance(grade, Future) and not (wait or grade.done()):
            return
        if quiet and isinstance(grade, Future) and (not grade.done() or grade.exception() is not None):
            return
        reply = waiting.popleft()
        reply.grade = grade.result() if isinstance(grade, Future) else grade      # a worker's error raises here
        save(reply)


def save_routes(gen, path, key: str) -> None:
    """A generation's routes to `path` (atomic), with the sample key that names it."""
    gen.routes.meta["unit"] = key
    gen.routes.save(path)
