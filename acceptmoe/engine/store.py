"""ExpertStore: where expert weights live and how a routed MoE layer is computed.

    y = store.run(layer, x[T, H], ids[T, k], weights[T, k])     # only experts that received tokens run
    store.resident(layer) -> bool [E]                           # the residency mask (pruning input)
    store.stats(), store.reset_counters()

Two kinds share one expert computation (`ExpertMath`) and one dispatch (`Dispatch`: the T*k (token,
expert) pairs sorted by expert, one small matmul chain per used expert on a contiguous segment, each pair's
output weighted, put back in pair order and summed over k, so the result does not depend on the order
experts are computed in):

- `ResidentStore`: every expert of every MoE layer on the device. Every used expert is a hit.
- `OffloadedStore`: all expert weights in host memory (pinned on CUDA); each MoE layer has an X-slot pool of
  device buffers. A non-resident expert is copied into a slot when it first receives a token in a pass,
  evicting the least-recently-used expert the current wave does not need. A pass whose routed union
  exceeds X runs in waves of at most X experts (resident experts first, so they are used before anything
  evicts them); each expert is loaded at most once per pass. On CPU a load is a real memory copy into the
  preallocated slot buffers, on CUDA a host-to-device copy, timed to its completion.

Counters per layer and in total: loads, bytes moved, hits and misses (one event per expert used by a pass:
hit = resident when the pass starts), seconds spent waiting for loads, passes.

Expert weights per layer are a dict of stacked tensors [E, ...]: `w1` [E, 2I, H] (gate and up rows),
`w2` [E, H, I], optional biases `b1` [E, 2I], `b2` [E, H]; MXFP4 checkpoints keep `w1_blocks`,
`w1_scales`, `w2_blocks`, `w2_scales` packed and are dequantised per expert when used.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from . import mxfp4

STORE_KINDS = ("resident", "offloaded")
COUNTERS = ("loads", "bytes", "hits", "misses", "wait_s", "passes")


@dataclass(frozen=True)
class ExpertMath:
    """The expert MLP, shared by every store. activation: `swiglu` (Qwen3: silu(gate) * up, gate and up
    halves) or `clamped_swiglu` (GPT-OSS: interleaved gate/up, gate <= limit, |up| <= limit,
    (up + 1) * gate * sigmoid(alpha * gate))."""
    activation: str
    dtype: torch.dtype
    alpha: float = 1.702
    limit: float = 7.0

    def weights(self, t: dict[str, Tensor]) -> tuple[Tensor, Tensor | None, Tensor, Tensor | None]:
        """One expert's stored tensors -> (w1 [2I, H], b1 [2I] | None, w2 [H, I], b2 [H] | None)."""
        if "w1_blocks" in t:
            w1 = mxfp4.dequantize(t["w1_blocks"], t["w1_scales"], self.dtype)
            w2 = mxfp4.dequantize(t["w2_blocks"], t["w2_scales"], self.dtype)
        else:
            w1, w2 = t["w1"], t["w2"]
        return w1, t.get("b1"), w2, t.get("b2")

    def __call__(self, x: Tensor, t: dict[str, Tensor]) -> Tensor:
        """x [n, H] -> [n, H] through one expert."""
        w1, b1, w2, b2 = self.weights(t)
        h = F.linear(x, w1, b1)                                          # [n, 2I]
        if self.activation == "swiglu":
            gate, up = h.chunk(2, dim=-1)                                # [n, I] each
            a = F.silu(gate) * up
        else:
            gate, up = h[..., 0::2], h[..., 1::2]                        # [n, I] each (interleaved)
            gate = gate.clamp(max=self.limit)
            up = up.clamp(min=-self.limit, max=self.limit)
            a = (up + 1) * (gate * torch.sigmoid(gate * self.alpha))
        return F.linear(a, w2, b2)                                       # [n, H]


def expert_bytes(layer_weights: dict[str, Tensor]) -> int:
    """Bytes of one expert in its stored form (what a load moves)."""
    return sum(t[0].numel() * t.element_size() for t in layer_weights.values())


class Dispatch:
    """The T*k (token, expert) pairs of one pass, sorted by expert: inputs gathered once, each used expert a
    contiguous segment, outputs weighted and scattered back once. One host sync (the per-expert counts)."""

    def __init__(self, x: Tensor, ids: Tensor, weights: Tensor, num_experts: int):
        self.T, self.k = ids.shape
        flat = ids.reshape(-1)                                           # [T*k]
        self.order = torch.argsort(flat, stable=True)                    # [T*k] pair index, by expert
        self.xs = x[self.order // self.k]                                # [T*k, H] inputs, by expert
        self.ws = weights.reshape(-1)[self.order].to(x.dtype)            # [T*k]
        self.ys = torch.empty_like(self.xs)                              # [T*k, H] outputs, by expert
        counts = torch.bincount(flat, minlength=num_experts).tolist()
        ends = list(itertools.accumulate(counts))
        self.segments = [(e, end - c, end) for e, (c, end) in enumerate(zip(counts, ends)) if c]

    def compute(self, math: ExpertMath, segments, tensors_of) -> None:
        """Run each (expert, lo, hi) segment through its expert's weights, `tensors_of(expert)`."""
        for e, lo, hi in segments:
            self.ys[lo:hi] = math(self.xs[lo:hi], tensors_of(e))         # [n, H]

    def combine(self) -> Tensor:
        """Weighted sum over each token's k experts -> [T, H] (independent of the segments' order)."""
        out = torch.empty_like(self.ys)
        out[self.order] = self.ys * self.ws.unsqueeze(-1)                # [T*k, H] back in pair order
        return out.view(self.T, self.k, -1).sum(1)


class ExpertStore:
    """Common part: counters and the residency/run interface."""
    kind = "base"

    def __init__(self, math: ExpertMath, layers: dict[int, dict[str, Tensor]], num_experts: int,
                 device: torch.device):
        self.math, self.num_experts, self.device = math, num_experts, torch.device(device)
        self.layer_ids = tuple(sorted(layers))
        self.expert_bytes = {l: expert_bytes(w) for l, w in layers.items()}
        self.reset_counters()

    def reset_counters(self) -> None:
        self.counters = {l: dict.fromkeys(COUNTERS, 0) for l in self.layer_ids}
        for c in self.counters.values():
            c["wait_s"] = 0.0

    def stats(self) -> dict:
        total = {name: sum(c[name] for c in self.counters.values()) for name in COUNTERS}
        events = total["hits"] + total["misses"]
        total["hit_rate"] = total["hits"] / events if events else None
        return {"kind": self.kind, "total": total, "layers": {l: dict(c) for l, c in self.counters.items()}}

    def resident(self, layer: int) -> Tensor:
        raise NotImplementedError

    def run(self, layer: int, x: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
        raise NotImplementedError

    def _check_layer(self, layer: int) -> None:
        if layer not in self.counters:
            raise KeyError(f"layer {layer} has no experts; MoE layers: {list(self.layer_ids)}")


def _drain(layers: dict[int, dict[str, Tensor]]):
    """Yield (layer, weights) while removing them from `layers`, so each layer's source tensors can be freed
    as soon as the store holds its own copy (host memory peaks at one copy plus one layer)."""
    for l in sorted(layers):
        yield l, layers.pop(l)


class ResidentStore(ExpertStore):
    kind = "resident"

    def __init__(self, math, layers, num_experts, device):
        super().__init__(math, layers, num_experts, device)
        self.weights = {l: {n: t.to(device) for n, t in w.items()} for l, w in _drain(layers)}

    def resident(self, layer: int) -> Tensor:
        self._check_layer(layer)
        return torch.ones(self.num_experts, dtype=torch.bool, device=self.device)

    def run(self, layer: int, x: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
        self._check_layer(layer)
        d = Dispatch(x, ids, weights, self.num_experts)
        lw = self.weights[layer]
        d.compute(self.math, d.segments, lambda e: {n: t[e] for n, t in lw.items()})
        c = self.counters[layer]
        c["hits"] += len(d.segments)
        c["passes"] += 1
        return d.combine()                                               # [T, H]


class OffloadedStore(ExpertStore):
    kind = "offloaded"

    def __init__(self, math, layers, num_experts, device, slots: int):
        super().__init__(math, layers, num_experts, device)
        self.slots = slots
        pin = self.device.type == "cuda"
        self.pool = {l: {n: torch.empty((slots, *t.shape[1:]), dtype=t.dtype, device=self.device)
                         for n, t in w.items()} for l, w in layers.items()}
        self.host = {l: {n: (t.pin_memory() if pin else t.contiguous()) for n, t in w.items()}
                     for l, w in _drain(layers)}
        self.slot_of = {l: [-1] * num_experts for l in self.layer_ids}     # expert -> slot or -1
        self.expert_in = {l: [-1] * slots for l in self.layer_ids}        # slot -> expert or -1
        self.last_use = {l: [-1] * slots for l in self.layer_ids}         # slot -> LRU clock
        self.clock = 0

    def resident(self, layer: int) -> Tensor:
        self._check_layer(layer)
        return torch.tensor([s >= 0 for s in self.slot_of[layer]], dtype=torch.bool, device=self.device)

    def stats(self) -> dict:
        return {**super().stats(), "slots": self.slots}

    def run(self, layer: int, x: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
        self._check_layer(layer)
        d = Dispatch(x, ids, weights, self.num_experts)
        slot_of, c = self.slot_of[layer], self.counters[layer]
        segments = sorted(d.segments, key=lambda g: slot_of[g[0]] < 0)  # resident first, then by id
        hits = sum(slot_of[e] >= 0 for e, _, _ in segments)
        c["hits"] += hits
        c["misses"] += len(segments) - hits
        c["passes"] += 1
        pool = self.pool[layer]
        for start in range(0, len(segments), self.slots):
            wave = segments[start:start + self.slots]
            self._admit(layer, [e for e, _, _ in wave])
            d.compute(self.math, wave, lambda e: {n: t[slot_of[e]] for n, t in pool.items()})
        return d.combine()                                               # [T, H]

    def _admit(self, layer: int, wave: list[int]) -> None:
        """Make every expert of the wave resident (loading misses), and mark them most recently used."""
        slot_of, expert_in, last_use = self.slot_of[layer], self.expert_in[layer], self.last_use[layer]
        needed = set(wave)
        for e in wave:
            if slot_of[e] < 0:
                s = self._victim(layer, needed)
                if expert_in[s] >= 0:
                    slot_of[expert_in[s]] = -1
                self._load(layer, e, s)
                slot_of[e], expert_in[s] = s, e
            self.clock += 1
            last_use[slot_of[e]] = self.clock

    def _victim(self, layer: int, needed: set[int]) -> int:
        """A free slot, else the least-recently-used slot whose expert the wave does not need."""
        expert_in, last_use = self.expert_in[layer], self.last_use[layer]
        free = [s for s, e in enumerate(expert_in) if e < 0]
        if free:
            return free[0]
        candidates = [s for s, e in enumerate(expert_in) if e not in needed]
        return min(candidates, key=lambda s: last_use[s])

    def _load(self, layer: int, expert: int, slot: int) -> None:
        """Copy one expert from host memory into a device slot, synchronously, and count it."""
        t0 = time.perf_counter()
        for n, buf in self.pool[layer].items():
            buf[slot].copy_(self.host[layer][n][expert], non_blocking=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        c = self.counters[layer]
        c["wait_s"] += time.perf_counter() - t0
        c["loads"] += 1
        c["bytes"] += self.expert_bytes[layer]


def validate_store_args(kind: str, slots: int | None, num_experts: int) -> None:
    """Check a store request before any weight is read."""
    if kind not in STORE_KINDS:
        raise ValueError(f"unknown store kind {kind!r}; valid: {', '.join(STORE_KINDS)}")
    if kind == "resident" and slots is not None:
        raise ValueError("slots applies to store='offloaded' only; drop it or use store='offloaded'")
    if kind == "offloaded" and (slots is None or not 1 <= slots <= num_experts):
        raise ValueError(f"store='offloaded' needs slots=X with 1 <= X <= num_experts={num_experts}, got {slots}")


def make_store(kind: str, math: ExpertMath, layers: dict[int, dict[str, Tensor]], num_experts: int,
               device: torch.device | str, slots: int | None = None) -> ExpertStore:
    """Build a store of `kind` ("resident" | "offloaded") from host-side stacked layer weights.

    The store takes ownership: `layers` is emptied as the store copies (or moves) each layer."""
    validate_store_args(kind, slots, num_experts)
    if kind == "resident":
        return ResidentStore(math, layers, num_experts, torch.device(device))
    return OffloadedStore(math, layers, num_experts, torch.device(device), slots)
