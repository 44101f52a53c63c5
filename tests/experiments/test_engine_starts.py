"""How often a server configured per method would start over what the runners ask of an engine: every plan each
opened engine receives, recorded from the native engine on the tiny random world, folded through the SGLang
backend's own rule (`serving.sglang.config.server_restart`: EAGLE-3 on/off always restarts; under CUDA graphs
also a plan whose verifier calls differ, e.g. another budget). The runners loop one method at a time over a
model's tasks, so a server starts once per (repetition, model, method) where B0 allows, and on a CPU once per
(repetition, model, EAGLE-3 on/off). A timed phase runs an engine that cannot switch plans freely (a server)
variant by variant (`capabilities.switches_plans_freely` false, as `SGLangBackend` declares), which these counts assume;
the native engine interleaves instead (test_throughput.py)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from acceptmoe.engine.engine import Engine
from acceptmoe.experiments.study import commands as calibration_study
from acceptmoe.experiments.table1 import commands as table1
from acceptmoe.experiments.throughput import commands as perf
from acceptmoe.serving.sglang.config import server_restart

import runner_world as world

THROUGHPUT = {"resident": {"prompts": 1, "repetitions": 2}, "sweep": {"budgets": [2, 4], "prompts": 1},
              "bootstrap_resamples": 200}


def starts(calls, graphs: bool) -> int:
    """Servers started over `calls` [(engine, plan)] in order, by the SGLang backend's rule."""
    running, n = {}, 0
    for engine, plan in calls:
        n += server_restart(running.get(engine), plan, graphs) is not None
        running[engine] = plan
    return n


def runs(values) -> int:
    """Maximal runs of equal neighbours (how many budgets a fixed-budget method's tasks go through in order)."""
    values = list(values)
    return sum(1 for i, v in enumerate(values) if i == 0 or v != values[i - 1])


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("starts")
    world.make_models(root)
    preset = world.write_preset(root, root)
    data = yaml.safe_load(preset.read_text())
    data.update({"throughput": THROUGHPUT, "calibration-study": {"bootstrap_resamples": 200}})
    preset.write_text(yaml.safe_dump(data))
    return root, preset


def recorded(monkeypatch, command, args) -> list:
    calls = []
    real_one, real_many = Engine.generate, Engine.generate_many

    def one(self, prompt, plan, *a, **k):
        calls.append((id(self), plan))
        return real_one(self, prompt, plan, *a, **k)

    def many(self, prompts, plan, *a, **k):
        calls.append((id(self), plan))
        return real_many(self, prompts, plan, *a, **k)
    monkeypatch.setattr(Engine, "generate", one)
    monkeypatch.setattr(Engine, "generate_many", many)
    try:
        assert command(args) == 0
    finally:
        monkeypatch.setattr(Engine, "generate", real_one)
        monkeypatch.setattr(Engine, "generate_many", real_many)
    return calls


def b0s(run: Path) -> list[int]:
    return [json.loads((run / "b0" / "rand" / f"{task}.json").read_text())["b0"] for task in world.TASKS]


@pytest.fixture(scope="module")
def table1_run(setup):
    root, preset = setup
    with pytest.MonkeyPatch.context() as mp:
        calls = recorded(mp, table1.main, ["--preset", str(preset), "--limit", "1", "--results", str(root / "t1")])
    (run,) = (root / "t1" / "table1" / "test").iterdir()
    return run, calls


def test_table1_starts_a_server_per_method_and_model(table1_run):
    run, calls = table1_run
    assert len({engine for engine, _ in calls}) == 1
    assert starts(calls, graphs=False) == 2                        # EAGLE-3 on (calibration, 5 methods), off (AR)
    fixed = 3                                                      # count-b, moe-spec, acceptmoe-b at each B0
    assert starts(calls, graphs=True) == 3 + fixed * runs(b0s(run))  # + Standard SD, AcceptMoE, Vanilla AR


def test_throughput_and_study_start_a_server_per_variant_and_repetition(setup, table1_run, monkeypatch):
    root, preset = setup
    run, _ = table1_run
    b0 = runs(b0s(run))
    common = ["--preset", str(preset), "--limit", "1", "--results", str(root / "r"), "--budgets-from", str(run)]
    blocked = dataclasses.replace(Engine.capabilities, switches_plans_freely=False)   # as a server runs a timed phase
    monkeypatch.setattr(Engine, "capabilities", blocked)
    calls = recorded(monkeypatch, perf.fig3, common)
    assert len({engine for engine, _ in calls}) == 2                # a fresh engine per repetition
    assert starts(calls, graphs=False) == 2 * 2                     # per repetition: EAGLE-3 on, off
    assert starts(calls, graphs=True) == 2 * (4 + 2 * b0)   # AR, SD, AcceptMoE, the placebo; MoE-Spec, AcceptMoE-B at B0
    calls = recorded(monkeypatch, perf.sweep, common)
    assert starts(calls, graphs=False) == 1 and starts(calls, graphs=True) == 2 + 2     # budgets 2, 4; SD, AcceptMoE
    calls = recorded(monkeypatch, calibration_study.main, common)
    fixed = {plan.name for _, plan in calls if plan.spec.needs_budget}
    assert starts(calls, graphs=False) == 1 and starts(calls, graphs=True) == 2 + len(fixed)   # AcceptMoE's, SD
