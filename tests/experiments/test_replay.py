"""The replay end to end: a real offloaded timed run of the tiny model records its routes, and the replay
re-executes them through the engine's ExpertStore. At the tiny model's own shape the replayed counters equal
the run's counters exactly and the replayed expert time agrees with the engine's own measured expert time;
at Qwen3-30B-A3B's shape (one layer, to stay small) bytes follow from the counters and the shape; GPT-OSS's
top-4 routing is refused for top-8 routes; packed MXFP4 experts load and run. Routes that pruned against the
recorded pool are not replayed with the resident store. Prompts are replayed one by one (each prompt's
variants back to back), and a recording of fewer than stats.MIN_UNITS prompts gives intervals that say they
rest on too few for a verdict. The whole-pass byte model counts what the real
transformers models and the engine's EAGLE-3 draft hold, and the bounds it gives follow from it."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch

from acceptmoe.costs import shapes
from acceptmoe.errors import UserError
from acceptmoe.experiments.replay import report
from acceptmoe.experiments.replay.config import load_replay_config
from acceptmoe.experiments.replay.runner import run_replay
from acceptmoe.experiments.spine.runs import REPO, SampleLog, open_run
from acceptmoe.experiments.throughput.config import load_throughput_config
from acceptmoe.experiments.throughput.runner import run_experiment

SLOTS = 48


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """fig4's offload-timed phase on the committed tiny model, two prompts of one task, routes recorded."""
    (table1,) = sorted((REPO / "results" / "reference" / "table1").iterdir())[-1:]
    cfg = load_throughput_config("tiny", ("offload-timed",), {
        "limit": 2, "budgets_from": str(table1), "world.tasks": ["tiny-gsm"], "world.generation.timed_tokens": 40,
        "prompt_set.order": "index",
        "world.generation.record_routes": True, "world.threads": 1,
        "offload.variants": ["standard-sd", "acceptmoe"], "offload.repetitions": 1, "offload.slots": SLOTS})
    run = open_run("fig4", "tiny", cfg, root=tmp_path_factory.mktemp("rec"))
    run_experiment(cfg, run, show_progress=False)
    return run.path


def _replay(source: Path, root: Path, **over) -> Path:
    cfg = load_replay_config("tiny", {"source": str(source), "generations": None, "passes_per_generation": None, "repeats": 1, "world.threads": 1, **over})
    run = open_run("replay", "tiny", cfg, root=root)
    run_replay(cfg, run, show_progress=False)
    return run.path


def _sums(row: dict, gen: dict) -> dict:
    return {"loads": sum(gen["loads"]), "hits": sum(gen["hits"]), "misses": sum(gen["used"]) - sum(gen["hits"])}


def test_tiny_shape_counters_equal_the_run(recorded, tmp_path):
    out = _replay(recorded, tmp_path, shape="tiny")
    timed = {(r["variant"], r["index"]): r for r in SampleLog(recorded / "samples.jsonl")}
    rows = list(SampleLog(out / "samples.jsonl"))
    assert {r["store"] for r in rows} == {"resident", f"offloaded-{SLOTS}"}
    for row in rows:
        for gen in row["generations"]:
            assert gen["counters_match"] is True
            if row["store"] == f"offloaded-{SLOTS}":
                # the replay's loads, hits and misses over every pass equal the run's own counters row
                want = timed[(row["variant"], gen["index"])]
                assert _sums(row, gen) == {k: want[k] for k in ("loads", "hits", "misses")}
                assert len(gen["seconds"]) == len(gen["engine_s"]) and min(gen["seconds"]) > 0   # timed, per pass
    assert ("resident", "acceptmoe") not in {(r["store"], r["variant"]) for r in rows}   # it pruned: offloaded only
    recs = report.records(out)
    assert all(r["counters_match"] == "2/2" for r in recs)
    for r in recs:                     # the recording's rows say where each reply ended: passes after it, counted
        gens = [g for row in rows if (row["store"], row["variant"], row["round"]) == (r["store"], r["variant"], 0)
                for g in row["generations"]]
        after = sum(sum(1 for k, before in zip(g["kinds"], [0, *itertools.accumulate(g["output"])], strict=False)
                        if k != "prefill" and before >= g["natural_tokens"]) for g in gens)
        assert r["after_eos_share"] == pytest.approx(after / r["passes"]) and r["after_eos_share"] > 0
    off = {r["variant"]: r for r in recs if r["store"] == f"offloaded-{SLOTS}"}
    assert off["acceptmoe"]["engine_ms_per_pass"] is not None
    assert off["standard-sd"]["experts_per_layer"] > off["acceptmoe"]["experts_per_layer"]
    text, written = report.write_outputs(out)
    assert "standard-sd / variant per pass" in text and all(p.is_file() for p in written)


def test_fewer_than_min_units_prompts_are_marked_too_few(recorded, tmp_path):
    """The recording holds 2 prompts (< stats.MIN_UNITS): the replay takes them all, and every ratio's interval
    says it rests on 2 prompts, too few for a verdict, in its record, the report and the figures' captions."""
    from acceptmoe.evals.stats import MIN_UNITS
    out = _replay(recorded, tmp_path, shape="tiny")
    recs = [r for r in report.records(out) if "speedup_per_token" in r]
    assert recs and MIN_UNITS == 20
    for r in recs:
        assert (r["interval_unit"], r["interval_n"], r["interval_strata"]) == ("prompts", 2, "task")
        assert r["interval_enough_units"] is False
        assert r["interval_note"] == "rests on 2 prompts, fewer than 20: too few for a verdict"
    text = report.tables(out)
    assert "the intervals resample prompts (n = 2 prompts (tiny-gsm 2), paired, stratified by task" in text
    assert "2 < 20 prompts: too few, no verdict" in text
    assert report.caption(recs) == ("95% CI over 2 prompts, 2 per task, stratified by task\n"
                                    "too few for a verdict (2 < 20 prompts)")


def test_prompts_are_interleaved_one_row_per_generation(recorded, tmp_path):
    """Prompt by prompt: each row is one (store, round, prompt, variant), each prompt's variants back to back,
    their order rotated by one per prompt and round."""
    from acceptmoe.experiments.replay.runner import rotated
    out = _replay(recorded, tmp_path, shape="tiny", repeats=2)
    rows = list(SampleLog(out / "samples.jsonl"))
    assert all(len(r["generations"]) == 1 for r in rows)
    plan = json.loads((out / "replay.json").read_text())
    for store, variants in plan["store_variants"].items():
        for rnd in (0, 1):
            for i, name in enumerate(plan["generations"]):
                mine = [r for r in rows if (r["store"], r["round"]) == (store, rnd)
                        and _name(r["generations"][0]) == name]
                assert [r["variant"] for r in mine] == rotated(tuple(variants), rnd + i)
                assert [r["position"] for r in mine] == list(range(len(variants)))
    assert plan["generations_per_task"] == {"tiny-gsm": 2} and plan["wanted_per_task"] is None


def _name(gen: dict) -> str:
    return f"{gen['task']}/r{gen['rep']}-{gen['index']:04d}"


def test_qwen3_shape_bytes_follow_counters_and_shape(recorded, tmp_path):
    out = _replay(recorded, tmp_path, shape="qwen3-30b-a3b", layers=1, weight_sets=1, generations=1,
                  passes_per_generation=3)
    shape = shapes.get_shape("qwen3-30b-a3b")
    recs = report.records(out)
    for r in recs:
        assert r["read_mb"] == pytest.approx(r["experts_per_layer"] * 48 * shape.dense_bytes() / 1e6)
        assert r["moved_mb"] == pytest.approx(r["loads_per_layer"] * 48 * shape.stored_bytes() / 1e6)
        assert r["engine_ms_per_pass"] is None                      # another shape: nothing to compare with
        assert r["passes"] == 3
        # layer 0 replays recorded layer 0: offloaded, the pool at every pass start is the run's
        assert r["counters_match"] == ("1/1" if r["store"].startswith("offloaded") else "n/a")
        for d in ("H200", "RTX PRO 6000", "RTX 5090"):
            assert r[f"bound_ms_{d}"] > 0
    assert shape.stored_bytes() == 9437184


def test_mxfp4_experts_load_packed_and_count_exactly(recorded, tmp_path, monkeypatch):
    small = shapes.ExpertShape("mx-small", 64, 64, 128, 8, 4, "clamped_swiglu", format="mxfp4", bias=True)
    monkeypatch.setitem(shapes.SHAPES, "mx-small", small)
    out = _replay(recorded, tmp_path, shape="mx-small")
    rows = list(SampleLog(out / "samples.jsonl"))
    assert rows and all(g["counters_match"] for r in rows for g in r["generations"])
    assert small.stored_bytes() < small.dense_bytes()               # loads move packed bytes


def test_gpt_oss_top4_is_refused_for_top8_routes(recorded, tmp_path):
    with pytest.raises(UserError, match="top-4 of 128 experts; the recording routes top-8"):
        _replay(recorded, tmp_path, shape="gpt-oss-120b")


def test_command_line_errors(recorded, tmp_path, capsys):
    from acceptmoe.cli import main
    assert main(["replay"]) == 2
    assert "error: replay needs --run" in capsys.readouterr().err
    assert main(["replay", "--run", str(tmp_path)]) == 2
    assert "has no routes/" in capsys.readouterr().err
    results = tmp_path / "results"
    assert main(["replay", "--run", str(recorded), "--shape", "nope", "--results", str(results)]) == 2
    assert "unknown shape 'nope'; valid: tiny, qwen3-30b-a3b, gpt-oss-120b" in capsys.readouterr().err
    assert main(["replay", "--run", str(recorded), "--memory-gib", "0.5", "--results", str(results)]) == 2
    assert "> memory_gib 0.5: lower --layers" in capsys.readouterr().err
    assert not results.exists()                                      # refused before any run folder opened
    assert main(["replay", "--run", str(recorded), "--shape", "tiny", "--passes-per-generation", "2",
                 "--results", str(results)]) == 0
    assert "note: the replay takes 2 prompts of" in capsys.readouterr().err   # said before the run, not only after


# ----- the whole-pass byte model and the bounds it gives -----
def _transformers_nonexpert(ref: str) -> int:
    """Parameters of the real transformers model a pass reads besides its experts (the input embedding left out),
    built on the meta device from the shipped config.json."""
    import transformers

    from acceptmoe.costs.passbytes import config_json
    raw = {k: v for k, v in config_json(ref).items() if k not in ("architectures", "quantization_config")}
    cls = {"qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM),
           "gpt_oss": (transformers.GptOssConfig, transformers.GptOssForCausalLM)}[raw["model_type"]]
    with torch.device("meta"):
        model = cls[1](cls[0](**raw))
    return sum(p.numel() for n, p in model.named_parameters() if ".experts." not in n and "embed_tokens" not in n)


@pytest.mark.parametrize("name", ["tiny", "qwen3-30b-a3b", "gpt-oss-120b"])
def test_whole_pass_bytes_are_the_real_models_weights(name):
    """Non-expert target bytes = the transformers model's non-expert, non-embedding parameters x dtype; the draft
    step = the engine's EAGLE-3 module: fc once, then num_steps passes of its decoder layer, norm and LM head."""
    from acceptmoe.costs.passbytes import CHECKPOINTS, config_json, pass_model
    from acceptmoe.engine.eagle3 import Eagle3Draft
    m = pass_model(name)
    assert m.target_bytes() == _transformers_nonexpert(CHECKPOINTS[name][0]) * m.dtype_bytes
    with torch.device("meta"):
        draft = Eagle3Draft(config_json(CHECKPOINTS[name][1]))
    per_pass = sum(p.numel() for n, p in draft.named_parameters() if not n.startswith(("fc.", "embed")))
    fc = draft.fc.weight.numel()
    d = m.draft
    kv = d.num_layers * 2 * d.num_kv_heads * d.head_dim * 512 * d.dtype_bytes
    assert m.draft_step_bytes(5, 512) == (fc + 5 * per_pass) * d.dtype_bytes + 5 * kv
    assert m.step_bytes(1000, 512, speculative=False) == 1000 + m.target_bytes() + m.kv_bytes(512)


def test_whole_pass_numbers_at_the_paper_shapes():
    """Qwen3-30B-A3B reads 2.46 GB of non-expert weights per pass (attention, norms, routers, LM head in bf16) and
    50 MB of KV at 512 tokens; GPT-OSS-120B's sliding layers read at most their 128-token window."""
    from acceptmoe.costs.passbytes import pass_model, step_bound
    from acceptmoe.costs.shapes import GPUS
    q = pass_model("qwen3-30b-a3b")
    assert q.target_bytes() == 2 * (48 * (2048 * 4096 * 2 + 2048 * 512 * 2 + 2 * 128 + 2 * 2048 + 2048 * 128)
                                    + 151936 * 2048 + 2048)
    assert q.kv_bytes(512) == 48 * 2 * 4 * 128 * 512 * 2
    g = pass_model("gpt-oss-120b")
    assert g.kv_bytes(512) == 2 * 8 * 64 * 2 * (18 * 128 + 18 * 512)
    assert g.kv_bytes(100) == 2 * 8 * 64 * 2 * 36 * 100
    h200 = next(x for x in GPUS if x.name == "H200")
    assert step_bound(4.8e9, 0, h200) == pytest.approx(1e-3)
    assert step_bound(0, 63e9, h200) == pytest.approx(1.0)
    assert step_bound(0, 53e9, h200, "typical") == pytest.approx(1.0)


def test_bounds_regime_and_whole_pass_on_records():
    from acceptmoe.experiments.replay import bounds
    assert bounds.regime(1.5, 2.0, 1.0) == bounds.BETWEEN
    assert bounds.regime(1.0, 2.0, 1.0) == bounds.BETWEEN and bounds.regime(2.0, 2.0, 1.0) == bounds.BETWEEN
    assert bounds.regime(2.1, 2.0, 1.0) == bounds.ABOVE and bounds.regime(0.9, 2.0, 1.0) == bounds.BELOW
    cfg = {"world": {"tree": {"num_steps": 5}}, "devices": [{"name": "H200", "memory_gbps": 4800, "h2d_gbps": 63}]}
    plan = {"shape": {"name": "qwen3-30b-a3b"}}
    recs = [{"store": "offloaded-48", "variant": v, "read_mb": read, "moved_mb": moved, "tokens_per_pass": tpp,
             "routed_per_pass": routed} for v, read, moved, tpp, routed in
            (("standard-sd", 28000.0, 12000.0, 4.0, 64.0), ("vanilla-ar", 3600.0, 1400.0, 1.0, 1.0))]
    routes = {"standard-sd": {"method": "standard-sd", "prune": False}, "vanilla-ar": {"method": "vanilla-ar",
                                                                                      "prune": False}}
    bounds.add_bounds(recs, cfg, plan, routes, "standard-sd")
    sd, ar = recs
    from acceptmoe.costs.passbytes import pass_model
    q = pass_model("qwen3-30b-a3b")
    want_sd = ((28000e6 + q.target_bytes() + q.kv_bytes() + q.draft_step_bytes(5)) / 4800e9 + 12000e6 / 63e9) / 4.0
    want_ar = (3600e6 + q.target_bytes() + q.kv_bytes()) / 4800e9 + 1400e6 / 63e9
    assert sd["whole_ms_per_token_H200"] == pytest.approx(1e3 * want_sd)
    assert ar["whole_ms_per_token_H200"] == pytest.approx(1e3 * want_ar)
    assert ar["whole_speedup_per_token_H200"] == pytest.approx(want_sd / want_ar)
    assert "whole_ms_per_token_H200_typical_link" in ar                  # H200's typical link from costs.shapes.GPUS
    assert ar["flops_speedup_per_token"] == pytest.approx(16.0)            # 64 routed tokens per 4 output vs 1 per 1
