"""p_hat and B0 for the throughput and study runners: reused from a Table 1 run, or computed by Table 1's code.

    budgets = pair_budgets(world, run_dir, source=None, limit=8)    # also writes budgets-used.json
    budgets[("tiny", "tiny-gsm")].b0, budgets[("tiny", "tiny-gsm")].table

With `source` (a Table 1 run folder) its `calibration/<model>/<source>-<split>.json` and `b0/<model>/<task>.json`
are read; a missing file is an error naming the run and the fix. Without it, the Table 1 pipeline
(calibration on the training split, AcceptMoE on the first evaluation prompts, METHOD.md's B0 rule) runs
into `<dest>` restricted to AcceptMoE, so its files have Table 1's layout and resume the same way.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from acceptmoe.experiments.runs import Run, write_json
from acceptmoe.methods import B0_METHOD, CommitmentTable

from .common import RunPaths
from .config import Table1Config, WorldConfig

USED = "budgets-used.json"


@dataclass(frozen=True)
class PairBudget:
    b0: int
    table: CommitmentTable
    source: str                 # the folder the files came from
    decision: dict              # the saved B0 decision (mean set size, interval, prompts used, rule)


def read_budgets(world: WorldConfig, folder: Path) -> dict[tuple[str, str], PairBudget]:
    """Every (model, task) pair's B0 and commitment table from a Table 1 run folder's saved files."""
    paths, out = RunPaths(folder), {}
    for spec in world.models:
        for task in world.tasks:
            cal = paths.calibration(spec.name, world.calibration.source(task), world.calibration.split)
            b0 = paths.b0(spec.name, task)
            missing = [str(p) for p in (cal, b0) if not p.is_file()]
            if missing:
                raise FileNotFoundError(f"{folder} lacks {missing}: finish that Table 1 run (./reproduce.sh table1 "
                                        f"--resume {folder}), or drop --budgets-from to compute p_hat and B0 here")
            decision = json.loads(b0.read_text())
            out[(spec.name, task)] = PairBudget(decision["b0"], CommitmentTable.load(cal), str(folder), decision)
    return out


def compute_budgets(world: WorldConfig, dest: Path, limit: int | None) -> dict[tuple[str, str], PairBudget]:
    """Calibration and AcceptMoE on the first `limit` evaluation prompts (None: Table 1's limit) into
    `dest`, then B0 from those traces; finished files are reused (resume)."""
    from .accuracy import run_experiment
    n = min(x for x in (limit, max(world.b0.prompts, world.b0.fallback_prompts)) if x is not None)
    sub = Table1Config(world, methods=(B0_METHOD,), limit=n)
    dest.mkdir(parents=True, exist_ok=True)
    if not (dest / "config.json").is_file():
        write_json(dest / "config.json", {"experiment": "budgets", "config": sub})
    run_experiment(sub, Run(dest, resumed=True), show_progress=False)
    return read_budgets(world, dest)


def pair_budgets(world: WorldConfig, run_dir: Path, source: str | Path | None,
                 limit: int | None) -> dict[tuple[str, str], PairBudget]:
    """The pairs' budgets (from `source`, else computed into `run_dir/budgets`), recorded in
    `run_dir/budgets-used.json` so the run's tables never need the source folder again."""
    budgets = read_budgets(world, Path(source)) if source else compute_budgets(world, run_dir / "budgets", limit)
    write_json(run_dir / USED, {f"{m}|{t}": {"b0": b.b0, "decision": b.decision, "source": b.source,
                                             "p_hat": list(b.table.p_hat), "proposed": b.table.proposed,
                                             "committed": b.table.committed}
                                for (m, t), b in budgets.items()})
    return budgets


def used_budgets(run_dir: Path) -> dict[str, dict]:
    """{"model|task": {b0, decision, source, p_hat, ...}} as recorded by `pair_budgets` ({} if none)."""
    path = run_dir / USED
    return json.loads(path.read_text()) if path.is_file() else {}
