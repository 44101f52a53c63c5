"""`./reproduce.sh tables`: rebuild every table and figure from saved results only (no model runs).

Walks `results/<experiment>/<preset>/<run-id>/` for experiments with a table builder (each experiment package's
`BUILDERS`) and writes each run's table files next to its results; `--run RUN_DIR` rebuilds one run. A run without finished pairs
is reported and skipped.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from acceptmoe.commands import command, parser
from acceptmoe.registry import Registry

from . import batch, replay, study, table1, throughput
from .spine.runs import REPO, NothingToTabulate, RunFolderError, recorded_experiment

# experiment -> its run folder's tables and figures; each package declares its own `BUILDERS`, a name once
BUILDERS: Registry[Callable[[Path], str]] = Registry("experiment with tables")
for _package in (table1, throughput, study, replay, batch):
    for _name, _builder in _package.BUILDERS.items():
        BUILDERS.add(_name, _builder)


def run_folders(results: Path) -> list[tuple[str, Path]]:
    """(experiment, run folder) for every run under `results` that has a builder, oldest first."""
    found = []
    for experiment in BUILDERS:
        for run in sorted((results / experiment).glob("*/*/")):
            if (run / "config.json").is_file() and (run / "samples.jsonl").is_file():
                found.append((experiment, run))
    return found


def experiment_of(run: Path) -> str:
    """The experiment recorded in the run's config.json (so copied runs, e.g. results/reference/, rebuild too)."""
    name = recorded_experiment(run)
    if name not in BUILDERS:
        raise RunFolderError(f"{run}: {BUILDERS.unknown(name)}")
    return name


@command("tables", "rebuild every table and figure from saved results only")
def main(argv: list[str] | None = None) -> int:
    p = parser("tables")
    p.add_argument("--results", type=Path, default=REPO / "results", help="results root (default: results/)")
    p.add_argument("--run", type=Path, default=None, metavar="RUN_DIR", help="rebuild only this run's table")
    args = p.parse_args(argv)
    runs = [(experiment_of(args.run), args.run)] if args.run else run_folders(args.results)
    if not runs:
        print(f"no saved runs with tables under {args.results}")
        return 0
    for experiment, run in runs:
        try:
            text = BUILDERS[experiment](run)
        except NothingToTabulate as exc:
            print(f"{run}: skipped ({exc})")
            continue
        print(f"== {run}\n{text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
