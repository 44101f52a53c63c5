"""`EngineBackend`: the one contract between the experiments and an engine that runs a target + draft pair.

    >>> from acceptmoe.engine import EngineBackend, load_engine
    >>> from acceptmoe.methods import Variant
    >>> engine = load_engine("models/tiny")
    >>> isinstance(engine, EngineBackend), engine.fit.num_experts, engine.fit.max_depth
    (True, 128, 5)
    >>> gen = engine.generate([1, 2, 3], Variant("standard-sd").bind(engine.fit), max_new_tokens=4)
    >>> sorted(gen.trace.blocks[0].layers)                # per block: tree, path; per layer: sizes, unions
    ['anchor_size', 'layer', 'natural_union', 'routed_union', 'set_size', 'utility_kept']

Runners see only this protocol (`acceptmoe.experiments.spine.engines.open_backend` picks one by name): the native engine
(`acceptmoe.engine.Engine`) implements it directly; the SGLang plugin implements it over its own server. The
tree shape is fixed when the backend opens (a server is configured once); a `Plan` (a `Variant` bound to
the backend's `fit`) says everything that changes per generation. Statistics (trace, counters) are read
after a generation and never change what it computes.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from acceptmoe.methods import Fit, Plan


@runtime_checkable
class EngineBackend(Protocol):
    name: str                                   # "native", "sglang", ...
    eos_token_ids: set[int]
    switches_plans_freely: bool                 # one generation's plan may differ from the last at no cost (a
                                                # timed run can interleave variants prompt by prompt)

    @property
    def fit(self) -> Fit:
        """What plans for this backend are bound to: router, experts, tree depth, expert store."""

    def generate(self, prompt_ids: Sequence[int], plan: Plan, max_new_tokens: int,
                 ignore_eos: bool = False, *, trace_layers: bool = True, record_routes: bool = False):
        """One greedy generation -> `Generation` (tokens, accept_lengths, step_times, trace, prefill_time,
        stop_reason, routes when record_routes; a backend that cannot record routes refuses)."""

    def generate_many(self, prompts: Sequence[Sequence[int]], plan: Plan, max_new_tokens: int,
                      ignore_eos: bool = False, *, trace_layers: bool = True, record_routes: bool = False) -> list:
        """One `Generation` per prompt, in prompt order (a backend may run them concurrently)."""

    def clock(self) -> float:
        """Wall seconds after the device's queued work has finished (generations are timed with it)."""

    def reset_counters(self) -> None:
        """Zero the expert-store counters (loads, bytes, hits, misses, wait_s: stall seconds, passes, and
        copy_s: copy seconds where the store times its copies)."""

    def counters(self) -> dict:
        """The expert-store counters since the last reset, summed over layers, and the store kind."""

    def describe(self) -> dict:
        """Engine name, version and settings, recorded with every run that uses it."""

    def close(self) -> None:
        """Give back what the engine holds (device memory, pinned host memory, a server's processes); the engine
        cannot generate afterwards and a second call does nothing. Runners close every engine in a `finally`
        before opening the next (`spine.engines.opened`), so one engine at a time holds the device."""
