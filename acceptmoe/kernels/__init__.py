"""The Triton verifier kernel: fused expert selection and constrained top-k routing, one launch per MoE layer."""
from .verifier import (
    Demand, FusedVerifier, KernelInputError, Prune, RouterMode, Score, Sizing, VerifierOutput, fused_select_route,
    router_mode,
)

__all__ = [
    "Demand", "FusedVerifier", "KernelInputError", "Prune", "RouterMode", "Score", "Sizing", "VerifierOutput",
    "fused_select_route", "router_mode",
]
