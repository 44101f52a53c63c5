"""Tiny random Hugging Face checkpoints of every model family, written with transformers' own classes.

Used by the tests (parity against transformers) and by anyone who needs a small target to exercise the
engine without a trained model. `write_mxfp4_experts` turns a GPT-OSS folder into the packed MXFP4 layout
of the released checkpoints and returns the dequantised weights a reference model must use.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from acceptmoe.engine import mxfp4

from acceptmoe.experiments.gpucheck.parity import GPT_OSS_SMALL as GPT_OSS_TINY    # one definition, shared
from acceptmoe.experiments.gpucheck.parity import QWEN3_SMALL as QWEN3_TINY        # with gpu-check's parity
from acceptmoe.experiments.gpucheck.parity import spread                           # check


def tiny_qwen3_moe(folder: str | Path, seed: int = 0, **overrides):
    """Random Qwen3MoeForCausalLM saved to `folder`; returns the transformers model (eval, fp32)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**{**QWEN3_TINY, **overrides})).eval()
    spread(model, "qwen3_moe")
    model.save_pretrained(folder)
    return model


def tiny_gpt_oss(folder: str | Path, seed: int = 0, **overrides):
    """Random GptOssForCausalLM saved to `folder`, with expert weights and sinks large enough that the
    SwiGLU clamps and the sinks matter; returns the transformers model (eval, fp32)."""
    from transformers import GptOssConfig, GptOssForCausalLM
    torch.manual_seed(seed)
    model = GptOssForCausalLM(GptOssConfig(**{**GPT_OSS_TINY, **overrides})).eval()
    spread(model, "gpt_oss")
    model.save_pretrained(folder)
    return model


def write_mxfp4_experts(folder: str | Path) -> dict[str, torch.Tensor]:
    """Rewrite a (single-file) GPT-OSS checkpoint's expert matrices as MXFP4 `*_blocks`/`*_scales`.

    Returns {original key: dequantised tensor in transformers' in-memory layout [E, in, out]} to load into
    the reference model."""
    folder = Path(folder)
    state = load_file(folder / "model.safetensors")
    reference = {}
    for key in [k for k in state if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        w = state.pop(key).transpose(1, 2).contiguous()                  # [E, out, in]
        blocks, scales = mxfp4.quantize(w)                               # [E, out, in/32, 16], [E, out, in/32]
        state[f"{key}_blocks"], state[f"{key}_scales"] = blocks, scales
        reference[key] = mxfp4.dequantize(blocks, scales, torch.float32).transpose(1, 2).contiguous()
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((folder / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return reference


_SMALL = dict(vocab_size=96, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
              num_experts_per_tok=2, eos_token_id=2, bos_token_id=0, pad_token_id=0)
# the other families' small configs: (transformers config class, model class, settings beside _SMALL)
OTHER_TINY = {
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(intermediate_size=32, num_local_experts=8, head_dim=16)),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", dict(intermediate_size=32, num_experts=8, norm_topk_prob=False)),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                  dict(intermediate_size=80, moe_intermediate_size=32, shared_expert_intermediate_size=48,
                       num_experts=8, norm_topk_prob=True, mlp_only_layers=[1])),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                    dict(intermediate_size=80, moe_intermediate_size=32, n_routed_experts=8, n_group=4, topk_group=2,
                         first_k_dense_replace=1, n_shared_experts=1, q_lora_rank=24, kv_lora_rank=16,
                         qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, routed_scaling_factor=2.5,
                         num_key_value_heads=4, max_position_embeddings=256,
                         rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                              original_max_position_embeddings=64, mscale=0.8, mscale_all_dim=1.0))),
}


def tiny_family(family: str, folder: str | Path, seed: int = 0, **overrides):
    """A random small checkpoint of `family` (config.json's model_type) saved to `folder`, with router weights
    spread (no near-ties) and, for DeepSeek-V3, a selection bias large enough to change choices; returns the
    transformers model (eval, fp32)."""
    if family == "qwen3_moe":
        return tiny_qwen3_moe(folder, seed, **overrides)
    if family == "gpt_oss":
        return tiny_gpt_oss(folder, seed, **overrides)
    import transformers
    config, model_class, settings = OTHER_TINY[family]
    torch.manual_seed(seed)
    cfg = getattr(transformers, config)(**{**_SMALL, **settings, **overrides})
    model = getattr(transformers, model_class)(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("gate.weight", "router.weight")) and p.shape[0] > 1:
                p.normal_(0.0, 0.5)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.normal_(0.0, 0.3)
    model.save_pretrained(folder)
    return model


FAMILIES = ("qwen3_moe", "gpt_oss", "mixtral", "olmoe", "qwen2_moe", "deepseek_v3")
