"""Table 1's section of the config spine: which methods run on every (model, task) pair, and how many prompts.

    cfg = load_experiment(Table1Config, "tiny", {"limit": 2})     # configs/experiments/table1.yaml + preset
"""
from __future__ import annotations

from dataclasses import dataclass

from acceptmoe.methods import B0_METHOD, CALIBRATION, METHODS, PAPER_METHODS, get_method

from ..spine.config import ConfigKeyError, WorldConfig


@dataclass(frozen=True)
class Table1Config:
    """Table 1: every method on every (model, task) pair of the world, greedy."""
    SECTION = "table1"
    world: WorldConfig
    methods: tuple[str, ...] = PAPER_METHODS      # the paper's six; a method beyond it runs when named
    limit: int | None = None                    # evaluation prompts per task (None: the whole split)
    trace_layers: bool = True                   # per-layer trace fields for every method (B0's method: always)

    def __post_init__(self) -> None:
        for m in self.methods:
            get_method(m)
        if len(set(self.methods)) != len(self.methods) or not self.methods:
            raise ConfigKeyError(f"methods must be a non-empty list without repeats, got {list(self.methods)}")
        fixed = [m for m in self.methods if METHODS[m].needs_budget]
        if fixed and B0_METHOD not in self.methods:
            raise ConfigKeyError(f"{fixed} run at the budget B0, which comes from {B0_METHOD}'s traces: add "
                                 f"{B0_METHOD} to methods")
        if self.limit is not None and self.limit < 1:
            raise ConfigKeyError(f"limit must be a positive number of prompts or null, got {self.limit}")

    def method_names(self) -> tuple[str, ...]:
        """Every method this run generates with (calibration's included where a method needs it)."""
        calibrates = any(METHODS[m].needs_calibration for m in self.methods)
        return tuple(dict.fromkeys(self.methods + ((CALIBRATION,) if calibrates else ())))
