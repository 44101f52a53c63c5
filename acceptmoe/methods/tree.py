"""Verification-block geometry: the draft tree's parents, depths and level sizes.

A verification block has T tokens; index 0 is the root (the last committed token), the rest are draft
nodes in topological order (every parent index is smaller than its child's). Depth 0 is the root, depth d
the d-th draft step. `N_d` (level_sizes[d]) is the number of nodes at depth d.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from acceptmoe.errors import UserError


class TreeError(UserError, ValueError):
    """A parent list that does not describe a tree rooted at index 0."""


@dataclass(frozen=True, eq=False)
class BlockInfo:
    parents: Tensor      # [T] long, parents[0] == -1
    depth: Tensor        # [T] long, depth[0] == 0
    level_sizes: Tensor  # [D + 1] long, N_d; level_sizes[0] == 1

    @property
    def num_tokens(self) -> int:
        return int(self.parents.numel())

    @property
    def max_depth(self) -> int:
        return int(self.level_sizes.numel()) - 1

    @classmethod
    def from_parents(cls, parents: Sequence[int] | Tensor) -> BlockInfo:
        plist = [int(p) for p in (parents.tolist() if isinstance(parents, Tensor) else parents)]
        depth = _depths(plist)
        level_sizes = torch.bincount(torch.tensor(depth, dtype=torch.long))
        return cls(
            parents=torch.tensor(plist, dtype=torch.long),
            depth=torch.tensor(depth, dtype=torch.long),
            level_sizes=level_sizes,
        )

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root to `node`, inclusive."""
        path, p = [], int(node)
        while p != -1:
            path.append(p)
            p = int(self.parents[p])
        return path[::-1]


def _depths(parents: list[int]) -> list[int]:
    if not parents:
        raise TreeError("empty parent list: a verification block needs at least the root token")
    if parents[0] != -1:
        raise TreeError(f"parents[0] must be -1 (index 0 is the root), got {parents[0]}")
    depth = [0]
    for t, p in enumerate(parents[1:], start=1):
        if p == -1:
            raise TreeError(f"parents[{t}] is -1: only index 0 may be the root of a verification block")
        if not 0 <= p < t:
            raise TreeError(
                f"parents[{t}] = {p} is not an earlier node: list nodes in topological order "
                f"(each parent index in [0, {t - 1}])"
            )
        depth.append(depth[p] + 1)
    return depth
