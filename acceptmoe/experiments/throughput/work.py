"""The throughput commands' work for `./reproduce.sh plan`, counted as `runner` does it: budgets unless read from a
Table 1 run, then per phase its variants, repetitions and prompts (plus the warm-up) per task (`spine.work`)."""
from __future__ import annotations

from ..spine.work import Work, budgets_work, eval_count, graded_tokens
from .commands import COMMAND_PHASES
from .config import load_throughput_config, needs_budgets
from .runner import repetitions


def work(experiment: str, preset, overrides: dict) -> tuple[object, dict[str, list[Work]]]:
    cfg = load_throughput_config(preset, COMMAND_PHASES[experiment], overrides)
    w, out = cfg.world, {}
    for m in w.models:
        work = budgets_work(w, m, cfg.limit) if needs_budgets(cfg) and not cfg.budgets_from else []
        for phase in cfg.phases:
            if phase == "sweep":
                work += [Work(phase, v, "resident", eval_count(w, t, cfg.prompts(phase)), graded_tokens(w, m), True,
                              True) for t in w.tasks for v in cfg.variants(phase)]
                continue
            store, slots = ("offloaded", cfg.offload.slots) if phase.startswith("offload") else ("resident", None)
            work += [Work(phase, v, store, repetitions(cfg, phase) * (cfg.prompts(phase) + 1),
                          w.generation.timed_tokens, phase == "offload-counters", False, slots, timed=True,
                          repetitions=repetitions(cfg, phase))
                     for t in w.tasks for v in cfg.variants(phase)]
        out[m.name] = work
    return w, out
