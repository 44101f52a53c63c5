"""Routes: what every target pass of a generation sent to the experts, per MoE layer, for replaying its
expert work elsewhere (`acceptmoe.experiments.replay`).

    gen = engine.generate(ids, plan, 64, GenerationOptions(record_routes=True))
    gen.routes.save("r0-0003.npz"); routes = Routes.load("r0-0003.npz")
    for p in routes.passes(): p.kind, p.ids, p.weights      # "prefill" | "decode" | "verify", [L, T, k] each

Recorded at the one place expert work happens (`PassRoutes.run` wraps `ExpertStore.run`), in the order the
passes ran: the prefill, then every decode (Vanilla AR) or verification pass. Per pass and MoE layer: the
routed (token, expert, weight) assignments [T, k] as the store received them (after the method's set and
pruning); under the offloaded store also which experts the pool held when the pass started, and once per
generation the pool's whole state at its start (`store.PoolState`), so a replay of that generation alone
loads, hits and evicts exactly as the run did. The routes leave the device once, when the generation ends
(no host sync per pass), so recording is compatible with CUDA-graph replay; recording never changes what
is computed. On CPU each pass also records the seconds its expert work took (`store.run` summed over the
layers; CPU work is synchronous, so a wall clock is exact there; NaN on other devices).

File (`save`, numpy `.npz`, compressed): `meta` (JSON: format, layers, num_experts, top_k, store, slots,
dtype, device, the expert shapes and bytes, the store counters per layer over the generation, and what the
caller adds), `kind` uint8 [P], `tokens` int32 [P] (T of each pass), `output` int32 [P] (tokens it output),
`expert_s` float64 [P], `ids` uint8 or int16 [N, L, k] (N = sum of T), `weights` float16 [N, L, k] (they scale
outputs only: replayed work does not depend on them), and for the offloaded store `resident` uint8 [P, L,
ceil(E / 8)] (bit-packed) and the pool at generation start `pool_expert_in` int16 / `pool_last_use` int64
[L, X + 1], `pool_clock`. Size: about 3 * L * k bytes per routed token before compression (the tiny model
with 64-token verification passes: ~6 KB per pass, ~0.3 MB per 256-token generation).
"""
from __future__ import annotations

import io
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import Tensor

from .store import PoolState

if TYPE_CHECKING:
    from .store_base import ExpertStore

FORMAT = 1
KINDS = ("prefill", "decode", "verify")


class PassRoutes:
    """One pass's recorder: runs the store (`run` has ExpertStore.run's signature) and keeps, per MoE layer in
    call order, the ids and weights it was given and (offloaded store) the residency at the pass's start."""

    def __init__(self, store, timed: bool):
        self.store, self.timed = store, timed
        self.ids: list[Tensor] = []
        self.weights: list[Tensor] = []
        self.resident: list[Tensor] = []
        self.seconds = 0.0

    def run(self, layer: int, x: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
        if self.store.kind == "offloaded":
            self.resident.append(self.store.resident(layer))          # [E] before this pass's loads
        self.ids.append(ids)
        self.weights.append(weights)
        t0 = time.perf_counter() if self.timed else 0.0
        y = self.store.run(layer, x, ids, weights)
        if self.timed:
            self.seconds += time.perf_counter() - t0
        return y

    def outputs(self) -> tuple[Tensor, Tensor, Tensor | None, float]:
        """(ids [L, T, k], weights [L, T, k], resident [L, E] | None, expert seconds)."""
        resident = torch.stack(self.resident) if self.resident else None
        return torch.stack(self.ids), torch.stack(self.weights), resident, self.seconds


@dataclass
class RouteLog:
    """A generation's routes while it runs: device tensors per pass, moved to the host by `finish`."""
    store: ExpertStore
    timed: bool
    start: PoolState | None = None
    tally: Tensor | None = None
    passes: list[tuple] = field(default_factory=list)

    @classmethod
    def begin(cls, store) -> RouteLog:
        """Start recording: the pool at generation start and the store's counters (device copies)."""
        state = store.pool_state() if store.kind == "offloaded" else None
        return cls(store, store.device.type == "cpu", state, store.tally.clone())

    def recorder(self) -> PassRoutes:
        return PassRoutes(self.store, self.timed)

    def add(self, kind: str, out: tuple, output_tokens: int) -> None:
        """One pass: `out` from PassRoutes.outputs, the tokens it output."""
        ids, weights, resident, seconds = out
        self.passes.append((KINDS.index(kind), ids.clone(), weights.clone(),
                            None if resident is None else resident.clone(),
                            seconds if self.timed else math.nan, int(output_tokens)))

    def finish(self, meta: dict) -> Routes:
        store = self.store
        E = store.num_experts
        ids = torch.cat([p[1] for p in self.passes], dim=1).transpose(0, 1).cpu()      # [N, L, k]
        weights = torch.cat([p[2] for p in self.passes], dim=1).transpose(0, 1).cpu()
        arrays: dict[str, np.ndarray] = {
            "kind": np.array([p[0] for p in self.passes], dtype=np.uint8),
            "tokens": np.array([p[1].shape[1] for p in self.passes], dtype=np.int32),
            "output": np.array([p[5] for p in self.passes], dtype=np.int32),
            "expert_s": np.array([p[4] for p in self.passes], dtype=np.float64),
            "ids": ids.numpy().astype(np.uint8 if E <= 256 else np.int16),
            "weights": weights.float().numpy().astype(np.float16),
        }
        if self.start is not None:
            res = torch.stack([p[3] for p in self.passes]).cpu().numpy()                  # [P, L, E]
            arrays["resident"] = np.packbits(res, axis=-1)
            arrays["pool_expert_in"] = self.start.expert_in.cpu().numpy().astype(np.int16)
            arrays["pool_last_use"] = self.start.last_use.cpu().numpy().astype(np.int64)
            arrays["pool_clock"] = np.array(self.start.clock, dtype=np.int64)
        assert self.tally is not None                                                     # `begin` copied it
        counted = (store.tally - self.tally).tolist()                                     # [L, 4]
        counters = {str(l): dict(zip(("hits", "misses", "loads", "passes"), counted[store.row[l]], strict=True))
                    for l in store.layer_ids}
        meta = {"format": FORMAT, "layers": list(store.layer_ids), "num_experts": E, "top_k": int(ids.shape[-1]),
                "store": store.kind, "slots": getattr(store, "slots", None), "dtype": str(store.math.dtype),
                "device": str(store.device), "expert_bytes": {str(l): b for l, b in store.expert_bytes.items()},
                "counters": counters, **meta}
        return Routes(meta, arrays)


@dataclass(frozen=True)
class RoutePass:
    kind: str                         # "prefill" | "decode" | "verify"
    ids: Tensor                       # [L, T, k] long
    weights: Tensor                   # [L, T, k] fp32
    resident: Tensor | None           # [L, E] bool at pass start (offloaded runs)
    output_tokens: int
    expert_s: float                   # the engine's expert seconds (CPU), else NaN


@dataclass
class Routes:
    """One generation's routes (see the module docstring): `meta` and the arrays, read by `passes()`."""
    meta: dict
    arrays: dict[str, np.ndarray]

    @property
    def num_passes(self) -> int:
        return int(self.arrays["kind"].shape[0])

    def kinds(self) -> list[str]:
        return [KINDS[k] for k in self.arrays["kind"]]

    def pool(self) -> PoolState | None:
        """The pool at generation start (offloaded runs), else None."""
        if "pool_expert_in" not in self.arrays:
            return None
        a = self.arrays
        return PoolState(torch.from_numpy(a["pool_expert_in"].astype(np.int64)),
                         torch.from_numpy(a["pool_last_use"]), int(a["pool_clock"]))

    def passes(self):
        """RoutePass per pass, in the order they ran."""
        a, E = self.arrays, self.meta["num_experts"]
        ends = np.cumsum(a["tokens"])
        for p in range(self.num_passes):
            lo, hi = int(ends[p] - a["tokens"][p]), int(ends[p])
            ids = torch.from_numpy(a["ids"][lo:hi].astype(np.int64)).transpose(0, 1)               # [L, T, k]
            weights = torch.from_numpy(a["weights"][lo:hi].astype(np.float32)).transpose(0, 1)
            resident = None
            if "resident" in a:
                resident = torch.from_numpy(np.unpackbits(a["resident"][p], axis=-1, count=E).astype(bool))
            yield RoutePass(KINDS[a["kind"][p]], ids.contiguous(), weights.contiguous(), resident,
                            int(a["output"][p]), float(a["expert_s"][p]))

    def save(self, path: str | Path) -> None:
        """Write atomically (a temporary file renamed into place, fsynced)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.savez_compressed(buf, meta=np.frombuffer(json.dumps(self.meta, sort_keys=True).encode(), dtype=np.uint8),
                            **cast("dict[str, Any]", self.arrays))       # Any: numpy's stub types **kwds as bool
        tmp = p.with_name(p.name + ".tmp")
        with tmp.open("wb") as f:
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(p)

    @classmethod
    def load(cls, path: str | Path) -> Routes:
        with np.load(Path(path)) as z:
            arrays = {k: z[k] for k in z.files if k != "meta"}
            meta = json.loads(z["meta"].tobytes().decode())
        if meta.get("format") != FORMAT:
            raise ValueError(f"{path}: routes format {meta.get('format')} is not {FORMAT}")
        return cls(meta, arrays)
