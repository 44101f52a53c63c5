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

`ENGINES` (a `acceptmoe.registry.Registry`) imports an engine's class on first use, so a missing optional
dependency is one clear error naming the extra to install. What an engine can do is declared on its class
(`engine.backend.Capabilities`: route recording, an offloaded store, plans switched freely, batched verify);
a run that needs what its engine lacks is refused here, before it starts.
"""
from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from acceptmoe.costs.fit import check_model_fits
from acceptmoe.engine.backend import EngineBackend
from acceptmoe.errors import UserError
from acceptmoe.methods import Plan, Variant, VerifyCost, get_method
from acceptmoe.registry import Registry

from . import cluster

# engine name -> its `EngineBackend` class, imported on first use; the class declares its `capabilities` and
# `open`s one from settings
ENGINES: Registry[type[EngineBackend]] = Registry("engine", fix="docs/architecture.md, \"The engine contract\"")
ENGINES.lazy("native", "acceptmoe.engine.engine:Engine")
ENGINES.lazy("sglang", "acceptmoe.serving.sglang.engine:SGLangBackend")


def check_engine(name: str, store: str = "resident", routes: bool = False, sampling_on: str | None = None) -> None:
    """Refuse, before a run starts, an engine this machine cannot import or one that lacks what the run needs
    (`sampling_on`: the device a run sampling at temperature > 0 runs on)."""
    caps = backend_class(name).capabilities
    if sampling_on is not None and not caps.samples_on(sampling_on):
        raise UserError(f"sampling.temperature > 0: the {name} engine does not sample exactly on {sampling_on} "
                        f"({caps.samples or 'nowhere'} only); use an engine that does "
                        f"({', '.join(n for n in ENGINES.names() if _samples_on(n, sampling_on))}) or temperature 0")
    if routes and not caps.records_routes:
        raise UserError(f"generation.record_routes: the {name} engine does not record routes (it does not expose "
                        f"what each pass sent to the experts): drop --record-routes or use an engine that does "
                        f"({', '.join(engines_that('records_routes'))})")
    if store == "offloaded" and not caps.offloads:
        raise UserError(f"the {name} engine has no offloaded (X-slot) expert store: use an engine that has "
                        f"({', '.join(engines_that('offloads'))}) for fig4, table2 and fig5")


def backend_class(name: str) -> type[EngineBackend]:
    """The engine's class, imported now: an unknown name or a missing dependency is one clear error."""
    if name not in ENGINES:
        raise ENGINES.unknown(name)
    try:
        return ENGINES[name]
    except ImportError as exc:
        raise UserError(f"engine {name!r} is not available here ({exc}): install it on a machine it supports "
                        f"(docs/{name}.md), or use --engine native") from None


def engines_that(capability: str) -> list[str]:
    """The registered engines available here whose class declares `capability` (a `Capabilities` field)."""
    found = []
    for name in ENGINES.names():
        try:
            if getattr(backend_class(name).capabilities, capability):
                found.append(name)
        except UserError:                         # not installed here
            continue
    return found


def _samples_on(name: str, device: str) -> bool:
    try:
        return backend_class(name).capabilities.samples_on(device)
    except UserError:                             # not installed here
        return False


def open_backend(name: str, **settings) -> EngineBackend:
    """An engine of kind `name`, opened with `settings` (target, draft, device, dtype, store, slots, tree)."""
    check_engine(name, settings.get("store", "resident"))
    return backend_class(name).open(**settings)


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
    run_dir: Path | None = None    # where the run records what it loaded (the verify-cost profile)

    def plan(self, variant: Variant, commitment: Sequence[float] | None = None, b0: int | None = None) -> Plan:
        """`variant` bound to this engine, the pair's p_hat and B0, the world's selector and, for a method that
        admits draft nodes, the world's verify-cost profile (recorded in the run folder)."""
        if self.draft is None and variant.spec.speculates:
            raise no_draft(self.model.name, [variant.name])
        cost = self.verify_cost() if variant.spec.admits else None
        return variant.bind(self.engine.fit, commitment=commitment, b0=b0, selector=self.world.selector, cost=cost)

    def verify_cost(self) -> VerifyCost:
        """The world's verify-cost profile (`WorldConfig.verify_cost`; None: the committed tiny-world CPU one of
        the engine's store, `costs.verify.default_profile`), copied once into the run folder with where it came
        from: verify-cost.json for the resident store, verify-cost-offloaded.json for the offloaded one."""
        from acceptmoe.costs.verify import default_profile, load_profile
        from acceptmoe.paths import REPO
        given = self.world.verify_cost                      # type: ignore[attr-defined]
        store = self.engine.fit.store
        path = default_profile(store) if given is None else (Path(given) if Path(given).is_absolute() else REPO / given)
        cost = load_profile(path)
        if self.run_dir is not None:
            out = Path(self.run_dir) / ("verify-cost-offloaded.json" if store == "offloaded" else "verify-cost.json")
            if not out.is_file():
                out.write_text(json.dumps({"profile": str(path), "cost": cost.to_json()}, indent=1, sort_keys=True)
                               + "\n")
        return cost

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


def require_admission(engine: str, methods) -> None:
    """Stop before any work when a method of `methods` (names) admits draft nodes (`MethodSpec.admits`) and the
    engine does not (`Capabilities.admits`)."""
    admitting = [m for m in methods if get_method(m).admits]
    if admitting and not backend_class(engine).capabilities.admits:
        raise UserError(f"{', '.join(admitting)}: token-side admission is not wired into the {engine} engine (it "
                        f"verifies every drafted node): use an engine that admits "
                        f"({', '.join(engines_that('admits'))}), or drop these methods")


def require_drafts(world, methods) -> None:
    """Stop before any work when a speculative method of `methods` (names) meets a model without a draft."""
    speculating = [m for m in methods if get_method(m).speculates]
    for model in world.models:
        if model.draft is None and speculating:
            raise no_draft(model.name, speculating)


@contextmanager
def opened(model, world, run_dir: Path, store: str = "resident", slots: int | None = None,
           pooled: bool = False) -> Iterator[Loaded]:
    """`load_model` for the length of a `with` block: the engine is closed when the block ends, however it ends,
    so the next model, repetition or variant set opens on a device (and, for SGLang, a host) this one left.
    `pooled` (units that are not timed): under `--cluster` the engine is a pool of Ray workers, each holding
    the model (`spine.cluster`); otherwise, or for timed units, the model opens in this process."""
    loaded = pooled_model(model, world, run_dir) if pooled and cluster.active() else \
        load_model(model, world, run_dir, store, slots)
    try:
        yield loaded
    finally:
        loaded.engine.close()
        free_device_memory()


def pooled_model(model, world, run_dir: Path) -> Loaded:
    """`model` on the --cluster's workers (`cluster.PooledEngine`); the tokenizer here, for prompts and replies."""
    from .prompts import load_tokenizer, resolve_checkpoint
    cluster.check_pooled(world)                             # each worker checks the model fits its device
    target = resolve_checkpoint(model.target)
    draft = resolve_checkpoint(model.draft) if model.draft is not None else None
    engine = cluster.PooledEngine(model, world, Path(run_dir), backend_class(world.engine).capabilities, worker_model)
    return Loaded(model, engine, load_tokenizer(target), target, draft, world, Path(run_dir))


def worker_model(model, world) -> Loaded:
    """What a --cluster worker opens once: `model` on its device, its provenance left to the driver."""
    set_threads(world)
    return load_model(model, world, Path(tempfile.mkdtemp(prefix="acceptmoe-worker-")))


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
    return Loaded(model, engine, load_tokenizer(target), target, draft, world, Path(run_dir))


def set_threads(world) -> None:
    if world.threads is not None:
        torch.set_num_threads(world.threads)


def free_device_memory() -> None:
    from acceptmoe.engine.device import free_memory
    free_memory()
