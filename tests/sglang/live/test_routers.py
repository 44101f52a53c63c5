"""SGLang's own `TopKConfig`s mapped to router kinds (`serving/sglang/routers.py`): the grouped sigmoid router
with a selection bias routes as SGLang's `select_experts` does, restriction rewrites its output with Eq. 2,
and routers no kind describes are refused by name when the plugin starts."""
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.layers.moe.topk import TopKConfig, select_experts

from acceptmoe.methods import RouterKind, route_in
from acceptmoe.serving.sglang.routers import UnsupportedRouterError, check_routers, reroute, router_of, selection_bias

E, T = 16, 12


def topk(layer=3, **settings):
    return SimpleNamespace(topk_config=TopKConfig(**settings), layer_id=layer)


def grouped(on_output=False):
    bias = torch.randn(E, generator=torch.Generator().manual_seed(1)) * 0.3
    return topk(top_k=4, use_grouped_topk=True, num_expert_group=4, topk_group=2, renormalize=True,
                scoring_func="sigmoid", correction_bias=bias, routed_scaling_factor=2.5,
                apply_routed_scaling_factor_on_output=on_output)


def logits(seed=2):
    return torch.randn(T, E, generator=torch.Generator().manual_seed(seed))


def _sorted(ids, weights):
    order = ids.long().argsort(-1)
    return ids.long().gather(-1, order), weights.float().gather(-1, order)


@pytest.mark.parametrize("on_output", [False, True])
def test_grouped_sigmoid_routes_as_sglang_and_restriction_rewrites_its_output(on_output):
    t, z = grouped(on_output), logits()
    router, bias = router_of(t, RouterKind.SIGMOID_GROUPED), selection_bias(t)
    assert (router.kind, router.groups, router.group_top, router.scale) == (RouterKind.SIGMOID_GROUPED, 4, 2, 2.5)
    theirs = select_experts(torch.zeros(T, 8), z, t.topk_config)
    ids, weights = router.natural(z, bias=bias)
    if not on_output:
        weights = router.gates(z, ids)
    s_ids, s_w = _sorted(theirs.topk_ids, theirs.topk_weights)
    o_ids, o_w = _sorted(ids, weights)
    assert torch.equal(s_ids, o_ids)
    torch.testing.assert_close(o_w, s_w, atol=1e-6, rtol=1e-5)
    every = torch.ones(T, E, dtype=torch.bool)                     # S = every expert: SGLang's own routing
    same = reroute(t, select_experts(torch.zeros(T, 8), z, t.topk_config), z, every, router, bias)
    assert torch.equal(_sorted(same.topk_ids, same.topk_weights)[0], s_ids)
    torch.testing.assert_close(_sorted(same.topk_ids, same.topk_weights)[1], s_w, atol=1e-6, rtol=1e-5)
    allow = torch.zeros(T, E, dtype=torch.bool)
    allow[:, ::2] = True                                           # S = the even experts
    out = reroute(t, select_experts(torch.zeros(T, 8), z, t.topk_config), z, allow, router, bias)
    want, _ = route_in(z, allow, router, bias=bias)
    assert torch.equal(out.topk_ids.long(), want) and bool(allow.gather(-1, out.topk_ids.long()).all())


@pytest.mark.parametrize("renormalize", [True, False])
def test_softmax_topk_maps_to_its_kind_and_routes_as_sglang(renormalize):
    t, z = topk(top_k=4, renormalize=renormalize, torch_native=True), logits(3)   # sgl_kernel-free path
    router = router_of(t, RouterKind.SOFTMAX_TOPK)
    assert router.kind is RouterKind.SOFTMAX_TOPK and router.renormalize is renormalize
    theirs = select_experts(torch.zeros(T, 8), z, t.topk_config)
    s_ids, s_w = _sorted(theirs.topk_ids, theirs.topk_weights)
    o_ids, o_w = _sorted(*router.natural(z))
    assert torch.equal(s_ids, o_ids)
    torch.testing.assert_close(o_w, s_w, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("settings, kind, message", [
    (dict(top_k=4, custom_routing_function=lambda *a: None), RouterKind.SOFTMAX_TOPK, "custom routing function"),
    (dict(top_k=4, use_grouped_topk=True, num_expert_group=4, topk_group=2), RouterKind.SOFTMAX_TOPK,
     "scoring 'softmax', grouped True"),
    (dict(top_k=4, scoring_func="sigmoid"), RouterKind.SOFTMAX_TOPK, "scoring 'sigmoid', grouped False"),
    (dict(top_k=4, use_grouped_topk=True, num_expert_group=4, topk_group=2, scoring_func="sigmoid"),
     RouterKind.SOFTMAX_TOPK, "the model's family says softmax_topk"),
    (dict(top_k=4), RouterKind.SIGMOID_GROUPED, "the model's family says sigmoid_grouped"),
])
def test_routers_no_kind_describes_are_refused_by_name_at_start(settings, kind, message):
    model = torch.nn.Module()
    model.mlp = torch.nn.Module()
    model.mlp.topk = torch.nn.Module()
    model.mlp.topk.topk_config, model.mlp.topk.layer_id = TopKConfig(**settings), 7
    with pytest.raises(UnsupportedRouterError, match=f"MoE layer 7: .*{message}.*unset ACCEPTMOE_METHOD"):
        check_routers(model, kind)
