"""Qwen2-MoE: softmax then top-k (renormalised if `norm_topk_prob`), SwiGLU experts, a shared SwiGLU expert
of `shared_expert_intermediate_size` scaled by sigmoid(`shared_expert_gate`), q/k/v biases (no output bias),
dense layers by `mlp_only_layers` / `decoder_sparse_step`."""
from __future__ import annotations

from acceptmoe.methods import RouterKind

from ..config import ModelConfig, common_fields, moe_layers, silu_experts
from ..loading import PerExpert
from . import Family


def parse(raw: dict, extra_eos: tuple[int, ...]) -> ModelConfig:
    silu_experts(raw, "Qwen2-MoE")
    common = common_fields(raw, extra_eos)
    n = common["num_layers"]
    window = raw.get("sliding_window") if raw.get("use_sliding_window") else None
    return ModelConfig(
        **common, moe_intermediate_size=raw["moe_intermediate_size"],
        dense_intermediate_size=raw.get("intermediate_size", 0),
        moe_layers=moe_layers(raw, n, common["num_experts"]), windows=(window,) * n,
        router_kind=RouterKind.SOFTMAX_TOPK, norm_topk_prob=bool(raw.get("norm_topk_prob", False)),
        expert_activation="swiglu", attention_bias=bool(raw.get("qkv_bias", True)),
        shared_intermediate_size=raw.get("shared_expert_intermediate_size", 0), shared_gate=True,
    )


FAMILY = Family("qwen2_moe", "Qwen2-MoE", parse, PerExpert(),
                names=((".mlp.router.", ".mlp.gate."), (".mlp.shared_gate.", ".mlp.shared_expert_gate."),
                       (".mlp.shared.", ".mlp.shared_expert.")),
                transformers="Qwen2MoeForCausalLM")
