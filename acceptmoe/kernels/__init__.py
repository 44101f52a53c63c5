"""The batched verifier: one interface (`make_verifier`), two backends (torch, the fused Triton kernel).

    verifier = make_verifier("auto", plan, device)   # plan: Variant(...).bind(engine.fit, ...)
    verifier.prepare(blocks)                         # per verification step
    out = verifier(logits, resident)                 # per MoE layer: logits [B, T, E] -> ids, weights, eligible, ...
"""
from .verifier import (BACKENDS, StepBuffers, Verifier, VerifierInputError, VerifierOutput, make_verifier,
                       register_backend, resolve_backend)

__all__ = ["BACKENDS", "StepBuffers", "Verifier", "VerifierInputError", "VerifierOutput", "make_verifier",
           "register_backend", "resolve_backend"]
