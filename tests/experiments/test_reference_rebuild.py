"""The committed reference runs rebuild byte-identically from their saved files (config.json, samples.jsonl,
B0 and budget files): every table, CSV and LaTeX file, and the figures."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from acceptmoe.experiments import tables

REFERENCE = Path(__file__).parents[2] / "results" / "reference"
RUNS = sorted(p.parent for p in REFERENCE.glob("*/*/config.json"))
OUTPUTS = (".md", ".csv", ".tex", ".png", ".pdf")
BULKY = ("traces", "calibration", "budgets", "onpolicy")   # traces the tables never read (B0 is read from b0/)


@pytest.mark.parametrize("run", RUNS, ids=[f"{p.parent.name}" for p in RUNS])
def test_reference_run_rebuilds_byte_identically(run, tmp_path):
    copy = tmp_path / run.name
    shutil.copytree(run, copy, ignore=lambda d, names: [n for n in names if n in BULKY and Path(d) == run
                                                       or n.endswith(OUTPUTS)])
    for name in ("onpolicy",):                              # the study reads its on-policy tables (JSON only)
        if (run / name).is_dir():
            shutil.copytree(run / name, copy / name, ignore=shutil.ignore_patterns("*.traces.jsonl"))
    assert tables.main(["--run", str(copy)]) == 0
    committed = sorted(p.relative_to(run) for p in run.glob("*") if p.suffix in OUTPUTS and p.name != "README.md")
    assert committed, f"{run} has no committed outputs"
    for rel in committed:
        assert (copy / rel).read_bytes() == (run / rel).read_bytes(), f"{rel} differs from the committed file"
