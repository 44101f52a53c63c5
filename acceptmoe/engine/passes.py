"""The target's passes as `StepGraphs` steps: a frozen dataclass whose fields are everything the pass reads
besides its inputs, so its CUDA-graph key is derived, never listed by hand.

    >>> import torch
    >>> from acceptmoe.engine import load_engine
    >>> from acceptmoe.engine.passes import TargetPass
    >>> engine = load_engine("models/tiny")
    >>> cache = engine.model.new_cache(16)
    >>> step = TargetPass(engine.model, cache)           # natural routing; a verifier restricts or records
    >>> logits, aux, stats, routes = engine.steps.run(step, {"ids": torch.tensor([1, 2, 3]),
    ...                                                      "positions": torch.arange(3), "start": 0})
    >>> tuple(logits.shape), aux, stats, routes, step == TargetPass(engine.model, cache)   # the step is its key
    ((3, 1024), None, None, None, True)

`cache` is the prefix of the sequence's cache the pass reads (`KVCache.upto(start + T)`, the bucket a static
pass attends over and a CUDA graph is captured for). `verifier` None routes every MoE layer naturally
(`acceptmoe.kernels.natural`): decode steps, Vanilla AR, and Standard SD without a trace. With a verifier the
pass routes through a `restriction.Restriction` (its `route(layer, logits)`), and `record` stacks one
`trace.layer_stats` row per MoE layer ([L, 6], on the device) through a `restriction.LayerRecord`;
`routes` returns what the experts received (`routes.PassRoutes.outputs`: ids and weights [L, T, k],
residency [L, E] of the offloaded store, expert seconds on CPU). Recording never changes what is computed.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import Tensor

from acceptmoe.kernels import Verifier

from .kv import KVCache
from .restriction import LayerRecord, Restriction
from .routes import PassRoutes

if TYPE_CHECKING:
    from .model import MoEModel


@dataclass(frozen=True)
class TargetPass:
    model: MoEModel
    cache: KVCache
    verifier: Verifier | None = None
    prune: bool = False
    record: bool = False
    aux_layers: tuple[int, ...] = ()
    routes: bool = False

    def __call__(self, inputs: Mapping) -> tuple[Tensor, Tensor | None, Tensor | None, tuple | None]:
        """inputs ids [T], positions [T], start, mask [T, T] (optional) -> (logits [T, V], aux, stats [L, 6],
        routes)."""
        store, router = self.model.store, self.model.router
        record = LayerRecord(router) if self.record and self.verifier is not None else None
        policy = None if self.verifier is None else Restriction(self.verifier, store, router, self.prune, record,
                                                                self.model.selection_bias)
        recorder = PassRoutes(store, timed=store.device.type == "cpu") if self.routes else None
        logits, aux = self.model.forward(inputs["ids"], inputs["positions"], self.cache, inputs["start"],
                                         mask=inputs.get("mask"), policy=policy, aux_layers=self.aux_layers,
                                         routes=recorder)
        return logits, aux, (record.stacked() if record else None), (recorder.outputs() if recorder else None)
