"""The divergence report: the engine's record of a restricting method's divergence from natural routing never
changes the generation, is zero where the sets hold every expert, and is refused where it means nothing; the
experiment runs on the tiny world, writes its report and rebuilds it from saved rows alone, and records its
progress units for `./reproduce.sh status`."""
from __future__ import annotations

import math

import pytest

from acceptmoe.cli import main
from acceptmoe.engine import GenerationOptions, load_engine
from acceptmoe.errors import UserError
from acceptmoe.experiments import tables
from acceptmoe.experiments.spine.progress import read_progress
from acceptmoe.experiments.spine.runs import SampleLog
from acceptmoe.experiments.status import report as status_report
from acceptmoe.methods import Variant

P_HAT = (1.0, 0.8, 0.64, 0.512, 0.41, 0.33)
PROMPT = [51, 87, 343, 75, 312, 28, 428, 413, 429, 223, 21, 810]


def test_recording_divergence_changes_nothing_and_measures_what_restriction_does():
    engine = load_engine("models/tiny")
    options = GenerationOptions(temperature=1.0, seed=3, ignore_eos=True)
    recorded = options.__class__(**{**options.__dict__, "record_divergence": True})
    for variant, kw, zero in ((Variant("acceptmoe"), dict(commitment=P_HAT, b0=12), False),
                              (Variant("acceptmoe-b", budget=engine.fit.num_experts), dict(commitment=P_HAT), True),
                              (Variant("count-b", budget=12), {}, False)):
        plan = variant.bind(engine.fit, **kw)
        plain, seen = engine.generate(PROMPT, plan, 24, options), engine.generate(PROMPT, plan, 24, recorded)
        assert (plain.tokens, plain.accept_lengths) == (seen.tokens, seen.accept_lengths)
        assert plain.divergence is None and len(seen.divergence) == sum(len(b.path) for b in seen.trace.blocks)
        kl, tv = (sum(x[i] for x in seen.divergence) for i in (0, 1))
        assert (kl, tv) == (0.0, 0.0) if zero else (kl > 0 and 0 < tv and math.isfinite(kl))
    for variant, opts, why in ((Variant("standard-sd"), recorded, "restricting method"),
                               (Variant("count-b", budget=12), GenerationOptions(record_divergence=True), "temperature")):
        with pytest.raises(UserError, match=why):
            engine.generate(PROMPT, variant.bind(engine.fit), 4, opts)


def test_the_report_runs_and_rebuilds_from_its_rows(tmp_path, capsys):
    argv = ["divergence", "--limit", "1", "--calibration-limit", "1", "--methods", "count-b", "acceptmoe",
            "--results", str(tmp_path)]
    assert main(argv) == 0
    (run,) = (tmp_path / "divergence" / "tiny").iterdir()
    rows = list(SampleLog(run / "samples.jsonl"))
    assert len(rows) == 2 * 3 * 4                    # temperatures x (Standard SD + 2 methods) x tasks, 1 prompt
    assert all((r["kl"] is None) == (r["method"] == "standard-sd") for r in rows)
    assert all(r["kl"] > 0 and 0 < r["tv"] <= 1 for r in rows if r["method"] == "count-b")
    snap = read_progress(run)                        # ./reproduce.sh status reads the same units
    assert snap.total == snap.done and snap.done["generation"] == len(rows) and snap.session_units >= len(rows)
    assert set(snap.total) == {"calibration", "b0", "generation"}    # budgets computed here, then the rows
    assert f"generation {len(rows)}/{len(rows)}" in status_report(run)
    report = (run / "divergence.md").read_bytes()
    (run / "divergence.md").unlink()
    assert tables.main(["--run", str(run)]) == 0 and (run / "divergence.md").read_bytes() == report
    assert main(["divergence", "--methods", "standard-sd", "--results", str(tmp_path)]) == 2
    assert "does not restrict experts" in capsys.readouterr().err
