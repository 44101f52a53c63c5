"""Multi-head latent attention (DeepSeek-V2/V3, `config.LatentAttention`) over the same static `KVCache` as
grouped-query attention, with the same forward signature as `layers.Attention`.

Queries: `q_b_proj(norm(q_a_proj(x)))` (or one `q_proj` without a q rank), each head `nope` dims without RoPE
then `rope` dims with it. Keys and values come from a latent: `kv_a_proj_with_mqa(x)` gives the `kv_lora_rank`
latent and one `rope` part shared by every head; `kv_b_proj(norm(latent))` expands the latent into each head's
key part and value (`v_head_dim`, which may differ from the key's width). The cache keeps the expanded per-head
keys [H, nope + rope] and values [H, v_head_dim] (`AttentionConfig.cache_heads` = every head), not the latent:
simpler and the same numbers, at the cost of cache memory (`memory.kv_bytes` counts it). Interleaved RoPE
(`rope_interleave`, pairs (x0, x1), (x2, x3), ...) is transformers' rotation of the pairs, computed as the
half-split rotation of the even dims followed by the odd ones (`apply_rope` after that reordering, the same
for queries and keys, so their products are transformers').
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .config import ModelConfig
from .kv import Start
from .layers import Linear, RMSNorm, apply_rope, attend


class LatentAttentionLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        a, H, n, bias = cfg.attn.latent, cfg.hidden_size, cfg.attn.num_heads, cfg.attn.qkv_bias
        assert a is not None                            # `Attention.of` builds this layer for an MLA config only
        self.layer, self.window, self.a, self.n = layer, cfg.attn.windows[layer], a, n
        if a.q_lora_rank is None:
            self.q_proj = Linear(H, n * (a.nope + a.rope), bias=False)
        else:
            self.q_a_proj = Linear(H, a.q_lora_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(a.q_lora_rank, cfg.rms_norm_eps)
            self.q_b_proj = Linear(a.q_lora_rank, n * (a.nope + a.rope), bias=False)
        self.kv_a_proj_with_mqa = Linear(H, a.kv_lora_rank + a.rope, bias=bias)
        self.kv_a_layernorm = RMSNorm(a.kv_lora_rank, cfg.rms_norm_eps)
        self.kv_b_proj = Linear(a.kv_lora_rank, n * (a.nope + a.v_head_dim), bias=False)
        self.o_proj = Linear(n * a.v_head_dim, H, bias=bias)

    def fuse(self) -> None:
        """Nothing to fuse (the model calls it on every attention after loading)."""

    def _rope(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """x [T, heads, rope] -> rotated; interleaved pairs as their even dims, then their odd ones."""
        if self.a.interleave:
            x = torch.cat((x[..., 0::2], x[..., 1::2]), -1)
        return apply_rope(x, cos, sin)

    def _queries(self, x: Tensor) -> Tensor:
        if hasattr(self, "q_proj"):
            return self.q_proj(x)
        return self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache, start: Start, mask: Tensor | None) -> Tensor:
        """x [T, H] -> [T, H]; writes this layer's expanded K [n, T, nope + rope] and V [n, T, v] to the cache."""
        a, n, T = self.a, self.n, x.shape[0]
        q = self._queries(x).view(T, n, a.nope + a.rope)
        latent, k_rot = self.kv_a_proj_with_mqa(x).split((a.kv_lora_rank, a.rope), -1)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent)).view(T, n, a.nope + a.v_head_dim)
        k_nope, v = kv.split((a.nope, a.v_head_dim), -1)
        q_rot = self._rope(q[..., a.nope:], cos, sin)                                   # [T, n, rope]
        k_rot = self._rope(k_rot[:, None], cos, sin).expand(T, n, a.rope)               # [T, n, rope]
        q = torch.cat((q[..., :a.nope], q_rot), -1).transpose(0, 1)                     # [n, T, nope + rope]
        k = torch.cat((k_nope, k_rot), -1).transpose(0, 1)
        keys, values = cache.write(self.layer, start, k, v.transpose(0, 1))            # [1, n, S', .]
        o = attend(q[None], keys, values, mask, self.a.scale, None)                     # [1, n, T, v]
        return self.o_proj(o.transpose(1, 2).reshape(T, n * a.v_head_dim))
