"""SGLang's MoE routers as the project's `Router`s: which `TopKConfig`s the plugin can restrict, and how.

    router = router_of(topk, served)            # served: the model's router as its family reads config.json
    bias = selection_bias(topk)                 # [E] fp32 of a biased router, else None
    out = reroute(topk, out, logits, allow, router, bias)   # a router that does not rank logits: Eq. 2 written in

The mapping (docs/method.md, "Router kinds") reads a `TopKConfig` field by field into the router record:
`scoring_func` is the scoring (softmax, sigmoid), SGLang scores before its top-k, `correction_bias` is the
selection bias, `use_grouped_topk` with `num_expert_group` / `topk_group` the groups (the biased grouped top-k,
whose groups rank by their two best: DeepSeek-V3, GLM-4.5, Kimi K2), `renormalize` and `routed_scaling_factor`
the rest. That reading must be the served model's router as its family reads config.json, or the same routing
function (a softmax after the top-k is SGLang's renormalised softmax top-k: GPT-OSS). Every other router (a
custom routing function, shared experts fused into the top-k slots, another scoring function, groups ranked by
their best expert alone, softmax with groups or a bias, a router the family reads otherwise) is refused by name
when the first MoE layer runs, before any request is restricted.

How restriction reaches SGLang: for a router that ranks its logits (`Router.ranks_logits`) the runtime masks the
router logits outside S to -inf before SGLang's own top-k, which is Eq. 2. For any other that would not be: the
groups are chosen on a token's unmasked scores and a masked expert's biased score is its bias, not -inf; so
SGLang routes the unmasked logits and `reroute` overwrites its ids and weights with `methods.route_in`'s (needs
an output format that exposes them: the standard one).
"""
from __future__ import annotations

import dataclasses

from torch import Tensor

from acceptmoe.errors import UserError
from acceptmoe.methods import Order, Router, Scoring, route_in


class UnsupportedRouterError(UserError, ValueError):
    """A MoE router the plugin cannot restrict exactly; the message names what and what to do."""


SCORINGS = {"softmax": Scoring.SOFTMAX, "sigmoid": Scoring.SIGMOID}    # SGLang's scoring_func -> ours
SHOWN = ("scoring", "order", "renormalize", "biased", "groups", "group_top", "scale")    # fields messages compare


def router_of(topk, served: Router | None = None) -> Router:
    """Our `Router` for an SGLang `TopK` module of a model whose router is `served` (`Limits.router`; None: a
    model no family serves, routed as SGLang reads it)."""
    c, layer = topk.topk_config, topk.layer_id

    def refuse(what: str) -> UnsupportedRouterError:
        return UnsupportedRouterError(f"MoE layer {layer}: the plugin cannot restrict this router ({what}); unset "
                                      f"ACCEPTMOE_METHOD for this model")
    if c.custom_routing_function is not None:
        raise refuse("a custom routing function")
    if getattr(c, "num_shared_topk_slots", 0):
        raise refuse("shared experts fused into the top-k slots: start the server with "
                     "--disable-shared-experts-fusion")
    scoring, biased = SCORINGS.get(c.scoring_func), c.correction_bias is not None
    if scoring is None or (scoring is Scoring.SOFTMAX and (c.use_grouped_topk or biased)) or \
            (c.use_grouped_topk and not biased):
        raise refuse(f"scoring {c.scoring_func!r}, grouped {bool(c.use_grouped_topk)}, selection bias {biased}: no "
                     f"router is that (a softmax without groups or bias, or a sigmoid: grouped, with a bias)")
    grouping = dict(groups=c.num_expert_group or 1, group_top=c.topk_group or 1) if c.use_grouped_topk else {}
    theirs = Router(scoring, Order.SCORE_THEN_TOPK, top_k=c.top_k, renormalize=bool(c.renormalize), biased=biased,
                    scale=float(c.routed_scaling_factor or 1.0), **grouping)
    if served is None:
        return theirs
    ours = dataclasses.replace(served, top_k=c.top_k)
    if ours == theirs or _same_function(ours, theirs):
        return ours
    raise refuse(f"SGLang routes it {_shown(theirs, ours)}, the model's family says {_shown(ours, theirs)}")


def _same_function(ours: Router, theirs: Router) -> bool:
    """A softmax after the top-k is a softmax top-k renormalised over the k: the same ids, the same weights up to
    rounding (the rest of the record equal)."""
    return ours.normalised and theirs.ranks_logits and theirs.renormalize and \
        dataclasses.replace(ours, order=theirs.order) == theirs


def _shown(a: Router, b: Router) -> str:
    """`a`'s fields where it differs from `b` (messages)."""
    diff = [f for f in SHOWN if getattr(a, f) != getattr(b, f)]
    return ", ".join(f"{f}={getattr(a, f).value if f in ('scoring', 'order') else getattr(a, f)}" for f in diff)


def selection_bias(topk) -> Tensor | None:
    """The layer's selection bias [E] fp32 (`correction_bias`), or None."""
    bias = topk.topk_config.correction_bias
    return None if bias is None else bias.float()


def reroute(topk, out, logits: Tensor, allow: Tensor, router: Router, bias: Tensor | None):
    """SGLang's output for the unmasked logits [N, E] with its ids and weights replaced by Eq. 2 inside `allow`
    [N, E] (`route_in`); the weights carry `routed_scaling_factor` only where SGLang fuses it into the top-k
    (`apply_routed_scaling_factor_on_output`), else they are the gates and the model scales the routed output."""
    if getattr(out, "topk_ids", None) is None:
        raise UnsupportedRouterError(
            f"MoE layer {topk.layer_id}: a router that does not rank its logits is restricted by rewriting SGLang's "
            f"top-k ids and weights, which the {type(out).__name__} output format does not expose; serve this model "
            f"with the standard MoE runner (--moe-runner-backend triton or torch)")
    ids, weights = route_in(logits, allow, router, bias=bias)                       # [N, k], scaled
    if not topk.topk_config.apply_routed_scaling_factor_on_output:                 # the gates, unscaled
        z = logits.float()
        weights = router.gates(z.masked_fill(~allow, float("-inf")), ids, z)
    out.topk_ids.copy_(ids.to(out.topk_ids.dtype))
    out.topk_weights.copy_(weights.to(out.topk_weights.dtype))
    return out


def check_routers(model, served: Router | None) -> None:
    """Every `TopK` module of the served target maps to its router (`router_of`): checked once when the plugin
    starts restricting or recording, so an unsupported router is refused by name before any request."""
    modules = model.modules() if hasattr(model, "modules") else ()
    for m in modules:
        if hasattr(m, "topk_config") and not getattr(m, "is_draft", False):
            router_of(m, served)
