"""The calibration study's work for `./reproduce.sh plan`, counted as `runner` does it: budgets unless read from a
Table 1 run, the on-policy traces, then the graded variants per pair (`spine.work`). The study's B0s from
evaluation and training traces are taken to differ (one more variant: an upper bound; the paper's B0 range
stands for them)."""
from __future__ import annotations

from acceptmoe.methods import B0_METHOD, Variant

from ..spine import calibration
from ..spine.config import load_experiment
from ..spine.work import Work, budgets_work, eval_count, graded_tokens
from .config import CalibrationStudyConfig
from .runner import eval_variants

B0_RANGE = (23, 34)        # the paper's B0 range (the study's two B0s stand for it)


def work(experiment: str, preset, overrides: dict) -> tuple[object, dict[str, list[Work]]]:
    cfg = load_experiment(CalibrationStudyConfig, preset, overrides)
    w, out = cfg.world, {}
    for m in w.models:
        work = budgets_work(w, m, cfg.limit) if not cfg.budgets_from else []
        work += [Work("onpolicy", Variant(B0_METHOD), "resident", cfg.train_prompts(), graded_tokens(w, m), False,
                      False) for _ in calibration.sources(w)]
        work += [Work("study", v, "resident", eval_count(w, t, cfg.eval_prompts()), graded_tokens(w, m), True, True)
                 for t in w.tasks for v in eval_variants(cfg, *B0_RANGE)]
        out[m.name] = work
    return w, out
