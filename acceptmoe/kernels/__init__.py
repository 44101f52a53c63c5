"""The batched verifier: one interface (`make_verifier`), two backends (torch, the fused Triton kernel).

    verifier = make_verifier("auto", method, router, cfg, num_experts, device)
    verifier.prepare(blocks)                # per verification step
    out = verifier(logits, resident)        # per MoE layer: logits [B, T, E] -> ids, weights, eligible, ...
"""
from .verify import (BACKENDS, Verifier, VerifierInputError, VerifierOutput, make_verifier, register_backend,
                     resolve_backend)

__all__ = ["BACKENDS", "Verifier", "VerifierInputError", "VerifierOutput", "make_verifier", "register_backend",
           "resolve_backend"]
