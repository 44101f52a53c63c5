"""The layers the target and the EAGLE-3 draft share, for batch-1 decoding over a static KV cache: `Linear`,
`RMSNorm`, RoPE (`Rope`, `apply_rope`), masks, GQA `Attention` and the SwiGLU `DenseMLP`.

Config-driven: q/k RMSNorm per head (Qwen3) or over the whole projection (OLMoE), qkv/o biases and per-head attention sinks (GPT-OSS), a per-layer
sliding window on RoPE positions (GPT-OSS `sliding_attention` layers), the input width (the draft attends
over 2H: embedding and hidden state side by side). Without sinks, attention is
`scaled_dot_product_attention` with the given mask (additive or bool) and scale head_dim^-0.5; with sinks,
a manual softmax with one extra logit column per head (the sink) that takes probability mass and is then
dropped. Numerics follow transformers' and SGLang's reference implementations: RMSNorm in fp32 with the
weight applied in fp32 and one cast back, RoPE frequencies in fp32 (`config.RopeConfig`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import ModelConfig, RopeConfig
from .kv import KVCache, Start, visible_slots


class Linear(nn.Linear):
    """nn.Linear whose 2-D calls multiply by a transposed view of the weight made once (`freeze`, after the
    weights are loaded): one mm (addmm with a bias) per call, the same kernel on the same operands as
    `F.linear`, without its per-call transpose. Other inputs, or a weight replaced since, take `F.linear`."""
    weight_t: Tensor | None = None                                       # [in, out] view of weight

    def freeze(self) -> None:
        self.weight_t = self.weight.t()

    def forward(self, x: Tensor) -> Tensor:
        wt = self.weight_t
        if wt is None or x.dim() != 2 or wt.data_ptr() != self.weight.data_ptr():
            return super().forward(x)
        return torch.mm(x, wt) if self.bias is None else torch.addmm(self.bias, x, wt)


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in fp32 and cast back to the input dtype."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * h).to(x.dtype)


class Rope(nn.Module):
    """cos/sin tables for given positions (`RopeConfig`: default, linear, llama3 or YaRN frequencies),
    applied to halves of the head.

    Returned full width and broadcastable over heads: cos [T, 1, D] = (c, c) and sin [T, 1, D] = (-s, s),
    so that `apply_rope` is x * cos + roll(x, D/2) * sin. When every position is known to lie below
    `max_positions` (`bound`, the cache length), they are looked up in tables built once; otherwise
    computed. The buffers are fp32 and kept out of the module's dtype casts."""
    inv_freq: Tensor                      # the buffers `__init__` registers
    sin_scale: Tensor

    def __init__(self, rope: RopeConfig, head_dim: int, max_positions: int):
        super().__init__()
        inv_freq, self.scale = rope.inv_freq(head_dim)
        self.register_buffer("inv_freq", torch.cat((inv_freq, inv_freq)), persistent=False)   # [D] fp32
        half = inv_freq.numel()
        sign = torch.cat((-torch.ones(half), torch.ones(half)))
        self.register_buffer("sin_scale", sign * self.scale, persistent=False)             # [D]
        self.table_len = max_positions
        self.tables: dict[torch.dtype, tuple[Tensor, Tensor]] = {}

    def _apply(self, fn, recurse=True):
        """Moves to a device keep the fp32 buffers fp32 (a `.to(bfloat16)` of the module casts only weights)."""
        out = super()._apply(fn, recurse)
        self.inv_freq, self.sin_scale = self.inv_freq.float(), self.sin_scale.float()
        self.tables = {}
        return out

    def compute(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        freqs = positions.float()[:, None, None] * self.inv_freq                           # [T, 1, D]
        return (freqs.cos() * self.scale).to(dtype), (freqs.sin() * self.sin_scale).to(dtype)

    def forward(self, positions: Tensor, dtype: torch.dtype, bound: int | None = None) -> tuple[Tensor, Tensor]:
        """positions [T] (all < bound when given) -> cos, sin [T, 1, D] in dtype."""
        if bound is None or bound > self.table_len:
            return self.compute(positions, dtype)
        if dtype not in self.tables:
            self.tables[dtype] = self.compute(torch.arange(self.table_len, device=self.inv_freq.device), dtype)
        cos, sin = self.tables[dtype]                                                      # [P, 1, D] each
        return cos[positions], sin[positions]


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [T, heads, D], cos/sin [T, 1, D] from `Rope` -> rotated x (non-interleaved halves, as Qwen3 and
    GPT-OSS): (x1 c - x2 s, x2 c + x1 s)."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * sin


def block_masks(cfg: ModelConfig, cache: KVCache, start: Start, positions: Tensor,
                mask: Tensor | None, dtype: torch.dtype) -> dict[int | None, Tensor | None]:
    """Additive masks [T, S'] in `dtype` (0 = may attend, -inf = may not) per distinct window of the
    model, built once per forward; None where every key is visible (one new token, no window, int start).

    Committed slots [0, start) are visible to every new token; among the T new tokens `mask` (None =
    causal). A window w keeps keys with q_pos - k_pos < w (RoPE positions, not slots). S' = start + T for
    an int start; for a tensor start (static shapes, see `kv`) S' = the given cache's max_len (the bucket a
    static pass is given, `KVCache.upto`) and slots past the block are masked, so the masks' shapes do not
    depend on where the block sits."""
    T, dev = positions.shape[0], positions.device
    windows = {w for w in cfg.attn.windows if w is not None}
    if mask is not None and (mask.shape != (T, T) or mask.dtype != torch.bool):
        raise ValueError(f"mask must be bool [T, T] = [{T}, {T}], got {mask.dtype} {tuple(mask.shape)}")
    if isinstance(start, Tensor):
        block = mask if mask is not None else torch.ones(T, T, dtype=torch.bool, device=dev).tril()
        base = visible_slots(cache.slots, start, block.to(dev))                             # [T, S]
    elif mask is None:
        if T == 1 and not windows:
            return {None: None}
        base = torch.ones(T, start + T, dtype=torch.bool, device=dev).tril(start)          # [T, S']
    else:
        base = torch.cat((torch.ones(T, start, dtype=torch.bool, device=dev), mask.to(dev)), dim=1)  # [T, S']
    out: dict[int | None, Tensor] = {None: base}
    key_pos = cache.pos[:base.shape[1]]                                  # [S']
    for w in windows:
        out[w] = base & ((positions[:, None] - key_pos[None, :]) < w)
    zero = torch.zeros((), dtype=dtype, device=dev)
    return {w: zero.masked_fill(~m, float("-inf")) for w, m in out.items()}


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float, sinks: Tensor | None) -> Tensor:
    """q [1, Hq, T, D], k/v [1, Hkv, S, D], mask [T, S] additive | None, sinks [Hq] | None -> [1, Hq, T, D]."""
    if sinks is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    _, Hq, T, D = q.shape
    Hkv, G = k.shape[1], Hq // k.shape[1]
    scores = q.reshape(Hkv, G * T, D) @ k[0].transpose(1, 2) * scale     # [Hkv, G*T, S]
    scores = scores.view(Hq, T, -1)                                      # [Hq, T, S]
    if mask is not None:
        scores = scores + mask
    sink = sinks.to(scores.dtype)[:, None, None].expand(Hq, T, 1)        # [Hq, T, 1]
    probs = torch.softmax(torch.cat((scores, sink), dim=-1).float(), dim=-1)[..., :-1]  # [Hq, T, S]
    out = probs.to(v.dtype).reshape(Hkv, G * T, -1) @ v[0]               # [Hkv, G*T, D]
    return out.view(1, Hq, T, D)


class Attention(nn.Module):
    """GQA attention of one layer: `in_features` -> Hq query heads and Hkv key/value heads of width D, an
    output projection to `hidden`. Loads as q/k/v projections and q/k norms (the checkpoints' names);
    `fuse()` (the target, after loading) joins them into one qkv projection and per-head norms into one norm
    over the q and k heads (projection-wide norms stay two). The draft keeps the three projections (its
    training reads them). `qk_norm`: "" none, "head" per head, "projection" over all of q and of k."""

    def __init__(self, in_features: int, hidden: int, heads: int, kv_heads: int, head_dim: int, *,
                 bias: bool = False, o_bias: bool | None = None, qk_norm: str = "", eps: float = 1e-6,
                 sinks: bool = False, window: int | None = None, layer: int = 0):
        super().__init__()
        self.layer, self.window = layer, window
        self.nq, self.nkv, self.D, self.scale = heads, kv_heads, head_dim, head_dim ** -0.5
        self.q_proj = Linear(in_features, heads * head_dim, bias=bias)
        self.k_proj = Linear(in_features, kv_heads * head_dim, bias=bias)
        self.v_proj = Linear(in_features, kv_heads * head_dim, bias=bias)
        self.o_proj = Linear(heads * head_dim, hidden, bias=bias if o_bias is None else o_bias)
        self.norm_mode = qk_norm
        widths = {"head": (head_dim, head_dim), "projection": (heads * head_dim, kv_heads * head_dim)}.get(qk_norm)
        self.q_norm = RMSNorm(widths[0], eps) if widths else None
        self.k_norm = RMSNorm(widths[1], eps) if widths else None
        self.sinks = nn.Parameter(torch.zeros(heads), requires_grad=False) if sinks else None
        self.qkv: Linear | None = None
        self.qk_norm: RMSNorm | None = None

    @classmethod
    def of(cls, cfg: ModelConfig, layer: int) -> Attention:
        """Layer `layer` of a target."""
        a = cfg.attn
        return cls(cfg.hidden_size, cfg.hidden_size, a.num_heads, a.num_kv_heads, a.head_dim, bias=a.qkv_bias,
                   o_bias=a.o_bias, qk_norm=a.qk_norm, eps=cfg.rms_norm_eps, sinks=a.sinks, window=a.windows[layer],
                   layer=layer)

    @torch.no_grad()
    def fuse(self) -> None:
        """Replace q/k/v_proj by one projection [(Hq + 2 Hkv) D, in] and q/k_norm by one norm whose weight
        is per head [Hq + Hkv, D] (the same numbers, fewer operations)."""
        projs = (self.q_proj, self.k_proj, self.v_proj)
        w = torch.cat([p.weight for p in projs])
        self.qkv = Linear(w.shape[1], w.shape[0], bias=self.q_proj.bias is not None, device=w.device,
                          dtype=w.dtype).requires_grad_(False)
        self.qkv.weight.copy_(w)
        if self.qkv.bias is not None:
            self.qkv.bias.copy_(torch.cat([p.bias for p in projs]))
        if self.norm_mode == "head":
            assert self.q_norm is not None and self.k_norm is not None         # per-head norms: both built
            self.qk_norm = RMSNorm(self.D, self.q_norm.eps)
            self.qk_norm.weight = nn.Parameter(torch.cat((self.q_norm.weight.expand(self.nq, self.D),
                                                          self.k_norm.weight.expand(self.nkv, self.D))),
                                               requires_grad=False)       # [Hq + Hkv, D]
        del self.q_proj, self.k_proj, self.v_proj
        if self.norm_mode == "head":
            del self.q_norm, self.k_norm
            self.q_norm = self.k_norm = None

    def _qkv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x [T, in] -> q and k heads [T, Hq + Hkv, D] (normed), v heads [T, Hkv, D]."""
        T, nqk = x.shape[0], self.nq + self.nkv
        if self.qkv is not None:
            qkv = self.qkv(x)                                                # [T, (Hq + 2 Hkv) D]
            if self.q_norm is not None:                                      # projection-wide norms
                q, k, v = qkv.split((self.nq * self.D, self.nkv * self.D, self.nkv * self.D), -1)
                qkv = torch.cat((self.q_norm(q), self.k_norm(k), v), -1)  # type: ignore[misc]  # with q_norm
            qkv = qkv.view(T, nqk + self.nkv, self.D)                        # [T, Hq + 2 Hkv, D]
            qk, v = qkv[:, :nqk], qkv[:, nqk:]
            return (self.qk_norm(qk) if self.qk_norm is not None else qk), v
        if self.q_norm is not None:
            raise RuntimeError("q/k norms run fused: call fuse() after loading the weights")
        q, k = self.q_proj(x).view(T, self.nq, self.D), self.k_proj(x).view(T, self.nkv, self.D)
        return torch.cat((q, k), 1), self.v_proj(x).view(T, self.nkv, self.D)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache, start: Start, mask: Tensor | None) -> Tensor:
        """x [T, in] -> [T, hidden]; writes this layer's new K/V to cache slots start..start+T-1 (cache: a
        `KVCache`, or the draft's cache with the same `write`); mask [T, S'] additive or bool, or None."""
        T = x.shape[0]
        qk, v = self._qkv(x)
        qk = apply_rope(qk, cos, sin).transpose(0, 1)                    # [Hq + Hkv, T, D]
        keys, values = cache.write(self.layer, start, qk[self.nq:], v.transpose(0, 1))  # [1, Hkv, S', D]
        o = attend(qk[None, :self.nq], keys, values, mask, self.scale, self.sinks)      # [1, Hq, T, D]
        return self.o_proj(o.transpose(1, 2).reshape(T, self.nq * self.D))


class DenseMLP(nn.Module):
    """SwiGLU MLP: Qwen3's non-MoE layers (`mlp_only_layers`, `decoder_sparse_step`) and the draft's layer."""

    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = Linear(hidden, inter, bias=False)
        self.up_proj = Linear(hidden, inter, bias=False)
        self.down_proj = Linear(inter, hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
