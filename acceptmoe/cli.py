"""`python -m acceptmoe <command>`: the dispatcher behind ./reproduce.sh.

Commands declare themselves next to their code with `@acceptmoe.commands.command(name, help)`; this module
lists them from those declarations (`--help`, and the valid names after an unknown one): the experiments'
first, in their records' order (`experiments.spine.catalog`), then every other room's by path. It imports
only the module of the command it runs, and turns every `acceptmoe.errors.UserError`, and every failed write to a
full, read-only or unwritable disk, into one `error:` line with exit code 2. Anything else is a bug and
keeps its traceback.
"""
from __future__ import annotations

import errno
import importlib
import sys
from pathlib import Path

from acceptmoe.commands import COMMANDS, declared, modules
from acceptmoe.errors import UserError
from acceptmoe.experiments.spine.catalog import ordered

DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EFBIG)
BUILTIN = {"test": "create .venv if needed, install the test extras, run the test suite (reproduce.sh)"}


def sources() -> list[tuple[str, Path]]:
    """Every module that may declare a command, in `--help` order: each experiment's (found on the experiments'
    path, a folder added there included), in their records' order, then the rest of the package by path."""
    first = [m for record in ordered() for m in record.modules()]
    seen = {path for _, path in first}
    return first + [(m, path) for m, path in modules() if path not in seen]


def usage() -> str:
    commands = declared(BUILTIN, sources())
    width = max(len(n) for n in commands) + 2
    lines = ["usage: ./reproduce.sh <command> [args]", "", "commands:"]
    lines += [f"  {name:<{width}}{d.help}" for name, d in commands.items()]
    lines += ["", "Run `./reproduce.sh <command> --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    commands = declared(BUILTIN, sources())
    if name not in commands or name in BUILTIN:
        why = commands.unknown(name) if name not in commands else f"{name!r} runs from ./reproduce.sh {name}"
        print(f"error: {why}", file=sys.stderr)
        return 2
    importlib.import_module(commands[name].module)
    try:
        return int(COMMANDS[name](rest) or 0)
    except UserError as exc:          # bad input: the message names the problem and the fix; no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:  # a path the user gave does not exist
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:            # a full disk, a read-only or unwritable folder: the machine's state, not a bug
        if exc.errno not in DISK_ERRORS:
            raise
        where = exc.filename or "a file"
        print(f"error: cannot write {where}: {exc.strerror}; free space on that disk (or make it writable), then "
              f"run the command again (a run folder continues with --resume)", file=sys.stderr)
        return 2
