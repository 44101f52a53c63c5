"""Where the per-pair files of a run folder live (Table 1's layout; the budgets a throughput or study run
computes for itself use the same one, in its `budgets/` folder).

    config.json                                        frozen config, hash, environment (`runs`)
    samples.jsonl                                      one row per finished unit (`runs.SampleLog`)
    calibration/<model>/<source>-<split>.json          CommitmentTable: counts and provenance
    calibration/<model>/<source>-<split>.traces.jsonl  the Standard SD traces it counts
    traces/<model>/<task>/<method>.jsonl               one trace per evaluation prompt
    b0/<model>/<task>.json                             the B0 decision (`b0.B0Decision`)
    routes/<phase>/<model>/<task>/<variant>/r<rep>-<index>.npz
                                                       one generation's routes (generation.record_routes)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .config import Pair


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @property
    def samples(self) -> Path:
        return self.root / "samples.jsonl"

    def calibration(self, model: str, source: str, split: str) -> Path:
        return self.root / "calibration" / model / f"{source}-{split}.json"

    def calibration_traces(self, model: str, source: str, split: str) -> Path:
        return self.root / "calibration" / model / f"{source}-{split}.traces.jsonl"

    def traces(self, pair: Pair, method: str) -> Path:
        return self.root / "traces" / pair.model / pair.task / f"{method}.jsonl"

    def b0(self, pair: Pair) -> Path:
        return self.root / "b0" / pair.model / f"{pair.task}.json"

    def routes(self, phase: str, pair: Pair, variant: str, rep: int, index: int) -> Path:
        return self.root / "routes" / phase / pair.model / pair.task / variant / f"r{rep}-{index:04d}.npz"
