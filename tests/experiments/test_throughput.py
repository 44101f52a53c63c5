"""Throughput runners (fig3, fig4, table2, sweep, fig5) and the calibration study end to end on the tiny random
world, resuming after an interruption, plus the counter arithmetic on a hand-computable offloaded store; on the
real tiny world, where a reply ends by itself, the prompts with the longest replies, the share of timed tokens
after EOS and the natural-text protocol."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.store import ExpertMath, make_store
from acceptmoe.experiments import tables
from acceptmoe.experiments.spine.config import ConfigKeyError
from acceptmoe.experiments.spine.runs import SampleLog
from acceptmoe.experiments.study import commands as calibration_study
from acceptmoe.experiments.throughput import commands as perf
from acceptmoe.experiments.throughput.config import ThroughputConfigError, load_throughput_config
from acceptmoe.experiments.throughput.records import counter_metrics
from acceptmoe.experiments.throughput.timing import PLACEBO, POOLED, Boot, timed_records
from acceptmoe.methods import UnknownMethodError, get_method

import runner_world as world

THROUGHPUT = {"resident": {"prompts": 3, "repetitions": 2},
              "offload": {"slots": 3, "prompts": 3, "repetitions": 2},
              "sweep": {"budgets": [2, 4], "prompts": 2}, "bootstrap_resamples": 200}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("perf")
    world.make_models(root)
    preset = world.write_preset(root, root)
    data = yaml.safe_load(preset.read_text())
    data.update({"throughput": THROUGHPUT, "calibration-study": {"bootstrap_resamples": 200}})
    preset.write_text(yaml.safe_dump(data))
    return root, preset


def _run(root: Path, command: str) -> Path:
    (run,) = (root / command / "test").iterdir()
    return run


def _nonempty(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


@pytest.fixture(scope="module")
def fig3_run(setup):
    root, preset = setup
    assert perf.fig3(["--preset", str(preset), "--limit", "2", "--results", str(root / "r")]) == 0
    return _run(root / "r", "fig3")


def test_fig3_files_rows_and_ratios(fig3_run, setup):
    run = fig3_run
    for name in ("config.json", "summary.json", "fig3.png", "fig3.pdf", "throughput-resident.md",
                 "throughput-resident.csv"):
        assert _nonempty(run / name), name
    rows = list(SampleLog(run / "samples.jsonl"))
    cfg = load_throughput_config(setup[1], ("resident",))
    variants = cfg.names("resident")
    assert variants[-1] == PLACEBO.name and len(variants) == 6                # the five variants and the placebo
    assert len(rows) == 2 * 2 * 6 * 2 and len({r["key"] for r in rows}) == len(rows)   # reps x tasks x variants x prompts
    assert all(r["tokens"] == 6 and r["wall_s"] > 0 and r["misses"] == 0 and r["loads"] == 0 for r in rows)
    for task in world.TASKS:                                    # B0 and p_hat came from the Table 1 code
        b0 = json.loads((run / "budgets" / "b0" / "rand" / f"{task}.json").read_text())["b0"]
        assert {r["budget"] for r in rows if r["task"] == task and r["variant"] in ("moe-spec", "acceptmoe-b")} == {b0}
    cells = {}                                                   # rows are in the order they ran
    for n, r in enumerate(rows):
        cells.setdefault((r["rep"], r["task"], r["index"]), []).append((n, r["variant"]))
    for (rep, _, index), ran in cells.items():                   # a cell's variants back to back, rotated
        assert [n for n, _ in ran] == list(range(ran[0][0], ran[0][0] + len(variants)))
        start = (index + rep) % len(variants)
        assert [v for _, v in ran] == list(variants[start:] + variants[:start])
    recs = timed_records(rows, "resident", variants, 2, Boot(200, 0.95, 0))
    sd = [r for r in recs if r["variant"] == "standard-sd"]
    assert len(recs) == 3 * 6 and all(r["ratio_vs_standard_sd"] == pytest.approx(1.0) for r in sd)
    ar = next(r for r in recs if r["variant"] == "vanilla-ar")
    assert ar["tau"] is None and ar["reps"] == 2 and len(ar["ratios_per_rep"]) == 2
    pooled = {r["variant"]: r for r in recs if r["task"] == POOLED}
    assert pooled["acceptmoe"]["ratio_n"] == 4 and pooled["acceptmoe"]["beyond_placebo"] in (-1, 0, 1)
    assert pooled["acceptmoe"]["ratio_low"] <= pooled["acceptmoe"]["ratio_vs_standard_sd"] <= pooled["acceptmoe"]["ratio_high"]
    assert "beyond_placebo" not in pooled[PLACEBO.name] and "beyond placebo" in (run / "throughput-resident.md").read_text()
    assert tables.main(["--run", str(run)]) == 0                          # rebuilt from saved rows only


def test_an_engine_that_cannot_switch_plans_freely_times_variants_in_blocks(setup, fig3_run, monkeypatch):
    """An engine whose plan changes cost a restart (SGLang with graphs) runs each variant over a task's prompts,
    the variants' order rotated per repetition; the same rows as the interleaved run."""
    from acceptmoe.engine.engine import Engine
    root, preset = setup
    monkeypatch.setattr(Engine, "capabilities", dataclasses.replace(Engine.capabilities, switches_plans_freely=False))
    assert perf.fig3(["--preset", str(preset), "--limit", "2", "--results", str(root / "blocked"),
                      "--budgets-from", str(fig3_run / "budgets")]) == 0
    rows = list(SampleLog(_run(root / "blocked", "fig3") / "samples.jsonl"))
    variants = load_throughput_config(preset, ("resident",)).names("resident")
    for rep in (0, 1):
        ran = list(dict.fromkeys(r["variant"] for r in rows if r["rep"] == rep))
        assert ran == list(variants[rep:] + variants[:rep])
    assert {r["key"] for r in rows} == {r["key"] for r in SampleLog(fig3_run / "samples.jsonl")}


def test_fig3_resumes_without_duplicates(setup, fig3_run, monkeypatch):
    root, preset = setup
    real_append, calls = SampleLog.append, {"n": 0}

    def append_then_crash(self, key, row):
        calls["n"] += 1
        if calls["n"] == 7 and key.startswith("resident"):
            raise KeyboardInterrupt
        real_append(self, key, row)
    monkeypatch.setattr(SampleLog, "append", append_then_crash)
    args = ["--preset", str(preset), "--limit", "2", "--results", str(root / "cut"),
            "--budgets-from", str(fig3_run / "budgets")]
    assert perf.fig3(args) == 130
    monkeypatch.setattr(SampleLog, "append", real_append)
    run = _run(root / "cut", "fig3")
    assert 0 < len(SampleLog(run / "samples.jsonl")) < 48 and not (run / "summary.json").exists()
    assert perf.fig3(["--resume", str(run), "--allow-code-change"]) == 0
    rows = list(SampleLog(run / "samples.jsonl"))
    assert len(rows) == 48 and {r["key"] for r in rows} == {r["key"] for r in SampleLog(fig3_run / "samples.jsonl")}
    assert not (run / "budgets").exists() and _nonempty(run / "fig3.png")


def test_fig5_offload_counters_sweep_and_figures(setup, fig3_run):
    root, preset = setup
    assert perf.fig5(["--preset", str(preset), "--limit", "2", "--results", str(root / "r"),
                      "--budgets-from", str(fig3_run / "budgets")]) == 0
    run = _run(root / "r", "fig5")
    for name in ("fig5.png", "fig5.pdf", "fig5.csv", "fig4.png", "table2.md", "table2.csv", "table2.tex",
                 "sweep.md", "sweep.csv", "sweep.png", "throughput-offload.md"):
        assert _nonempty(run / name), name
    rows = list(SampleLog(run / "samples.jsonl"))
    counters = [r for r in rows if r["phase"] == "offload-counters"]
    assert len(counters) == 2 * 5 * 2 and all(r["store"] == "offloaded" for r in counters)   # with the placebo
    expert = counters[0]["bytes"] // max(1, counters[0]["loads"])
    assert all(r["bytes"] == r["loads"] * expert and r["loads"] == r["misses"] for r in counters)
    assert all("correct" in r and r["wait_s"] <= r["wall_s"] for r in counters)
    assert all(r["copy_s"] == r["wait_s"] for r in counters)     # CPU: a load copies inline, its stall is the copy
    t2 = {(r["task"], r["variant"]): r for r in _csv(run / "table2.csv")}
    for task in world.TASKS:
        sel = [r for r in counters if r["task"] == task and r["variant"] == "standard-sd"]
        want = counter_metrics(sel)
        assert float(t2[(task, "standard-sd")]["bytes_per_token"]) == pytest.approx(want["bytes_per_token"])
        assert float(t2[(task, "standard-sd")]["hit_rate"]) == pytest.approx(want["hit_rate"])
        assert float(t2[(task, "standard-sd")]["stall_share"]) == pytest.approx(want["stall_share"])   # wait_s
    sweep_rows = [r for r in rows if r["phase"] == "sweep"]
    assert {r["variant"] for r in sweep_rows} == {"acceptmoe-b@2", "acceptmoe-b@4", "standard-sd", "acceptmoe"}
    assert {r["budget"] for r in sweep_rows if r["variant"] == "acceptmoe-b@4"} == {4}
    timed = [r for r in rows if r["phase"] == "offload-timed"]
    assert len(timed) == 2 * 2 * 5 * 2                                          # with the placebo
    counts = {}                                     # each variant continues from its own pool, whatever ran before
    for r in timed:
        counts.setdefault((r["variant"], r["task"], r["index"]), set()).add((r["loads"], r["hits"], r["misses"]))
    assert all(len(c) == 1 for c in counts.values()), counts                   # the same in both repetitions
    sd, placebo = ({k[1:]: c for k, c in counts.items() if k[0] == v} for v in ("standard-sd", "standard-sd@placebo"))
    assert sd == placebo                                                       # the placebo is Standard SD


def _csv(path: Path) -> list[dict]:
    import csv
    return list(csv.DictReader(path.open()))


@pytest.mark.parametrize("command, outputs", [(perf.fig4, ("fig4.png", "table2.md")), (perf.table2, ("table2.tex",)),
                                              (perf.sweep, ("sweep.png", "sweep.md"))])
def test_each_command_writes_its_outputs(setup, fig3_run, command, outputs):
    root, preset = setup
    name = command.__name__
    assert command(["--preset", str(preset), "--limit", "1", "--results", str(root / "each"),
                         "--budgets-from", str(fig3_run / "budgets")]) == 0
    run = _run(root / "each", name)
    assert all(_nonempty(run / o) for o in outputs)


ADMITTING = {"fig3": ("--resident-methods", "standard-sd", "acceptmoe-costed", "standard-sd-survival"),
             "fig4": ("--offload-methods", "acceptmoe", "acceptmoe-costed", "standard-sd-prefix")}


@pytest.mark.parametrize("command", ["fig3", "fig4"])
def test_admitting_methods_run_in_the_timed_phases(setup, command):
    """fig3 and fig4 time the token-side admitting methods named on the command line, each with the committed
    verify-cost profile of its phase's store (the offloaded one carries the fetch cost), copied into the run."""
    from acceptmoe.costs.verify import default_profile, load_profile
    root, preset = setup
    flag, *methods = ADMITTING[command]
    assert getattr(perf, command)(["--preset", str(preset), "--limit", "1", "--results", str(root / "adm"), flag,
                                   *methods]) == 0
    run = _run(root / "adm", command)
    rows = list(SampleLog(run / "samples.jsonl"))
    phases = ("resident",) if command == "fig3" else ("offload-timed", "offload-counters")
    placebo = (PLACEBO.name,) if "standard-sd" in methods else ()
    for phase in phases:
        ran = [r for r in rows if r["phase"] == phase]
        assert {r["variant"] for r in ran} == {*methods, *placebo}
        assert all(r["tokens"] > 0 for r in ran)
    store = "resident" if command == "fig3" else "offloaded"
    saved = json.loads((run / ("verify-cost.json" if store == "resident" else "verify-cost-offloaded.json")).read_text())
    assert saved["profile"] == str(default_profile(store)) and saved["cost"] == load_profile(saved["profile"]).to_json()
    assert (saved["cost"]["fetch_per_byte_s"] is None) == (store == "resident")
    report = (run / ("throughput-resident.md" if command == "fig3" else "throughput-offload.md")).read_text()
    assert all(get_method(m).label in report for m in methods if m != "standard-sd")


def test_calibration_study_end_to_end_after_an_interruption(setup, fig3_run, monkeypatch):
    root, preset = setup
    real_append, calls = SampleLog.append, {"n": 0}

    def append_then_crash(self, key, row):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        real_append(self, key, row)
    monkeypatch.setattr(SampleLog, "append", append_then_crash)
    assert calibration_study.main(["--preset", str(preset), "--limit", "2", "--results", str(root / "r"),
                                   "--budgets-from", str(fig3_run / "budgets")]) == 130
    monkeypatch.setattr(SampleLog, "append", real_append)
    run = _run(root / "r", "calibration-study")
    assert len(SampleLog(run / "samples.jsonl")) == 4
    assert calibration_study.main(["--resume", str(run), "--allow-code-change"]) == 0
    md = (run / "calibration-study.md").read_text()
    assert "Beta sensitivity" in md and "on-policy" in md and "B0 train" in md
    rows = list(SampleLog(run / "samples.jsonl"))
    variants = {r["variant"] for r in rows}
    assert {"standard-sd", "acceptmoe@beta=0.25", "acceptmoe@beta=0.5", "acceptmoe@beta=1", "acceptmoe@onpolicy"} <= variants
    assert len({r["key"] for r in rows}) == len(rows)
    for task in world.TASKS:
        assert json.loads((run / "b0-train" / "rand" / f"{task}.json").read_text())["n_prompts"] == 2
        table = json.loads((run / "onpolicy" / "rand" / f"{task}-train.json").read_text())
        assert table["provenance"]["policy"] == "masked"
    assert _nonempty(run / "calibration-study-phat.csv")


# ----- config and counter arithmetic -----
def test_throughput_config_rejects_unknown_keys_and_bad_values(tmp_path):
    base = yaml.safe_load((Path(__file__).parents[2] / "configs/presets/tiny.yaml").read_text())
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({**base, "throughput": {"offload": {"slot": 3}}}))
    with pytest.raises(ConfigKeyError, match="slot"):
        load_throughput_config(path, ("offload-timed",))
    with pytest.raises(UnknownMethodError, match="unknown method 'fast-moe'.*; valid: vanilla-ar"):
        load_throughput_config("tiny", ("resident",), {"resident.variants": ["acceptmoe", "fast-moe"]})
    with pytest.raises(ThroughputConfigError, match=r"variants\[0\]: unknown variant key\(s\) \['methd'\]"):
        load_throughput_config("tiny", ("resident",), {"resident.variants": [{"methd": "acceptmoe"}]})
    cfg = load_throughput_config("tiny", ("offload-timed",), {"offload.variants": ["acceptmoe", {"method": "acceptmoe",
                                                                                                "prune": False}]})
    assert cfg.names("offload-timed") == ("acceptmoe", "acceptmoe-noprune")
    assert cfg.pruning_pair() == ("acceptmoe", "acceptmoe-noprune")
    with pytest.raises(ThroughputConfigError, match="phases"):
        load_throughput_config("tiny", ("warp",))
    assert load_throughput_config("paper", ("resident",)).warmup_index("resident") == 50


def test_counter_arithmetic_matches_the_store_on_a_hand_computed_case():
    """4 experts, 2 slots, H=4, I=2: an expert is w1 [4, 4] + w2 [4, 2] = 24 fp32 = 96 bytes.
    pass 1 routes {0, 1}: 2 misses (2 loads); pass 2 {1, 2}: hit 1, miss 2 (load; evicts 0, the LRU);
    pass 3 {0, 1, 2, 3} exceeds the pool: resident 1, 2 are hits, 0 and 3 misses loaded in a second wave.
    Totals: 3 hits, 5 misses, 5 loads, 480 bytes."""
    torch.manual_seed(0)
    layers = {0: {"w1": torch.randn(4, 4, 4), "w2": torch.randn(4, 4, 2)}}
    store = make_store("offloaded", ExpertMath("swiglu", torch.float32), layers, 4, "cpu", slots=2)
    x = torch.randn(2, 4)
    for ids in ([[0, 1]], [[1, 2]], [[0, 1], [2, 3]]):
        ids = torch.tensor(ids)
        store.run(0, x[:len(ids)], ids, torch.full(ids.shape, 0.5))
    total = store.stats()["total"]
    assert (total["hits"], total["misses"], total["loads"], total["bytes"]) == (3, 5, 5, 480)
    assert total["hit_rate"] == pytest.approx(3 / 8)
    row = {"tokens": 4, "wall_s": 4 * total["wait_s"], **{k: total[k] for k in ("hits", "misses", "loads", "bytes",
                                                                                  "wait_s")}}
    m = counter_metrics([row, {**row, "tokens": 6}])          # pooled: 960 bytes over 10 tokens
    assert m["bytes_per_token"] == pytest.approx(96.0) and m["loads_per_token"] == pytest.approx(1.0)
    assert m["hit_rate"] == pytest.approx(3 / 8) and m["stall_share"] == pytest.approx(0.25)


# ----- where a reply ends by itself -----
@pytest.fixture(scope="module")
def tiny_engine():
    from acceptmoe.engine import TreeShape, load_engine
    from acceptmoe.evals.tasks import get_task
    from acceptmoe.experiments.spine.prompts import load_tokenizer, prompt_ids
    root = Path(__file__).parents[2] / "models" / "tiny"
    engine = load_engine(root, tree=TreeShape(5, 10, 64))
    task, tok = get_task("tiny-gsm"), load_tokenizer(root / "target")
    return engine, [prompt_ids(tok, task.messages(ex)) for ex in task.load("test", 2)]


@pytest.mark.parametrize("method", ["vanilla-ar", "standard-sd"])
def test_natural_end_is_where_a_stop_at_eos_generation_stops(tiny_engine, method):
    """A timed generation runs past EOS; its NaturalEnd is exactly the reply, the steps and the seconds a
    generation that stops at EOS has (greedy decoding: the same tokens up to there)."""
    from acceptmoe.experiments.spine.rows import NaturalEnd
    from acceptmoe.methods import Variant
    engine, prompts = tiny_engine
    plan = Variant(method).bind(engine.fit)
    for ids in prompts:
        forced = engine.generate(ids, plan, 64, GenerationOptions(ignore_eos=True, trace_layers=False))
        stopped = engine.generate(ids, plan, 64, GenerationOptions(trace_layers=False))
        assert stopped.stop_reason == "eos" and len(forced.tokens) == 64
        end = NaturalEnd.of(forced, engine.eos_token_ids)
        assert end.natural_tokens == len(stopped.tokens) < 64
        assert forced.tokens[:end.natural_tokens] == stopped.tokens
        assert end.natural_steps == len(stopped.accept_lengths)
        assert end.natural_s == pytest.approx(forced.prefill_time + sum(forced.step_times[:end.natural_steps]))
        assert sum(forced.accept_lengths[:end.natural_steps]) + 1 >= end.natural_tokens
    whole = NaturalEnd.of(forced, set())                              # no EOS among the timed tokens
    assert (whole.natural_tokens, whole.natural_steps) == (None, len(forced.accept_lengths))


# ----- timed text that is text: prompts by reply length, the share after EOS, the natural-text protocol -----
def test_longest_reply_prompts_are_the_longest_greedy_replies(tiny_engine, tmp_path, monkeypatch):
    """The timed prompts are the candidates whose greedy replies (measured here by a stop-at-EOS generation of the
    real tiny target) are longest, ties to the lower index, then the warm-up; the lengths are measured once per
    run folder, and a file of other candidates is refused."""
    from acceptmoe.evals.tasks import get_task
    from acceptmoe.experiments.spine.prompts import load_tokenizer, prompt_ids
    from acceptmoe.experiments.throughput import prompts
    from acceptmoe.methods import Variant
    cfg = load_throughput_config("tiny", ("resident",), {"prompt_set.order": "longest_reply",
                                                         "prompt_set.candidates": 12, "resident.prompts": 3, "offload.prompts": 3,
                                                         "world.tasks": ["tiny-humaneval"], "world.threads": 1})
    model = cfg.world.models[0]
    chosen = prompts.examples_for(cfg, "resident", "tiny-humaneval", model, tmp_path)
    engine, _ = tiny_engine
    tok, task = load_tokenizer(Path(model.target)), get_task("tiny-humaneval")
    plan = Variant("vanilla-ar").bind(engine.fit)
    cands = task.load("test", 12)
    untraced, cap = GenerationOptions(trace_layers=False), cfg.world.generation.max_new_tokens
    lengths = [len(engine.generate(prompt_ids(tok, task.messages(ex)), plan, cap, untraced).tokens) for ex in cands]
    order = sorted(range(12), key=lambda i: (-lengths[i], i))
    assert [ex["id"] for ex in chosen] == [cands[i]["id"] for i in order[:4]]          # 3 timed + the warm-up
    assert lengths[order[3]] >= max(lengths[i] for i in order[4:])
    assert prompts.examples_for(cfg, "sweep", "tiny-humaneval", model, tmp_path) == task.load("test", 15)
    monkeypatch.setattr(prompts, "opened", lambda *a, **k: pytest.fail("measured twice"))
    assert prompts.examples_for(cfg, "resident", "tiny-humaneval", model, tmp_path) == chosen
    other = load_throughput_config("tiny", ("resident",), {"prompt_set.order": "longest_reply",
                                                           "prompt_set.candidates": 10, "resident.prompts": 3, "offload.prompts": 3,
                                                           "world.tasks": ["tiny-humaneval"]})
    with pytest.raises(ValueError, match="lists other tiny-humaneval candidates"):
        prompts.examples_for(other, "resident", "tiny-humaneval", model, tmp_path)
    with pytest.raises(ThroughputConfigError, match="prompt_set.candidates 3 < 21"):
        load_throughput_config("tiny", ("resident",), {"prompt_set.order": "longest_reply", "prompt_set.candidates": 3})


@pytest.fixture(scope="module")
def natural_run(tmp_path_factory):
    """A small resident run of the real tiny world: two tiny-gsm prompts forced to 48 tokens (replies end at about
    25), two repetitions."""
    from acceptmoe.experiments.spine.runs import open_run
    from acceptmoe.experiments.throughput.runner import run_experiment
    cfg = load_throughput_config("tiny", ("resident",), {
        "limit": 2, "world.tasks": ["tiny-gsm"], "world.generation.timed_tokens": 48, "world.threads": 1,
        "prompt_set.order": "index",
        "resident.variants": ["vanilla-ar", "standard-sd"], "resident.repetitions": 2, "natural_min_tokens": 8})
    run = open_run("fig3", "tiny", cfg, root=tmp_path_factory.mktemp("natural"))
    run_experiment(cfg, run, show_progress=False)
    return run.path


def test_after_eos_share_and_the_natural_text_protocol(natural_run, tmp_path):
    from acceptmoe.experiments.throughput.report import write_outputs
    from acceptmoe.experiments.throughput.timing import after_eos

    def natural_records(rows, variants, min_tokens):
        return timed_records(rows, "resident", variants, 2, Boot(200, 0.95, 0), natural=True, min_tokens=min_tokens)
    rows = list(SampleLog(natural_run / "samples.jsonl"))
    assert all(r["tokens"] == 48 and r["natural_tokens"] is not None and r["natural_tokens"] < 48 for r in rows)
    want = sum(48 - r["natural_tokens"] for r in rows) / (48 * len(rows))
    assert after_eos(rows) == pytest.approx(want) and want > 0.3
    recs = natural_records(rows, ("vanilla-ar", "standard-sd"), 8)
    sd = [r for r in rows if r["variant"] == "standard-sd"]
    mine = next(r for r in recs if r["variant"] == "standard-sd")
    assert mine["natural_prompts"] == 2 and mine["natural_ratio_vs_standard_sd"] == pytest.approx(1.0)
    assert mine["natural_tokens_per_s"] == pytest.approx(sum(r["natural_tokens"] for r in sd)
                                                         / sum(r["natural_s"] for r in sd))
    assert mine["natural_tau"] == pytest.approx(sum(r["natural_tokens"] - 1 for r in sd)
                                                / sum(r["natural_steps"] for r in sd))
    longest = max(r["natural_tokens"] for r in rows)                 # a window no reply fills pools no prompt
    assert natural_records(rows, ("vanilla-ar", "standard-sd"), longest + 1) == []
    text, written = write_outputs(natural_run)
    assert f"{100 * want:.0f} %" in text and "natural text: each generation timed only up to its own EOS" in text
    assert (natural_run / "throughput-resident-natural.csv") in written
    old = tmp_path / "old"                                           # rows written before NaturalEnd existed
    shutil.copytree(natural_run, old, ignore=shutil.ignore_patterns("*.md", "*.csv", "*.png", "*.pdf"))
    (old / "samples.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if not k.startswith("natural")})
                                               + "\n" for r in rows))
    text, written = write_outputs(old)
    assert "| not recorded |" in text and "natural text (timed up to each reply's own EOS): not recorded" in text
    assert not (old / "throughput-resident-natural.csv").exists()
