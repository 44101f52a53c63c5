"""gpu-check's experts kernel (`acceptmoe.kernels.experts`): checked against the definition, timed at the
paper's expert shapes against torch's two paths.

- `check_experts`: the Triton kernel vs the plain per-expert definition (`ExpertMath` in float64, one pair at
  a time, on the same rounded weights) at small shapes with ragged routing: bf16 dense + SwiGLU, fp32 dense +
  SwiGLU, MXFP4 + clamped SwiGLU with biases (bf16 compute). A case passes when its max error is within
  fp32 1e-5 / fp16 4e-3 / bf16 3e-2 of the largest output magnitude (tests/kernels/test_experts_kernel.py).
- `time_experts` (CUDA only): one MoE layer at Qwen3-30B-A3B's (dense bf16) and GPT-OSS-120B's (MXFP4 packed)
  expert shapes, all E experts on the device, seeded random top-k routing; per T the median ms of (a) the
  kernel, (b) torch's grouped path (`experts_by_group(..., "grouped")`, F.grouped_mm; "n/a" where torch has no
  native one, `native_grouped_mm`), (c) the per-pair path (gathered weights), each giving the weighted pair
  outputs [P, H]. The torch paths read dense bf16: for MXFP4 the experts are dequantised once before timing
  (`ExpertMath.dense`, as the resident store does at load time). Bytes a pass must read: distinct experts x one
  expert in the form the path reads (packed for the kernel on MXFP4, dense bf16 for torch) + x [T, H] + the
  output [P, H]; the kernel's GB/s is those bytes over its time, beside the GPU's published memory bandwidth
  (`costs.shapes.GPUS`; measured when the GPU is not listed).
Times are eager calls (CUDA events around each, after warm-up), launches and the kernel's `align` included.
The weights are a few random experts (`stored_weights`) copied to all E slots: every expert has its own
memory, so the reads are real; the timing does not depend on the values.

    check = check_experts("cuda")        # {"check": "experts", "verdict": "PASS", "cases": [...]}
    rows = time_experts("cuda")          # one row per (shape, T)
    print(check_table(check), timing_table(rows), sep="\n\n")
"""
from __future__ import annotations

import dataclasses
import statistics
import time

import torch
from torch import Tensor

TOL = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}   # of the largest output magnitude
CASES = (   # name, compute dtype, MXFP4-packed, activation, biases
    ("bf16 dense swiglu", torch.bfloat16, False, "swiglu", False),
    ("fp32 dense swiglu", torch.float32, False, "swiglu", False),
    ("mxfp4 clamped_swiglu + biases", torch.bfloat16, True, "clamped_swiglu", True),
)
PAPER_SHAPES = ("qwen3-30b-a3b", "gpt-oss-120b")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# ----- kernel = definition at small shapes -----
def ragged_groups(P: int, G: int, gen: torch.Generator) -> Tensor:
    """[P] group ids: ~70% of the pairs in three popular groups (0, 5, G-1), the rest spread, many groups empty."""
    popular = torch.tensor([0, 5 % G, G - 1])
    return torch.where(torch.rand(P, generator=gen) < 0.7, popular[torch.randint(0, 3, (P,), generator=gen)],
                       torch.randint(0, G, (P,), generator=gen))


def small_weights(G: int, H: int, I: int, dtype: torch.dtype, packed: bool, bias: bool, gen: torch.Generator):
    """(the kernel's operands on the CPU, the same weights dense in float64)."""
    from acceptmoe.engine import mxfp4
    ops, dense = {}, {}
    for name, shape in (("w1", (G, 2 * I, H)), ("w2", (G, H, I))):
        t = torch.randn(shape, generator=gen) * 0.2
        if packed:
            ops[f"{name}_blocks"], ops[f"{name}_scales"] = mxfp4.quantize(t)         # [G, R, C/32, 16], [G, R, C/32]
            dense[name] = mxfp4.dequantize(ops[f"{name}_blocks"], ops[f"{name}_scales"], dtype).double()
        else:
            ops[name] = t.to(dtype)
            dense[name] = ops[name].double()
    for name, shape in ((("b1", (G, 2 * I)), ("b2", (G, H))) if bias else ()):
        ops[name] = (torch.randn(shape, generator=gen) * 0.2).to(dtype)
        dense[name] = ops[name].double()
    return ops, dense


def reference(activation: str, x: Tensor, dense: dict, group: Tensor, k: int, rw: Tensor,
              skip: int | None = None) -> Tensor:
    """The plain definition: each pair through its own expert (`ExpertMath` in float64), weighted; pairs in
    the `skip` group are zero. -> [P, H] float64."""
    from acceptmoe.engine.store import ExpertMath
    math = ExpertMath(activation, torch.float64)
    out = torch.zeros(group.numel(), x.shape[1], dtype=torch.float64)
    for p, g in enumerate(group.tolist()):
        if g != skip:
            out[p] = math(x[p // k: p // k + 1].double(), {n: t[g] for n, t in dense.items()})[0] * rw.reshape(-1)[p]
    return out


def check_experts(device, seed: int = 0, T: int = 8, k: int = 4, G: int = 12, H: int = 64, I: int = 32,
                  fn=None) -> dict:
    """The experts kernel (or `fn`, same signature) on `device` vs `ExpertMath(activation, float64)` per pair,
    every case of CASES with ragged routing: max error / max |reference| within TOL of the compute dtype."""
    from acceptmoe.kernels.experts import experts
    fn, device, cases = fn or experts, torch.device(device), []
    for i, (name, dtype, packed, activation, bias) in enumerate(CASES):
        gen = torch.Generator().manual_seed(seed + i)
        ops, dense = small_weights(G, H, I, dtype, packed, bias, gen)
        x = torch.randn(T, H, generator=gen).to(dtype)                       # [T, H]
        rw = torch.rand(T, k, generator=gen)                                 # [T, k]
        group = ragged_groups(T * k, G, gen)                                 # [P]
        out = fn(x.to(device), {n: t.to(device) for n, t in ops.items()}, group.to(device), k, G, activation,
                 weights=rw.to(device)).cpu()                                # [P, H]
        ref = reference(activation, x, dense, group, k, rw)                 # [P, H]
        scale = ref.abs().max().item() or 1.0
        fits = tuple(out.shape) == (T * k, H) and out.dtype == dtype
        err = (out.double() - ref).abs().max().item() / scale if fits else float("inf")
        cases.append({"case": name, "dtype": str(dtype).removeprefix("torch."), "format": "mxfp4" if packed else "dense",
                      "activation": activation, "bias": bias, "shape": [T, k, G, H, I],
                      "groups_used": int(group.unique().numel()), "rel_max_err": err, "tolerance": TOL[dtype],
                      "verdict": verdict(err <= TOL[dtype])})
    return {"check": "experts", "verdict": verdict(all(c["verdict"] == "PASS" for c in cases)), "cases": cases}


# ----- timing at the paper's shapes -----
def published_peak(device_name: str):
    """The published GPU (`costs.shapes.GPUS`) whose name occurs in the device's ("H200" in "NVIDIA H200"), or None."""
    from acceptmoe.costs.shapes import GPUS
    return next((d for d in GPUS if d.name.lower() in device_name.lower()), None)


def device_peak(device) -> tuple[float, str]:
    """(memory GB/s, where from): published for a listed GPU, else measured (`replay.bandwidth.measure`)."""
    from acceptmoe.experiments.replay.bandwidth import measure
    device = torch.device(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
    bound = published_peak(name)
    if bound is not None:
        return bound.memory_gbps, f"{bound.name} published"
    return measure(device, torch.bfloat16)["memory_gbps"], "measured"


def timed(fn, device, repeats: int = 20, warmup: int = 3) -> float:
    """Median milliseconds of fn() after `warmup` calls (CUDA events on CUDA): gpu-check's one timer."""
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            out.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(out)


def _ms(fn, device: torch.device, repeats: int, warmup: int) -> float | None:
    """`timed`, or None when the device runs out of memory."""
    try:
        return timed(fn, device, repeats, warmup)
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None


def _store_path(math, x: Tensor, group: Tensor, rw: Tensor, num_groups: int, w: dict, per_pair: bool):
    """The store's torch path (`experts_by_group`) -> a callable giving the weighted pair outputs [P, H]."""
    from acceptmoe.engine.store import experts_by_group
    path = "per_pair" if per_pair else "grouped"
    return lambda: experts_by_group(math, x, group, rw, num_groups, w, path)[0]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def time_shape(device, shape, tokens=(1, 16, 64), repeats: int = 20, peak: tuple[float, str] | None = None,
               seed: int = 0, warmup: int = 3, distinct: int = 8) -> list[dict]:
    """One MoE layer of ExpertShape `shape` on `device` at each T of `tokens`: see the module docstring.
    `distinct` random experts in the stored format are copied to all E (each its own memory). Any device;
    on CPU the kernel runs under the interpreter, so only tiny shapes there (the tests)."""
    from acceptmoe.engine.store import FELL_BACK, grouped_weights, native_grouped_mm
    from acceptmoe.kernels.experts import experts
    device = torch.device(device)
    E, H, k, dtype, packed = shape.num_experts, shape.hidden_size, shape.top_k, shape.dtype, shape.format == "mxfp4"
    math = shape.math(dtype)
    few = dataclasses.replace(shape, num_experts=min(distinct, E)).stored_weights(dtype, seed)
    few = {n: t.to(device) for n, t in few.items()}                            # [e, ...]
    tile = torch.arange(E, device=device) % min(distinct, E)                   # [E] expert -> its source
    stored = {n: t[tile] for n, t in few.items()}                              # [E, ...] stored format
    dense = stored if not packed else {n: t[tile] for n, t in math.dense(few).items()}   # [E, ...] bf16
    w = grouped_weights(dense)
    del few
    native = native_grouped_mm(device, dtype)
    elt = torch.empty((), dtype=dtype).element_size()
    gen, rows = torch.Generator().manual_seed(seed), []
    for T in tokens:
        x = torch.randn(T, H, generator=gen).to(device, dtype)                  # [T, H]
        top, ids = torch.randn(T, E, generator=gen).topk(k, -1)                 # [T, k] each: random top-k
        rw = top.softmax(-1).to(device)                                         # [T, k] fp32
        group = ids.reshape(-1).to(device)                                      # [P]
        used, P = int(ids.unique().numel()), T * k
        before = FELL_BACK.get((device.type, dtype), 0)
        paths = {"kernel": lambda: experts(x, stored, group, k, E, shape.activation, weights=rw),   # [P, H] # noqa: B023 (called in this iteration)
                 "grouped": _store_path(math, x, group, rw, E, w, per_pair=False),                 # [P, H]
                 "per_pair": _store_path(math, x, group, rw, E, w, per_pair=True)}                 # [P, H]
        ms = {p: _ms(f, device, repeats, warmup) if p != "grouped" or native else None for p, f in paths.items()}
        try:
            ref = paths["per_pair"]().float()                                   # [P, H]
            err = ((paths["kernel"]().float() - ref).abs().max() / ref.abs().max()).item()
        except torch.OutOfMemoryError:
            err = None
        io = (T * H + P * H) * elt                                              # x in, pair outputs out
        kernel_bytes = used * shape.stored_bytes(dtype) + io                    # packed on MXFP4
        gbps = kernel_bytes / ms["kernel"] / 1e6 if ms["kernel"] else None
        fell_back = native and FELL_BACK.get((device.type, dtype), 0) > before
        rows.append({"shape": shape.name, "format": "mxfp4" if packed else f"dense {str(dtype)[6:]}", "T": T,
                     "k": k, "experts_used": used, "kernel_bytes": kernel_bytes,
                     "torch_bytes": used * shape.dense_bytes(dtype) + io,
                     "torch_weights": "bf16, dequantised before timing" if packed else "bf16 as stored",
                     "grouped": ("n/a: no native grouped_mm" if not native else
                                 "per-group loop (operands outside F.grouped_mm's layout)" if fell_back else "F.grouped_mm"),
                     "kernel_ms": ms["kernel"], "grouped_ms": ms["grouped"], "per_pair_ms": ms["per_pair"],
                     "kernel_gbps": gbps, "peak_gbps": peak[0] if peak else None, "peak": peak[1] if peak else None,
                     "peak_fraction": _ratio(gbps, peak[0] if peak else None),
                     "speedup_vs_grouped": _ratio(ms["grouped"], ms["kernel"]),
                     "speedup_vs_per_pair": _ratio(ms["per_pair"], ms["kernel"]), "rel_err_vs_per_pair": err})
    return rows


def time_experts(device, shapes=PAPER_SHAPES, tokens=(1, 16, 64), repeats: int = 20, seed: int = 0) -> list[dict]:
    """`time_shape` at each of the paper's `shapes` on a CUDA device (weights freed between shapes)."""
    from acceptmoe.costs.shapes import get_shape
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"time_experts times the paper's expert shapes on a CUDA GPU, not on {device} "
                         "(there the kernel would run under the Triton interpreter); check_experts runs anywhere")
    peak, rows = device_peak(device), []
    for name in shapes:
        rows += time_shape(device, get_shape(name), tokens, repeats, peak, seed)
        torch.cuda.empty_cache()
    return rows


# ----- Markdown -----
def _f(v, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def check_table(check: dict) -> str:
    lines = ["| experts case | weights | activation | groups used | rel max err | tolerance | verdict |",
             "|---|---|---|---:|---:|---:|---|"]
    lines += [f"| {c['case']} | {c['format']} {c['dtype']} | {c['activation']} | {c['groups_used']} | "
              f"{c['rel_max_err']:.2e} | {c['tolerance']:.0e} | {c['verdict']} |" for c in check["cases"]]
    return "\n".join(lines)


def timing_table(rows: list[dict]) -> str:
    lines = ["| experts shape | format | T | experts used | kernel MB | torch MB | torch weights | kernel ms | "
             "grouped ms | per-pair ms | kernel GB/s | peak GB/s | of peak | x grouped | x per-pair | err vs per-pair |",
             "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        grouped = _f(r["grouped_ms"], ".3f") + (" (loop)" if "loop" in r["grouped"] else "")
        peak = f"{r['peak_gbps']:.0f} ({r['peak']})" if r["peak_gbps"] else "n/a"
        lines.append(f"| {r['shape']} | {r['format']} | {r['T']} | {r['experts_used']} | {r['kernel_bytes'] / 1e6:.1f} | "
                     f"{r['torch_bytes'] / 1e6:.1f} | {r['torch_weights']} | {_f(r['kernel_ms'], '.3f')} | {grouped} | "
                     f"{_f(r['per_pair_ms'], '.3f')} | {_f(r['kernel_gbps'], '.0f')} | {peak} | "
                     f"{_f(r['peak_fraction'], '.2f')} | {_f(r['speedup_vs_grouped'], '.2f')} | "
                     f"{_f(r['speedup_vs_per_pair'], '.2f')} | {_f(r['rel_err_vs_per_pair'], '.1e')} |")
    return "\n".join(lines)
