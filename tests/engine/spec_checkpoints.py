"""Tiny random checkpoints for the engine tests: a Qwen3-MoE target saved by transformers and an EAGLE-3
draft written directly in the SpecForge format (config.json + model.safetensors with SpecForge's names)."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

VOCAB, HIDDEN, LAYERS, EXPERTS, TOP_K = 128, 64, 4, 16, 4
DRAFT_VOCAB, AUX_IDS = 96, (0, 1, 2)


def make_target(folder: Path, seed: int = 0, eos: int = 1, init: float = 0.15) -> Path:
    """Random tiny Qwen3-MoE; a large init range makes the greedy argmax well separated."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    cfg = Qwen3MoeConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=96, moe_intermediate_size=32,
                         num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         num_experts=EXPERTS, num_experts_per_tok=TOP_K, norm_topk_prob=True,
                         max_position_embeddings=512, eos_token_id=eos, bos_token_id=0, pad_token_id=0,
                         tie_word_embeddings=False, initializer_range=init)
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(cfg).float().eval()
    model.save_pretrained(folder)
    return folder


def draft_state(seed: int = 1, draft_vocab: int = DRAFT_VOCAB, hidden: int = HIDDEN, target_hidden: int = HIDDEN,
                own_embedding: bool = False, std: float = 0.2, vocab: int = VOCAB) -> dict[str, torch.Tensor]:
    """SpecForge EAGLE-3 tensors with random values; d2t maps draft ids to a fixed subset of the vocabulary."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g) * std
    heads, kv, hd, inter = 4, 2, 16, 96
    state = {
        "fc.weight": r(hidden, 3 * target_hidden),
        "midlayer.input_layernorm.weight": torch.ones(hidden),
        "midlayer.hidden_norm.weight": torch.ones(hidden),
        "midlayer.post_attention_layernorm.weight": torch.ones(hidden),
        "midlayer.self_attn.q_proj.weight": r(heads * hd, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": r(kv * hd, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": r(kv * hd, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": r(hidden, heads * hd),
        "midlayer.mlp.gate_proj.weight": r(inter, hidden),
        "midlayer.mlp.up_proj.weight": r(inter, hidden),
        "midlayer.mlp.down_proj.weight": r(hidden, inter),
        "norm.weight": torch.ones(hidden),
        "lm_head.weight": r(draft_vocab, hidden),
    }
    hot = torch.sort(torch.randperm(vocab, generator=g)[:draft_vocab]).values
    state["d2t"] = hot - torch.arange(draft_vocab)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[hot] = True
    state["t2d"] = t2d
    if own_embedding:
        state["embed_tokens.weight"] = r(vocab, hidden)
    return state


def draft_config(draft_vocab: int = DRAFT_VOCAB, hidden: int = HIDDEN, aux_ids=AUX_IDS, **extra) -> dict:
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": hidden,
           "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
           "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None,
           "max_position_embeddings": 512, "vocab_size": VOCAB, "draft_vocab_size": draft_vocab,
           "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "float32"}
    if aux_ids is not None:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(aux_ids), "use_aux_hidden_state": True}
    cfg.update(extra)
    return cfg


def make_draft(folder: Path, seed: int = 1, config: dict | None = None, **state_kw) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config or draft_config(), indent=2))
    save_file(draft_state(seed, **state_kw), str(folder / "model.safetensors"))
    return folder


def make_pair(root: Path, seed: int = 0) -> Path:
    make_target(root / "target", seed=seed)
    make_draft(root / "draft", seed=seed + 1)
    return root


_BUILT: dict[tuple, Path] = {}


def cached_target(seed: int = 0) -> Path:
    """One tiny target folder per seed and test process (building imports transformers, which is slow)."""
    import atexit
    import shutil
    import tempfile
    if ("target", seed) not in _BUILT:
        root = Path(tempfile.mkdtemp(prefix="acceptmoe-spec-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        _BUILT[("target", seed)] = make_target(root / "target", seed=seed)
    return _BUILT[("target", seed)]


def one_thread():
    """Generator for a module fixture: tiny tensors run several times faster on one intra-op thread when
    the machine's cores are shared (thread hand-offs dominate), so these modules use one and restore it."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
