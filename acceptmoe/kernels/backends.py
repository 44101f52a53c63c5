"""The verifier backends by name and the one factory, `make_verifier(backend, plan, device)`.

    >>> from acceptmoe.kernels import BACKENDS, resolve_backend
    >>> {"torch", "cpu", "triton"} <= set(BACKENDS), resolve_backend("auto", "cuda")
    (True, 'triton')

A backend module declares what it serves with `acceptmoe.methods.register_backend` when it is imported
(`make_verifier` imports it on first use: triton only when asked for).
"""
from __future__ import annotations

from typing import Callable

import torch

from acceptmoe.methods import Plan

from .verifier import Verifier, VerifierInputError

VerifierFactory = Callable[[Plan, torch.device], Verifier]


def _torch_backend(plan: Plan, device: torch.device) -> Verifier:
    from .torch_verifier import TorchVerifier
    return TorchVerifier(plan, device)


def _cpu_backend(plan: Plan, device: torch.device) -> Verifier:
    from .cpu_verifier import CpuVerifier               # builds its C library on first use
    return CpuVerifier(plan, device)


def _triton_backend(plan: Plan, device: torch.device) -> Verifier:
    from .triton_verifier import TritonVerifier       # imports triton only when asked for
    return TritonVerifier(plan, device)


BACKENDS: dict[str, VerifierFactory] = {"torch": _torch_backend, "cpu": _cpu_backend, "triton": _triton_backend}


def register_backend(name: str, factory: VerifierFactory) -> None:
    """Make a backend available to `make_verifier(name, ...)` (and `Engine(backend=name)`); its module
    declares what it serves with `acceptmoe.methods.register_backend`."""
    BACKENDS[name] = factory


def resolve_backend(backend: str, device: torch.device | str) -> str:
    """The backend name `make_verifier` uses: `auto` is triton on CUDA, the compiled `cpu` backend on a CPU
    where its library builds (a C compiler), else torch."""
    if backend == "auto":
        kind = torch.device(device).type
        if kind == "cuda":
            return "triton"
        if kind == "cpu":
            from .cpu_verifier import available
            return "cpu" if available() else "torch"
        return "torch"
    if backend not in BACKENDS:
        raise VerifierInputError(f"unknown verifier backend {backend!r}; registered: auto, {', '.join(BACKENDS)}")
    return backend


def make_verifier(backend: str, plan: Plan, device: torch.device | str = "cpu") -> Verifier:
    """The batched verifier of `plan` on `backend` (torch | triton | auto | a registered name)."""
    if not isinstance(plan, Plan):
        raise TypeError(f"make_verifier takes a Plan (Variant(...).bind(fit, ...)), got {type(plan).__name__}")
    return BACKENDS[resolve_backend(backend, device)](plan, torch.device(device))
