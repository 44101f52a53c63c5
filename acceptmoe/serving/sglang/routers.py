"""SGLang's MoE routers as the project's `Router`s: which `TopKConfig`s the plugin can restrict, and how.

    router = router_of(topk, kind)              # kind: the served model's, read by its family (`Limits.router`)
    bias = selection_bias(topk)                 # [E] fp32 of a biased router kind, else None
    out = reroute(topk, out, logits, allow, router, bias)   # the grouped kind: Eq. 2 written into SGLang's output

The mapping (docs/method.md, "Router kinds"): softmax scoring without groups or bias is `SOFTMAX_TOPK`, or
`TOPK_SOFTMAX` where the model's family says so (GPT-OSS); sigmoid scoring with group-limited top-k
(`use_grouped_topk`, `num_expert_group`, `topk_group`), an optional `correction_bias` and
`routed_scaling_factor` is `SIGMOID_GROUPED` (DeepSeek-V3, GLM-4.5, Kimi K2). Every other router (a custom
routing function, shared experts fused into the top-k slots, softmax with groups, another scoring function)
is refused by name when the first MoE layer runs, before any request is restricted.

How restriction reaches SGLang: for the softmax kinds the runtime masks the router logits outside S to -inf
before SGLang's own top-k, which is Eq. 2. For the grouped kind that would not be: the groups are chosen on
a token's unmasked scores and a masked expert's biased score is its bias, not -inf; so SGLang routes the
unmasked logits and `reroute` overwrites its ids and weights with `methods.route_in`'s (needs an output
format that exposes them: the standard one).
"""
from __future__ import annotations

from torch import Tensor

from acceptmoe.errors import UserError
from acceptmoe.methods import Router, RouterKind, route_in


class UnsupportedRouterError(UserError, ValueError):
    """A MoE router the plugin cannot restrict exactly; the message names what and what to do."""


def router_of(topk, kind: RouterKind = RouterKind.SOFTMAX_TOPK) -> Router:
    """Our `Router` for an SGLang `TopK` module of a model whose router is `kind` (`Limits.router`)."""
    c, layer = topk.topk_config, topk.layer_id
    refuse = lambda what: UnsupportedRouterError(      # noqa: E731
        f"MoE layer {layer}: the plugin cannot restrict this router ({what}); unset ACCEPTMOE_METHOD for this model")
    if c.custom_routing_function is not None:
        raise refuse("a custom routing function")
    if getattr(c, "num_shared_topk_slots", 0):
        raise refuse("shared experts fused into the top-k slots: start the server with "
                     "--disable-shared-experts-fusion")
    if c.scoring_func == "sigmoid" and c.use_grouped_topk:
        if kind is not RouterKind.SIGMOID_GROUPED:
            raise refuse(f"SGLang routes it sigmoid-grouped, the model's family says {kind.value}")
        return Router(RouterKind.SIGMOID_GROUPED, top_k=c.top_k, renormalize=bool(c.renormalize),
                      groups=c.num_expert_group or 1, group_top=c.topk_group or 1,
                      scale=float(c.routed_scaling_factor or 1.0))
    if c.scoring_func != "softmax" or c.use_grouped_topk or c.correction_bias is not None:
        raise refuse(f"scoring {c.scoring_func!r}, grouped {bool(c.use_grouped_topk)}, selection bias "
                     f"{c.correction_bias is not None}: no router kind is that")
    if kind is RouterKind.SIGMOID_GROUPED:
        raise refuse("SGLang routes it softmax top-k, the model's family says sigmoid_grouped")
    if kind is RouterKind.TOPK_SOFTMAX and not c.renormalize:
        raise refuse("a top-k-then-softmax router must renormalise over its k experts, but SGLang's TopK does not")
    return Router(kind, top_k=c.top_k, renormalize=bool(c.renormalize))


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
            f"MoE layer {topk.layer_id}: a grouped router is restricted by rewriting SGLang's top-k ids and weights, "
            f"which the {type(out).__name__} output format does not expose; serve this model with the standard MoE "
            f"runner (--moe-runner-backend triton or torch)")
    ids, weights = route_in(logits, allow, router, bias=bias)                       # [N, k], scaled
    if not topk.topk_config.apply_routed_scaling_factor_on_output:                 # the gates, unscaled
        z = logits.float()
        weights = router.gates(z.masked_fill(~allow, float("-inf")), ids, z)
    out.topk_ids.copy_(ids.to(out.topk_ids.dtype))
    out.topk_weights.copy_(weights.to(out.topk_weights.dtype))
    return out


def check_routers(model, kind: RouterKind) -> None:
    """Every `TopK` module of the served target maps to a router of `kind` (`router_of`): checked once when the
    plugin starts restricting or recording, so an unsupported router is refused by name before any request."""
    modules = model.modules() if hasattr(model, "modules") else ()
    for m in modules:
        if hasattr(m, "topk_config") and not getattr(m, "is_draft", False):
            router_of(m, kind)
