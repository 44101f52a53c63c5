"""Commands declare themselves: `@command(name, help)` next to their code, one registry, one `--help`.

    @command("table1", "Table 1: calibration, B0, every method on every (model, task) pair, then the table")
    def main(argv: list[str] | None = None) -> int:
        args = parser("table1").parse_args(argv)
        ...

The dispatcher (`acceptmoe.cli`) finds the declarations by reading the command modules' source
(`declared()`: no imports, so `--help` is instant) and imports only the module of the command it runs; the
decorator registers the function in `COMMANDS` when that module is imported. The name and help text are
literals in the decorator call, written once. Both tables are `acceptmoe.registry.Registry`s, so an unknown
command is refused with the closest name like any other. This module imports only the leaves `registry` and
`errors`, so any room may declare a command without an import arrow running back up.
"""
from __future__ import annotations

import argparse
import ast
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from acceptmoe.registry import Registry

PACKAGE = Path(__file__).resolve().parent

FIX = "see ./reproduce.sh --help"


@dataclass(frozen=True)
class Declared:
    name: str
    help: str
    module: str                   # dotted module path ("" for a command reproduce.sh runs itself)


@dataclass(frozen=True)
class Command:
    """A registered command: `./reproduce.sh <name>` calls `run(argv) -> exit code`."""
    name: str
    help: str
    run: Callable[[list[str] | None], int]

    def __call__(self, argv: list[str] | None = None) -> int:
        return self.run(argv)


COMMANDS: Registry[Command] = Registry("command", fix=FIX)     # filled as command modules are imported


def command(name: str, help: str) -> Callable:
    """Register `fn(argv) -> exit code` as `./reproduce.sh <name>`; `help` is its one-line description."""
    def wrap(fn: Callable) -> Callable:
        if name in COMMANDS:
            if COMMANDS[name].run is not fn:
                raise RuntimeError(f"command {name!r} is declared twice")
            return fn
        COMMANDS.add(name, Command(name, help, fn))
        return fn
    return wrap


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit code 2 (argparse would print the usage block first)
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def parser(name: str) -> argparse.ArgumentParser:
    """The argument parser of a declared command, with its help text as description; a bad option is one
    `error:` line and exit code 2."""
    return _Parser(prog=f"./reproduce.sh {name}", description=COMMANDS[name].help if name in COMMANDS else "")


def modules(root: Path = PACKAGE, package: str = PACKAGE.name) -> list[tuple[str, Path]]:
    """(dotted module, file) of every Python file under `root` (the package `package`), by path."""
    out = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out.append((".".join([package, *(parts[:-1] if parts[-1] == "__init__" else parts)]), path))
    return out


def declared(builtin: Mapping[str, str] = {}, sources: Iterable[tuple[str, Path]] | None = None) -> Registry[Declared]:
    """`builtin` (name -> help, run by reproduce.sh itself), then every `@command("name", "help")` in `sources`
    ((module, file) pairs; default: every module of the package, by path), read from source, in that order."""
    found: Registry[Declared] = Registry("command", fix=FIX)
    for name, text in builtin.items():
        found.add(name, Declared(name, text, ""))
    for module, path in (modules() if sources is None else sources):
        for name, text in _declarations(path):
            if name in found:
                raise RuntimeError(f"command {name!r} is declared in {found[name].module} and {module}")
            found.add(name, Declared(name, text, module))
    return found


def _declarations(path: Path) -> list[tuple[str, str]]:
    source = path.read_text()
    if "@command(" not in source:
        return []
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                if isinstance(dec, ast.Call) and getattr(dec.func, "id", None) == "command":
                    args = [a.value for a in dec.args if isinstance(a, ast.Constant)]
                    if len(args) != 2:
                        raise RuntimeError(f"{path}:{dec.lineno}: @command takes two string literals (name, help)")
                    out.append((args[0], args[1]))
    return out
