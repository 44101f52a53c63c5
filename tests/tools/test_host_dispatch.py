"""bench-host: the host time of one target pass's dispatch through StepGraphs, on a meta-device skeleton at a
model's real shape (no timing is asserted; the command's numbers are what it prints)."""
import json
import subprocess
import sys
from pathlib import Path

from acceptmoe.tools.bench.host_dispatch import main, model_config, passes, skeleton

ROOT = Path(__file__).resolve().parents[2]


def test_bench_host_runs_at_a_small_shape_and_prints_the_verify_dispatch_as_json(capsys):
    assert main(["--shape", "tiny", "--calls", "20", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["dispatch_us_median"] == res["passes"]["verify"]["median_us"] > 0
    assert {n: r["tokens"] for n, r in res["passes"].items()} == {"decode": 1, "verify": 64}
    assert main(["--shape", "tiny", "--calls", "20"]) == 0
    assert "| verify | 64 |" in capsys.readouterr().out


def test_the_skeleton_is_the_real_model_at_the_published_shape_without_memory():
    """The step a paper-shape dispatch looks up holds a real MoEModel of the released config (48 layers, the
    full vocabulary), every tensor on the meta device; its verify pass reads the bucket the engine would."""
    model = skeleton(model_config("qwen3-30b-a3b"))
    assert len(model.layers) == 48 and tuple(model.lm_head.weight.shape) == (151936, 2048)
    assert all(p.is_meta for p in model.parameters()) and model.store.tally.is_meta
    make, inputs = passes(model, 300)["verify"]
    step = make()
    assert step == make() and step.cache.max_len == 512 and step.cache.k.is_meta and step.record
    assert tuple(inputs["mask"].shape) == (64, 64)


def test_gpt_oss_skeleton_has_its_windows_and_sinks():
    model = skeleton(model_config("gpt-oss-120b"))
    cfg = model.config
    assert (cfg.num_layers, cfg.vocab_size, cfg.moe.top_k, cfg.attn.windows[:2]) == (36, 201088, 4, (128, None))
    assert model.layers[0].self_attn.sinks.is_meta and tuple(model.layers[0].self_attn.sinks.shape) == (64,)


def test_bad_shape_is_one_error_line():
    out = subprocess.run([sys.executable, "-m", "acceptmoe", "bench-host", "--shape", "qwen3-31b"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 2 and out.stderr.startswith("error: unknown shape 'qwen3-31b'")
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
