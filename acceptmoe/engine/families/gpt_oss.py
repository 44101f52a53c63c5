"""GPT-OSS: top-k of the logits (router bias) then softmax over the k, clamped SwiGLU experts with interleaved
gate/up columns and biases (unquantised as save_pretrained writes them, or MXFP4-packed as released), qkv/o
biases, per-head attention sinks, sliding windows per `layer_types`, YaRN RoPE.

Expert layouts: unquantised `mlp.experts.gate_up_proj` [E, H, 2I], `down_proj` [E, I, H] (transposed into the
store's [E, 2I, H] / [E, H, I]), biases `gate_up_proj_bias` [E, 2I], `down_proj_bias` [E, H]; MXFP4
`gate_up_proj_blocks` [E, 2I, H/32, 16], `gate_up_proj_scales` [E, 2I, H/32], `down_proj_blocks`
[E, H, I/32, 16], `down_proj_scales` [E, H, I/32], kept packed."""
from __future__ import annotations

from ..config import AttentionConfig, CheckpointError, ModelConfig, MoEConfig, common_fields, expert_count, routed
from ..loading import write
from . import Family


def parse(raw: dict, extra_eos: tuple[int, ...]) -> ModelConfig:
    top, attn = common_fields(raw, extra_eos)
    n = top["num_layers"]
    types = raw.get("layer_types") or ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
    if len(types) != n:
        raise CheckpointError(f"layer_types has {len(types)} entries for {n} layers; give one per layer")
    window = raw.get("sliding_window")
    windows = tuple(window if t == "sliding_attention" else None for t in types)
    bias = bool(raw.get("attention_bias", True))
    moe = MoEConfig(expert_count(raw), raw["intermediate_size"], (True,) * n, routed(raw, "topk_softmax"),
                    "clamped_swiglu", swiglu_alpha=float(raw.get("swiglu_alpha", 1.702)),
                    swiglu_limit=float(raw.get("swiglu_limit", 7.0)), router_bias=True, expert_bias=True)
    return ModelConfig(**top, dense_intermediate_size=0, moe=moe,
                       attn=AttentionConfig(**attn, windows=windows, qkv_bias=bias, o_bias=bias, sinks=True))


def experts(ckpt, cfg: ModelConfig, layer: int, out: dict) -> None:
    p = f"model.layers.{layer}.mlp.experts"
    write(out["b1"], ckpt, f"{p}.gate_up_proj_bias")
    write(out["b2"], ckpt, f"{p}.down_proj_bias")
    if "w1_blocks" in out:
        for ours, theirs in (("w1", "gate_up_proj"), ("w2", "down_proj")):
            write(out[f"{ours}_blocks"], ckpt, f"{p}.{theirs}_blocks")
            write(out[f"{ours}_scales"], ckpt, f"{p}.{theirs}_scales")
        return
    write(out["w1"], ckpt, f"{p}.gate_up_proj", transposed=True)       # [E, H, 2I] on disk -> [E, 2I, H]
    write(out["w2"], ckpt, f"{p}.down_proj", transposed=True)          # [E, I, H] on disk -> [E, H, I]


FAMILY = Family("gpt_oss", "GPT-OSS", parse, experts, packed="mlp.experts.gate_up_proj_blocks",
                transformers="GptOssForCausalLM")
