"""The whole-pass byte model: what one decoding step reads from device memory besides the experts, from the
target's and its EAGLE-3 draft's config.json, and the bound a GPU's published bandwidths put on a step.

    m = pass_model("qwen3-30b-a3b")                  # target + draft configs (a shape name, or folders)
    m.target_bytes(), m.kv_bytes(512), m.draft_step_bytes(5)
    m.step_bytes(experts_read, context=512, speculative=True, num_steps=5)      # bytes read per target step
    m.step_bytes(experts_read, requests=16)          # a step verifying 16 requests: weights once, KV per request
    seconds = step_bound(read, moved, gpu, link="published")                   # bytes / bandwidth

Per target step (a verify pass, or a Vanilla AR decode pass):
- target weights: every non-expert parameter a pass multiplies (`engine.memory.other_params` less the input
  embedding table, of which a pass gathers only its tokens' rows): attention, norms, routers, dense MLPs and
  the LM head, in the config's dtype;
- the KV cache up to the context (each layer up to its sliding window), keys and values in the config's dtype;
- with speculation, the draft's passes: EAGLE-3 reads its accepted tokens once through `fc` (fused target
  features, 3 x target hidden -> hidden) and its decoder layer, then `num_steps - 1` tree levels through the
  decoder layer again; every draft pass reads the decoder layer (attention over 2 x hidden inputs, SwiGLU MLP,
  norms), the final norm and the draft LM head (draft vocabulary), and the draft's KV cache;
- the experts the pass routes to are the caller's (counted per pass by the replay, in the shape's format).
Activations, logits written and the selector's own traffic are left out (kilobytes to a few MB per pass at
batch 1). `step_bound` adds the host-to-device link for the bytes an offloaded store moves, loads not
overlapped with compute (as the store runs them).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from acceptmoe.engine.config import DTYPES, ModelConfig
from acceptmoe.engine.memory import other_params
from acceptmoe.errors import UserError
from acceptmoe.paths import REPO

from .shapes import DeviceBound

SHIPPED = REPO / "configs" / "models"          # released config.json files by hub id: <owner>/<name>/config.json
# the targets and drafts of the replay's shapes (costs.shapes.SHAPES and the embedded tiny world)
CHECKPOINTS = {
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B-Instruct-2507",
                      "lmsys/SGLang-EAGLE3-Qwen3-30B-A3B-Instruct-2507-SpecForge-Nex"),
    "gpt-oss-120b": ("openai/gpt-oss-120b", "lmsys/EAGLE3-gpt-oss-120b-bf16"),
    "tiny": ("models/tiny/target", "models/tiny/draft"),
}
# KV read per pass at this context: a 256-token prompt and the paper's 256 timed tokens, the longest context of
# the paper's throughput protocol on prompts of GSM8K's length (the KV term is about 1 % of a Qwen3-30B-A3B step)
CONTEXT = 512
LINKS = ("published", "typical")


def config_json(ref: str) -> dict:
    """A model's config.json: a local folder's, else the copy shipped under configs/models/<hub id>/."""
    for folder in (Path(ref), REPO / ref, SHIPPED / ref):
        if (folder / "config.json").is_file():
            return json.loads((folder / "config.json").read_text())
    raise UserError(f"no config.json for {ref!r}: give a model folder holding one, or a hub id whose released "
                    f"config.json is shipped under {SHIPPED.relative_to(REPO)}/<owner>/<name>/")


@dataclass(frozen=True)
class DraftShape:
    """An EAGLE-3 draft's sizes (SpecForge config.json: Llama fields plus `draft_vocab_size`)."""
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    num_layers: int
    draft_vocab_size: int
    target_hidden_size: int
    dtype_bytes: int

    @classmethod
    def from_config(cls, raw: dict, target_hidden: int) -> DraftShape:
        H, heads = raw["hidden_size"], raw["num_attention_heads"]
        dtype = raw.get("torch_dtype") or raw.get("dtype") or "bfloat16"
        return cls(H, raw["intermediate_size"], heads, raw.get("num_key_value_heads") or heads,
                   raw.get("head_dim") or H // heads, raw.get("num_hidden_layers", 1),
                   raw.get("draft_vocab_size") or raw["vocab_size"], raw.get("target_hidden_size") or target_hidden,
                   _size(dtype))

    def layer_params(self) -> int:
        """One decoder layer: attention reads the concatenated [embedding, hidden] (2H), SwiGLU MLP, 3 norms."""
        H, q, kv = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return 2 * H * q + 2 * (2 * H * kv) + q * H + 3 * H * self.intermediate_size + 3 * H

    def pass_params(self) -> int:
        """One draft pass: its decoder layers, the final norm and the LM head over the draft vocabulary."""
        return self.num_layers * self.layer_params() + self.hidden_size + self.draft_vocab_size * self.hidden_size

    def fc_params(self) -> int:
        return 3 * self.target_hidden_size * self.hidden_size


def _size(dtype: str) -> int:
    if dtype not in DTYPES:
        raise UserError(f"config dtype {dtype!r} not supported; valid: {', '.join(DTYPES)}")
    return DTYPES[dtype].itemsize


@dataclass(frozen=True)
class PassModel:
    name: str
    target: ModelConfig
    draft: DraftShape | None
    source: str                      # where the configs came from

    @property
    def dtype_bytes(self) -> int:
        return self.target.dtype.itemsize

    def target_bytes(self) -> int:
        """Non-expert target weights one pass reads (the input embedding only as gathered rows, left out)."""
        c = self.target
        embedding = 0 if c.tie_word_embeddings else c.vocab_size * c.hidden_size
        return (other_params(c) - embedding) * self.dtype_bytes

    def kv_bytes(self, context: int = CONTEXT) -> int:
        """The target's KV cache one pass reads: keys and values of every layer up to its window (the native
        engine's cache: MLA's expanded per head)."""
        a = self.target.attn
        per_token = a.cache_heads * (a.head_dim + a.v_head_dim) * self.dtype_bytes
        return sum(per_token * (context if w is None else min(context, w)) for w in a.windows)

    def draft_step_bytes(self, num_steps: int, context: int = CONTEXT) -> int:
        """The draft's passes of one speculative step: the extension through `fc`, then num_steps - 1 levels,
        each reading the draft's weights and its KV cache."""
        d = self.draft
        if d is None:
            return 0
        kv = d.num_layers * 2 * d.num_kv_heads * d.head_dim * context * d.dtype_bytes
        return d.fc_params() * d.dtype_bytes + num_steps * (d.pass_params() * d.dtype_bytes + kv)

    def step_bytes(self, experts_read: float, context: int = CONTEXT, speculative: bool = True,
                   num_steps: int = 5, requests: float = 1) -> float:
        """Device-memory bytes of one target step: the pass's experts (the caller's count), its other weights
        and KV cache, and with speculation the draft's passes. A step batching `requests` requests reads the
        weights (target and draft) once and each request's KV cache (target and draft) once."""
        draft: float = 0
        if speculative:
            draft_kv = self.draft_step_bytes(num_steps, context) - self.draft_step_bytes(num_steps, 0)
            draft = self.draft_step_bytes(num_steps, context) + (requests - 1) * draft_kv
        return experts_read + self.target_bytes() + requests * self.kv_bytes(context) + draft

    def describe(self, num_steps: int = 5, context: int = CONTEXT) -> dict:
        return {"name": self.name, "source": self.source, "context": context, "num_steps": num_steps,
                "target_bytes": self.target_bytes(), "kv_bytes": self.kv_bytes(context),
                "draft_step_bytes": self.draft_step_bytes(num_steps, context) if self.draft else None}


def pass_model(name: str, target: str | None = None, draft: str | None = None) -> PassModel:
    """The byte model of a shape name (`CHECKPOINTS`), or of a target folder or hub id with its draft."""
    if target is None:
        if name not in CHECKPOINTS:
            raise UserError(f"no whole-pass byte model for {name!r}; known: {', '.join(CHECKPOINTS)} (or give the "
                            f"target's and the draft's config.json)")
        target, draft = CHECKPOINTS[name]
    cfg = ModelConfig.from_dict(config_json(target))
    shape = DraftShape.from_config(config_json(draft), cfg.hidden_size) if draft else None
    return PassModel(name, cfg, shape, f"{target} + {draft}" if draft else target)


def link_gbps(gpu: DeviceBound, link: str) -> float:
    """The host-to-device bandwidth of `gpu`: its published peak, or the measured-typical figure (`DeviceBound.h2d_typical`)."""
    if link not in LINKS:
        raise ValueError(f"link {link!r}; valid: {', '.join(LINKS)}")
    return gpu.h2d_gbps if link == "published" else gpu.h2d_typical


def step_bound(read: float, moved: float, gpu: DeviceBound, link: str = "published") -> float:
    """Seconds: bytes read / device memory bandwidth + bytes moved / host-to-device bandwidth."""
    return read / (gpu.memory_gbps * 1e9) + (moved / (link_gbps(gpu, link) * 1e9) if moved else 0.0)
