"""The paper's hardware and expert shapes, shared by the replay, bench-kernel and gpu-check: a model's MoE
expert dimensions, storage format and depth (with random weights made in that format), and the GPUs'
published bandwidths (`GPUS`, the bound columns' one source).

    >>> shape = get_shape("qwen3-30b-a3b")
    >>> shape.stored_bytes(), shape.num_layers          # one expert in bf16: 3 x 2048 x 768 x 2 B
    (9437184, 48)
    >>> get_shape("gpt-oss-120b").stored_bytes()        # MXFP4 blocks + scales, bf16 biases
    13236480

`tiny` is the embedded model's own shape (read from its config.json); a model folder path gives that model's
shape. Published shapes come from the models' released config.json files.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from acceptmoe.engine.config import DTYPES, ModelConfig
from acceptmoe.engine.mxfp4 import BLOCK
from acceptmoe.engine.store import ExpertMath
from acceptmoe.errors import UserError
from acceptmoe.paths import REPO

FORMATS = ("dense", "mxfp4")


@dataclass(frozen=True)
class DeviceBound:
    """A GPU's published bandwidths: device memory and host-to-device (GB/s = 1e9 B/s); `h2d_typical_gbps`:
    what pinned host-to-device copies measure on that link in practice (`PCIE5_TYPICAL`); `memory_gib`: its
    device memory as published (vendors' "GB" of device memory are binary: the RTX 5090's 32 GB are 32 GiB;
    `plan` checks a run's device bytes against it)."""
    name: str
    memory_gbps: float
    h2d_gbps: float
    h2d_typical_gbps: float | None = None
    memory_gib: float | None = None

    @property
    def h2d_typical(self) -> float:
        """What pinned host-to-device copies move in practice: the measured-typical figure, or the published
        one where none is given."""
        return self.h2d_typical_gbps or self.h2d_gbps


# Pinned copies over PCIe 5.0 x16 (63 GB/s per direction published) measure about 53 GB/s: 52.8 GB/s on an H100
# with nvbandwidth (NVIDIA/nvbandwidth issue #24), the same 80-85 % of peak PCIe 4.0 x16 shows (24-26 of 31.5 GB/s,
# RTX 4090, issue #15).
PCIE5_TYPICAL = 53
GPUS = (DeviceBound("H200", 4800, 63, PCIE5_TYPICAL, memory_gib=141),           # HBM3e; PCIe 5.0 x16
        DeviceBound("RTX PRO 6000", 1790, 63, PCIE5_TYPICAL, memory_gib=96),     # Blackwell workstation, GDDR7
        DeviceBound("RTX 5090", 1790, 63, PCIE5_TYPICAL, memory_gib=32))


@dataclass(frozen=True)
class ExpertShape:
    name: str
    hidden_size: int                 # H
    intermediate_size: int           # I (per expert)
    num_experts: int                 # E
    top_k: int
    num_layers: int                  # MoE layers of the model
    activation: str                  # ExpertMath.activation: swiglu | clamped_swiglu
    format: str = "dense"            # how the checkpoint stores expert weights: dense | mxfp4 (packed)
    dtype: torch.dtype = torch.bfloat16   # the compute dtype (the dense format's stored dtype)
    bias: bool = False               # b1 [2I], b2 [H] per expert (GPT-OSS)
    source: str = ""                 # where the numbers come from

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format {self.format!r}; valid: {', '.join(FORMATS)}")
        if self.format == "mxfp4" and (self.hidden_size % BLOCK or self.intermediate_size % BLOCK):
            raise ValueError(f"MXFP4 needs H and I divisible by {BLOCK}")

    def dense_bytes(self, dtype: torch.dtype | None = None) -> int:
        """One expert dense in `dtype` (default the compute dtype): what the resident store's matmuls read."""
        size = torch.empty((), dtype=dtype or self.dtype).element_size()
        H, I = self.hidden_size, self.intermediate_size
        return size * (3 * H * I + (2 * I + H if self.bias else 0))

    def stored_bytes(self, dtype: torch.dtype | None = None) -> int:
        """One expert as stored in host memory (what an offloaded load moves): dense in `dtype`, or MXFP4
        blocks and scales (biases in `dtype`)."""
        if self.format == "dense":
            return self.dense_bytes(dtype)
        H, I = self.hidden_size, self.intermediate_size
        size = torch.empty((), dtype=dtype or self.dtype).element_size()
        packed = 2 * I * (H // BLOCK) * 17 + H * (I // BLOCK) * 17                  # 16 B blocks + 1 B scale
        return packed + (size * (2 * I + H) if self.bias else 0)

    def math(self, dtype: torch.dtype) -> ExpertMath:
        return ExpertMath(self.activation, dtype)

    def stored_weights(self, dtype: torch.dtype, seed: int) -> dict[str, Tensor]:
        """Random weights of all E experts in the stored format, on the CPU (the ExpertStore's stacked
        layout): dense w1 [E, 2I, H], w2 [E, H, I] in `dtype`, or MXFP4 `*_blocks` / `*_scales`; biases in
        `dtype`. Values are small (std 0.02; MXFP4 scales 2^-6) so activations stay finite."""
        E, H, I = self.num_experts, self.hidden_size, self.intermediate_size
        g = torch.Generator().manual_seed(seed)
        out: dict[str, Tensor] = {}
        if self.format == "dense":
            for name, shape in (("w1", (E, 2 * I, H)), ("w2", (E, H, I))):
                out[name] = torch.randn(shape, generator=g, dtype=torch.float32).mul_(0.02).to(dtype)
        else:
            for name, (rows, cols) in (("w1", (2 * I, H)), ("w2", (H, I))):
                out[f"{name}_blocks"] = torch.randint(0, 256, (E, rows, cols // BLOCK, BLOCK // 2), generator=g,
                                                      dtype=torch.uint8)
                out[f"{name}_scales"] = torch.full((E, rows, cols // BLOCK), 127 - 6, dtype=torch.uint8)
        if self.bias:
            out["b1"] = (torch.randn(E, 2 * I, generator=g) * 0.02).to(dtype)
            out["b2"] = (torch.randn(E, H, generator=g) * 0.02).to(dtype)
        return out

    def describe(self) -> dict:
        d = dataclasses.asdict(self)
        d["dtype"] = str(self.dtype).removeprefix("torch.")
        return {**d, "stored_bytes": self.stored_bytes(), "dense_bytes": self.dense_bytes()}


SHAPES: dict[str, ExpertShape] = {
    "qwen3-30b-a3b": ExpertShape("qwen3-30b-a3b", 2048, 768, 128, 8, 48, "swiglu",
                                 source="Qwen/Qwen3-30B-A3B config.json (hidden 2048, moe_intermediate 768, "
                                        "128 experts, top-8, 48 layers, bf16)"),
    "gpt-oss-120b": ExpertShape("gpt-oss-120b", 2880, 2880, 128, 4, 36, "clamped_swiglu", format="mxfp4", bias=True,
                                source="openai/gpt-oss-120b config.json (hidden 2880, intermediate 2880, 128 "
                                       "experts, top-4, 36 layers, MXFP4 experts, bf16 biases)"),
}
BUILTIN_FOLDERS = {"tiny": REPO / "models" / "tiny" / "target"}


def shape_of_folder(name: str, folder: Path) -> ExpertShape:
    """A model folder's own expert shape (its config.json; MXFP4 when its checkpoint says so)."""
    cfg = ModelConfig.from_folder(folder)
    quant = (cfg_json(folder).get("quantization_config") or {}).get("quant_method")
    return ExpertShape(name, cfg.hidden_size, cfg.moe.intermediate_size, cfg.moe.num_experts, cfg.moe.top_k,
                       len(cfg.moe.layer_ids), cfg.moe.activation, format="mxfp4" if quant == "mxfp4" else "dense",
                       dtype=cfg.dtype, bias=cfg.moe.expert_bias, source=f"{folder}/config.json")


def cfg_json(folder: Path) -> dict:
    import json
    return json.loads((Path(folder) / "config.json").read_text())


def get_shape(name: str) -> ExpertShape:
    """A registered shape, `tiny`, or a model folder (holding config.json)."""
    if name in SHAPES:
        return SHAPES[name]
    if name in BUILTIN_FOLDERS:
        return shape_of_folder(name, BUILTIN_FOLDERS[name])
    folder = Path(name)
    if (folder / "config.json").is_file():
        return shape_of_folder(folder.name, folder)
    raise UserError(f"unknown shape {name!r}; valid: {', '.join([*BUILTIN_FOLDERS, *SHAPES])}, or a model folder "
                    f"holding config.json")


def parse_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise UserError(f"dtype {name!r}; valid: auto, {', '.join(DTYPES)}")
    return DTYPES[name]
