"""Draft trees as SGLang stores them, turned back into the parent lists `acceptmoe.methods.BlockInfo` takes.

SGLang's `EagleVerifyInput` keeps each request's tree of n nodes (node 0 the root, the last committed token)
as linked lists: `retrieve_next_token[b, i]` the first child of node i and `retrieve_next_sibling[b, i]` its
next sibling (-1: none), both local indices in [0, n). The parent list is not stored. `parents_from_links`
recovers it with fixed-shape tensor ops (pointer jumping along sibling chains, ceil(log2 n) rounds), so it
runs on the device with no host synchronisation; `links_from_parents` is the inverse.

SGLang's tree kernel leaves a node unlinked when its parent was not among the selected tokens (it warns and
goes on; the node's attention row then holds only the root and itself, and verification never reaches it).
Such a node gets the root as its parent here: that is how the verify pass computed it, and it is never
accepted, so the plugin's blocks stay well formed instead of failing inside the forward.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor


def parents_from_links(next_token: Tensor, next_sibling: Tensor) -> Tensor:
    """next_token, next_sibling [B, n] long (-1: none) -> parents [B, n] long, parents[:, 0] == -1.

    A node is either the first child of its parent or the next sibling of an earlier child of the same
    parent: follow the previous-sibling links to the first child, whose parent is the node naming it."""
    B, n = next_token.shape
    dev = next_token.device
    rows = torch.arange(B, device=dev)[:, None].expand(B, n)           # [B, n]
    nodes = torch.arange(n, device=dev)[None, :].expand(B, n)          # [B, n]
    dummy = n                                                          # scatter target for "-1" links
    fc = torch.where(next_token >= 0, next_token, dummy).long()
    ns = torch.where(next_sibling >= 0, next_sibling, dummy).long()
    named_by = torch.full((B, n + 1), -1, dtype=torch.long, device=dev)
    named_by[rows, fc] = nodes                                         # parent of each first child
    prev = torch.full((B, n + 1), -1, dtype=torch.long, device=dev)
    prev[rows, ns] = nodes                                             # previous sibling of each later child
    named_by, prev = named_by[:, :n], prev[:, :n]
    first = torch.where(prev >= 0, prev, nodes)                        # [B, n] one step towards the first child
    for _ in range(max(1, math.ceil(math.log2(max(n, 2))))):
        first = first.gather(1, first)                                 # pointer jumping: 2^r steps after r rounds
    parents = named_by.gather(1, first)
    return torch.where((parents < 0) & (nodes > 0), 0, parents)         # unlinked nodes: children of the root


def links_from_parents(parents: Sequence[int]) -> tuple[list[int], list[int]]:
    """(first child, next sibling) per node of a parent list, children in index order (SGLang's layout)."""
    n = len(parents)
    first, sibling, last = [-1] * n, [-1] * n, [-1] * n
    for node in range(1, n):
        p = parents[node]
        if first[p] == -1:
            first[p] = node
        else:
            sibling[last[p]] = node
        last[p] = node
    return first, sibling
