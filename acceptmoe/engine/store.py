"""ExpertStore: where expert weights live and how a routed MoE layer is computed on the device.

    store = open_store(kind, math, forms, E, device, slots)    # empty, sized by engine.memory from the forms
    store.put(layer, store.receive(layer) written in place)     # layer by layer (MoEModel.from_pretrained)
    store = make_store(kind, math, layers, E, device, slots)    # or at once from host-side stacked weights
    y = store.run(layer, x[T, H], ids[T, k], weights[T, k])     # only experts that received tokens run
    store.resident(layer) -> bool [E]                           # the residency mask (pruning input)
    store.stats(), store.reset_counters()
    store.device_bytes(), store.pinned_bytes(), store.host_expert_bytes(), store.release()
    state = store.pool_state(); store.restore_pool(state)      # offloaded: the pool, saved and put back

How a pass's pairs are multiplied (one rule, `expert_path`) and the expert MLP are `expert_math`'s; what a
store allocates is `memory`'s (the stores allocate exactly that). No Python loop over experts and no host
sync inside a pass on a resident store; the counters live in a device tensor and are read by `stats()`
after the step.

- `ResidentStore`: every expert of every MoE layer on the device, in the kept form (`ExpertMath.kept`:
  packed MXFP4 stays packed on CUDA, where the experts kernel dequantises tiles in registers, so
  GPT-OSS-120B's experts take 61 GB resident instead of 230 GB in bf16; off CUDA one dequantised copy made at
  load time); groups = experts. Every used expert is a hit. `receive` gives device tensors where the kept form
  is the stored one, so a checkpoint is read straight onto the device, one layer at a time.
- `OffloadedStore` (`offload`): every expert in one exact-size host arena, page-locked on CUDA; an X-slot LRU
  pool per MoE layer on the device; waves when a pass's union exceeds X; one host read per layer and pass.

Counters per layer and in total (`COUNTERS`): loads, bytes moved, hits and misses (one event per expert used
by a pass: hit = resident when the pass starts), `wait_s` (seconds the compute stalled for loads), `copy_s`
(seconds the copies took; on CPU the copy runs inline, so the two are equal), passes.

Expert weights per layer are a dict of stacked tensors [E, ...] (their stored form, `memory.stored_form`):
`w1` [E, 2I, H] (gate and up rows), `w2` [E, H, I], optional biases `b1` [E, 2I], `b2` [E, H]; MXFP4
checkpoints give `w1_blocks`, `w1_scales`, `w2_blocks`, `w2_scales` (packed).
"""
from __future__ import annotations

import torch
from torch import Tensor

from .expert_math import (
    EXPERT_PATHS,
    FELL_BACK,
    GATHER_BYTES,
    PACKED,
    ExpertMath,
    combine,
    expert_bytes,
    expert_path,
    experts_by_group,
    group_counts,
    grouped_mm,
    grouped_weights,
    native_grouped_mm,
)
from .memory import as_form, kept_form
from .offload import OffloadedStore, PoolState
from .store_base import COUNTERS, HITS, PASSES, ExpertStore

STORE_KINDS = ("resident", "offloaded")

__all__ = ["COUNTERS", "EXPERT_PATHS", "FELL_BACK", "GATHER_BYTES", "PACKED", "STORE_KINDS", "ExpertMath", "ExpertStore",
           "OffloadedStore", "PoolState", "ResidentStore", "combine", "expert_bytes", "expert_path",
           "experts_by_group", "group_counts", "grouped_mm", "grouped_weights", "make_store", "native_grouped_mm",
           "open_store", "validate_store_args"]


class ResidentStore(ExpertStore):
    kind = "resident"

    def __init__(self, math, forms, num_experts, device):
        super().__init__(math, forms, num_experts, device)
        self.weights: dict[int, dict[str, Tensor]] = {}
        self.ones = torch.ones(num_experts, dtype=torch.bool, device=self.device)

    def receive(self, layer: int) -> dict[str, Tensor]:
        """On the device where it keeps the stored form (CUDA; dense weights anywhere), else on the host (a
        packed layer off CUDA, dequantised by `put`)."""
        self._check_layer(layer)
        form = self.forms[layer]
        where = self.device if set(kept_form(form, self.math.dtype, self.device)) == set(form) else "cpu"
        return {n: torch.empty(t.shape, dtype=t.dtype, device=where) for n, t in form.items()}

    def put(self, layer: int, weights) -> None:
        """Keep the layer in the kept form on the device (tensors already there in that form are kept as they
        are, not copied)."""
        self._check_form(layer, weights)
        self.weights[layer] = grouped_weights(self.math.kept(dict(weights), self.device))

    def _device_tensors(self):
        return [t for w in self.weights.values() for t in w.values()]

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
        cells[HITS].add_(counts.count_nonzero())
        cells[PASSES].add_(1)
        return combine(y, ids.shape[1])                                  # [T, H]


def validate_store_args(kind: str, slots: int | None, num_experts: int) -> None:
    """Check a store request before any weight is read."""
    if kind not in STORE_KINDS:
        raise ValueError(f"unknown store kind {kind!r}; valid: {', '.join(STORE_KINDS)}")
    if kind == "resident" and slots is not None:
        raise ValueError("slots applies to store='offloaded' only; drop it or use store='offloaded'")
    if kind == "offloaded" and (slots is None or not 1 <= slots <= num_experts):
        raise ValueError(f"store='offloaded' needs slots=X with 1 <= X <= num_experts={num_experts}, got {slots}")


def open_store(kind: str, math: ExpertMath, forms: dict[int, dict[str, Tensor]], num_experts: int,
               device: torch.device | str, slots: int | None = None,
               same_as: dict[int, int] | None = None) -> ExpertStore:
    """An empty store of `kind` ("resident" | "offloaded") for layers of these stored forms (meta tensors, e.g.
    `memory.stored_form`), its buffers allocated as `engine.memory` sizes them; fill it with `put` per layer.
    same_as (offloaded): layer -> an earlier layer whose host tensors it shares, held once in the arena."""
    validate_store_args(kind, slots, num_experts)
    if kind == "resident":
        return ResidentStore(math, forms, num_experts, torch.device(device))
    assert slots is not None                        # validate_store_args: an offloaded store has slots
    return OffloadedStore(math, forms, num_experts, torch.device(device), slots, same_as)


def make_store(kind: str, math: ExpertMath, layers: dict[int, dict[str, Tensor]], num_experts: int,
               device: torch.device | str, slots: int | None = None) -> ExpertStore:
    """A store of `kind` built from host- or device-side stacked layer weights (the stored form).

    The store takes ownership: `layers` is emptied as the store takes each layer, so a layer's source tensors
    can be freed as soon as the store holds its own copy. A layer given the very same tensors as an earlier
    one (a replay's shared weight sets) shares them: an offloaded store holds them once in its arena."""
    validate_store_args(kind, slots, num_experts)
    first: dict[tuple, int] = {}
    same_as = {l: first.setdefault(tuple((n, id(t)) for n, t in layers[l].items()), l) for l in sorted(layers)}
    forms = {l: as_form(w) for l, w in layers.items()}
    store = open_store(kind, math, forms, num_experts, device, slots, same_as)
    for l in sorted(layers):
        store.put(l, layers.pop(l))
    return store
