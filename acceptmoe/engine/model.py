"""MoEModel: one MoE transformer for every model family (config-driven pieces, `families/`), static KV caches;
one sequence per pass (`forward`), or several whose MoE layers run as one batch (`forward_batch`).

    model = MoEModel.from_pretrained(path, device="cpu", dtype=None, store="resident", slots=None)
    cache = model.new_cache(max_len)
    logits, aux = model.forward(ids, positions, cache, start, mask=None, policy=None, aux_layers=(), routes=None)
    cache.keep(start, idx)

A decoder layer is x += attn(norm(x)); x += mlp(norm(x)). Attention is grouped-query (`layers.Attention`) or
latent (`mla`). At a MoE layer the router gives logits [T, E] (fp32); `policy(layer, logits) -> (ids [T, k],
weights [T, k])` routes them (None = the model's natural routing, `acceptmoe.kernels.natural`), under the
layer's selection bias where the router has one (`selection_bias(layer)`: the policy passes it on as
`bias=`), and the ExpertStore computes the routed experts (through `routes`, a `routes.PassRoutes`, when the
pass records them); shared experts (a SwiGLU MLP, optionally sigmoid-gated) are added to them. Layers are
indexed by their decoder-layer index everywhere (policy, store, aux_layers).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ..kernels import natural
from ..methods import Router
from .config import DTYPES, ModelConfig
from .kv import KVCache, Start
from .layers import Attention, DenseMLP, Linear, RMSNorm, Rope, block_masks
from .loading import Checkpoint, expert_weights, module_state, packed_experts
from .memory import stored_form
from .mla import LatentAttentionLayer
from .routes import PassRoutes
from .store import ExpertMath, ExpertStore, open_store, validate_store_args

Policy = Callable[[int, Tensor], tuple[Tensor, Tensor]]


class Segment(NamedTuple):
    """One sequence's new tokens in a pass: ids [T], positions [T], its cache, where they start in it, and
    the mask among them (None = causal)."""
    ids: Tensor
    positions: Tensor
    cache: KVCache
    start: Start
    mask: Tensor | None = None


class MoEBlock(nn.Module):
    """A MoE layer's modules besides its experts (which live in the ExpertStore): the router's projection to
    expert logits (GPT-OSS has a bias), the selection bias [E] of a biased router (kept fp32), and the
    shared experts with their gate."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        H = cfg.hidden_size
        self.router = Linear(H, cfg.moe.num_experts, bias=cfg.moe.router_bias)
        self.selection_bias = nn.Parameter(torch.zeros(cfg.moe.num_experts)) if cfg.moe.selection_bias else None
        self.shared = DenseMLP(H, cfg.moe.shared_intermediate_size) if cfg.moe.shared_intermediate_size else None
        self.shared_gate = Linear(H, 1, bias=False) if cfg.moe.shared_gate else None

    def add_shared(self, x: Tensor, routed: Tensor) -> Tensor:
        """The routed experts' output [T, H] plus the shared experts' on x [T, H] (gated: times sigmoid)."""
        if self.shared is None:
            return routed
        shared = self.shared(x)
        if self.shared_gate is not None:
            shared = torch.sigmoid(self.shared_gate(x)) * shared
        return routed + shared


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = LatentAttentionLayer(cfg, layer) if cfg.attn.latent else Attention.of(cfg, layer)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        moe = cfg.moe.layers[layer]
        self.mlp = MoEBlock(cfg) if moe else DenseMLP(cfg.hidden_size, cfg.dense_intermediate_size)


class MoEModel(nn.Module):
    embed_tokens: nn.Embedding            # the modules `_build_skeleton` attaches
    layers: Sequence[DecoderLayer]        # an nn.ModuleList of them
    norm: RMSNorm
    lm_head: Linear

    def __init__(self, cfg: ModelConfig, store: ExpertStore, state: dict[str, Tensor],
                 device: torch.device | str, dtype: torch.dtype):
        super().__init__()
        self.config, self.store, self.dtype, self.device = cfg, store, dtype, torch.device(device)
        self.router: Router = cfg.moe.router
        _build_skeleton(self, cfg)
        self.load_state_dict(_cast(state, self.device, dtype), assign=True, strict=True)
        self.requires_grad_(False)
        for layer in self.layers:
            layer.self_attn.fuse()
        for m in self.modules():
            if isinstance(m, Linear):
                m.freeze()
        self.rope = Rope(cfg.attn.rope, cfg.attn.rope_dim, cfg.max_position_embeddings).to(self.device)

    @classmethod
    def from_pretrained(cls, path: str | Path, device: torch.device | str = "cpu",
                        dtype: torch.dtype | str | None = None, store: str = "resident",
                        slots: int | None = None) -> MoEModel:
        """Load a Hugging Face checkpoint folder (config.json + safetensors, single or sharded).

        dtype None = the checkpoint's dtype; store "resident" (all experts on `device`) or "offloaded"
        (`slots` experts per layer on `device`, the rest in host memory). Experts stream into the store one
        MoE layer at a time (`load_experts`), then the other weights load."""
        cfg = ModelConfig.from_folder(path)
        dtype = DTYPES.get(dtype, dtype) if isinstance(dtype, str) else (dtype or cfg.dtype)
        if not isinstance(dtype, torch.dtype) or dtype not in DTYPES.values():
            raise ValueError(f"dtype {dtype!r} not supported; valid: {', '.join(DTYPES)}")
        validate_store_args(store, slots, cfg.moe.num_experts)
        ckpt = Checkpoint(path)
        expert_store = load_experts(ckpt, cfg, dtype, store, device, slots)
        names = list(_skeleton_names(cfg))
        model = cls(cfg, expert_store, module_state(ckpt, cfg, names), device, dtype)
        ckpt.close()
        return model

    def new_cache(self, max_len: int) -> KVCache:
        cfg = self.config
        return KVCache(cfg.num_layers, cfg.attn.cache_heads, cfg.attn.head_dim, max_len, self.dtype, self.device,
                       cfg.attn.v_head_dim)

    def selection_bias(self, layer: int) -> Tensor | None:
        """Layer `layer`'s selection bias [E] fp32 (the `bias=` of routing calls), or None (a dense layer, or a
        router without one)."""
        return getattr(self.layers[layer].mlp, "selection_bias", None)

    def embed(self, ids: Tensor) -> Tensor:
        """ids [T] -> token embeddings [T, H]."""
        return self.embed_tokens(ids)

    @torch.no_grad()
    def forward(self, ids: Tensor, positions: Tensor, cache: KVCache, start: Start, mask: Tensor | None = None,
                policy: Policy | None = None, aux_layers: Sequence[int] = (),
                routes: PassRoutes | None = None) -> tuple[Tensor, Tensor | None]:
        """ids [T], positions [T] -> logits [T, V] fp32, aux [T, len(aux_layers) * H] | None.

        Positions are below cache.max_len (a token's position never exceeds its slot; the engine's trees
        and prompts keep that). New K/V go to cache slots start..start+T-1; each new token attends to slots [0, start) and to the
        new tokens `mask` [T, T] allows (None = causal); a 0-d device tensor `start` makes every shape
        static (attention over all cache slots, see `kv`). aux holds the residual stream after each layer of
        `aux_layers`, concatenated in that order."""
        return self.forward_batch([Segment(ids, positions, cache, start, mask)], policy, aux_layers, routes)[0]

    @torch.no_grad()
    def forward_batch(self, segments: Sequence[Segment], policy: Policy | None = None,
                      aux_layers: Sequence[int] = (),
                      routes: PassRoutes | None = None) -> list[tuple[Tensor, Tensor | None]]:
        """One pass over several sequences' new tokens (`Segment`s, each with its own cache): attention per
        segment, every other layer over their rows concatenated, so each MoE layer routes (`policy` sees
        logits [sum T, E], segment after segment) and runs its experts once for the whole pass, as a serving
        engine's batched verify pass does. -> per segment (logits [T, V], aux | None), as `forward`."""
        views = [self._attention_view(s) for s in segments]
        bounds = [0]
        for s in segments:
            bounds.append(bounds[-1] + s.ids.shape[0])
        wanted: dict[int, Tensor | None] = {l: None for l in aux_layers}
        x = self.embed_tokens(_joined([s.ids for s in segments]))
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            parts = [attn(h, cos, sin, s.cache, s.start, masks[attn.window]) for s, (masks, cos, sin), h in
                     zip(segments, views, _rows(layer.input_layernorm(x), bounds), strict=True)]
            x = x + _joined(parts)
            x = x + self._mlp(i, layer.mlp, layer.post_attention_layernorm(x), policy, routes)
            if i in wanted:
                wanted[i] = x
        logits = self.lm_head(self.norm(x)).float()                      # [sum T, V]
        missing = [l for l, h in wanted.items() if h is None]
        if missing:
            raise ValueError(f"aux_layers {missing} out of range; the model has {len(self.layers)} layers")
        # none is missing here, so every entry is a tensor (the checker cannot see it)
        aux = torch.cat([wanted[l] for l in aux_layers], dim=-1) if aux_layers else None  # type: ignore[misc]
        auxes = _rows(aux, bounds) if aux is not None else [None] * len(segments)
        return list(zip(_rows(logits, bounds), auxes, strict=True))

    def _attention_view(self, s: Segment) -> tuple[dict, Tensor, Tensor]:
        """A segment's masks per window and RoPE tables, after checking its shapes and placing its positions."""
        T = s.ids.shape[0]
        if s.ids.dim() != 1 or s.positions.shape != s.ids.shape:
            raise ValueError(f"ids and positions must both be 1-D [T]; got {tuple(s.ids.shape)} and "
                             f"{tuple(s.positions.shape)}")
        s.cache.check(s.start, T)
        s.cache.place(s.start, s.positions)
        masks = block_masks(self.config, s.cache, s.start, s.positions, s.mask, self.dtype)
        cos, sin = self.rope(s.positions, self.dtype, s.cache.max_len)   # [T, 1, D] each
        return masks, cos, sin

    def _mlp(self, layer: int, mlp: MoEBlock | DenseMLP, x: Tensor, policy: Policy | None,
             routes: PassRoutes | None) -> Tensor:
        """x [T, H] -> [T, H]: a dense MLP, or router -> policy -> ExpertStore (via the recorder, if any)."""
        if isinstance(mlp, DenseMLP):
            return mlp(x)
        logits = mlp.router(x).float()                                   # [T, E]
        if policy is None:
            ids, weights = natural(self.router, logits, mlp.selection_bias)   # [T, k]
        else:
            ids, weights = policy(layer, logits)
        return mlp.add_shared(x, (self.store if routes is None else routes).run(layer, x, ids, weights))


def _rows(t: Tensor, bounds: list[int]) -> list[Tensor]:
    """t's rows per segment (`bounds`: the segments' cumulative row ends from 0); one segment: t itself, so a
    one-sequence pass (`forward`) dispatches no slicing op at all."""
    if len(bounds) == 2:
        return [t]
    return [t[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _joined(parts: list[Tensor]) -> Tensor:
    """The segments' rows back in one tensor (`_rows` inverted): one part is itself, no copy."""
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def load_experts(ckpt: Checkpoint, cfg: ModelConfig, dtype: torch.dtype, kind: str, device: torch.device | str,
                 slots: int | None) -> ExpertStore:
    """The expert store, filled layer by layer: it is opened empty at the checkpoint's stored form
    (`memory.stored_form`), then each MoE layer's experts are read straight into where the store keeps them
    (`store.receive`: the device, or the offloaded store's host arena) and handed over before the next layer
    is read, so host memory holds the store's own part and one layer at most (`memory.store_bytes`)."""
    math = ExpertMath(cfg.moe.activation, dtype, cfg.moe.swiglu_alpha, cfg.moe.swiglu_limit)
    form = stored_form(cfg, dtype, packed_experts(ckpt, cfg))
    store = open_store(kind, math, {l: form for l in cfg.moe.layer_ids}, cfg.moe.num_experts, device, slots)
    for l in cfg.moe.layer_ids:
        store.put(l, expert_weights(ckpt, cfg, l, dtype, out=store.receive(l)))
    return store


def _build_skeleton(module: nn.Module, cfg: ModelConfig) -> nn.Module:
    """Attach the non-expert modules, on the meta device (weights come from the checkpoint)."""
    with torch.device("meta"):
        module.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        module.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_layers))
        module.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        module.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
    return module


def _skeleton_names(cfg: ModelConfig) -> list[str]:
    return [name for name, _ in _build_skeleton(nn.Module(), cfg).named_parameters()]


def _cast(state: dict[str, Tensor], device: torch.device, dtype: torch.dtype) -> dict[str, Tensor]:
    """Move to device; norms stay fp32 (GPT-OSS keeps them fp32; Qwen3's bf16 norm weights are exact), and
    so do selection biases (DeepSeek-V3 keeps `e_score_correction_bias` fp32)."""
    out = {}
    for name, t in state.items():
        keep_fp32 = name.endswith(("norm.weight", "selection_bias"))
        out[name] = t.to(device=device, dtype=torch.float32 if keep_fp32 else dtype)
    return out
