"""p_hat and B0 for the throughput and study runners: read from a Table 1 run, or computed by the world's rules.

    budgets = pair_budgets(world, run_dir, source=None, limit=8)    # also writes budgets-used.json
    budgets[Pair("tiny", "tiny-gsm")].b0, budgets[Pair("tiny", "tiny-gsm")].table

With `source` (a Table 1 run folder) its `calibration/<model>/<source>-<split>.json` and `b0/<model>/<task>.json`
are read; a missing file is an error naming the run and the fix, and so is a source run that drew its tokens
otherwise than this one (`check_source_sampling`: p_hat and B0 are measured on the tokens a run draws). Without it, the same steps Table 1 takes run
into `<dest>` with its layout (`layout.RunPaths`) and resume the same way: calibration on the training split
(`calibration`), B0's method graded on the first evaluation prompts (`grading`), B0 from its traces (`b0`).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from acceptmoe.errors import UserError
from acceptmoe.evals.tasks import get_task
from acceptmoe.methods import B0_METHOD, CommitmentTable, Variant

from . import calibration
from .b0 import B0Decision, b0_for_pair
from .config import Pair, SamplingConfig, WorldConfig
from .engines import opened, set_threads
from .grading import PairRun, run_graded
from .layout import RunPaths
from .runs import SampleLog, unit_key, write_json
from .tracelog import TraceLog

USED = "budgets-used.json"


@dataclass(frozen=True)
class PairBudget:
    b0: int
    table: CommitmentTable
    source: str                 # the folder the files came from
    decision: B0Decision        # the saved B0 decision (mean set size, interval, prompts used, rule)


def source_sampling(folder: Path) -> dict:
    """The sampling settings (temperature, top_k, top_p, seed) a run folder's config.json records; a run made
    before sampling existed records none and decoded greedily with the defaults."""
    meta = Path(folder) / "config.json"
    try:
        recorded = json.loads(meta.read_text())["config"]["world"].get("sampling") or {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise UserError(f"--budgets-from {folder}: no readable {meta.name} with the run's world; give a Table 1 run "
                        f"folder (results/table1/<preset>/<run-id>), or drop --budgets-from") from None
    return {**asdict(SamplingConfig()), **recorded}


def check_source_sampling(world: WorldConfig, folder: Path) -> None:
    """The source run of --budgets-from drew its tokens as this run does (temperature, top_k, top_p, seed)."""
    there, here = source_sampling(folder), asdict(world.sampling)
    differ = [k for k in ("temperature", "top_k", "top_p", "seed") if float(there[k]) != float(here[k])]
    if differ:
        values = ", ".join(f"{k} {there[k]!r} there, {here[k]!r} here" for k in differ)
        raise UserError(f"--budgets-from {folder}: that run sampled otherwise than this one ({values}); p_hat and B0 "
                        f"are measured on the tokens a run draws: give a Table 1 run made with the same sampling "
                        f"settings, run this one with that run's settings, or drop --budgets-from")


def read_budgets(world: WorldConfig, folder: Path) -> dict[Pair, PairBudget]:
    """Every (model, task) pair's B0 and commitment table from a Table 1 run folder's saved files, after
    `check_source_sampling`."""
    check_source_sampling(world, folder)
    paths, out = RunPaths(folder), {}
    for pair in world.pairs():
        cal = paths.calibration(pair.model, world.calibration.source(pair.task), world.calibration.split)
        missing = [str(p) for p in (cal, paths.b0(pair)) if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"{folder} lacks {missing}: finish that Table 1 run (./reproduce.sh table1 "
                                    f"--resume {folder}), or drop --budgets-from to compute p_hat and B0 here")
        decision = B0Decision.load(paths.b0(pair))
        out[pair] = PairBudget(decision.b0, CommitmentTable.load(cal), str(folder), decision)
    return out


def b0_prompts(world: WorldConfig, limit: int | None) -> int:
    """Evaluation prompts per task B0's method runs on: the B0 rule's, at most `limit`."""
    return min(x for x in (limit, max(world.b0.prompts, world.b0.fallback_prompts)) if x is not None)


def budget_counts(world: WorldConfig, dest: Path, limit: int | None) -> dict[str, tuple[int, int]]:
    """kind -> (units `compute_budgets` runs into `dest`, those finished): calibration prompts and B0's
    generations (for the progress line)."""
    n, paths, samples = b0_prompts(world, limit), RunPaths(dest), SampleLog(dest / "samples.jsonl")
    cal, b0 = [0, 0], [0, 0]
    for model in world.models:
        pairs = [p for p in world.pairs() if p.model == model.name]
        finished = all(paths.b0(p).is_file() for p in pairs)
        total, done = calibration.counts(world, paths, model.name)
        keys = [unit_key(p.model, p.task, ex["id"], B0_METHOD) for p in pairs
                for ex in get_task(p.task).load(world.eval_split, n)]
        cal = [cal[0] + total, cal[1] + (total if finished else done)]
        b0 = [b0[0] + len(keys), b0[1] + (len(keys) if finished else sum(k in samples for k in keys))]
    return {"calibration": (cal[0], cal[1]), "b0": (b0[0], b0[1])}


def compute_budgets(world: WorldConfig, dest: Path, limit: int | None,
                    progress: Callable[[str, str], None] = lambda kind, desc: None) -> dict[Pair, PairBudget]:
    """Calibration and B0's method on the first `limit` evaluation prompts (at most the B0 rule's) into
    `dest`, then B0 from those traces; finished files are reused (resume). `progress(kind, desc)` after each
    unit (kinds as `budget_counts`')."""
    n = b0_prompts(world, limit)
    dest.mkdir(parents=True, exist_ok=True)
    if not (dest / "config.json").is_file():
        write_json(dest / "config.json", {"experiment": "budgets", "config": {"world": world, "limit": n}})
    set_threads(world)
    paths, samples = RunPaths(dest), SampleLog(dest / "samples.jsonl")
    for model in world.models:
        pairs = [p for p in world.pairs() if p.model == model.name]
        if all(paths.b0(p).is_file() for p in pairs):
            continue
        with opened(model, world, dest, pooled=True) as loaded:
            tables = {s: calibration.calibrate_source(loaded, world, s, paths, lambda d, _w=None: progress("calibration", d))
                      for s in calibration.sources(world)}
            for pair in pairs:
                task, table = get_task(pair.task), tables[world.calibration.source(pair.task)]
                run = PairRun(loaded, task, task.load(world.eval_split, n), samples)
                log = TraceLog(paths.traces(pair, B0_METHOD), keep=samples)
                units = [(i, unit_key(pair.model, pair.task, ex["id"], B0_METHOD))
                         for i, ex in enumerate(run.examples)]
                run_graded(run, loaded.plan(Variant(B0_METHOD), commitment=table.p_hat), units, log=log,
                           progress=lambda d, _w=None: progress("b0", d))
                b0_for_pair(log, world.b0, paths.b0(pair))
    return read_budgets(world, dest)


def pair_budgets(world: WorldConfig, run_dir: Path, source: str | Path | None, limit: int | None,
                 progress: Callable[[str, str], None] = lambda kind, desc: None) -> dict[Pair, PairBudget]:
    """The pairs' budgets (from `source`, else computed into `run_dir/budgets`, `progress` as
    `compute_budgets`'), recorded in `run_dir/budgets-used.json` so the run's tables never need the source
    folder again."""
    budgets = read_budgets(world, Path(source)) if source else compute_budgets(world, run_dir / "budgets", limit,
                                                                              progress)
    write_json(run_dir / USED, [{"model": pair.model, "task": pair.task, "b0": b.b0, "decision": b.decision.to_json(),
                                 "source": b.source, "p_hat": list(b.table.p_hat), "proposed": b.table.proposed,
                                 "committed": b.table.committed} for pair, b in budgets.items()])
    return budgets


def used_budgets(run_dir: Path, world: WorldConfig) -> dict[Pair, dict]:
    """{pair: {b0, decision, source, p_hat, ...}} as recorded by `pair_budgets` ({} if none). Run folders of
    earlier releases keyed the records by "model|task"; those are looked up by the world's pairs."""
    path = run_dir / USED
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    if isinstance(data, list):
        return {Pair(r["model"], r["task"]): r for r in data}
    by_key = {"|".join(pair): pair for pair in world.pairs()}
    return {by_key[key]: record for key, record in data.items() if key in by_key}       # the file's order
