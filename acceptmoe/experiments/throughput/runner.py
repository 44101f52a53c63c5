"""Throughput runners: resident (Figure 3), offloaded (Figure 4) with its counters run (Table 2), and the
fixed-budget sweep (Figure 5), one run folder per command.

| command  | phases                                       | writes                                        |
|----------|----------------------------------------------|-----------------------------------------------|
| `fig3`   | resident                                     | throughput-resident.{md,csv}, fig3.{png,pdf}  |
| `fig4`   | offload-timed, offload-counters              | throughput-offload.*, fig4.*, table2.*        |
| `table2` | offload-counters                             | table2.{md,csv,tex}                           |
| `sweep`  | sweep                                        | sweep.{md,csv,png,pdf}                        |
| `fig5`   | sweep, offload-timed, offload-counters       | all of the above for these phases, fig5.*     |

Timed phases (paper protocol, interleaved): batch 1; per repetition a fresh engine (resident, or offloaded with
X slots per MoE layer); per task one untimed warm-up generation of every variant on the warm-up example, then
the phase's prompts in order (`prompts`: evaluation examples 0..n-1, or those with the longest replies first),
every variant on a prompt back to back, in an order rotated by one from prompt to prompt and from repetition to
repetition (a Latin square: `cell_order`), so load that drifts over a run lands on every variant alike and
cancels in the paired ratios of a cell (prompt, repetition); with an offloaded store every variant keeps its
own X-slot pool across the interleaving (`OwnPools`), so its generations, pruning included, run as they would
one after another on their own. The phase's variants include a placebo
(`config.PLACEBO`: the baseline timed twice), whose ratio measures what the host's noise alone gives. An
engine that cannot switch plans freely (`capabilities.switches_plans_freely` false: an SGLang server restarts
for a plan a captured graph holds) runs each variant over every prompt of the task instead, in an order rotated per
repetition. Each generation is exactly `generation.timed_tokens` tokens with EOS ignored; each row says where
the reply ended by itself (`rows.NaturalEnd`). Each generation is timed
with the engine's clock (device synchronised) around `generate`; throughput = total tokens / total timed seconds; each row also keeps the machine's 1-minute load
average (other processes on the host distort timings; the report shows it). The store's counters are reset before every
generation and saved with its row (prefill included). `offload-counters` is one more such run with per-layer
traces on (set sizes) and each reply graded up to its first EOS (greedy decoding makes that prefix the reply
a stop-at-EOS run gives). `sweep` grades AcceptMoE-B at each budget plus the references with Table 1's
generation settings (`spine.grading`), one variant at a time over every pair. p_hat and B0 come from `spine.budgets.pair_budgets` (a Table 1 run,
or computed here).

One `samples.jsonl` row per (phase, repetition, model, task, variant, prompt), written as it finishes: an
interrupted run resumes (`--resume RUN_DIR`) and never duplicates a row. Errors propagate.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass

from acceptmoe.evals.tasks import get_task
from acceptmoe.methods import Plan, Variant

from ..spine.budgets import PairBudget, budget_counts, pair_budgets
from ..spine.config import Pair
from ..spine.engines import Loaded, opened, set_threads
from ..spine.grading import PairRun, run_graded, save_routes
from ..spine.layout import RunPaths
from ..spine.progress import RunProgress
from ..spine.prompts import decode, prompt_ids
from ..spine.rows import COUNTER_FIELDS, Generated, Graded, NaturalEnd, TimedRow, TraceStats
from ..spine.runs import Run, SampleLog, unit_key
from .config import ThroughputConfig, needs_budgets
from .prompts import examples_for

Progress = Callable[[str], None]


def repetitions(cfg: ThroughputConfig, phase: str) -> int:
    return {"resident": cfg.resident.repetitions, "offload-timed": cfg.offload.repetitions}.get(phase, 1)


def rotated(variants: tuple[Variant, ...], rep: int) -> list[Variant]:
    r = rep % len(variants)
    return list(variants[r:] + variants[:r])


def cell_order(variants: tuple[Variant, ...], index: int, rep: int) -> list[Variant]:
    """The order a cell's variants run in: prompt `index` of repetition `rep` starts at variant index + rep, so
    over the prompts and repetitions every variant holds every position equally often (a Latin square)."""
    return rotated(variants, index + rep)


def up_to_eos(tokens: list[int], eos: set[int]) -> list[int]:
    """The reply a stop-at-EOS run would give: tokens up to and including the first EOS."""
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[:i + 1]
    return tokens


@dataclass
class Unit:
    """One phase's pair in progress: its engine, examples, budgets and the log it writes to."""
    cfg: ThroughputConfig
    phase: str
    rep: int
    loaded: Loaded
    task: object
    examples: list[dict]
    budget: PairBudget | None
    samples: SampleLog


def bound(loaded: Loaded, variant: Variant, budget: PairBudget | None) -> Plan:
    """The variant bound to the engine and the pair's p_hat and B0 (when it needs them)."""
    if budget is None:
        return loaded.plan(variant)
    return loaded.plan(variant, commitment=budget.table.p_hat, b0=budget.b0)


def records_routes(u: Unit, warmup: bool) -> bool:
    """Routes are saved for the evaluation generations of repetition 0 (the others repeat them: greedy, or the
    same per-prompt sampling stream), when the world records routes."""
    return u.cfg.world.generation.record_routes and u.rep == 0 and not warmup


def generate_timed(u: Unit, index: int, ex: dict, plan: Plan, warmup: bool = False) -> tuple[TimedRow, object]:
    """One timed generation of exactly `timed_tokens` tokens (EOS ignored): its row and the Generation."""
    engine = u.loaded.engine
    ids = prompt_ids(u.loaded.tokenizer, u.task.messages(ex), u.loaded.model)
    engine.reset_counters()
    world = u.cfg.world
    options = world.sampling.options(u.loaded.model.name, u.task.name, world.eval_split, ex["id"], ignore_eos=True,
                                     trace_layers=u.phase == "offload-counters",
                                     record_routes=records_routes(u, warmup))
    start = engine.clock()
    gen = engine.generate(ids, plan, u.cfg.world.generation.timed_tokens, options)
    wall = engine.clock() - start
    totals = engine.counters()
    row = TimedRow(u.phase, u.rep, u.loaded.model.name, u.task.name, plan.name, ex["id"], index,
                   plan.budget, Generated.of(gen, ids), wall, totals["store"],
                   os.getloadavg()[0], **{c: totals[c] for c in COUNTER_FIELDS}, copy_s=totals.get("copy_s"),
                   natural=NaturalEnd.of(gen, engine.eos_token_ids))
    return row, gen


def graded(u: Unit, ex: dict, gen) -> Graded:
    """The reply up to its first EOS, graded (greedy decoding makes it the reply a stop-at-EOS run gives)."""
    reply = up_to_eos(list(gen.tokens), u.loaded.engine.eos_token_ids)
    fmt = u.loaded.model.response_format
    response = decode(u.loaded.tokenizer, reply, fmt)
    grade = u.task.score_many([ex], [response], response_format=fmt)[0]
    return Graded(bool(grade.correct), grade.extracted, reply_tokens=len(reply))


def _todo(u: Unit, variant: Variant) -> list[tuple[int, dict]]:
    """The pair's evaluation prompts this variant has not finished in this repetition."""
    model, task = u.loaded.model.name, u.task.name
    return [(i, ex) for i, ex in enumerate(u.examples[:u.cfg.prompts(u.phase)])
            if unit_key(u.phase, u.rep, model, task, variant.name, ex["id"]) not in u.samples]


def run_one(u: Unit, variant: Variant, plan: Plan, index: int, ex: dict, progress: Progress) -> None:
    """One timed generation of the pair, saved as its row (with its routes and, counters run, its grade)."""
    model, task = u.loaded.model.name, u.task.name
    row, gen = generate_timed(u, index, ex, plan)
    if u.phase == "offload-counters":
        row = dataclasses.replace(row, graded=graded(u, ex, gen), stats=TraceStats.of(gen.trace))
    key = unit_key(u.phase, u.rep, model, task, variant.name, ex["id"])
    if gen.routes is not None:
        save_routes(gen, RunPaths(u.samples.path.parent).routes(u.phase, Pair(model, task), variant.name,
                                                                u.rep, index), key)
    u.samples.append(key, row.to_json())
    progress(f"{u.phase} r{u.rep} {task} {variant.name}")


def run_timed_variant(u: Unit, variant: Variant, progress: Progress) -> None:
    """Warm-up, then every evaluation prompt of the pair with one variant (finished prompts skipped)."""
    todo = _todo(u, variant)
    if not todo:
        return
    plan = bound(u.loaded, variant, u.budget)
    warm = u.cfg.warmup_index(u.phase)
    generate_timed(u, warm, u.examples[warm], plan, warmup=True)                # untimed warm-up
    for index, ex in todo:
        run_one(u, variant, plan, index, ex, progress)


class OwnPools:
    """Each variant's own X-slot expert pool across the interleaving (offloaded store; resident: nothing): a
    variant's generation starts from the pool its previous generation left, as when it runs alone in sequence,
    never from another variant's. Putting a pool back copies its experts before the clock starts and counts
    nothing (`ExpertStore.restore_pool`)."""

    def __init__(self, loaded: Loaded):
        self.store, self.held = loaded.expert_pool(), {}

    def enter(self, variant: Variant) -> None:
        if self.store is not None:
            self.store.restore_pool(self.held.get(variant.name))       # None: empty, as a fresh engine's

    def leave(self, variant: Variant) -> None:
        if self.store is not None:
            self.held[variant.name] = self.store.pool_state()


def run_interleaved(u: Unit, variants: tuple[Variant, ...], pools: OwnPools, progress: Progress) -> None:
    """Every variant's warm-up, then prompt by prompt every variant back to back in the cell's order (finished
    generations skipped), each from its own expert pool (`OwnPools`)."""
    todo = {v.name: dict(_todo(u, v)) for v in variants}
    if not any(todo.values()):
        return
    plans = {v.name: bound(u.loaded, v, u.budget) for v in variants}
    warm = u.cfg.warmup_index(u.phase)
    for v in rotated(variants, u.rep):
        pools.enter(v)
        generate_timed(u, warm, u.examples[warm], plans[v.name], warmup=True)  # untimed warm-ups
        pools.leave(v)
    for index, ex in enumerate(u.examples[:u.cfg.prompts(u.phase)]):
        for v in cell_order(variants, index, u.rep):
            if index in todo[v.name]:
                pools.enter(v)
                run_one(u, v, plans[v.name], index, ex, progress)
                pools.leave(v)


def phase_keys(cfg: ThroughputConfig, phase: str, rep: int, model: str, examples: dict[str, list[dict]]) -> list[str]:
    """The unit keys of one repetition of a phase for one model."""
    return [unit_key(phase, rep, model, t, v, ex["id"]) for t in cfg.world.tasks for v in cfg.names(phase)
            for ex in examples[t][:cfg.prompts(phase)]]


def pending(cfg: ThroughputConfig, phase: str, rep: int, model: str, samples: SampleLog,
            examples: dict[str, list[dict]]) -> int:
    return sum(k not in samples for k in phase_keys(cfg, phase, rep, model, examples))


def run_timed_phase(cfg: ThroughputConfig, phase: str, samples: SampleLog, budgets: dict, progress: Progress) -> None:
    store, slots = ("offloaded", cfg.offload.slots) if phase.startswith("offload") else ("resident", None)
    for rep in range(repetitions(cfg, phase)):
        for model in cfg.world.models:
            examples = {t: examples_for(cfg, phase, t, model, samples.path.parent) for t in cfg.world.tasks}
            if not pending(cfg, phase, rep, model.name, samples, examples):
                continue
            with opened(model, cfg.world, samples.path.parent, store, slots) as loaded:   # fresh per repetition
                units = [Unit(cfg, phase, rep, loaded, get_task(task), examples[task],
                              budgets.get(Pair(model.name, task)), samples) for task in cfg.world.tasks]
                if loaded.engine.capabilities.switches_plans_freely:
                    pools = OwnPools(loaded)                            # one per variant, across the tasks
                    for u in units:
                        run_interleaved(u, cfg.variants(phase), pools, progress)
                    continue
                for variant in rotated(cfg.variants(phase), rep):
                    for u in units:
                        run_timed_variant(u, variant, progress)


def run_sweep_phase(cfg: ThroughputConfig, samples: SampleLog, budgets: dict, progress: Progress) -> None:
    """AcceptMoE-B at each budget and the references on every pair, graded like Table 1 (`spine.grading`)."""
    examples = {t: examples_for(cfg, "sweep", t) for t in cfg.world.tasks}
    for model in cfg.world.models:
        if not pending(cfg, "sweep", 0, model.name, samples, examples):
            continue
        with opened(model, cfg.world, samples.path.parent) as loaded:
            runs = [PairRun(loaded, get_task(task), examples[task][:cfg.prompts("sweep")], samples)
                    for task in cfg.world.tasks]
            for variant in cfg.variants("sweep"):
                for run in runs:
                    task = run.task.name
                    units = [(i, unit_key("sweep", 0, model.name, task, variant.name, ex["id"]))
                             for i, ex in enumerate(run.examples)]
                    relabel = lambda row, v=variant: dataclasses.replace(                 # noqa: E731
                        row, phase="sweep", rep=0, variant=v.name,
                        wall_s=row.generated.prefill_s + row.generated.decode_s)
                    run_graded(run, bound(loaded, variant, budgets.get(run.pair)), units, relabel=relabel,
                               progress=progress, routes_as="sweep")


def unit_counts(cfg: ThroughputConfig, samples: SampleLog) -> dict[str, tuple[int, int]]:
    """phase -> (its units in the whole run, those finished), in the run's order."""
    out = {}
    for phase in cfg.phases:
        keys = []
        for m in cfg.world.models:
            examples = {t: examples_for(cfg, phase, t, m, samples.path.parent) for t in cfg.world.tasks}
            keys += [k for r in range(repetitions(cfg, phase)) for k in phase_keys(cfg, phase, r, m.name, examples)]
        out[phase] = (len(keys), sum(k in samples for k in keys))
    return out


def run_experiment(cfg: ThroughputConfig, run: Run, show_progress: bool = True) -> None:
    """Every phase of `cfg` into `run` (budgets first when a variant needs them)."""
    set_threads(cfg.world)
    samples = SampleLog(run.path / "samples.jsonl")
    computes = needs_budgets(cfg) and not cfg.budgets_from
    kinds = budget_counts(cfg.world, run.path / "budgets", cfg.limit) if computes else {}
    bar = RunProgress.start(run.path, {**kinds, **unit_counts(cfg, samples)}, show=show_progress)
    budgets = pair_budgets(cfg.world, run.path, cfg.budgets_from, cfg.limit, bar.tick) if needs_budgets(cfg) else {}
    for phase in cfg.phases:
        if phase == "sweep":
            run_sweep_phase(cfg, samples, budgets, bar.reporter(phase))
        else:
            run_timed_phase(cfg, phase, samples, budgets, bar.reporter(phase))
