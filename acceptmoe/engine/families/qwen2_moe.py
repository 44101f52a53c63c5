"""Qwen2-MoE: softmax then top-k (renormalised if `norm_topk_prob`), SwiGLU experts, a shared SwiGLU expert
of `shared_expert_intermediate_size` scaled by sigmoid(`shared_expert_gate`), q/k/v biases (no output bias),
dense layers by `mlp_only_layers` / `decoder_sparse_step`, a sliding window on the `layer_types` layers marked
`sliding_attention` (without `layer_types`: transformers 5's rule, every other layer below `max_window_layers`
under `use_sliding_window`)."""
from __future__ import annotations

from ..config import AttentionConfig, CheckpointError, ModelConfig, MoEConfig, qwen_moe_fields
from ..loading import PerExpert
from . import Family


def parse(raw: dict, extra_eos: tuple[int, ...]) -> ModelConfig:
    top, attn, moe = qwen_moe_fields(raw, extra_eos, "Qwen2-MoE")
    n, window = top["num_layers"], raw.get("sliding_window") if raw.get("use_sliding_window") else None
    types = raw.get("layer_types") or ["sliding_attention" if (i + 1) % 2 and i < raw.get("max_window_layers", 28)
                                       and window else "full_attention" for i in range(n)]
    if len(types) != n:
        raise CheckpointError(f"layer_types has {len(types)} entries for {n} layers; give one per layer")
    windows = tuple(window if t == "sliding_attention" else None for t in types)
    return ModelConfig(**top,
                       attn=AttentionConfig(**{**attn, "windows": windows}, qkv_bias=bool(raw.get("qkv_bias", True))),
                       moe=MoEConfig(**moe, shared_gate=True,
                                     shared_intermediate_size=raw.get("shared_expert_intermediate_size", 0)))


FAMILY = Family("qwen2_moe", "Qwen2-MoE", parse, PerExpert(),
                names=((".mlp.router.", ".mlp.gate."), (".mlp.shared_gate.", ".mlp.shared_expert_gate."),
                       (".mlp.shared.", ".mlp.shared_expert.")),
                transformers="Qwen2MoeForCausalLM")
