"""OffloadedStore: every expert in one host arena (page-locked on CUDA), an X-slot LRU pool per MoE layer on the
device, and the pool's state saved and put back (`PoolState`).

    store = open_store("offloaded", math, forms, E, "cuda", slots=48)     # arena and pools, sized by engine.memory
    store.put(layer, weights)                                            # per layer, into the arena
    y = store.run(layer, x[T, H], ids[T, k], weights[T, k])
    state = store.pool_state(); store.restore_pool(state)

- Host memory: one `arena.HostArena` holding every layer's stored form (`memory.host_layout`: exact bytes, each
  tensor 64-byte aligned; MXFP4 stays packed) and the store's read buffer; on CUDA it is page-locked in place
  (cudaHostRegister), so the pinned bytes are the experts' bytes, not PyTorch's power-of-two blocks.
  `release()` unregisters it (`Engine.close` calls it).
- Pool: per MoE layer X slots plus one zero slot of device buffers in the kept form (`ExpertMath.kept`: packed
  on CUDA, dense elsewhere; off CUDA a packed expert lands in X + 1 packed slots and is dequantised once into its
  dense slot). A non-resident expert is copied into a slot when it first receives a token in a pass, evicting
  the least-recently-used expert the current wave does not need.
- Waves: a pass whose routed union exceeds X runs in waves of at most X experts (resident experts first, then
  by expert id, so residents are used before anything evicts them); each expert is loaded at most once per
  pass. The LRU state (expert -> slot, slot -> expert, last use) is device tensors and every wave's admission
  is computed there: on CUDA for as many waves as the pass could need (ceil(min(T*k, E) / X); a wave without
  experts changes nothing), on CPU for exactly the waves it needs. Then the pass's one host read (on CUDA
  through the arena's pinned read buffer: the used-expert count and each expert's load slot and rank) says how
  many waves run and which (expert, slot) copies precede each; exactly those waves' experts are computed.
  Groups = slots plus the zero slot, which absorbs the pairs outside the current wave (their contribution is
  exactly zero). Every wave stamps its experts `clock + wave * E + rank`; the clock then advances E per wave
  run, so the LRU order and the saved state are the same on every device.
- Copies: on CUDA from the pinned arena on a side stream, timed with events (`load_times`: the stall from
  where the compute stream reaches a load until it resumes after the copies, and the copies themselves); on
  CPU one indexed copy into the preallocated slots, inline.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from . import mxfp4
from .arena import HostArena
from .expert_math import PACKED, ExpertMath, combine, expert_path, experts_by_group, grouped_weights
from .memory import READS, host_layout, kept_form, pool_form
from .store_base import HITS, LOADS, MISSES, PASSES, ExpertStore


def waves_needed(used: int, slots: int) -> int:
    """Waves a pass with `used` distinct experts runs: at most `slots` experts each."""
    return math.ceil(used / slots)


def waves_bound(pairs: int, num_experts: int, slots: int) -> int:
    """The most waves a pass of `pairs` (token, expert) pairs can need, known without reading its union."""
    return waves_needed(min(pairs, num_experts), slots)


@dataclass(frozen=True)
class PoolState:
    """An offloaded store's pool: `expert_in` [L, X + 1] (slot -> expert or -1, the last slot the zero slot),
    `last_use` [L, X + 1] (LRU stamps), `clock` (the next wave's base stamp)."""
    expert_in: Tensor
    last_use: Tensor
    clock: int


class OffloadedStore(ExpertStore):
    kind = "offloaded"

    def __init__(self, math: ExpertMath, forms, num_experts: int, device: torch.device, slots: int,
                 same_as: dict[int, int] | None = None):
        """same_as: layer -> the earlier layer whose host tensors it shares (`memory.host_layout`)."""
        super().__init__(math, forms, num_experts, device)
        E, X, dev = num_experts, slots, self.device
        self.slots, self.cuda = slots, dev.type == "cuda"
        layout, self.owner = host_layout(self.forms, E, same_as)
        self.arena = HostArena(layout, pin=self.cuda)
        self.host = {l: {n: self.arena.view(f"{self.owner[l]}.{n}") for n in self.forms[l]} for l in self.layer_ids}
        self.reads = self.arena.view(READS)                               # [2E + 1] int64
        self.filled: set[int] = set()                                     # layers whose arena tensors are written
        self.pool, self.stage, self.operands, self.dequantized = {}, {}, {}, {}
        for l in self.layer_ids:
            # X slots + 1 zero slot (the group of pairs outside the current wave), zero-filled
            bufs = {n: torch.zeros(t.shape, dtype=t.dtype, device=dev)
                    for n, t in pool_form(self.forms[l], math.dtype, dev, X).items()}
            self.pool[l] = {n: bufs[n] for n in kept_form(self.forms[l], math.dtype, dev)}   # what matmuls read
            self.stage[l] = {n: bufs[n] for n in self.forms[l]}                              # what loads write
            self.operands[l] = grouped_weights(self.pool[l])
            self.dequantized[l] = [p for p in PACKED if p[1] in self.stage[l] and p[0] in self.pool[l]]
        long: dict[str, Any] = dict(dtype=torch.long, device=dev)
        self.slot_of = {l: torch.full((E + 1,), -1, **long) for l in self.layer_ids}     # expert -> slot | -1
        self.expert_in = {l: torch.full((X + 1,), -1, **long) for l in self.layer_ids}   # slot -> expert | -1
        self.last_use = {l: torch.full((X + 1,), -1, **long) for l in self.layer_ids}    # slot -> LRU clock
        self.arange_e, self.arange_x = torch.arange(E, **long), torch.arange(X, **long)
        self.clock = 0                                  # advances by E per wave run; a wave stamps clock + rank
        self.copy_stream = torch.cuda.Stream(dev) if self.cuda else None

    # ----- filling and memory -----
    def receive(self, layer: int) -> dict[str, Tensor]:
        self._check_layer(layer)
        return dict(self.host[layer])

    def put(self, layer: int, weights) -> None:
        """Copy the layer into the arena (nothing when written there through `receive`, or when the layer shares
        the tensors of a layer already put)."""
        self._check_form(layer, weights)
        owner = self.owner[layer]
        if owner != layer and owner in self.filled:
            return
        for n, t in weights.items():
            if t.data_ptr() != self.host[layer][n].data_ptr():
                self.host[layer][n].copy_(t)
        self.filled.add(owner)

    def pinned_bytes(self) -> int:
        return self.arena.pinned_bytes()

    def host_expert_bytes(self) -> int:
        return sum(r.nbytes for r in self.arena.layout.regions if r.name != READS)

    def release(self) -> None:
        self.arena.release()

    def _device_tensors(self):
        return [t for l in self.layer_ids for t in self.stage[l].values()] + \
               [t for l in self.layer_ids for t in self.pool[l].values()]

    # ----- the pool -----
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
        X = self.slots
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

    # ----- a pass -----
    def run(self, layer: int, x: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
        self._check_layer(layer)
        E, X, k = self.num_experts, self.slots, ids.shape[1]
        flat = ids.reshape(-1)                                           # [P] P = T*k
        used = torch.zeros(E, dtype=torch.bool, device=x.device).index_fill_(0, flat, True)   # [E]
        slot_of = self.slot_of[layer]
        res = slot_of[:E] >= 0                                           # [E] resident at pass start
        cells = self.cells[layer]
        cells[HITS].add_((used & res).sum())
        cells[MISSES].add_((used & ~res).sum())
        cells[PASSES].add_(1)
        # processing order: used experts, resident first, then by id; rank = position in that order
        order = torch.argsort(torch.where(used, (~res).long() * E + self.arange_e, 2 * E + self.arange_e))
        rank = torch.empty_like(order).index_copy_(0, order, self.arange_e)   # [E]
        wave_of = rank // X                                              # [E]
        loaded = torch.full_like(rank, -1)                               # [E] slot an expert is loaded into, or -1
        groups = []
        for w in range(self._admissions(used, flat.shape[0])):
            in_wave = used & (wave_of == w)                              # [E]
            loaded = self._admit(layer, in_wave, order, rank, self.clock + w * E, loaded)
            groups.append(torch.where(in_wave[flat], slot_of[flat], X))  # [P] slot, or the zero slot X
        stall = self._stall_start()
        waves = self._read(used, loaded, rank)                           # the pass's one host read
        self.clock += len(waves) * E
        y = torch.zeros(flat.shape[0], x.shape[1], dtype=x.dtype, device=x.device)   # [P, H]
        operands = self.operands[layer]
        path = expert_path(x, flat.shape[0], E, operands)
        for w, copies in enumerate(waves):
            self._load(layer, copies, stall if w == 0 else None)
            y += experts_by_group(self.math, x, groups[w], weights, X + 1, operands, path, skip=X)[0]
        return combine(y, k)                                             # [T, H]

    def _admissions(self, used: Tensor, pairs: int) -> int:
        """Waves whose admission is computed before the read: exact on CPU (reading the union costs nothing),
        as many as the pass could need on CUDA (no host sync; a wave without experts changes nothing)."""
        if self.cuda:
            return waves_bound(pairs, self.num_experts, self.slots)
        return waves_needed(int(used.sum()), self.slots)

    def _admit(self, layer: int, in_wave: Tensor, order: Tensor, rank: Tensor, stamp: int, loaded: Tensor) -> Tensor:
        """Make every expert of the wave resident (assigning misses their slots) and stamp them most recently
        used (`stamp + rank`); returns `loaded` with the wave's misses' slots.

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
        last_use.index_put_((torch.where(in_wave, slot_of[:E], X),), stamp + rank)
        last_use[X:].fill_(-1)                                           # the zero slot took the others' stamps
        self.cells[layer][LOADS].add_(miss.sum())
        return torch.where(miss, new_slot, loaded)

    def _read(self, used: Tensor, loaded: Tensor, rank: Tensor) -> list[list[tuple[int, int]]]:
        """The pass's one host read: per wave it runs, the (expert, slot) copies that precede it, by expert id.
        On CUDA the values come through the arena's pinned read buffer (one host sync)."""
        E, X = self.num_experts, self.slots
        values = torch.cat([used.sum().view(1), loaded, rank])          # [2E + 1]
        if self.cuda:
            self.reads.copy_(values, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
            done.synchronize()
            values = self.reads
        got = values.tolist()
        n_used, slots, ranks = got[0], got[1:E + 1], got[E + 1:]
        waves: list[list[tuple[int, int]]] = [[] for _ in range(waves_needed(n_used, X))]
        for e, s in enumerate(slots):
            if s >= 0:
                waves[ranks[e] // X].append((e, s))
        return waves

    def _stall_start(self):
        """On CUDA, an event where the compute stream reaches the pass's read (it idles from there until its
        first wave's copies are done); None on CPU."""
        if not self.cuda:
            return None
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def _load(self, layer: int, copies: list[tuple[int, int]], stall_start) -> None:
        """Copy a wave's missed experts' stored tensors from the arena into their slots, timed into `load_times`:
        on CUDA on the side stream (the slots keep the packed bytes: nothing to dequantise), the stall measured
        from `stall_start` (None: from here) until the compute stream resumes after the copies; on CPU inline,
        a packed MXFP4 expert dequantised once into its slot."""
        if not copies:
            return
        if self.cuda:
            main = torch.cuda.current_stream(self.device)
            if stall_start is None:
                stall_start = torch.cuda.Event(enable_timing=True)
                stall_start.record(main)                                 # the compute stream idles from here
            stall_end, copy_start, copy_end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            assert self.copy_stream is not None                          # made with the store on CUDA
            self.copy_stream.wait_stream(main)
            with torch.cuda.stream(self.copy_stream):
                copy_start.record()
                for n, buf in self.stage[layer].items():
                    for e, s in copies:
                        buf[s].copy_(self.host[layer][n][e], non_blocking=True)
                copy_end.record()
            main.wait_stream(self.copy_stream)
            stall_end.record(main)                                       # ... until here
            self.load_times.add_events(layer, stall_start, stall_end, copy_start, copy_end)
            return
        t0 = time.perf_counter()
        experts = torch.tensor([e for e, _ in copies])
        slots = torch.tensor([s for _, s in copies])
        for n, buf in self.stage[layer].items():
            buf.index_copy_(0, slots, self.host[layer][n].index_select(0, experts))
        self._dequantize(layer, slots)
        self.load_times.add_blocked(layer, time.perf_counter() - t0)    # inline: the compute waited throughout

    def _dequantize(self, layer: int, slots: Tensor) -> None:
        """Dense slots fed from packed bytes (off CUDA): dequantise the packed stage of `slots` into them."""
        stage, pool = self.stage[layer], self.pool[layer]
        for name, blocks, scales in self.dequantized[layer]:
            pool[name].index_copy_(0, slots, mxfp4.dequantize(stage[blocks][slots], stage[scales][slots],
                                                              self.math.dtype))
