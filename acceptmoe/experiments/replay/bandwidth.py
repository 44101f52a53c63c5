"""The bandwidths of the machine a replay runs on, measured by the replay itself (its local bound column).

    bw = measure("cpu", torch.float32)      # {"memory_gbps": ..., "copy_gbps": ..., "how": {...}}

- memory: reading a 512 MiB tensor once (`sum`), the way a matmul streams expert weights; median of 5.
- copy: what an offloaded load does here: on CUDA a pinned host-to-device copy of 256 MiB; on CPU a host copy
  into preallocated memory (`copy_`), bytes copied per second; median of 5.
GB/s = 1e9 bytes per second, as vendors publish.
"""
from __future__ import annotations

import functools
import statistics
import time

import torch


def _timed(fn, device: torch.device, repeats: int = 5) -> float:
    fn()                                                   # warm-up (page faults, lazy init)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(device: str | torch.device, dtype: torch.dtype, read_mib: int = 512, copy_mib: int = 256) -> dict:
    dev = torch.device(device)
    elt = torch.empty((), dtype=dtype).element_size()
    x = torch.ones(read_mib * (1 << 20) // elt, dtype=dtype, device=dev)
    read_s = _timed(x.sum, dev)
    n = copy_mib * (1 << 20)
    src = torch.ones(n, dtype=torch.uint8, pin_memory=dev.type == "cuda")
    dst = torch.empty(n, dtype=torch.uint8, device=dev)
    copy_s = _timed(functools.partial(dst.copy_, src, non_blocking=True), dev)
    del x, src, dst
    return {"memory_gbps": read_mib * (1 << 20) / read_s / 1e9, "copy_gbps": n / copy_s / 1e9,
            "how": {"memory": f"sum over {read_mib} MiB {str(dtype).removeprefix('torch.')} on {dev}, median of 5",
                    "copy": (f"pinned host -> {dev} copy of {copy_mib} MiB" if dev.type == "cuda"
                             else f"host copy_ of {copy_mib} MiB") + ", median of 5",
                    "threads": torch.get_num_threads()}}
