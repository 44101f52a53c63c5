"""The batched verifier: one interface (`make_verifier`), three backends (torch, the compiled CPU library,
the fused Triton kernel), and the engine's natural routing (`natural`).

    verifier = make_verifier("auto", plan, device)   # plan: Variant(...).bind(engine.fit, ...)
    verifier.prepare(blocks)                         # per verification step
    out = verifier(logits, resident)                 # per MoE layer: logits [B, T, E] -> ids, weights, eligible, ...
"""
from .backends import VERIFIERS, UnknownBackendError, make_verifier, resolve_backend
from .cpu_verifier import natural
from .verifier import StepBuffers, Verifier, VerifierInputError, VerifierOutput

__all__ = ["VERIFIERS", "StepBuffers", "UnknownBackendError", "Verifier", "VerifierInputError", "VerifierOutput",
           "make_verifier", "natural", "resolve_backend"]
