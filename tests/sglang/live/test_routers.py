"""SGLang's own `TopKConfig`s read into router records (`serving/sglang/routers.py`): the grouped sigmoid router
with a selection bias and the ungrouped sigmoid route as SGLang's `select_experts` does, restriction rewrites
their output with Eq. 2, and routers the plugin cannot restrict exactly, or that the model's family reads
otherwise, are refused by name when the plugin starts."""
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.layers.moe.topk import TopKConfig, select_experts

from acceptmoe.methods import Router, route_in
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
    served = Router.preset("sigmoid_grouped", 4, groups=4, group_top=2, scale=2.5)
    router, bias = router_of(t, served), selection_bias(t)
    assert router == served and router_of(t) == served                     # the family's, and SGLang's reading
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
def test_softmax_topk_maps_to_its_preset_and_routes_as_sglang(renormalize):
    t, z = topk(top_k=4, renormalize=renormalize, torch_native=True), logits(3)   # sgl_kernel-free path
    router = router_of(t, Router.preset("softmax_topk", 8, renormalize=renormalize))     # SGLang's top-k
    assert router == Router.preset("softmax_topk", 4, renormalize=renormalize)
    theirs = select_experts(torch.zeros(T, 8), z, t.topk_config)
    s_ids, s_w = _sorted(theirs.topk_ids, theirs.topk_weights)
    o_ids, o_w = _sorted(*router.natural(z))
    assert torch.equal(s_ids, o_ids)
    torch.testing.assert_close(o_w, s_w, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("biased", [False, True])
def test_ungrouped_sigmoid_is_a_record_and_routes_as_sglang(biased):
    """A sigmoid without groups (SGLang's biased top-k, or none), which no preset names: the record SGLang's
    fields give routes as SGLang does, and restriction rewrites its output with Eq. 2."""
    bias = torch.randn(E, generator=torch.Generator().manual_seed(4)) * 0.3 if biased else None
    t, z = topk(top_k=4, scoring_func="sigmoid", correction_bias=bias, renormalize=True, torch_native=True), logits(5)
    router = router_of(t)
    assert router == Router("sigmoid", "score_then_topk", 4, biased=biased) and not router.ranks_logits
    theirs = select_experts(torch.zeros(T, 8), z, t.topk_config)
    s_ids, s_w = _sorted(theirs.topk_ids, theirs.topk_weights)
    o_ids, o_w = _sorted(*router.natural(z, bias=selection_bias(t)))
    assert torch.equal(s_ids, o_ids)
    torch.testing.assert_close(o_w, s_w, atol=1e-6, rtol=1e-5)
    allow = torch.zeros(T, E, dtype=torch.bool)
    allow[:, 1::2] = True                                          # S = the odd experts
    out = reroute(t, select_experts(torch.zeros(T, 8), z, t.topk_config), z, allow, router, selection_bias(t))
    assert torch.equal(out.topk_ids.long(), route_in(z, allow, router, bias=selection_bias(t))[0])


SOFTMAX, GROUPED = Router.preset("softmax_topk", 4), Router.preset("sigmoid_grouped", 4, groups=4, group_top=2)


@pytest.mark.parametrize("settings, served, message", [
    (dict(top_k=4, custom_routing_function=lambda *a: None), SOFTMAX, "custom routing function"),
    (dict(top_k=4, use_grouped_topk=True, num_expert_group=4, topk_group=2), SOFTMAX,
     "scoring 'softmax', grouped True"),
    (dict(top_k=4, scoring_func="sigmoid"), SOFTMAX,
     "SGLang routes it scoring=sigmoid, the model's family says scoring=softmax"),
    (dict(top_k=4, use_grouped_topk=True, num_expert_group=4, topk_group=2, scoring_func="sigmoid"), GROUPED,
     "scoring 'sigmoid', grouped True, selection bias False"),            # groups ranked by their best alone
    (dict(top_k=4), GROUPED, "the model's family says scoring=sigmoid, biased=True, groups=4, group_top=2"),
    (dict(top_k=4, renormalize=False), Router.preset("topk_softmax", 4), "renormalize=False"),
])
def test_routers_the_plugin_cannot_restrict_or_the_family_reads_otherwise_are_refused_at_start(settings, served,
                                                                                              message):
    model = torch.nn.Module()
    model.mlp = torch.nn.Module()
    model.mlp.topk = torch.nn.Module()
    model.mlp.topk.topk_config, model.mlp.topk.layer_id = TopKConfig(**settings), 7
    with pytest.raises(UnsupportedRouterError, match=f"MoE layer 7: .*{message}.*unset ACCEPTMOE_METHOD"):
        check_routers(model, served)
