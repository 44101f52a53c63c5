"""Experiments are found, not listed: each package under `acceptmoe/experiments/` declares one `Experiment` record
in its `__init__.py`, and `experiments()` finds them by walking the folder (every entry of
`acceptmoe.experiments.__path__`), as lm-evaluation-harness finds its tasks. The CLI, `tables`, `plan`, `claims`
and the import-graph test read the records from here, so a new experiment is its own folder and its test, and
no list elsewhere names it (docs/architecture.md, "Experiments are found").

    EXPERIMENT = Experiment(__name__, order=10, config="config:Table1Config",
                            tables={"table1": "table:write_table1", "worlds": "worlds:write_worlds"},
                            plan={"table1": "work:work"}, claims=("table1", "worlds"), records=("table",))

A record names its parts as "module:attribute" strings relative to its package, imported only when used, so
reading every record (for `--help`, the tables walk, plan's choices) imports no experiment's code. Every table
here is an `acceptmoe.registry.Registry`: a miss names the closest valid name.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acceptmoe.registry import Registry

ROOT = "acceptmoe.experiments"
SPINE = "spine"                       # the one package under experiments/ that is not an experiment
RECORD = "EXPERIMENT"                 # the attribute of a package's __init__ that holds its record
FIX = "every package under acceptmoe/experiments/ declares one (docs/architecture.md, \"Experiments are found\")"


@dataclass(frozen=True)
class Experiment:
    """What one experiment package says about itself; `package` is its `__name__`."""
    package: str
    order: int                                        # where listings put it (--help, plan's choices, the tables
                                                      # walk, the claims' runs): the paper's order
    config: str | None = None                         # its section's config class, "module:Class" (its SECTION
                                                      # names configs/experiments/<section>.yaml); None: owns none
    tables: Mapping[str, str] = field(default_factory=dict)  # run folder's experiment -> "module:fn" (run dir -> text)
    plan: Mapping[str, str] = field(default_factory=dict)    # experiment `plan` sizes -> "module:fn", called as
                                                             # fn(experiment, preset, overrides) -> (world, work)
    claims: tuple[str, ...] = ()                      # its runs the claims table reads by default (newest of each)
    records: tuple[str, ...] = ()                     # its modules a reader of results may import (record builders)
    reads: bool = False                               # a reader of results (claims): may import others' `records`

    @property
    def name(self) -> str:
        return self.package.rpartition(".")[2]

    def target(self, ref: str) -> str:
        """A "module:attribute" reference of this record, made absolute."""
        module, _, attr = ref.partition(":")
        if not attr:
            raise ValueError(f"{self.package}: {ref!r} is not 'module:attribute'")
        return f"{self.package}.{module}:{attr}"

    def load(self, ref: str) -> Any:
        module, _, attr = self.target(ref).partition(":")
        return getattr(importlib.import_module(module), attr)

    def folder(self) -> Path:
        return Path(importlib.import_module(self.package).__file__).parent

    def modules(self) -> list[tuple[str, Path]]:
        """(dotted module, file) of every Python file of the package, by path."""
        root = self.folder()
        return [(".".join([self.package, *p.relative_to(root).with_suffix("").parts]).removesuffix(".__init__"), p)
                for p in sorted(root.rglob("*.py"))]


def _check(name: str, record: object) -> None:
    if not isinstance(record, Experiment):
        raise TypeError(f"{ROOT}.{name}.{RECORD} is {type(record).__name__}, not an Experiment record; {FIX}")
    if record.package != f"{ROOT}.{name}":
        raise ValueError(f"{ROOT}.{name}.{RECORD} says it is {record.package!r}: pass __name__")


def package_names(paths: tuple[str, ...] | None = None) -> list[str]:
    """Every package under the experiments folder(s) but the spine, by name; nothing is imported."""
    if paths is None:
        paths = tuple(importlib.import_module(ROOT).__path__)
    return sorted(m.name for m in pkgutil.iter_modules(list(paths)) if m.ispkg and m.name != SPINE)


def experiments() -> Registry[Experiment]:
    """Package name -> its record, imported on first lookup; found on the experiments package's path as it is now
    (walked again on every call: a folder added there, or to `acceptmoe.experiments.__path__`, is found too)."""
    found: Registry[Experiment] = Registry("experiment", fix=FIX, check=_check)
    for name in package_names():
        found.lazy(name, f"{ROOT}.{name}:{RECORD}")
    return found


class NoRecord(LookupError):
    """A package under experiments/ that declares no record."""


def record(name: str) -> Experiment:
    """The record of package `name` (a miss names the closest); a package without one is a `NoRecord` naming the
    fix, never a package left out."""
    found = experiments()
    try:
        return found[name]
    except AttributeError as exc:                    # the package imports, but holds no EXPERIMENT
        raise NoRecord(f"{ROOT}.{name} declares no {RECORD}: {FIX}") from exc


def ordered() -> list[Experiment]:
    """Every record, in listing order (`order`, then name)."""
    return sorted((record(name) for name in experiments().names()), key=lambda r: (r.order, r.name))


def _table(kind: str, fix: str, entries: Callable[[Experiment], Mapping[str, str]]) -> Registry[Callable]:
    out: Registry[Callable] = Registry(kind, fix=fix)
    for record in ordered():
        for name, ref in entries(record).items():
            if name in out:
                raise ValueError(f"{kind} {name!r} is declared by two experiments ({record.package})")
            out.lazy(name, record.target(ref))
    return out


def tables() -> Registry[Callable[[Path], str]]:
    """Run folder's experiment -> the function that rebuilds its tables and figures from its saved files."""
    return _table("experiment with tables", "an experiment's record names its table builders", lambda r: r.tables)


def planned() -> Registry[Callable]:
    """Experiment -> the function that counts its work as its runner would (`./reproduce.sh plan`)."""
    return _table("experiment plan knows", "an experiment's record names its work counter (plan=)", lambda r: r.plan)


def claimed() -> tuple[str, ...]:
    """The experiments whose newest run the claims table reads by default, in listing order."""
    return tuple(name for record in ordered() for name in record.claims)
