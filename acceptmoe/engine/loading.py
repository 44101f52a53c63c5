"""Reading Hugging Face safetensors checkpoints: one `model.safetensors` or shards listed in
`model.safetensors.index.json`, plus the per-layer expert layouts both architectures use on disk.

Expert layouts, all returned as the store's stacked form (see store.py), on the CPU:
- Qwen3-MoE: per-expert `mlp.experts.{j}.{gate,up,down}_proj.weight` (what save_pretrained writes and the
  released checkpoints use) or fused `mlp.experts.gate_up_proj` [E, 2I, H] / `down_proj` [E, H, I].
- GPT-OSS unquantised (save_pretrained): `mlp.experts.gate_up_proj` [E, H, 2I] (interleaved gate/up
  columns), `down_proj` [E, I, H], biases `gate_up_proj_bias` [E, 2I], `down_proj_bias` [E, H].
- GPT-OSS MXFP4 (released checkpoints): `gate_up_proj_blocks` [E, 2I, H/32, 16], `gate_up_proj_scales`
  [E, 2I, H/32], `down_proj_blocks` [E, H, I/32, 16], `down_proj_scales` [E, H, I/32]; kept packed.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from .config import CheckpointError, ModelConfig


class Checkpoint:
    """Name -> tensor access over one or several safetensors files, tensors read on demand to the CPU."""

    def __init__(self, folder: str | Path):
        folder = Path(folder)
        index = folder / "model.safetensors.index.json"
        single = folder / "model.safetensors"
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise CheckpointError(f"{index} is damaged ({type(exc).__name__}: {exc}); restore it from the "
                                      "checkpoint's source or save the checkpoint again") from exc
            self.file_of = {name: folder / f for name, f in weight_map.items()}
        elif single.is_file():
            with _open(single) as f:
                self.file_of = {name: single for name in f.keys()}
        else:
            raise CheckpointError(f"{folder} has no model.safetensors or model.safetensors.index.json; "
                                  "save the weights in safetensors format (save_pretrained does by default)")
        missing = sorted({str(p) for p in self.file_of.values() if not p.is_file()})
        if missing:
            raise CheckpointError(f"shard files listed in the index are missing: {', '.join(missing)}")
        self._handles: dict[Path, object] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.file_of

    def get(self, name: str) -> Tensor:
        if name not in self.file_of:
            raise CheckpointError(f"checkpoint has no tensor {name!r}; is it a complete "
                                  "Qwen3-MoE / GPT-OSS checkpoint of the architecture its config.json names?")
        path = self.file_of[name]
        if path not in self._handles:
            self._handles[path] = _open(path)
        try:
            return self._handles[path].get_tensor(name)
        except SafetensorError as exc:
            raise _damaged(path, exc) from exc

    def close(self) -> None:
        self._handles.clear()


def _damaged(path: Path, exc: Exception) -> CheckpointError:
    return CheckpointError(f"{path} is not a readable safetensors file ({exc}): it is truncated or corrupted; "
                           "download or save the checkpoint again")


def _open(path: Path):
    try:
        return safe_open(path, "pt")
    except SafetensorError as exc:
        raise _damaged(path, exc) from exc


def expert_weights(ckpt: Checkpoint, cfg: ModelConfig, layer: int, dtype: torch.dtype) -> dict[str, Tensor]:
    """One MoE layer's experts in the store's stacked form, on the CPU (packed MXFP4 stays uint8)."""
    p = f"model.layers.{layer}.mlp.experts"
    if cfg.arch == "qwen3_moe":
        if f"{p}.gate_up_proj" in ckpt:
            return {"w1": ckpt.get(f"{p}.gate_up_proj").to(dtype), "w2": ckpt.get(f"{p}.down_proj").to(dtype)}
        w1 = torch.stack([torch.cat((ckpt.get(f"{p}.{j}.gate_proj.weight"), ckpt.get(f"{p}.{j}.up_proj.weight")))
                          for j in range(cfg.num_experts)])                   # [E, 2I, H]
        w2 = torch.stack([ckpt.get(f"{p}.{j}.down_proj.weight") for j in range(cfg.num_experts)])  # [E, H, I]
        return {"w1": w1.to(dtype), "w2": w2.to(dtype)}
    out = {"b1": ckpt.get(f"{p}.gate_up_proj_bias").to(dtype), "b2": ckpt.get(f"{p}.down_proj_bias").to(dtype)}
    if f"{p}.gate_up_proj_blocks" in ckpt:
        for ours, theirs in (("w1", "gate_up_proj"), ("w2", "down_proj")):
            out[f"{ours}_blocks"] = ckpt.get(f"{p}.{theirs}_blocks").to(torch.uint8)
            out[f"{ours}_scales"] = ckpt.get(f"{p}.{theirs}_scales").to(torch.uint8)
        return out
    out["w1"] = ckpt.get(f"{p}.gate_up_proj").transpose(1, 2).contiguous().to(dtype)   # [E, 2I, H]
    out["w2"] = ckpt.get(f"{p}.down_proj").transpose(1, 2).contiguous().to(dtype)      # [E, H, I]
    return out


def module_state(ckpt: Checkpoint, cfg: ModelConfig, wanted: list[str]) -> dict[str, Tensor]:
    """The non-expert parameters by our module names. Our names are the checkpoint's without the `model.`
    prefix, except the router (`mlp.gate` in Qwen3, `mlp.router` in GPT-OSS -> `mlp.router`) and a tied
    lm_head."""
    state = {}
    for name in wanted:
        src = name if name.startswith("lm_head.") else f"model.{name}"
        if cfg.arch == "qwen3_moe" and ".mlp.router." in name:
            src = src.replace(".mlp.router.", ".mlp.gate.")
        if name == "lm_head.weight" and src not in ckpt and cfg.tie_word_embeddings:
            src = "model.embed_tokens.weight"
        state[name] = ckpt.get(src)
    return state
