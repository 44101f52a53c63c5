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
dataclass compares them) and the inputs' names, shapes and dtypes, so nothing is listed by hand.

Modes (`Engine(steps=...)`, `resolve_steps` picks the default):
- eager:  dynamic shapes (an int `start`: attention reads slots [0, start + T)); the CPU default and the
          offloaded store's mode (its copies are host-driven).
- static: the static-shape pass (a device scalar `start`; attention over every cache slot, the rest
          masked; see `kv`), run eagerly. It is exactly what a graph holds, and runs on any device. Its
          attention cost follows the cache's size (a power of two at least prompt + max_new_tokens +
          tree), not the sequence's length: the price of one graph per shape.
- graphs: static, captured once per key on CUDA (after one eager warm-up whose counter increments are
          undone) and replayed; the default on CUDA with the resident store. A capture that fails leaves
          that key static (eager) and records why in `fallbacks`.

The prefill and the drafter's extension by the prompt (any length), the candidate ranking between draft
levels, the tree selection and acceptance (host reads, once per step) and the cache compaction run eagerly
around them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

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
    graph: object                     # torch.cuda.CUDAGraph
    outputs: tuple                    # static output tensors, refreshed by every replay
    step: object                      # the step it runs: holds what the graph reads (the verifier's buffers)


Inputs = dict[str, "Tensor | int"]
Step = Callable[[Inputs], tuple]      # a frozen dataclass with __call__(inputs) (see the module docstring)


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
        self.caches: dict[str, object] = {}
        self.inputs: dict[Hashable, dict[str, Tensor]] = {}
        self.graphs: dict[Hashable, _Captured] = {}
        self.fallbacks: dict[str, str] = {}           # str(key) -> why that key runs static instead
        self.replays = 0
        self.pool = None

    def cache(self, name: str, max_len: int, make: Callable[[int], object]):
        """A cache (`make(n)`, with a `max_len`) of at least max_len slots: a new one per generation when
        eager; otherwise one persistent cache per name (graphs hold its addresses), regrown to the next
        power of two when too short (dropping every graph; they are captured again)."""
        if self.mode == "eager":
            return make(max_len)
        held = self.caches.get(name)
        if held is None or held.max_len < max_len:
            held = self.caches[name] = make(1 << (max_len - 1).bit_length())
            self.graphs.clear()
        return held

    def run(self, step: Step, inputs: Inputs) -> tuple:
        """step(inputs) directly (eager), on static buffers holding this step's inputs (static), or replayed
        from a graph captured under the step and the inputs' shapes (graphs)."""
        if not dataclasses.is_dataclass(step) or not step.__dataclass_params__.frozen:
            raise TypeError(f"a step is a frozen dataclass declaring what it reads, got {type(step).__name__}")
        if self.mode == "eager":
            return step(inputs)
        full_key = (step, tuple((n, tuple(v.shape), v.dtype) if isinstance(v, Tensor) else (n, int)
                                for n, v in inputs.items()))
        buf = self._buffers(full_key, inputs)
        for name, value in inputs.items():
            if isinstance(value, Tensor):
                buf[name].copy_(value, non_blocking=True)
            else:
                buf[name].fill_(value)
        run = lambda: step(buf)  # noqa: E731
        if self.mode == "static" or str(full_key) in self.fallbacks:
            return run()
        captured = self.graphs.get(full_key)
        if captured is None:
            captured = self._capture(full_key, run, step)
            if captured is None:
                return run()
        captured.graph.replay()
        self.replays += 1
        return captured.outputs

    def _buffers(self, key: Hashable, inputs: Inputs) -> dict[str, Tensor]:
        buf = self.inputs.get(key)
        if buf is None:
            buf = self.inputs[key] = {
                n: torch.empty_like(v, device=self.device) if isinstance(v, Tensor)
                else torch.zeros((), dtype=torch.long, device=self.device) for n, v in inputs.items()}
        return buf

    def _capture(self, key: Hashable, run: Callable[[], tuple], step: Step) -> _Captured | None:
        """Warm up once on a side stream (lazy tables, kernel compilation), undo its counter increments,
        capture. The cache writes of the warm-up are those the replay makes again (same inputs)."""
        saved = [t.clone() for t in self.state]
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            run()
        torch.cuda.current_stream(self.device).wait_stream(side)
        for t, s in zip(self.state, saved):
            t.copy_(s)
        graph = torch.cuda.CUDAGraph()
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        try:
            with torch.cuda.graph(graph, pool=self.pool):
                outputs = run()
        except RuntimeError as exc:                     # e.g. an operation that syncs with the host
            torch.cuda.synchronize(self.device)
            for t, s in zip(self.state, saved):
                t.copy_(s)
            self.fallbacks[str(key)] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            return None
        self.graphs[key] = captured = _Captured(graph, outputs, step)
        return captured

    def describe(self) -> dict:
        return {"mode": self.mode, "captured": len(self.graphs), "replays": self.replays,
                "fallbacks": dict(self.fallbacks)}
