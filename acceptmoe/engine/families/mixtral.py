"""Mixtral: softmax then top-k, always renormalised; SwiGLU experts saved as `block_sparse_moe.experts.{j}.w1`
(gate), `w3` (up), `w2` (down); the router is `block_sparse_moe.gate`; no attention biases or norms; an
optional sliding window on every layer."""
from __future__ import annotations

from ..config import AttentionConfig, ModelConfig, MoEConfig, common_fields, expert_count, routed, silu_experts
from ..loading import PerExpert
from . import Family


def parse(raw: dict, extra_eos: tuple[int, ...]) -> ModelConfig:
    silu_experts(raw, "Mixtral")
    top, attn = common_fields(raw, extra_eos)
    n = top["num_layers"]
    return ModelConfig(
        **top, dense_intermediate_size=0, attn=AttentionConfig(**attn, windows=(raw.get("sliding_window"),) * n),
        moe=MoEConfig(expert_count(raw), raw["intermediate_size"], (True,) * n,
                      routed(raw, "softmax_topk", renormalize=True), "swiglu"),
    )


FAMILY = Family("mixtral", "Mixtral", parse, PerExpert("block_sparse_moe.experts", "w1", "w3", "w2"),
                names=((".mlp.router.", ".block_sparse_moe.gate."),), transformers="MixtralForCausalLM")
