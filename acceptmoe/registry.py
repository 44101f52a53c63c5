"""`Registry`: the one mechanism behind every name -> thing table (methods, verifier backends, engines, model
families, tasks), with lazy entries and "did you mean" on a miss (docs/architecture.md, "Registries").

    FAMILIES = Registry("model family", fix="see docs/models.md for the supported ones")
    FAMILIES.lazy("mixtral", "acceptmoe.engine.families.mixtral:FAMILY")   # imported on first lookup
    FAMILIES.add("toy", Toy())                                           # or an object at hand
    FAMILIES["mixtrl"]   # UnknownName: unknown model family 'mixtrl' (did you mean 'mixtral'?); valid: ...

A lazy entry is a `module:attribute` string resolved on first lookup, so listing names (for `--help`,
config checks, error messages) imports nothing. Adding a name twice is a programming error and raises at
once. A miss is an `UnknownName`, a `UserError` (and a `KeyError`), whose message names the kind, the
closest valid name and every valid one (a room may raise its own subclass, `error=`). This module imports
nothing from the package but `errors`, so every room can hold a registry without an import arrow running
back up.
"""
from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from acceptmoe.errors import UserError

T = TypeVar("T")


class UnknownName(UserError, KeyError):
    """A name a registry does not hold; the message gives the closest valid name and all of them."""


class Registry(Generic[T]):
    """Names -> entries in registration order; an entry is given (`add`) or imported on first use (`lazy`)."""

    def __init__(self, kind: str, fix: str = "", check: Callable[[str, T], None] | None = None,
                 error: type[UnknownName] = UnknownName):
        self.kind = kind                  # what an entry is, for messages: "method", "verifier backend", ...
        self.fix = fix                    # appended to a miss's message, e.g. where the valid ones are listed
        self._check = check               # run on every entry as it is added or first resolved
        self._error = error               # a miss's exception: `UnknownName` or a room's own subclass of it
        self._entries: dict[str, T] = {}
        self._lazy: dict[str, str] = {}   # name -> "module:attribute", not yet imported
        self._order: list[str] = []       # every name, in registration order

    # -- adding ---------------------------------------------------------------------------------------
    def add(self, name: str, entry: T) -> T:
        """Register `entry` under `name` (once); returns it, so `X = REG.add("x", X)` reads well."""
        self._refuse_twice(name)
        if self._check is not None:
            self._check(name, entry)
        self._entries[name] = entry
        self._order.append(name)
        return entry

    def lazy(self, name: str, target: str) -> None:
        """Register `name` as `module:attribute`, imported when first looked up."""
        if ":" not in target:
            raise ValueError(f"a lazy {self.kind} is 'module:attribute', got {target!r}")
        self._refuse_twice(name)
        self._lazy[name] = target
        self._order.append(name)

    def remove(self, name: str) -> None:
        """Drop a name (tests that add a toy entry clean up with it)."""
        self._entries.pop(name, None)
        self._lazy.pop(name, None)
        if name in self._order:
            self._order.remove(name)

    def _refuse_twice(self, name: str) -> None:
        if name in self._entries or name in self._lazy:
            raise ValueError(f"{self.kind} {name!r} is registered already")

    # -- looking up -----------------------------------------------------------------------------------
    def names(self) -> tuple[str, ...]:
        """Every name, without importing a lazy entry."""
        return tuple(self._order)

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._lazy

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __getitem__(self, name: str) -> T:
        if name in self._entries:
            return self._entries[name]
        if name in self._lazy:
            return self._resolve(name)
        raise self.unknown(name)

    def get(self, name: str, default: T | None = None) -> T | None:
        return self[name] if name in self else default  # noqa: SIM401 (this is get; self[name] resolves lazy ones)

    def items(self) -> list[tuple[str, T]]:
        """Every (name, entry), importing the lazy ones."""
        return [(n, self[n]) for n in self.names()]

    def values(self) -> list[T]:
        return [self[n] for n in self.names()]

    def unknown(self, name: object) -> UnknownName:
        """The error for a miss: the closest valid name, then all of them, then the fix."""
        valid = self.names()
        close = difflib.get_close_matches(str(name), valid, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        fix = f"; {self.fix}" if self.fix else ""
        return self._error(f"unknown {self.kind} {name!r}{hint}; valid: {', '.join(valid) or '(none)'}{fix}")

    def _resolve(self, name: str) -> T:
        module, _, attr = self._lazy[name].partition(":")
        entry = getattr(importlib.import_module(module), attr)
        del self._lazy[name]
        if self._check is not None:
            self._check(name, entry)
        self._entries[name] = entry
        return entry
