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

import dataclasses
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from acceptmoe.errors import UserError
from acceptmoe.methods import Fit, Plan


@dataclass(frozen=True)
class GenerationOptions:
    """How one generation runs besides its plan and length: the one record every backend takes. Recording
    fields never change what a generation computes. Sampling (`engine/sampling.py`, docs/method.md "Sampling"):
    temperature 0 is greedy decoding, exactly as without these fields; above 0 the target's logits are divided
    by it, then cut to the top_k tokens (0: all), then to the top_p nucleus (1: all), and the speculating
    methods accept draft tokens by tree rejection sampling. A seed makes a generation reproducible on one
    machine (None: fresh randomness); `generate_many` / `generate_batch` take one options record for all their
    requests (each then draws from its own generator seeded with the same seed) or one per request
    (`per_request`), which is how a run gives every prompt its own stream (`for_request`)."""
    ignore_eos: bool = False       # generate max_new_tokens past any EOS (timed runs)
    trace_layers: bool = True      # the trace's per-layer fields (blocks are always traced)
    record_routes: bool = False    # keep what every target pass sent to the experts (`Generation.routes`)
    record_divergence: bool = False  # a restricting method, sampling, resident store: per accepted position, KL
                                   # and TV of its verify pass's distribution from natural routing's (one extra
                                   # all-experts pass of the same tree per step; `Generation.divergence`)
    temperature: float = 0.0       # 0: greedy; > 0: sample from softmax(logits / temperature), cut below
    top_k: int = 0                 # keep the top_k most likely tokens (0: no cut)
    top_p: float = 1.0             # keep the smallest set of most likely tokens holding top_p of the mass
    seed: int | None = None        # the request's generator seed (None: unseeded)

    def __post_init__(self) -> None:
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) \
                or not math.isfinite(self.temperature) or self.temperature < 0:
            raise UserError(f"temperature must be a finite number >= 0 (0 decodes greedily), got "
                            f"{self.temperature!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise UserError(f"top_k must be an int >= 0 (0 keeps every token), got {self.top_k!r}")
        if isinstance(self.top_p, bool) or not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise UserError(f"top_p must be in (0, 1] (1 keeps every token), got {self.top_p!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or self.seed < 0):
            raise UserError(f"seed must be an int >= 0, or None for fresh randomness, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        """Temperature 0: the argmax, whatever top_k, top_p and seed say."""
        return self.temperature == 0

    def sampling(self) -> dict | None:
        """The sampling fields as recorded (a trace's meta, a run's rows); None when greedy, so a greedy record is
        exactly what it was before sampling existed."""
        if self.greedy:
            return None
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "seed": self.seed}

    def for_request(self, *identity: str | int) -> GenerationOptions:
        """These options for one request named by `identity` (model, task, split, prompt id, ...): the seed
        becomes `request_seed(seed, *identity)`, so reruns and resumes draw the same stream and no two prompts
        share one. Greedy or unseeded options come back unchanged."""
        if self.greedy or self.seed is None:
            return self
        return dataclasses.replace(self, seed=request_seed(self.seed, *identity))


def request_seed(seed: int, *identity: str | int) -> int:
    """The one rule deriving a request's seed from a run's seed and the request's identity: the first 63 bits of
    SHA-256 over them (stable across processes and machines, unlike `hash`)."""
    text = json.dumps([int(seed), *[str(part) for part in identity]], separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def per_request(options: GenerationOptions | Sequence[GenerationOptions], n: int) -> list[GenerationOptions]:
    """One options record per request of a `generate_many` / `generate_batch` call: the record given for all, or
    the sequence given (one per prompt)."""
    if isinstance(options, GenerationOptions):
        return [options] * n
    out = list(options)
    if len(out) != n or not all(isinstance(o, GenerationOptions) for o in out):
        raise TypeError(f"options: one GenerationOptions, or one per prompt ({n}), got {len(out)} items")
    return out


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, declared on its class (read before one is opened: a run that needs what its engine
    lacks stops before any work)."""
    records_routes: bool           # GenerationOptions.record_routes
    offloads: bool                 # an offloaded (X-slot) expert store
    switches_plans_freely: bool    # one generation's plan may differ from the last at no cost (a timed run can
                                   # interleave variants prompt by prompt)
    verifies_batched: bool         # `generate_batch`: several requests' trees in one verify pass
    samples: tuple[str, ...] = ()  # device kinds ("cpu", "cuda") where it runs GenerationOptions with
                                   # temperature > 0 exactly; elsewhere it refuses them
    admits: bool = False           # a method with token-side admission (`Admission`; a backend without it refuses)

    def samples_on(self, device: str) -> bool:
        """Whether this backend samples (temperature > 0) on `device` ("cpu", "cuda", "cuda:1", ...)."""
        return str(device).partition(":")[0] in self.samples


@runtime_checkable
class EngineBackend(Protocol):
    name: str                                   # "native", "sglang", ...
    capabilities: ClassVar[Capabilities]
    eos_token_ids: set[int]

    @classmethod
    def open(cls, **settings) -> EngineBackend:
        """A backend from settings (target, draft, device, dtype, store, slots, tree)."""

    @property
    def fit(self) -> Fit:
        """What plans for this backend are bound to: router, experts, tree depth, expert store."""

    def generate(self, prompt_ids: Sequence[int], plan: Plan, max_new_tokens: int,
                 options: GenerationOptions = GenerationOptions()):
        """One generation (greedy, or sampled as options say) -> `Generation` (tokens, accept_lengths, step_times,
        trace, prefill_time, stop_reason, routes when options.record_routes; a backend refuses what its
        `capabilities` lack)."""

    def generate_many(self, prompts: Sequence[Sequence[int]], plan: Plan, max_new_tokens: int,
                      options: GenerationOptions | Sequence[GenerationOptions] = GenerationOptions()) -> list:
        """One `Generation` per prompt, in prompt order (a backend may run them concurrently); `options`: one
        record for all, or one per prompt (`per_request`)."""

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
