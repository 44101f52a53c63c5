"""The expert MLP every store computes, and how a pass's (token, expert) pairs are multiplied.

    y, counts = experts_by_group(math, x[T, H], group[T*k], weights[T, k], G, w, expert_path(x, T*k, E, w))
    combine(y, k) -> [T, H]

A MoE layer is a fixed sequence of tensor operations, whatever the routing: the T*k (token, expert) pairs
are sorted by their weight group (a store's experts, or its slots) and multiplied group by group, and each
pair's weighted output comes back in pair order and is summed over k. One rule (`expert_path`) picks how: on
CUDA the experts kernel (`acceptmoe.kernels.experts`: block-aligned tiles per group, dense or MXFP4-packed
weights) except where torch has a native grouped matmul for dense weights (bf16 on sm90 / sm100, until
gpu-check's timing says otherwise), there two `grouped_mm`s; on CPU two `grouped_mm`s, or for a pass with few
pairs (a decode step) per pair on gathered weights (the CPU grouped_mm pays per group). No Python loop over
experts and no host sync.

`ExpertMath.kept` is the one rule for the form a device keeps experts in (`keeps_packed`: on CUDA the stored
form, MXFP4 stays packed and the kernel dequantises in registers; elsewhere dense in the compute dtype);
`engine.memory` sizes stores by it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from . import mxfp4

PACKED = (("w1", "w1_blocks", "w1_scales"), ("w2", "w2_blocks", "w2_scales"))   # dense name, its packed pair


def grouped_mm(x: Tensor, w: Tensor, offs: Tensor) -> Tensor:
    """x [M, K] with rows grouped, w [G, K, N], offs [G] int32 cumulative row ends -> [M, N].

    Rows past offs[-1] are left undefined. `torch.nn.functional.grouped_mm` where torch has the kernel for
    the device and dtype (`native_grouped_mm`) and both operands meet its layout rule (`kernel_layout`);
    elsewhere one matmul per group after reading offs on the host (a reference path with one host sync),
    counted in `FELL_BACK`. The choice depends on these operands alone: one odd-shaped call never changes
    the path of the next."""
    if native_grouped_mm(x.device, x.dtype) and kernel_layout(x) and kernel_layout(w):
        return F.grouped_mm(x, w, offs=offs)
    FELL_BACK[(x.device.type, x.dtype)] = FELL_BACK.get((x.device.type, x.dtype), 0) + 1
    out = x.new_zeros(x.shape[0], w.shape[-1])
    lo = 0
    for g, hi in enumerate(offs.tolist()):
        if hi > lo:
            out[lo:hi] = x[lo:hi] @ w[g]
        lo = hi
    return out


FELL_BACK: dict[tuple[str, torch.dtype], int] = {}   # (device type, dtype) -> calls that took the per-group loop


def kernel_layout(mat: Tensor) -> bool:
    """Whether torch's grouped-matmul kernel takes `mat` as it lies in memory: one of its last two dimensions
    contiguous with the other's stride a multiple of 16 bytes, and on CUDA its data 16-byte aligned (torch's
    `check_valid_strides_and_return_transposed`; a hidden or intermediate size that is not a multiple of
    16 bytes fails it). tests/engine/test_grouped_mm.py holds it to the kernel's own verdict."""
    align = 16 // mat.element_size()
    inner, outer = mat.stride(-1), mat.stride(-2)
    rows_ok = inner == 1 and outer % align == 0 and outer >= mat.shape[-1]
    cols_ok = outer == 1 and inner % align == 0 and inner >= mat.shape[-2]
    return (rows_ok or cols_ok) and (mat.device.type != "cuda" or mat.data_ptr() % 16 == 0)


def keeps_packed(device: torch.device | str) -> bool:
    """Whether a store on `device` keeps experts in their stored form (packed MXFP4 stays packed): on CUDA, where
    the experts kernel dequantises in registers; elsewhere they are kept dense in the compute dtype."""
    return torch.device(device).type == "cuda"


@dataclass(frozen=True)
class ExpertMath:
    """The expert MLP, shared by every store. activation: `swiglu` (Qwen3: silu(gate) * up, gate and up
    halves) or `clamped_swiglu` (GPT-OSS: interleaved gate/up, gate <= limit, |up| <= limit,
    (up + 1) * gate * sigmoid(alpha * gate))."""
    activation: str
    dtype: torch.dtype
    alpha: float = 1.702
    limit: float = 7.0

    def act(self, h: Tensor) -> Tensor:
        """[n, 2I] -> [n, I]."""
        if self.activation == "swiglu":
            gate, up = h.chunk(2, dim=-1)                                # [n, I] each
            return F.silu(gate) * up
        gate, up = h[..., 0::2], h[..., 1::2]                            # [n, I] each (interleaved)
        gate = gate.clamp(max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        return (up + 1) * (gate * torch.sigmoid(gate * self.alpha))

    def kept(self, t: dict[str, Tensor], device: torch.device) -> dict[str, Tensor]:
        """The form a store keeps on `device` (what its matmuls read): on CUDA the stored tensors (MXFP4 stays
        packed, the experts kernel dequantises in registers), elsewhere `dense`."""
        if keeps_packed(device):
            return {n: v.to(device) for n, v in t.items()}
        return self.dense({n: v.to(device) for n, v in t.items()})

    def dense(self, t: dict[str, Tensor]) -> dict[str, Tensor]:
        """Stored tensors (dense or MXFP4-packed) -> dense `w1`, `w2` (+ biases) in the compute dtype."""
        out = {n: v for n, v in t.items() if n in ("w1", "w2", "b1", "b2")}
        for name, blocks, scales in PACKED:
            if blocks in t:
                out[name] = mxfp4.dequantize(t[blocks], t[scales], self.dtype)
        return out

    def __call__(self, x: Tensor, t: dict[str, Tensor]) -> Tensor:
        """x [n, H] -> [n, H] through one expert `t` (its stored tensors): the plain definition."""
        w = self.dense(t)
        return F.linear(self.act(F.linear(x, w["w1"], w.get("b1"))), w["w2"], w.get("b2"))

    def grouped(self, xs: Tensor, w: dict[str, Tensor], offs: Tensor, group: Tensor) -> Tensor:
        """xs [M, H] rows sorted by group, w stacked [G, ...] from `grouped_weights`, offs [G] int32,
        group [M] -> [M, H]."""
        h = grouped_mm(xs, w["w1t"], offs)                               # [M, 2I]
        if "b1" in w:
            h = h + w["b1"][group]
        y = grouped_mm(self.act(h), w["w2t"], offs)                      # [M, H]
        if "b2" in w:
            y = y + w["b2"][group]
        return y

    def per_pair(self, x: Tensor, w: dict[str, Tensor], group: Tensor, k: int) -> Tensor:
        """The same MLP with each pair's weights gathered: x [T, H], group [T*k] -> [T*k, H] in pair order."""
        T, H = x.shape
        xs = x[:, None].expand(T, k, H).reshape(T * k, 1, H)             # [P, 1, H]
        h = torch.bmm(xs, w["w1t"][group])                               # [P, 1, 2I]
        if "b1" in w:
            h = h + w["b1"][group][:, None]
        y = torch.bmm(self.act(h), w["w2t"][group])                      # [P, 1, H]
        if "b2" in w:
            y = y + w["b2"][group][:, None]
        return y.view(T * k, H)


def grouped_weights(kept: dict[str, Tensor]) -> dict[str, Tensor]:
    """Stacked weights -> the operands of every path: dense w1 [G, 2I, H], w2 [G, H, I] gain their transposed
    views w1t, w2t (sharing storage) for `ExpertMath.grouped` and `per_pair`; packed weights and biases stay
    as they are (the experts kernel reads them directly)."""
    if "w1" not in kept:
        return dict(kept)
    return {**kept, "w1t": kept["w1"].transpose(1, 2), "w2t": kept["w2"].transpose(1, 2)}


def native_grouped_mm(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether torch has a grouped-matmul kernel here that keeps `offs` on the device: CPU (fp32, bf16, fp16)
    and CUDA bf16 on compute capability 9.x / 10.x. Elsewhere torch's own fallback reads `offs` on the host,
    a sync that a CUDA graph cannot hold."""
    if device.type == "cpu":
        return dtype in (torch.float32, torch.bfloat16, torch.float16)
    if device.type == "cuda":
        return dtype == torch.bfloat16 and torch.cuda.get_device_capability(device)[0] in (9, 10)
    return False


GATHER_BYTES = 2 << 20          # per-pair gathers copy pairs x expert bytes; above this one grouped matmul wins
EXPERT_PATHS = ("per_pair", "grouped", "triton")


def expert_path(x: Tensor, pairs: int, num_experts: int, w: dict[str, Tensor]) -> str:
    """The one rule choosing how a pass's experts are multiplied (`EXPERT_PATHS`):
    - CUDA: the experts kernel (`triton`), except dense weights in a dtype torch has a native grouped matmul
      for (`native_grouped_mm`: bf16 on sm90 / sm100), which run `grouped` until gpu-check's experts timing
      shows the kernel ahead there; packed MXFP4 weights always take the kernel;
    - CPU: `per_pair` on gathered weights for a pass with few pairs whose gathers are small (pairs * 6 <= E,
      and pairs * one expert's w1 + w2 bytes <= GATHER_BYTES: the CPU grouped_mm costs a few microseconds per
      group, used or not, while a gather copies each pair's weights: at the tiny model's 49 KB experts a
      decode step gathers, at Qwen3-30B-A3B's 19 MB (fp32) it runs grouped, 11 ms against 114 ms per layer on
      one core), else `grouped`;
    - any other device: `per_pair`.
    It depends on the pass, the device, E and the experts' stored form only, so both stores choose alike."""
    if x.device.type == "cuda":
        return "grouped" if "w1" in w and native_grouped_mm(x.device, x.dtype) else "triton"
    if x.device.type == "cpu":
        per_expert = w["w1"][0].numel() * w["w1"].element_size() + w["w2"][0].numel() * w["w2"].element_size()
        return "per_pair" if 6 * pairs <= num_experts and pairs * per_expert <= GATHER_BYTES else "grouped"
    return "per_pair"


def group_counts(group: Tensor, num_groups: int) -> Tensor:
    """Rows per group [G] (long) of group ids [P]. `bincount` on CPU; on other devices a scatter-add, because
    CUDA's bincount reads the largest id on the host."""
    if group.device.type == "cpu":
        return torch.bincount(group, minlength=num_groups)
    return torch.zeros(num_groups, dtype=torch.long, device=group.device).index_add_(0, group, torch.ones_like(group))


def expert_bytes(layer_weights: dict[str, Tensor]) -> int:
    """Bytes of one expert in its stored form (what a load moves)."""
    return sum(t[0].numel() * t.element_size() for t in layer_weights.values())


def experts_by_group(math: ExpertMath, x: Tensor, group: Tensor, weights: Tensor, num_groups: int,
                     w: dict[str, Tensor], path: str, skip: int | None = None) -> tuple[Tensor, Tensor]:
    """Pairs -> (weighted expert outputs [T*k, H] in pair order, rows per group [G]). group [T*k]: the weight
    group of each pair (pair p = token p // k), weights [T, k] the routing weights; path: `expert_path`'s
    choice. `skip`: a group whose pairs are known to give zeros (the offloaded store's zero slot), which the
    kernel leaves out."""
    T, k = weights.shape
    counts = group_counts(group, num_groups)                             # [G]
    if path == "triton":
        from acceptmoe.kernels.experts import experts
        y = experts(x, w, group, k, num_groups, math.activation, weights=weights, skip=skip, alpha=math.alpha,
                    limit=math.limit)                                    # [P, H] weighted, in pair order
        return y, counts
    if path == "per_pair":
        y = math.per_pair(x, w, group, k)                                # [P, H]
    elif path == "grouped":
        sorted_group, order = torch.sort(group, stable=True)             # [P] each, by group
        offs = counts.cumsum(0, dtype=torch.int32)                       # [G]
        ys = math.grouped(x[order // k], w, offs, sorted_group)          # [P, H] by group
        y = torch.empty_like(ys).index_copy_(0, order, ys)               # [P, H] in pair order
    else:
        raise ValueError(f"unknown expert path {path!r}; valid: {', '.join(EXPERT_PATHS)}")
    return y * weights.reshape(-1, 1).to(y.dtype), counts


def combine(y: Tensor, k: int) -> Tensor:
    """Weighted pair outputs y [T*k, H] in pair order -> [T, H]: the sum over each token's k experts."""
    return y.view(-1, k, y.shape[-1]).sum(1)
