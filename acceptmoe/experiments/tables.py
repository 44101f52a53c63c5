"""`./reproduce.sh tables`: rebuild every table and figure from saved results only (no model runs).

Walks `results/<experiment>/<preset>/<run-id>/` for experiments with a table builder (each experiment's record
names its own, `tables=`; `spine.catalog.tables`) and writes each run's table files next to its results;
`--run RUN_DIR` rebuilds one run. A run without finished pairs is reported and skipped.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from acceptmoe.commands import command, parser
from acceptmoe.registry import Registry

from .spine import catalog
from .spine.runs import REPO, NothingToTabulate, RunFolderError, recorded_experiment


def builders() -> Registry[Callable[[Path], str]]:
    """Experiment -> its run folder's tables and figures, from every record found (in listing order)."""
    return catalog.tables()


def run_folders(results: Path) -> list[tuple[str, Path]]:
    """(experiment, run folder) for every run under `results` that has a builder, oldest first."""
    found = []
    for experiment in builders():
        for run in sorted((results / experiment).glob("*/*/")):
            if (run / "config.json").is_file() and (run / "samples.jsonl").is_file():
                found.append((experiment, run))
    return found


def experiment_of(run: Path) -> str:
    """The experiment recorded in the run's config.json (so copied runs, e.g. results/reference/, rebuild too)."""
    name = recorded_experiment(run)
    if name not in builders():
        raise RunFolderError(f"{run}: {builders().unknown(name)}")
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
    build = builders()
    for experiment, run in runs:
        try:
            text = build[experiment](run)
        except NothingToTabulate as exc:
            print(f"{run}: skipped ({exc})")
            continue
        print(f"== {run}\n{text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
