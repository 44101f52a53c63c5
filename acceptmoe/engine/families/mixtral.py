"""Mixtral: softmax then top-k, always renormalised; SwiGLU experts saved as `block_sparse_moe.experts.{j}.w1`
(gate), `w3` (up), `w2` (down); the router is `block_sparse_moe.gate`; no attention biases or norms; an
optional sliding window on every layer."""
from __future__ import annotations

from ..config import ModelConfig, common_fields, routed, silu_experts
from ..loading import PerExpert
from . import Family


def parse(raw: dict, extra_eos: tuple[int, ...]) -> ModelConfig:
    silu_experts(raw, "Mixtral")
    common = common_fields(raw, extra_eos)
    n = common["num_layers"]
    return ModelConfig(
        **common, moe_intermediate_size=raw["intermediate_size"], dense_intermediate_size=0,
        moe_layers=(True,) * n, windows=(raw.get("sliding_window"),) * n,
        router=routed(raw, "softmax_topk", renormalize=True), expert_activation="swiglu",
    )


FAMILY = Family("mixtral", "Mixtral", parse, PerExpert("block_sparse_moe.experts", "w1", "w3", "w2"),
                names=((".mlp.router.", ".block_sparse_moe.gate."),), transformers="MixtralForCausalLM")
