"""gpu-check: its checks run on CPU here (the kernel under the Triton interpreter, see conftest), each can
fail, the verdicts that need CUDA are tested on the numbers and describe() dicts a GPU run gives them, and the
command itself refuses to run without CUDA in one line."""
import json
from pathlib import Path

import pytest
import torch

from acceptmoe.cli import main as cli_main
from acceptmoe.engine import load_engine
from acceptmoe.engine.families import FAMILIES
from acceptmoe.methods import METHODS, ROUTER_NAMES, BlockInfo, Fit, Router, Variant, verifier_methods
from acceptmoe.tools.gpucheck import agreement, checks, command, graphs, kernel, parity, table, timing

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
    z = kernel.tied_logits(12, 16, 4, torch.Generator().manual_seed(0)).float()
    top = z.sort(-1, descending=True).values
    assert z.dtype == torch.float32 and bool((top[0::2, 3] == top[0::2, 4]).all())
    assert bool((top[0::3, 0] == top[0::3, 1]).all())


# ----- the kernel against the torch backend -----
PER_ROUTER = sum(1 + METHODS[m].restricts for m in verifier_methods())    # cases per router: pruning on, off
CHECKED = len(ROUTER_NAMES) + 1                  # routers the checks run: every preset, and the grouped sigmoid
def test_kernel_check_against_torch_passes_under_the_interpreter():
    res = kernel.check_kernel_torch("cpu", T=7, E=16, k=2)
    assert res["verdict"] == "PASS", [agreement.describe(c) for c in res["cases"] if not c["ok"]]
    assert len(res["cases"]) == CHECKED * PER_ROUTER and res["against"] == "torch" and res["specialisations"] is None
    assert all(c["anchor_equal"] and c["set_by_the_rules"] and c["routed"] for c in res["cases"])


def test_kernel_reference_row_informs_on_tie_free_and_tied_logits():
    for ties in (False, True):
        res = kernel.check_kernel("cpu", T=7, E=16, k=2, ties=ties)
        assert res["check"] == "kernel-reference" and res["verdict"] == "INFO"
        assert res["rows"] == 7 * CHECKED * PER_ROUTER and res["rows_differing"] == 0, res["cases"]


def test_kernel_checks_fail_on_a_backend_that_differs():
    """A verifier backend that drops one member of every set: the sets no longer follow from its scores by the
    rules (a FAIL against torch), and rows differ from the reference."""
    from acceptmoe.kernels import VERIFIERS, VerifierOutput
    from acceptmoe.kernels.torch_verifier import TorchVerifier

    class OffByOne(TorchVerifier):
        def _run(self, logits, resident, route, bias):
            out = super()._run(logits, resident, route, bias)
            eligible = out.eligible.clone()
            eligible[:, int(eligible[0].nonzero()[-1])] = False
            return VerifierOutput(out.ids, out.weights, eligible, out.utility, out.anchor)
    VERIFIERS.add("off-by-one", OffByOne)
    try:
        res = kernel.check_kernel_torch("cpu", T=5, E=16, k=2, backend="off-by-one")
        assert res["verdict"] == "FAIL" and not any(c["set_by_the_rules"] for c in res["cases"])
        assert "failed: set_by_the_rules" in res["first_difference"]
        assert kernel.check_kernel("cpu", T=5, E=16, k=2, backend="off-by-one")["rows_differing"] > 0
        assert kernel.check_kernel_torch("cpu", T=5, E=16, k=2, backend="torch")["verdict"] == "PASS"
    finally:
        VERIFIERS.remove("off-by-one")


def _raised(z: torch.Tensor, expert: int, n: int, bits: int) -> torch.Tensor:
    """z [1, E] with `expert`'s logit raised until its softmax term is n units above z's, every term of both
    mid-unit (float64), so any two fp32 implementations truncate them alike."""
    def terms(x):
        return torch.softmax(x.double(), -1)[0] * 2 ** bits

    def mid(u):
        return bool(((u - u.floor() > 0.05) & (u - u.floor() < 0.95)).all())
    base = terms(z)
    assert mid(base)
    for step in range(1, 5000):
        y = z.clone()
        y[0, expert] += step * 1e-4
        if int(terms(y)[expert]) - int(base[expert]) == n and mid(terms(y)):
            return y
    raise AssertionError("no such logit")


def test_kernel_against_torch_one_unit_passes_two_units_fail_with_the_margin():
    """MoE-Spec (router mass, budget 3, 8-bit units) on a one-token block whose experts 2 and 3 tie: torch keeps
    2, the lower index. The kernel runs on the same logits with expert 3's raised until its score is n units
    above torch's: one unit is within a one-term score's tolerance, and the kernel's other set is reported
    with margin 0 (a tie); two units fail, the line naming the difference, its tolerance and the margin."""
    plan = Variant("moe-spec", budget=3, overrides=(("score_bits", 8),)).bind(Fit(Router.preset("softmax_topk", 2), 8, 0))
    block = BlockInfo.from_parents([-1])
    z = torch.tensor([[3.0, 2.1, 1.0, 1.0, 0.0, -0.5, -1.0, -2.4]])                 # [T=1, E]
    torch_out = kernel.run_verifier("torch", plan, block, z, None, "cpu")
    assert torch_out.eligible[0, :4].tolist() == [True, True, True, False]
    lines = {}
    for n in (1, 2):
        kernel_out = kernel.run_verifier("triton", plan, block, _raised(z, 3, n, 8), None, "cpu")
        assert kernel_out.eligible[0, :4].tolist() == [True, True, False, True]
        row = agreement.compare(plan, z, torch_out, kernel_out, None)
        case = {"method": "moe-spec", "router": "softmax_topk", "prune": False, **row}
        lines[n] = agreement.describe(case)
        assert row["set_by_the_rules"] and row["routed"] and not row["same_set"] and row["margin_units"] == 0
        assert row["ok"] == (n == 1) and row["diff_units"] == n and row["tolerance_units"] == 1, lines[n]
    assert "differs by 2 units (tolerance 1)" in lines[2] and "margin 0 units" in lines[2]
    assert "failed: scores_within" in lines[2] and "failed" not in lines[1]


def test_tolerance_is_one_unit_per_term_plus_the_fp32_spacing_above_2_pow_24_units():
    small = torch.tensor([3.0 * 2 ** -22])
    assert agreement.tolerance(torch.tensor([5]), small, small, 22).item() == 5
    big = torch.tensor([8.0])                                   # 2^25 units: fp32 holds multiples of 4 units
    assert agreement.tolerance(torch.tensor([5]), big, big, 22).item() == 5 + 4
    key = torch.tensor([9.0, 7.0, 5.0, 5.0, 1.0])
    torch_set, kernel_set = torch.tensor([1, 1, 1, 0, 0]).bool(), torch.tensor([1, 1, 0, 1, 0]).bool()
    assert agreement.margin(key, torch_set, kernel_set, torch.zeros(5, dtype=torch.bool)) == 0.0


# ----- parity -----
def test_parity_check_passes_on_cpu(tmp_path):
    res = parity.check_parity("cpu", tmp_path, tokens=12)
    assert res["verdict"] == "PASS", res["rows"]
    assert {(r["model"], r["dtype"]) for r in res["rows"]} == {
        (family, dtype) for family in parity.SMALL for dtype in ("float32", "bfloat16")}
    assert set(parity.SMALL) == set(FAMILIES.names())                  # every model family is checked
    assert all(r["rel_max_err"] < 1e-4 for r in res["rows"] if r["dtype"] == "float32")


def test_parity_check_fails_on_a_perturbed_model(tmp_path):
    from acceptmoe.engine.model import MoEModel

    def perturbed(path, device, dtype):
        model = MoEModel.from_pretrained(path, device=device, dtype=dtype)
        model.norm.weight.mul_(1.01)                     # one scale 1% off: far beyond fp32's 1e-4
        return model
    res = parity.check_parity("cpu", tmp_path, tokens=8, load=perturbed)
    assert res["verdict"] == "FAIL" and any(r["rel_max_err"] > r["tolerance"] for r in res["rows"])


# ----- CUDA graphs -----
def test_graphs_check_runs_its_cpu_side():
    """Without CUDA nothing is captured (SKIP), but the static passes a graph holds run against eager."""
    res = graphs.check_graphs("cpu", TINY)
    assert res["verdict"] == "SKIP" and "CUDA" in res["reason"]
    assert len(res["rows"]) == 2 * len(METHODS) and all(r["static_equal_eager"] for r in res["rows"])


def test_graphs_check_fails_when_a_static_pass_differs(monkeypatch):
    """A static pass that lets tree nodes see every other node differs from eager: FAIL even without CUDA."""
    from acceptmoe.engine import kv, layers

    def leaky(slots, start, block):
        return kv.visible_slots(slots, start, torch.ones_like(block))
    monkeypatch.setattr(layers, "visible_slots", leaky)
    res = graphs.check_graphs("cpu", TINY)
    assert res["verdict"] == "FAIL" and not all(r["static_equal_eager"] for r in res["rows"])


def test_layer_graphs_check_is_skipped_on_cpu_and_its_verdict_fails_on_any_fallback():
    res = graphs.check_layer_graphs("cpu")
    assert res["verdict"] == "SKIP" and "CUDA" in res["reason"]
    fell = {"mode": "graphs", "captured": 2, "replays": 10,
            "fallbacks": {"TargetPass(prune=False) <- ids[64]": "RuntimeError: operation not permitted when capturing"}}
    clean = {"mode": "graphs", "captured": 3, "replays": 12, "fallbacks": {}}
    assert graphs.graphs_verdict(True, fell) == "FAIL"
    assert graphs.graphs_verdict(True, {**clean, "replays": 0}) == "FAIL"               # nothing replayed
    assert graphs.graphs_verdict(False, clean) == "FAIL"                                 # replay != static
    assert graphs.graphs_verdict(True, clean) == "PASS" and graphs.graphs_verdict(True, None) == "SKIP"
    assert "fallbacks: TargetPass(prune=False) <- ids[64]: RuntimeError" in table.detail(
        {"check": "layer-graphs", "verdict": "FAIL", "steps": fell, "tolerance": 1e-2,
         "rows": [{"rel_max_err": 0.0}]})


def test_timing_rows_name_the_mode_that_ran():
    """A row through StepGraphs says graphs only where every capture held; a fallback since the row began
    shows with its reason, an earlier one does not."""
    before = {"mode": "graphs", "captured": 1, "replays": 3, "fallbacks": {"old": "RuntimeError: a"}}
    now = {"mode": "graphs", "captured": 1, "replays": 5, "fallbacks": {"old": "RuntimeError: a",
                                                                         "new": "RuntimeError: b"}}
    assert timing.ran_as(now, before) == "graphs->eager (RuntimeError: b)"
    assert timing.ran_as(now) == "graphs->eager (RuntimeError: a; RuntimeError: b)"
    assert timing.ran_as({**now, "fallbacks": {}}) == "graphs" and timing.ran_as(before, before) == "graphs"
    assert timing.ran_as({"mode": "static", "captured": 0, "replays": 0, "fallbacks": {}}) == "static"


# ----- lossless and pinned -----
def test_lossless_check_fails_for_a_lossy_variant():
    """The check compares a speculative variant with Vanilla AR: AcceptMoE-B at B = top_k is not lossless."""
    engines = {"resident": load_engine(TINY)}
    k = engines["resident"].router.top_k
    res = checks.check_lossless(engines, [[5, 17, 300, 41, 9], [1, 17, 42, 99, 7, 300, 12]], tokens=16,
                                variant=Variant("acceptmoe-b", budget=k))
    assert res["verdict"] == "FAIL" and not all(r["equal"] for r in res["rows"])


def test_pinned_verdict_fails_without_pinning_counted_loads_or_pinned_bytes_sized_to_the_experts():
    assert checks.pinned_verdict(True, 10, 0.5, 1_000_064, 1_000_000) == "PASS"
    assert checks.pinned_verdict(True, 10, 0.5, 1_100_000, 1_000_000) == "PASS"           # 1.1x: the limit
    assert checks.pinned_verdict(True, 10, 0.5, 1_100_001, 1_000_000) == "FAIL"           # past 1.1x
    assert checks.pinned_verdict(True, 10, 0.5, 2_000_000, 1_000_000) == "FAIL"           # power-of-two blocks
    assert checks.pinned_verdict(True, 10, 0.5, 0, 1_000_000) == "FAIL"                   # nothing pinned on CUDA
    assert checks.pinned_verdict(False, 10, 0.5, 1_000_000, 1_000_000) == "FAIL"          # pageable host memory
    assert checks.pinned_verdict(True, 0, 0.0, 1_000_000, 1_000_000) == "FAIL"            # no load counted
    assert checks.pinned_verdict(True, 10, 0.0, 1_000_000, 1_000_000) == "FAIL"           # copies not timed
    assert checks.pinned_verdict(None, 10, 0.5, 0, 1_000_000) == "SKIP"                   # no CUDA
    line = table.detail({"check": "pinned", "verdict": "FAIL", "pinned_bytes": 2_000_000,
                         "host_expert_bytes": 1_000_000, "loads": 10, "load_gb_per_s": 20.0})
    assert line == "pinned 2.0 MB for 1.0 MB of experts (2.000x); 10 loads, 20.0 GB/s"


def test_lossless_and_pinned_checks_on_the_tiny_world():
    engines = {"resident": load_engine(TINY), "offloaded": load_engine(TINY, store="offloaded", slots=32)}
    res = checks.check_lossless(engines, [[5, 17, 300, 41, 9]], tokens=8)
    assert res["verdict"] == "PASS" and len(res["rows"]) == 2
    pinned = checks.check_pinned(engines["offloaded"])
    assert pinned["verdict"] == "SKIP" and pinned["pinned"] is None              # pinning is a CUDA matter
    assert pinned["pinned_bytes"] == 0 and pinned["host_expert_bytes"] > 0       # both reported
    assert pinned["loads"] > 0 and pinned["bytes"] > 0 and pinned["copy_s"] > 0 and pinned["wait_s"] > 0


# ----- timing, the whole script -----
def test_timing_rows_on_a_small_layer_shape():
    rows = timing.time_layer_shape("cpu", SMALL_SHAPE, dtype=torch.float32, context=16, tree_tokens=8, repeats=2)
    assert [r["step"].split(" (")[0] for r in rows] == ["decode step", "verify step", "verify step",
                                                         "selection + routing, one layer",
                                                         "decode step", "verify step", "verify step"]
    assert all(r["step"].endswith(", static)") for r in rows[4:])       # graph replays on CUDA
    assert all(r["ms"] > 0 and r["aten_ops"] > 0 for r in rows)
    decode, verify = rows[0]["aten_ops"], rows[1]["aten_ops"]
    assert verify < 3 * decode                                  # fixed op sequence, not one per routed expert
    text = table.table({"checks": [{"check": "kernel-reference", "verdict": "INFO", "rows": 9, "rows_differing": 0}],
                        "timing": {"small": rows}})
    assert "| small | decode step (1 token) |" in text and "| kernel-reference | INFO | 0 of 9 rows differ" in text


def test_run_all_on_cpu_writes_the_json_beside_the_table(tmp_path):
    """The whole script on CPU at small sizes: every check reports, the table and the JSON agree (no stage
    budget: on a loaded machine the run may pass the 8 minutes a GPU gets; the budget has its own test)."""
    res = command.run_all("cpu", TINY, tmp_path, prompts=1, tokens=6, layer_shape=SMALL_SHAPE,
                          kernel_shape=(5, 16, 2), replay_shape="tiny", budget_s=float("inf"))
    assert [c["check"] for c in res["checks"]] == ["kernel", "kernel-reference", "experts", "parity", "graphs",
                                                   "layer-graphs", "sglang-sampling", "lossless", "pinned", "replay"]
    verdicts = {c["check"]: c["verdict"] for c in res["checks"]}
    assert verdicts["kernel"] == verdicts["lossless"] == "PASS" and verdicts["layer-graphs"] == verdicts["sglang-sampling"] == "SKIP"
    assert not res["not_run"] and set(res["seconds"]) >= set(verdicts)
    saved = json.loads((tmp_path / "gpu_check.json").read_text())
    assert saved["checks"] == res["checks"] and set(saved["timing"]) == set(res["timing"])
    assert len(saved["timing"]["tiny world"]) == 3 and all(r["aten_ops"] > 0 for r in saved["timing"]["tiny world"])
    assert (tmp_path / "gpu_check.md").read_text().strip() == table.table(res)


def test_run_all_starts_no_stage_after_its_budget(tmp_path, capsys):
    res = command.run_all("cpu", TINY, tmp_path, prompts=1, tokens=6, layer_shape=SMALL_SHAPE,
                          kernel_shape=(5, 16, 2), replay_shape="tiny", budget_s=-1)
    assert all(c["verdict"] == "SKIP" and c["reason"].startswith("not run:") for c in res["checks"])
    assert len(res["checks"]) == 10 and res["timing"] == {} and not res["seconds"]
    assert "| kernel | SKIP | not run:" in (tmp_path / "gpu_check.md").read_text()
    assert capsys.readouterr().out.count("not run:") == 10


def test_replay_check_runs_its_cpu_side_and_fails_when_the_pool_is_not_restored(tmp_path, monkeypatch):
    from acceptmoe.engine.offload import OffloadedStore
    engine = load_engine("models/tiny", store="offloaded", slots=32)
    prompts = [[5, 17, 300, 4], [9, 8, 7, 6, 5]]
    check, recs = checks.check_replay(engine, prompts, 16, "cpu", tmp_path / "a", shape="tiny")
    assert check["verdict"] == "PASS" and {r["store"] for r in recs} == {"resident", "offloaded-32"}
    original = OffloadedStore.restore_pool
    monkeypatch.setattr(OffloadedStore, "restore_pool", lambda self, state: original(self, None))
    engine = load_engine("models/tiny", store="offloaded", slots=32)
    engine.generate(prompts[1], Variant("standard-sd").bind(engine.fit), 16)    # a warm pool
    check, _ = checks.check_replay(engine, prompts, 16, "cpu", tmp_path / "b", shape="tiny")
    assert check["verdict"] == "FAIL"
