"""Attention pieces for batch-1 decoding over the static KV cache: RMSNorm, RoPE, masks, GQA attention.

Config-driven: q/k RMSNorm (Qwen3), qkv/o biases and per-head attention sinks (GPT-OSS), a per-layer
sliding window on RoPE positions (GPT-OSS `sliding_attention` layers). Without sinks, attention is
`scaled_dot_product_attention` with an explicit bool mask; with sinks, a manual softmax with one extra
logit column per head (the sink) that takes probability mass and is then dropped.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import ModelConfig
from .kv import KVCache


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in fp32 and cast back to the input dtype."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim), requires_grad=False)
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * h).to(x.dtype)


class Rope(nn.Module):
    """cos/sin tables [T, D/2] for given positions (default RoPE or YaRN), applied to halves of the head."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        inv_freq, self.scale = cfg.rope.inv_freq(cfg.head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)     # [D/2] fp32

    def forward(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        freqs = positions.float()[:, None] * self.inv_freq[None, :]      # [T, D/2]
        return (freqs.cos() * self.scale).to(dtype), (freqs.sin() * self.scale).to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [T, heads, D], cos/sin [T, D/2] -> rotated x (non-interleaved halves, as Qwen3 and GPT-OSS)."""
    x1, x2 = x.chunk(2, dim=-1)                                          # [T, h, D/2] each
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def block_masks(cfg: ModelConfig, cache: KVCache, start: int, positions: Tensor,
                mask: Tensor | None) -> dict[int | None, Tensor]:
    """Bool masks [T, start+T] (True = may attend) per distinct window of the model.

    Committed slots [0, start) are visible to every new token; among the T new tokens `mask` (None =
    causal). A window w keeps keys with q_pos - k_pos < w (RoPE positions, not slots)."""
    T, dev = positions.shape[0], positions.device
    if mask is None:
        mask = torch.ones(T, T, dtype=torch.bool, device=dev).tril()
    elif mask.shape != (T, T) or mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool [T, T] = [{T}, {T}], got {mask.dtype} {tuple(mask.shape)}")
    base = torch.cat((torch.ones(T, start, dtype=torch.bool, device=dev), mask.to(dev)), dim=1)  # [T, S']
    out: dict[int | None, Tensor] = {None: base}
    key_pos = cache.pos[:start + T]                                      # [S']
    for w in set(cfg.windows) - {None}:
        out[w] = base & ((positions[:, None] - key_pos[None, :]) < w)
    return out


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float, sinks: Tensor | None) -> Tensor:
    """q [Hq, T, D], k/v [Hkv, S, D], mask [T, S] bool, sinks [Hq] | None -> [Hq, T, D]."""
    if sinks is None:
        return F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask, scale=scale,
                                              enable_gqa=True)[0]
    Hq, T, D = q.shape
    Hkv, G = k.shape[0], Hq // k.shape[0]
    scores = q.reshape(Hkv, G * T, D) @ k.transpose(1, 2) * scale        # [Hkv, G*T, S]
    scores = scores.view(Hq, T, -1).masked_fill(~mask, float("-inf"))    # [Hq, T, S]
    sink = sinks.to(scores.dtype)[:, None, None].expand(Hq, T, 1)        # [Hq, T, 1]
    probs = torch.softmax(torch.cat((scores, sink), dim=-1).float(), dim=-1)[..., :-1]  # [Hq, T, S]
    out = probs.to(v.dtype).reshape(Hkv, G * T, -1) @ v                  # [Hkv, G*T, D]
    return out.view(Hq, T, D)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        H, D = cfg.hidden_size, cfg.head_dim
        self.layer, self.window = layer, cfg.windows[layer]
        self.nq, self.nkv, self.D, self.scale = cfg.num_heads, cfg.num_kv_heads, D, D ** -0.5
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(H, self.nq * D, bias=bias)
        self.k_proj = nn.Linear(H, self.nkv * D, bias=bias)
        self.v_proj = nn.Linear(H, self.nkv * D, bias=bias)
        self.o_proj = nn.Linear(self.nq * D, H, bias=bias)
        self.q_norm = RMSNorm(D, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(D, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.sinks = nn.Parameter(torch.zeros(self.nq), requires_grad=False) if cfg.attention_sinks else None

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache, start: int,
                masks: dict[int | None, Tensor]) -> Tensor:
        """x [T, H] -> [T, H]; writes this layer's new K/V to cache slots start..start+T-1."""
        T = x.shape[0]
        q = self.q_proj(x).view(T, self.nq, self.D)                      # [T, Hq, D]
        k = self.k_proj(x).view(T, self.nkv, self.D)                     # [T, Hkv, D]
        v = self.v_proj(x).view(T, self.nkv, self.D)                     # [T, Hkv, D]
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        keys, values = cache.write(self.layer, start, k.transpose(0, 1), v.transpose(0, 1))  # [Hkv, S', D]
        o = attend(q.transpose(0, 1), keys, values, masks[self.window], self.scale, self.sinks)  # [Hq, T, D]
        return self.o_proj(o.transpose(0, 1).reshape(T, self.nq * self.D))
