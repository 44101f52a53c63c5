"""What every gpu-check part shares: the verdict words, the commitment table plans are bound with, and random
draft trees."""
from __future__ import annotations

import torch

from acceptmoe.methods import BlockInfo

P_HAT = (1.0, 0.8, 0.64, 0.512, 0.41, 0.33)


def verdict(ok: bool | None) -> str:
    return "SKIP" if ok is None else ("PASS" if ok else "FAIL")


def random_block(T: int, gen: torch.Generator, max_depth: int = 5) -> BlockInfo:
    """BlockInfo of a random draft tree of T nodes at most max_depth levels deep, topologically ordered."""
    parents, depth = [-1], [0]
    for _ in range(1, T):
        shallow = [p for p in range(len(parents)) if depth[p] < max_depth]
        p = shallow[int(torch.randint(len(shallow), (1,), generator=gen))]
        parents.append(p)
        depth.append(depth[p] + 1)
    return BlockInfo.from_parents(parents)
