"""Tiny random Hugging Face checkpoints of every model family, written with transformers' own classes: the
tests' names for `acceptmoe.testing` (one definition with gpu-check's parity check, which builds them at run
time), and `FAMILIES`, every family `acceptmoe.testing.SMALL` has a config for.

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
from acceptmoe.testing import SMALL, random_checkpoint  # one definition, shared with gpu-check's parity check


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
    configs, `acceptmoe.testing.SMALL`); returns the transformers model (eval, fp32)."""
    return random_checkpoint(family, folder, seed, **overrides)


FAMILIES = tuple(SMALL)


def write_task_file(folder, name="my-arith", grader="numeric", **over):
    """A task YAML (evals.tasks.from_file) over tiny-gsm problems, test and train splits of 6, checksummed."""
    import hashlib
    import json

    import yaml

    from acceptmoe.evals import generators
    folder.mkdir(parents=True, exist_ok=True)
    splits = {}
    for split in ("test", "train"):
        rows = [{"question": e["question"], "answer": e["answer"]} for e in generators.generate("tiny-gsm", split, 6)]
        data = folder / f"{name}-{split}.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        splits[split] = {"file": data.name, "sha256": hashlib.sha256(data.read_bytes()).hexdigest()}
    spec = {"name": name, "version": "1", "grader": grader, "prompt": "{question}", "answer": "answer",
            "splits": splits, **over}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path
