"""DeepSeek-V3 (and V3-style models): multi-head latent attention, sigmoid routing with a selection-only
bias (`e_score_correction_bias`), group-limited top-k (`n_group`, `topk_group`), `routed_scaling_factor`
(the `sigmoid_grouped` router preset), `n_shared_experts` shared experts as one SwiGLU MLP, the first
`first_k_dense_replace` layers dense, any RoPE of `config.ROPE_KINDS` (YaRN's `mscale_all_dim` scales the softmax).
Every head has its own key and value (`kv_b_proj`), whatever `num_key_value_heads` says."""
from __future__ import annotations

import math

from ..config import (
    AttentionConfig,
    LatentAttention,
    ModelConfig,
    MoEConfig,
    common_fields,
    expert_count,
    routed,
    silu_experts,
)
from ..loading import PerExpert
from . import Family


def _mscale(factor: float, mscale: float) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def parse(raw: dict, extra_eos: tuple[int, ...]) -> ModelConfig:
    silu_experts(raw, "DeepSeek-V3")
    top, attn = common_fields(raw, extra_eos)
    n, rope = top["num_layers"], attn["rope"]
    nope, rot = raw["qk_nope_head_dim"], raw["qk_rope_head_dim"]
    scale = (nope + rot) ** -0.5
    params = {**(raw.get("rope_scaling") or {}), **(raw.get("rope_parameters") or {})}
    if rope.kind == "yarn":
        all_dim, own = params.get("mscale_all_dim") or 0, params.get("mscale")
        scale *= _mscale(rope.factor, all_dim) ** 2 if all_dim else 1.0
        if rope.attention_factor is None and own and all_dim:
            rope = rope.__class__(**{**rope.__dict__, "attention_factor": _mscale(rope.factor, own)
                                     / _mscale(rope.factor, all_dim)})
    latent = LatentAttention(raw.get("q_lora_rank"), raw["kv_lora_rank"], nope, rot, raw["v_head_dim"],
                             bool(raw.get("rope_interleave", True)), scale)
    dense = raw.get("first_k_dense_replace", 0)
    bias = bool(raw.get("attention_bias", False))
    size = raw["moe_intermediate_size"]
    return ModelConfig(
        **top, dense_intermediate_size=raw["intermediate_size"],
        # MLA expands a key and a value for every head from the latent (kv_b_proj): num_key_value_heads shapes
        # nothing (transformers reads it only as a repeat factor; the released models set it to the heads)
        attn=AttentionConfig(**{**attn, "rope": rope, "head_dim": nope + rot, "num_kv_heads": attn["num_heads"]},
                             windows=(None,) * n, qkv_bias=bias, o_bias=bias, latent=latent),
        moe=MoEConfig(expert_count(raw), size, tuple(i >= dense for i in range(n)),
                      routed(raw, "sigmoid_grouped", renormalize=bool(raw.get("norm_topk_prob", True)),
                             groups=raw.get("n_group") or 1, group_top=raw.get("topk_group") or 1,
                             scale=float(raw.get("routed_scaling_factor", 1.0))),
                      "swiglu", shared_intermediate_size=size * (raw.get("n_shared_experts") or 0)),
    )


FAMILY = Family("deepseek_v3", "DeepSeek-V3", parse, PerExpert(),
                names=((".mlp.router.", ".mlp.gate."), (".mlp.selection_bias", ".mlp.gate.e_score_correction_bias"),
                       (".mlp.shared.", ".mlp.shared_experts.")),
                transformers="DeepseekV3ForCausalLM")
