"""Benchmark: what one expert load costs against one expert's compute, per expert shape, on this machine.

An offloaded expert load is `slot.copy_(host_expert)` (the store's `_load`); its compute is the expert MLP
on the tokens routed to it. Their ratio decides how much of a verification pass waits for loads. Side by
side in one run, per shape: the median seconds of one load (a host-memory copy on CPU, a pinned
host-to-device copy on CUDA) and of one expert's compute on 1 and 8 tokens, and the copy bandwidth.

Shapes: the tiny target's expert (H 128, I 32, fp32), Qwen3-30B-A3B's (H 2048, I 768, bf16) and GPT-OSS-120B's
(H 2880, I 2880, bf16 here; its checkpoint's MXFP4 packing moves about a quarter of these bytes).

    ./reproduce.sh bench-copy [--device cpu|cuda] [--repeats 50]
"""
from __future__ import annotations

import statistics
import time

import torch

from acceptmoe.commands import command, parser
from acceptmoe.engine.store import ExpertMath

SHAPES = {"tiny (H128, I32, fp32)": (128, 32, torch.float32),
          "qwen3-30b-a3b (H2048, I768, bf16)": (2048, 768, torch.bfloat16),
          "gpt-oss-120b (H2880, I2880, bf16)": (2880, 2880, torch.bfloat16)}


def timed(fn, device: torch.device, repeats: int) -> float:
    """Median seconds of fn(), device synchronised."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    for _ in range(3):
        fn()
    out = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def measure(hidden: int, inter: int, dtype: torch.dtype, device: torch.device, repeats: int) -> dict:
    pin = device.type == "cuda"
    host = {"w1": torch.randn(2 * inter, hidden).to(dtype), "w2": torch.randn(hidden, inter).to(dtype)}
    host = {k: (v.pin_memory() if pin else v) for k, v in host.items()}
    slot = {k: torch.empty_like(v, device=device) for k, v in host.items()}
    nbytes = sum(v.numel() * v.element_size() for v in host.values())

    def load() -> None:
        for k, buf in slot.items():
            buf.copy_(host[k], non_blocking=True)
    math = ExpertMath("swiglu", dtype)
    row = {"bytes": nbytes, "load_s": timed(load, device, repeats)}
    for n in (1, 8):
        x = torch.randn(n, hidden, device=device, dtype=dtype)
        row[f"compute_{n}_s"] = timed(lambda: math(x, slot), device, repeats)  # noqa: B023 (called in this iteration)
    row["gb_per_s"] = nbytes / row["load_s"] / 1e9
    return row


@command("bench-copy", "one expert load (host copy / H2D) vs one expert's compute, per shape")
def main(argv: list[str] | None = None) -> int:
    p = parser("bench-copy")
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (the tiny preset uses 1)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"device {device}, torch threads {torch.get_num_threads()}; medians of {args.repeats}")
    print(f"{'expert':36} {'MB':>7} {'load us':>9} {'GB/s':>6} {'compute 1 tok us':>17} {'8 tok us':>9} {'load/compute(1)':>16}")
    for name, (h, i, dt) in SHAPES.items():
        r = measure(h, i, dt, device, args.repeats)
        print(f"{name:36} {r['bytes'] / 1e6:7.3f} {1e6 * r['load_s']:9.1f} {r['gb_per_s']:6.1f} "
              f"{1e6 * r['compute_1_s']:17.1f} {1e6 * r['compute_8_s']:9.1f} {r['load_s'] / r['compute_1_s']:16.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
