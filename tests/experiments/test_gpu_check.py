"""gpu-check: its checks run on CPU here (the kernel under the Triton interpreter, see conftest), each can
fail, and the command itself refuses to run without CUDA in one line."""
from pathlib import Path

import pytest
import torch

from acceptmoe.engine import load_engine
from acceptmoe.experiments import gpu_check
from acceptmoe.experiments.cli import main as cli_main

TINY = Path(__file__).parents[2] / "models" / "tiny"
SMALL_SHAPE = dict(hidden_size=64, moe_intermediate_size=32, num_experts=16, num_experts_per_tok=4,
                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   vocab_size=128, intermediate_size=96)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_without_cuda_one_error_line_and_exit_2(capsys, tmp_path):
    assert cli_main(["gpu-check", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "CUDA" in err[0]
    assert not any(tmp_path.iterdir())


def test_tied_logits_have_ties_at_the_top_k_boundary():
    z = gpu_check.tied_logits(12, 16, 4, torch.Generator().manual_seed(0)).float()
    top = z.sort(-1, descending=True).values
    assert z.dtype == torch.float32 and bool((top[0::2, 3] == top[0::2, 4]).all())
    assert bool((top[0::3, 0] == top[0::3, 1]).all())


def test_kernel_check_passes_under_the_interpreter_without_ties():
    res = gpu_check.check_kernel("cpu", T=7, E=16, k=2, ties=False)
    assert res["rows"] == 7 * 2 * 9 and len(res["cases"]) == 18
    assert res["verdict"] == "PASS", res["cases"]


def test_kernel_check_passes_under_the_interpreter_with_ties():
    res = gpu_check.check_kernel("cpu", T=7, E=16, k=2, ties=True)
    assert res["verdict"] == "PASS", res["cases"]


def test_parity_check_passes_on_cpu(tmp_path):
    res = gpu_check.check_parity("cpu", tmp_path, tokens=12)
    assert res["verdict"] == "PASS", res["rows"]
    assert {(r["model"], r["dtype"]) for r in res["rows"]} == {
        ("qwen3_moe", "float32"), ("qwen3_moe", "bfloat16"), ("gpt_oss", "float32"), ("gpt_oss", "bfloat16")}
    assert all(r["rel_max_err"] < 1e-4 for r in res["rows"] if r["dtype"] == "float32")


def test_graphs_check_runs_its_cpu_side():
    """Without CUDA nothing is captured (SKIP), but the static passes a graph holds run against eager."""
    res = gpu_check.check_graphs("cpu", TINY)
    assert res["verdict"] == "SKIP" and "CUDA" in res["reason"]
    assert len(res["rows"]) == 2 * len(gpu_check.METHODS) and all(r["static_equal_eager"] for r in res["rows"])


# ----- every verdict can fail -----
def test_kernel_check_fails_on_a_backend_that_differs(monkeypatch):
    """A verifier backend that drops one member of every set fails the kernel check."""
    from acceptmoe.kernels import BACKENDS, VerifierOutput, register_backend
    from acceptmoe.kernels.torch_verifier import TorchVerifier

    class OffByOne(TorchVerifier):
        def _run(self, logits, resident, route):
            out = super()._run(logits, resident, route)
            eligible = out.eligible.clone()
            eligible[:, int(eligible[0].nonzero()[-1])] = False
            return VerifierOutput(out.ids, out.weights, eligible, out.utility, out.anchor)
    register_backend("off-by-one", OffByOne)
    try:
        res = gpu_check.check_kernel("cpu", T=5, E=16, k=2, ties=False, backend="off-by-one")
        assert res["verdict"] == "FAIL" and res["rows_differing"] > 0
        assert gpu_check.check_kernel("cpu", T=5, E=16, k=2, ties=False, backend="torch")["verdict"] == "PASS"
    finally:
        BACKENDS.pop("off-by-one")


def test_parity_check_fails_on_a_perturbed_model(tmp_path):
    from acceptmoe.engine.model import MoEModel

    def perturbed(path, device, dtype):
        model = MoEModel.from_pretrained(path, device=device, dtype=dtype)
        model.norm.weight.mul_(1.01)                     # one scale 1% off: far beyond fp32's 1e-4
        return model
    res = gpu_check.check_parity("cpu", tmp_path, tokens=8, load=perturbed)
    assert res["verdict"] == "FAIL" and any(r["rel_max_err"] > r["tolerance"] for r in res["rows"])


def test_graphs_check_fails_when_a_static_pass_differs(monkeypatch):
    """A static pass that lets tree nodes see every other node differs from eager: FAIL even without CUDA."""
    from acceptmoe.engine import layers, kv

    def leaky(slots, start, block):
        return kv.visible_slots(slots, start, torch.ones_like(block))
    monkeypatch.setattr(layers, "visible_slots", leaky)
    res = gpu_check.check_graphs("cpu", TINY)
    assert res["verdict"] == "FAIL" and not all(r["static_equal_eager"] for r in res["rows"])
    assert gpu_check.graphs_verdict([{"static_equal_eager": True, "graphs_equal_static": True}],
                                    {"replays": 0, "fallbacks": {}}) == "FAIL"          # nothing replayed
    assert gpu_check.graphs_verdict([{"static_equal_eager": True, "graphs_equal_static": True}],
                                    {"replays": 3, "fallbacks": {"k": "RuntimeError"}}) == "FAIL"
    assert gpu_check.graphs_verdict([{"static_equal_eager": True, "graphs_equal_static": True}],
                                    {"replays": 3, "fallbacks": {}}) == "PASS"


def test_lossless_check_fails_for_a_lossy_variant():
    """The check compares a speculative variant with Vanilla AR: AcceptMoE-B at B = top_k is not lossless."""
    from acceptmoe.methods import Variant
    engines = {"resident": load_engine(TINY)}
    k = engines["resident"].router.top_k
    res = gpu_check.check_lossless(engines, [[5, 17, 300, 41, 9], [1, 17, 42, 99, 7, 300, 12]], tokens=16,
                                   variant=Variant("acceptmoe-b", budget=k))
    assert res["verdict"] == "FAIL" and not all(r["equal"] for r in res["rows"])


def test_pinned_verdict_fails_without_pinning_or_counted_loads():
    assert gpu_check.pinned_verdict(True, 10, 0.5) == "PASS"
    assert gpu_check.pinned_verdict(False, 10, 0.5) == "FAIL"          # pageable host memory
    assert gpu_check.pinned_verdict(True, 0, 0.0) == "FAIL"            # no load counted
    assert gpu_check.pinned_verdict(True, 10, 0.0) == "FAIL"           # copies not timed
    assert gpu_check.pinned_verdict(None, 10, 0.5) == "SKIP"           # no CUDA


def test_lossless_and_pinned_checks_on_the_tiny_world():
    engines = {"resident": load_engine(TINY), "offloaded": load_engine(TINY, store="offloaded", slots=32)}
    res = gpu_check.check_lossless(engines, [[5, 17, 300, 41, 9]], tokens=8)
    assert res["verdict"] == "PASS" and len(res["rows"]) == 2
    pinned = gpu_check.check_pinned(engines["offloaded"])
    assert pinned["verdict"] == "SKIP" and pinned["pinned"] is None              # pinning is a CUDA matter
    assert pinned["loads"] > 0 and pinned["bytes"] > 0 and pinned["copy_s"] > 0 and pinned["wait_s"] > 0


def test_timing_rows_on_a_small_layer_shape():
    rows = gpu_check.time_layer_shape("cpu", SMALL_SHAPE, dtype=torch.float32, context=16, tree_tokens=8, repeats=2)
    assert [r["step"].split(" (")[0] for r in rows] == ["decode step", "verify step", "verify step",
                                                         "selection + routing, one layer",
                                                         "decode step", "verify step", "verify step"]
    assert all(r["step"].endswith(", static)") for r in rows[4:])       # graph replays on CUDA
    assert all(r["ms"] > 0 and r["aten_ops"] > 0 for r in rows)
    decode, verify = rows[0]["aten_ops"], rows[1]["aten_ops"]
    assert verify < 3 * decode                                  # fixed op sequence, not one per routed expert
    text = gpu_check.table({"checks": [{"check": "kernel", "verdict": "PASS"}], "timing": {"small": rows}})
    assert "| small | decode step (1 token) |" in text


def test_run_all_on_cpu_writes_the_json_beside_the_table(tmp_path):
    """The whole script on CPU at small sizes: every check reports, the table and the JSON agree."""
    import json
    res = gpu_check.run_all("cpu", TINY, tmp_path, prompts=1, tokens=6, layer_shape=SMALL_SHAPE,
                            kernel_shape=(5, 16, 2), replay_shape="tiny")
    assert [c["check"] for c in res["checks"]] == ["kernel", "experts", "parity", "graphs", "lossless", "pinned",
                                                   "replay"]
    assert {c["check"]: c["verdict"] for c in res["checks"]}["lossless"] == "PASS"
    saved = json.loads((tmp_path / "gpu_check.json").read_text())
    assert saved["checks"] == res["checks"] and set(saved["timing"]) == set(res["timing"])
    assert len(saved["timing"]["tiny world"]) == 3 and all(r["aten_ops"] > 0 for r in saved["timing"]["tiny world"])
    assert (tmp_path / "gpu_check.md").read_text().strip() == gpu_check.table(res)


def test_replay_check_runs_its_cpu_side_and_fails_when_the_pool_is_not_restored(tmp_path, monkeypatch):
    from acceptmoe.engine import load_engine
    from acceptmoe.engine.store import OffloadedStore
    engine = load_engine("models/tiny", store="offloaded", slots=32)
    prompts = [[5, 17, 300, 4], [9, 8, 7, 6, 5]]
    check, recs = gpu_check.check_replay(engine, prompts, 16, "cpu", tmp_path / "a", shape="tiny")
    assert check["verdict"] == "PASS" and {r["store"] for r in recs} == {"resident", "offloaded-32"}
    original = OffloadedStore.restore_pool
    monkeypatch.setattr(OffloadedStore, "restore_pool", lambda self, state: original(self, None))
    engine = load_engine("models/tiny", store="offloaded", slots=32)
    engine.generate(prompts[1], gpu_check.Variant("standard-sd").bind(engine.fit), 16)    # a warm pool
    check, _ = gpu_check.check_replay(engine, prompts, 16, "cpu", tmp_path / "b", shape="tiny")
    assert check["verdict"] == "FAIL"
