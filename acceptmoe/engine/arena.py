"""HostArena: one exact-size host allocation that an offloaded expert store keeps its experts in, page-locked
on CUDA, and the layout (offset, shape, dtype of every tensor in it) that sizes it.

    layout = ArenaLayout.of([("0.w1", (E, 2 * I, H), torch.bfloat16), ("0.w2", (E, H, I), torch.bfloat16)])
    arena = HostArena(layout, pin=True)          # one allocation of layout.nbytes bytes, registered with CUDA
    w1 = arena.view("0.w1")                      # [E, 2I, H] bf16, a view into the arena
    arena.pinned_bytes(), arena.release()        # page-locked bytes held; unregister (also when collected)

Why not `tensor.pin_memory()` or `torch.empty(..., pin_memory=True)`: both go through PyTorch's caching host
allocator (aten/src/ATen/core/CachingHostAllocator.h, `CachingHostAllocatorImpl::allocate`), which rounds
every request up to the next power of two (`c10::llvm::PowerOf2Ceil`, unless `PYTORCH_CUDA_ALLOC_CONF` sets
`pinned_max_round_threshold`, unset by default in torch 2.13) and keeps freed blocks cached until
`empty_host_cache()`. A pinned tensor per layer costs up to twice its bytes, and one pinned block of the exact
total still rounds once (Qwen3-30B-A3B's 57.98 GB of bf16 experts -> 68.72 GB). So the arena is a plain CPU
tensor (`torch.empty(n, dtype=uint8)`, the CPU allocator: exact, 64-byte aligned) that is page-locked in place
with `cudaHostRegister` (`torch.cuda.cudart()`, flag cudaHostRegisterPortable, as PyTorch's own
`torch.cuda._pin_memory_utils` and its distributed checkpoint stager do): the pinned bytes are the layout's
bytes exactly, and `release()` (or the arena's collection) unregisters them. Copies from a registered range are
true asynchronous DMA like any pinned memory (`Tensor.is_pinned()` is True for its views).

Layout rule (the one place): tensors in the order given, each starting at the next multiple of `ALIGN` bytes;
`nbytes` is the end of the last one. A name given twice is an error.
"""
from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from acceptmoe.errors import UserError

ALIGN = 64                         # bytes: every tensor of the arena starts on a cache line
REGISTER_PORTABLE = 1              # cudaHostRegisterPortable: page-locked for every CUDA context


@dataclass(frozen=True)
class Region:
    name: str
    offset: int                    # bytes from the arena's start (a multiple of ALIGN)
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * torch.empty((), dtype=self.dtype).element_size()


@dataclass(frozen=True)
class ArenaLayout:
    regions: tuple[Region, ...]

    @classmethod
    def of(cls, tensors: Iterable[tuple[str, Sequence[int], torch.dtype]]) -> ArenaLayout:
        """(name, shape, dtype) per tensor -> their places, in order, each aligned to ALIGN bytes."""
        regions, end = [], 0
        for name, shape, dtype in tensors:
            offset = -(-end // ALIGN) * ALIGN
            regions.append(Region(name, offset, tuple(int(d) for d in shape), dtype))
            end = offset + regions[-1].nbytes
        names = [r.name for r in regions]
        if len(set(names)) != len(names):
            raise ValueError(f"arena tensors need distinct names, got {names}")
        return cls(tuple(regions))

    @property
    def nbytes(self) -> int:
        """The arena's size: the end of its last tensor."""
        return self.regions[-1].offset + self.regions[-1].nbytes if self.regions else 0

    @property
    def tensor_bytes(self) -> int:
        """The bytes of the tensors themselves (nbytes less the alignment gaps)."""
        return sum(r.nbytes for r in self.regions)


class HostArena:
    """`layout.nbytes` bytes of host memory, page-locked with cudaHostRegister when `pin`, viewed per tensor."""

    def __init__(self, layout: ArenaLayout, pin: bool):
        self.layout = layout
        self.by_name = {r.name: r for r in layout.regions}
        self.buffer = torch.empty(layout.nbytes, dtype=torch.uint8)       # [nbytes], the CPU allocator: exact
        self._unregister = None
        if pin and layout.nbytes:
            ptr = _register(self.buffer)
            # runs at `release()` or when the arena is collected; it holds the buffer, so the memory outlives
            # its registration
            self._unregister = weakref.finalize(self, _unregister, ptr, self.buffer)
            self._unregister.atexit = False      # at exit the process's memory goes back whole

    def view(self, name: str) -> Tensor:
        """The tensor `name`: shape and dtype of its region, sharing the arena's memory."""
        r = self.by_name[name]
        return self.buffer[r.offset:r.offset + r.nbytes].view(r.dtype).view(r.shape)

    @property
    def nbytes(self) -> int:
        return self.buffer.untyped_storage().nbytes()

    def pinned_bytes(self) -> int:
        """Page-locked bytes this arena holds (0 when not pinned or released)."""
        return self.nbytes if self._unregister is not None and self._unregister.alive else 0

    def release(self) -> None:
        """Unregister the pinned range now (after the device has finished every copy from it). The memory stays
        valid, pageable, while views of it live."""
        if self._unregister is not None:
            self._unregister()


def _register(buffer: Tensor) -> int:
    """Page-lock `buffer` in place; returns its address."""
    ptr, size = buffer.data_ptr(), buffer.untyped_storage().nbytes()
    err = int(torch.cuda.cudart().cudaHostRegister(ptr, size, REGISTER_PORTABLE))
    if err != 0:
        raise UserError(f"page-locking {size / 1e9:.2f} GB of host memory for the offloaded experts failed (cudaError "
                        f"{err}): free host memory, or lower the pinned need (`./reproduce.sh plan` shows it per "
                        f"model)")
    return ptr


def _unregister(ptr: int, buffer: Tensor) -> None:
    torch.cuda.synchronize()                    # no copy from the range may still be in flight
    torch.cuda.cudart().cudaHostUnregister(ptr)
