"""OLMoE: softmax then top-k, renormalised only if `norm_topk_prob` (False in the released model), SwiGLU
experts, q/k RMSNorm over the whole q and k projections (not per head), no attention biases."""
from __future__ import annotations

from ..config import (
    AttentionConfig,
    CheckpointError,
    ModelConfig,
    MoEConfig,
    common_fields,
    expert_count,
    routed,
    silu_experts,
)
from ..loading import PerExpert
from . import Family


def parse(raw: dict, extra_eos: tuple[int, ...]) -> ModelConfig:
    silu_experts(raw, "OLMoE")
    if raw.get("clip_qkv") is not None:
        raise CheckpointError(f"clip_qkv={raw['clip_qkv']} is not supported by the native engine's OLMoE; "
                              "use a checkpoint without it")
    top, attn = common_fields(raw, extra_eos)
    n = top["num_layers"]
    bias = bool(raw.get("attention_bias", False))
    moe = MoEConfig(expert_count(raw), raw["intermediate_size"], (True,) * n,
                    routed(raw, "softmax_topk", renormalize=bool(raw.get("norm_topk_prob", False))), "swiglu")
    return ModelConfig(
        **top, dense_intermediate_size=0, moe=moe,
        attn=AttentionConfig(**attn, windows=(None,) * n, qkv_bias=bias, o_bias=bias, qk_norm="projection"),
    )


FAMILY = Family("olmoe", "OLMoE", parse, PerExpert(), names=((".mlp.router.", ".mlp.gate."),),
                transformers="OlmoeForCausalLM")
