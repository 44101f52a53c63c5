"""The calibration study's section of the config spine: the beta grid and how many prompts it grades.

    cfg = load_study_config("tiny", {"limit": 4})     # configs/experiments/calibration-study.yaml + preset
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from acceptmoe.methods import B0_METHOD, Variant

from ..spine.config import ConfigKeyError, WorldConfig, load_experiment

EXPERIMENT = "calibration-study"


@dataclass(frozen=True)
class CalibrationStudyConfig:
    SECTION = EXPERIMENT
    world: WorldConfig
    betas: tuple[float, ...] = (0.25, 0.5, 1.0)
    prompts: int | None = None              # evaluation prompts per pair (None: the world's B0 prompts)
    limit: int | None = None                # caps evaluation and training prompts (quick runs)
    budgets_from: str | None = None         # a Table 1 run folder: reuse its p_hat and B0
    bootstrap_resamples: int = 2000

    def __post_init__(self) -> None:
        if not self.betas or any(b < 0 for b in self.betas):
            raise ConfigKeyError(f"betas must be a non-empty list of non-negative exponents, got {list(self.betas)}")

    @property
    def preset(self) -> str:
        return self.world.preset

    def eval_prompts(self) -> int:
        n = self.prompts or self.world.b0.prompts
        return min(n, self.limit) if self.limit else n

    def train_prompts(self) -> int:
        n = self.world.calibration.prompts
        return min(n, self.limit) if self.limit else n


def load_study_config(preset: str | Path, overrides: dict | None = None) -> CalibrationStudyConfig:
    return load_experiment(CalibrationStudyConfig, preset, overrides)


def beta_variant(beta: float) -> Variant:
    """The self-sized method at selector exponent beta (natural p_hat)."""
    return Variant(B0_METHOD, overrides=(("beta", float(beta)),))


ONPOLICY = Variant(B0_METHOD, tag="onpolicy")       # its p_hat recounted under its own routing
