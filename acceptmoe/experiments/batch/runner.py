"""The batch study's runner: real generations per draft shape, then their verify passes in batches.

Per draft shape (`config.DraftShape`), in `shapes/<tree>/` of the run folder (a run folder of its own layout,
`spine.layout.RunPaths`):
1. p_hat and B0 by the world's rules on that shape (`spine.budgets.pair_budgets`), pooled into one server budget
   per model (`batched.server_budget`) that binds every plan below;
2. every composable method (`BatchStudyConfig.composed`) graded on the first `limit` evaluation prompts of every
   task, with its routes recorded (`routes/batch/...`): tau and accuracy per draft shape come from these rows,
   the composed requests from these routes.
Then, per (draft shape, batch size), one row of the run's `samples.jsonl`: for every request draw
(`compose.draw_requests`), each composed method's batched passes composed and counted by the engine's store
(`compose.StoreCounter`); each batch-crediting method's draw verified together (`batched.run_draw`), and on the
first draw every composed method's too (the batched check), kept per draw in `batched.jsonl`.
An interrupted run resumes at the first unfinished generation, batched draw or (shape, batch size) row.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from acceptmoe.engine.routes import Routes
from acceptmoe.evals.tasks import get_task
from acceptmoe.methods import Variant

from ..spine.budgets import pair_budgets
from ..spine.config import Pair
from ..spine.engines import opened, set_threads
from ..spine.grading import PairRun, run_graded
from ..spine.layout import RunPaths
from ..spine.progress import RunProgress
from ..spine.runs import Run, SampleLog, unit_key
from .batched import Pool, ServerBudget, quality_sums, run_draw, same_passes, server_budget
from .compose import Request, StoreCounter, compose, draw_requests
from .config import PHASE, BatchStudyConfig, DraftShape
from .prompts import graded_rows, pool_keys


def generate_shape(cfg: BatchStudyConfig, shape: DraftShape, root: Path) -> dict[str, ServerBudget]:
    """Budgets, then every composed method's graded generations with routes, on this draft shape (finished units
    kept); the server budget every plan of the shape is bound with."""
    world = cfg.world_for(shape)
    server = server_budget(world, pair_budgets(world, root, None, cfg.limit), root)
    samples = SampleLog(root / "samples.jsonl")
    for model in world.models:
        examples = {t: get_task(t).load(world.eval_split, cfg.limit) for t in world.tasks}
        units = {(m, t): [(i, unit_key(PHASE, model.name, t, Variant(m).name, ex["id"]))
                          for i, ex in enumerate(examples[t])] for m in cfg.composed() for t in world.tasks}
        if all(key in samples for us in units.values() for _, key in us):
            continue
        budget = server[model.name]
        with opened(model, world, root) as loaded:
            for method in cfg.composed():
                variant = Variant(method)
                plan = loaded.plan(variant, commitment=budget.p_hat, b0=budget.b0)
                for task in world.tasks:
                    run = PairRun(loaded, get_task(task), examples[task], samples)
                    relabel = lambda row, v=variant: dataclasses.replace(row, phase=PHASE, variant=v.name)  # noqa: E731
                    run_graded(run, plan, units[(method, task)], relabel=relabel, routes_as=PHASE)
                    print(f"{shape.describe()}: {model.name} {task} {variant.name} done", flush=True)
    return server


def pool_of(cfg: BatchStudyConfig, root: Path) -> tuple[Pool, dict[str, list[Request]], dict[str, list[dict]]]:
    """The pool, and per composed variant its requests and quality rows, one per (model, task, prompt) every
    composed method recorded, in the same order."""
    paths, rows = RunPaths(root), graded_rows(root)
    names = [Variant(m).name for m in cfg.composed()]
    keys = pool_keys(cfg, root, rows)
    requests = {v: [Request.of(Routes.load(paths.routes(PHASE, Pair(m, t), v, 0, i))) for m, t, i in keys]
                for v in names}
    by = {(r["variant"], r["model"], r["task"], r["index"]): r for r in rows}
    quality = {v: [member_quality(by[(v, *k)]) for k in keys] for v in names}
    examples = {t: get_task(t).load(cfg.world.eval_split, cfg.limit) for t in cfg.world.tasks}
    return Pool(keys, examples), requests, quality


def member_quality(row: dict) -> dict:
    """A graded batch-1 row's fields a draw sums (`BatchedDraw.members` has the same)."""
    return {"correct": int(bool(row["correct"])), "accepted": row["accepted"], "steps": row["steps"],
            "set_size_sum": row["set_size_sum"], "block_layers": row["block_layers"]}


def counts_of(passes, counter: StoreCounter, first: bool) -> dict:
    """A draw's composed passes counted (`StoreCounter.count`) with their sizes; on the first draw of a cell
    also the resident store and the full rows of its first pass (the composition check)."""
    counts = counter.count(passes, resident=first)
    counts.update(passes=len(passes), output=sum(p.output for p in passes), tokens=sum(p.tokens for p in passes),
                  active=sum(len(p.members) for p in passes), own=sum(p.own_sets() for p in passes))
    if first:
        counts["full_rows_agree"] = counter.count(passes[:1], True, True) == counter.count(passes[:1], True)
    return counts


@dataclass
class Cell:
    """What counting one (shape, batch size) row needs: the pool, composed requests and quality, the engine and
    plans for batched draws, the counter, and the log batched draws are kept in (resume)."""
    shape: DraftShape
    pool: Pool
    requests: dict[str, list[Request]]
    quality: dict[str, list[dict]]
    loaded: object
    plans: dict[str, object]             # variant -> plan, every method of the study
    counter: StoreCounter
    log: SampleLog


def batched_entries(cfg: BatchStudyConfig, cell: Cell, batch: int, d: int, chosen) -> dict:
    """One draw's batched runs (resumable unit): every batch-crediting method; on the first draw every composed
    method too, checked request by request against its batch-1 recording."""
    key = unit_key("batched", cell.shape.folder, batch, d)
    if key in cell.log:
        return next(r for r in cell.log if r["key"] == key)["methods"]
    out = {}
    for v, plan in cell.plans.items():
        if v in cell.requests and d > 0:
            continue
        draw = run_draw(cell.loaded, plan, cell.pool, chosen)
        entry = {**counts_of(compose(draw.requests), cell.counter, d == 0), "quality": draw.quality()}
        if v in cell.requests:
            entry = {"batched_reads": entry["reads"],
                     "batched_same": sum(same_passes(a, cell.requests[v][i])
                                         for a, i in zip(draw.requests, chosen, strict=True))}
        out[v] = entry
    cell.log.append(key, {"batch": batch, "draw": d, "methods": out})
    return out


def counted_row(cfg: BatchStudyConfig, batch: int, cell: Cell) -> dict:
    """One (shape, batch size) row: per draw, its prompts and each method's counts and quality sums."""
    pool = len(cell.pool.keys)
    draws = []
    for d, chosen in enumerate(draw_requests(pool, batch, cfg.draws, cfg.seed)):
        per = {}
        for v, reqs in cell.requests.items():
            per[v] = {**counts_of(compose([reqs[i] for i in chosen]), cell.counter, d == 0),
                      "quality": quality_sums([cell.quality[v][i] for i in chosen])}
        for v, entry in batched_entries(cfg, cell, batch, d, chosen).items():
            per[v] = {**per[v], **entry} if v in per else entry
        draws.append({"prompts": [int(i) for i in chosen], "methods": per})
    first = draws[0]["methods"]
    agree = all(c["reads"] == c["store_reads"] and c["full_rows_agree"] for c in first.values())
    batched_agree = all(c["batched_reads"] == c["reads"] and c["batched_same"] == batch
                        for v, c in first.items() if v in cell.requests)
    return {"tree": str(cell.shape), "batch": batch, "pool": pool, "layers": cell.counter.L, "slots": cfg.slots,
            "store_agrees": agree, "batched_agrees": batched_agree, "draws": draws}


def run_experiment(cfg: BatchStudyConfig, run: Run, show_progress: bool = True) -> dict:
    set_threads(cfg.world)
    samples = SampleLog(run.path / "samples.jsonl")
    keys = [unit_key(shape.folder, b) for shape in cfg.shapes() for b in cfg.batch_sizes]
    bar = RunProgress.start(run.path, {"batch size": (len(keys), sum(k in samples for k in keys))},
                            show=show_progress)
    for shape in cfg.shapes():
        root = shape.folder_in(run.path)
        todo = [b for b in cfg.batch_sizes if unit_key(shape.folder, b) not in samples]
        if not todo:
            continue
        server = generate_shape(cfg, shape, root)
        pool, requests, quality = pool_of(cfg, root)
        some = next(iter(requests.values()))[0]
        counter = StoreCounter(some.masks.shape[1], some.masks.shape[2], int(some.ids[0].shape[-1]), cfg.slots,
                               seed=cfg.seed)
        world, (model,) = cfg.world_for(shape), cfg.world.models
        budget = server[model.name]
        with opened(model, world, root) as loaded:
            plans = {Variant(m).name: loaded.plan(Variant(m), commitment=budget.p_hat, b0=budget.b0)
                     for m in cfg.method_names()}
            cell = Cell(shape, pool, requests, quality, loaded, plans, counter, SampleLog(root / "batched.jsonl"))
            for batch in todo:
                samples.append(unit_key(shape.folder, batch), counted_row(cfg, batch, cell))
                bar.tick("batch size", f"{shape.describe()}: batch {batch}")
    return {"trees": list(cfg.trees), "batch_sizes": list(cfg.batch_sizes)}
