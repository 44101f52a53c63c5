"""The batched verifier: one interface, two backends (torch, Triton), made by one factory.

The readable reference is `acceptmoe.methods.select` + `route` (one block, one layer). An engine uses this
interface instead: it selects the eligible set S of every verification block and routes inside it, for
one MoE layer per call, with no host synchronisation and fixed shapes (CUDA-graph safe).

    verifier = make_verifier("auto", "acceptmoe", router, cfg, num_experts=E, device=device)
    verifier.prepare(blocks)                         # once per verification step: B blocks, padded to T
    out = verifier(logits, resident)                 # per MoE layer: logits [B, T, E], resident [E] | [B, E]
    out.ids, out.weights                             # [B, T, k] routing inside S (Eq. 2)
    out.eligible, out.utility, out.anchor            # [B, E] the selection

A resident mask turns on residency-aware pruning of S (never below max(prune_min_set, top_k)). Both
backends agree exactly with the reference on ids and sets (the tests check it under the Triton
interpreter); they rank by the project's one rule, `acceptmoe.methods.topk`. Backends: `torch` (pure
tensor code on any device), `triton` (one fused kernel launch per layer), `auto` (triton on CUDA, else
torch); `register_backend` adds one.
"""
from __future__ import annotations

from typing import Callable

import torch

from acceptmoe.methods import Router, SelectorConfig

from .interface import LOGIT_DTYPES, Verifier, VerifierInputError, VerifierOutput

__all__ = ["LOGIT_DTYPES", "BACKENDS", "Verifier", "VerifierInputError", "VerifierOutput", "make_verifier",
           "register_backend", "resolve_backend"]


VerifierFactory = Callable[[str, Router, SelectorConfig, int, torch.device], Verifier]


def _torch_backend(*args) -> Verifier:
    from .batched import TorchVerifier
    return TorchVerifier(*args)


def _triton_backend(*args) -> Verifier:
    from .verifier import TritonVerifier       # imports triton only when asked for
    return TritonVerifier(*args)


BACKENDS: dict[str, VerifierFactory] = {"torch": _torch_backend, "triton": _triton_backend}


def register_backend(name: str, factory: VerifierFactory) -> None:
    """Make a backend available to `make_verifier(name, ...)` (and `Engine(backend=name)`)."""
    BACKENDS[name] = factory


def resolve_backend(backend: str, device: torch.device | str) -> str:
    """The backend name `make_verifier` uses: `auto` is triton on CUDA, else torch."""
    if backend == "auto":
        return "triton" if torch.device(device).type == "cuda" else "torch"
    if backend not in BACKENDS:
        raise VerifierInputError(f"unknown verifier backend {backend!r}; registered: auto, {', '.join(BACKENDS)}")
    return backend


def make_verifier(backend: str, method: str, router: Router, cfg: SelectorConfig, num_experts: int,
                  device: torch.device | str = "cpu") -> Verifier:
    """The batched verifier of `method` on `backend` (torch | triton | auto | a registered name)."""
    return BACKENDS[resolve_backend(backend, device)](method, router, cfg, num_experts, torch.device(device))
