"""Reading Hugging Face safetensors checkpoints: one `model.safetensors` or shards listed in
`model.safetensors.index.json`, plus the per-layer expert layouts both architectures use on disk.

Expert layouts, each written one MoE layer at a time into the store's stacked form (`memory.stored_form`:
`expert_weights(..., out=store.receive(layer))`, on whatever device the store keeps it), converted to the load
dtype as it is copied, with no staging copy of the layer:
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


def packed_experts(ckpt: Checkpoint, cfg: ModelConfig) -> bool:
    """Whether the checkpoint stores its experts MXFP4-packed (GPT-OSS's released layout)."""
    return cfg.arch == "gpt_oss" and f"model.layers.{cfg.moe_layer_ids[0]}.mlp.experts.gate_up_proj_blocks" in ckpt


def expert_weights(ckpt: Checkpoint, cfg: ModelConfig, layer: int, dtype: torch.dtype,
                   out: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
    """One MoE layer's experts in the store's stacked form (packed MXFP4 stays uint8), written into `out`
    (tensors of `memory.stored_form`'s shapes and dtypes on any device, e.g. `ExpertStore.receive(layer)`)
    tensor by tensor as the checkpoint holds them, converted to `dtype` on the way; `out` None: new CPU tensors.
    A checkpoint tensor whose shape differs from the form's is a CheckpointError naming it."""
    if out is None:
        form = stored_form(cfg, dtype, packed_experts(ckpt, cfg))
        out = {n: torch.empty(t.shape, dtype=t.dtype) for n, t in form.items()}
    p = f"model.layers.{layer}.mlp.experts"
    if cfg.arch == "qwen3_moe":
        if f"{p}.gate_up_proj" in ckpt:
            _write(out["w1"], ckpt, f"{p}.gate_up_proj")
            _write(out["w2"], ckpt, f"{p}.down_proj")
            return out
        I = cfg.moe_intermediate_size
        for j in range(cfg.num_experts):                                  # w1 [E, 2I, H]: gate rows, then up rows
            _write(out["w1"][j, :I], ckpt, f"{p}.{j}.gate_proj.weight")
            _write(out["w1"][j, I:], ckpt, f"{p}.{j}.up_proj.weight")
            _write(out["w2"][j], ckpt, f"{p}.{j}.down_proj.weight")    # [H, I]
        return out
    _write(out["b1"], ckpt, f"{p}.gate_up_proj_bias")
    _write(out["b2"], ckpt, f"{p}.down_proj_bias")
    if "w1_blocks" in out:
        for ours, theirs in (("w1", "gate_up_proj"), ("w2", "down_proj")):
            _write(out[f"{ours}_blocks"], ckpt, f"{p}.{theirs}_blocks")
            _write(out[f"{ours}_scales"], ckpt, f"{p}.{theirs}_scales")
        return out
    _write(out["w1"], ckpt, f"{p}.gate_up_proj", transposed=True)       # [E, H, 2I] on disk -> [E, 2I, H]
    _write(out["w2"], ckpt, f"{p}.down_proj", transposed=True)          # [E, I, H] on disk -> [E, H, I]
    return out


def _write(dst: Tensor, ckpt: Checkpoint, name: str, transposed: bool = False) -> None:
    """Copy checkpoint tensor `name` (its last two dims swapped when `transposed`) into `dst`."""
    src = ckpt.get(name)
    src = src.transpose(-1, -2) if transposed else src
    if tuple(src.shape) != tuple(dst.shape):
        raise CheckpointError(f"checkpoint tensor {name!r} has shape {tuple(src.shape)}{' transposed' * transposed}, "
                              f"config.json implies {tuple(dst.shape)}: the weights and config.json do not belong "
                              f"together; restore the checkpoint's own config.json")
    dst.copy_(src)


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
