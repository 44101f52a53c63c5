"""Routers: one frozen record of routing axes, named presets parsed by name, every axis value mapped by every
backend when it loads, and records routing exactly as transformers' routers do: DeepSeek-V3's gate (the
`sigmoid_grouped` preset), Llama 4's router (`topk_sigmoid`), and ERNIE 4.5's softmax with a selection bias (a
record no preset names: a router is data)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from acceptmoe.errors import UserError
from acceptmoe.methods import (
    ROUTER_NAMES,
    BackendCoverageError,
    ConfigError,
    Fit,
    Order,
    Router,
    Score,
    Scoring,
    Sizing,
    UnknownRouterError,
    register_backend,
    registry,
    route,
)


def test_a_preset_is_parsed_by_name_and_an_unknown_one_refused_with_the_closest():
    assert ROUTER_NAMES == ("softmax_topk", "topk_softmax", "sigmoid_grouped", "topk_sigmoid")
    deepseek = Router.preset("sigmoid_grouped", 8, groups=8, group_top=4, scale=2.5)
    assert deepseek == Router(Scoring.SIGMOID, Order.SCORE_THEN_TOPK, 8, biased=True, groups=8, group_top=4,
                              scale=2.5)
    assert Router("sigmoid", "topk_then_score", 1, renormalize=False) == Router.preset("topk_sigmoid", 1)
    assert deepseek.name == "sigmoid_grouped" and Router(Scoring.SOFTMAX, Order.SCORE_THEN_TOPK, 2, biased=True).name \
        == "softmax score_then_topk biased"                                          # a record no preset names
    with pytest.raises(UnknownRouterError, match=r"unknown router preset 'sigmoid_group' \(did you mean "
                                                 r"'sigmoid_grouped'\?\); valid: softmax_topk, topk_softmax, "
                                                 r"sigmoid_grouped, topk_sigmoid"):
        Router.preset("sigmoid_group", 2)
    with pytest.raises(UserError, match="unknown router preset 'noaux_tc'; valid: "):
        Router.preset("noaux_tc", 2)
    with pytest.raises(ValueError, match="router scoring 'softplus' is not one of softmax, sigmoid"):
        Router("softplus", Order.SCORE_THEN_TOPK)


def test_axes_combine_freely_within_what_a_router_can_be():
    assert Router.preset("softmax_topk", 2, groups=4, group_top=2).grouped                # groups on a softmax
    assert not Router.preset("sigmoid_grouped", 2, groups=4, group_top=4).grouped        # every group: no limit
    with pytest.raises(ValueError, match="a softmax after the top-k always normalises"):
        Router.preset("topk_softmax", 2, renormalize=False)
    with pytest.raises(ValueError, match="group_top must be in"):
        Router.preset("sigmoid_grouped", 2, groups=4, group_top=5)
    grouped = Router.preset("sigmoid_grouped", 8, groups=8, group_top=2)
    with pytest.raises(ConfigError, match="do not divide the E=60 experts"):
        Fit(grouped, 60, max_depth=1)
    with pytest.raises(ConfigError, match="group_top=2 groups of 2 experts hold fewer than top_k=8"):
        Fit(grouped, 16, max_depth=1)
    Fit(grouped, 64, max_depth=1)


def test_every_backend_maps_every_routing_axis_value_when_it_loads():
    import acceptmoe.kernels.cpu_verifier  # noqa: F401
    import acceptmoe.kernels.torch_verifier  # noqa: F401
    import acceptmoe.kernels.triton_verifier  # noqa: F401
    assert {"reference", "torch", "cpu", "triton"} <= set(registry.BACKENDS)
    for name, coverage in registry.BACKENDS.items():
        assert dict(coverage.routing) == {a: frozenset(v) for a, v in registry.ROUTING_AXES.items()}, name
        assert coverage.unmapped() == [] and coverage.unmapped(Router.preset("topk_sigmoid", 1).axes) == []
    lacking = {**registry.ROUTING_AXES, "scoring": (Scoring.SOFTMAX,), "grouped": (False,)}
    with pytest.raises(BackendCoverageError, match="backend 'softmax-only' maps no router axis value "
                                                   "scoring=SIGMOID and no grouped=True; implement it there"):
        register_backend("softmax-only", set(Score), set(Sizing), lacking)
    assert "softmax-only" not in registry.BACKENDS


def _deepseek_gate(E: int, k: int, groups: int, group_top: int, renorm: bool, seed: int):
    """transformers' DeepSeek-V3 gate with random weights and selection bias, and its input."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter
    cfg = DeepseekV3Config(hidden_size=16, n_routed_experts=E, num_experts_per_tok=k, n_group=groups,
                           topk_group=group_top, norm_topk_prob=renorm, routed_scaling_factor=2.5)
    gen = torch.Generator().manual_seed(seed)
    gate = DeepseekV3TopkRouter(cfg)
    gate.weight.data = torch.randn(E, 16, generator=gen)
    gate.e_score_correction_bias.copy_(torch.randn(E, generator=gen) * 0.3)
    return gate, torch.randn(40, 16, generator=gen)


def _by_id(ids, w):
    return w.gather(-1, ids.argsort(-1))                                          # weights in id order


def _same_routing(router, logits, bias, want_ids, want_w, exact: bool):
    """Natural routing (`Router.natural`, the engine's) and the readable reference choose the wanted experts
    (transformers' top-k is unsorted: compared as sets) with its weights."""
    for ids, w in (router.natural(logits, bias=bias), route(logits, None, router, bias)):
        assert torch.equal(ids.sort(-1).values, want_ids.sort(-1).values)
        if exact:
            assert torch.equal(_by_id(ids, w), _by_id(want_ids, want_w))
        else:
            torch.testing.assert_close(_by_id(ids, w), _by_id(want_ids, want_w), rtol=2e-7, atol=0)


@pytest.mark.parametrize("E, k, groups, group_top, renorm", [(64, 6, 8, 3, True), (32, 4, 4, 2, False),
                                                             (16, 3, 1, 1, True)], ids=str)
def test_sigmoid_grouped_routes_as_transformers_deepseek_v3_gate(E, k, groups, group_top, renorm):
    """Unbiased sigmoids, normalised with its 1e-20, times routed_scaling_factor (the same bits where no sum is
    taken); the groups bind (the choice differs from an ungrouped one)."""
    gate, x = _deepseek_gate(E, k, groups, group_top, renorm, seed=E + k)
    logits, want_w, want_ids = gate(x)                                          # [N, E], [N, k], [N, k]
    router = Router.preset("sigmoid_grouped", k, renormalize=renorm, groups=groups, group_top=group_top, scale=2.5)
    bias = gate.e_score_correction_bias
    _same_routing(router, logits, bias, want_ids, want_w, exact=not renorm)
    assert groups == 1 or not torch.equal(want_ids.sort(-1).values,
                                          (logits.sigmoid() + bias).topk(k).indices.sort(-1).values)


@pytest.mark.parametrize("E, k", [(16, 1), (128, 1), (32, 2)])
def test_topk_sigmoid_routes_as_transformers_llama4_router(E, k):
    """Llama 4's router: the top-k of the logits, then the sigmoid of each chosen logit (not renormalised); the
    preset at top-1 is Llama-4 Scout's and Maverick's. transformers gives the sigmoid scattered over E (0 outside
    the chosen); the weights are its bits."""
    from transformers import Llama4TextConfig
    from transformers.models.llama4.modeling_llama4 import Llama4Router
    gen = torch.Generator().manual_seed(E + k)
    gate = Llama4Router(Llama4TextConfig(hidden_size=16, num_local_experts=E, num_experts_per_tok=k))
    gate.weight.data = torch.randn(E, 16, generator=gen)
    scores, logits = gate(torch.randn(40, 16, generator=gen))                   # [N, E] each
    want_ids = scores.topk(k).indices
    router = Router.preset("topk_sigmoid", k)
    _same_routing(router, logits, None, want_ids, scores.gather(-1, want_ids), exact=True)
    assert router.ranks_logits and not router.biased and router.name == "topk_sigmoid"


def test_a_softmax_with_a_selection_bias_is_a_record_and_routes_as_transformers_ernie45():
    """ERNIE 4.5's router, which no preset names: softmax over every expert, the top-k of the probabilities plus
    a selection bias, the unbiased probabilities renormalised (its clamp at 1e-12 never binds)."""
    from transformers import Ernie4_5_MoeConfig
    from transformers.models.ernie4_5_moe.modeling_ernie4_5_moe import Ernie4_5_MoeTopKRouter
    E, k = 32, 4
    gen = torch.Generator().manual_seed(45)
    gate = Ernie4_5_MoeTopKRouter(Ernie4_5_MoeConfig(hidden_size=16, moe_num_experts=E, moe_k=k))
    gate.weight.data = torch.randn(E, 16, generator=gen)
    bias = torch.rand(E, generator=gen) * 0.05                                  # about the probabilities' size
    gate.moe_statics.e_score_correction_bias.copy_(bias[None])
    logits, want_w, want_ids = gate(torch.randn(40, 16, generator=gen))
    router = Router(Scoring.SOFTMAX, Order.SCORE_THEN_TOPK, k, biased=True)
    _same_routing(router, logits, bias, want_ids, want_w, exact=False)
    unbiased = dataclasses.replace(router, biased=False)
    assert not torch.equal(unbiased.natural(logits)[0].sort(-1).values, want_ids.sort(-1).values)   # it binds


def test_constrained_grouped_routing_takes_the_tokens_groups_first_and_always_routes_k():
    """Eq. 2 under a group-limited router: the token's groups come from its unmasked scores; inside S their
    experts rank first, then the rest of S, so any S of k experts routes k, and S = every expert is natural."""
    router = Router.preset("sigmoid_grouped", 2, groups=4, group_top=1)          # groups of 2: {0,1} {2,3} ...
    z = torch.tensor([[4.0, 3.0, 2.5, 2.0, -1.0, -2.0, -3.0, -4.0]])               # group 0 wins
    bias = torch.zeros(8)
    assert route(z, None, router, bias)[0].tolist() == [[0, 1]]
    assert route(z, torch.ones(8, dtype=torch.bool), router, bias)[0].tolist() == [[0, 1]]
    S = torch.tensor([False, True, True, True, False, False, False, True])
    assert route(z, S, router, bias)[0].tolist() == [[1, 2]]                      # its group's member, then S's best
    ids, w = route(z, torch.tensor([False] * 5 + [True, False, True]), router, bias)
    assert ids.tolist() == [[5, 7]]                                                # no member of its group in S
    assert torch.equal(w, router.weights(z, ids))                                  # unbiased sigmoids, renormalised
    shifted = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 10.0, 0.0])              # a bias moves the choice
    assert route(z, None, router, shifted)[0].tolist() == [[6, 7]]
