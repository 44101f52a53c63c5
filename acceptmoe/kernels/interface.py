"""The batched verifier's interface: `Verifier` (validate once, `prepare` per step, call per layer),
`VerifierOutput` and `VerifierInputError`. Backends (`batched.TorchVerifier`, `verifier.TritonVerifier`)
subclass `Verifier`; `verify.make_verifier` picks one by name."""
from __future__ import annotations

from typing import NamedTuple, Sequence

import torch
from torch import Tensor

from acceptmoe.errors import UserError
from acceptmoe.methods import METHODS, BlockInfo, MethodSpec, Router, SelectorConfig, Selection, commitment_weights
from acceptmoe.methods.config import check_for_method
from acceptmoe.methods.registry import get_method


LOGIT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class VerifierInputError(UserError, ValueError):
    """An input the verifier cannot take; the message names the tensor or setting and the fix."""


class VerifierOutput(NamedTuple):
    ids: Tensor       # int64 [B, T, k] constrained top-k inside S, best first
    weights: Tensor   # fp32 [B, T, k] their gating weights (router semantics of `acceptmoe.methods.routing`)
    eligible: Tensor  # bool [B, E] the final set S (after pruning, when a resident mask was given)
    utility: Tensor   # fp32 [B, E] the score the method ranked by (votes, router mass, commitment, gate mass)
    anchor: Tensor    # bool [B, E] the root's natural top-k (commitment methods), else all False

    @property
    def selection(self) -> Selection:
        return Selection(self.eligible, self.utility, self.anchor)


class Verifier:
    """One method's batched select-and-route for one router and layer width E (a backend subclasses `_run`).

    Construction validates the method, router and config on the host, once. `prepare` turns one
    verification step's blocks into device tensors (commitment weights `alpha` [B, T], `num_tokens` [B]);
    each call then only checks shapes and runs on the device."""

    def __init__(self, method: str, router: Router, cfg: SelectorConfig, num_experts: int,
                 device: torch.device | str = "cpu"):
        self.spec: MethodSpec = get_method(method)
        if not self.spec.speculates:
            raise VerifierInputError(f"method {method!r} does not speculate, so it has no verifier; use one of: "
                                     f"{', '.join(n for n, s in METHODS.items() if s.speculates)}")
        check_for_method(cfg, self.spec, router, num_experts, max_depth=0)
        self.router, self.cfg, self.num_experts = router, cfg, num_experts
        self.device = torch.device(device)
        # Pruning never leaves fewer than k experts (the anchor already guarantees it where there is one).
        self.min_set = max(cfg.prune_min_set, router.top_k)
        self.alpha: Tensor | None = None        # fp32 [B, T], zeros for methods without commitment and padding
        self.num_tokens: Tensor | None = None   # int32 [B]
        self._counts: tuple[int, ...] = ()      # num_tokens as last written

    def prepare(self, blocks: BlockInfo | Sequence[BlockInfo], pad_to: int | None = None) -> None:
        """Bind one verification step's blocks (padded to T = pad_to or the longest block). Steps of the same
        shape reuse the same device buffers, so a captured CUDA graph sees each step's values; a buffer whose
        values did not change (the token counts of a fixed tree, alpha of a method without commitment) is
        not written again."""
        blocks = [blocks] if isinstance(blocks, BlockInfo) else list(blocks)
        if not blocks:
            raise VerifierInputError("prepare needs at least one verification block")
        T = pad_to or max(b.num_tokens for b in blocks)
        check_for_method(self.cfg, self.spec, self.router, self.num_experts, max(b.max_depth for b in blocks))
        for i, b in enumerate(blocks):
            if b.num_tokens > T:
                raise VerifierInputError(f"block {i} has {b.num_tokens} tokens, more than the padded T={T}")
        counts = tuple(b.num_tokens for b in blocks)
        reuse = self.alpha is not None and tuple(self.alpha.shape) == (len(blocks), T)   # CUDA-graph replay
        if not reuse or self.spec.needs_commitment:
            alpha = torch.zeros(len(blocks), T, dtype=torch.float32)                      # [B, T] on the host
            if self.spec.needs_commitment:
                for i, b in enumerate(blocks):
                    alpha[i, : b.num_tokens] = commitment_weights(b, self.cfg)
            if reuse:
                self.alpha.copy_(alpha)
            else:
                self.alpha = alpha.to(self.device)
        if not reuse or counts != self._counts:
            num_tokens = torch.tensor(counts, dtype=torch.int32)
            if reuse:
                self.num_tokens.copy_(num_tokens)
            else:
                self.num_tokens = num_tokens.to(self.device)
            self._counts = counts
            self._bind_tokens(reuse)

    def _bind_tokens(self, reuse: bool) -> None:
        """Hook for a backend's own per-step buffers derived from `num_tokens` (called when the counts or the
        buffers changed; reuse: the buffers are the previous step's)."""

    def __call__(self, logits: Tensor, resident: Tensor | None = None) -> VerifierOutput:
        """logits [B, T, E] of one MoE layer; resident bool [E] or [B, E] (the pool before the pass) or None."""
        self._check(logits, resident)
        return self._run(logits, resident)

    def _run(self, logits: Tensor, resident: Tensor | None) -> VerifierOutput:
        raise NotImplementedError

    def _check(self, logits: Tensor, resident: Tensor | None) -> None:
        if self.alpha is None:
            raise VerifierInputError("call verifier.prepare(blocks) once per verification step before the layers")
        B, T = self.alpha.shape
        E = self.num_experts
        if logits.dim() != 3 or tuple(logits.shape) != (B, T, E):
            raise VerifierInputError(f"logits must be [B, T, E] = {(B, T, E)} (the prepared blocks, E experts), "
                                     f"got {tuple(logits.shape)}")
        if logits.device != self.device:
            raise VerifierInputError(f"logits are on {logits.device} but the verifier was made for {self.device}: "
                                     f"make_verifier(..., device={str(logits.device)!r})")
        if logits.dtype not in LOGIT_DTYPES:
            raise VerifierInputError(f"logits dtype {logits.dtype} is not supported; use one of {LOGIT_DTYPES}")
        if resident is not None:
            if tuple(resident.shape) not in ((E,), (B, E)):
                raise VerifierInputError(f"resident must have shape ({E},) or ({B}, {E}), got {tuple(resident.shape)}")
            if resident.dtype != torch.bool:
                raise VerifierInputError(f"resident dtype must be torch.bool, got {resident.dtype}")
            if resident.device != self.device:
                raise VerifierInputError(f"resident is on {resident.device} but logits are on {self.device}")
