"""The one place the plugin calls the project's selection code: per-request eligible sets of one MoE layer.

    sets = SetSelector(method, router, cfg, num_experts, max_requests, max_tokens, device)
    sets.prepare(blocks)                       # before the forward: per-request trees -> static buffers
    sel = sets(logits)                         # inside it: logits [B, T, E] -> eligible/utility/anchor [B, E]

`prepare` runs on the host before each verify pass and writes the per-token inputs (valid tokens, commitment
weights) into buffers allocated once; `__call__` is fixed-shape tensor code that reads only those buffers, so
a CUDA graph captured through it sees fresh inputs at every replay. It computes the sets with the torch
verifier backend's `select_batched` (`acceptmoe.kernels.batched`), which agrees exactly with
`acceptmoe.methods.select` and the Triton kernel (the same ranking rule and fixed-point sizing).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from acceptmoe.kernels.batched import select_batched
from acceptmoe.methods import BlockInfo, Router, SelectorConfig, Selection, commitment_weights, get_method
from acceptmoe.methods.config import check_for_method


class SetSelector:
    def __init__(self, method: str, router: Router, cfg: SelectorConfig, num_experts: int, max_requests: int,
                 max_tokens: int, device: torch.device | str):
        self.spec = get_method(method)
        if not self.spec.speculates:
            raise ValueError(f"method {method!r} does not speculate, so it has no verifier-side set")
        check_for_method(cfg, self.spec, router, num_experts, max_depth=0)
        self.router, self.cfg, self.num_experts = router, cfg, num_experts
        self.valid = torch.zeros(max_requests, max_tokens, device=device)      # [B_max, T_max]
        self.alpha = torch.zeros(max_requests, max_tokens, device=device)      # [B_max, T_max]

    def prepare(self, blocks: Sequence[BlockInfo]) -> None:
        """Per-request trees of the coming pass (request-major, padded requests absent)."""
        B, T = len(blocks), max(b.num_tokens for b in blocks)
        if B > self.valid.shape[0] or T > self.valid.shape[1]:
            raise ValueError(f"{B} requests of up to {T} tokens exceed the plugin's buffers "
                             f"{tuple(self.valid.shape)}")
        check_for_method(self.cfg, self.spec, self.router, self.num_experts, max(b.max_depth for b in blocks))
        valid, alpha = torch.zeros(B, T), torch.zeros(B, T)
        for i, b in enumerate(blocks):
            valid[i, : b.num_tokens] = 1.0
            if self.spec.needs_commitment:
                alpha[i, : b.num_tokens] = commitment_weights(b, self.cfg)
        self.valid.zero_()
        self.alpha.zero_()
        self.valid[:B, :T].copy_(valid, non_blocking=True)
        self.alpha[:B, :T].copy_(alpha, non_blocking=True)

    def __call__(self, logits: Tensor) -> Selection:
        """logits [B, T, E] (B requests of width T, request-major) -> Selection with [B, E] fields."""
        B, T, _ = logits.shape
        return select_batched(self.spec, self.router, self.cfg, logits, self.alpha[:B, :T], self.valid[:B, :T])


def select_sets(method: str, logits: Tensor, blocks: Sequence[BlockInfo], router: Router,
                cfg: SelectorConfig) -> Selection:
    """Eligible sets of `blocks` (padded to logits' T) from logits [B, T, E], in one call (tests, offline use)."""
    B, T, E = logits.shape
    sets = SetSelector(method, router, cfg, E, B, T, logits.device)
    sets.prepare(blocks)
    return sets(logits)
