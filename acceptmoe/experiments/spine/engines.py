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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from acceptmoe.engine.backend import EngineBackend
from acceptmoe.errors import UserError
from acceptmoe.methods import Plan, Variant, get_method
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
    draft: Path | None             # None: the model has no draft (methods that do not speculate only)
    world: object                  # config.WorldConfig

    def plan(self, variant: Variant, commitment: Sequence[float] | None = None, b0: int | None = None) -> Plan:
        """`variant` bound to this engine, the pair's p_hat and B0 and the world's selector."""
        if self.draft is None and variant.spec.speculates:
            raise no_draft(self.model.name, [variant.name])
        return variant.bind(self.engine.fit, commitment=commitment, b0=b0, selector=self.world.selector)

    def expert_pool(self):
        """The engine's offloaded expert store (`pool_state`, `restore_pool`: its X-slot pool saved and put back
        without counting anything), or None where the engine keeps every expert resident or hides its store."""
        store = getattr(getattr(self.engine, "model", None), "store", None)
        return store if getattr(store, "kind", None) == "offloaded" else None


def no_draft(model: str, methods) -> UserError:
    """The error of a speculative method asked of a model without a draft: it names the way to get one."""
    return UserError(f"model {model!r} has no draft, and {', '.join(methods)} speculate(s) with one: train one "
                     f"with `./reproduce.sh train-draft --target <target> --out <dir> --prompts <file>` (or take "
                     f"a released EAGLE-3 draft) and set the model's `draft:`, or run only methods that need none "
                     f"(docs/own-model.md)")


def require_drafts(world, methods) -> None:
    """Stop before any work when a speculative method of `methods` (names) meets a model without a draft."""
    speculating = [m for m in methods if get_method(m).speculates]
    for model in world.models:
        if model.draft is None and speculating:
            raise no_draft(model.name, speculating)


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
    target = resolve_checkpoint(model.target)
    draft = resolve_checkpoint(model.draft) if model.draft is not None else None
    if draft is None and world.engine != "native":
        raise UserError(f"model {model.name!r} has no draft: the {world.engine} engine serves speculative pairs; "
                        f"run it on the native engine (--engine native) or give it a draft")
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
