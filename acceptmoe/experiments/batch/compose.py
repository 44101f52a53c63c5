"""Requests composed into batched verify passes, and the expert work of each pass counted by the engine's store.

    reqs = [Request.of(Routes.load(f)) for f in files]          # one recorded generation each
    draws = draw_requests(len(reqs), batch=16, draws=64, seed=0) # index arrays, the same for every method
    passes = compose([reqs[i] for i in draws[0]])                # pass-aligned batched passes
    counter = StoreCounter(num_layers=4, num_experts=128, top_k=8, slots=48)
    counts = counter.count(passes)                               # reads (resident), loads (X-slot pool), ...

How requests are composed (docs/batch-study.md): a draw is B distinct prompts of the pool (sampled without
replacement within the draw; draws are independent, seeded by (seed, B, draw)), the same draws for every
method, so ratios are paired. Batched pass k holds the k-th verify pass of every request that has one (pass
index aligned: the requests start together; one that has finished drops out, none joins). Per MoE layer it
sends the store the rows of all its requests, concatenated (`BatchedPass.rows_of`): the experts it reads are
the union of the requests' sets; its output tokens are the sum of theirs. Prefills are not counted.

Counting goes through the engine's `ExpertStore` at the tiny world's own expert shape (random weights): the
X-slot pool's loads and hits on every draw (the pool empty at the draw's start), and the resident store's
experts used on the first draw of every cell, where they must equal the union counted here (`reads`). The
store's counters depend on each pass's set of experts alone (the resident store counts distinct experts; the
offloaded store orders a pass's experts by residency, then id: offload.py), so a pass whose rows are the
union's experts packed k to a row (`compact`) counts exactly as the full concatenated rows do; the runner
checks that too (`full=True`) on the first pass of the first draw of every cell. Bytes at other shapes are
these counts times the shape's bytes per expert (records.py): counts, not measured times.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from acceptmoe.costs.shapes import get_shape
from acceptmoe.engine.routes import Routes
from acceptmoe.engine.store import make_store


@dataclass(frozen=True)
class Request:
    """One recorded generation's verify passes: `ids[p]` [L, T, k] the rows pass p sent to the store,
    `output[p]` the tokens it output."""
    ids: tuple[torch.Tensor, ...]
    output: tuple[int, ...]
    masks: np.ndarray                 # bool [P, L, E]: the experts each pass sent rows to, per layer

    @classmethod
    def of(cls, routes: Routes) -> Request:
        verify = [p for p in routes.passes() if p.kind == "verify"]
        return cls.from_ids([p.ids for p in verify], [p.output_tokens for p in verify], routes.meta["num_experts"])

    @classmethod
    def from_ids(cls, ids: list[torch.Tensor], output: list[int], num_experts: int) -> Request:
        L = ids[0].shape[0] if ids else 0
        masks = np.zeros((len(ids), L, num_experts), dtype=bool)
        for p, pass_ids in enumerate(ids):
            flat = pass_ids.reshape(L, -1).numpy()
            masks[p, np.arange(L)[:, None], flat] = True
        return cls(tuple(ids), tuple(int(o) for o in output), masks)

    @property
    def passes(self) -> int:
        return len(self.ids)

    def sets(self, p: int) -> np.ndarray:
        """bool [L, E]: the experts pass p sent rows to, per layer."""
        return self.masks[p]


@dataclass(frozen=True)
class BatchedPass:
    members: tuple[Request, ...]      # the requests active in this pass
    index: int                        # the pass index k they are at

    @property
    def output(self) -> int:
        return sum(r.output[self.index] for r in self.members)

    @property
    def tokens(self) -> int:
        """Rows the target runs (sum of the requests' tree sizes)."""
        return sum(int(r.ids[self.index].shape[1]) for r in self.members)

    def union(self) -> np.ndarray:
        """bool [L, E]: the union of the active requests' sets, per layer."""
        return np.logical_or.reduce([r.sets(self.index) for r in self.members])

    def own_sets(self) -> int:
        """Sum over requests and layers of each request's own set size (what B separate passes would read)."""
        return int(sum(r.sets(self.index).sum() for r in self.members))

    def rows_of(self, layer: int) -> torch.Tensor:
        """[sum T, k]: the rows the batched pass sends the store at `layer` (the requests' rows concatenated)."""
        return torch.cat([r.ids[self.index][layer] for r in self.members])


def compose(requests: list[Request]) -> list[BatchedPass]:
    """The batched passes of requests that start together: pass k holds every request with a k-th verify pass."""
    longest = max(r.passes for r in requests)
    return [BatchedPass(tuple(r for r in requests if r.passes > k), k) for k in range(longest)]


def draw_requests(pool: int, batch: int, draws: int, seed: int) -> list[np.ndarray]:
    """`draws` draws of `batch` distinct indices of range(pool), each from its own generator (seed, batch, d), so
    a draw does not depend on how many others are made."""
    if batch > pool:
        raise ValueError(f"a batch of {batch} distinct requests needs at least {batch} prompts, got {pool}")
    return [np.random.default_rng([seed, batch, d]).choice(pool, size=batch, replace=False) for d in range(draws)]


def compact(union_row: np.ndarray, top_k: int) -> torch.Tensor:
    """[ceil(n / k), k]: the union's experts packed k to a row (the last row padded with the first expert)."""
    experts = np.flatnonzero(union_row)
    pad = (-len(experts)) % top_k
    return torch.from_numpy(np.concatenate([experts, np.repeat(experts[:1], pad)]).astype(np.int64)).view(-1, top_k)


class StoreCounter:
    """The engine's resident store and an X-slot offloaded store at the tiny world's expert shape (random weights,
    one set shared by the layers), counting what each batched pass reads and loads."""

    def __init__(self, num_layers: int, num_experts: int, top_k: int, slots: int, shape: str = "tiny", seed: int = 0):
        s = get_shape(shape)
        if s.num_experts != num_experts:
            raise ValueError(f"shape {shape} has {s.num_experts} experts; the routes route over {num_experts}")
        self.L, self.k, self.H = num_layers, top_k, s.hidden_size
        math = s.math(torch.float32)
        weights = s.stored_weights(torch.float32, seed)
        self.resident = make_store("resident", math, {l: dict(weights) for l in range(num_layers)}, num_experts, "cpu")
        self.offloaded = make_store("offloaded", math, {l: dict(weights) for l in range(num_layers)}, num_experts,
                                    "cpu", slots)

    def count(self, passes: list[BatchedPass], resident: bool = False, full: bool = False) -> dict:
        """One draw (the X-slot pool starts empty): `reads`, the experts its passes read (the union per pass and
        layer, summed), and the X-slot pool's `loads` and `pool_hits` (the offloaded store's counters). With
        `resident` the resident store runs too and `store_reads` is its count (equal to `reads`: the runner
        checks it); `full` sends each pass's full concatenated rows instead of the packed union."""
        stores = (self.offloaded, self.resident) if resident else (self.offloaded,)
        self.offloaded.restore_pool(None)
        for store in stores:
            store.reset_counters()
        reads = 0
        for p in passes:
            u = p.union()
            reads += int(u.sum())
            for layer in range(self.L):
                ids = p.rows_of(layer) if full else compact(u[layer], self.k)
                x = torch.zeros(ids.shape[0], self.H)
                w = torch.full(ids.shape, 1.0 / ids.shape[1])
                for store in stores:
                    store.run(layer, x, ids, w)
        off = self.offloaded.stats()["total"]
        out = {"reads": reads, "loads": off["loads"], "pool_hits": off["hits"]}
        if resident:
            out["store_reads"] = self.resident.stats()["total"]["hits"]
        return out
