"""SGLang's own sampling verify on a CPU (SGLang 0.5.23): the verify pass at temperature > 0 takes the branch
it takes on CUDA, with torch stand-ins for the three ops that branch calls.

On a CPU, SGLang's EAGLE verify commits the target's argmax whatever the temperature: `eagle_sample`
(`srt/speculative/eagle_utils.py:641-647`) asks `_verify_uses_greedy` (`:485-500`), which answers True for
`is_cpu`. Its sampling branch (`:712-790`) calls `tree_speculative_sampling_target_only` (sgl-kernel's CUDA
kernel; `kernels/ops/speculative/verify_sampling.py:21-32` binds None on a CPU) and, when a request cuts its
law, `top_k_renorm_prob` / `top_p_renorm_prob` (flashinfer's; `kernels/ops/sampling/renorm.py:9-35` binds None
on a CPU). `install` (called by the plugin in every SGLang process that runs on the CPU engine):

- binds `acceptmoe.serving.sglang.cpu.ops`' versions of those three names into `eagle_utils`, where they are
  None (a real kernel is never replaced). Set on that one module, not through the hook registry: a REPLACE hook
  on a None attribute would rebind every module attribute that is None (`hook_registry._propagate_patch`).
- registers an AROUND hook on `_verify_uses_greedy` that asks it as CUDA would (`is_cpu=False`): greedy
  exactly when every request in the batch is greedy (temperature 0), so greedy batches keep the argmax path
  bit for bit.

The coins stay SGLang's own (`eagle_utils._verify_coins`, `:456-482`): `torch.rand` or, with a request seed,
`murmur_hash32` of (seed, sequence length, column), which reaches `ops.murmur_hash32_cpu` on a CPU. What
this covers and what only a GPU confirms: docs/sglang.md "Sampling".
"""
from __future__ import annotations

from . import ops

MODULE = "sglang.srt.speculative.eagle_utils"
DECIDER = f"{MODULE}._verify_uses_greedy"


def _sample_as_cuda(orig, *args, **kwargs):
    """`_verify_uses_greedy` with the CPU answered as CUDA: greedy iff the batch is all greedy."""
    kwargs["is_cpu"] = False
    return orig(*args, **kwargs)


def bind_stand_ins(module) -> list[str]:
    """Bind the torch versions of the sampling ops where `module` has None; returns the names bound."""
    bound = []
    for name in ops.SAMPLING:
        if getattr(module, name, None) is None:
            setattr(module, name, getattr(ops, name))
            bound.append(name)
    return bound


def install(registry, hook_type) -> None:
    """Bind the stand-ins into SGLang's verify module and register the decider hook (SGLang's HookRegistry and
    HookType, passed in by the plugin)."""
    import importlib
    bind_stand_ins(importlib.import_module(MODULE))
    registry.register(DECIDER, _sample_as_cuda, hook_type.AROUND)
