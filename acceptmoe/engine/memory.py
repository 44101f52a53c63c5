"""Device bytes a target's weights take in the native engine, from its config alone (no checkpoint read).

    b = weight_bytes(cfg, mxfp4=True, store="offloaded", slots=48)   # {"experts": ..., "other": ..., "total": ...}

Experts are counted in the form the store keeps on CUDA (`ExpertMath.kept`): MXFP4 checkpoints stay packed
(16 bytes of E2M1 codes and 1 scale byte per 32 values, biases in the compute dtype), dense ones in the compute
dtype. A resident store holds all E experts of every MoE layer; an offloaded one X slots plus the zero slot per
layer. `other` is every non-expert weight (embeddings, the LM head unless tied, attention with its biases, norms
and sinks, routers, dense MLPs of non-MoE layers) in the compute dtype. KV cache and activations come on top.
"""
from __future__ import annotations

import torch

from .config import ModelConfig
from .mxfp4 import BLOCK


def expert_bytes(cfg: ModelConfig, mxfp4: bool, dtype: torch.dtype = torch.bfloat16) -> int:
    """One expert (w1 [2I, H], w2 [H, I], GPT-OSS's biases) as the store keeps it on CUDA."""
    H, I, size = cfg.hidden_size, cfg.moe_intermediate_size, torch.empty((), dtype=dtype).element_size()
    bias = size * (2 * I + H) if cfg.arch == "gpt_oss" else 0
    if mxfp4:
        return 2 * I * (H // BLOCK) * (BLOCK // 2 + 1) + H * (I // BLOCK) * (BLOCK // 2 + 1) + bias
    return size * 3 * H * I + bias


def other_params(cfg: ModelConfig) -> int:
    """Parameters outside the experts."""
    H, V, L = cfg.hidden_size, cfg.vocab_size, cfg.num_layers
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    attention = H * q + 2 * H * kv + q * H
    if cfg.attention_bias:
        attention += q + 2 * kv + H
    if cfg.qk_norm:
        attention += 2 * cfg.head_dim
    if cfg.attention_sinks:
        attention += cfg.num_heads
    router = H * cfg.num_experts + (cfg.num_experts if cfg.router_bias else 0)
    moe = len(cfg.moe_layer_ids)
    dense_mlp = (L - moe) * 3 * H * cfg.dense_intermediate_size
    return V * H * (1 if cfg.tie_word_embeddings else 2) + L * (attention + 2 * H) + moe * router + dense_mlp + H


def weight_bytes(cfg: ModelConfig, mxfp4: bool, store: str = "resident", slots: int | None = None,
                 dtype: torch.dtype = torch.bfloat16) -> dict[str, int]:
    """Device bytes of the target's weights: experts (all, or the X + 1 slots per MoE layer), the rest, total."""
    per_layer = cfg.num_experts if store == "resident" else slots + 1
    experts = len(cfg.moe_layer_ids) * per_layer * expert_bytes(cfg, mxfp4, dtype)
    other = other_params(cfg) * torch.empty((), dtype=dtype).element_size()
    return {"experts": experts, "other": other, "total": experts + other}
