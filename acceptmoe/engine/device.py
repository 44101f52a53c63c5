"""The device a run asks for, checked before anything loads (`check_device`), and memory handed back between
the models one process opens (`free_memory`); docs/architecture.md, "Engine"."""
from __future__ import annotations

import gc

import torch

from acceptmoe.errors import UserError


def free_memory() -> None:
    """Collect what nothing references, then empty torch's device cache and its pinned host cache (the caching
    host allocator keeps freed page-locked blocks until asked: without this, every model a process opens adds
    its pinned bytes to the last one's)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.accelerator.empty_host_cache()


def check_device(device: str | torch.device) -> None:
    """A device this machine has; otherwise one user error naming what to pass instead."""
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {str(device)!r}: this machine has no CUDA GPU (or torch was built without CUDA); "
                        f"use device cpu (presets: `device: cpu`; lm-eval: --device cpu)")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise UserError(f"device {str(device)!r}: only {torch.cuda.device_count()} CUDA device(s) here")
