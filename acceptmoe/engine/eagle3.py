"""The EAGLE-3 draft head in the SpecForge / SGLang checkpoint format (`LlamaForCausalLMEagle3`).

Checkpoint: `config.json` (Llama fields plus `draft_vocab_size`, optional `target_hidden_size` and
`eagle_config.eagle_aux_hidden_state_layer_ids`) and safetensors weights named `fc.weight` [H, 3*Ht],
`midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight`,
`midlayer.self_attn.{q,k,v,o}_proj.weight` (q/k/v read width 2H), `midlayer.mlp.{gate,up,down}_proj.weight`,
`norm.weight`, `lm_head.weight` [Vd, H], `d2t` [Vd] (target id = draft id + d2t[draft id]), `t2d` [V] and
optionally `embed_tokens.weight`. Tokens are embedded as SGLang embeds them (`own_embedding`): with the target's
embedding, unless the config's `target_hidden_size` differs from the draft's `hidden_size`.

One step (SGLang `llama_eagle3.py`, SpecForge `llama3_eagle.py`): the draft's input at position i pairs the
token x_{i+1} with a hidden state h_i, either the target's fused features fc(concat of three layers'
outputs at position i) or the draft's own previous output. The midlayer attends over
concat(input_layernorm(embed(x_{i+1})), hidden_norm(h_i)) [T, 2H] with residual h_i, then a SwiGLU MLP;
its output (before the final norm) is the next hidden state, and lm_head(norm(.)) gives the draft logits.
Captured target layers: `eagle_aux_hidden_state_layer_ids` name layer outputs (SGLang captures the input
of layer id + 1); without them SGLang's default is the inputs of layers 2, L//2, L-3, i.e. the outputs of
layers 1, L//2 - 1, L - 4.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from acceptmoe.errors import UserError, shown

from .config import CheckpointError, read_json, rope_config
from .kv import Prefixes, Start, visible_slots
from .layers import Attention, DenseMLP, Linear, RMSNorm, Rope
from .tree import DraftTree, TreeShape, eagle2_expand, select_tree

ARCHITECTURE = "LlamaForCausalLMEagle3"
DRAFT_ROPE_KINDS = ("default", "linear", "llama3")
_IGNORED_KEYS = ("rotary_emb.inv_freq",)


class DraftMismatchError(UserError, ValueError):
    """A draft checkpoint that does not fit the target model it is paired with."""


class DraftCache(Prefixes):
    """Static KV cache of the draft's one attention layer: k, v [max_len, kv_heads, head_dim]. A pass
    starts at an int slot (keys: slots [0, start + T)) or at a 0-d device tensor (static shapes: keys are
    all slots and the pass's mask covers all of them; a static pass is given `upto(end)`, the cache's first
    `kv.bucket(end)` slots; see `acceptmoe.engine.kv`). Its `write` takes what `layers.Attention` hands a
    `KVCache` (the layer index is always 0)."""

    def __init__(self, max_len: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device):
        self.k = torch.zeros(max_len, kv_heads, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.slots = torch.arange(max_len, device=device)                 # [S]
        self._prefixes = {}

    def _prefix(self, n: int) -> DraftCache:
        view = object.__new__(DraftCache)
        view.k, view.v, view.slots = self.k[:n], self.v[:n], self.slots[:n]   # [n, kv_heads, hd], [n]
        return view

    def write(self, layer: int, start: Start, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """k, v [kv_heads, T, hd] to slots start..start+T-1 -> keys, values [1, kv_heads, S', hd]."""
        k, v = k.transpose(0, 1), v.transpose(0, 1)                       # [T, kv_heads, hd]
        T = k.shape[0]
        if isinstance(start, Tensor):
            idx = start + self.slots[:T]
            self.k.index_copy_(0, idx, k)
            self.v.index_copy_(0, idx, v)
            end = self.max_len
        else:
            self.k[start:start + T], self.v[start:start + T] = k, v
            end = start + T
        return self.k[None, :end].transpose(1, 2), self.v[None, :end].transpose(1, 2)

    @property
    def max_len(self) -> int:  # type: ignore[override]  # read-only here; KVCache assigns its own
        return self.k.shape[0]


class MidLayer(nn.Module):
    """The draft's one decoder layer; attention reads concat(norm(embeds), norm(hidden)) of width 2H."""

    def __init__(self, cfg: dict):
        super().__init__()
        H, eps = cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6)
        heads = cfg["num_attention_heads"]
        kv_heads, head_dim = cfg.get("num_key_value_heads") or heads, cfg.get("head_dim") or H // heads
        self.input_layernorm, self.hidden_norm = RMSNorm(H, eps), RMSNorm(H, eps)
        self.post_attention_layernorm = RMSNorm(H, eps)
        self.self_attn = Attention(2 * H, H, heads, kv_heads, head_dim)
        self.mlp = DenseMLP(H, cfg["intermediate_size"])
        self.rope = Rope(rope_config(cfg, DRAFT_ROPE_KINDS), head_dim, cfg.get("max_position_embeddings") or 0)

    def forward(self, embeds: Tensor, hidden: Tensor, positions: Tensor, cache: DraftCache, start: Start,
                mask: Tensor) -> Tensor:
        """mask [T, S'] bool (True: attend; S' = start + T, or max_len for a tensor start)."""
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)   # [T, 2H]
        cos, sin = self.rope(positions, x.dtype, cache.max_len)                           # [T, 1, hd] each
        h = hidden + self.self_attn(x, cos, sin, cache, start, mask)                       # [T, H]
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3Draft(nn.Module):
    """EAGLE-3 draft head. `bind(target)` checks it against the target and shares its embedding if needed."""
    d2t: Tensor                           # the buffers `__init__` registers
    t2d: Tensor

    def __init__(self, config: dict, own_embedding: bool = False):
        super().__init__()
        if config.get("hidden_act", "silu") != "silu":
            raise ValueError(f"draft hidden_act {config['hidden_act']!r} is not supported (only silu)")
        self.config = dict(config)
        H, V = config["hidden_size"], config["vocab_size"]
        Vd = config.get("draft_vocab_size") or V
        self.hidden_size, self.vocab_size, self.draft_vocab_size = H, V, Vd
        target_h = config.get("target_hidden_size") or H
        self.fc = Linear(3 * target_h, H, bias=False)
        self.midlayer = MidLayer(config)
        self.norm = RMSNorm(H, config.get("rms_norm_eps", 1e-6))
        self.lm_head = Linear(H, Vd, bias=False)
        self.embed_tokens = nn.Embedding(V, H) if own_embedding else None
        self.register_buffer("d2t", torch.zeros(Vd, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(V, dtype=torch.bool))
        self._target_embed: Callable[[Tensor], Tensor] | None = None
        self.aux_layer_ids: tuple[int, ...] | None = _aux_ids(config)

    # ----- checkpoint I/O -----
    @classmethod
    def from_pretrained(cls, path: str | Path, device="cpu", dtype: torch.dtype | None = None) -> Eagle3Draft:
        """Load a SpecForge/SGLang EAGLE-3 checkpoint; dtype None keeps the stored dtype."""
        path = Path(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"no config.json in {path}: expected an EAGLE-3 draft checkpoint folder")
        config = read_json(path / "config.json")
        archs = config.get("architectures") or [ARCHITECTURE]
        if not isinstance(archs, list) or ARCHITECTURE not in archs:
            raise CheckpointError(f"{path}: architectures {shown(archs)} is not {ARCHITECTURE} (an EAGLE-3 draft "
                                  f"head); pass an EAGLE-3 draft folder")
        state = _load_state(path)
        own = own_embedding(config) and "embed_tokens.weight" in state
        state = {k: v for k, v in state.items() if own or k != "embed_tokens.weight"}   # unused, as in SGLang
        draft = cls(config, own_embedding=own)
        _check_and_load(draft, state, path)
        stored = state["fc.weight"].dtype
        draft = draft.to(device=device, dtype=dtype or stored).eval()
        for m in draft.modules():
            if isinstance(m, Linear):
                m.freeze()                                   # one mm per call (see layers.Linear)
        return draft

    def save_pretrained(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        config = dict(self.config, architectures=[ARCHITECTURE], draft_vocab_size=self.draft_vocab_size)
        if self.aux_layer_ids is not None:
            config["eagle_config"] = dict(config.get("eagle_config") or {},
                                          eagle_aux_hidden_state_layer_ids=list(self.aux_layer_ids))
        (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(path / "model.safetensors"))

    # ----- pairing with a target -----
    def bind(self, target) -> Eagle3Draft:
        """Check the draft against target (a MoEModel) and share its embedding when the draft has none."""
        tc = target.config
        Ht, L = tc.hidden_size, tc.num_layers
        if self.fc.in_features != 3 * Ht:
            raise DraftMismatchError(
                f"draft fc reads {self.fc.in_features} fused features but 3 x target hidden_size = {3 * Ht}: "
                f"this draft was trained for another target (set target_hidden_size or pair the right draft)")
        if self.aux_layer_ids is None:
            self.aux_layer_ids = (1, L // 2 - 1, L - 4)     # SGLang's default capture, as layer outputs
        bad = [i for i in self.aux_layer_ids if not 0 <= i < L]
        if len(self.aux_layer_ids) != 3 or bad:
            raise DraftMismatchError(
                f"eagle_aux_hidden_state_layer_ids {list(self.aux_layer_ids)} must be 3 layer ids in [0, {L}) "
                f"for a {L}-layer target: fix eagle_config in the draft's config.json")
        if self.vocab_size != tc.vocab_size:
            raise DraftMismatchError(f"draft vocab_size {self.vocab_size} != target vocab_size {tc.vocab_size}")
        if int((torch.arange(self.draft_vocab_size, device=self.d2t.device) + self.d2t).max()) >= tc.vocab_size:
            raise DraftMismatchError("d2t maps a draft token outside the target vocabulary")
        if self.embed_tokens is None:
            if self.hidden_size != Ht:
                raise DraftMismatchError(
                    f"the draft has no embed_tokens and its hidden_size {self.hidden_size} differs from the "
                    f"target's {Ht}, so the target's embedding cannot be shared: add embed_tokens.weight")
            self._target_embed = target.embed
        return self

    # ----- compute -----
    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def new_cache(self, max_len: int) -> DraftCache:
        a = self.midlayer.self_attn
        return DraftCache(max_len, a.nkv, a.D, self.dtype, self.fc.weight.device)

    def embed(self, ids: Tensor) -> Tensor:
        """ids [T] target vocabulary -> [T, H] in the draft dtype."""
        if self.embed_tokens is not None:
            return self.embed_tokens(ids)
        if self._target_embed is None:
            raise RuntimeError("this draft shares the target's embedding: call draft.bind(target) first")
        return self._target_embed(ids).to(self.dtype)

    def to_target(self, draft_ids: Tensor) -> Tensor:
        """Draft vocabulary ids -> target vocabulary ids (d2t holds the offsets)."""
        return draft_ids + self.d2t[draft_ids]

    @torch.no_grad()
    def forward(self, ids: Tensor, hidden: Tensor, positions: Tensor, cache: DraftCache, start: Start,
                mask: Tensor | None = None) -> Tensor:
        """ids [T] target ids; hidden [T, 3*Ht] (target features) or [T, H] (draft outputs).

        mask: None (causal, prefix visible), [T, T] among the new tokens (prefix visible) or
        [T, start + T]; with a tensor start (static shapes) [T, max_len]. Returns the next hidden states
        [T, H] (before the final norm)."""
        T = ids.shape[0]
        if isinstance(start, Tensor):
            if mask is None or mask.shape != (T, cache.max_len):
                raise ValueError(f"a static pass (tensor start) needs a mask [T, max_len] = [{T}, {cache.max_len}]")
        elif start + T > cache.max_len:
            raise ValueError(f"draft cache overflow: {start + T} > max_len {cache.max_len}")
        h = hidden.to(self.dtype)
        if h.shape[-1] == self.fc.in_features:
            h = self.fc(h)
        elif h.shape[-1] != self.hidden_size:
            raise ValueError(f"hidden width {h.shape[-1]} is neither the fused width {self.fc.in_features} "
                             f"nor the draft hidden_size {self.hidden_size}")
        full = mask if isinstance(start, Tensor) else _full_mask(mask, T, start, ids.device)
        return self.midlayer(self.embed(ids), h, positions, cache, start, full)

    @torch.no_grad()
    def logits(self, hidden: Tensor) -> Tensor:
        """[T, H] -> fp32 logits over the draft vocabulary [T, Vd]."""
        return self.lm_head(self.norm(hidden)).float()


def _full_mask(mask: Tensor | None, T: int, start: int, device) -> Tensor:
    """bool [T, start + T]: the prefix is visible unless the mask already covers it."""
    if mask is None:
        mask = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    if mask.shape == (T, start + T):
        return mask
    if mask.shape != (T, T):
        raise ValueError(f"mask must be [T, T] or [T, start + T] = [{T}, {start + T}], got {tuple(mask.shape)}")
    return torch.cat([torch.ones(T, start, dtype=torch.bool, device=device), mask], dim=1)


def _aux_ids(config: dict) -> tuple[int, ...] | None:
    ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    return tuple(int(i) for i in ids) if ids is not None else None


def _load_state(path: Path) -> dict[str, Tensor]:
    files = sorted(path.glob("*.safetensors"))
    state: dict[str, Tensor] = {}
    if files:
        for f in files:
            try:
                state.update(load_file(str(f)))
            except Exception as exc:  # safetensors' own error, or an OSError: a damaged or truncated file
                raise CheckpointError(f"{f} cannot be read as safetensors ({type(exc).__name__}: "
                                      f"{shown(str(exc))}); download or save the draft again") from None
    elif (path / "pytorch_model.bin").is_file():
        state = torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
    else:
        raise FileNotFoundError(f"no *.safetensors or pytorch_model.bin in {path}")
    return {k.removeprefix("model."): v for k, v in state.items() if not k.endswith(_IGNORED_KEYS)}


def own_embedding(config: dict) -> bool:
    """Whether a draft embeds with its own `embed_tokens`: SGLang's rule (`LlamaForCausalLM.set_embed`, which every
    EAGLE-3 draft gets) keeps a draft's own only when its config names a `target_hidden_size` other than its
    `hidden_size`; otherwise the target's embedding replaces it, whatever the checkpoint holds."""
    target = config.get("target_hidden_size")
    return target is not None and target != config["hidden_size"]


def _check_and_load(draft: Eagle3Draft, state: dict[str, Tensor], path: Path) -> None:
    own = draft.state_dict()
    optional = {"d2t", "t2d"}
    missing = sorted(set(own) - set(state) - optional)
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise CheckpointError(f"{path}: not an EAGLE-3 ({ARCHITECTURE}) checkpoint for its config.json: "
                              f"missing {shown(missing)}, unexpected {shown(unexpected)}")
    if "d2t" not in state and draft.draft_vocab_size != draft.vocab_size:
        raise CheckpointError(f"{path}: draft_vocab_size {draft.draft_vocab_size} != vocab_size "
                              f"{draft.vocab_size} but the checkpoint has no d2t mapping")
    for name, value in state.items():
        if tuple(value.shape) != tuple(own[name].shape):
            raise CheckpointError(f"{path}: {name} has shape {tuple(value.shape)}, config.json implies "
                                  f"{tuple(own[name].shape)}")
    draft.load_state_dict({k: v.to(own[k].dtype) if k in ("d2t", "t2d") else v for k, v in state.items()},
                          strict=False)


@dataclass(frozen=True)
class DraftExtend:
    """The drafter's pass over newly committed tokens (an accepted path, or the prompt): what it reads is
    the draft head and its cache (`upto(start + T)`: the prefix a static pass attends over); inputs tokens
    [T], features [T, 3*Ht], start."""
    draft: Eagle3Draft
    cache: DraftCache

    def __call__(self, inputs: Mapping) -> tuple[Tensor, Tensor]:
        """-> (the root's draft state [H], its log-probs [Vd]); causal over the prefix and the new tokens."""
        tokens, start = inputs["tokens"], inputs["start"]
        T = tokens.shape[0]
        positions = start + self.cache.slots[:T]                                         # [T]
        mask = None
        if isinstance(start, Tensor):
            causal = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
            mask = visible_slots(self.cache.slots, start, causal)                        # [T, S]
        out = self.draft(tokens, inputs["features"], positions, self.cache, start, mask)  # [T, H]
        return out[-1], torch.log_softmax(self.draft.logits(out[-1:])[0], dim=-1)


@dataclass(frozen=True)
class DraftLevel:
    """One tree level: its k fed nodes at draft slots L + (level - 1) k, attending to the committed prefix
    [0, L) and to what `tree_mask` [k, level k] shows among the tree slots from L; inputs tokens [k],
    hidden [k, H], positions [k], tree_mask, L (an int eagerly, a 0-d device tensor at static shapes). Its
    cache is the draft cache's `upto(L + level k)`, the prefix a static pass attends over."""
    draft: Eagle3Draft
    cache: DraftCache
    level: int

    def __call__(self, inputs: Mapping) -> tuple[Tensor, Tensor]:
        """-> (hidden [k, H], log-probs [k, Vd])."""
        L, tree_mask = inputs["L"], inputs["tree_mask"]
        k = tree_mask.shape[0]
        if isinstance(L, Tensor):
            full = visible_slots(self.cache.slots, L, tree_mask)                         # [k, S]
        else:
            full = torch.cat([torch.ones(k, L, dtype=torch.bool, device=tree_mask.device), tree_mask], 1)
        out = self.draft(inputs["tokens"], inputs["hidden"], inputs["positions"], self.cache,
                         L + (self.level - 1) * k, full)                                 # [k, H]
        return out, torch.log_softmax(self.draft.logits(out), dim=-1)


class Eagle3Drafter:
    """Proposes EAGLE-2 draft trees with an EAGLE-3 head, keeping its cache in step with the target's.

    Invariant: after `extend`, the draft cache holds one entry per committed target position 0..L-1 (the
    pair (h_i, x_{i+1}) at draft position i), and the draft state for the root x_L is the output at L-1.
    Tree nodes of depth d are fed at draft position L - 1 + d, in cache slots after L. Draft attention follows
    SGLang's EAGLE worker, whose trees the paper verified: level l's k fed nodes occupy k beam slots, and the
    node in slot j takes its tree parent's hidden state but attends to the committed prefix and to the nodes
    fed in slot j at levels 1..l (each slot keeps its own KV history; SGLang's per-step `out_cache_loc` and
    `build_draft_decode_metadata` layout). When the beam in slot j was re-parented, that history is not the
    node's ancestry: SGLang's approximation, kept so both engines build the same trees.

    `steps` (the engine's `StepGraphs`) runs each tree level and each extension by an accepted path at fixed
    shapes (one CUDA graph per level and per length, and per cache bucket (`kv.bucket`), in "graphs" mode)
    and holds the draft cache across generations; without it every pass is eager."""

    def __init__(self, draft: Eagle3Draft, max_len: int, shape: TreeShape, steps=None):
        self.draft, self.shape, self.steps = draft, shape, steps
        n = max_len + (shape.num_steps - 1) * shape.topk
        self.cache = steps.cache("draft", n, draft.new_cache) if steps is not None else draft.new_cache(n)
        self.length = 0
        self.root_hidden: Tensor | None = None    # [H]
        self.root_logp: Tensor | None = None      # [Vd] fp32
        self._tree_masks: dict[int, Tensor] = {}  # level -> its tree mask (`_tree_mask`)

    def _tree_mask(self, level: int) -> Tensor:
        """bool [k, level k]: what level `level`'s k fed nodes see among the tree slots: in each of levels 1..level,
        the node fed in their own beam slot (not the parent's: SGLang's beam-slot KV layout). The same every
        step, so made once per level."""
        mask = self._tree_masks.get(level)
        if mask is None:
            k = self.shape.topk
            assert self.root_logp is not None                          # propose() runs after extend()
            eye = torch.eye(k, dtype=torch.bool, device=self.root_logp.device)
            mask = self._tree_masks[level] = eye.repeat(1, level)
        return mask

    def _run(self, step, inputs: dict) -> tuple[Tensor, Tensor]:
        return step(inputs) if self.steps is None else self.steps.run(step, inputs)

    def extend(self, tokens: Tensor, features: Tensor, start: int) -> None:
        """tokens [T] target ids x_{start+1..start+T}; features [T, 3*Ht] target aux at start..start+T-1.
        An accepted path (T <= num_steps + 1) runs through `steps` (one graph per length); a prompt eagerly."""
        T = tokens.shape[0]
        if start + T > self.cache.max_len:
            raise ValueError(f"draft cache overflow: {start + T} > max_len {self.cache.max_len}")
        inputs = {"tokens": tokens, "features": features, "start": start}
        step = DraftExtend(self.draft, self.cache.upto(start + T))
        if T > self.shape.num_steps + 1:
            self.root_hidden, self.root_logp = step(inputs)                              # the prompt: any length
        else:
            self.root_hidden, self.root_logp = self._run(step, inputs)
        self.length = start + T

    def propose(self, root_token: int) -> DraftTree:
        """The draft tree rooted at the committed token x_L (target position L)."""
        if self.root_logp is None or self.root_hidden is None:
            raise RuntimeError("call extend() with the prompt's target features before propose()")
        L, k, dev = self.length, self.shape.topk, self.root_logp.device
        state = {"hidden": self.root_hidden[None]}

        def step(level: int, fed_tok: Tensor, parent_row: Tensor) -> Tensor:
            rows = parent_row.clamp_min(0)
            inputs = {"tokens": self.draft.to_target(fed_tok), "hidden": state["hidden"][rows],
                      "positions": torch.full((k,), L - 1 + level, device=dev), "tree_mask": self._tree_mask(level),
                      "L": L}
            out, logp = self._run(DraftLevel(self.draft, self.cache.upto(L + level * k), level), inputs)
            state["hidden"] = out
            return logp                                                                  # [k, Vd]

        cand = eagle2_expand(self.root_logp, step, self.shape)
        return select_tree(cand, self.shape, root_token, L, self.draft.to_target)
