"""Static KV cache for every layer of one sequence (batch 1), with the RoPE position of every slot.

Slots [0, start) hold committed tokens; a forward writes its T new tokens' K/V to slots start..start+T-1.
After verification, `keep(start, idx)` moves the accepted block-relative indices to the front of the block.
Slot positions are stored because a draft tree's slot is not its position (sliding windows use positions).

`start` is a Python int (the keys a pass reads are slots [0, start + T): shapes follow the sequence) or a
0-d long tensor on the device (a static-shape pass: new K/V go in by index and the keys are all max_len
slots of the cache it is given, those at or past start + T masked by `layers.block_masks`), which is what a
CUDA graph captures. A static pass is given `cache.upto(start + T)`: the first `bucket(start + T)` slots as
a cache of their own (views of the same storage, made once per length), so it reads the slots its sequence
needs rounded up to a short ladder of lengths, not the whole persistent cache, and a graph is captured per
length of the ladder.

    >>> cache = KVCache(2, 1, 4, 1024, torch.float32, "cpu")
    >>> [bucket(n, cache.max_len) for n in (1, 256, 257, 300, 900, 5000)]
    [256, 256, 512, 512, 1024, 1024]
    >>> view = cache.upto(300)
    >>> view.max_len, view is cache.upto(400), cache.upto(1000) is cache
    (512, True, True)
"""
from __future__ import annotations

from typing import TypeVar, cast

import torch
from torch import Tensor

Start = int | Tensor                  # int: dynamic shapes; 0-d long device tensor: static shapes
BUCKET_FLOOR = 256                    # the shortest length of the ladder; then powers of two up to max_len


def bucket(end: int, max_len: int) -> int:
    """The cache length a static pass reading slots [0, end) attends over: the smallest power of two at
    least `end` and BUCKET_FLOOR, capped at the cache's max_len. A host int known before the pass."""
    return min(max(BUCKET_FLOOR, 1 << (end - 1).bit_length()), max_len)


def visible_slots(slots: Tensor, start: Tensor, block: Tensor) -> Tensor:
    """The attention rule of a static pass, bool [T, S] (True: may attend): slots before the device scalar
    `start` are visible to every new token, slots start..start+W-1 as `block` [T, W] allows, none after."""
    rel = slots - start                                                  # [S] slot relative to the block
    T, W = block.shape
    inside = block.gather(1, rel.clamp(0, W - 1).expand(T, -1))          # [T, S]
    return (rel < 0)[None, :] | ((rel >= 0) & (rel < W))[None, :] & inside


P = TypeVar("P", bound="Prefixes")


class Prefixes:
    """A cache with `max_len` slots whose first n slots can be a cache of their own (`_prefix(n)`, views of
    the same storage): `upto(end)` is the one a pass reading slots [0, end) is given (`bucket`). A prefix is
    made once per length and shared with the cache's other prefixes, so a step holding it keeps one key."""
    max_len: int
    _prefixes: dict[int, Prefixes]

    def upto(self: P, end: int) -> P:
        n = bucket(end, self.max_len)
        if n >= self.max_len:
            return self
        view = self._prefixes.get(n)
        if view is None:
            view = self._prefixes[n] = self._prefix(n)
            view._prefixes = self._prefixes
        return cast(P, view)                 # made by this cache's `_prefix`: its own class

    def _prefix(self, n: int) -> Prefixes:
        raise NotImplementedError


class KVCache(Prefixes):
    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, max_len: int,
                 dtype: torch.dtype, device: torch.device | str, v_head_dim: int | None = None):
        shape = (num_layers, num_kv_heads, max_len, head_dim)
        v_shape = (*shape[:-1], v_head_dim or head_dim)                    # values may be narrower (MLA)
        self._hold(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(v_shape, dtype=dtype, device=device),
                   torch.zeros(max_len, dtype=torch.long, device=device), torch.arange(max_len, device=device))
        self._prefixes = {}

    def _hold(self, k: Tensor, v: Tensor, pos: Tensor, slots: Tensor) -> None:
        self.k, self.v = k, v                                              # [L, Hkv, S, D] each
        self.pos, self.slots = pos, slots                                  # [S] each
        self.layer_k, self.layer_v = self.k.unbind(0), self.v.unbind(0)    # per-layer views [Hkv, S, D]
        self.batch_k = [k[None] for k in self.layer_k]                     # the same, [1, Hkv, S, D]
        self.batch_v = [v[None] for v in self.layer_v]
        self.max_len = pos.shape[0]

    def _prefix(self, n: int) -> KVCache:
        view = object.__new__(KVCache)
        view._hold(self.k[:, :, :n], self.v[:, :, :n], self.pos[:n], self.slots[:n])
        return view

    def check(self, start: Start, T: int) -> None:
        if isinstance(start, Tensor):
            return                    # static: the caller checked the int it copied in (no host sync here)
        if start < 0 or start + T > self.max_len:
            raise ValueError(f"slots {start}..{start + T - 1} do not fit a cache of max_len={self.max_len}; "
                             "create the cache with a larger max_len")

    def place(self, start: Start, positions: Tensor) -> None:
        """Record the RoPE positions [T] of the slots a pass writes."""
        if isinstance(start, Tensor):
            self.pos.index_copy_(0, start + self.slots[:positions.shape[0]], positions)
        else:
            self.pos[start:start + positions.shape[0]] = positions

    def write(self, layer: int, start: Start, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store k, v [Hkv, T, D] at slots start..start+T-1; return this layer's keys/values [1, Hkv, S', D]:
        S' = start + T (int start) or max_len (tensor start)."""
        T = k.shape[1]
        if isinstance(start, Tensor):
            idx = start + self.slots[:T]                                   # [T]
            self.layer_k[layer].index_copy_(1, idx, k)
            self.layer_v[layer].index_copy_(1, idx, v)
            return self.batch_k[layer], self.batch_v[layer]
        end = start + T
        self.layer_k[layer][:, start:end] = k
        self.layer_v[layer][:, start:end] = v
        return self.batch_k[layer][:, :, :end], self.batch_v[layer][:, :, :end]

    def keep(self, start: int, idx: list[int] | Tensor) -> None:
        """Move block-relative slots `idx` (slots start + idx) to slots start..start+len(idx)-1."""
        src = torch.as_tensor(idx, dtype=torch.long, device=self.k.device) + start   # [n]
        if src.numel() == 0:
            return
        if int(src.max()) >= self.max_len:
            raise ValueError(f"keep index {int(src.max()) - start} is beyond the cache (max_len={self.max_len})")
        end = start + src.numel()
        self.k[:, :, start:end] = self.k[:, :, src]                        # gather copies first
        self.v[:, :, start:end] = self.v[:, :, src]
        self.pos[start:end] = self.pos[src]
