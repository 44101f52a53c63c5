"""What a target's expert store takes, from its config alone (no checkpoint read): the one place store sizes
are defined. The stores allocate by these rules (`store.open_store`) and a test compares their allocations.

    form = stored_form(cfg, torch.bfloat16, mxfp4=False)          # one MoE layer as loading reads it (meta)
    b = store_bytes(cfg, torch.bfloat16, "offloaded", slots=48, mxfp4=False)   # StoreBytes, on CUDA
    b.device, b.pinned, b.host_experts, b.load_peak
    weight_bytes(cfg, mxfp4=True, store="offloaded", slots=48)     # {"experts": ..., "other": ..., "total": ...}

- The stored form (`stored_form`) is what `loading.expert_weights` gives per MoE layer: dense `w1` [E, 2I, H],
  `w2` [E, H, I] in the load dtype, or MXFP4 `*_blocks` / `*_scales` (uint8: 16 bytes of E2M1 codes and 1
  scale byte per 32 values); experts with biases (`MoEConfig.expert_bias`, GPT-OSS) add `b1` [E, 2I], `b2`
  [E, H] in the load dtype.
- The kept form (`kept_form`, `expert_math.keeps_packed`): on CUDA the stored form, elsewhere dense.
- Device: a resident store keeps all E experts of every MoE layer in the kept form; an offloaded one X slots
  plus the zero slot per layer in the kept form, plus, where the kept form is dense and the stored one packed
  (off CUDA), X + 1 slots of the packed bytes its loads land in. Per-layer bookkeeping (slot maps, LRU
  stamps, counters: a few hundred bytes per layer) is not counted.
- Host arena (`host_layout`, offloaded only): every MoE layer's stored form, layers in order and each layer's
  tensors by name, each aligned to `arena.ALIGN` bytes, then the store's read buffer ([2E + 1] int64: the
  one host read per layer and pass). Page-locked on CUDA (`pinned`), pageable elsewhere.
- Host peak while loading (`load_peak`): what the store holds in host memory (the arena; off CUDA also the
  device-side experts and the non-expert weights, which live in host memory there) plus one MoE layer of
  stored experts, the layer being read (its checkpoint pages, or its staging copy where the kept form differs).
  Experts stream into the store layer by layer (`MoEModel.from_pretrained`), so nothing else is staged.
- `other` is every non-expert weight (embeddings, the LM head unless tied, attention (grouped-query or latent)
  with its biases, norms and sinks, routers and their selection biases, shared experts and their gates, dense
  MLPs of non-MoE layers) in the compute dtype; `draft_bytes` an EAGLE-3 draft's
  (built on the meta device from its config.json), `kv_bytes` the target's KV cache for a number of slots.
  Activations and the runtime come on top.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from .arena import ArenaLayout
from .config import ModelConfig
from .eagle3 import Eagle3Draft
from .expert_math import PACKED, keeps_packed
from .mxfp4 import BLOCK

META = torch.device("meta")
READS = "reads"                       # the arena's read buffer


def mxfp4_in_config(raw: dict) -> bool:
    """Whether a config.json (as a dict) declares MXFP4-packed experts (`quantization_config.quant_method`)."""
    return (raw.get("quantization_config") or {}).get("quant_method") == "mxfp4"


def stored_form(cfg: ModelConfig, dtype: torch.dtype, mxfp4: bool) -> dict[str, Tensor]:
    """One MoE layer's experts as loading reads them: meta tensors [E, ...] (names as the store's)."""
    E, H, I = cfg.moe.num_experts, cfg.hidden_size, cfg.moe.intermediate_size
    if mxfp4:
        shapes = {"w1_blocks": ((E, 2 * I, H // BLOCK, BLOCK // 2), torch.uint8),
                  "w1_scales": ((E, 2 * I, H // BLOCK), torch.uint8),
                  "w2_blocks": ((E, H, I // BLOCK, BLOCK // 2), torch.uint8),
                  "w2_scales": ((E, H, I // BLOCK), torch.uint8)}
    else:
        shapes = {"w1": ((E, 2 * I, H), dtype), "w2": ((E, H, I), dtype)}
    if cfg.moe.expert_bias:
        shapes.update(b1=((E, 2 * I), dtype), b2=((E, H), dtype))
    return {n: torch.empty(s, dtype=d, device=META) for n, (s, d) in shapes.items()}


def as_form(weights: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Real tensors -> their form (meta tensors of the same shapes and dtypes; holds no memory)."""
    return {n: torch.empty(t.shape, dtype=t.dtype, device=META) for n, t in weights.items()}


def kept_form(form: Mapping[str, Tensor], dtype: torch.dtype, device: torch.device | str) -> dict[str, Tensor]:
    """The form a store on `device` keeps `form` in (`ExpertMath.kept`): the stored form on CUDA; elsewhere
    dense, each packed pair becoming w1 / w2 in `dtype`."""
    if keeps_packed(device):
        return dict(form)
    out = {n: t for n, t in form.items() if n in ("w1", "w2", "b1", "b2")}
    for name, blocks, _ in PACKED:
        if blocks in form:
            b = form[blocks]                                             # [E, R, C/32, 16]
            out[name] = torch.empty((*b.shape[:-2], b.shape[-2] * BLOCK), dtype=dtype, device=META)
    return out


def nbytes(t: Tensor) -> int:
    return t.numel() * t.element_size()


def per_expert(form: Mapping[str, Tensor]) -> int:
    """Bytes of one expert of a layer form [E, ...]."""
    return sum(nbytes(t[0]) for t in form.values())


def expert_bytes(cfg: ModelConfig, mxfp4: bool, dtype: torch.dtype = torch.bfloat16) -> int:
    """One expert in its stored form (what an offloaded load moves; what the store keeps on CUDA)."""
    return per_expert(stored_form(cfg, dtype, mxfp4))


def host_layout(forms: Mapping[int, Mapping[str, Tensor]], num_experts: int,
                same_as: Mapping[int, int] | None = None) -> tuple[ArenaLayout, dict[int, int]]:
    """The offloaded store's arena for per-layer stored forms, and for each layer the layer whose tensors it
    uses (itself, or `same_as[layer]`, an earlier layer it shares them with: a replay runs several layers on one
    weight set). Tensors are named `<layer>.<name>`; the read buffer comes last."""
    owner = {l: (same_as or {}).get(l, l) for l in sorted(forms)}
    bad = {l: o for l, o in owner.items() if o != l and (o not in owner or owner[o] != o or o > l)}
    if bad:
        raise ValueError(f"same_as {bad}: a layer shares the tensors of an earlier layer that keeps its own")
    tensors = [(f"{l}.{n}", forms[l][n].shape, forms[l][n].dtype) for l in sorted(forms) if owner[l] == l
               for n in sorted(forms[l])]
    return ArenaLayout.of(tensors + [(READS, (2 * num_experts + 1,), torch.long)]), owner


def pool_form(form: Mapping[str, Tensor], dtype: torch.dtype, device: torch.device | str,
              slots: int) -> dict[str, Tensor]:
    """An offloaded layer's device buffers for X slots + the zero slot: the kept form, and the packed bytes
    loads land in where the kept form is dense."""
    kept = kept_form(form, dtype, device)
    staged = {n: t for n, t in form.items() if n not in kept}
    return {n: torch.empty((slots + 1, *t.shape[1:]), dtype=t.dtype, device=META)
            for n, t in {**kept, **staged}.items()}


@dataclass(frozen=True)
class StoreBytes:
    """Bytes of one target's expert store (see the module docstring for each rule)."""
    device: int                 # expert buffers on the device
    pinned: int                 # page-locked host bytes (the arena, on CUDA)
    host_experts: int           # experts' stored form held in host memory (the arena)
    load_peak: int              # host bytes while loading (the store's host part + one layer being read)


def store_bytes(cfg: ModelConfig, dtype: torch.dtype, store: str, slots: int | None, mxfp4: bool,
                device: torch.device | str = "cuda") -> StoreBytes:
    """The expert store `MoEModel.from_pretrained` builds for `cfg` on `device` (its type decides the kept
    form and pinning)."""
    form, L = stored_form(cfg, dtype, mxfp4), len(cfg.moe.layer_ids)
    on_host = torch.device(device).type == "cpu"
    layer = sum(nbytes(t) for t in form.values())
    if store == "resident":
        dev = L * sum(nbytes(t) for t in kept_form(form, dtype, device).values())
        host = arena = experts = 0
    else:
        assert slots is not None                    # an offloaded store has slots
        dev = L * sum(nbytes(t) for t in pool_form(form, dtype, device, slots).values())
        layout, _ = host_layout(dict.fromkeys(cfg.moe.layer_ids, form), cfg.moe.num_experts)
        arena, experts = layout.nbytes, L * layer
        host = arena
    other = other_params(cfg) * torch.empty((), dtype=dtype).element_size()
    resident_on_host = dev + other if on_host else 0
    pinned = arena if torch.device(device).type == "cuda" else 0
    return StoreBytes(dev, pinned, experts, host + resident_on_host + layer)


def other_params(cfg: ModelConfig) -> int:
    """Parameters outside the experts."""
    H, V, L, m = cfg.hidden_size, cfg.vocab_size, cfg.num_layers, cfg.moe
    router = H * m.num_experts + m.num_experts * (m.router_bias + m.selection_bias)
    shared = 3 * H * m.shared_intermediate_size + H * m.shared_gate
    moe = len(m.layer_ids)
    dense_mlp = (L - moe) * 3 * H * cfg.dense_intermediate_size
    embeddings = V * H * (1 if cfg.tie_word_embeddings else 2)
    return embeddings + L * (attention_params(cfg) + 2 * H) + moe * (router + shared) + dense_mlp + H


def attention_params(cfg: ModelConfig) -> int:
    """One layer's attention parameters: q/k/v/o projections, biases, q/k norms, sinks; or MLA's."""
    H, at, a = cfg.hidden_size, cfg.attn, cfg.attn.latent
    if a is not None:
        q = at.num_heads * at.head_dim
        q_proj = H * q if a.q_lora_rank is None else H * a.q_lora_rank + a.q_lora_rank * (1 + q)
        kv = H * (a.kv_lora_rank + a.rope) + a.kv_lora_rank * (1 + at.num_heads * (a.nope + a.v_head_dim))
        out = at.num_heads * a.v_head_dim * H
        bias = (a.q_lora_rank or 0) + a.kv_lora_rank + a.rope + H if at.qkv_bias else 0
        return q_proj + kv + out + bias
    q, kv = at.num_heads * at.head_dim, at.num_kv_heads * at.head_dim
    params = H * q + 2 * H * kv + q * H + (q + 2 * kv) * at.qkv_bias + H * at.o_bias
    params += {"": 0, "head": 2 * at.head_dim, "projection": q + kv}[at.qk_norm]
    return params + at.num_heads * at.sinks


def draft_bytes(config: dict, dtype: torch.dtype) -> int:
    """Device bytes of an EAGLE-3 draft from its config.json (as a dict): every parameter in `dtype` and its
    vocabulary maps, counting an embedding of its own (an upper bound: a draft without one shares the
    target's)."""
    with torch.device(META):
        draft = Eagle3Draft(config, own_embedding=True)
    size = torch.empty((), dtype=dtype).element_size()
    return sum(p.numel() for p in draft.parameters()) * size + sum(nbytes(b) for b in draft.buffers())


def kv_bytes(cfg: ModelConfig, dtype: torch.dtype, tokens: int) -> int:
    """The target's KV cache for `tokens` slots: K [tokens, cache heads, head dim] and V [tokens, cache heads,
    v head dim] of every layer (MLA keeps them expanded per head: `AttentionConfig.cache_heads`)."""
    at = cfg.attn
    per_token = at.cache_heads * (at.head_dim + at.v_head_dim)
    return cfg.num_layers * tokens * per_token * torch.empty((), dtype=dtype).element_size()


def weight_bytes(cfg: ModelConfig, mxfp4: bool, store: str = "resident", slots: int | None = None,
                 dtype: torch.dtype = torch.bfloat16) -> dict[str, int]:
    """Device bytes of the target's weights on CUDA: experts (`store_bytes(...).device`), the rest, total."""
    experts = store_bytes(cfg, dtype, store, slots, mxfp4).device
    other = other_params(cfg) * torch.empty((), dtype=dtype).element_size()
    return {"experts": experts, "other": other, "total": experts + other}
