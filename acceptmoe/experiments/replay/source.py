"""The recorded routes of a run folder (`routes/<phase>/<model>/<task>/<variant>/r<rep>-<index>.npz`, written
with `generation.record_routes`): which phase, model and variants a replay reads, and which generations.

A replay compares variants on the same prompts, and its unit is the prompt: it takes, per task, the first
prompts every variant recorded (prompt index order), one generation per prompt and variant (the lowest
recorded repetition: greedy decoding repeats a prompt's routes in the others, so a second repetition is not a
second unit); the baseline's variant (`methods.BASELINE`, when recorded) comes first, and its placebo
(`PLACEBO`: the baseline again under another name, as the timed runners record it), when recorded, is
replayed as a variant like any other: identical routes, so its ratio to the baseline is the replay host's
noise.
Each variant's routes say which method made them and whether it pruned against the recorded pool (`routes`):
pruned routes exist only under an offloaded store, so they have no resident counterpart. Where the recording
run's row says where the reply ended by itself (`natural_end`), the replay can tell text from the forced
continuation after EOS.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from acceptmoe.engine.routes import KINDS, Routes
from acceptmoe.errors import UserError
from acceptmoe.methods import BASELINE, METHODS, Variant

from ..spine.runs import SampleLog

FIRST = Variant(BASELINE).name     # the variant a replay lists first, when recorded (its ratios are against it)
PLACEBO = Variant(BASELINE, tag="placebo").name   # the baseline recorded twice: identical routes, host noise only
PHASE_ORDER = ("resident", "offload-timed", "offload-counters", "table1", "sweep")


@dataclass(frozen=True, order=True)
class GenKey:
    rep: int
    index: int
    task: str

    @property
    def name(self) -> str:
        return f"{self.task}/r{self.rep}-{self.index:04d}"


@dataclass(frozen=True)
class Recording:
    root: Path                        # routes/<phase>/<model>
    phase: str
    model: str
    variants: tuple[str, ...]         # the reference first, then by registry order
    keys: tuple[GenKey, ...]          # one generation per prompt, every variant recorded, in order
    meta: dict                        # the first file's meta (experts, layers, store, slots, shapes)
    cache: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)   # the run's rows, read once

    def path(self, variant: str, key: GenKey) -> Path:
        return self.root / key.task / variant / f"r{key.rep}-{key.index:04d}.npz"

    def load(self, variant: str, key: GenKey) -> Routes:
        return Routes.load(self.path(variant, key))

    @property
    def reference(self) -> str:
        return self.variants[0]

    def per_task(self) -> dict[str, int]:
        """task -> prompts (generations per variant) selected, in task order."""
        return {t: sum(k.task == t for k in self.keys) for t in sorted({k.task for k in self.keys})}

    def methods(self) -> dict[str, str]:
        """variant -> method (from each variant's first file)."""
        return {v: self.load(v, self.keys[0]).meta.get("method", v) for v in self.variants}

    def routes(self) -> dict[str, dict]:
        """variant -> {"method", "prune"}: what made its routes (each variant's first file's meta)."""
        metas = {v: self.load(v, self.keys[0]).meta for v in self.variants}
        return {v: {"method": m.get("method", v), "prune": bool(m.get("prune"))} for v, m in metas.items()}

    def natural_end(self, variant: str, key: GenKey) -> tuple[bool, int | None]:
        """(recorded, tokens up to the reply's first EOS or None without one) from the recording run's row of
        that generation: a timed row's `natural_tokens`, or an instrumented row's graded `reply_tokens` (shorter
        than the generation: it ended there). (False, None) where the row does not say."""
        unit = self.load(variant, key).meta.get("unit")
        row = self._rows().get(unit)
        if row is None:
            return False, None
        if "natural_tokens" in row:
            return True, row["natural_tokens"]
        if row.get("reply_tokens") is not None:
            return True, row["reply_tokens"] if row["reply_tokens"] < row["tokens"] else None
        return False, None

    def _rows(self) -> dict[str, dict]:
        if "_rows" not in self.cache:
            path = self.root.parents[2] / "samples.jsonl"
            self.cache["_rows"] = {r["key"]: r for r in SampleLog(path)} if path.is_file() else {}
        return self.cache["_rows"]


def _children(p: Path) -> list[str]:
    return sorted(c.name for c in p.iterdir() if c.is_dir()) if p.is_dir() else []


def find_recording(run_dir: Path, phase: str | None = None, model: str | None = None) -> Recording:
    """The recorded routes of `run_dir` for one phase and model (default: the first recorded of each)."""
    routes = Path(run_dir) / "routes"
    if not routes.is_dir():
        raise UserError(f"{run_dir} has no routes/: record them with --record-routes (e.g. ./reproduce.sh fig4 "
                        f"--record-routes), then replay that run folder")
    phases = sorted(_children(routes), key=lambda p: (PHASE_ORDER.index(p) if p in PHASE_ORDER else 99, p))
    if not phases:
        raise UserError(f"{routes} is empty: the run recorded no generation yet")
    phase = phase or phases[0]
    if phase not in phases:
        raise UserError(f"phase {phase!r} has no routes in {routes}; recorded phases: {', '.join(phases)}")
    models = _children(routes / phase)
    model = model or (models[0] if models else None)
    if model not in models:
        raise UserError(f"model {model!r} has no routes in {routes / phase}; recorded models: {', '.join(models)}")
    root = routes / phase / model
    per_variant: dict[str, set[GenKey]] = {}
    for task in _children(root):
        for variant in _children(root / task):
            for f in (root / task / variant).glob("r*-*.npz"):
                rep, index = f.stem[1:].split("-")
                per_variant.setdefault(variant, set()).add(GenKey(int(rep), int(index), task))
    if not per_variant:
        raise UserError(f"{root} holds no routes files")
    keys = sorted(set.intersection(*per_variant.values()))
    if not keys:
        raise UserError(f"{root}: no generation was recorded by every variant ({', '.join(sorted(per_variant))}); "
                        f"let the recording run finish (--resume) and replay again")
    first = {v: Routes.load(root / keys[0].task / v / f"r{keys[0].rep}-{keys[0].index:04d}.npz").meta
             for v in per_variant}
    order = list(METHODS)
    rank = lambda v: (v != FIRST, order.index(first[v].get("method")) if first[v].get("method") in order  # noqa: E731
                      else len(order), v)
    variants = tuple(sorted(per_variant, key=rank))
    return Recording(root, phase, model, variants, tuple(keys), first[variants[0]])


def one_per_prompt(keys) -> tuple[GenKey, ...]:
    """The lowest recorded repetition of each (task, prompt index), in key order."""
    first: dict[tuple[str, int], GenKey] = {}
    for key in sorted(keys):
        first.setdefault((key.task, key.index), key)
    return tuple(sorted(first.values()))


def first_per_task(keys: tuple[GenKey, ...], prompts: int | None) -> tuple[GenKey, ...]:
    """The first `prompts` keys of each task (prompt index order; None: all), in key order."""
    by_task: dict[str, list[GenKey]] = {}
    for key in sorted(keys, key=lambda k: (k.task, k.index, k.rep)):
        by_task.setdefault(key.task, []).append(key)
    return tuple(sorted(k for ks in by_task.values() for k in ks[:prompts]))


def select(rec: Recording, variants: tuple[str, ...] | None, generations: int | None) -> Recording:
    """The recording narrowed to `variants` (None: all; the reference stays first when chosen) and, per task,
    its first `generations` prompts (None: all), one generation per prompt."""
    chosen = rec.variants
    if variants is not None:
        unknown = [v for v in variants if v not in rec.variants]
        if unknown:
            raise UserError(f"variants {unknown} have no routes in {rec.root}; recorded: {', '.join(rec.variants)}")
        chosen = tuple(v for v in rec.variants if v in variants)
    return dataclasses.replace(rec, variants=chosen, keys=first_per_task(one_per_prompt(rec.keys), generations))


def step_passes(kinds: np.ndarray) -> int:
    """Passes after the prefill (verification or decode steps)."""
    return int((kinds != KINDS.index("prefill")).sum())
