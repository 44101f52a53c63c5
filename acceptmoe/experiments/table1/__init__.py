"""Table 1: every method on every (model, task) pair, greedy, with calibration and B0 first.

| module     | what it holds                                                            |
|------------|--------------------------------------------------------------------------|
| `config`   | `Table1Config`, the `table1:` section                                    |
| `runner`   | the method order and the runs (calibration, B0, every method)            |
| `table`    | the table from saved results only (Markdown, CSV, LaTeX)                 |
| `commands` | `table1`, `calibrate`, `b0`                                              |
| `worlds`   | `worlds`: Table 1 on independently trained tiny worlds, the spread across |
"""
from collections.abc import Callable
from pathlib import Path


def _table1(run: Path) -> str:
    from .table import write_table1
    return write_table1(run)


def _worlds(run: Path) -> str:
    from .worlds import write_worlds
    return write_worlds(run)


BUILDERS: dict[str, Callable[[Path], str]] = {"table1": _table1, "worlds": _worlds}   # run folder -> its tables
