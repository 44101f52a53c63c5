"""Table 1's work for `./reproduce.sh plan`, counted as `runner` does it: calibration, then every method on every
(model, task) pair (`spine.work`); `admission` is the same run over its own methods (`admission.COMPARED`)."""
from __future__ import annotations

from acceptmoe.methods import Variant

from ..spine.config import load_experiment
from ..spine.work import Work, calibration_work, eval_count, graded_tokens
from .admission import COMPARED
from .config import Table1Config


def work(experiment: str, preset, overrides: dict) -> tuple[object, dict[str, list[Work]]]:
    cfg = load_experiment(Table1Config, preset, {k: v for k, v in overrides.items() if k != "budgets_from"})
    w = cfg.world
    return w, {m.name: calibration_work(w, m) + [
        Work("table1", Variant(meth), "resident", eval_count(w, t, cfg.limit), graded_tokens(w, m), True, True)
        for t in w.tasks for meth in cfg.methods] for m in w.models}


def admission_work(experiment: str, preset, overrides: dict) -> tuple[object, dict[str, list[Work]]]:
    """`./reproduce.sh admission`: Table 1's work over the methods it compares unless `methods` is given. Each
    method is counted at its full draft tree: admission's shorter passes make this an upper bound."""
    return work(experiment, preset, {"methods": list(COMPARED), **overrides})
