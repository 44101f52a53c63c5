"""Table 1 runners: strict configs, B0 on synthetic traces, resumable trace logs, and the real pipeline end
to end on a tiny random target + EAGLE-3 draft (accuracy ~0 with random weights; the test checks the
pipeline, the files, resumability and the table's structure)."""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import yaml

from acceptmoe.engine.trace import Trace, load_traces
from acceptmoe.evals.sandbox import isolation
from acceptmoe.experiments import tables
from acceptmoe.experiments.spine import b0 as b0_rule
from acceptmoe.experiments.spine import options
from acceptmoe.experiments.spine.config import B0Config, ConfigKeyError, load_experiment
from acceptmoe.experiments.spine.runs import SampleLog
from acceptmoe.experiments.spine.tracelog import TraceLog
from acceptmoe.experiments.table1 import commands as table1
from acceptmoe.experiments.table1.config import Table1Config
from acceptmoe.experiments.table1.table import build_table1, write_table1
from acceptmoe.methods import METHODS

import runner_world as world


def load_table1_config(preset, overrides=None):
    return load_experiment(Table1Config, preset, overrides)


# ----- config -----
def _preset(tmp_path: Path, extra: dict) -> Path:
    base = yaml.safe_load((Path(__file__).parents[2] / "configs/presets/tiny.yaml").read_text())
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({**base, **extra}))
    return path


def test_presets_load():
    tiny, paper = load_table1_config("tiny"), load_table1_config("paper")
    t, p = tiny.world, paper.world
    assert t.tasks == ("tiny-gsm", "tiny-math", "tiny-humaneval", "tiny-mbpp") and t.dtype == "float32"
    assert (t.tree.num_steps, t.tree.topk, t.tree.num_draft_tokens) == (5, 10, 64)
    assert tiny.limit == 150 and t.generation.max_new_tokens == 96 and t.calibration.prompts == 50
    assert p.device == "cuda" and p.dtype == "bfloat16" and paper.limit is None and len(p.models) == 3
    assert p.calibration.source("math500") == "gsm8k" and p.calibration.source("gsm8k") == "gsm8k"
    assert [m.response_format for m in p.models] == ["plain", "plain", "harmony"]


@pytest.mark.parametrize("extra, match", [
    ({"bogus": 1}, "bogus"),
    ({"table1": {"limit": 2, "max_new_tokens": 8}}, r"p.yaml:table1: unknown config key\(s\) \['max_new_tokens'\]"),
    ({"calibration": {"promts": 3}}, r"p.yaml.calibration: unknown config key\(s\) \['promts'\]"),
    ({"models": [{"name": "x", "target": "a", "draft": "b", "colour": "red"}]}, r"p.yaml.models\[0\]: .*colour"),
    ({"tree": {"num_steps": 5, "top_k": 10}}, "top_k"),
    ({"tree": {"num_steps": "five"}}, r"p.yaml.tree.num_steps: expected int, got 'five' \(str\)"),
    ({"threads": 1.5}, r"p.yaml.threads: expected null or int, got 1.5 \(float\)"),
    ({"table1": {"limit": "all"}}, r"p.yaml:table1.limit: expected null or int, got 'all' \(str\)"),
    ({"generation": {"max_new_tokens": 0}}, r"p.yaml.generation: generation limits must be >= 1"),
    ({"tree": {"num_steps": 1, "topk": 2, "num_draft_tokens": 64}}, r"p.yaml.tree: num_draft_tokens - 1 = 63 exceeds"),
])
def test_config_rejects_unknown_keys(tmp_path, extra, match):
    with pytest.raises(ConfigKeyError, match=match):
        load_table1_config(_preset(tmp_path, extra))


def test_config_rejects_unusable_values(tmp_path):
    with pytest.raises(ConfigKeyError, match="add acceptmoe"):
        load_table1_config("tiny", {"methods": ["count-b", "standard-sd"]})
    with pytest.raises(ConfigKeyError, match="evaluation split"):
        load_table1_config("tiny", {"world.calibration.split": "test"})
    with pytest.raises(KeyError, match="unknown method"):
        load_table1_config("tiny", {"methods": ["acceptmoe", "nope"]})
    with pytest.raises(ConfigKeyError, match="unknown task"):
        load_table1_config(_preset(tmp_path, {"tasks": ["gsm9k"]}))
    with pytest.raises(ConfigKeyError, match="missing required key"):
        load_table1_config(_without(tmp_path, "models"))


def _without(tmp_path: Path, key: str) -> Path:
    base = yaml.safe_load((Path(__file__).parents[2] / "configs/presets/tiny.yaml").read_text())
    base.pop(key)
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump(base))
    return path


# ----- B0 on synthetic traces -----
def _trace(index: int, set_sizes: list[list[int]]) -> Trace:
    """One trace: one block per entry of set_sizes, each with one set size per layer."""
    t = Trace(meta={"index": index})
    for step, sizes in enumerate(set_sizes):
        t.add_block(step, [-1, 0], [0], [[layer, s, 8, 10, s, 1.0] for layer, s in enumerate(sizes)])
    return t


def test_b0_pooled_mean_rounds_half_up():
    traces = [_trace(i, [[24, 25], [25, 25]]) for i in range(50)]         # mean 24.75 -> 25
    d = b0_rule.decide_b0(traces, B0Config(resamples=200))
    assert d.b0 == 25 and d.n_prompts == 50 and not d.first_crossed and not d.limited
    halves = [_trace(i, [[23, 24]]) for i in range(50)]                    # exactly 23.5 -> 24 (halves up)
    assert b0_rule.decide_b0(halves, B0Config(resamples=200)).b0 == 24
    below = [_trace(i, [[23, 24]] * 99 + [[23, 23]]) for i in range(50)]   # 23.4975: just below x.5 -> 23
    assert b0_rule.decide_b0(below, B0Config(resamples=200)).b0 == 23
    # pooled over blocks and layers, not a mean of per-prompt means: 2 blocks at 20 and 1 block at 29
    pooled = [_trace(0, [[20], [20]]), _trace(1, [[29]])]
    assert b0_rule.decide_b0(pooled, B0Config(resamples=200)).mean_set_size == pytest.approx(23.0)


def test_b0_uses_100_prompts_when_the_interval_crosses_a_boundary():
    rng = random.Random(0)
    first = [_trace(i, [[rng.choice([20, 27])]]) for i in range(50)]       # mean near 23.5, wide interval
    later = [_trace(50 + i, [[23]] * 40) for i in range(50)]               # many blocks at 23
    d = b0_rule.decide_b0(list(reversed(first + later)), B0Config(resamples=500))   # any order in
    assert d.first_crossed and d.n_prompts == 100 and d.b0 == 23
    narrow = b0_rule.decide_b0([_trace(i, [[23]]) for i in range(120)], B0Config(resamples=200))
    assert narrow.n_prompts == 50 and not narrow.first_crossed


def test_b0_with_fewer_prompts_than_the_rule_records_it():
    d = b0_rule.decide_b0([_trace(i, [[30, 31]]) for i in range(6)], B0Config(resamples=200))
    assert d.limited and d.n_prompts == 6 and d.available_prompts == 6 and d.b0 == 31
    assert b0_rule.B0Decision.from_json(d.to_json()) == d                  # the saved form reads back as it was
    with pytest.raises(ValueError, match="first prompts in order"):
        b0_rule.decide_b0([_trace(0, [[3]]), _trace(2, [[3]])], B0Config(resamples=50))


# ----- sample log -----
@pytest.mark.parametrize("damage", ["middle", "torn-then-newline", "not-a-row"])
def test_a_damaged_sample_log_is_one_user_error_naming_file_and_line(tmp_path, damage):
    from acceptmoe.errors import UserError

    path = tmp_path / "samples.jsonl"
    log = SampleLog(path)
    for i in range(3):
        log.append(f"k{i}", {"value": i})
    lines = path.read_text().splitlines(keepends=True)
    if damage == "middle":
        lines[1] = lines[1][:10] + "\x00garbage" + lines[1][10:]
        line = 2
    elif damage == "torn-then-newline":
        lines.append('{"key": "k3", "val\n')
        line = 4
    else:
        lines.insert(1, "[1, 2]\n")
        line = 2
    path.write_text("".join(lines))
    with pytest.raises(UserError, match=f"{path}:{line}: .*delete that line"):
        SampleLog(path)


def test_a_torn_last_line_without_newline_is_dropped(tmp_path):
    path = tmp_path / "samples.jsonl"
    SampleLog(path).append("k0", {"value": 0})
    path.write_text(path.read_text() + '{"key": "k1", "va')
    assert [r["key"] for r in SampleLog(path)] == ["k0"]


# ----- trace log -----
def test_trace_log_drops_torn_partial_and_unfinished_traces(tmp_path):
    path = tmp_path / "t.jsonl"
    log = TraceLog(path)
    for i in range(3):
        log.append(f"k{i}", _trace(i, [[4, 5], [6, 7]]))
    lines = path.read_text().splitlines(keepends=True)
    # k2 lost its last block line (crash mid-write), then a torn line follows
    path.write_text("".join(lines[:-1]) + '{"kind": "blo')
    again = TraceLog(path, keep={"k0", "k2"})                               # k1 has no finished sample row
    assert [t.meta["key"] for t in again.read()] == ["k0"] and "k0" in again and len(again) == 1
    assert [t.meta["key"] for t in load_traces(path)] == ["k0"]            # the file was rewritten cleanly
    again.append("k1", _trace(1, [[1]]))
    with pytest.raises(KeyError, match="already"):
        again.append("k1", _trace(1, [[1]]))


# ----- the real pipeline, end to end -----
@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    world.make_models(root)
    return root, world.write_preset(root, root)


@pytest.fixture(scope="module")
def full_run(setup):
    root, preset = setup
    assert table1.main(["--preset", str(preset), "--limit", "2", "--results", str(root / "full")]) == 0
    (run,) = (root / "full" / "table1" / "test").iterdir()
    return run


def test_table1_end_to_end_files_and_structure(full_run, capsys):
    run = full_run
    from acceptmoe.experiments.table1.table import OUTPUTS
    for name in ("config.json", "samples.jsonl", "summary.json", *OUTPUTS):
        assert (run / name).is_file(), name
    sandbox = json.loads((run / "config.json").read_text())["environment"]["sandbox"]
    assert sandbox == isolation().record()  # what the code sandbox could enforce here, fallbacks included
    methods = json.loads((run / "config.json").read_text())["config"]["methods"]      # configs/experiments/table1.yaml
    assert methods == [m for m in METHODS if m in methods] and len(methods) >= 6
    rows = list(SampleLog(run / "samples.jsonl"))
    assert len(rows) == 2 * 2 * len(methods) and len({r["key"] for r in rows}) == len(rows)
    for task in world.TASKS:
        b0 = json.loads((run / "b0" / "rand" / f"{task}.json").read_text())
        assert b0["limited"] and b0["n_prompts"] == 2 and b0["b0"] >= 2
        assert {r["budget"] for r in rows if r["task"] == task and r["method"] in ("count-b", "moe-spec", "acceptmoe-b")} == {b0["b0"]}
        assert json.loads((run / "calibration" / "rand" / f"{task}-train.json").read_text())["provenance"]["split"] == "train"
        for method in methods:                                             # every configured method ran
            traces = TraceLog(run / "traces" / "rand" / task / f"{method}.jsonl").read()
            assert len(traces) == 2 and {t.meta["index"] for t in traces} == {0, 1}
    sd = [r for r in rows if r["method"] == "standard-sd"]
    assert all(r["tau"] >= 1 and r["mean_set_size"] == 8 and 1 <= r["tokens"] <= 8 for r in sd)
    assert all(r["mean_set_size"] is None and r["tau"] == 1 for r in rows if r["method"] == "vanilla-ar")
    ar = {r["key"].replace("|vanilla-ar", ""): r["output_ids"] for r in rows if r["method"] == "vanilla-ar"}
    assert {r["key"].replace("|standard-sd", ""): r["output_ids"] for r in sd} == ar     # greedy SD is lossless
    md = (run / "table1.md").read_text()
    assert "Mean (unweighted)" in md and "Rel. change vs Vanilla AR" in md and "AcceptMoE-B" in md
    csv_lines = (run / "table1.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + 2 * 6 + 6 and csv_lines[0].startswith("model,task,method,n,accuracy")
    assert r"\begin{tabular}" in (run / "table1.tex").read_text()
    assert tables.main(["--results", str(run.parents[2])]) == 0               # rebuild from saved files only
    assert (run / "table1.md").read_text() == md
    assert table1.b0(["--run", str(run)]) == 0                              # recomputed B0 == saved B0
    assert "B0 = " in capsys.readouterr().out


def test_interrupted_run_resumes_to_the_same_table(setup, full_run, monkeypatch):
    root, preset = setup
    real_append, calls = SampleLog.append, {"n": 0}

    def append_then_crash(self, key, row):
        calls["n"] += 1
        if calls["n"] == 9:            # the 9th unit's trace is written, its row is not: a crash in between
            raise KeyboardInterrupt
        real_append(self, key, row)
    monkeypatch.setattr(SampleLog, "append", append_then_crash)
    assert table1.main(["--preset", str(preset), "--limit", "2", "--results", str(root / "cut")]) == 130
    monkeypatch.setattr(SampleLog, "append", real_append)
    (run,) = (root / "cut" / "table1" / "test").iterdir()
    assert len(SampleLog(run / "samples.jsonl")) == 8 and not (run / "summary.json").exists()
    assert table1.main(["--resume", str(run), "--allow-code-change"]) == 0   # the tree may be dirty here
    methods = json.loads((run / "config.json").read_text())["config"]["methods"]
    rows = list(SampleLog(run / "samples.jsonl"))
    assert len(rows) == 4 * len(methods) and len({r["key"] for r in rows}) == len(rows)
    for task in world.TASKS:
        for method in methods:
            assert len(TraceLog(run / "traces" / "rand" / task / f"{method}.jsonl")) == 2
    assert (run / "table1.md").read_text() == (full_run / "table1.md").read_text()
    assert (run / "table1.csv").read_text() == (full_run / "table1.csv").read_text()


def test_every_engine_a_run_opens_is_closed_even_when_interrupted(setup, monkeypatch):
    """One engine at a time holds the device: a stop mid-pair still closes the engine (`spine.engines.opened`),
    and so does a finished `calibrate`."""
    from acceptmoe.engine.engine import Engine
    root, preset = setup
    engines, real_init = [], Engine.__init__

    def init(self, *args, **kwargs):
        engines.append(self)
        real_init(self, *args, **kwargs)

    def stop(self, key, row):
        raise KeyboardInterrupt
    monkeypatch.setattr(Engine, "__init__", init)
    monkeypatch.setattr(SampleLog, "append", stop)
    assert table1.main(["--preset", str(preset), "--limit", "1", "--results", str(root / "stopped")]) == 130
    assert len(engines) == 1 and engines[0].model is None
    assert table1.calibrate(["--preset", str(preset), "--limit", "1", "--results", str(root / "cal")]) == 0
    assert len(engines) == 2 and engines[1].model is None
    with pytest.raises(RuntimeError, match="closed"):
        engines[1].generate([1], None, 1)
    engines[1].close()                                                       # a second close does nothing


def test_grading_in_worker_processes_gives_the_inline_rows(setup, full_run):
    """Replies graded by two spawned workers while the next batch (of one prompt) generates: the same rows,
    in the same order, as inline grading."""
    root, preset = setup
    data = yaml.safe_load(preset.read_text())
    data["generation"].update(batch=1, grading_workers=2)
    pooled = root / "pooled.yaml"
    pooled.write_text(yaml.safe_dump(data))
    assert table1.main(["--preset", str(pooled), "--limit", "2", "--results", str(root / "pooled")]) == 0
    (run,) = (root / "pooled" / "table1" / "test").iterdir()
    timing = ("prefill_s", "decode_s", "step_times", "wall_s", "load_avg")
    strip = lambda rows: [{k: v for k, v in r.items() if k not in timing} for r in rows]   # noqa: E731
    assert strip(SampleLog(run / "samples.jsonl")) == strip(SampleLog(full_run / "samples.jsonl"))


def test_replies_are_saved_in_unit_order_as_their_grades_arrive():
    from collections import deque
    from concurrent.futures import Future

    from acceptmoe.evals.tasks import Grade
    from acceptmoe.experiments.spine.grading import Reply, _save_ready
    futures = [Future() for _ in range(3)]
    waiting, saved = deque(Reply(i, f"k{i}", [], None, "", f) for i, f in enumerate(futures)), []
    save = lambda reply: saved.append(reply.key)                                           # noqa: E731
    futures[1].set_result(Grade(True, ""))
    _save_ready(waiting, save, wait=False)
    assert saved == []                                             # k1 is graded, but k0 comes first
    futures[0].set_result(Grade(False, ""))
    _save_ready(waiting, save, wait=False)
    assert saved == ["k0", "k1"]
    futures[2].set_exception(KeyboardInterrupt())
    _save_ready(waiting, save, wait=False, quiet=True)             # while a stop propagates: kept for resume
    assert saved == ["k0", "k1"] and len(waiting) == 1
    with pytest.raises(KeyboardInterrupt):
        _save_ready(waiting, save, wait=True)


def test_grading_workers_default_to_inline_on_a_cpu_engine():
    from acceptmoe.experiments.spine.config import load_world
    from acceptmoe.experiments.spine.grading import grading_workers
    world = load_world("tiny")
    assert world.device == "cpu" and grading_workers(world) == 0
    assert grading_workers(load_world("tiny", {"generation": {"grading_workers": 3}})) == 3
    gpu = load_world("paper")
    assert 0 < grading_workers(gpu) <= 4 or (os.cpu_count() or 1) == 1
    with pytest.raises(ConfigKeyError, match="grading_workers must be >= 0"):
        load_world("tiny", {"generation": {"grading_workers": -1}})


def test_each_graded_reply_is_saved_before_the_next_one_is_graded(setup, monkeypatch):
    """Prompts are generated a batch at a time, but each reply's row is saved as soon as it is graded: a
    stop while grading the second reply of the first batch keeps the first reply's row."""
    from acceptmoe.evals.tasks import Task
    root, preset = setup
    real, calls = Task.score_many, {"n": 0}

    def grade_then_stop(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Task, "score_many", grade_then_stop)
    assert table1.main(["--preset", str(preset), "--limit", "2", "--results", str(root / "per-unit")]) == 130
    (run,) = (root / "per-unit" / "table1" / "test").iterdir()
    assert len(SampleLog(run / "samples.jsonl")) == 1


# ----- the table's arithmetic on synthetic saved results -----
def _saved_run(tmp_path: Path, correct: dict[str, list[int]], drop: tuple[str, int] | None = None,
               tasks: tuple[str, ...] = ("tiny-gsm", "tiny-mbpp"), plus: dict | None = None,
               stats: dict[int, tuple] | None = None) -> Path:
    """Saved rows; stats: example index -> (accepted, steps, set_size_sum, block_layers) (default 6, 2, 30, 2)."""
    from acceptmoe.experiments.spine.runs import open_run
    cfg = load_table1_config("tiny", {"world.tasks": list(tasks), "methods": list(correct),
                                      "limit": 4, "world.bootstrap.resamples": 200})
    run = open_run("table1", "tiny", cfg, root=tmp_path)
    log = SampleLog(run.path / "samples.jsonl")
    for task in cfg.world.tasks:
        for method, values in correct.items():
            for i, c in enumerate(values):
                if (method, i) == drop and task == "tiny-mbpp":
                    continue
                key = f"tiny|{task}|{task}/{i}|{method}"
                details = {"base": bool(c), "plus": bool((plus or correct)[method][i])}
                accepted, steps, sizes, layers = (stats or {}).get(i, (6, 2, 30.0, 2))
                log.append(key, {"model": "tiny", "task": task, "method": method, "example_id": f"{task}/{i}",
                                 "index": i, "correct": bool(c), "accepted": accepted, "steps": steps,
                                 "set_size_sum": sizes, "block_layers": layers, "routed_union_sum": 20.0,
                                 "budget": None, "score_details": details})
    return run.path


def test_table_means_relative_change_and_paired_differences(tmp_path):
    run = _saved_run(tmp_path, {"vanilla-ar": [1, 1, 0, 0], "standard-sd": [1, 1, 1, 0], "acceptmoe": [1, 0, 1, 0]})
    t = build_table1(run)
    rec = {(r["task"], r["method"]): r for r in t.records}
    assert rec[("tiny-gsm", "standard-sd")]["accuracy"] == 75 and rec[("tiny-gsm", "acceptmoe")]["diff_vs_standard_sd"] == -25
    assert rec[("tiny-gsm", "acceptmoe")]["tau"] == 3 and rec[("tiny-gsm", "acceptmoe")]["mean_set_size"] == 15
    assert rec[("tiny-gsm", "vanilla-ar")]["tau"] is None and not t.incomplete
    assert t.means["standard-sd"]["accuracy"] == 75 and t.means["standard-sd"]["rel_change_vs_vanilla_ar"] == 50
    assert t.means["acceptmoe"]["diff_vs_standard_sd"] == -25
    assert t.means["acceptmoe"]["diff_low"] <= -25 <= t.means["acceptmoe"]["diff_high"]
    md = write_table1(run)
    assert "-25.0 [" in md and "| Mean (unweighted)" in md


def test_tau_and_set_size_are_pooled_over_prompts_that_differ(tmp_path):
    """tau = total accepted / total steps over a pair's prompts, not the mean of per-prompt ratios (which
    differs here: prompt 0 accepts 10 tokens in 2 steps, prompt 1 4 in 4)."""
    run = _saved_run(tmp_path, {"standard-sd": [1, 0], "acceptmoe": [1, 1]}, tasks=("tiny-gsm",),
                     stats={0: (10, 2, 40.0, 2), 1: (4, 4, 10.0, 8)})
    rec = {r["method"]: r for r in build_table1(run).records}
    assert rec["acceptmoe"]["tau"] == pytest.approx(14 / 6) != pytest.approx((10 / 2 + 4 / 4) / 2)
    assert rec["acceptmoe"]["mean_set_size"] == pytest.approx(50 / 10) != pytest.approx((40 / 2 + 10 / 8) / 2)


def test_pairs_without_disagreement_get_a_score_interval_not_zero_width(tmp_path):
    import numpy as np

    from acceptmoe.evals.stats import paired_proportions

    outcomes = [1, 1, 0, 1]
    run = _saved_run(tmp_path, {"vanilla-ar": outcomes, "standard-sd": outcomes})
    t = build_table1(run)
    rec = {(r["task"], r["method"]): r for r in t.records}
    low, high = rec[("tiny-gsm", "vanilla-ar")]["diff_low"], rec[("tiny-gsm", "vanilla-ar")]["diff_high"]
    want = paired_proportions(np.array(outcomes, float), np.array(outcomes, float))
    assert low == pytest.approx(-high) and high == pytest.approx(100 * want.high) and high > 0
    mean = t.means["vanilla-ar"]
    pooled = paired_proportions(np.array(outcomes * 2, float), np.array(outcomes * 2, float))
    assert mean["diff_vs_standard_sd"] == 0 and mean["diff_high"] == pytest.approx(100 * pooled.high)


def test_evalplus_tasks_get_plus_rows_from_the_same_replies(tmp_path):
    correct = {"standard-sd": [1, 1, 1, 0], "acceptmoe": [1, 1, 0, 0]}
    plus = {"standard-sd": [1, 0, 1, 0], "acceptmoe": [1, 0, 0, 0]}
    run = _saved_run(tmp_path, correct, tasks=("humaneval", "tiny-gsm"), plus=plus)
    t = build_table1(run)
    base = {(r["task"], r["method"]): r["accuracy"] for r in t.records}
    extra = {(r["task"], r["method"]): r["accuracy"] for r in t.plus}
    assert base[("humaneval", "standard-sd")] == 75 and extra[("humaneval+", "standard-sd")] == 50
    assert extra[("humaneval+", "acceptmoe")] == 25 and ("tiny-gsm+", "acceptmoe") not in extra
    assert t.means["standard-sd"]["pairs"] == 2                      # the mean is over base pairs only
    assert "HumanEval+ / MBPP+" in write_table1(run)


def test_table_of_a_partial_run_uses_prompts_every_method_finished(tmp_path):
    run = _saved_run(tmp_path, {"standard-sd": [1, 1, 1, 0], "acceptmoe": [1, 0, 1, 0]}, drop=("acceptmoe", 3))
    t = build_table1(run)
    assert {r["n"] for r in t.records if r["task"] == "tiny-mbpp"} == {3}
    assert t.incomplete == ["tiny|tiny-mbpp: 3 prompts finished by every method"]
    assert t.means["acceptmoe"]["rel_change_vs_vanilla_ar"] is None         # no Vanilla AR in this run
    assert "Incomplete pairs" in write_table1(run)


def test_prompts_use_the_chat_template_and_decoding_keeps_harmony_markers(setup):
    from acceptmoe.experiments.spine.prompts import decode, load_tokenizer, prompt_ids, resolve_checkpoint
    root, _ = setup
    tok = load_tokenizer(root / "target")
    ids = prompt_ids(tok, [{"role": "user", "content": "2 + 3 = ?"}])
    assert tok.decode(ids) == "<|im_start|>user\n2 + 3 = ?<|im_end|>\n<|im_start|>assistant\n"
    reply = tok("#### 5", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert decode(tok, reply, "plain") == "#### 5" and decode(tok, reply, "harmony") == "#### 5<|im_end|>"
    with pytest.raises(FileNotFoundError, match="train-tiny"):
        resolve_checkpoint("models/absent/target")


def test_resume_refuses_other_code_unless_allowed(full_run, monkeypatch, capsys):
    saved = json.loads((full_run / "config.json").read_text())["environment"]
    monkeypatch.setattr(options, "code_state", lambda: {"git_commit": "f" * 40, "git_dirty": False})
    with pytest.raises(options.UserError, match=r"the code differs from the run's \(commit .* -> ffffffffffff"):
        options.check_same_code(saved, full_run, allowed=False)
    options.check_same_code(saved, full_run, allowed=True)
    monkeypatch.setattr(options, "code_state", lambda: {"git_commit": saved["git_commit"], "git_dirty": True})
    with pytest.raises(options.UserError, match="uncommitted local changes"):
        options.check_same_code({**saved, "git_dirty": False}, full_run, allowed=False)
    lines = (full_run / "resumes.jsonl").read_text().splitlines() if (full_run / "resumes.jsonl").exists() else []
    assert all({"git_commit", "git_dirty", "time"} <= set(json.loads(x)) for x in lines)


def test_b0_limited_when_the_fallback_needs_more_prompts_than_exist():
    # 60 prompts whose first-50 interval crosses x.5: the rule wants 100 but only 60 exist
    traces = [_trace(i, [[24 if i % 2 else 25]]) for i in range(60)]
    d = b0_rule.decide_b0(traces, B0Config(resamples=200))
    assert d.first_crossed and d.available_prompts == 60 and d.limited


def test_fixed_template_date_makes_prompts_day_independent():
    from acceptmoe.experiments.spine.config import ModelEntry
    from acceptmoe.experiments.spine.prompts import load_tokenizer, prompt_ids
    tok = load_tokenizer(Path(__file__).parents[2] / "models/tiny/target")
    tok.chat_template = "Current date: {{ strftime_now('%Y-%m-%d') }}\n{% for m in messages %}{{ m.content }}{% endfor %}"
    model = ModelEntry("m", "t", "d", template_date="2025-08-05")
    ids = prompt_ids(tok, [{"role": "user", "content": "hi"}], model)
    assert tok.decode(ids).startswith("Current date: 2025-08-05")
    with pytest.raises(ConfigKeyError, match="not YYYY-MM-DD"):
        ModelEntry("m", "t", "d", template_date="Aug 5")


def test_runs_record_the_engine_that_made_their_rows(full_run):
    lines = [json.loads(x) for x in (full_run / "engines.jsonl").read_text().splitlines()]
    assert lines and all(e["engine"] == "native" and e["model"] == "rand" and e["version"] for e in lines)


def test_worlds_runs_table1_on_each_world_and_reports_the_spread(setup, tmp_path):
    """`worlds`: the committed world plus one per seed (here: an already trained folder, so nothing trains),
    one Table 1 over all of them, and the spread table from the saved results."""
    from acceptmoe.experiments.table1 import worlds

    root, preset = setup
    world.make_models(tmp_path / "w" / "seed-5", seed=5)
    assert worlds.main(["--preset", str(preset), "--limit", "2", "--seeds", "5", "--worlds-dir", str(tmp_path / "w"),
                        "--methods", "standard-sd", "acceptmoe", "--results", str(tmp_path / "r")]) == 0
    (run,) = (tmp_path / "r" / "worlds" / "test").iterdir()
    rows = list(SampleLog(run / "samples.jsonl"))
    assert {r["model"] for r in rows} == {"rand", "rand-s5"} and len(rows) == 2 * 2 * len(world.TASKS) * 2
    per_world, across, _ = worlds.spread(run)
    assert [(r[0], r[1]) for r in per_world] == [(w, m) for w in ("rand", "rand-s5") for m in ("standard-sd", "acceptmoe")]
    assert [r[0] for r in across] == ["acceptmoe"] and across[0][1] == 2
    md = (run / "worlds.md").read_text()
    assert "Across worlds" in md and "rand-s5" in md and (run / "table1.md").is_file()
    assert tables.main(["--run", str(run)]) == 0 and (run / "worlds.md").read_text() == md   # rebuilt from files
    # the claims table reads the worlds run: one row per Table 1 claim across the worlds, beside the world's own
    from acceptmoe.experiments.claims.read import worlds_rows
    from acceptmoe.experiments.claims.table import claim_rows, measured
    across = {m.claim: m for m in worlds_rows(run)}
    assert {"accuracy-vs-sd", "tau-parity"} <= set(across)
    acc = across["accuracy-vs-sd"]
    assert len(acc.spread) == 2 and acc.estimate == pytest.approx(sum(acc.spread) / 2)
    assert [f"{x:+.1f}" for x in acc.spread] == [r[4].split()[0] for r in per_world if r[1] == "acceptmoe"]
    assert acc.low <= acc.estimate <= acc.high and acc.note == "across 2 worlds"
    records = claim_rows(measured([run]))
    row = next(r for r in records if r["id"] == "accuracy-vs-sd" and r["measured"])
    assert row["worlds"].startswith("2 worlds: ") and "across 2 worlds" in row["claim"]


def test_the_worlds_interval_carries_the_spread_between_worlds():
    """Two worlds whose differences disagree: resampling worlds too gives a wider interval than resampling the
    prompts of one world, and covers both worlds' means."""
    import numpy as np

    from acceptmoe.experiments.spine.config import BootstrapConfig
    from acceptmoe.experiments.table1.table import strata_diff, worlds_interval

    bs = BootstrapConfig(resamples=2000, seed=0)
    rng = np.random.default_rng(1)
    base = [np.zeros(200) for _ in range(2)]
    up = [1.0 * (rng.random(200) < 0.1) for _ in range(2)]                # world A: about +10 pp per task
    down = [-1.0 * (rng.random(200) < 0.1) for _ in range(2)]             # world B: about -10 pp
    lo, hi = worlds_interval({"a": up, "b": down}, bs)
    _, lo_a, hi_a = strata_diff(up, base, bs)
    assert lo < -5 and hi > 5 and hi - lo > 2 * (hi_a - lo_a)
    same_lo, same_hi = worlds_interval({"a": up, "a2": up}, bs)
    assert lo_a - 2 <= same_lo <= same_hi <= hi_a + 2                   # identical worlds: the prompts' width
    zeros = {"a": [np.zeros(150)] * 4, "b": [np.zeros(150)] * 4}         # no prompt disagrees anywhere
    assert worlds_interval(zeros, bs) == strata_diff([np.zeros(150)] * 8, [np.zeros(150)] * 8, bs)[1:]


def test_a_world_cut_by_a_training_time_guard_is_refused(tmp_path):
    import shutil

    from acceptmoe.errors import UserError
    from acceptmoe.experiments.spine.runs import REPO
    from acceptmoe.experiments.table1.worlds import check_complete

    for part in ("target", "draft"):
        (tmp_path / part).mkdir()
        shutil.copy(REPO / "models/tiny" / part / "train_summary.json", tmp_path / part)
    check_complete(tmp_path)                                  # the committed world trained to the end
    summary = json.loads((tmp_path / "target/train_summary.json").read_text())
    summary["tokens"] = 6_000_000
    (tmp_path / "target/train_summary.json").write_text(json.dumps(summary))
    with pytest.raises(UserError, match="time guard.*6,000,000 of 8,000,000 tokens"):
        check_complete(tmp_path)
