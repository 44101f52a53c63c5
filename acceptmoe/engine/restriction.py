"""The restriction of one verification pass as a named policy: `Restriction.route(layer, logits)` routes a
MoE layer's tokens inside the verifier's set S (a restricting method; pruned against the expert pool when
`prune`) or naturally (Standard SD, whose verifier only scores its sets), and hands what it computed to an
optional `LayerRecord`, which only reads it (docs/architecture.md, "The engine contract": recording never
changes the computation).

    restriction = Restriction(verifier, model.store, model.router, prune=False, record=LayerRecord(model.router))
    ids, weights = restriction.route(layer, logits)      # logits [T, E] -> [T, k] each; also restriction(...)
    stats = restriction.record.stacked()                 # [L, B, 6] trace rows (`trace.layer_stats`), or None

A pass of B blocks (`blocks=B`, a batched verify pass: `MoEModel.forward_batch`) hands the verifier its
logits as [B, T, E], block after block, so a method whose sets depend on the whole pass (the batch-shared
selector) sees every block; its routes come back as [B * T, k].

`MoEModel.forward(policy=...)` calls the policy once per MoE layer; None routes naturally.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from acceptmoe.kernels import Verifier, VerifierOutput, natural
from acceptmoe.methods import Router

from .trace import layer_stats

if TYPE_CHECKING:
    from .store_base import ExpertStore


@dataclass
class LayerRecord:
    """The trace rows of one pass, one per MoE layer, from what the restriction computed (read only)."""
    router: Router
    rows: list[Tensor] = field(default_factory=list)

    def add(self, layer: int, logits: Tensor, ids: Tensor, out: VerifierOutput, natural_ids: Tensor | None,
            bias: Tensor | None = None, valid: Tensor | None = None) -> None:
        """One layer's rows, one per block: logits [B, T, E], ids [B, T, k]; the natural ids (computed here,
        with the layer's selection bias, unless the layer routed naturally), the routed ids and the verifier's
        sets."""
        if natural_ids is None:
            natural_ids = natural(self.router, logits.flatten(0, 1), bias)[0].view(ids.shape)
        self.rows.append(layer_stats(layer, natural_ids, ids, out, valid))

    def stacked(self) -> Tensor | None:
        """[L, B, 6], or None when no layer was recorded."""
        return torch.stack(self.rows) if self.rows else None


@dataclass(frozen=True)
class Restriction:
    """Per-layer verification routing for one pass of `blocks` blocks of equal size."""
    verifier: Verifier
    store: ExpertStore                # its residency, when pruning
    router: Router
    prune: bool = False
    record: LayerRecord | None = None
    biases: Callable[[int], Tensor | None] | None = None   # layer -> its selection bias [E] (MoEModel.selection_bias)
    blocks: int = 1
    sizes: tuple[int, ...] = ()       # the blocks' token counts when they differ (admission); () = equal blocks

    def route(self, layer: int, logits: Tensor) -> tuple[Tensor, Tensor]:
        """logits [B * T, E] -> ids, weights [B * T, k]: inside S when the plan restricts, else natural."""
        if self.sizes:
            return self._route_padded(layer, logits)
        restricts = self.verifier.plan.spec.restricts
        resident = self.store.resident(layer).to(logits.device) if self.prune else None
        bias = self.biases(layer) if self.biases is not None else None                # [E] | None
        z = logits.view(self.blocks, -1, logits.shape[-1])                             # [B, T, E]
        out = self.verifier(z, resident, route=restricts, bias=bias)
        if restricts:
            assert out.ids is not None and out.weights is not None                     # routed: route=True
            ids, weights = out.ids.flatten(0, 1), out.weights.flatten(0, 1)
        else:
            ids, weights = natural(self.router, logits, bias)
        if self.record is not None:
            shaped = ids.view(self.blocks, -1, ids.shape[-1])
            self.record.add(layer, z, shaped, out, natural_ids=None if restricts else shaped, bias=bias)
        return ids, weights

    def _route_padded(self, layer: int, logits: Tensor) -> tuple[Tensor, Tensor]:
        """`route` for blocks of different sizes (logits [sum T, E], block after block): each block padded to
        the longest, its padding rows outside every count (the verifier's prepared token counts, the record's
        valid mask), then the real rows back."""
        restricts = self.verifier.plan.spec.restricts
        resident = self.store.resident(layer).to(logits.device) if self.prune else None
        bias = self.biases(layer) if self.biases is not None else None
        T, dev = max(self.sizes), logits.device
        valid = torch.arange(T, device=dev)[None, :] < torch.tensor(self.sizes, device=dev)[:, None]   # [B, T]
        z = logits.new_zeros(len(self.sizes), T, logits.shape[-1])
        z[valid] = logits
        out = self.verifier(z, resident, route=restricts, bias=bias)
        if restricts:
            assert out.ids is not None and out.weights is not None
            ids, weights = out.ids[valid], out.weights[valid]
        else:
            ids, weights = natural(self.router, logits, bias)
        if self.record is not None:
            shaped = ids.new_zeros(len(self.sizes), T, ids.shape[-1])
            shaped[valid] = ids
            self.record.add(layer, z, shaped, out, natural_ids=None if restricts else shaped, bias=bias, valid=valid)
        return ids, weights

    __call__ = route                  # MoEModel.forward calls its policy per layer
