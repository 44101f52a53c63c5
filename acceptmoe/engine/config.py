"""ModelConfig: one typed description of a Qwen3-MoE or GPT-OSS target, parsed from a Hugging Face config.json.

The architecture only selects config-driven pieces; the model code has no per-architecture branches beyond
reading these fields:

| piece            | qwen3_moe                                   | gpt_oss                                      |
|------------------|---------------------------------------------|----------------------------------------------|
| router           | softmax over E, top-k, renormalise if        | logits + bias, top-k, softmax over the k     |
|                  | `norm_topk_prob` (`softmax_topk`)           | (`topk_softmax`)                             |
| experts          | SwiGLU, gate and up halves (`swiglu`)       | clamped SwiGLU, interleaved gate/up, biases  |
|                  |                                             | (`clamped_swiglu`, alpha 1.702, limit 7.0)   |
| attention        | q/k RMSNorm, no biases, no sinks            | qkv/o biases, per-head sinks                 |
| windows          | none (or all layers if `use_sliding_window`)| per `layer_types`: sliding or full           |
| rope             | default or yarn (`rope_parameters`)         | yarn                                         |
| dense layers     | `mlp_only_layers`, `decoder_sparse_step`    | none                                         |
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from acceptmoe.errors import UserError
from acceptmoe.methods import RouterKind

ARCHS = ("qwen3_moe", "gpt_oss")
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
    """RoPE frequencies of the target (default, YaRN) and of EAGLE-3 drafts (default, linear, llama3), by
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


@dataclass(frozen=True)
class ModelConfig:
    arch: str                                  # "qwen3_moe" | "gpt_oss"
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    num_experts: int
    top_k: int
    moe_intermediate_size: int
    dense_intermediate_size: int               # MLP width of non-MoE layers (qwen3 mlp_only_layers)
    moe_layers: tuple[bool, ...]               # [num_layers]: layer i has a sparse MoE block
    windows: tuple[int | None, ...]            # [num_layers]: sliding window (keys with q_pos - k_pos < w)
    rope: RopeConfig
    rms_norm_eps: float
    router_kind: RouterKind                    # SOFTMAX_TOPK | TOPK_SOFTMAX
    norm_topk_prob: bool
    expert_activation: str                     # "swiglu" | "clamped_swiglu"
    swiglu_alpha: float = 1.702
    swiglu_limit: float = 7.0
    attention_bias: bool = False
    qk_norm: bool = False
    attention_sinks: bool = False
    router_bias: bool = False
    tie_word_embeddings: bool = False
    eos_token_ids: tuple[int, ...] = ()
    max_position_embeddings: int = 0
    dtype: torch.dtype = torch.float32         # the checkpoint's compute dtype

    @property
    def moe_layer_ids(self) -> tuple[int, ...]:
        return tuple(i for i, m in enumerate(self.moe_layers) if m)

    @classmethod
    def from_dict(cls, raw: dict, extra_eos: tuple[int, ...] = ()) -> "ModelConfig":
        arch = raw.get("model_type")
        if arch not in ARCHS:
            raise CheckpointError(f"unsupported model_type {arch!r} in config.json; supported: {', '.join(ARCHS)}")
        return _qwen3_moe(raw, extra_eos) if arch == "qwen3_moe" else _gpt_oss(raw, extra_eos)

    @classmethod
    def from_folder(cls, path: str | Path) -> "ModelConfig":
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


def _common(raw: dict, extra_eos: tuple[int, ...]) -> dict:
    """Fields shared by both architectures (hidden sizes, heads, rope, eos, dtype)."""
    heads = raw["num_attention_heads"]
    head_dim = raw.get("head_dim") or raw["hidden_size"] // heads
    eos = tuple(dict.fromkeys(_as_ids(raw.get("eos_token_id")) + extra_eos))
    dtype_name = raw.get("dtype") or raw.get("torch_dtype") or "float32"
    if dtype_name not in DTYPES:
        raise CheckpointError(f"config dtype {dtype_name!r} not supported; valid: {', '.join(DTYPES)}")
    return dict(
        vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"], num_layers=raw["num_hidden_layers"],
        num_heads=heads, num_kv_heads=raw.get("num_key_value_heads") or heads, head_dim=head_dim,
        num_experts=raw.get("num_experts") or raw.get("num_local_experts"),
        top_k=raw.get("num_experts_per_tok") or raw.get("experts_per_token"),
        rope=rope_config(raw, ("default", "yarn")), rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)), eos_token_ids=eos,
        max_position_embeddings=raw.get("max_position_embeddings", 0), dtype=DTYPES[dtype_name],
    )


def rope_config(raw: dict, kinds: tuple[str, ...] = ROPE_KINDS) -> RopeConfig:
    """RoPE from a config.json: `rope_parameters` (transformers 5) or the older `rope_theta` + `rope_scaling`
    pair; `kinds` are those the model family uses."""
    params = dict(raw.get("rope_scaling") or {})
    params.update(raw.get("rope_parameters") or {})
    theta = float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in kinds:
        raise CheckpointError(f"rope_type {kind!r} is not supported; supported: {', '.join(kinds)}")
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


def _qwen3_moe(raw: dict, extra_eos: tuple[int, ...]) -> ModelConfig:
    if raw.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"hidden_act {raw['hidden_act']!r} is not supported; Qwen3-MoE experts use silu")
    common = _common(raw, extra_eos)
    n, step = common["num_layers"], raw.get("decoder_sparse_step", 1)
    dense = set(raw.get("mlp_only_layers") or [])
    moe = tuple(i not in dense and common["num_experts"] > 0 and (i + 1) % step == 0 for i in range(n))
    window = raw.get("sliding_window") if raw.get("use_sliding_window") else None
    return ModelConfig(
        arch="qwen3_moe", **common, moe_intermediate_size=raw["moe_intermediate_size"],
        dense_intermediate_size=raw.get("intermediate_size", 0), moe_layers=moe, windows=(window,) * n,
        router_kind=RouterKind.SOFTMAX_TOPK, norm_topk_prob=bool(raw.get("norm_topk_prob", False)),
        expert_activation="swiglu", attention_bias=bool(raw.get("attention_bias", False)), qk_norm=True,
    )


def _gpt_oss(raw: dict, extra_eos: tuple[int, ...]) -> ModelConfig:
    common = _common(raw, extra_eos)
    n = common["num_layers"]
    types = raw.get("layer_types") or ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
    if len(types) != n:
        raise CheckpointError(f"layer_types has {len(types)} entries for {n} layers; give one per layer")
    window = raw.get("sliding_window")
    windows = tuple(window if t == "sliding_attention" else None for t in types)
    return ModelConfig(
        arch="gpt_oss", **common, moe_intermediate_size=raw["intermediate_size"], dense_intermediate_size=0,
        moe_layers=(True,) * n, windows=windows, router_kind=RouterKind.TOPK_SOFTMAX, norm_topk_prob=True,
        expert_activation="clamped_swiglu", swiglu_alpha=float(raw.get("swiglu_alpha", 1.702)),
        swiglu_limit=float(raw.get("swiglu_limit", 7.0)), attention_bias=bool(raw.get("attention_bias", True)),
        attention_sinks=True, router_bias=True,
    )
