"""The part every expert store shares: the counters (a device tally read after a step) and the interface (see
`store` for the contract, `store.open_store` for how a store is built and filled).

    store.receive(layer) -> {name: empty tensor}    # where a layer's stored-form experts are written
    store.put(layer, weights)                       # the layer handed over (nothing copied if written in place)
    store.run(layer, x, ids, weights), store.resident(layer), store.stats(), store.reset_counters()
    store.device_bytes(), store.pinned_bytes(), store.host_expert_bytes(), store.release()
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import Tensor

from .expert_math import ExpertMath
from .load_times import LoadTimes
from .memory import as_form, per_expert

COUNTERS = ("loads", "bytes", "hits", "misses", "wait_s", "copy_s", "passes")
HITS, MISSES, LOADS, PASSES = range(4)                                  # columns of ExpertStore.tally


class ExpertStore:
    """Common part: device counters, the layers' stored forms, and the residency/run interface."""
    kind = "base"

    def __init__(self, math: ExpertMath, forms: Mapping[int, Mapping[str, Tensor]], num_experts: int,
                 device: torch.device):
        """forms: per MoE layer, its experts' stored form (tensors or meta tensors [E, ...]; only shapes and
        dtypes are read)."""
        self.math, self.num_experts, self.device = math, num_experts, torch.device(device)
        self.layer_ids = tuple(sorted(forms))
        self.forms = {l: as_form(forms[l]) for l in self.layer_ids}
        self.row = {l: i for i, l in enumerate(self.layer_ids)}
        self.expert_bytes = {l: per_expert(f) for l, f in self.forms.items()}
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

    # ----- filling -----
    def receive(self, layer: int) -> dict[str, Tensor]:
        """Empty tensors of the layer's stored form, where the store will keep them: writing the experts there
        and handing them back with `put` copies nothing more."""
        raise NotImplementedError

    def put(self, layer: int, weights: Mapping[str, Tensor]) -> None:
        """Take one layer's experts (its stored form)."""
        raise NotImplementedError

    def _check_form(self, layer: int, weights: Mapping[str, Tensor]) -> None:
        self._check_layer(layer)
        want = self.forms[layer]
        got = {n: (tuple(t.shape), t.dtype) for n, t in weights.items()}
        if got != {n: (tuple(t.shape), t.dtype) for n, t in want.items()}:
            raise ValueError(f"layer {layer}: experts {got} do not match the store's form "
                             f"{ {n: (tuple(t.shape), t.dtype) for n, t in want.items()} }")

    # ----- memory -----
    def device_bytes(self) -> int:
        """Bytes of the expert buffers the store allocated on its device (distinct storages)."""
        return storage_bytes(self._device_tensors())

    def pinned_bytes(self) -> int:
        """Page-locked host bytes the store holds (0 when nothing is pinned)."""
        return 0

    def host_expert_bytes(self) -> int:
        """Bytes of experts' stored form the store holds in host memory (0 when it holds none there)."""
        return 0

    def release(self) -> None:
        """Give back what the store holds outside the Python heap's reach (page-locked memory) before it is
        dropped; the store must not run afterwards."""

    def _device_tensors(self) -> Iterable[Tensor]:
        raise NotImplementedError

    # ----- running -----
    def resident(self, layer: int) -> Tensor:
        raise NotImplementedError

    def run(self, layer: int, x: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
        raise NotImplementedError

    def _check_layer(self, layer: int) -> None:
        if layer not in self.row:
            raise KeyError(f"layer {layer} has no experts; MoE layers: {list(self.layer_ids)}")


def storage_bytes(tensors: Iterable[Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (views of one storage count once)."""
    seen = {}
    for t in tensors:
        s = t.untyped_storage()
        seen[(t.device, s.data_ptr())] = s.nbytes()
    return sum(seen.values())
