"""Router kinds: one enum in the method algebra, parsed by name, mapped by every backend when it loads, and the
sigmoid grouped kind (DeepSeek-V3) routing exactly as transformers' DeepseekV3 gate does."""
from __future__ import annotations

import pytest
import torch

from acceptmoe.errors import UserError
from acceptmoe.methods import (
    BackendCoverageError,
    ConfigError,
    Fit,
    Router,
    RouterKind,
    Score,
    Sizing,
    UnknownRouterError,
    register_backend,
    registry,
    route,
)


def test_a_kind_is_parsed_by_name_and_an_unknown_one_refused_with_the_closest():
    assert RouterKind.parse("sigmoid_grouped") is RouterKind.SIGMOID_GROUPED
    assert RouterKind.parse(RouterKind.TOPK_SOFTMAX) is RouterKind.TOPK_SOFTMAX
    assert Router("softmax_topk", 2).kind is RouterKind.SOFTMAX_TOPK                # a name becomes the member
    with pytest.raises(UnknownRouterError, match=r"unknown router kind 'sigmoid_group' \(did you mean "
                                                 r"'sigmoid_grouped'\?\); valid: softmax_topk, topk_softmax, "
                                                 r"sigmoid_grouped"):
        Router("sigmoid_group", 2)
    with pytest.raises(UserError, match="unknown router kind 'noaux_tc'; valid: "):
        RouterKind.parse("noaux_tc")


def test_group_settings_belong_to_the_grouped_kind_and_must_fit_the_experts():
    with pytest.raises(ValueError, match="belong to the sigmoid_grouped router, not softmax_topk"):
        Router("softmax_topk", 2, groups=4)
    with pytest.raises(ValueError, match="group_top must be in"):
        Router("sigmoid_grouped", 2, groups=4, group_top=5)
    grouped = Router("sigmoid_grouped", 8, groups=8, group_top=2)
    with pytest.raises(ConfigError, match="do not divide the E=60 experts"):
        Fit(grouped, 60, max_depth=1)
    with pytest.raises(ConfigError, match="group_top=2 groups of 2 experts hold fewer than top_k=8"):
        Fit(grouped, 16, max_depth=1)
    Fit(grouped, 64, max_depth=1)


def test_every_backend_maps_every_router_kind_when_it_loads():
    import acceptmoe.kernels.cpu_verifier  # noqa: F401
    import acceptmoe.kernels.torch_verifier  # noqa: F401
    import acceptmoe.kernels.triton_verifier  # noqa: F401
    assert {"reference", "torch", "cpu", "triton"} <= set(registry.BACKENDS)
    for name, coverage in registry.BACKENDS.items():
        assert coverage.routers == frozenset(RouterKind), name
    with pytest.raises(BackendCoverageError, match="backend 'softmax-only' maps no router kind SIGMOID_GROUPED; "
                                                   "implement it there"):
        register_backend("softmax-only", set(Score), set(Sizing), set(RouterKind) - {RouterKind.SIGMOID_GROUPED})
    assert "softmax-only" not in registry.BACKENDS


def _transformers_gate(E: int, k: int, groups: int, group_top: int, renorm: bool, seed: int):
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


@pytest.mark.parametrize("E, k, groups, group_top, renorm", [(64, 6, 8, 3, True), (32, 4, 4, 2, False),
                                                             (16, 3, 1, 1, True)], ids=str)
def test_the_grouped_kind_routes_as_transformers_deepseek_v3_gate(E, k, groups, group_top, renorm):
    """Natural routing (`Router.natural`, the engine's) and the readable reference choose transformers' experts
    (its top-k is unsorted: compared as sets) with its weights: unbiased sigmoids, normalised with its 1e-20,
    times routed_scaling_factor (the same bits where no sum is taken)."""
    gate, x = _transformers_gate(E, k, groups, group_top, renorm, seed=E + k)
    logits, want_w, want_ids = gate(x)                                          # [N, E], [N, k], [N, k]
    router = Router("sigmoid_grouped", k, renorm, groups=groups, group_top=group_top, scale=2.5)
    bias = gate.e_score_correction_bias
    by_id = lambda ids, w: w.gather(-1, ids.argsort(-1))                       # noqa: E731  weights in id order
    for ids, w in (router.natural(logits, bias=bias), route(logits, None, router, bias)):
        assert torch.equal(ids.sort(-1).values, want_ids.sort(-1).values)
        if renorm:
            torch.testing.assert_close(by_id(ids, w), by_id(want_ids, want_w), rtol=2e-7, atol=0)
        else:
            assert torch.equal(by_id(ids, w), by_id(want_ids, want_w))
    assert groups == 1 or not torch.equal(want_ids.sort(-1).values,
                                          (logits.sigmoid() + bias).topk(k).indices.sort(-1).values)   # groups bind


def test_constrained_grouped_routing_takes_the_tokens_groups_first_and_always_routes_k():
    """Eq. 2 under the grouped kind: the token's groups come from its unmasked scores; inside S their experts
    rank first, then the rest of S, so any S of k experts routes k, and S = every expert is natural routing."""
    router = Router("sigmoid_grouped", 2, groups=4, group_top=1)                  # groups of 2: {0,1} {2,3} ...
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
