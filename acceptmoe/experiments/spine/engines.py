"""Which engine runs an experiment's models, and a model opened on it.

    >>> import tempfile
    >>> from acceptmoe.experiments.spine.config import load_world
    >>> from acceptmoe.experiments.spine.engines import load_model
    >>> from acceptmoe.methods import Variant
    >>> world = load_world("tiny")
    >>> loaded = load_model(world.models[0], world, tempfile.mkdtemp())   # an engine (world.engine), tokenizer
    >>> plan = loaded.plan(Variant("acceptmoe"), commitment=(1.0, 0.8, 0.6, 0.5, 0.4, 0.3))   # engine + world
    >>> plan.fit == loaded.engine.fit and plan.selector.beta == world.selector.beta
    True

`ENGINES` (a `acceptmoe.registry.Registry`) imports an engine's opener on first use, so a missing optional
dependency is one clear error naming the extra to install. Offloaded expert stores exist only in the
native engine (SGLang has no X-slot expert cache), so offload phases refuse any other engine.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import torch

from acceptmoe.engine.backend import EngineBackend
from acceptmoe.errors import UserError
from acceptmoe.methods import Plan, Variant
from acceptmoe.registry import Registry

from .fit import check_model_fits

Opener = Callable[..., EngineBackend]
# engine name -> its opener, imported on first use (`ENGINES.add` takes an opener at hand)
ENGINES: Registry[Opener] = Registry("engine", fix="docs/architecture.md, \"The engine contract\"")
ENGINES.lazy("native", "acceptmoe.engine.engine:load_engine")
ENGINES.lazy("sglang", "acceptmoe.serving.sglang:open_engine")
OFFLOAD_ENGINES = ("native",)
ROUTE_ENGINES = ("native",)                    # engines whose generations can record routes (`engine.routes`)


def check_engine(name: str, store: str = "resident", routes: bool = False) -> None:
    if name not in ENGINES:
        raise ENGINES.unknown(name)
    if routes and name not in ROUTE_ENGINES:
        raise UserError(f"generation.record_routes: routes are recorded by the {', '.join(ROUTE_ENGINES)} engine "
                        f"only ({name} does not expose what each pass sent to the experts): drop --record-routes "
                        f"or use --engine native")
    if store == "offloaded" and name not in OFFLOAD_ENGINES:
        raise UserError(f"offloaded expert stores run on the native engine only ({name} has no X-slot expert "
                        f"cache): use --engine native for fig4, table2 and fig5")


def opener(name: str) -> Opener:
    """The engine's opener, imported now: a missing dependency is one clear error (checked before a run starts)."""
    check_engine(name)
    try:
        return ENGINES[name]
    except ImportError as exc:
        raise UserError(f"engine {name!r} is not available here ({exc}): install it on a machine it supports "
                        f"(docs/{name}.md), or use --engine native") from None


def open_backend(name: str, **settings) -> EngineBackend:
    """An engine of kind `name`, opened with `settings` (target, draft, device, dtype, store, slots, tree)."""
    check_engine(name, settings.get("store", "resident"))
    return opener(name)(**settings)


@dataclass
class Loaded:
    """A model ready to generate: its entry in the world, engine and tokenizer, where its checkpoints were
    found, and the world's base selector its plans are bound with."""
    model: object                  # config.ModelEntry
    engine: EngineBackend
    tokenizer: object
    target: Path
    draft: Path
    world: object                  # config.WorldConfig

    def plan(self, variant: Variant, commitment: Sequence[float] | None = None, b0: int | None = None) -> Plan:
        """`variant` bound to this engine, the pair's p_hat and B0 and the world's selector."""
        return variant.bind(self.engine.fit, commitment=commitment, b0=b0, selector=self.world.selector)


@contextmanager
def opened(model, world, run_dir: Path, store: str = "resident", slots: int | None = None) -> Iterator[Loaded]:
    """`load_model` for the length of a `with` block: the engine is closed when the block ends, however it ends,
    so the next model, repetition or variant set opens on a device (and, for SGLang, a host) this one left."""
    loaded = load_model(model, world, run_dir, store, slots)
    try:
        yield loaded
    finally:
        loaded.engine.close()
        free_device_memory()


def load_model(model, world, run_dir: Path, store: str = "resident", slots: int | None = None) -> Loaded:
    """A fresh engine (`world.engine`) for `model` (a ModelEntry); store/slots select the expert store
    (offloaded: an X-slot pool per layer, native engine only). The engine's `describe()` (name, version,
    settings) is appended to `run_dir/engines.jsonl`, so every run says which engine made its rows. A model
    this machine cannot hold stops here, before anything is downloaded or loaded (`fit.check_model_fits`)."""
    from .prompts import load_tokenizer, resolve_checkpoint
    check_model_fits(model, world, store, slots)
    target, draft = resolve_checkpoint(model.target), resolve_checkpoint(model.draft)
    serving = world.serving.settings(world, model) if world.engine != "native" else {}
    engine = open_backend(world.engine, target=target, draft=draft, device=world.device, dtype=world.dtype,
                          store=store, slots=slots, tree=world.tree, **serving)
    with open(Path(run_dir) / "engines.jsonl", "a") as f:
        f.write(json.dumps({"model": model.name, **engine.describe()}, sort_keys=True) + "\n")
    return Loaded(model, engine, load_tokenizer(target), target, draft, world)


def set_threads(world) -> None:
    if world.threads is not None:
        torch.set_num_threads(world.threads)


def free_device_memory() -> None:
    from acceptmoe.engine.engine import free_memory
    free_memory()
