"""ExpertStore: where expert weights live and how a routed MoE layer is computed on the device.

    y = store.run(layer, x[T, H], ids[T, k], weights[T, k])     # only experts that received tokens run
    store.resident(layer) -> bool [E]                           # the residency mask (pruning input)
    store.stats(), store.reset_counters()
    state = store.pool_state(); store.restore_pool(state)      # offloaded: the pool, saved and put back

A MoE layer is a fixed sequence of tensor operations, whatever the routing: the T*k (token, expert) pairs
are sorted by their weight group and multiplied group by group, and each pair's weighted output comes back in
pair order and is summed over k. One rule (`expert_path`) picks how: on CUDA the experts kernel
(`acceptmoe.kernels.experts`: block-aligned tiles per group, dense or MXFP4-packed weights) except where
torch has a native grouped matmul for dense weights (bf16 on sm90 / sm100, until gpu-check's timing says
otherwise), there two `grouped_mm`s; on CPU two `grouped_mm`s, or for a pass with few pairs (a decode step)
per pair on gathered weights (the CPU grouped_mm pays per group). No Python loop over experts and no host
sync inside a pass on a resident store; the counters live in a device tensor and are read by `stats()`
after the step.

- `ResidentStore`: every expert of every MoE layer on the device; groups = experts. Every used expert
  is a hit.
- `OffloadedStore`: all expert weights in host memory (pinned on CUDA); each MoE layer has an X-slot pool
  of device buffers. A non-resident expert is copied into a slot when it first receives a token in a pass,
  evicting the least-recently-used expert the current wave does not need. A pass whose routed union
  exceeds X runs in waves of at most X experts (resident experts first, then by expert id, so residents
  are used before anything evicts them); each expert is loaded at most once per pass. The LRU state
  (expert -> slot, slot -> expert, last use) is device tensors and the admission of a wave is computed
  there; only the copies are host-driven: on CUDA the list of experts to copy is read once per wave (the
  one host sync of the offloaded store) and the copies run on a side stream, timed with events
  (`load_times`); on CPU they are one indexed copy into the preallocated slots. Groups = slots plus one
  zero slot that absorbs the pairs outside the current wave (their contribution is exactly zero).

Counters per layer and in total (`COUNTERS`): loads, bytes moved, hits and misses (one event per expert used
by a pass: hit = resident when the pass starts), `wait_s` (seconds the compute stalled for loads), `copy_s`
(seconds the copies took; on CPU the copy runs inline, so the two are equal), passes.

Expert weights per layer are a dict of stacked tensors [E, ...]: `w1` [E, 2I, H] (gate and up rows),
`w2` [E, H, I], optional biases `b1` [E, 2I], `b2` [E, H]. MXFP4 checkpoints give `w1_blocks`, `w1_scales`,
`w2_blocks`, `w2_scales` (packed). On CUDA they stay packed everywhere (device memory, the slot pool, pinned
host memory; `ExpertMath.kept`): the experts kernel dequantises tiles in registers, so GPT-OSS-120B's experts
take 61 GB resident instead of 230 GB in bf16. On CPU (no kernel) the resident store keeps one dequantised
copy made at load time, and the offloaded store moves packed bytes and dequantises each load into its slot.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from . import mxfp4
from .load_times import LoadTimes

STORE_KINDS = ("resident", "offloaded")
COUNTERS = ("loads", "bytes", "hits", "misses", "wait_s", "copy_s", "passes")
_PACKED = (("w1", "w1_blocks", "w1_scales"), ("w2", "w2_blocks", "w2_scales"))
_HITS, _MISSES, _LOADS, _PASSES = range(4)                              # columns of ExpertStore.tally


def grouped_mm(x: Tensor, w: Tensor, offs: Tensor) -> Tensor:
    """x [M, K] with rows grouped, w [G, K, N], offs [G] int32 cumulative row ends -> [M, N].

    Rows past offs[-1] are left undefined. `torch.nn.functional.grouped_mm` where the device and dtype
    support it (CPU: any float dtype; CUDA: bf16 on sm90+); elsewhere one matmul per group after reading
    offs on the host (a reference path with one host sync)."""
    key = (x.device.type, x.dtype)
    if _NATIVE.get(key, True):
        try:
            return F.grouped_mm(x, w, offs=offs)
        except (RuntimeError, NotImplementedError, ValueError, TypeError):
            _NATIVE[key] = False
    out = x.new_zeros(x.shape[0], w.shape[-1])
    lo = 0
    for g, hi in enumerate(offs.tolist()):
        if hi > lo:
            out[lo:hi] = x[lo:hi] @ w[g]
        lo = hi
    return out


_NATIVE: dict[tuple[str, torch.dtype], bool] = {}


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
        if torch.device(device).type == "cuda":
            return {n: v.to(device) for n, v in t.items()}
        return self.dense({n: v.to(device) for n, v in t.items()})

    def dense(self, t: dict[str, Tensor]) -> dict[str, Tensor]:
        """Stored tensors (dense or MXFP4-packed) -> dense `w1`, `w2` (+ biases) in the compute dtype."""
        out = {n: v for n, v in t.items() if n in ("w1", "w2", "b1", "b2")}
        for name, blocks, scales in _PACKED:
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
    """Whether torch has a grouped-matmul kernel here that keeps `offs` on the device: CPU (any float dtype)
    and CUDA bf16 on compute capability 9.x / 10.x. Elsewhere torch's own fallback reads `offs` on the host,
    a sync that a CUDA graph cannot hold."""
    if device.type == "cpu":
        return True
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


@dataclass(frozen=True)
class PoolState:
    """An offloaded store's pool: `expert_in` [L, X + 1] (slot -> expert or -1, the last slot the zero slot),
    `last_use` [L, X + 1] (LRU stamps), `clock` (the next wave's base stamp)."""
    expert_in: Tensor
    last_use: Tensor
    clock: int


class ExpertStore:
    """Common part: device counters and the residency/run interface."""
    kind = "base"

    def __init__(self, math: ExpertMath, layers: dict[int, dict[str, Tensor]], num_experts: int,
                 device: torch.device):
        self.math, self.num_experts, self.device = math, num_experts, torch.device(device)
        self.layer_ids = tuple(sorted(layers))
        self.row = {l: i for i, l in enumerate(self.layer_ids)}
        self.expert_bytes = {l: expert_bytes(w) for l, w in layers.items()}
        self.tally = torch.zeros(len(self.layer_ids), 4, dtype=torch.long, device=self.device)  # [L, 4]
        self.cells = {l: self.tally[i].unbind(0) for i, l in enumerate(self.layer_ids)}      # by column
        self.load_times = LoadTimes(self.layer_ids)                    # wait_s and copy_s (loads only)

    def reset_counters(self) -> None:
        """Zero the counters in place (a captured CUDA graph keeps adding to the same tally)."""
        self.tally.zero_()
        self.load_times.reset()

    def stats(self) -> dict:
        """Counters per layer and in total (reads the device tally: call it after a step, not inside)."""
        tally, (waits, copies) = self.tally.tolist(), self.load_times.totals()
        layers = {}
        for l in self.layer_ids:
            hits, misses, loads, passes = tally[self.row[l]]
            layers[l] = {"loads": loads, "bytes": loads * self.expert_bytes[l], "hits": hits, "misses": misses,
                         "wait_s": waits[l], "copy_s": copies[l], "passes": passes}
        total = {name: sum(c[name] for c in layers.values()) for name in COUNTERS}
        events = total["hits"] + total["misses"]
        total["hit_rate"] = total["hits"] / events if events else None
        return {"kind": self.kind, "total": total, "layers": layers}

    def resident(self, layer: int) -> Tensor:
        raise NotImplementedError

    def run(self, layer: int, x: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
        raise NotImplementedError

    def _check_layer(self, layer: int) -> None:
        if layer not in self.row:
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
        self.weights = {l: grouped_weights(math.kept(w, device)) for l, w in _drain(layers)}
        self.ones = torch.ones(num_experts, dtype=torch.bool, device=self.device)

    def resident(self, layer: int) -> Tensor:
        self._check_layer(layer)
        return self.ones

    def run(self, layer: int, x: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
        self._check_layer(layer)
        flat = ids.reshape(-1)                                           # [T*k]
        w = self.weights[layer]
        y, counts = experts_by_group(self.math, x, flat, weights, self.num_experts, w,
                                     expert_path(x, flat.shape[0], self.num_experts, w))
        cells = self.cells[layer]
        cells[_HITS].add_(counts.count_nonzero())
        cells[_PASSES].add_(1)
        return combine(y, ids.shape[1])                                  # [T, H]


class OffloadedStore(ExpertStore):
    kind = "offloaded"

    def __init__(self, math, layers, num_experts, device, slots: int):
        super().__init__(math, layers, num_experts, device)
        E, X, dev = num_experts, slots, self.device
        self.slots, self.cuda = slots, dev.type == "cuda"
        self.pool, self.stage, self.host, self.operands = {}, {}, {}, {}
        for l, w in _drain(layers):
            # one expert in the form the pool keeps (`ExpertMath.kept`: packed stays packed on CUDA), for shapes
            kept = {n: t[:1] for n, t in w.items()} if self.cuda else math.dense({n: t[:1] for n, t in w.items()})
            # X slots + 1 zero slot (the group of pairs outside the current wave)
            self.pool[l] = {n: torch.zeros((X + 1, *t.shape[1:]), dtype=t.dtype, device=dev) for n, t in kept.items()}
            self.stage[l] = {n: (self.pool[l][n] if n in self.pool[l] else
                                 torch.zeros((X + 1, *t.shape[1:]), dtype=t.dtype, device=dev)) for n, t in w.items()}
            self.host[l] = {n: (t.pin_memory() if self.cuda else t.contiguous()) for n, t in w.items()}
            self.operands[l] = grouped_weights(self.pool[l])
        long = dict(dtype=torch.long, device=dev)
        self.slot_of = {l: torch.full((E + 1,), -1, **long) for l in self.layer_ids}     # expert -> slot | -1
        self.expert_in = {l: torch.full((X + 1,), -1, **long) for l in self.layer_ids}   # slot -> expert | -1
        self.last_use = {l: torch.full((X + 1,), -1, **long) for l in self.layer_ids}    # slot -> LRU clock
        self.arange_e, self.arange_x = torch.arange(E, **long), torch.arange(X, **long)
        self.clock = 0                                  # advances by E per wave; a wave stamps clock + rank
        self.copy_stream = torch.cuda.Stream(dev) if self.cuda else None

    def resident(self, layer: int) -> Tensor:
        self._check_layer(layer)
        return self.slot_of[layer][:self.num_experts] >= 0

    def stats(self) -> dict:
        return {**super().stats(), "slots": self.slots}

    def pool_state(self) -> PoolState:
        """The pool's state now (slot -> expert, LRU stamps, clock), copied on the device (no host sync)."""
        return PoolState(torch.stack([self.expert_in[l] for l in self.layer_ids]),
                         torch.stack([self.last_use[l] for l in self.layer_ids]), self.clock)

    def restore_pool(self, state: PoolState | None) -> None:
        """Put the pool in `state` (None: empty) without counting anything: the held experts' weights are
        copied into their slots, so every later pass loads, hits and evicts as it did after `state` was
        taken (the LRU order depends only on these tensors and the clock)."""
        E, X = self.num_experts, self.slots
        if state is not None and tuple(state.expert_in.shape) != (len(self.layer_ids), X + 1):
            raise ValueError(f"pool state for {tuple(state.expert_in.shape)} [layers, slots + 1] does not fit this "
                             f"store ({len(self.layer_ids)} MoE layers, {X} slots)")
        for i, l in enumerate(self.layer_ids):
            held = (torch.full((X + 1,), -1, dtype=torch.long) if state is None else state.expert_in[i].long())
            held = held.to(self.device)
            self.expert_in[l].copy_(held)
            self.last_use[l].copy_(torch.full_like(held, -1) if state is None else state.last_use[i].long())
            self.slot_of[l].fill_(-1)
            slots = (held[:X] >= 0).nonzero().flatten()
            experts = held[slots]
            self.slot_of[l].index_copy_(0, experts, slots)
            for n, buf in self.stage[l].items():
                buf.index_copy_(0, slots, self.host[l][n].index_select(0, experts.to(self.host[l][n].device)).to(buf.device))
            self._dequantize(l, slots)
        self.clock = 0 if state is None else int(state.clock)

    def run(self, layer: int, x: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
        self._check_layer(layer)
        E, X, k = self.num_experts, self.slots, ids.shape[1]
        flat = ids.reshape(-1)                                           # [P] P = T*k
        used = torch.zeros(E, dtype=torch.bool, device=x.device).index_fill_(0, flat, True)   # [E]
        slot_of = self.slot_of[layer]
        res = slot_of[:E] >= 0                                           # [E] resident at pass start
        cells = self.cells[layer]
        cells[_HITS].add_((used & res).sum())
        cells[_MISSES].add_((used & ~res).sum())
        cells[_PASSES].add_(1)
        # processing order: used experts, resident first, then by id; rank = position in that order
        order = torch.argsort(torch.where(used, (~res).long() * E + self.arange_e, 2 * E + self.arange_e))
        rank = torch.empty_like(order).index_copy_(0, order, self.arange_e)   # [E]
        wave_of = rank // X                                              # [E]
        y = torch.zeros(flat.shape[0], x.shape[1], dtype=x.dtype, device=x.device)   # [P, H]
        operands = self.operands[layer]
        path = expert_path(x, flat.shape[0], E, operands)
        for w in range(self._num_waves(used, flat.shape[0])):
            in_wave = used & (wave_of == w)                              # [E]
            self._admit(layer, in_wave, order, rank)
            group = torch.where(in_wave[flat], slot_of[flat], X)        # [P] slot, or the zero slot X
            y += experts_by_group(self.math, x, group, weights, X + 1, operands, path, skip=X)[0]
        return combine(y, k)                                             # [T, H]

    def _num_waves(self, used: Tensor, pairs: int) -> int:
        """Waves of this pass: exact on CPU (reading the union costs nothing), an upper bound on CUDA (no
        host sync; a wave without experts changes nothing)."""
        if self.cuda:
            return math.ceil(min(pairs, self.num_experts) / self.slots)
        return math.ceil(int(used.sum()) / self.slots)

    def _admit(self, layer: int, in_wave: Tensor, order: Tensor, rank: Tensor) -> None:
        """Make every expert of the wave resident (loading misses) and stamp them most recently used.

        The m-th miss (in processing order) takes the m-th victim: free slots by index, then the slots
        whose expert the wave does not need, least recently used first."""
        E, X = self.num_experts, self.slots
        slot_of, expert_in, last_use = self.slot_of[layer], self.expert_in[layer], self.last_use[layer]
        miss = in_wave & (slot_of[:E] < 0)                               # [E]
        held = expert_in[:X]                                             # [X]
        free = held < 0
        needed = ~free & in_wave[held.clamp_min(0)]
        big = 1 << 62
        victims = torch.argsort(torch.where(free, self.arange_x - big, torch.where(needed, big, last_use[:X])))
        m = (miss[order].cumsum(0) - 1)[rank]                            # [E] index among the wave's misses
        new_slot = victims[m.clamp(0, X - 1)]                            # [E] (meaningful where miss)
        incoming = torch.full_like(expert_in, -1).index_put_((torch.where(miss, new_slot, X),), self.arange_e)
        replaced = incoming[:X] >= 0                                     # [X]
        evicted = torch.where(replaced & ~free, held, E)                 # [X] expert leaving, or scratch E
        slot_of.index_put_((evicted,), torch.full_like(evicted, -1))
        slot_of.index_put_((torch.where(miss, self.arange_e, E),), new_slot)
        expert_in[:X] = torch.where(replaced, incoming[:X], held)
        last_use.index_put_((torch.where(in_wave, slot_of[:E], X),), self.clock + rank)
        self.clock += E
        self.cells[layer][_LOADS].add_(miss.sum())
        self._load(layer, miss, new_slot)

    def _load(self, layer: int, miss: Tensor, new_slot: Tensor) -> None:
        """Copy the missed experts' stored tensors from host memory into their slots (on CPU a packed MXFP4
        expert is dequantised once into its slot; on CUDA the slot keeps the packed bytes), timed into `load_times` (on CUDA: the compute stream's stall from where
        it reaches the load until it resumes after the copies, and the copies on their stream)."""
        if self.cuda:
            main = torch.cuda.current_stream(self.device)
            stall_start = torch.cuda.Event(enable_timing=True)
            stall_start.record(main)                                     # the compute stream idles from here
            experts = miss.nonzero().flatten()                           # [m] (host sync)
            pairs = list(zip(experts.tolist(), new_slot[experts].tolist()))
            if not pairs:
                return
            stall_end, copy_start, copy_end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            self.copy_stream.wait_stream(main)
            with torch.cuda.stream(self.copy_stream):
                copy_start.record()
                for n, buf in self.stage[layer].items():
                    for e, s in pairs:
                        buf[s].copy_(self.host[layer][n][e], non_blocking=True)
                self._dequantize(layer, torch.tensor([s for _, s in pairs], device=self.device))
                copy_end.record()
            main.wait_stream(self.copy_stream)
            stall_end.record(main)                                       # ... until here
            self.load_times.add_events(layer, stall_start, stall_end, copy_start, copy_end)
            return
        experts = miss.nonzero().flatten()                               # [m]
        if experts.numel() == 0:
            return
        t0 = time.perf_counter()
        slots = new_slot[experts]
        for n, buf in self.stage[layer].items():
            buf.index_copy_(0, slots, self.host[layer][n].index_select(0, experts))
        self._dequantize(layer, slots)
        self.load_times.add_blocked(layer, time.perf_counter() - t0)    # inline: the compute waited throughout

    def _dequantize(self, layer: int, slots: Tensor) -> None:
        stage, pool = self.stage[layer], self.pool[layer]
        for name, blocks, scales in _PACKED:
            if blocks in stage and name in pool:                         # a dense slot fed from packed bytes
                pool[name].index_copy_(0, slots, mxfp4.dequantize(stage[blocks][slots], stage[scales][slots],
                                                                  self.math.dtype))


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
