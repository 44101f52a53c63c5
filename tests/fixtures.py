"""Tiny random Hugging Face checkpoints of every model family, written with transformers' own classes.

Used by the tests (parity against transformers) and by anyone who needs a small target to exercise the
engine without a trained model. `write_mxfp4_experts` turns a GPT-OSS folder into the packed MXFP4 layout
of the released checkpoints and returns the dequantised weights a reference model must use.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from acceptmoe.engine import mxfp4

from acceptmoe.experiments.gpucheck.parity import SMALL, random_checkpoint   # one definition, shared with
                                                                             # gpu-check's parity check


def tiny_qwen3_moe(folder: str | Path, seed: int = 0, **overrides):
    """Random Qwen3MoeForCausalLM saved to `folder`; returns the transformers model (eval, fp32)."""
    return random_checkpoint("qwen3_moe", folder, seed, **overrides)


def tiny_gpt_oss(folder: str | Path, seed: int = 0, **overrides):
    """Random GptOssForCausalLM saved to `folder`, with expert weights and sinks large enough that the
    SwiGLU clamps and the sinks matter; returns the transformers model (eval, fp32)."""
    return random_checkpoint("gpt_oss", folder, seed, **overrides)


def write_mxfp4_experts(folder: str | Path) -> dict[str, torch.Tensor]:
    """Rewrite a (single-file) GPT-OSS checkpoint's expert matrices as MXFP4 `*_blocks`/`*_scales`.

    Returns {original key: dequantised tensor in transformers' in-memory layout [E, in, out]} to load into
    the reference model."""
    folder = Path(folder)
    state = load_file(folder / "model.safetensors")
    reference = {}
    for key in [k for k in state if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        w = state.pop(key).transpose(1, 2).contiguous()                  # [E, out, in]
        blocks, scales = mxfp4.quantize(w)                               # [E, out, in/32, 16], [E, out, in/32]
        state[f"{key}_blocks"], state[f"{key}_scales"] = blocks, scales
        reference[key] = mxfp4.dequantize(blocks, scales, torch.float32).transpose(1, 2).contiguous()
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((folder / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return reference



def tiny_family(family: str, folder: str | Path, seed: int = 0, **overrides):
    """A random small checkpoint of `family` (config.json's model_type) saved to `folder` (gpu-check's parity
    configs, `gpucheck.parity.SMALL`); returns the transformers model (eval, fp32)."""
    return random_checkpoint(family, folder, seed, **overrides)


FAMILIES = tuple(SMALL)
