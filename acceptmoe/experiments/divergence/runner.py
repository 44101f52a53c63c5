"""The divergence report's run: p_hat and B0 per pair (`spine.budgets`: a Table 1 run's, or computed here), then
for every model, temperature, method and prompt one sampled generation, graded, with the per-position
divergence of a restricting method's verify passes from natural routing (`GenerationOptions.record_divergence`:
one extra all-experts pass of the same tree per step, before the restricted one, so the generation is the one
it would be without it). One row per generation in samples.jsonl; an interrupted run resumes at the first
unfinished unit. Each prompt draws from its own stream (`SamplingConfig.options`), the same for every method.
Progress (the running line and `./reproduce.sh status`) goes through `spine.progress.RunProgress`: the budgets'
units when they are computed here, then one "generation" unit per row.
"""
from __future__ import annotations

import math

from acceptmoe.evals.tasks import get_task
from acceptmoe.methods import METHODS, Variant

from ..spine.budgets import PairBudget, budget_counts, pair_budgets
from ..spine.config import Pair
from ..spine.engines import Loaded, opened, set_threads
from ..spine.grading import Progress
from ..spine.progress import RunProgress
from ..spine.prompts import decode, prompt_ids
from ..spine.runs import Run, SampleLog, unit_key
from .config import DivergenceConfig

BUDGET_PROMPTS = 16        # B0's method graded on this many prompts per pair when no --budgets-from is given


def variant(method: str, budget: PairBudget) -> Variant:
    return Variant(method, budget=budget.b0) if METHODS[method].needs_budget else Variant(method)


def row_of(gen, temperature: float, method: str, model: str, task: str, ex: dict, correct: bool) -> dict:
    """One generation's row: tokens, steps, accuracy, and its positions' mean KL and TV (None: natural routing)."""
    div = gen.divergence or []
    finite = [kl for kl, _ in div if math.isfinite(kl)]
    return {"model": model, "task": task, "temperature": temperature, "method": method, "example_id": ex["id"],
            "correct": bool(correct), "tokens": len(gen.tokens), "accepted": sum(gen.accept_lengths),
            "steps": len(gen.accept_lengths), "positions": len(div),
            "kl": sum(finite) / len(finite) if div and len(finite) == len(div) else (None if not div else math.inf),
            "tv": sum(tv for _, tv in div) / len(div) if div else None}


def unit_keys(cfg: DivergenceConfig) -> list[str]:
    """Every generation's key (one row each), in run order."""
    return [unit_key(m.name, t, temperature, method, ex["id"]) for m in cfg.world.models for t in cfg.world.tasks
            for temperature in cfg.temperatures for method in cfg.method_names()
            for ex in get_task(t).load(cfg.world.eval_split, cfg.n_prompts())]


def run_pair(loaded: Loaded, cfg: DivergenceConfig, task_name: str, budget: PairBudget, samples: SampleLog,
             progress: Progress = lambda desc: None) -> None:
    w, model, task = cfg.world, loaded.model, get_task(task_name)
    examples = task.load(w.eval_split, cfg.n_prompts())
    for temperature in cfg.temperatures:
        sampling = cfg.sampling(temperature)
        for method in cfg.method_names():
            plan = loaded.plan(variant(method, budget), commitment=budget.table.p_hat, b0=budget.b0)
            for ex in examples:
                key = unit_key(model.name, task_name, temperature, method, ex["id"])
                if key in samples:
                    continue
                ids = prompt_ids(loaded.tokenizer, task.messages(ex), model)
                options = sampling.options(model.name, task_name, w.eval_split, ex["id"], trace_layers=False,
                                           record_divergence=METHODS[method].restricts)
                gen = loaded.engine.generate(ids, plan, cfg.max_new_tokens, options)
                reply = decode(loaded.tokenizer, gen.tokens, model.response_format)
                grade = task.score_many([ex], [reply], response_format=model.response_format)[0]
                samples.append(key, row_of(gen, temperature, method, model.name, task_name, ex, grade.correct))
                progress(f"{model.name} {task_name} t={temperature:g} {method}")


def run_experiment(cfg: DivergenceConfig, run: Run, show_progress: bool = True) -> None:
    set_threads(cfg.world)
    samples = SampleLog(run.path / "samples.jsonl")
    limit = cfg.limit or BUDGET_PROMPTS
    kinds = budget_counts(cfg.world, run.path / "budgets", limit) if not cfg.budgets_from else {}
    keys = unit_keys(cfg)
    bar = RunProgress.start(run.path, {**kinds, "generation": (len(keys), sum(k in samples for k in keys))},
                            show=show_progress)
    budgets = pair_budgets(cfg.world, run.path, cfg.budgets_from, limit, bar.tick)
    for model in cfg.world.models:
        with opened(model, cfg.world, run.path) as loaded:
            for task in cfg.world.tasks:
                run_pair(loaded, cfg, task, budgets[Pair(model.name, task)], samples, bar.reporter("generation"))
