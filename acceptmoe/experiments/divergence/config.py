"""The divergence report's section of the config spine: temperatures, methods, prompts.

    cfg = load_divergence_config("tiny", {"prompts": 2})   # configs/experiments/divergence.yaml + preset
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from acceptmoe.methods import BASELINE, METHODS, get_method

from ..spine.config import ConfigKeyError, SamplingConfig, WorldConfig, load_experiment

EXPERIMENT = "divergence"


def restricting_methods() -> tuple[str, ...]:
    """Every registered method that restricts the verifier's experts, in registry order."""
    return tuple(m for m in METHODS.names() if get_method(m).restricts)


@dataclass(frozen=True)
class DivergenceConfig:
    SECTION = EXPERIMENT
    world: WorldConfig
    temperatures: tuple[float, ...] = (0.6, 1.0)
    methods: tuple[str, ...] | None = None   # restricting methods (None: every registered one)
    prompts: int = 5                         # evaluation prompts per (model, task)
    max_new_tokens: int = 48                 # per generation (the report's steps; short keeps it a few minutes)
    limit: int | None = None                 # caps prompts and the budgets' calibration / B0 prompts
    budgets_from: str | None = None          # a Table 1 run folder: reuse its p_hat and B0
    bootstrap_resamples: int = 2000

    def __post_init__(self) -> None:
        if not self.temperatures or any(not t > 0 for t in self.temperatures):
            raise ConfigKeyError(f"temperatures must be a non-empty list of values > 0 (the report compares sampled "
                                 f"distributions), got {list(self.temperatures)}")
        for m in self.methods or ():
            if not get_method(m).restricts:
                raise ConfigKeyError(f"method {m!r} does not restrict experts: its verify pass is natural routing; "
                                     f"give restricting methods ({', '.join(restricting_methods())})")
        if min(self.prompts, self.max_new_tokens) < 1:
            raise ConfigKeyError("prompts and max_new_tokens must be >= 1")

    @property
    def preset(self) -> str:
        return self.world.preset

    def method_names(self) -> tuple[str, ...]:
        """Standard SD, then the restricting methods."""
        return (BASELINE, *(self.methods or restricting_methods()))

    def n_prompts(self) -> int:
        return min(self.prompts, self.limit) if self.limit else self.prompts

    def sampling(self, temperature: float) -> SamplingConfig:
        """The world's sampling settings at `temperature`."""
        return dataclasses.replace(self.world.sampling, temperature=float(temperature))


def load_divergence_config(preset: str | Path, overrides: dict | None = None) -> DivergenceConfig:
    return load_experiment(DivergenceConfig, preset, overrides)
