"""Benchmark rows: the experts kernel (`acceptmoe.kernels.experts`) compiled offline, with its memory-bound time.

For every expert shape (the tiny target, Qwen3-30B-A3B, GPT-OSS-120B) x weight format (bf16, fp32, MXFP4
packed) x tokens per pass T, both launches of one layer's pass (stage 1: gate/up + activation, stage 2: down
+ routing weights) are captured from the wrapper, compiled for sm_90 and sm_120, and read like the verifier's
rows (registers, stack, local and spill bytes, STL/LDL, SASS). Beside each row: the bytes the stage must read
(the used experts' weights in the stored form, plus its activations in and out) and the time that takes at the
published memory bandwidth of each GPU (`costs.shapes.GPUS`): the floor a
memory-bound kernel can reach, which gpu-check compares with the measured time.

Routing is fixed and stated: token t sends its k pairs to experts (t * k + j) mod E, so a pass of T tokens
uses min(T * k, E) distinct experts.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from acceptmoe.engine.mxfp4 import BLOCK

WEIGHTS = ("bf16", "fp32", "mxfp4")                # mxfp4: packed, bf16 compute
SHAPES = ("tiny", "qwen3-30b-a3b", "gpt-oss-120b")
_DTYPE = {"bf16": torch.bfloat16, "fp32": torch.float32, "mxfp4": torch.bfloat16}


@dataclass(frozen=True)
class ExpertsCase:
    shape: str
    weights: str
    tokens: int


def expert_cases(shapes=SHAPES, weights=WEIGHTS, tokens=(1, 64)) -> list[ExpertsCase]:
    return [ExpertsCase(s, w, T) for T in tokens for s in shapes for w in weights]


def _operands(case: ExpertsCase):
    """(x, weights, group, k, E, activation) of the case. Only shapes and dtypes reach the compiler, so each
    weight is one zero broadcast to its shape (a GPT-OSS-120B layer in fp32 would be 13 GB)."""
    from acceptmoe.costs.shapes import get_shape
    sh = get_shape(case.shape)
    H, I, E, k, dtype = sh.hidden_size, sh.intermediate_size, sh.num_experts, sh.top_k, _DTYPE[case.weights]
    zeros = lambda *shape, dtype=dtype: torch.zeros((), dtype=dtype).expand(*shape)   # noqa: E731
    if case.weights == "mxfp4":
        w = {f"{n}_{part}": zeros(E, rows, cols // BLOCK, *((BLOCK // 2,) if part == "blocks" else ()),
                                  dtype=torch.uint8)
             for n, (rows, cols) in (("w1", (2 * I, H)), ("w2", (H, I))) for part in ("blocks", "scales")}
    else:
        w = {"w1": zeros(E, 2 * I, H), "w2": zeros(E, H, I)}
    if sh.bias:
        w.update(b1=zeros(E, 2 * I), b2=zeros(E, H))
    group = torch.arange(case.tokens * k) % E                            # [T*k] token t -> (t*k + j) mod E
    return torch.zeros(case.tokens, H, dtype=dtype), w, group, k, E, sh.activation


def stage_bytes(case: ExpertsCase) -> tuple[int, int]:
    """Bytes stage 1 and stage 2 must read: the used experts' w1 (w2) in stored form (+ biases), and x (h)."""
    x, w, group, k, E, _ = _operands(case)
    used = min(group.numel(), E)
    size = lambda names: sum(w[n][0].numel() * w[n].element_size() for n in names if n in w)   # noqa: E731
    one1 = size(("w1", "w1_blocks", "w1_scales", "b1"))
    one2 = size(("w2", "w2_blocks", "w2_scales", "b2"))
    T, H = x.shape
    act = x.element_size()
    I = (w["w1"] if "w1" in w else w["w1_blocks"]).shape[1] // 2
    pairs = T * k
    return (used * one1 + T * H * act + pairs * I * act,            # w1, x in, h out
            used * one2 + pairs * I * act + pairs * H * act)        # w2, h in, out


def launches_of(case: ExpertsCase):
    from acceptmoe.kernels import experts as module
    from acceptmoe.kernels.offline import capture_launches
    x, w, group, k, E, act = _operands(case)
    return capture_launches(module, "_experts_kernel", lambda: module.experts(x, w, group, k, E, act))


def measure_experts(args: tuple[ExpertsCase, int]) -> list[dict]:
    from acceptmoe.kernels.offline import compile_stats
    case, arch = args
    t0 = time.perf_counter()
    rows = []
    for stage, (launch, nbytes) in enumerate(zip(launches_of(case), stage_bytes(case), strict=False), start=1):
        rows.append({"case": case, "arch": arch, "stage": stage, "num_warps": launch.kwargs.get("num_warps"),
                     "stats": compile_stats(launch, arch), "bytes": nbytes})
    for r in rows:
        r["compile_s"] = (time.perf_counter() - t0) / len(rows)
    return rows


def bandwidths() -> list:
    """The GPUs' published memory bandwidths (`costs.shapes.GPUS`, the one list every bound column uses)."""
    from acceptmoe.costs.shapes import GPUS
    return list(GPUS)


def format_experts_row(r: dict, devices) -> str:
    c, s = r["case"], r["stats"]
    bounds = " | ".join(f"{r['bytes'] / (d.memory_gbps * 1e9) * 1e6:.1f}" for d in devices)
    return (f"| sm_{r['arch']} | {c.shape} | {c.weights} | {c.tokens} | {r['stage']} | {r['num_warps']} | "
            f"{s.registers} | {s.stack} | {s.local} | {s.spill} | {s.local_ops} | {s.sass} | "
            f"{r['bytes'] / 1e6:.2f} | {bounds} |")


def format_experts_table(rows: list[dict], devices) -> str:
    names = " | ".join(f"{d.name} us" for d in devices)
    lines = [f"| arch | shape | weights | T | stage | warps | regs | stack B | local B | spill B | STL/LDL | SASS "
             f"| MB read | {names} |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(devices)]
    lines += [format_experts_row(r, devices) for r in rows]
    spills = sum(r["stats"].spills for r in rows)
    lines += ["", f"{len(rows)} experts-kernel launches: {spills} spilling (spill or local bytes, STL/LDL). The us "
              "columns are MB read / published memory bandwidth: the memory-bound floor of each stage."]
    return "\n".join(lines)
