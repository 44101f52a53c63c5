"""OLMoE: softmax then top-k, renormalised only if `norm_topk_prob` (False in the released model), SwiGLU
experts, q/k RMSNorm over the whole q and k projections (not per head), no attention biases."""
from __future__ import annotations

from ..config import CheckpointError, ModelConfig, common_fields, routed, silu_experts
from ..loading import PerExpert
from . import Family


def parse(raw: dict, extra_eos: tuple[int, ...]) -> ModelConfig:
    silu_experts(raw, "OLMoE")
    if raw.get("clip_qkv") is not None:
        raise CheckpointError(f"clip_qkv={raw['clip_qkv']} is not supported by the native engine's OLMoE; "
                              "use a checkpoint without it")
    common = common_fields(raw, extra_eos)
    n = common["num_layers"]
    bias = bool(raw.get("attention_bias", False))
    return ModelConfig(
        **common, moe_intermediate_size=raw["intermediate_size"], dense_intermediate_size=0,
        moe_layers=(True,) * n, windows=(None,) * n,
        router=routed(raw, "softmax_topk", renormalize=bool(raw.get("norm_topk_prob", False))),
        expert_activation="swiglu",
        attention_bias=bias, o_bias=bias, qk_norm="projection",
    )


FAMILY = Family("olmoe", "OLMoE", parse, PerExpert(), names=((".mlp.router.", ".mlp.gate."),),
                transformers="OlmoeForCausalLM")
