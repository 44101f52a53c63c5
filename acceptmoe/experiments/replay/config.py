"""The replay's section of the config spine (`configs/experiments/replay.yaml`, then the preset's `replay:`
mapping, then the command line).

    >>> from acceptmoe.experiments.replay.config import load_replay_config
    >>> cfg = load_replay_config("tiny", {"source": "results/fig4/tiny/RUN", "shape": "qwen3-30b-a3b"})
    >>> cfg.shape, cfg.generations, cfg.repeats, [d.name for d in cfg.devices]
    ('qwen3-30b-a3b', 20, 1, ['H200', 'RTX PRO 6000', 'RTX 5090'])

Sizes: `generations` prompts per task (one generation per prompt and variant; the intervals' unit), 20 by
default so that a tiny-world recording of 20 offloaded prompts per task gives 80 prompts, at least
`stats.MIN_UNITS` per task; a recording with fewer is replayed whole and its intervals say they rest on too
few prompts. One round by default: the prompts are interleaved (each prompt's variants back to back), so the
interval over prompts, not a median over rounds, carries the host's noise (and the placebo, where recorded,
measures it); `repeats` adds rounds.
"""
from __future__ import annotations

from dataclasses import dataclass

from acceptmoe.costs.shapes import GPUS, DeviceBound

from ..spine.config import ConfigKeyError, WorldConfig, load_experiment

EXPERIMENT = "replay"


@dataclass(frozen=True)
class ReplayConfig:
    SECTION = EXPERIMENT
    world: WorldConfig
    source: str                              # the run folder whose routes/ are replayed
    shape: str = "qwen3-30b-a3b"             # tiny | qwen3-30b-a3b | gpt-oss-120b | a model folder (its config.json)
    device: str | None = None                # None: the world's device
    dtype: str = "auto"                      # auto: the shape's dtype on CUDA; float32 on CPU
    offload: int | None = None               # X; None: the recording's X when it was offloaded
    phase: str | None = None
    model: str | None = None
    variants: tuple[str, ...] | None = None  # None: every recorded variant
    generations: int | None = 20             # prompts per task, the first recorded (None: every one)
    passes_per_generation: int | None = 16   # each generation's prefill and first step passes (None: all)
    repeats: int = 1                         # rounds over every prompt and variant (order rotated)
    layers: int | None = None
    weight_sets: int = 2                     # distinct random weight sets; replayed layer j uses set j mod this
    memory_gib: float = 16.0                 # refuse to start when weights and pools would exceed this
    seed: int = 0
    bootstrap_resamples: int = 2000          # intervals over prompts (paired: the same prompts, by task)
    devices: tuple[DeviceBound, ...] = GPUS     # the bound columns (default: costs.shapes.GPUS)

    def __post_init__(self) -> None:
        for name in ("repeats", "weight_sets"):
            if getattr(self, name) < 1:
                raise ConfigKeyError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("offload", "generations", "passes_per_generation", "layers"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigKeyError(f"{name} must be >= 1 or null, got {value}")
        if self.memory_gib <= 0:
            raise ConfigKeyError(f"memory_gib must be positive, got {self.memory_gib}")

    @property
    def preset(self) -> str:
        return self.world.preset

    @property
    def run_device(self) -> str:
        return self.device or self.world.device


def load_replay_config(preset: str, overrides: dict | None = None) -> ReplayConfig:
    return load_experiment(ReplayConfig, preset, overrides)
