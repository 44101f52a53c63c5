"""The verifier backends by name (`VERIFIERS`) and the one factory, `make_verifier(backend, plan, device)`.

    >>> from acceptmoe.kernels import VERIFIERS, resolve_backend
    >>> {"torch", "cpu", "triton"} <= set(VERIFIERS), resolve_backend("auto", "cuda")
    (True, 'triton')

`VERIFIERS` is a `acceptmoe.registry.Registry` of `Verifier` classes (anything called `(plan, device)`),
each imported on first use (triton only when asked for); a backend module declares what it serves with
`acceptmoe.methods.register_backend` when it is imported (docs/architecture.md, "Registries").
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from acceptmoe.methods import Plan
from acceptmoe.registry import Registry, UnknownName

from .verifier import Verifier, VerifierInputError

VerifierFactory = Callable[[Plan, torch.device], Verifier]


class UnknownBackendError(UnknownName, VerifierInputError):
    """A verifier backend name that `VERIFIERS` does not hold."""


VERIFIERS: Registry[VerifierFactory] = Registry("verifier backend", fix="or auto", error=UnknownBackendError)
VERIFIERS.lazy("torch", "acceptmoe.kernels.torch_verifier:TorchVerifier")
VERIFIERS.lazy("cpu", "acceptmoe.kernels.cpu_verifier:CpuVerifier")          # builds its C library on first use
VERIFIERS.lazy("triton", "acceptmoe.kernels.triton_verifier:TritonVerifier")  # imports triton only when asked for


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
    if backend not in VERIFIERS:
        raise VERIFIERS.unknown(backend)
    return backend


def make_verifier(backend: str, plan: Plan, device: torch.device | str = "cpu") -> Verifier:
    """The batched verifier of `plan` on `backend` (torch | cpu | triton | auto | a registered name)."""
    if not isinstance(plan, Plan):
        raise TypeError(f"make_verifier takes a Plan (Variant(...).bind(fit, ...)), got {type(plan).__name__}")
    return VERIFIERS[resolve_backend(backend, device)](plan, torch.device(device))
