"""Small random checkpoints of every model family, written with transformers' own classes: what gpu-check's
parity check builds at run time (`acceptmoe.tools.gpucheck.parity`) and the tests' fixtures (tests/fixtures.py),
one definition for both. Nothing here is imported by the engine; it imports nothing from the package.

    model = random_checkpoint("mixtral", folder)        # config.json + model.safetensors in folder; fp32, eval

`SMALL` maps a family (config.json's `model_type`, `engine.families`) to its transformers config class, causal-LM
class and settings; a new family adds one entry (docs/models.md, "Adding a family").
"""
from __future__ import annotations

from pathlib import Path

import torch

# small random configs: gpu-check's parity check and the tests' fixtures
QWEN3_SMALL = dict(vocab_size=96, hidden_size=64, intermediate_size=80, moe_intermediate_size=32,
                   num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, eos_token_id=[1, 2])
GPT_OSS_SMALL = dict(vocab_size=96, hidden_size=64, intermediate_size=32, num_hidden_layers=3,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=8,
                     num_experts_per_tok=2, sliding_window=4, eos_token_id=3,
                     layer_types=["sliding_attention", "full_attention", "sliding_attention"])
_BASE = dict(vocab_size=96, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             num_experts_per_tok=2, eos_token_id=2, bos_token_id=0, pad_token_id=0)
# family -> (transformers config class, causal-LM class, settings)
SMALL = {
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", QWEN3_SMALL),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", GPT_OSS_SMALL),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                dict(_BASE, intermediate_size=32, num_local_experts=8, head_dim=16)),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", dict(_BASE, intermediate_size=32, num_experts=8, norm_topk_prob=False)),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                  dict(_BASE, intermediate_size=80, moe_intermediate_size=32, shared_expert_intermediate_size=48,
                       num_experts=8, norm_topk_prob=True, mlp_only_layers=[1])),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                    dict(_BASE, intermediate_size=80, moe_intermediate_size=32, n_routed_experts=8, n_group=4,
                         topk_group=2, first_k_dense_replace=1, n_shared_experts=1, q_lora_rank=24, kv_lora_rank=16,
                         qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, routed_scaling_factor=2.5,
                         num_key_value_heads=4, max_position_embeddings=256,
                         rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                              original_max_position_embeddings=64, mscale=0.8, mscale_all_dim=1.0))),
    "dots1": ("Dots1Config", "Dots1ForCausalLM",
              dict(_BASE, intermediate_size=80, moe_intermediate_size=32, n_routed_experts=8, n_group=4, topk_group=2,
                   first_k_dense_replace=1, n_shared_experts=1, norm_topk_prob=True, routed_scaling_factor=2.5,
                   head_dim=16, sliding_window=4, layer_types=["full_attention", "sliding_attention",
                                                               "full_attention"])),
}


def random_checkpoint(kind: str, folder: Path, seed: int = 0, **overrides):
    """A small random checkpoint of family `kind` (config.json's model_type) saved to folder, with router weights
    spread (no near-ties), DeepSeek-V3's selection bias large enough to change choices and, for GPT-OSS, expert
    weights and sinks large enough to matter; returns the transformers model (eval, fp32)."""
    import transformers
    config, model_class, settings = SMALL[kind]
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(getattr(transformers, config)(**{**settings, **overrides})).eval()
    spread(model, kind)
    model.save_pretrained(folder)
    return model


def spread(model, kind: str) -> None:
    """Router weights larger than the default init, so top-k choices are well separated (no near-ties), a
    random selection bias where the router has one; for GPT-OSS also expert weights, biases and sinks large
    enough that the SwiGLU clamps and the sinks matter."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("mlp.gate.weight", "mlp.router.weight")) and p.shape[0] > 1:
                p.normal_(0.0, 0.5)                      # routers (a shared expert's [1, H] gate excepted)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.normal_(0.0, 0.3)
        for layer in model.model.layers if kind == "gpt_oss" else ():
            layer.mlp.experts.gate_up_proj.normal_(0.0, 1.0)
            layer.mlp.experts.gate_up_proj_bias.normal_(0.0, 1.0)
            layer.mlp.experts.down_proj_bias.normal_(0.0, 0.1)
            layer.self_attn.sinks.normal_(0.0, 2.0)
