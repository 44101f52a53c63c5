"""The batch study's real batched verify passes (docs/batch-study.md, "Batched runs"), and the one budget a
server batching requests of every task runs with.

    budget = server_budget(world, budgets, root)            # one p_hat and one B0 for the model, every task
    pool = Pool.of(cfg, keys)                               # the study's prompts, in the requests' order
    draw = run_draw(loaded, plan, pool, chosen)             # B prompts through Engine.generate_batch, graded
    draw.requests                                           # per request: what it sent in each batched pass

A batched pass routes every request's tree under one plan, so the study binds one budget per model: p_hat from
the calibration counts of every task's source summed (`CommitmentTable` counts, so tasks weigh by their
blocks), B0 by the world's rule (`spine.b0.decide_b0`) over AcceptMoE's traces of every task taken index by
index across tasks (the first prompts of each task before the second of any). Every method of the study, batch-1
runs and batched ones, is bound with it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from acceptmoe.evals.tasks import get_task
from acceptmoe.methods import B0_METHOD, CommitmentTable, Plan

from ..spine.b0 import B0Decision, decide_b0
from ..spine.budgets import PairBudget
from ..spine.calibration import sources
from ..spine.config import Pair
from ..spine.layout import RunPaths
from ..spine.prompts import decode, prompt_ids
from ..spine.runs import write_json
from ..spine.tracelog import TraceLog
from .compose import Request

SERVER_BUDGET = "server-budget.json"


@dataclass(frozen=True)
class ServerBudget:
    model: str
    p_hat: tuple[float, ...]
    b0: int
    decision: B0Decision


def server_budget(world, budgets: dict[Pair, PairBudget], root: Path) -> dict[str, ServerBudget]:
    """Per model, the budget of every task pooled (see the module docstring), from the pairs' saved calibration
    tables and B0 traces under `root/budgets`; written to `root/server-budget.json`."""
    paths, out = RunPaths(root / "budgets"), {}
    for model in world.models:
        tables = {world.calibration.source(p.task): budgets[p].table for p in world.pairs() if p.model == model.name}
        first = next(iter(tables.values()))
        pooled = CommitmentTable(first.max_depth,
                                 [sum(x) for x in zip(*(t.proposed for t in tables.values()), strict=False)],
                                 [sum(x) for x in zip(*(t.committed for t in tables.values()), strict=False)],
                                 {"pooled_sources": sources(world)})
        per_task = [sorted(TraceLog(paths.traces(Pair(model.name, t), B0_METHOD)).read(),
                        key=lambda tr: tr.meta["index"]) for t in world.tasks]
        merged = []
        for i in range(max(len(ts) for ts in per_task)):
            for ts in per_task:
                if i < len(ts):
                    merged.append(dataclasses.replace(ts[i], meta={**ts[i].meta, "index": len(merged)}))
        decision = decide_b0(merged, world.b0)
        out[model.name] = ServerBudget(model.name, pooled.p_hat, decision.b0, decision)
    write_json(root / SERVER_BUDGET, [{"model": b.model, "p_hat": list(b.p_hat), "b0": b.b0,
                                       "decision": b.decision.to_json()} for b in out.values()])
    return out


@dataclass(frozen=True)
class Pool:
    """The prompts requests are drawn from: (model, task, evaluation index) per request, and the examples."""
    keys: list[tuple[str, str, int]]
    examples: dict[str, list[dict]]

    def example(self, i: int) -> dict:
        _, task, index = self.keys[i]
        return self.examples[task][index]


@dataclass(frozen=True)
class BatchedDraw:
    """One draw verified together: per request its routes as a `compose.Request` and what it did."""
    requests: list[Request]
    members: list[dict]          # per request: correct, accepted, steps, set_size_sum, block_layers

    def quality(self) -> dict:
        """The draw's sums (the study pairs them over draws) and each request's correctness."""
        return quality_sums(self.members)


def quality_sums(members: list[dict]) -> dict:
    """Requests' quality fields summed, with `correct_each` (0/1 per request, in the draw's order)."""
    sums = {k: sum(m[k] for m in members) for k in ("correct", "accepted", "steps", "set_size_sum", "block_layers")}
    return {**sums, "correct_each": [int(m["correct"]) for m in members]}


def run_draw(loaded, plan: Plan, pool: Pool, chosen) -> BatchedDraw:
    """The pool's prompts at `chosen` generated together (`Engine.generate_batch`, stop at EOS, routes and layers
    recorded) and each reply graded by its task."""
    model = loaded.model
    tasks = [get_task(pool.keys[i][1]) for i in chosen]
    examples = [pool.example(i) for i in chosen]
    prompts = [prompt_ids(loaded.tokenizer, t.messages(ex), model) for t, ex in zip(tasks, examples, strict=True)]
    world = loaded.world
    options = [world.sampling.options(model.name, t.name, world.eval_split, ex["id"], record_routes=True)
               for t, ex in zip(tasks, examples, strict=True)]
    gens = loaded.engine.generate_batch(prompts, plan, world.max_new_tokens(model), options)
    members = []
    for task, ex, gen in zip(tasks, examples, gens, strict=True):
        reply = decode(loaded.tokenizer, gen.tokens, model.response_format)
        grade = task.score_many([ex], [reply], response_format=model.response_format)[0]
        sizes = [s for b in gen.trace.blocks for s in b.layers["set_size"]]
        members.append({"correct": int(bool(grade.correct)), "accepted": sum(gen.accept_lengths),
                        "steps": len(gen.accept_lengths), "set_size_sum": float(sum(sizes)),
                        "block_layers": len(sizes)})
    return BatchedDraw([Request.of(g.routes) for g in gens], members)


def same_passes(a: Request, b: Request) -> bool:
    """Whether two recordings of one request sent the same experts in every verify pass and output the same."""
    return a.output == b.output and a.masks.shape == b.masks.shape and bool((a.masks == b.masks).all())
