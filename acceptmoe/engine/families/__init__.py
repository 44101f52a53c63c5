"""Model families: one file per family (`<model_type>.py`, exporting `FAMILY`), one lazy line each in `FAMILIES`.

A family is everything the engine must know about a Hugging Face MoE architecture that config.json fields
alone do not say: how its config.json maps onto `config.ModelConfig`, how a MoE layer's experts are laid out
in the checkpoint (read into the store's stacked form, `memory.stored_form`), and how its module names differ
from ours. docs/models.md lists the families and the steps to add one. This module imports nothing from the
engine, so `config` can look families up without an import cycle.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from acceptmoe.registry import Registry


@dataclass(frozen=True)
class Family:
    name: str                                  # config.json's model_type
    label: str                                 # how docs and check-model name it
    parse: Callable                            # (raw config.json dict, extra eos ids) -> ModelConfig
    experts: Callable                          # (Checkpoint, ModelConfig, layer, out) -> None: one MoE layer
    names: tuple[tuple[str, str], ...] = ()    # (our module-name part, the checkpoint's), replaced in order
    packed: str = ""                           # a layer's tensor (after `model.layers.{i}.`) whose presence
                                               # means MXFP4-packed experts
    transformers: str = ""                     # transformers' causal-LM class (check-model's reference)

    def checkpoint_name(self, ours: str) -> str:
        """Our parameter name -> the checkpoint's (`model.` prefix added, except the LM head)."""
        src = ours if ours.startswith("lm_head.") else f"model.{ours}"
        for a, b in self.names:
            src = src.replace(a, b)
        return src


FAMILIES: Registry[Family] = Registry("model family", fix="see docs/models.md for adding one")
FAMILIES.lazy("qwen3_moe", "acceptmoe.engine.families.qwen3_moe:FAMILY")
FAMILIES.lazy("gpt_oss", "acceptmoe.engine.families.gpt_oss:FAMILY")
FAMILIES.lazy("mixtral", "acceptmoe.engine.families.mixtral:FAMILY")
FAMILIES.lazy("olmoe", "acceptmoe.engine.families.olmoe:FAMILY")
FAMILIES.lazy("qwen2_moe", "acceptmoe.engine.families.qwen2_moe:FAMILY")
FAMILIES.lazy("deepseek_v3", "acceptmoe.engine.families.deepseek_v3:FAMILY")
FAMILIES.lazy("dots1", "acceptmoe.engine.families.dots1:FAMILY")
