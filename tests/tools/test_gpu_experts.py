"""gpu-check's experts kernel check and timing (`gpu_experts`): the check runs the real kernel under the Triton
interpreter (conftest) against the per-expert definition and can fail; the timing rows' bookkeeping runs at
tiny shapes on CPU (the paper's shapes need CUDA)."""
import pytest

from acceptmoe.costs.shapes import ExpertShape
from acceptmoe.kernels.experts import experts
from acceptmoe.tools import gpu_experts
from acceptmoe.tools.gpucheck.table import table

TINY_SHAPES = (ExpertShape("tiny-dense", 64, 32, 8, 2, 1, "swiglu"),
               ExpertShape("tiny-mxfp4", 64, 32, 8, 2, 1, "clamped_swiglu", format="mxfp4", bias=True))


def test_check_passes_under_the_interpreter_with_ragged_routing():
    res = gpu_experts.check_experts("cpu")
    assert res["check"] == "experts" and res["verdict"] == "PASS", res["cases"]
    assert [(c["format"], c["dtype"], c["activation"], c["bias"]) for c in res["cases"]] == [
        ("dense", "bfloat16", "swiglu", False), ("dense", "float32", "swiglu", False),
        ("mxfp4", "bfloat16", "clamped_swiglu", True)]
    T, k, G = res["cases"][0]["shape"][:3]
    assert all(1 < c["groups_used"] < G for c in res["cases"])            # ragged: some groups empty
    assert all(0 < c["rel_max_err"] <= c["tolerance"] for c in res["cases"])
    assert "| fp32 dense swiglu | dense float32 | swiglu |" in gpu_experts.check_table(res)


def test_check_fails_on_a_kernel_that_drops_weights_or_biases():
    def no_routing_weights(x, w, group, k, G, activation, weights):
        return experts(x, w, group, k, G, activation)

    def no_biases(x, w, group, k, G, activation, weights):
        return experts(x, {n: t for n, t in w.items() if n not in ("b1", "b2")}, group, k, G, activation, weights)

    res = gpu_experts.check_experts("cpu", fn=no_routing_weights)
    assert res["verdict"] == "FAIL" and all(c["verdict"] == "FAIL" for c in res["cases"])
    res = gpu_experts.check_experts("cpu", fn=no_biases)                   # only the MXFP4 case has biases
    assert res["verdict"] == "FAIL" and [c["verdict"] for c in res["cases"]] == ["PASS", "PASS", "FAIL"]


def test_time_experts_needs_cuda():
    with pytest.raises(ValueError, match="CUDA"):
        gpu_experts.time_experts("cpu")


def test_published_peak_matches_the_gpu_name():
    assert gpu_experts.published_peak("NVIDIA H200").memory_gbps == 4800
    assert gpu_experts.published_peak("NVIDIA GeForce RTX 5090").name == "RTX 5090"
    assert gpu_experts.published_peak("NVIDIA RTX PRO 6000 Blackwell Workstation Edition").name == "RTX PRO 6000"
    assert gpu_experts.published_peak("NVIDIA A100-SXM4-80GB") is None                   # then measured


def test_timing_rows_at_tiny_shapes_and_their_table():
    """Real (interpreter) timings at tiny shapes: the bytes each path reads, the ratios, the kernel's output
    against the per-pair path, and the rendering, with gpu-check's table placing it after its own."""
    rows = []
    for shape in TINY_SHAPES:
        rows += gpu_experts.time_shape("cpu", shape, tokens=(1, 4), repeats=1, warmup=1, peak=(50.0, "given"),
                                       distinct=4)
    assert [(r["shape"], r["T"]) for r in rows] == [(s.name, T) for s in TINY_SHAPES for T in (1, 4)]
    for r, shape in zip(rows, [s for s in TINY_SHAPES for _ in (1, 4)], strict=True):
        io = 2 * (r["T"] + r["T"] * shape.top_k) * shape.hidden_size                     # bf16 x + pair outputs
        assert r["experts_used"] == shape.top_k if r["T"] == 1 else 1 <= r["experts_used"] <= shape.num_experts
        assert r["kernel_bytes"] == r["experts_used"] * shape.stored_bytes() + io
        assert r["torch_bytes"] == r["experts_used"] * shape.dense_bytes() + io
        assert r["grouped"] == "F.grouped_mm" and all(r[p] > 0 for p in ("kernel_ms", "grouped_ms", "per_pair_ms"))
        assert r["speedup_vs_per_pair"] == pytest.approx(r["per_pair_ms"] / r["kernel_ms"])
        assert r["peak_fraction"] == pytest.approx(r["kernel_bytes"] / r["kernel_ms"] / 1e6 / 50.0)
        assert r["rel_err_vs_per_pair"] <= 3e-2                                           # bf16 on both sides
    mx = [r for r in rows if r["format"] == "mxfp4"]
    assert all(r["kernel_bytes"] < r["torch_bytes"] and "dequantised" in r["torch_weights"] for r in mx)
    rows.append(dict(rows[0], grouped="n/a: no native grouped_mm", grouped_ms=None, speedup_vs_grouped=None))
    text = gpu_experts.timing_table(rows)
    assert text.count("\n") == len(rows) + 1 and "| tiny-mxfp4 | mxfp4 | 4 |" in text
    assert text.splitlines()[-1].count("n/a") == 2                                   # grouped ms and its ratio
    check = gpu_experts.check_experts("cpu")
    full = table({"checks": [check], "timing": {}, "experts_timing": rows})
    assert full.index("| experts | PASS |") < full.index("| experts case |") < full.index("| experts shape |")
