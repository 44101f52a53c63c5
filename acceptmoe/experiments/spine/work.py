"""The work a run does, counted as its runner does it, for `./reproduce.sh plan`: the steps the spine runs for
every experiment (calibration, B0's prompts), in `costs.hours.Work` records. Each experiment that `plan` knows
counts the rest in its own `work` module, named by its record (`plan=`; `spine.catalog`).

    work(experiment, preset, overrides) -> (world, {model name: [Work, ...]})     # an experiment's counter
"""
from __future__ import annotations

import functools

from acceptmoe.costs.hours import MEAN_GRADED_TOKENS, Work
from acceptmoe.evals.tasks import get_task
from acceptmoe.methods import B0_METHOD, CALIBRATION, Variant

from . import calibration

__all__ = ["Work", "budgets_work", "calibration_work", "eval_count", "graded_tokens"]


def eval_count(world, task: str, limit: int | None) -> int:
    return examples(task, world.eval_split, limit)


@functools.cache
def examples(task: str, split: str, limit: int | None) -> int:
    return len(get_task(task).load(split, limit))


def graded_tokens(world, model) -> int:
    return min(MEAN_GRADED_TOKENS, world.max_new_tokens(model))


def calibration_work(world, model) -> list[Work]:
    return [Work("calibration", Variant(CALIBRATION), "resident", len(calibration.calibration_examples(world, s)),
                 graded_tokens(world, model), False, False) for s in calibration.sources(world)]


def budgets_work(world, model, limit: int | None) -> list[Work]:
    """`spine.budgets.compute_budgets`: calibration, then B0's method on the B0 rule's prompts per task."""
    n = min(x for x in (limit, max(world.b0.prompts, world.b0.fallback_prompts)) if x is not None)
    return calibration_work(world, model) + [
        Work("b0", Variant(B0_METHOD), "resident", eval_count(world, t, n), graded_tokens(world, model), True, True)
        for t in world.tasks]
