"""Qwen2-MoE: softmax then top-k (renormalised if `norm_topk_prob`), SwiGLU experts, a shared SwiGLU expert
of `shared_expert_intermediate_size` scaled by sigmoid(`shared_expert_gate`), q/k/v biases (no output bias),
dense layers by `mlp_only_layers` / `decoder_sparse_step`."""
from __future__ import annotations

from ..config import ModelConfig, qwen_moe_fields
from ..loading import PerExpert
from . import Family


def parse(raw: dict, extra_eos: tuple[int, ...]) -> ModelConfig:
    return ModelConfig(**qwen_moe_fields(raw, extra_eos, "Qwen2-MoE"),
                       attention_bias=bool(raw.get("qkv_bias", True)), shared_gate=True,
                       shared_intermediate_size=raw.get("shared_expert_intermediate_size", 0))


FAMILY = Family("qwen2_moe", "Qwen2-MoE", parse, PerExpert(),
                names=((".mlp.router.", ".mlp.gate."), (".mlp.shared_gate.", ".mlp.shared_expert_gate."),
                       (".mlp.shared.", ".mlp.shared_expert.")),
                transformers="Qwen2MoeForCausalLM")
