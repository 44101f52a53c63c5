"""Hand-computed examples for every selector, the tree geometry, routing and pruning.

The numbers are written out: logits are built so that each token's natural top-k set and gate weights are
known by hand (two equal logits of 1.0 among zeros give a top-2 pair with weights 0.5 / 0.5).
"""
import math

import pytest
import torch

from acceptmoe.methods import (
    BlockInfo,
    CommitmentTable,
    ConfigError,
    Fit,
    Router,
    Selection,
    SelectorConfig,
    Sizing,
    TreeError,
    UnknownMethodError,
    Variant,
    commitment_weight,
    effective_rank,
    get_method,
    prune,
    route,
    select,
)
from acceptmoe.methods.fixed import rank_guard, to_fixed

TOP2 = Router.preset("softmax_topk", top_k=2, renormalize=True)


def plan_for(method, num_experts, max_depth=3, router=TOP2, budget=None, p_hat=None, store="resident", **selector):
    """A plan of `method` fitted to `num_experts` experts (budget pinned, p_hat bound, selector fields)."""
    fit = Fit(router, num_experts, max_depth, store)
    variant = Variant(method, budget=budget if get_method(method).needs_budget else None)
    return variant.bind(fit, commitment=p_hat, selector=SelectorConfig(**selector))


def choose(method, z, block, router=TOP2, **cfg):
    """The reference's selection of `method` for one block (logits z [T, E])."""
    return select(plan_for(method, z.shape[1], block.max_depth, router, **cfg), z, block)


def rank_of(demand: torch.Tensor, cfg: SelectorConfig = SelectorConfig()) -> int:
    """n_er of fp32 block scores (positive entries are the candidates), by the reference's integer rule."""
    U = [u for u in to_fixed(demand, cfg.score_bits).tolist() if u > 0]
    return effective_rank(U, rank_guard(cfg.rank_tolerance))


def pair_logits(pairs, num_experts):
    """logits [T, E]: token t's natural top-2 set is pairs[t], each with gate weight 0.5."""
    z = torch.zeros(len(pairs), num_experts)
    for t, (a, b) in enumerate(pairs):
        z[t, a] = z[t, b] = 1.0
    return z


def ids(mask):
    return mask.nonzero().flatten().tolist()


# --- tree geometry ---------------------------------------------------------------------------------

def test_block_info_depths_and_levels():
    b = BlockInfo.from_parents([-1, 0, 0, 1, 1, 2, 3])
    assert b.depth.tolist() == [0, 1, 1, 2, 2, 2, 3]
    assert b.level_sizes.tolist() == [1, 2, 3, 1]
    assert b.max_depth == 3 and b.num_tokens == 7
    assert b.path_to(6) == [0, 1, 3, 6]


@pytest.mark.parametrize("parents, fragment", [
    ([], "empty"),
    ([0, 0], r"parents\[0\] must be -1"),
    ([-1, 0, -1], "only index 0 may be the root"),
    ([-1, 2, 0], "not an earlier node"),
    ([-1, 1], "not an earlier node"),
])
def test_block_info_rejects_non_trees(parents, fragment):
    with pytest.raises(TreeError, match=fragment):
        BlockInfo.from_parents(parents)


# --- selectors -------------------------------------------------------------------------------------

def test_count_b_votes_then_gate_mass_then_index():
    # top-2 sets: t0 {0,1} weights (0.8808, 0.1192); t1 {2,1} (0.7311, 0.2689); t2 {1,3} (0.6225, 0.3775)
    z = torch.tensor([[2.0, 0.0, -10.0, -10.0], [-10.0, 0.0, 1.0, -10.0], [-10.0, 1.0, -10.0, 0.5]])
    block = BlockInfo.from_parents([-1, 0, 1])
    # votes: e0 1, e1 3, e2 1, e3 1; ties at one vote broken by gate mass e0 0.8808 > e2 0.7311 > e3 0.3775
    sel = choose("count-b", z, block, budget=2)
    assert sel.utility.tolist() == [1.0, 3.0, 1.0, 1.0]
    assert ids(sel.eligible) == [0, 1]
    assert ids(choose("count-b", z, block, budget=3).eligible) == [0, 1, 2]
    assert not sel.anchor.any()


def test_moe_spec_sums_full_softmax_over_all_tokens():
    z = torch.tensor([[2.0, 0.0, -10.0, -10.0], [-10.0, 0.0, 1.0, -10.0], [-10.0, 1.0, -10.0, 0.5]])
    block = BlockInfo.from_parents([-1, 0, 1])
    sel = choose("moe-spec", z, block, budget=2)
    # full-softmax mass per expert: 0.88081, 1.01058, 0.73106, 0.37755
    assert sel.utility.tolist() == pytest.approx([0.88081015, 1.01058287, 0.73105653, 0.37755044], abs=1e-6)
    assert ids(sel.eligible) == [0, 1]
    assert ids(choose("moe-spec", z, block, budget=3).eligible) == [0, 1, 2]


def test_moe_spec_ties_go_to_lower_index():
    z = torch.zeros(2, 6)  # uniform softmax: every expert has mass 2/6
    sel = choose("moe-spec", z, BlockInfo.from_parents([-1, 0]), budget=3)
    assert ids(sel.eligible) == [0, 1, 2]


# AcceptMoE example: tree [-1, 0, 1, 1, 1, 1], depths [0, 1, 2, 2, 2, 2], N = [1, 1, 4]
# p_hat = [1, 0.81, 0.01], beta = 0.5: alpha = [1, 0.9 * 1, 0.1 * 4^-0.5 = 0.05 (x4)]
# top-2 pairs: t0 {0,1} (the anchor), t1 {2,3}, t2..t5 {2,4}, {2,5}, {2,6}, {2,7}; each weight 0.5
# u = [0.5, 0.5, 0.45 + 4 * 0.025 = 0.55, 0.45, 0.025, 0.025, 0.025, 0.025]
# residual q over e2..e7 = [0.5, 0.40909, 0.02273 x4], H = 1.05624, exp(H) = 2.87555 -> n_er = 3
ACCEPT_PAIRS = [(0, 1), (2, 3), (2, 4), (2, 5), (2, 6), (2, 7)]
ACCEPT_BLOCK = [-1, 0, 1, 1, 1, 1]
ACCEPT_CFG = dict(p_hat=(1.0, 0.81, 0.01), beta=0.5)


def test_commitment_weights_by_hand():
    block, cfg = BlockInfo.from_parents(ACCEPT_BLOCK), SelectorConfig(beta=0.5)
    p_hat = ACCEPT_CFG["p_hat"]
    alpha = [commitment_weight(p_hat[d], n, cfg) for d, n in zip(block.depth.tolist(),
                                                                  block.level_sizes[block.depth].tolist(), strict=True)]
    assert alpha == pytest.approx([1.0, 0.9, 0.05, 0.05, 0.05, 0.05], abs=1e-7)


def test_acceptmoe_self_sized_by_hand():
    z, block = pair_logits(ACCEPT_PAIRS, 8), BlockInfo.from_parents(ACCEPT_BLOCK)
    sel = choose("acceptmoe", z, block, **ACCEPT_CFG)
    assert sel.utility.tolist() == pytest.approx([0.5, 0.5, 0.55, 0.45, 0.025, 0.025, 0.025, 0.025], abs=1e-6)
    assert ids(sel.anchor) == [0, 1]
    # n_er = ceil(2.87555) = 3 non-anchor experts: e2, e3, then e4 wins the four-way tie at 0.025 by index
    assert ids(sel.eligible) == [0, 1, 2, 3, 4]


def test_acceptmoe_b_fixed_budget_by_hand():
    z, block = pair_logits(ACCEPT_PAIRS, 8), BlockInfo.from_parents(ACCEPT_BLOCK)
    sel = choose("acceptmoe-b", z, block, budget=4, **ACCEPT_CFG)
    assert ids(sel.eligible) == [0, 1, 2, 3]          # anchor counted in B: 2 + top-2 by utility
    sel6 = choose("acceptmoe-b", z, block, budget=6, **ACCEPT_CFG)
    assert ids(sel6.eligible) == [0, 1, 2, 3, 4, 5]   # ties at 0.025 go to the lower indices


def test_acceptmoe_root_only_block_is_the_anchor():
    z = pair_logits([(3, 5)], 8)
    sel = choose("acceptmoe", z, BlockInfo.from_parents([-1]), p_hat=(1.0,))
    assert ids(sel.eligible) == [3, 5] and ids(sel.anchor) == [3, 5]


def test_standard_sd_keeps_every_expert():
    z = pair_logits(ACCEPT_PAIRS, 8)
    sel = choose("standard-sd", z, BlockInfo.from_parents(ACCEPT_BLOCK))
    assert sel.eligible.all() and not sel.anchor.any()


def test_softmax_demand_score_uses_full_softmax_inside_top_k():
    z = torch.tensor([[3.0, 1.0, 0.0, 0.0]])
    sel = choose("acceptmoe", z, BlockInfo.from_parents([-1]), p_hat=(1.0,), demand_score="softmax")
    p = torch.softmax(z[0], 0)
    assert sel.utility.tolist() == pytest.approx([float(p[0]), float(p[1]), 0.0, 0.0], abs=2.0**-22)   # score_bits fixed point


# --- effective-rank ceiling guard ------------------------------------------------------------------

def demand_with_rank(target: float, n: int = 4) -> torch.Tensor:
    """fp32 demand over n experts (n - 1 equal, one small) whose effective rank exp(H) is `target`
    (n - 1 < target <= n), as a multiple of 2^-22 like every block score."""
    lo, hi = 0.0, 1.0 / n
    for _ in range(80):                                   # bisection on the small expert's share (rank rises)
        mid = (lo + hi) / 2
        q = [(1 - mid) / (n - 1)] * (n - 1) + [mid]
        rank = math.exp(-sum(x * math.log(x) for x in q if x > 0))
        lo, hi = (mid, hi) if rank < target else (lo, mid)
    q = [(1 - lo) / (n - 1)] * (n - 1) + [lo]
    return torch.tensor([round(x * 2**22) / 2**22 for x in q], dtype=torch.float32)


@pytest.mark.parametrize("target, expected", [(3.0000001, 3), (3.0001, 3), (3.001, 4), (3.01, 4), (3.5, 4), (4.0, 4)])
def test_effective_rank_guard(target, expected):
    """exp(H) just above an integer by float error rounds down to it (guard 1e-4); clearly above, up."""
    assert rank_of(demand_with_rank(target), SelectorConfig(rank_tolerance=1e-4)) == expected


def test_effective_rank_small_cases():
    assert rank_of(torch.tensor([0.0, 0.0])) == 0
    assert rank_of(torch.tensor([0.5, 0.0])) == 1
    assert rank_of(torch.tensor([0.25, 0.25, 0.25])) == 3
    assert rank_of(torch.tensor([0.9, 0.1])) == 2          # exp(H) = 1.384


def test_guard_matters_without_tolerance():
    assert rank_of(demand_with_rank(3.001), SelectorConfig(rank_tolerance=0.0)) == 4
    assert rank_of(demand_with_rank(3.001), SelectorConfig(rank_tolerance=1e-3)) == 3


# --- routing ---------------------------------------------------------------------------------------

def test_route_inside_eligible_set_by_hand():
    z = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    eligible = torch.tensor([False, True, True, True])
    ids_, w = route(z, eligible, TOP2)
    assert ids_.tolist() == [[1, 2]]
    e = math.exp(1.0)
    assert w.tolist()[0] == pytest.approx([e / (e + 1), 1 / (e + 1)], abs=1e-6)


def test_topk_softmax_router_by_hand():
    router = Router.preset("topk_softmax", top_k=2)
    ids_, w = route(torch.tensor([[0.0, 2.0, 1.0, 5.0]]), torch.tensor([True, True, True, False]), router)
    e = math.exp(1.0)
    assert ids_.tolist() == [[1, 2]] and w.tolist()[0] == pytest.approx([e / (e + 1), 1 / (e + 1)], abs=1e-6)


def test_non_renormalising_router_keeps_unmasked_probabilities():
    router = Router.preset("softmax_topk", top_k=2, renormalize=False)
    z = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    ids_, w = route(z, torch.tensor([False, True, True, True]), router)
    p = torch.softmax(z[0], 0)
    assert ids_.tolist() == [[1, 2]] and w.tolist()[0] == pytest.approx([float(p[1]), float(p[2])], abs=1e-7)


def test_route_rejects_sets_smaller_than_k():
    with pytest.raises(ValueError, match="fewer than top_k"):
        route(torch.zeros(2, 4), torch.tensor([True, False, False, False]), TOP2)


# --- pruning ---------------------------------------------------------------------------------------

def test_pruning_by_hand():
    # S = {0..5}, anchor {0, 1}; u = [5, 4, 3, 0.2, 0.3, 0.5]; resident {0, 2}
    sel = Selection(eligible=torch.ones(6, dtype=torch.bool),
                    utility=torch.tensor([5.0, 4.0, 3.0, 0.2, 0.3, 0.5]),
                    anchor=torch.tensor([True, True, False, False, False, False]))
    resident = torch.tensor([True, False, True, False, False, False])
    pruning = lambda rho, min_set: plan_for("acceptmoe", 6, p_hat=(1.0, 0.5, 0.2, 0.1), store="offloaded",  # noqa
                                            prune_rho=rho, prune_min_set=min_set)
    # C = {3, 4, 5} ascending u: 0.2, 0.3, 0.5; total u = 13; rho = 0.05 (3277 / 2^16) -> budget 0.65
    assert ids(prune(sel, resident, pruning(0.05, 2))) == [0, 1, 2, 5]      # 0.2 + 0.3 <= 0.65 < 1.0
    assert ids(prune(sel, resident, pruning(0.05, 5))) == [0, 1, 2, 4, 5]   # min set 5 stops after one
    assert ids(prune(sel, resident, pruning(1.0, 0))) == [0, 1, 2]          # anchor 1 is non-resident, kept
    top4 = plan_for("acceptmoe", 6, router=Router.preset("softmax_topk", 4), p_hat=(1.0, 0.5, 0.2, 0.1), store="offloaded",
                    prune_rho=1.0, prune_min_set=0)
    assert ids(prune(sel, resident, top4)) == [0, 1, 2, 5]                  # never below top_k = 4 experts
    everything = torch.ones(6, dtype=torch.bool)
    assert ids(prune(sel, everything, pruning(1.0, 0))) == [0, 1, 2, 3, 4, 5]  # full residency: no-op


# --- registry and configuration errors ---------------------------------------------------------------

def test_registry_names_and_unknown_method():
    from acceptmoe.methods import METHODS
    assert list(METHODS)[:7] == ["vanilla-ar", "standard-sd", "count-b", "moe-spec", "acceptmoe-b", "acceptmoe",
                                 "acceptmoe-shared"]
    assert METHODS["acceptmoe"].sizing is Sizing.SELF and METHODS["count-b"].needs_budget
    assert not METHODS["vanilla-ar"].speculates
    with pytest.raises(UnknownMethodError, match="unknown method 'acceptmoe-x' \\(did you mean 'acceptmoe-b'\\?\\); valid: vanilla-ar, standard-sd"):
        get_method("acceptmoe-x")


@pytest.mark.parametrize("method, budget, p_hat, fragment", [
    ("count-b", None, None, "needs a budget"),
    ("moe-spec", 1, None, "must satisfy top_k=2 <= B"),
    ("count-b", 9, None, "<= B <= E=8"),
    ("acceptmoe", 4, (1.0, 0.5, 0.2), "a budget applies to fixed-budget methods only"),
    ("acceptmoe", None, None, "needs commitment probabilities"),
    ("acceptmoe-b", 4, (1.0, 0.5), "blocks reach depth 2"),
])
def test_plan_errors_name_the_problem(method, budget, p_hat, fragment):
    with pytest.raises(ConfigError, match=fragment):
        Variant(method, budget=budget).bind(Fit(TOP2, 8, max_depth=2), commitment=p_hat)


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(p_hat=(1.0, 1.5)), "in \\[0, 1\\]"),
    (dict(p_hat=(0.9, 0.5)), "p_hat\\[0\\] must be 1.0"),
    (dict(demand_score="votes"), "demand_score"),
    (dict(budget=0), "positive integer"),
])
def test_invalid_config_values(kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        SelectorConfig(**kwargs)


def test_vanilla_ar_has_no_selector():
    with pytest.raises(ValueError, match="does not speculate"):
        select(plan_for("vanilla-ar", 4), torch.zeros(1, 4), BlockInfo.from_parents([-1]))


# --- commitment table --------------------------------------------------------------------------------

def test_commitment_table_counts_and_round_trip(tmp_path):
    records = [([-1, 0, 0, 1], [0, 1, 3]), ([-1, 0, 0, 1], [0, 2]), ([-1, 0, 1, 2], [0])]
    table = CommitmentTable.from_records(records, max_depth=3, provenance={"routing_policy": "natural"})
    assert table.proposed == [3, 5, 3, 1] and table.committed == [3, 2, 1, 0]
    assert table.p_hat == pytest.approx((1.0, 0.4, 1 / 3, 0.0))
    table.save(tmp_path / "c.json")
    again = CommitmentTable.load(tmp_path / "c.json")
    assert again.p_hat == table.p_hat and again.provenance == {"routing_policy": "natural"}


def test_commitment_table_rejects_bad_paths(tmp_path):
    table = CommitmentTable(max_depth=2)
    with pytest.raises(ValueError, match="not a root-to-node path"):
        table.add_block(BlockInfo.from_parents([-1, 0, 0]), [0, 2, 1])
    with pytest.raises(ValueError, match="holds no blocks"):
        _ = table.p_hat
    with pytest.raises(FileNotFoundError, match="run the calibrate step"):
        CommitmentTable.load(tmp_path / "missing.json")
