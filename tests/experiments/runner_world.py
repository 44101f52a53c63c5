"""A tiny real setup for the runner tests: a BPE tokenizer trained on tiny-task text (with the ChatML chat
template), a random Qwen3-MoE target saved by transformers and a random EAGLE-3 draft in SpecForge format,
plus a preset YAML pointing at them."""
from __future__ import annotations

from pathlib import Path

import torch
import yaml

from acceptmoe.engine.eagle3 import Eagle3Draft
from acceptmoe.evals import generators as tasks
from acceptmoe.tiny import tokenizer

from fixtures import tiny_qwen3_moe

TASKS = ("tiny-gsm", "tiny-mbpp")


def make_models(root: Path, vocab_size: int = 384, seed: int = 0) -> Path:
    """root/target (weights + tokenizer) and root/draft; `seed`: the target's random weights."""
    texts = [ex for fam in TASKS for ex in tasks.generate(fam, "train", 150)]
    tok = tokenizer.build(tokenizer.corpus(texts), vocab_size, root / "target")
    V = len(tok)
    tiny_qwen3_moe(root / "target", seed=seed, vocab_size=V, eos_token_id=tok.eos_token_id,
                   pad_token_id=tok.pad_token_id, bos_token_id=None, num_hidden_layers=3)
    torch.manual_seed(1)
    draft = Eagle3Draft({"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
                         "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 1, "rms_norm_eps": 1e-6,
                         "rope_theta": 10000.0, "max_position_embeddings": 2048, "vocab_size": V,
                         "draft_vocab_size": V, "hidden_act": "silu", "model_type": "llama",
                         "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}})
    draft.save_pretrained(root / "draft")
    return root


def write_preset(root: Path, models: Path, **table1) -> Path:
    preset = {
        "preset": "test",
        "models": [{"name": "rand", "target": str(models / "target"), "draft": str(models / "draft")}],
        "tasks": list(TASKS), "device": "cpu", "dtype": "float32", "threads": 1,
        "tree": {"num_steps": 3, "topk": 4, "num_draft_tokens": 12},
        "b0": {"resamples": 300}, "bootstrap": {"resamples": 300},
        "generation": {"max_new_tokens": 8, "timed_tokens": 6}, "calibration": {"prompts": 2},
        "table1": {"limit": 3, **table1},
    }
    path = root / "test-preset.yaml"
    path.write_text(yaml.safe_dump(preset))
    return path
