"""The rules at their exact boundaries, with inputs built so the fixed-point arithmetic lands on them: the
effective rank when exp(H) is exactly an integer, the pruning budget when a prefix's utility is exactly rho
of the set's. Every backend (the readable reference, the torch verifier, the Triton kernel's own helpers)
must land on the same side. B0's x.5 boundary is pinned in tests/evals/test_eval_stats.py and
tests/experiments/test_runners.py."""
import pytest
import torch

from acceptmoe.kernels.torch_verifier import effective_rank as batched_rank
from acceptmoe.kernels.torch_verifier import prune_batched
from acceptmoe.methods import Fit, Router, Selection, SelectorConfig, Variant, effective_rank, prune
from acceptmoe.methods.fixed import LOG2_BITS, log2_fixed_int

# probabilities 1/2, 1/8, 1/8, 1/8, 1/8: H = 2 bits exactly, exp(H) = 4; every log2 below is exact in fixed
# point because every value is a power of two (U = q * 2^16, S = 2^16)
EXACT_FOUR = [1 << 15, 1 << 13, 1 << 13, 1 << 13, 1 << 13]


def entropy_units(U: list[int]) -> int:
    S = sum(U)
    return S * log2_fixed_int(S) - sum(u * log2_fixed_int(u) for u in U)


def test_the_constructed_demand_sits_exactly_on_an_integer_rank():
    S = sum(EXACT_FOUR)
    assert entropy_units(EXACT_FOUR) == S * log2_fixed_int(4)            # S * H2 == S * log2(4), exactly


@pytest.mark.parametrize("demand, want", [
    (EXACT_FOUR, 4),                                  # exp(H) = 4 exactly: 4 experts, not 5
    ([(1 << 15) - 1] + EXACT_FOUR[1:], 5),            # one unit less concentrated: exp(H) just above 4 -> 5
])
def test_effective_rank_at_an_exact_integer_without_a_guard(demand, want):
    assert effective_rank(demand, guard=0) == want
    assert batched_rank(torch.tensor([demand]), guard=0).tolist() == [want]


def test_effective_rank_guard_boundary_is_inclusive():
    """With a guard g, n is enough when S (log2 n + g) >= S H2: at equality n is kept."""
    S, H = sum(EXACT_FOUR), entropy_units(EXACT_FOUR)
    below = [(1 << 15) - 1] + EXACT_FOUR[1:]
    gap = entropy_units(below) - sum(below) * log2_fixed_int(4)          # how far above log2(4) it sits
    guard = -(-gap // sum(below))                                        # the smallest guard covering it
    assert effective_rank(below, guard=guard) == 4 and effective_rank(below, guard=guard - 1) == 5
    assert batched_rank(torch.tensor([below]), guard=guard).tolist() == [4]
    assert batched_rank(torch.tensor([below]), guard=guard - 1).tolist() == [5]
    assert S * log2_fixed_int(4) == H


def plan_with(rho: float, min_set: int = 0, k: int = 1):
    fit = Fit(Router.preset("softmax_topk", k), 4, max_depth=1, store="offloaded")
    return Variant("acceptmoe").bind(fit, commitment=(1.0, 0.5),
                                     selector=SelectorConfig(prune_rho=rho, prune_min_set=min_set))


@pytest.mark.parametrize("rho, kept", [
    (0.25, [True, True, False, False]),     # 0.125 + 0.125 == 0.25 of the total: the budget includes equality
    (0.2499, [True, True, True, False]),    # just under: only the first 0.125 goes (ties: higher index first)
    (0.125, [True, True, True, False]),     # exactly one 0.125
    (0.0, [True, True, True, True]),        # no budget, no pruning
])
def test_pruning_budget_at_exactly_rho(rho, kept):
    sel = Selection(eligible=torch.ones(4, dtype=torch.bool), utility=torch.tensor([0.5, 0.25, 0.125, 0.125]),
                    anchor=torch.zeros(4, dtype=torch.bool))
    resident = torch.zeros(4, dtype=torch.bool)
    plan = plan_with(rho)
    assert prune(sel, resident, plan).tolist() == kept
    assert prune_batched(plan, sel, resident).tolist() == kept


def test_pruning_floor_is_exactly_the_minimum_set():
    sel = Selection(eligible=torch.ones(4, dtype=torch.bool), utility=torch.tensor([0.5, 0.25, 0.125, 0.125]),
                    anchor=torch.zeros(4, dtype=torch.bool))
    resident = torch.zeros(4, dtype=torch.bool)
    for min_set, size in ((2, 2), (3, 3), (4, 4)):
        plan = plan_with(1.0, min_set)
        assert int(prune(sel, resident, plan).sum()) == size == int(prune_batched(plan, sel, resident).sum())
    assert LOG2_BITS == 16
