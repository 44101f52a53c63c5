"""Verifier-side expert selection for MoE speculative decoding: the method registry, the validated plan,
the one ranking rule, routing, commitment probabilities and the readable per-block reference.

    >>> import torch
    >>> from acceptmoe.methods import BlockInfo, Fit, Router, Variant, route, select
    >>> block = BlockInfo.from_parents([-1, 0, 0, 1, 2])             # draft tree; index 0 is the root
    >>> router = Router.preset("softmax_topk", top_k=2)               # Qwen3-MoE; GPT-OSS: "topk_softmax"
    >>> plan = Variant("acceptmoe").bind(Fit(router, num_experts=16, max_depth=2), commitment=(1.0, 0.8, 0.5))
    >>> logits = torch.randn(5, 16, generator=torch.Generator().manual_seed(0))   # one layer's router logits
    >>> sel = select(plan, logits, block)                             # eligible set, utility, anchor [E]
    >>> ids, weights = route(logits, sel.eligible, router)           # constrained top-k (Eq. 2), [T, k] each
    >>> bool(sel.eligible[ids].all()), tuple(ids.shape)
    (True, (5, 2))

Every top-k and ranking follows one rule, `topk` (value descending, ties to the lower index). The batched
verifier an engine calls per MoE layer (torch, cpu and Triton backends) is `acceptmoe.kernels.make_verifier(backend,
plan, device)`; it agrees exactly with `select`, `prune` and `route`.
"""
from .admission import UnionGrowth, VerifyCost, admitted
from .commitment import CommitmentTable
from .config import ConfigError, SelectorConfig
from .reference import Selection, best_first, commitment_weight, effective_rank, prune, route, select, select_pass
from .registry import (
    B0_METHOD,
    BASELINE,
    CALIBRATION,
    DEFAULT_METHOD,
    METHODS,
    PAPER_METHODS,
    REFERENCE,
    Admission,
    BackendCoverageError,
    MethodSpec,
    Order,
    Role,
    Score,
    Scoring,
    Sizing,
    UnknownMethodError,
    UnknownRouterError,
    alone_twin,
    fixed_twin,
    get_method,
    register_backend,
    register_method,
    unregister_method,
    verifier_methods,
)
from .routing import ROUTER_NAMES, ROUTER_PRESETS, Router, route_in
from .topk import first_k_in, order_desc, rank_desc, topk, topk_ids
from .tree import BlockInfo, TreeError
from .variant import Fit, Plan, Variant

__all__ = [
    "Admission", "UnionGrowth", "VerifyCost", "admitted",
    "B0_METHOD", "BASELINE", "CALIBRATION", "DEFAULT_METHOD", "PAPER_METHODS", "REFERENCE", "BackendCoverageError", "BlockInfo", "CommitmentTable",
    "ConfigError", "Fit", "METHODS", "MethodSpec", "Order", "Plan", "ROUTER_NAMES", "ROUTER_PRESETS", "Role", "Router", "Score",
    "Scoring",
    "SelectorConfig", "Selection", "Sizing", "TreeError", "UnknownMethodError", "UnknownRouterError", "Variant",
    "alone_twin", "best_first", "commitment_weight", "effective_rank", "first_k_in", "fixed_twin", "get_method", "order_desc",
    "prune", "rank_desc", "register_backend", "register_method", "route", "route_in", "select", "select_pass", "topk",
    "topk_ids",
    "unregister_method", "verifier_methods",
]
