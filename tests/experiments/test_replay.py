"""The replay end to end: a real offloaded timed run of the tiny model records its routes, and the replay
re-executes them through the engine's ExpertStore. At the tiny model's own shape the replayed counters equal
the run's counters exactly and the replayed expert time agrees with the engine's own measured expert time;
at Qwen3-30B-A3B's shape (one layer, to stay small) bytes follow from the counters and the shape; GPT-OSS's
top-4 routing is refused for top-8 routes; packed MXFP4 experts load and run."""
from __future__ import annotations

from pathlib import Path

import pytest

from acceptmoe.errors import UserError
from acceptmoe.experiments.replay import report
from acceptmoe.experiments.spine import shapes
from acceptmoe.experiments.replay.config import load_replay_config
from acceptmoe.experiments.replay.runner import run_replay
from acceptmoe.experiments.spine.runs import REPO, SampleLog, open_run
from acceptmoe.experiments.throughput.config import load_throughput_config
from acceptmoe.experiments.throughput.runner import run_experiment

SLOTS = 48
TOLERANCE = 3.0      # replayed / engine expert seconds on the same passes, same process: within a factor of 3


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """fig4's offload-timed phase on the committed tiny model, two prompts of one task, routes recorded."""
    (table1,) = sorted((REPO / "results" / "reference" / "table1").iterdir())[-1:]
    cfg = load_throughput_config("tiny", ("offload-timed",), {
        "limit": 2, "budgets_from": str(table1), "world.tasks": ["tiny-gsm"], "world.generation.timed_tokens": 40,
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


def test_tiny_shape_counters_equal_the_run_and_times_agree(recorded, tmp_path):
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
                replayed = sum(gen["seconds"][1:])
                engine = sum(gen["engine_s"][1:])
                assert 1 / TOLERANCE < replayed / engine < TOLERANCE, (replayed, engine)
    recs = report.records(out)
    assert all(r["counters_match"] == "2/2" for r in recs)
    off = {r["variant"]: r for r in recs if r["store"] == f"offloaded-{SLOTS}"}
    assert off["acceptmoe"]["engine_ms_per_pass"] is not None
    assert off["standard-sd"]["experts_per_layer"] > off["acceptmoe"]["experts_per_layer"]
    text, written = report.write_outputs(out)
    assert "standard-sd / variant per pass" in text and all(p.is_file() for p in written)


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
    from acceptmoe.experiments.cli import main
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
