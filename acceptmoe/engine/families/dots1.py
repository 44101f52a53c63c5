"""dots.llm1 (rednote): DeepSeek-V3's routing (the `sigmoid_grouped` router preset: sigmoid scores, a selection-only
`e_score_correction_bias`, `n_group` / `topk_group`, `routed_scaling_factor`, `norm_topk_prob`), its
`n_shared_experts` shared experts and first `first_k_dense_replace` dense layers, on Qwen3's grouped-query
attention (q/k RMSNorm per head), with sliding windows per `layer_types`."""
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
    silu_experts(raw, "dots.llm1")
    top, attn = common_fields(raw, extra_eos)
    n, window = top["num_layers"], raw.get("sliding_window")
    types = raw.get("layer_types") or ["sliding_attention" if window is not None and i >= raw.get(
        "max_window_layers", n) else "full_attention" for i in range(n)]
    if len(types) != n:
        raise CheckpointError(f"layer_types has {len(types)} entries for {n} layers; give one per layer")
    dense, bias = raw.get("first_k_dense_replace", 0), bool(raw.get("attention_bias", False))
    size = raw["moe_intermediate_size"]
    return ModelConfig(
        **top, dense_intermediate_size=raw["intermediate_size"],
        moe=MoEConfig(expert_count(raw), size, tuple(i >= dense for i in range(n)),
                      routed(raw, "sigmoid_grouped", renormalize=bool(raw.get("norm_topk_prob", False)),
                             groups=raw.get("n_group") or 1, group_top=raw.get("topk_group") or 1,
                             scale=float(raw.get("routed_scaling_factor", 1.0))),
                      "swiglu", shared_intermediate_size=size * (raw.get("n_shared_experts") or 0)),
        attn=AttentionConfig(**attn, windows=tuple(window if t == "sliding_attention" else None for t in types),
                             qkv_bias=bias, o_bias=bias, qk_norm="head"),
    )


FAMILY = Family("dots1", "dots.llm1", parse, PerExpert(),
                names=((".mlp.router.", ".mlp.gate."), (".mlp.selection_bias", ".mlp.gate.e_score_correction_bias"),
                       (".mlp.shared.", ".mlp.shared_experts.")),
                transformers="Dots1ForCausalLM")
