"""ModelConfig: one typed description of a MoE target, parsed from a Hugging Face config.json by its family.

Each model family (`config.json`'s `model_type`) is one record in `acceptmoe/engine/families/` (docs/models.md
lists them and the steps to add one): its parser fills the fields below, so the model code, the store and the
memory rules read fields, never the family's name. Model-wide facts sit at the top of `ModelConfig`, the
attention's in `cfg.attn` (`AttentionConfig`), the sparse blocks' in `cfg.moe` (`MoEConfig`), one name per fact.
Fields a family does not use keep their neutral defaults (no biases, no norms, no shared experts, grouped-query
attention, one router group).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from acceptmoe.errors import UserError
from acceptmoe.methods import Router

from .families import FAMILIES

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be loaded; the message names the problem and the fix."""


def read_json(path: Path) -> dict:
    """A checkpoint's JSON file (config.json, generation_config.json) as a mapping; a file that cannot be
    read, is not UTF-8 JSON (a truncated download) or holds no mapping is a CheckpointError naming it."""
    try:
        raw = json.loads(path.read_bytes())
    except OSError as exc:
        raise CheckpointError(f"{path} cannot be read ({exc.strerror}); make it readable") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise CheckpointError(f"{path} is not valid JSON ({type(exc).__name__}{where}): damaged or truncated; "
                              f"download or save the checkpoint again") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path} holds {type(raw).__name__}, not a mapping of settings; download or save the "
                              f"checkpoint again")
    return raw


ROPE_KINDS = ("default", "linear", "llama3", "yarn")


@dataclass(frozen=True)
class RopeConfig:
    """RoPE frequencies of the target (any of ROPE_KINDS) and of EAGLE-3 drafts (default, linear, llama3), by
    transformers' formulas in fp32 (`modeling_rope_utils`), as SGLang computes them too."""
    theta: float
    kind: str = "default"                  # one of ROPE_KINDS
    factor: float = 1.0                    # linear, llama3, yarn: context extension factor
    beta_fast: float = 32.0                # yarn
    beta_slow: float = 1.0
    original_max_position: int = 0         # llama3, yarn: the pre-extension context length
    truncate: bool = True
    attention_factor: float | None = None  # yarn: cos/sin scale; None = 0.1 ln(factor) + 1
    low_freq_factor: float = 1.0           # llama3
    high_freq_factor: float = 4.0          # llama3

    def inv_freq(self, head_dim: int) -> tuple[torch.Tensor, float]:
        """Inverse frequencies [head_dim // 2] fp32 and the cos/sin scale (transformers' formulas)."""
        exps = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
        pos_freqs = self.theta ** exps                                        # [D/2]
        if self.kind == "default":
            return 1.0 / pos_freqs, 1.0
        if self.kind == "linear":
            return 1.0 / pos_freqs / self.factor, 1.0
        if self.kind == "llama3":
            return self._llama3(1.0 / pos_freqs), 1.0
        scale = self.attention_factor
        if scale is None:
            scale = 1.0 if self.factor <= 1 else 0.1 * math.log(self.factor) + 1.0
        low, high = self._correction_range(head_dim)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
        extrapolate = 1 - ramp                                                # [D/2]
        inv = (1.0 / (self.factor * pos_freqs)) * (1 - extrapolate) + (1.0 / pos_freqs) * extrapolate
        return inv, float(scale)

    def _llama3(self, inv: torch.Tensor) -> torch.Tensor:
        """Llama 3's smooth interpolation between the extended and the original frequencies."""
        old = self.original_max_position
        low_wavelen, high_wavelen = old / self.low_freq_factor, old / self.high_freq_factor
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / self.factor, inv)
        smooth = (old / wavelen - self.low_freq_factor) / (self.high_freq_factor - self.low_freq_factor)
        smoothed = (1 - smooth) * scaled / self.factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled)

    def _correction_range(self, dim: int) -> tuple[float, float]:
        def corr(rotations: float) -> float:
            ratio = self.original_max_position / (rotations * 2 * math.pi)
            return dim * math.log(ratio) / (2 * math.log(self.theta))
        low, high = corr(self.beta_fast), corr(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        return max(low, 0), min(high, dim - 1)


QK_NORMS = ("", "head", "projection")   # none; per head over head_dim (Qwen3); over the whole projection (OLMoE)


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention (DeepSeek-V2/V3): queries through an optional low-rank `q_lora_rank`, keys
    and values expanded per head from a `kv_lora_rank` latent; each head's key is `nope` dims without RoPE
    and `rope` dims with it (one rope part shared by every head), its value `v_head_dim` dims."""
    q_lora_rank: int | None
    kv_lora_rank: int
    nope: int                                  # qk_nope_head_dim
    rope: int                                  # qk_rope_head_dim
    v_head_dim: int
    interleave: bool = True                    # rope dims in interleaved pairs (rope_interleave)
    scale: float = 0.0                         # softmax scale (qk head dim^-0.5, times YaRN's mscale^2)


# config.json's names of what `Router.check_experts` checks: experts per token, experts, groups and groups chosen
ROUTER_KEYS = ("num_experts_per_tok", "experts_per_token", "num_experts", "num_local_experts", "n_routed_experts",
               "n_group", "topk_group")


@dataclass(frozen=True)
class AttentionConfig:
    """The target's attention: grouped-query (heads, KV heads, head width) or latent (`latent`), its RoPE, its
    sliding windows per layer, and what a family adds (biases, q/k norms, sinks)."""
    num_heads: int
    num_kv_heads: int
    head_dim: int                              # query/key head width (MLA: nope + rope)
    windows: tuple[int | None, ...]            # [num_layers]: sliding window (keys with q_pos - k_pos < w)
    rope: RopeConfig
    qkv_bias: bool = False                     # q/k/v biases (MLA: its latent projection's)
    o_bias: bool = False                       # the output projection's bias
    qk_norm: str = ""                          # one of QK_NORMS
    sinks: bool = False                        # a learnt sink logit per head (GPT-OSS)
    latent: LatentAttention | None = None      # MLA instead of grouped-query attention

    def __post_init__(self) -> None:
        if self.qk_norm not in QK_NORMS:
            raise ValueError(f"qk_norm {self.qk_norm!r} is not one of {QK_NORMS}")

    @property
    def rope_dim(self) -> int:
        """The head dims RoPE rotates: all of head_dim, or MLA's rope part."""
        return self.latent.rope if self.latent else self.head_dim

    @property
    def v_head_dim(self) -> int:
        return self.latent.v_head_dim if self.latent else self.head_dim

    @property
    def cache_heads(self) -> int:
        """K/V heads the cache keeps per layer: the KV heads, or every head for MLA (kept expanded)."""
        return self.num_heads if self.latent else self.num_kv_heads


@dataclass(frozen=True)
class MoEConfig:
    """The target's sparse blocks: which layers have one, its experts and their activation, its router, and
    what a family adds (router and expert biases, shared experts and their gate)."""
    num_experts: int
    intermediate_size: int                     # one expert's MLP width
    layers: tuple[bool, ...]                   # [num_layers]: layer i has a sparse MoE block
    router: Router                             # the routing function (`methods.Router`: its axes and top-k)
    activation: str                            # "swiglu" | "clamped_swiglu"
    swiglu_alpha: float = 1.702                # clamped_swiglu only
    swiglu_limit: float = 7.0
    router_bias: bool = False                  # the router projection's own bias (GPT-OSS)
    expert_bias: bool = False                  # experts with biases b1 [E, 2I], b2 [E, H] (GPT-OSS)
    shared_intermediate_size: int = 0          # shared experts as one SwiGLU MLP beside the routed ones (0: none)
    shared_gate: bool = False                  # the shared MLP scaled by sigmoid(a [1, H] projection) (Qwen2-MoE)

    @property
    def layer_ids(self) -> tuple[int, ...]:
        return tuple(i for i, m in enumerate(self.layers) if m)

    @property
    def top_k(self) -> int:
        """Experts per token (`num_experts_per_tok`): the router's."""
        return self.router.top_k

    @property
    def selection_bias(self) -> bool:
        """Whether each MoE layer has a selection bias [E] its router's choice adds (`Router.biased`)."""
        return self.router.biased


@dataclass(frozen=True)
class ModelConfig:
    """Model-wide facts at the top; the attention's in `attn`, the sparse blocks' in `moe`."""
    arch: str                                  # config.json's model_type: the family (`families.FAMILIES`)
    vocab_size: int
    hidden_size: int
    num_layers: int
    attn: AttentionConfig
    moe: MoEConfig
    dense_intermediate_size: int               # MLP width of non-MoE layers (mlp_only_layers, first_k_dense_replace)
    rms_norm_eps: float
    tie_word_embeddings: bool = False
    eos_token_ids: tuple[int, ...] = ()
    max_position_embeddings: int = 0
    dtype: torch.dtype = torch.float32         # the checkpoint's compute dtype

    @classmethod
    def from_dict(cls, raw: dict, extra_eos: tuple[int, ...] = ()) -> ModelConfig:
        arch = raw.get("model_type")
        if not isinstance(arch, str) or arch not in FAMILIES:
            raise CheckpointError(f"unsupported model_type {arch!r} in config.json: no model family serves it; "
                                  f"supported: {', '.join(FAMILIES.names())} (docs/models.md: adding a family)")
        quant = (raw.get("quantization_config") or {}).get("quant_method")
        if quant is not None and not (quant == "mxfp4" and FAMILIES[arch].packed):
            raise CheckpointError(f"config.json declares {quant!r}-quantized weights, which the native engine does "
                                  f"not read for {arch} (only GPT-OSS's MXFP4 experts); use a bf16 or fp32 "
                                  f"checkpoint of the model")
        try:
            cfg = FAMILIES[arch].parse(raw, extra_eos)
            wrong = cfg.moe.router.check_experts(cfg.moe.num_experts)
        except KeyError as exc:
            raise CheckpointError(f"config.json of a {arch} model lacks {exc.args[0]!r}; restore the checkpoint's "
                                  f"own config.json") from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, UserError):
                raise
            raise CheckpointError(f"config.json of a {arch} model has a bad value ({exc}); restore the "
                                  f"checkpoint's own config.json") from None
        if wrong:
            named = ", ".join(f"{k}={raw[k]}" for k in ROUTER_KEYS if raw.get(k) is not None)
            raise CheckpointError(f"config.json of a {arch} model: {wrong} ({named}); fix them: "
                                  f"num_experts_per_tok must fit in the experts (with n_group: in the topk_group "
                                  f"chosen groups, of two experts or more each)")
        return cfg

    @classmethod
    def from_folder(cls, path: str | Path) -> ModelConfig:
        folder = Path(path)
        if not folder.is_dir():
            raise CheckpointError(f"model folder {folder} does not exist; pass a Hugging Face checkpoint folder")
        cfg_file = folder / "config.json"
        if not cfg_file.is_file():
            raise CheckpointError(f"{folder} has no config.json; save the model with save_pretrained or copy it in")
        raw = read_json(cfg_file)
        gen_file = folder / "generation_config.json"
        extra = _as_ids(read_json(gen_file).get("eos_token_id")) if gen_file.is_file() else ()
        return cls.from_dict(raw, extra)


def _as_ids(value) -> tuple[int, ...]:
    if value is None:
        return ()
    return (int(value),) if isinstance(value, int) else tuple(int(v) for v in value)


def common_fields(raw: dict, extra_eos: tuple[int, ...],
                  rope_kinds: tuple[str, ...] = ROPE_KINDS) -> tuple[dict, dict]:
    """What every family reads the same way: the model-wide fields (`arch`: the model_type; sizes, eos, dtype)
    and the attention's heads and RoPE (`AttentionConfig`'s first fields); a family's parser overrides what it
    names differently."""
    heads = raw["num_attention_heads"]
    head_dim = raw.get("head_dim") or raw["hidden_size"] // heads
    eos = tuple(dict.fromkeys(_as_ids(raw.get("eos_token_id")) + extra_eos))
    dtype_name = raw.get("dtype") or raw.get("torch_dtype") or "float32"
    if dtype_name not in DTYPES:
        raise CheckpointError(f"config dtype {dtype_name!r} not supported; valid: {', '.join(DTYPES)}")
    top = dict(arch=raw["model_type"], vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"],
               num_layers=raw["num_hidden_layers"])
    attn = dict(num_heads=heads, num_kv_heads=raw.get("num_key_value_heads") or heads, head_dim=head_dim,
                rope=rope_config(raw, rope_kinds))
    top.update(rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
               tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)), eos_token_ids=eos,
               max_position_embeddings=raw.get("max_position_embeddings", 0), dtype=DTYPES[dtype_name])
    return top, attn


def expert_count(raw: dict) -> int:
    """Routed experts per MoE layer, by whichever name config.json gives them (none: `ModelConfig.from_dict`
    names the field missing)."""
    count = raw.get("num_experts") or raw.get("num_local_experts") or raw.get("n_routed_experts")
    if count is None:
        raise KeyError("num_experts")
    return count


def routed(raw: dict, preset: str, **fields) -> Router:
    """The model's router: the routing preset its family names (`methods.ROUTER_PRESETS`) with config.json's
    experts per token and the `fields` the family reads (renormalize, groups, group_top, scale)."""
    top_k = raw.get("num_experts_per_tok") or raw.get("experts_per_token")
    if top_k is None:
        raise KeyError("num_experts_per_tok")                  # `ModelConfig.from_dict` names it
    return Router.preset(preset, int(top_k), **fields)


def rope_config(raw: dict, kinds: tuple[str, ...] = ROPE_KINDS) -> RopeConfig:
    """RoPE from a config.json: `rope_parameters` (transformers 5) or the older `rope_theta` + `rope_scaling`
    pair; `kinds` are those the model family uses."""
    params = dict(raw.get("rope_scaling") or {})
    params.update(raw.get("rope_parameters") or {})
    theta = float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in kinds:
        why = (": its frequencies change with the sequence length, which a static KV cache does not follow"
               if kind in ("dynamic", "longrope") else "")
        raise CheckpointError(f"rope_type {kind!r} is not supported{why}; supported: {', '.join(kinds)}")
    if kind == "default":
        return RopeConfig(theta=theta)
    if kind == "linear":
        return RopeConfig(theta=theta, kind=kind, factor=float(params["factor"]))
    if kind == "llama3":
        return RopeConfig(theta=theta, kind=kind, factor=float(params["factor"]),
                          low_freq_factor=float(params["low_freq_factor"]),
                          high_freq_factor=float(params["high_freq_factor"]),
                          original_max_position=int(params["original_max_position_embeddings"]))
    return RopeConfig(
        theta=theta, kind="yarn", factor=float(params["factor"]),
        beta_fast=float(params.get("beta_fast") or 32.0), beta_slow=float(params.get("beta_slow") or 1.0),
        original_max_position=int(params["original_max_position_embeddings"]),
        truncate=bool(params.get("truncate", True)), attention_factor=params.get("attention_factor"),
    )


def moe_layers(raw: dict, num_layers: int, num_experts: int) -> tuple[bool, ...]:
    """Qwen's sparse-layer rule (Qwen3-MoE, Qwen2-MoE): a layer is MoE unless listed in `mlp_only_layers`,
    every `decoder_sparse_step`-th layer."""
    step, dense = raw.get("decoder_sparse_step", 1), set(raw.get("mlp_only_layers") or [])
    return tuple(i not in dense and num_experts > 0 and (i + 1) % step == 0 for i in range(num_layers))


def qwen_moe_fields(raw: dict, extra_eos: tuple[int, ...], family: str) -> tuple[dict, dict, dict]:
    """What Qwen3-MoE and Qwen2-MoE read alike, as (model-wide, `AttentionConfig`, `MoEConfig`) fields: SiLU
    experts, softmax then top-k (renormalised if `norm_topk_prob`), Qwen's sparse-layer rule (`moe_layers`), one
    sliding window for every layer or none (Qwen3-MoE's rule; Qwen2-MoE replaces it by its `layer_types`)."""
    silu_experts(raw, family)
    top, attn = common_fields(raw, extra_eos)
    n, experts = top["num_layers"], expert_count(raw)
    window = raw.get("sliding_window") if raw.get("use_sliding_window") else None
    moe = dict(num_experts=experts, intermediate_size=raw["moe_intermediate_size"],
               layers=moe_layers(raw, n, experts),
               router=routed(raw, "softmax_topk", renormalize=bool(raw.get("norm_topk_prob", False))),
               activation="swiglu")
    top.update(dense_intermediate_size=raw.get("intermediate_size", 0))
    return top, dict(attn, windows=(window,) * n), moe


def silu_experts(raw: dict, family: str) -> None:
    """Refuse an expert activation other than SiLU (the SwiGLU experts every family but GPT-OSS uses)."""
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(f"hidden_act {act!r} is not supported; {family} experts use silu")
