"""Benchmark: the verifier and experts kernels compiled offline for their GPU targets, one row per variant.

For every method x router x logit dtype x pruning x T, the launch the wrapper makes is captured (no GPU
needed), compiled for sm_90 (H100/H200) and sm_120 (RTX 5090 / RTX PRO 6000) with `triton.compile` at the
warps the wrapper chooses on that GPU (`triton_verifier.choose_warps`: the first count whose binary does not
spill; a row that needed more than one compile lists the counts tried), and the cubin is read with the
Triton wheel's `cuobjdump`: registers, stack and local bytes, spill bytes (the wheel's `ptxas -v` on the same
PTX), local-memory instructions (STL/LDL) in the SASS, SASS instructions, fp64 SASS instructions and
shuffles. Run without TRITON_INTERPRET.

    ./reproduce.sh bench-kernel [--archs 90 120] [--tokens 16 64 128] [--routers qwen3 gpt-oss qwen3-e256 deepseek-v3]
                                [--kernels verifier experts] [--shapes ...] [--weights bf16 fp32 mxfp4]

The experts kernel's rows (`experts_table`) add the bytes each launch must read and its memory-bound time at
each GPU's published bandwidth.
"""
from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import torch

from acceptmoe.commands import command, parser
from acceptmoe.methods import METHODS, Router, verifier_methods

SPECULATING = verifier_methods()     # an admitting method verifies with its selector's verifier
# name -> (router, E): the evaluated targets' layer shapes, the next size up, and DeepSeek-V3's grouped router
ROUTERS = {
    "qwen3": (Router.preset("softmax_topk", 8), 128),
    "gpt-oss": (Router.preset("topk_softmax", 4), 128),
    "qwen3-e256": (Router.preset("softmax_topk", 8), 256),
    "deepseek-v3": (Router.preset("sigmoid_grouped", 8, groups=8, group_top=4, scale=2.5), 256),
}
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


@dataclass(frozen=True)
class KernelCase:
    """One compiled specialisation of the verifier kernel."""
    method: str
    router: str
    dtype: str
    prune: bool
    tokens: int


def cases(routers, dtypes, tokens) -> list[KernelCase]:
    """Every combination, the most telling first (T in the given order outermost), so a partial run is useful."""
    return [KernelCase(method, router, dtype, prune, T)
            for T in tokens for router in routers for dtype in dtypes for method in SPECULATING
            for prune in ((False, True) if METHODS[method].restricts else (False,))]


def launch_of(v: KernelCase):
    """The launch the Triton verifier backend makes for one layer of one block of T tokens."""
    from acceptmoe.kernels import make_verifier
    from acceptmoe.kernels import triton_verifier as module
    from acceptmoe.kernels.offline import capture_launch
    from acceptmoe.methods import BlockInfo, Fit, Variant
    router, E = ROUTERS[v.router]
    k = router.top_k
    block = BlockInfo.from_parents([-1] + [(t - 1) // 4 for t in range(1, v.tokens)])   # bushy, depth <= 4
    fit = Fit(router, E, max_depth=block.max_depth, store="offloaded" if v.prune else "resident")
    plan = Variant(v.method).bind(fit, commitment=(1.0, 0.8, 0.6, 0.4, 0.3, 0.2), b0=max(k, 24))
    logits = torch.zeros(1, v.tokens, E, dtype=DTYPES[v.dtype])
    resident = torch.zeros(E, dtype=torch.bool) if v.prune else None
    verifier = make_verifier("triton", plan, "cpu")
    verifier.prepare([block])
    return capture_launch(module, "_verifier_kernel", lambda: verifier(logits, resident))


def measure(args: tuple[KernelCase, int]) -> dict:
    """One specialisation compiled for `arch` with the warps the wrapper would launch it with on that GPU
    (`choose_warps` on the binaries compiled here); its stats, and every warps count tried."""
    from acceptmoe.kernels.offline import binary_spills, compile_launch, kernel_stats
    from acceptmoe.kernels.triton_verifier import choose_warps
    v, arch = args
    t0 = time.perf_counter()
    launch, compiled = launch_of(v), {}

    def spills(w: int) -> bool:
        compiled[w] = compile_launch(launch.with_warps(w), arch)
        return binary_spills(compiled[w].asm["cubin"])
    w = choose_warps(spills)
    return {"case": v, "arch": arch, "num_warps": w, "tried": sorted(compiled),
            "stats": kernel_stats(compiled[w], arch), "compile_s": time.perf_counter() - t0}


def run(archs, routers, dtypes, tokens, jobs: int, on_row=None) -> list[dict]:
    work = [(v, arch) for v in cases(routers, dtypes, tokens) for arch in archs]
    return _compiled(measure, work, jobs, on_row)


def _compiled(fn, work: list, jobs: int, on_row) -> list[dict]:
    """fn over work in `jobs` processes, rows in order (fn returns a row or a list of rows)."""
    rows = []
    with ProcessPoolExecutor(max(1, jobs)) as pool:
        for out in pool.map(fn, work):
            for row in (out if isinstance(out, list) else [out]):
                rows.append(row)
                if on_row is not None:
                    on_row(row)
    return rows


def format_row(r: dict) -> str:
    v, s = r["case"], r["stats"]
    warps = f"{r['num_warps']} (tried {', '.join(map(str, r['tried']))})" if len(r["tried"]) > 1 else r["num_warps"]
    return (f"| sm_{r['arch']} | {v.router} | {v.method} | {v.dtype} | {'on' if v.prune else 'off'} | "
            f"{v.tokens} | {warps} | {s.registers} | {s.stack} | {s.local} | {s.spill} | "
            f"{s.local_ops} | {s.sass} | "
            f"{s.fp64} | {s.shuffles} |")


def format_table(rows: list[dict]) -> str:
    lines = ["| arch | router | method | dtype | prune | T | warps | regs | stack B | local B | spill B | STL/LDL "
             "| SASS | fp64 | SHFL |", "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [format_row(r) for r in rows]
    spills = sum(r["stats"].spills for r in rows)
    fp64 = sum(r["stats"].fp64 > 0 for r in rows)
    worst = max(rows, key=lambda r: r["stats"].sass, default=None)
    lines += ["", f"{len(rows)} specialisations: {spills} spilling (spill or local bytes, STL/LDL), {fp64} with fp64 SASS"
              + (f"; most SASS: {worst['stats'].sass} ({worst['case']}, sm_{worst['arch']})" if worst else "")]
    return "\n".join(lines)


@command("bench-kernel", "the verifier and experts kernels compiled offline for sm_90 and sm_120: registers, "
                         "spills, SASS, fp64; the experts' bytes and memory-bound time per GPU")
def main(argv: list[str] | None = None) -> int:
    from .experts_table import (
        SHAPES,
        WEIGHTS,
        bandwidths,
        expert_cases,
        format_experts_row,
        format_experts_table,
        measure_experts,
    )
    p = parser("bench-kernel")
    p.add_argument("--archs", type=int, nargs="+", default=[90, 120], choices=[90, 120])
    p.add_argument("--kernels", nargs="+", default=["verifier", "experts"], choices=["verifier", "experts"])
    p.add_argument("--routers", nargs="+", default=list(ROUTERS), choices=list(ROUTERS))
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    p.add_argument("--tokens", type=int, nargs="+", default=[16, 64, 128])
    p.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES), help="experts kernel shapes")
    p.add_argument("--weights", nargs="+", default=list(WEIGHTS), choices=list(WEIGHTS),
                   help="experts kernel weight formats")
    p.add_argument("--expert-tokens", type=int, nargs="+", default=[1, 64], help="tokens per experts pass")
    p.add_argument("--jobs", type=int, default=1, help="compile in this many processes")
    a = p.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        p.error("TRITON_INTERPRET is set: unset it, the kernel is compiled for real GPU targets")
    t0 = time.perf_counter()
    if "verifier" in a.kernels:
        rows = run(a.archs, a.routers, a.dtypes, a.tokens, a.jobs,
                   on_row=lambda r: print(format_row(r), file=sys.stderr, flush=True))
        print("## verifier kernel\n\n" + format_table(rows) + "\n")
    if "experts" in a.kernels:
        devices = bandwidths()
        work = [(c, arch) for c in expert_cases(a.shapes, a.weights, a.expert_tokens) for arch in a.archs]
        rows = _compiled(measure_experts, work, a.jobs,
                         on_row=lambda r: print(format_experts_row(r, devices), file=sys.stderr, flush=True))
        print("## experts kernel\n\n" + format_experts_table(rows, devices) + "\n")
    print(f"compiled in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
