"""`./reproduce.sh plan` from config files alone, and the fit check where an experiment opens a model: memory
figures from the functions that size the stores, generations counted as the runners count them, one `error:`
line for a model without a config.json at hand or a machine too small for it."""
import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from acceptmoe.costs.fit import SHIPPED, mem_available, model_need
from acceptmoe.costs.shapes import GPUS
from acceptmoe.engine.config import ModelConfig
from acceptmoe.engine.memory import mxfp4_in_config, store_bytes
from acceptmoe.errors import UserError
from acceptmoe.experiments.spine.config import ModelEntry, load_world

KEYS = {"model", "experiment", "gpu", "device_gb", "pinned_host_gb", "expert_gb", "host_peak_gb", "generations",
        "est_hours_native", "est_hours_sglang", "tokens", "fits"}


def plan(*args):
    return subprocess.run([sys.executable, "-m", "acceptmoe", "plan", *args], capture_output=True, text=True,
                          timeout=600)


def test_paper_fig4_pins_the_experts_bytes_and_counts_the_protocol():
    """Offloaded at X = 48 every target pins its experts' bytes (the arena `engine.memory` sizes, within 1.1x);
    with budgets from a Table 1 run, fig4 is 5 timed repetitions plus the counters run, each 4 tasks x 5
    variants (the placebo among them) x (20 prompts + the warm-up) of exactly 256 tokens; without, calibration (2 sources x 128 training
    prompts) and B0's 100 prompts per task come first, with every expert on the device."""
    out = plan("--preset", "paper", "--experiment", "fig4", "--json", "--budgets-from", "results/table1/paper/x")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    world = load_world("paper")
    assert [(r["model"], r["gpu"]) for r in rows] == [(m.name, g.name) for m in world.models for g in GPUS]
    for r in rows:
        assert KEYS <= set(r) and r["experiment"] == "fig4" and r["est_hours_sglang"] is None
        assert r["expert_gb"] <= r["pinned_host_gb"] <= 1.1 * r["expert_gb"] and r["host_peak_gb"] > r["pinned_host_gb"]
        assert r["generations"] == (5 + 1) * 4 * 5 * 21 and r["tokens"] == r["generations"] * 256
        assert r["fits"] and r["est_hours_native"] > 0
        entry = next(m for m in world.models if m.name == r["model"])
        target = json.loads((SHIPPED / entry.target / "config.json").read_text())
        cfg = ModelConfig.from_dict(target)
        arena = store_bytes(cfg, torch.bfloat16, "offloaded", 48, mxfp4_in_config(target), "cuda").pinned
        assert r["pinned_host_gb"] == round(arena / 1e9, 2)
        need = model_need(entry, dataclasses.replace(world, device="cuda"), "offloaded", 48)
        assert r["device_gb"] == round(need.device / 1e9, 2) < 32
    full = json.loads(plan("--preset", "paper", "--experiment", "fig4", "--json").stdout)
    assert {r["generations"] for r in full} == {(5 + 1) * 4 * 5 * 21 + 2 * 128 + 4 * 100}
    assert not any(r["fits"] for r in full if r["gpu"] == "RTX 5090")         # B0's resident engine: > 32 GiB
    assert all(r["device_gb_by_store"]["offloaded"] < 32 < r["device_gb_by_store"]["resident"] for r in full)


def test_every_experiment_plans_and_prints_its_assumptions():
    out = plan("--preset", "tiny", "--experiment", "table1", "--limit", "3")
    assert out.returncode == 0, out.stderr
    assert "| tiny" in out.stdout and "Assumptions:" in out.stdout and "tau" in out.stdout
    from acceptmoe.tools.plan import plan_rows
    for experiment in ("fig3", "table2", "sweep", "fig5", "calibration-study"):
        rows = plan_rows(experiment, "tiny", {"limit": 2})
        assert len(rows) == len(GPUS) and all(r["generations"] > 0 and r["est_hours_native"] > 0 for r in rows)
        assert (rows[0]["pinned_host_gb"] > 0) == (experiment in ("table2", "fig5"))


def test_admission_plans_its_own_methods_on_both_engines():
    """`admission` counts Table 1's work over the methods it compares (two more than Standard SD and AcceptMoE per
    prompt and task), with SGLang hours: the SGLang backend admits draft nodes (every node stays in its pass)."""
    from acceptmoe.experiments.table1.admission import COMPARED
    from acceptmoe.tools.plan import device_rows, plan_rows
    admission, table1 = plan_rows("admission", "tiny", {"limit": 2}), plan_rows("table1", "tiny", {"limit": 2})
    world = load_world("tiny")
    calibration = admission[0]["generations"] - 2 * len(world.tasks) * len(COMPARED)
    assert calibration > 0 and table1[0]["generations"] > 0
    assert all(r["est_hours_native"] > 0 and r["est_hours_sglang"] is not None for r in admission)
    assert all(r["est_hours_sglang"] is not None for r in table1)
    assert {r["engine"] for r in device_rows("admission", "tiny", {"limit": 2}, 2, dict.fromkeys(
        (g.name for g in GPUS), True))} == {"native", "sglang"}


def test_a_model_without_a_config_at_hand_is_one_error_line(tmp_path):
    preset = tmp_path / "nowhere.yaml"
    preset.write_text("preset: nowhere\nmodels:\n"
                      "  - {name: m, target: nobody/no-such-model, draft: models/tiny/draft}\ntasks: [tiny-gsm]\n")
    out = plan("--preset", str(preset), "--experiment", "table1")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert out.stderr.startswith("error: no config.json for target 'nobody/no-such-model'")
    assert "configs/models/nobody/no-such-model/config.json" in out.stderr


def test_load_model_refuses_a_model_this_machine_cannot_hold_before_reading_it(tmp_path):
    """Qwen3-30B-A3B resident in fp32 on this CPU: over 100 GB of host memory, more than MemAvailable here; the
    folder holds no weights at all, so anything but the fit check would fail differently."""
    from acceptmoe.experiments.spine.engines import load_model
    target = tmp_path / "target"
    target.mkdir()
    shutil.copy(SHIPPED / "Qwen/Qwen3-30B-A3B-Instruct-2507/config.json", target / "config.json")
    world = load_world("tiny")
    world = dataclasses.replace(world, models=(ModelEntry("big", str(target), world.models[0].draft),))
    need = model_need(world.models[0], world, "resident", None)
    assert need.host_peak > mem_available()
    with pytest.raises(UserError, match=r"big \(resident store\) needs [\d.]+ GB of host memory while loading, "
                                        r"[\d.]+ GB are available \(MemAvailable\)"):
        load_model(world.models[0], world, tmp_path)
    assert not (tmp_path / "engines.jsonl").exists()
    fits = dataclasses.replace(world, models=(ModelEntry("tiny", str(Path("models/tiny/target")),
                                                         world.models[0].draft),))
    assert model_need(fits.models[0], fits, "resident", None).host_peak < mem_available()


def test_a_greedy_schedule_loads_each_model_once_per_device_and_keeps_timed_units_whole():
    """Longest first onto the device where it finishes first: 4 units of 10 s of one model on 2 devices give
    2 x (load + 20 s); a second model's unit goes where its own load is cheapest; a timed phase is one unit per
    repetition."""
    from acceptmoe.costs.schedule import SHARD_GENERATIONS, Unit, schedule, split, timed
    load = {"a": 5.0, "b": 100.0}.__getitem__
    s = schedule([Unit("a", "p", 10.0, False)] * 4, load, 2)
    assert s.per_device_s == [25.0, 25.0] and s.loads == [["a"], ["a"]] and s.makespan_s == 25.0
    s = schedule([Unit("a", "p", 10.0, False)] * 4 + [Unit("b", "q", 30.0, True)], load, 2)
    assert s.loads == [["b"], ["a"]] and s.per_device_s == [130.0, 45.0]
    assert schedule([Unit("a", "p", 10.0, False)] * 4, load, 1).per_device_s == [45.0]
    shards = split("a", "p", 2 * SHARD_GENERATIONS + 1, 2.0)
    assert [u.seconds for u in shards] == [2.0 * SHARD_GENERATIONS] * 2 + [2.0] and not any(u.timed for u in shards)
    assert [u.seconds for u in timed("a", "t", 60.0, 3)] == [20.0] * 3


def test_plan_gpus_spreads_the_whole_run_and_says_it_is_an_estimate():
    """`--gpus 4`: per GPU and engine, the one-device and four-device wall clock of the same schedule, each
    device's hours, the speedup; the makespan is at least the work divided among the devices and at least the
    longest unit; fig4's timed phases are one unit per model and repetition."""
    out = plan("--preset", "tiny", "--experiment", "table1", "--limit", "3", "--gpus", "4")
    assert out.returncode == 0, out.stderr
    assert "across 4 GPUs" in out.stdout and "an estimate from the cost model" in out.stdout
    assert "| 4 GPUs h" in out.stdout and "--gpus N: each device loads a model once" in out.stdout
    data = json.loads(plan("--preset", "tiny", "--experiment", "fig4", "--limit", "2", "--gpus", "4", "--json").stdout)
    assert {r["model"] for r in data["models"]} and data["devices"]
    for r in data["devices"]:
        assert len(r["per_device_hours"]) == 4 and r["est_hours_n"] == max(r["per_device_hours"])
        assert r["est_hours_1"] / 4 - 0.01 <= r["est_hours_n"] <= r["est_hours_1"] + 0.01
        assert r["speedup"] is None or 1 <= r["speedup"] <= 4
        assert r["timed_units"] == len(data["models"]) // len(GPUS) * (5 + 1)      # fig4: 5 repetitions + counters
    single = json.loads(plan("--preset", "tiny", "--experiment", "table1", "--gpus", "1", "--json").stdout)["devices"]
    assert all(r["speedup"] in (1, None) and r["est_hours_1"] == r["est_hours_n"] for r in single)
    bad = plan("--preset", "tiny", "--experiment", "table1", "--gpus", "0")
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and bad.stderr.count("\n") == 1
