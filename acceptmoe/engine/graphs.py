"""Passes at fixed shapes, captured as CUDA graphs: the target's decode step (T = 1) and verify step
(T = the tree's num_draft_tokens), the drafter's tree levels (T = topk, one graph per level) and its
extension by an accepted path (one graph per length), each replayed after its inputs are copied into
static buffers.

    >>> import torch
    >>> from acceptmoe.engine import load_engine
    >>> from acceptmoe.engine.graphs import StepGraphs
    >>> from acceptmoe.engine.passes import TargetPass
    >>> model = load_engine("models/tiny").model
    >>> steps = StepGraphs("cpu", "static", state=(model.store.tally,))   # "graphs" on CUDA captures the same
    >>> cache = steps.cache("target", 40, model.new_cache)   # one persistent cache, grown by powers of two
    >>> cache.max_len
    64
    >>> inputs = {"ids": torch.tensor([5, 17, 300]), "positions": torch.arange(3), "start": 0}
    >>> logits, _, _, _ = steps.run(TargetPass(model, cache), inputs)     # step(inputs) -> tuple of tensors
    >>> tuple(logits.shape), steps.describe()["mode"]
    ((3, 1024), 'static')

A step is a frozen dataclass whose fields are everything its `__call__` reads besides the inputs (the model,
the cache, the verifier, whether it prunes or records, ...): `engine.passes.TargetPass`,
`eagle3.DraftLevel`, `eagle3.DraftExtend`. Its graph key is the step itself (its fields, compared as the
dataclass compares them) and the inputs' names, shapes and dtypes, so nothing is listed by hand. The cache a
step holds is the prefix of the persistent cache its pass reads (`cache.upto(end)`, `kv.bucket`), so the
bucket is part of the key. Keys are looked up as objects, never rendered as text: a replay's host work is the
lookup and its inputs' copies into the key's buffers (`dispatch`; `./reproduce.sh bench-host` times it at the
paper's shapes).

Modes (`Engine(steps=...)`, `resolve_steps` picks the default):
- eager:  dynamic shapes (an int `start`: attention reads slots [0, start + T)); the CPU default and the
          offloaded store's mode (its copies are host-driven).
- static: the static-shape pass (a device scalar `start`; attention over every slot of the cache prefix the
          step holds, those past the block masked; see `kv`), run eagerly. It is exactly what a graph holds,
          and runs on any device. Its attention cost follows the bucket (a power of two from 256 holding
          start + T, capped at the cache's size), not the whole cache: one graph per bucket.
- graphs: static, captured once per key on CUDA (after one eager warm-up whose counter increments are
          undone) and replayed; the default on CUDA with the resident store. A capture that fails leaves
          that key static (eager) and records why in `fallbacks` (the key as text, `label`).

The prefill and the drafter's extension by the prompt (any length), the candidate ranking between draft
levels, the tree selection and acceptance (host reads, once per step) and the cache compaction run eagerly
around them.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import torch
from torch import Tensor

from acceptmoe.errors import UserError

STEP_MODES = ("auto", "eager", "static", "graphs")


def resolve_steps(mode: str, device: torch.device, store_kind: str) -> str:
    """"auto" -> "graphs" on CUDA with the resident store, else "eager"; an impossible request is a user error."""
    if mode not in STEP_MODES:
        raise UserError(f"unknown steps mode {mode!r}; valid: {', '.join(STEP_MODES)}")
    if mode == "auto":
        return "graphs" if device.type == "cuda" and store_kind == "resident" else "eager"
    if mode == "graphs" and device.type != "cuda":
        raise UserError(f"steps='graphs' needs a CUDA device (this engine is on {device}); use steps='static' "
                        f"to run the same static-shape passes eagerly, or 'eager'")
    if mode == "graphs" and store_kind != "resident":
        raise UserError("steps='graphs' needs the resident store: the offloaded store copies experts from host "
                        "memory as a pass needs them, which a CUDA graph cannot hold; use steps='eager'")
    return mode


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    outputs: tuple                    # static output tensors, refreshed by every replay
    step: object                      # the step it runs: holds what the graph reads (the verifier's buffers)


@dataclass
class Entry:
    """What one key holds: its static input buffers, its graph once captured, or why it runs static."""
    buffers: dict[str, Tensor]
    captured: _Captured | None = None
    fallback: str | None = None


Inputs = Mapping[str, "Tensor | int"]
Key = tuple                           # (step, ((input name, shape, dtype) | (input name, int), ...))


class Step(Protocol):
    """A frozen dataclass with __call__(inputs) (see the module docstring)."""
    def __call__(self, inputs: Inputs, /) -> tuple: ...


class _Cache(Protocol):
    """What `StepGraphs.cache` holds: anything with a length (a `KVCache`, a `DraftCache`)."""
    @property
    def max_len(self) -> int: ...


C = TypeVar("C", bound=_Cache)


class StepGraphs:
    """Fixed-shape passes of one engine (batch 1): the target's decode and verify passes and the drafter's
    tree levels, each a step (`step(inputs) -> tuple`) over named inputs (tensors, and ints such as `start` that
    static modes hold as 0-d device tensors).

    Graphs share one memory pool, so a replay's outputs are valid until the next replay of a graph captured
    before it: callers consume (or copy) each pass's outputs before running the next pass, as the engine's
    step does (levels -> verify -> accept -> extend, each read before the next)."""

    def __init__(self, device: torch.device | str, mode: str, state: Sequence[Tensor] = ()):
        """state: tensors a pass updates in place that a warm-up must leave as it found them (counters)."""
        self.device, self.mode, self.state = torch.device(device), mode, tuple(state)
        self.caches: dict[str, Any] = {}
        self.entries: dict[Key, Entry] = {}
        self.fallbacks: dict[str, str] = {}           # a fallen-back key as text (`label`) -> why it runs static
        self.replays = 0
        self.pool: Any = None                         # the graphs' memory pool, made with the first capture

    def cache(self, name: str, max_len: int, make: Callable[[int], C]) -> C:
        """A cache (`make(n)`, with a `max_len`) of at least max_len slots: a new one per generation when
        eager; otherwise one persistent cache per name (graphs hold its addresses), regrown to the next
        power of two when too short (dropping every key, with its graph and buffers; they are made again)."""
        if self.mode == "eager":
            return make(max_len)
        held = self.caches.get(name)
        if held is None or held.max_len < max_len:
            held = self.caches[name] = make(1 << (max_len - 1).bit_length())
            self.entries.clear()
        return held

    def run(self, step: Step, inputs: Inputs) -> tuple:
        """step(inputs) directly (eager), on static buffers holding this step's inputs (static), or replayed
        from a graph captured under the step and the inputs' shapes (graphs)."""
        if self.mode == "eager":
            if not _is_step(type(step)):
                raise TypeError(f"a step is a frozen dataclass declaring what it reads, got {type(step).__name__}")
            return step(inputs)
        key, entry = self.dispatch(step, inputs)
        captured = entry.captured
        if captured is None:
            if self.mode == "static" or entry.fallback is not None:
                return step(entry.buffers)
            captured = self._capture(key, entry, step)
            if captured is None:
                return step(entry.buffers)
        captured.graph.replay()
        self.replays += 1
        return captured.outputs

    def dispatch(self, step: Step, inputs: Inputs) -> tuple[Key, Entry]:
        """Everything a replay does before `graph.replay()`: the key (the step and its inputs' shapes, looked up
        as they are: nothing is rendered as text), and this call's inputs copied into the key's static buffers
        (made on its first call). Static and graphs modes only."""
        if not _is_step(type(step)):
            raise TypeError(f"a step is a frozen dataclass declaring what it reads, got {type(step).__name__}")
        key = (step, tuple((n, v.shape, v.dtype) if isinstance(v, Tensor) else (n, int) for n, v in inputs.items()))
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = Entry({
                n: torch.empty_like(v, device=self.device) if isinstance(v, Tensor)
                else torch.zeros((), dtype=torch.long, device=self.device) for n, v in inputs.items()})
        buf = entry.buffers
        for name, value in inputs.items():
            if isinstance(value, Tensor):
                buf[name].copy_(value, non_blocking=True)
            else:
                buf[name].fill_(value)
        return key, entry

    def fall_back(self, key: Key, entry: Entry, reason: str) -> None:
        """Run `key` static from now on (its capture failed), and say so in `describe` (as text, once)."""
        entry.fallback = self.fallbacks[label(key)] = reason

    def _capture(self, key: Key, entry: Entry, step: Step) -> _Captured | None:
        """Warm up once on a side stream (lazy tables, kernel compilation), undo its counter increments,
        capture. The cache writes of the warm-up are those the replay makes again (same inputs)."""
        run = lambda: step(entry.buffers)  # noqa: E731
        saved = [t.clone() for t in self.state]
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            run()
        torch.cuda.current_stream(self.device).wait_stream(side)
        for t, s in zip(self.state, saved, strict=True):
            t.copy_(s)
        graph = torch.cuda.CUDAGraph()
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        try:
            with torch.cuda.graph(graph, pool=self.pool):
                outputs = run()
        except RuntimeError as exc:                     # e.g. an operation that syncs with the host
            torch.cuda.synchronize(self.device)
            for t, s in zip(self.state, saved, strict=True):
                t.copy_(s)
            self.fall_back(key, entry, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            return None
        entry.captured = captured = _Captured(graph, outputs, step)
        return captured

    def describe(self) -> dict:
        return {"mode": self.mode, "captured": sum(e.captured is not None for e in self.entries.values()),
                "replays": self.replays, "fallbacks": dict(self.fallbacks)}


@functools.cache
def _is_step(cls: type) -> bool:
    """Whether instances of `cls` are steps: frozen dataclasses (asked once per class)."""
    return dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]  # untyped


def label(key: Key) -> str:
    """A key as short text (for `describe`; never made per call): the step's class and plain fields, the
    length of the cache it reads, the inputs' shapes. The step's own repr would print the whole model."""
    step, shapes = key
    fields = []
    for f in dataclasses.fields(step):
        value = getattr(step, f.name)
        if isinstance(value, (bool, int, str, tuple)) or value is None:
            fields.append(f"{f.name}={value!r}")
        elif hasattr(value, "max_len"):
            fields.append(f"{f.name}={type(value).__name__}[{value.max_len}]")
        else:
            fields.append(f"{f.name}={type(value).__name__}")
    ins = ", ".join(f"{n}{list(s)}" if s is not int else n for n, s, *_ in shapes)
    return f"{type(step).__name__}({', '.join(fields)}) <- {ins}"
