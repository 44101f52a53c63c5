"""A run's wall clock across N devices, from the cost model (`costs.hours`): `./reproduce.sh plan --gpus N`.

    units = split(model, phase, generations, seconds_each) + timed(model, phase, seconds, repetitions)
    s = schedule(units, loads, devices=8)             # s.makespan_s, s.per_device_s, s.speedup(...)

Rules (one place; `ASSUMPTIONS` prints them under plan's table):
- Units: an untimed phase's generations split into shards of at most `SHARD_GENERATIONS` (one variant on one
  task: the (model, task, method, prompt range) a sharded run hands out); a timed phase is one unit per model
  and repetition (a repetition runs on a fresh engine; its variants are interleaved prompt by prompt on it, so
  every paired ratio compares timings made on one device), never split further.
- Greedy list scheduling, longest unit first, each onto the device where it would finish first; a device runs
  one unit at a time, so a timed unit shares its device with no other unit.
- Each device pays a model's load (`load_seconds`) once, before its first unit of that model.
- No ordering between units: calibration before the methods that need p_hat, and B0 before the fixed-budget
  methods, are not waited for (the estimate is a lower bound on what such barriers allow).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

SHARD_GENERATIONS = 64     # generations per unit of a graded or untimed phase
LOAD_GBPS = 2.0            # GB/s a model's weights load at (a local NVMe read, the slower side of the copy)
LOAD_S = 30.0              # fixed seconds per load (process start, CUDA context, graph capture)


@dataclass(frozen=True)
class Unit:
    """One schedulable piece of a run: a model's shard of generations (or a whole timed phase)."""
    model: str
    phase: str
    seconds: float
    timed: bool


@dataclass
class Schedule:
    devices: int
    per_device_s: list[float]                               # each device's busy seconds, loads included
    loads: list[list[str]] = field(default_factory=list)    # the models each device loaded

    @property
    def makespan_s(self) -> float:
        return max(self.per_device_s, default=0.0)


def load_seconds(weight_bytes: float) -> float:
    """Seconds a device takes to load a model of `weight_bytes` (target, its experts and the draft)."""
    return LOAD_S + weight_bytes / (LOAD_GBPS * 1e9)


def timed(model: str, phase: str, seconds: float, repetitions: int) -> list[Unit]:
    """A timed phase's units: one per repetition, each a repetition's share of the phase's seconds."""
    return [Unit(model, phase, seconds / repetitions, True) for _ in range(repetitions)]


def split(model: str, phase: str, generations: int, seconds_each: float) -> list[Unit]:
    """An untimed phase's units: shards of at most `SHARD_GENERATIONS` generations."""
    shards = math.ceil(generations / SHARD_GENERATIONS)
    sizes = [SHARD_GENERATIONS] * (shards - 1) + [generations - SHARD_GENERATIONS * (shards - 1)]
    return [Unit(model, phase, n * seconds_each, False) for n in sizes if n > 0]


def schedule(units: Iterable[Unit], load_s: Callable[[str], float], devices: int) -> Schedule:
    """Longest unit first onto the device where it finishes first (its model's load counted on a device that
    has not loaded it yet); ties go to the lowest device number."""
    out = Schedule(devices, [0.0] * devices, [[] for _ in range(devices)])
    for u in sorted(units, key=lambda u: (-u.seconds, u.model, u.phase)):
        def finish(d: int, u: Unit = u) -> float:
            return out.per_device_s[d] + (0.0 if u.model in out.loads[d] else load_s(u.model)) + u.seconds
        best = min(range(devices), key=lambda d: (finish(d), d))
        out.per_device_s[best] = finish(best)
        if u.model not in out.loads[best]:
            out.loads[best].append(u.model)
    return out


ASSUMPTIONS = (
    f"--gpus N: units are shards of at most {SHARD_GENERATIONS} generations of one variant on one task, a timed "
    "phase one unit per model and repetition (every task and variant in it, never split); longest first onto the device where each "
    "finishes first, one unit at a time per device (a timed unit alone on its device)",
    f"--gpus N: each device loads a model once before its first unit of it: {LOAD_S:g} s plus its weights at "
    f"{LOAD_GBPS:g} GB/s; the 1-device column is the same schedule on one device (loads included)",
    "--gpus N: no waiting between phases (calibration before p_hat's methods, B0 before fixed budgets): a lower "
    "bound on the wall clock such barriers allow; an estimate from this cost model, not a measurement",
)
