"""Which engine runs an experiment's models: `open_backend(world.engine, ...)` -> an `EngineBackend`.

The native engine is always available; others are imported on first use from "module:function" so a missing
optional dependency is one clear error naming the extra to install. Offloaded expert stores exist only in the
native engine (SGLang has no X-slot expert cache), so offload phases refuse any other engine.
"""
from __future__ import annotations

import importlib
from typing import Callable

from acceptmoe.engine.backend import EngineBackend
from acceptmoe.errors import UserError

Opener = Callable[..., EngineBackend]
ENGINES: dict[str, str | Opener] = {
    "native": "acceptmoe.engine.engine:load_engine",
    "sglang": "acceptmoe.serving.sglang:open_engine",
}
OFFLOAD_ENGINES = ("native",)


def register_engine(name: str, opener: Opener | str) -> None:
    """Make `open_backend(name, ...)` available (an opener, or "module:function" imported on first use)."""
    ENGINES[name] = opener


def check_engine(name: str, store: str = "resident") -> None:
    if name not in ENGINES:
        raise UserError(f"unknown engine {name!r}; valid engines: {', '.join(ENGINES)}")
    if store == "offloaded" and name not in OFFLOAD_ENGINES:
        raise UserError(f"offloaded expert stores run on the native engine only ({name} has no X-slot expert "
                        f"cache): use --engine native for fig4, table2 and fig5")


def opener(name: str) -> Opener:
    """The engine's opener, imported now: a missing dependency is one clear error (checked before a run starts)."""
    check_engine(name)
    found = ENGINES[name]
    if isinstance(found, str):
        module, _, fn = found.partition(":")
        try:
            found = getattr(importlib.import_module(module), fn)
        except ImportError as exc:
            raise UserError(f"engine {name!r} is not available here ({exc}): install it on a machine it supports "
                            f"(docs/{name}.md), or use --engine native") from None
    return found


def open_backend(name: str, **settings) -> EngineBackend:
    """An engine of kind `name`, opened with `settings` (target, draft, device, dtype, store, slots, tree,
    selector)."""
    check_engine(name, settings.get("store", "resident"))
    return opener(name)(**settings)
