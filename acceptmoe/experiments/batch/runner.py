"""The batch study's runner: real generations per draft shape, then their verify passes composed into batches.

Per draft shape (`config.DraftShape`), in `shapes/<tree>/` of the run folder (a run folder of its own layout,
`spine.layout.RunPaths`):
1. p_hat and B0 by the world's rules on that shape (`spine.budgets.pair_budgets`: Standard SD's calibration on
   at most `limit` training prompts per task, B0 from AcceptMoE's traces on the first `limit` evaluation
   prompts);
2. every batched method (`BatchStudyConfig.method_names`: every registered method that speculates) graded on the
   first `limit` evaluation prompts of every task, with its routes recorded (`routes/batch/...`): tau and
   accuracy per draft shape come from these rows, the requests from these routes.
Then, per (draft shape, batch size), one row of the run's `samples.jsonl`: for every request draw
(`compose.draw_requests`), each method's batched passes counted by the engine's store (`compose.StoreCounter`).
An interrupted run resumes at the first unfinished generation or (shape, batch size) row.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from tqdm import tqdm

from acceptmoe.engine.routes import Routes
from acceptmoe.evals.tasks import get_task
from acceptmoe.methods import Variant

from ..spine.budgets import pair_budgets
from ..spine.config import Pair
from ..spine.engines import opened, set_threads
from ..spine.grading import PairRun, run_graded
from ..spine.layout import RunPaths
from ..spine.runs import Run, SampleLog, unit_key
from .compose import Request, StoreCounter, compose, draw_requests
from .config import PHASE, BatchStudyConfig, DraftShape


def generate_shape(cfg: BatchStudyConfig, shape: DraftShape, root: Path) -> None:
    """Budgets, then every method's graded generations with routes, on this draft shape (finished units kept)."""
    world = cfg.world_for(shape)
    budgets = pair_budgets(world, root, None, cfg.limit)
    samples = SampleLog(root / "samples.jsonl")
    for model in world.models:
        examples = {t: get_task(t).load(world.eval_split, cfg.limit) for t in world.tasks}
        units = {(m, t): [(i, unit_key(PHASE, model.name, t, Variant(m).name, ex["id"]))
                          for i, ex in enumerate(examples[t])] for m in cfg.method_names() for t in world.tasks}
        if all(key in samples for us in units.values() for _, key in us):
            continue
        with opened(model, world, root) as loaded:
            for method in cfg.method_names():
                variant = Variant(method)
                for task in world.tasks:
                    run = PairRun(loaded, get_task(task), examples[task], samples)
                    b = budgets[run.pair]
                    relabel = lambda row, v=variant: dataclasses.replace(row, phase=PHASE, variant=v.name)  # noqa: E731
                    run_graded(run, loaded.plan(variant, commitment=b.table.p_hat, b0=b.b0), units[(method, task)],
                               relabel=relabel, routes_as=PHASE)
                    print(f"{shape.describe()}: {model.name} {task} {variant.name} done", flush=True)


def requests_of(cfg: BatchStudyConfig, root: Path) -> dict[str, list[Request]]:
    """variant -> its requests, one per (model, task, prompt) every method recorded, in the same order."""
    paths, rows = RunPaths(root), list(SampleLog(root / "samples.jsonl"))
    names = [Variant(m).name for m in cfg.method_names()]
    keys = sorted({(r["model"], r["task"], r["index"]) for r in rows if r.get("phase") == PHASE},
                  key=lambda k: (k[0], cfg.world.tasks.index(k[1]), k[2]))
    keys = [k for k in keys if all(paths.routes(PHASE, Pair(k[0], k[1]), v, 0, k[2]).is_file() for v in names)]
    return {v: [Request.of(Routes.load(paths.routes(PHASE, Pair(m, t), v, 0, i))) for m, t, i in keys]
            for v in names}


def counted_row(cfg: BatchStudyConfig, shape: DraftShape, batch: int, requests: dict[str, list[Request]],
                counter: StoreCounter) -> dict:
    """One (shape, batch size) row: per draw, its prompts and each method's counts."""
    pool = len(next(iter(requests.values())))
    draws = []
    for d, chosen in enumerate(draw_requests(pool, batch, cfg.draws, cfg.seed)):
        per = {}
        for v, reqs in requests.items():
            passes = compose([reqs[i] for i in chosen])
            counts = counter.count(passes, resident=d == 0)
            counts.update(passes=len(passes), output=sum(p.output for p in passes),
                          tokens=sum(p.tokens for p in passes), active=sum(len(p.members) for p in passes),
                          own=sum(p.own_sets() for p in passes))
            if d == 0:                     # the composition is what a batched pass sends: its full rows agree
                first = passes[:1]
                counts["full_rows_agree"] = counter.count(first, True, True) == counter.count(first, True)
            per[v] = counts
        draws.append({"prompts": [int(i) for i in chosen], "methods": per})
    agree = all(c["reads"] == c["store_reads"] and c["full_rows_agree"] for c in draws[0]["methods"].values())
    return {"tree": str(shape), "batch": batch, "pool": pool, "layers": counter.L, "slots": cfg.slots,
            "store_agrees": agree, "draws": draws}


def run_experiment(cfg: BatchStudyConfig, run: Run, show_progress: bool = True) -> dict:
    set_threads(cfg.world)
    samples = SampleLog(run.path / "samples.jsonl")
    for shape in cfg.shapes():
        root = shape.folder_in(run.path)
        todo = [b for b in cfg.batch_sizes if unit_key(shape.folder, b) not in samples]
        if not todo:
            continue
        generate_shape(cfg, shape, root)
        requests = requests_of(cfg, root)
        some = next(iter(requests.values()))[0]
        counter = StoreCounter(some.masks.shape[1], some.masks.shape[2], int(some.ids[0].shape[-1]), cfg.slots,
                               seed=cfg.seed)
        for batch in tqdm(todo, disable=not show_progress, desc=f"{shape.describe()}: batches", unit="size"):
            samples.append(unit_key(shape.folder, batch), counted_row(cfg, shape, batch, requests, counter))
    return {"trees": list(cfg.trees), "batch_sizes": list(cfg.batch_sizes)}
