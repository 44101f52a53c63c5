"""Verifier-side expert selection for MoE speculative decoding: the readable per-block reference.

    block = BlockInfo.from_parents(parents)
    router = Router(kind="softmax_topk", top_k=8, renormalize=True)
    sel = select("acceptmoe", logits, block, router, SelectorConfig(p_hat=table.p_hat))   # reference
    ids, weights = route(logits, sel.eligible, router)

Every top-k and ranking follows one rule, `topk` (value descending, ties to the lower index). The batched
verifier an engine calls per MoE layer (torch and Triton backends) is `acceptmoe.kernels.make_verifier`.
"""
from .commitment import CommitmentTable
from .config import ConfigError, SelectorConfig
from .pruning import prune_nonresident
from .registry import (B0_METHOD, BASELINE, CALIBRATION, METHODS, REFERENCE, MethodSpec, UnknownMethodError, fixed_twin,
                       get_method)
from .routing import ROUTER_KINDS, Router, route
from .fixed import block_sum
from .selectors import Selection, commitment_weights, effective_rank_size, select
from .topk import order_desc, rank_desc, topk
from .tree import BlockInfo, TreeError
from .variant import Variant

__all__ = [
    "B0_METHOD", "BASELINE", "CALIBRATION", "REFERENCE", "BlockInfo", "CommitmentTable", "block_sum", "ConfigError",
    "METHODS", "MethodSpec", "ROUTER_KINDS", "Router", "SelectorConfig", "Selection", "TreeError",
    "UnknownMethodError", "Variant", "commitment_weights", "effective_rank_size", "fixed_twin", "get_method",
    "order_desc", "prune_nonresident", "rank_desc", "route", "select", "topk",
]
