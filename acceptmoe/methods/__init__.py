"""Verifier-side expert selection for MoE speculative decoding: pure tensor functions.

    block = BlockInfo.from_parents(parents)
    router = Router(kind="softmax_topk", top_k=8, renormalize=True)
    sel = select("acceptmoe", logits, block, router, SelectorConfig(p_hat=table.p_hat))   # reference
    ids, weights = route(logits, sel.eligible, router)
"""
from .batched import BlockSelector, effective_rank_batched, prune_batched, rank_desc
from .commitment import CommitmentTable
from .config import ConfigError, SelectorConfig
from .pruning import prune_nonresident
from .registry import B0_METHOD, BASELINE, CALIBRATION, METHODS, REFERENCE, MethodSpec, UnknownMethodError, fixed_twin, get_method
from .routing import ROUTER_KINDS, Router, route
from .selectors import Selection, commitment_weights, effective_rank_size, guarded_ceil, select
from .tree import BlockInfo, TreeError
from .variant import Variant

__all__ = [
    "B0_METHOD", "BASELINE", "CALIBRATION", "REFERENCE", "Variant", "fixed_twin", "BlockInfo", "BlockSelector", "CommitmentTable", "ConfigError", "METHODS", "MethodSpec", "ROUTER_KINDS",
    "Router", "SelectorConfig", "Selection", "TreeError", "UnknownMethodError", "commitment_weights",
    "effective_rank_batched", "effective_rank_size", "get_method", "guarded_ceil", "prune_batched", "prune_nonresident",
    "rank_desc", "route", "select",
]
