"""Reading Hugging Face safetensors checkpoints: one `model.safetensors` or shards listed in
`model.safetensors.index.json`, and the expert layouts families share (`PerExpert`).

Each MoE layer's experts are written, one layer at a time, into the store's stacked form (`memory.stored_form`:
`expert_weights(..., out=store.receive(layer))`, on whatever device the store keeps it), converted to the load
dtype as they are copied, with no staging copy of the layer. How a family lays them out on disk is its record's
`experts` reader (`families/`): `PerExpert` for SwiGLU experts saved one by one (what save_pretrained writes for
Qwen3-MoE, Mixtral, OLMoE, Qwen2-MoE, DeepSeek-V3) or fused [E, 2I, H] / [E, H, I]; GPT-OSS has its own.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from .config import CheckpointError, ModelConfig
from .families import FAMILIES
from .memory import stored_form


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
                self.file_of = {name: single for name in f.keys()}  # noqa: SIM118 (a safe_open handle has no __iter__)
        else:
            raise CheckpointError(f"{folder} has no model.safetensors or model.safetensors.index.json; "
                                  "save the weights in safetensors format (save_pretrained does by default)")
        missing = sorted({str(p) for p in self.file_of.values() if not p.is_file()})
        if missing:
            raise CheckpointError(f"shard files listed in the index are missing: {', '.join(missing)}")
        self._handles: dict[Path, Any] = {}            # safetensors' safe_open handles

    def __contains__(self, name: str) -> bool:
        return name in self.file_of

    def get(self, name: str) -> Tensor:
        if name not in self.file_of:
            raise CheckpointError(f"checkpoint has no tensor {name!r}: it is incomplete, or its weights are not of "
                                  "the model family its config.json names; download or save the checkpoint again")
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


def packed_experts(ckpt: Checkpoint, cfg: ModelConfig) -> bool:
    """Whether the checkpoint stores its experts MXFP4-packed (the family's `packed` tensor is present)."""
    packed = FAMILIES[cfg.arch].packed
    return bool(packed) and f"model.layers.{cfg.moe.layer_ids[0]}.{packed}" in ckpt


def expert_weights(ckpt: Checkpoint, cfg: ModelConfig, layer: int, dtype: torch.dtype,
                   out: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
    """One MoE layer's experts in the store's stacked form (packed MXFP4 stays uint8), written into `out`
    (tensors of `memory.stored_form`'s shapes and dtypes on any device, e.g. `ExpertStore.receive(layer)`)
    tensor by tensor as the checkpoint holds them, converted to `dtype` on the way; `out` None: new CPU tensors.
    A checkpoint tensor whose shape differs from the form's is a CheckpointError naming it."""
    if out is None:
        form = stored_form(cfg, dtype, packed_experts(ckpt, cfg))
        out = {n: torch.empty(t.shape, dtype=t.dtype) for n, t in form.items()}
    FAMILIES[cfg.arch].experts(ckpt, cfg, layer, out)
    return out


@dataclass(frozen=True)
class PerExpert:
    """SwiGLU experts under `model.layers.{i}.{prefix}`: one by one (`{j}.{gate}.weight` [I, H], `{j}.{up}.weight`
    [I, H], `{j}.{down}.weight` [H, I]) or fused (`gate_up_proj` [E, 2I, H], gate rows first; `down_proj`
    [E, H, I]), into w1 [E, 2I, H] (gate rows, then up rows) and w2 [E, H, I]."""
    prefix: str = "mlp.experts"
    gate: str = "gate_proj"
    up: str = "up_proj"
    down: str = "down_proj"

    def __call__(self, ckpt: Checkpoint, cfg: ModelConfig, layer: int, out: dict[str, Tensor]) -> None:
        p = f"model.layers.{layer}.{self.prefix}"
        if f"{p}.gate_up_proj" in ckpt:
            write(out["w1"], ckpt, f"{p}.gate_up_proj")
            write(out["w2"], ckpt, f"{p}.down_proj")
            return
        I = cfg.moe.intermediate_size
        for j in range(cfg.moe.num_experts):
            write(out["w1"][j, :I], ckpt, f"{p}.{j}.{self.gate}.weight")
            write(out["w1"][j, I:], ckpt, f"{p}.{j}.{self.up}.weight")
            write(out["w2"][j], ckpt, f"{p}.{j}.{self.down}.weight")


def write(dst: Tensor, ckpt: Checkpoint, name: str, transposed: bool = False) -> None:
    """Copy checkpoint tensor `name` (its last two dims swapped when `transposed`) into `dst`."""
    src = ckpt.get(name)
    src = src.transpose(-1, -2) if transposed else src
    if tuple(src.shape) != tuple(dst.shape):
        raise CheckpointError(f"checkpoint tensor {name!r} has shape {tuple(src.shape)}{' transposed' * transposed}, "
                              f"config.json implies {tuple(dst.shape)}: the weights and config.json do not belong "
                              f"together; restore the checkpoint's own config.json")
    dst.copy_(src)


def module_state(ckpt: Checkpoint, cfg: ModelConfig, wanted: list[str]) -> dict[str, Tensor]:
    """The non-expert parameters by our module names: the checkpoint's names through the family's renames
    (`Family.checkpoint_name`), and a tied LM head read from the embedding."""
    family, state = FAMILIES[cfg.arch], {}
    for name in wanted:
        src = family.checkpoint_name(name)
        if name == "lm_head.weight" and src not in ckpt and cfg.tie_word_embeddings:
            src = "model.embed_tokens.weight"
        state[name] = ckpt.get(src)
    return state
