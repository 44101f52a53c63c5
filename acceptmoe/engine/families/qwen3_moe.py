"""Qwen3-MoE: softmax then top-k (renormalised if `norm_topk_prob`), SwiGLU experts, per-head q/k RMSNorm,
dense layers by `mlp_only_layers` / `decoder_sparse_step`, any RoPE of `config.ROPE_KINDS`."""
from __future__ import annotations

from ..config import AttentionConfig, ModelConfig, MoEConfig, qwen_moe_fields
from ..loading import PerExpert
from . import Family


def parse(raw: dict, extra_eos: tuple[int, ...]) -> ModelConfig:
    top, attn, moe = qwen_moe_fields(raw, extra_eos, "Qwen3-MoE")
    bias = bool(raw.get("attention_bias", False))
    return ModelConfig(**top, attn=AttentionConfig(**attn, qkv_bias=bias, o_bias=bias, qk_norm="head"),
                       moe=MoEConfig(**moe))


FAMILY = Family("qwen3_moe", "Qwen3-MoE", parse, PerExpert(), names=((".mlp.router.", ".mlp.gate."),),
                transformers="Qwen3MoeForCausalLM")
