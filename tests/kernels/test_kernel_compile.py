"""The verifier kernel compiled for its GPU targets without a GPU: sm_90 (H100/H200) and sm_120 (RTX 5090 /
RTX PRO 6000). The launches are captured from the Triton backend exactly as it would make them, compiled
with `triton.compile` at the warps the wrapper chooses on that GPU (`choose_warps`) and read with the Triton
wheel's `cuobjdump` and `ptxas -v`: they must compile, not spill and hold no fp64 instruction. Each router preset
compiles its own variant, and a routing axis code no branch handles fails the compile. The compiler needs
TRITON_INTERPRET unset, which the test conftest sets, so the compilation runs in a subprocess.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

# Representative launches: the largest code (AcceptMoE with pruning), both routers, both logit widths,
# the longest block and the next expert count, and the batch-shared score.
CASES = [
    (120, ("acceptmoe", "qwen3", "bf16", True, 64)),
    (90, ("count-b", "gpt-oss", "fp32", True, 128)),
    (90, ("acceptmoe", "qwen3-e256", "bf16", False, 128)),
    (120, ("moe-spec", "gpt-oss", "bf16", True, 16)),
    (90, ("acceptmoe-shared", "qwen3", "bf16", True, 64)),     # the batch-shared score's loop over the roots
]

# The specialisations that spilled (16-40 B, 4-10 STL/LDL) at 4 warps, one per kind: pruning at E = 256 on
# sm_90 and sm_120, fp32 keys on sm_120. At 8 warps they do not, and 8 warps everywhere spills elsewhere.
FORMERLY_SPILLING = [
    (90, ("acceptmoe", "qwen3-e256", "bf16", True, 64)),
    (120, ("acceptmoe-b", "qwen3-e256", "bf16", True, 16)),
    (120, ("count-b", "gpt-oss", "fp32", True, 128)),
]

SCRIPT = """
import dataclasses, json, sys
from acceptmoe.tools.bench.kernel_table import KernelCase, measure
rows = [measure((KernelCase(*v), arch)) for arch, v in json.loads(sys.argv[1])]
print(json.dumps([{"arch": r["arch"], "case": list(dataclasses.astuple(r["case"])), "num_warps": r["num_warps"],
                   "tried": r["tried"], "stats": dataclasses.asdict(r["stats"])} for r in rows]))
"""


def test_kernel_compiles_for_gpu_targets_without_spills_or_fp64():
    rows = _compiled(SCRIPT, CASES)
    assert len(rows) == len(CASES)
    _assert_compiled_clean(rows)


def test_specialisations_that_spilled_at_4_warps_compile_clean_at_the_warps_chosen():
    """Each binary at 4 warps spills, so `choose_warps` compiles 8 and keeps it: no spill, no fp64."""
    rows = _compiled(SCRIPT, FORMERLY_SPILLING)
    assert [(r["tried"], r["num_warps"]) for r in rows] == [([4, 8], 8)] * len(FORMERLY_SPILLING)
    _assert_compiled_clean(rows)


def test_choose_warps_takes_the_first_count_that_does_not_spill():
    from acceptmoe.kernels.triton_verifier import WARP_CHOICES, choose_warps
    assert WARP_CHOICES[0] == 4 and choose_warps(lambda w: False) == 4
    assert choose_warps(lambda w: w == 4) == 8
    assert choose_warps(lambda w: True) == 4                  # every count spills: the fewest instructions


def _compiled(script: str, cases: list) -> list[dict]:
    """The rows `script` prints for `cases`, compiled in a process without TRITON_INTERPRET."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(cases)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def _assert_compiled_clean(rows: list[dict]) -> None:
    for row in rows:
        s, what = row["stats"], f"sm_{row['arch']} {row['case']} stage {row.get('stage', 1)}"
        assert s["sass"] > 0 and s["registers"] > 0, what
        assert s["spill"] == 0 and s["local"] == 0 and s["local_ops"] == 0, f"{what} spills: {s}"
        assert s["fp64"] == 0, f"{what} has {s['fp64']} fp64 instructions"


EXPERTS = [(120, ("gpt-oss-120b", "fp32", 64)), (120, ("gpt-oss-120b", "mxfp4", 64)), (90, ("qwen3-30b-a3b", "bf16", 1)),
           (90, ("tiny", "mxfp4", 64))]

EXPERTS_SCRIPT = """
import dataclasses, json, sys
from acceptmoe.tools.bench.experts_table import ExpertsCase, measure_experts
rows = [r for arch, v in json.loads(sys.argv[1]) for r in measure_experts((ExpertsCase(*v), arch))]
print(json.dumps([{"arch": r["arch"], "stage": r["stage"], "case": list(dataclasses.astuple(r["case"])),
                   "stats": dataclasses.asdict(r["stats"])} for r in rows]))
"""


def test_experts_kernel_compiles_for_gpu_targets_without_spills_or_fp64():
    """Both launches of one layer's pass at the paper's shapes, dense and MXFP4 packed (the worst case for
    registers: fp32 at GPT-OSS-120B's shape on sm_120)."""
    rows = _compiled(EXPERTS_SCRIPT, EXPERTS)
    assert sorted((r["arch"], tuple(r["case"]), r["stage"]) for r in rows) == sorted(
        (arch, tuple(v), stage) for arch, v in EXPERTS for stage in (1, 2))
    _assert_compiled_clean(rows)


ROUTER_SCRIPT = """
import hashlib, json, sys, traceback
import torch
from acceptmoe.kernels import make_verifier
from acceptmoe.kernels import triton_verifier as module
from acceptmoe.kernels.offline import Launch, capture_launch, compile_launch
from acceptmoe.methods import BlockInfo, Fit, Router, Variant
AXES = ("SCORING", "ORDER", "BIAS", "GROUPED", "RENORM", "RAW", "SCALED")
out = {}
for label, name, fields in json.loads(sys.argv[1]):
    plan = Variant("count-b").bind(Fit(Router.preset(name, 4, **fields), 64, max_depth=2), b0=16)
    verifier = make_verifier("triton", plan, "cpu")
    verifier.prepare([BlockInfo.from_parents([-1, 0, 0, 1])])
    logits = torch.zeros(1, 4, 64, dtype=torch.bfloat16)
    launch = capture_launch(module, "_verifier_kernel", lambda: verifier(logits))
    out[label] = [[launch.kwargs[a] for a in AXES],
                  hashlib.sha256(compile_launch(launch, 90).asm["ttir"].encode()).hexdigest()]
for axis in AXES:
    try:
        compile_launch(Launch(launch.kernel, launch.args, {**launch.kwargs, axis: 7}), 90)
        out[axis] = "compiled"
    except Exception as e:                            # CompilationError, from the static_assert
        out[axis] = "".join(traceback.format_exception(e))[-3000:]
print(json.dumps(out))
"""


def test_each_router_preset_compiles_its_own_variant_and_an_unknown_axis_code_none():
    """One launch per router preset (and DeepSeek-V3's group-limited one) compiled for sm_90: each carries its own
    routing axis codes and compiles to its own code; an axis code no branch handles fails the compile by name."""
    from acceptmoe.methods import ROUTER_NAMES
    cases = [[name, name, {}] for name in ROUTER_NAMES] + [["grouped", "sigmoid_grouped",
                                                           {"groups": 8, "group_top": 4, "scale": 2.5}]]
    out = _compiled(ROUTER_SCRIPT, cases)
    codes, hashes = zip(*(out[label] for label, _, _ in cases), strict=True)
    assert len({tuple(c) for c in codes}) == len(cases) and len(set(hashes)) == len(cases), out
    for axis, what in (("SCORING", "scoring"), ("ORDER", "order"), ("BIAS", "flag"), ("GROUPED", "flag"),
                       ("RENORM", "flag"), ("RAW", "flag"), ("SCALED", "flag")):
        assert f"unknown router {what} code" in out[axis], out[axis]


CODES_SCRIPT = """
import hashlib, json, sys, traceback
from acceptmoe.tools.bench.kernel_table import KernelCase, launch_of
from acceptmoe.kernels.offline import Launch, compile_launch
out = {}
for method in json.loads(sys.argv[1]):
    launch = launch_of(KernelCase(method, "qwen3", "bf16", False, 16))
    out[method] = [launch.kwargs["SCORE"], launch.kwargs["SIZING"],
                   hashlib.sha256(compile_launch(launch, 90).asm["ttir"].encode()).hexdigest()]
for key in ("SCORE", "SIZING", "PRUNE"):
    try:
        compile_launch(Launch(launch.kernel, launch.args, {**launch.kwargs, key: 99}), 90)
        out[key] = "compiled"
    except Exception as e:                            # CompilationError, from the static_assert
        out[key] = "".join(traceback.format_exception(e))[-3000:]
print(json.dumps(out))
"""


def test_each_score_and_sizing_compiles_its_own_variant_and_an_unknown_code_none():
    """One launch per verification score (each registered method whose score is another, sizings among them)
    compiled for sm_90: each carries its own codes and compiles to its own code; a score, sizing or prune code no
    branch handles fails the compile by name (no default branch computes one method as another)."""
    from acceptmoe.methods import METHODS, Score
    by_score = {}
    for name, spec in METHODS.items():
        if spec.speculates:
            by_score.setdefault(spec.score, name)
    assert set(by_score) == set(Score)                                     # every score has a method here
    out = _compiled(CODES_SCRIPT, list(by_score.values()))
    rows = [out[m] for m in by_score.values()]
    assert len({s for s, _, _ in rows}) == len(Score) and len({h for *_, h in rows}) == len(rows), out
    assert {z for _, z, _ in rows} >= {1, 2}                                # fixed and self sizings both compiled
    for key, what in (("SCORE", "score"), ("SIZING", "sizing"), ("PRUNE", "prune")):
        assert f"unknown {what} code" in out[key], out[key]
