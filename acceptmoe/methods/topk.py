"""The one ranking rule of the project: value descending, ties to the lower index.

Every top-k and every ranking uses these functions: natural routing (`Router.natural`, so plain decoding,
Vanilla AR, Standard SD and prefill), constrained routing (`route`), the reference selectors, the torch
verifier backend, and residency pruning (which walks the same order from the end). The Triton kernel
implements the same rule. A stable descending sort gives it directly: equal values keep their index
order. Pure tensor code on the device: no host synchronisation, fixed output shapes.

    >>> import torch
    >>> from acceptmoe.methods import first_k_in, order_desc, rank_desc, topk, topk_ids
    >>> x = torch.tensor([1.0, 3.0, 3.0, 2.0])
    >>> topk(x, 2)                         # values and ids, best first; the tie goes to the lower index
    (tensor([3., 3.]), tensor([1, 2]))
    >>> topk_ids(x, 3).tolist(), first_k_in(order_desc(x), torch.tensor([True, False, True, True]), 2).tolist()
    ([1, 2, 3], [2, 3])
    >>> rank_desc(torch.tensor([2.0, 2.0, 5.0]), torch.tensor([0.1, 0.3, 0.0])).tolist()   # primary, then secondary
    [2, 1, 0]
"""
from __future__ import annotations

import torch
from torch import Tensor


def order_desc(primary: Tensor, secondary: Tensor | None = None) -> Tensor:
    """ids [..., N] long, best first: primary descending, then secondary descending, then lower index."""
    if secondary is None:
        return torch.sort(primary, dim=-1, descending=True, stable=True).indices
    by_secondary = torch.sort(secondary, dim=-1, descending=True, stable=True).indices     # [..., N]
    by_primary = torch.sort(primary.gather(-1, by_secondary), dim=-1, descending=True, stable=True).indices
    return by_secondary.gather(-1, by_primary)


def topk_ids(values: Tensor, k: int) -> Tensor:
    """values [..., N] -> ids [..., k] long of the k largest, best first; ties: lower index."""
    return order_desc(values)[..., :k]


def first_k_in(order: Tensor, member: Tensor, k: int) -> Tensor:
    """ids [..., k]: the first k members in a ranking `order` [..., N] (`order_desc` of some values), best
    first; member bool [..., N] by index, broadcastable to order, at least k per row. For finite values this
    is `topk_ids` of the values with non-members set to -inf: removing entries from a ranking keeps the
    order of the rest, so a restricted top-k reuses the unrestricted ranking instead of sorting again."""
    in_order = member.expand(order.shape).gather(-1, order)                                  # [..., N]
    slot = (in_order.cumsum(-1) * in_order).clamp_max(k + 1)                                 # [..., N]
    # slot: 1..k for the first k members in ranking order, 0 for non-members, k + 1 past the k-th
    out = torch.empty(order.shape[:-1] + (k + 2,), dtype=order.dtype, device=order.device)
    return out.scatter_(-1, slot, order)[..., 1:k + 1]


def topk(values: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """values [..., N] -> (values [..., k], ids [..., k] long): the k largest, best first; ties: lower index."""
    ids = topk_ids(values, k)                                                                # [..., k]
    return values.gather(-1, ids), ids


def rank_desc(primary: Tensor, secondary: Tensor | None = None) -> Tensor:
    """rank [..., N] long, 0 = best, in the order of `order_desc` (the inverse permutation of the order;
    its values are distinct, so any sort inverts it exactly)."""
    return order_desc(primary, secondary).argsort(-1)
