"""Properties of the selectors, routing and pruning over random trees and logits (hypothesis): the readable
reference against the rules, and every batched backend against the reference, for every registered method."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from acceptmoe.kernels import make_verifier
from acceptmoe.kernels.torch_verifier import prune_batched
from acceptmoe.methods import (
    BlockInfo,
    Fit,
    Order,
    Plan,
    Router,
    Scoring,
    Selection,
    SelectorConfig,
    Sizing,
    Variant,
    effective_rank,
    order_desc,
    prune,
    rank_desc,
    route,
    select,
    select_pass,
    topk,
    verifier_methods,
)
from acceptmoe.methods.fixed import rank_guard, to_fixed
from acceptmoe.methods.topk import first_k_in, topk_ids

SPECULATING = verifier_methods()     # every verifier method (an admitting method verifies with its selector's)


def plan_of(method: str, block, router, cfg, budget, E: int, store: str = "resident") -> Plan:
    """`method` fitted to E experts and the block's depth, with the problem's selector, p_hat and budget."""
    base = SelectorConfig(beta=cfg.beta, demand_score=cfg.demand_score, prune_rho=cfg.prune_rho,
                          prune_min_set=cfg.prune_min_set)
    return Variant(method).bind(Fit(router, E, block.max_depth, store), commitment=cfg.p_hat, b0=budget,
                                selector=base)


def rank_of(demand: torch.Tensor, cfg: SelectorConfig = SelectorConfig()) -> int:
    U = [u for u in to_fixed(demand, cfg.score_bits).tolist() if u > 0]
    return effective_rank(U, rank_guard(cfg.rank_tolerance))


@st.composite
def problems(draw, max_t=24, max_e=40):
    """A random tree, router (any value of every routing axis), logits and config; integer logits sometimes, to
    force ties."""
    T = draw(st.integers(1, max_t))
    parents = [-1] + [draw(st.integers(0, t - 1)) for t in range(1, T)]
    block = BlockInfo.from_parents(parents)
    scoring, order = draw(st.sampled_from(list(Scoring))), draw(st.sampled_from(list(Order)))
    renorm = True if (scoring, order) == (Scoring.SOFTMAX, Order.TOPK_THEN_SCORE) else draw(st.booleans())
    k = draw(st.integers(1, 4))
    E = draw(st.integers(max(k, 2), max_e))
    groups = draw(st.sampled_from([g for g in (1, 2, 4) if E % g == 0 and (g == 1 or E // g >= 2)]))
    group_top = draw(st.integers(min(groups, -(-k * groups // E)), groups))   # enough chosen to hold k
    router = Router(scoring, order, k, renorm, biased=draw(st.booleans()), groups=groups, group_top=group_top,
                    scale=draw(st.sampled_from([1.0, 2.5])))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    if draw(st.booleans()):
        logits = torch.randint(-2, 3, (T, E), generator=gen).float()   # many exact ties
    else:
        logits = torch.randn(T, E, generator=gen) * draw(st.sampled_from([0.3, 1.0, 4.0]))
    p_hat = [1.0] + [draw(st.floats(0.0, 1.0)) for _ in range(block.max_depth)]
    budget = draw(st.integers(k, E))
    cfg = SelectorConfig(p_hat=tuple(p_hat), beta=draw(st.sampled_from([0.25, 0.5, 1.0])),
                         demand_score=draw(st.sampled_from(["gate", "softmax"])))
    return logits, block, router, cfg, budget


def python_order(values: list, secondary: list | None = None) -> list[int]:
    """The ranking rule spelled out: value descending, then secondary descending, then lower index."""
    key = (lambda i: (-values[i], -secondary[i], i)) if secondary else (lambda i: (-values[i], i))
    return sorted(range(len(values)), key=key)


def tied_rows(rows: int, n: int, k: int, seed: int, coarse: bool):
    """(generator, min(k, n), values [rows, n]): small integers (many ties) when coarse, else normal draws."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 3, (rows, n), generator=gen).float() if coarse else torch.randn(rows, n, generator=gen)
    return gen, min(k, n), x


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(1, 8), st.integers(0, 2**31 - 1), st.booleans())
def test_topk_and_rank_follow_the_one_rule(n, k, seed, coarse):
    """topk, order_desc and rank_desc on rows full of ties (and -inf) against the rule in plain Python."""
    gen, k, x = tied_rows(5, n, k, seed, coarse)
    x[0, : n // 2] = float("-inf")
    y = torch.randint(0, 2, (5, n), generator=gen).float()
    for row, sec in zip(x.tolist(), y.tolist(), strict=True):
        want = python_order(row)
        vals, ids = topk(torch.tensor(row), k)
        assert ids.tolist() == want[:k] and vals.tolist() == [row[i] for i in want[:k]]
        assert order_desc(torch.tensor(row), torch.tensor(sec)).tolist() == python_order(row, sec)
        rank = rank_desc(torch.tensor(row), torch.tensor(sec)).tolist()
        assert [rank[i] for i in python_order(row, sec)] == list(range(n))
    assert torch.equal(topk(x, k)[1], torch.stack([torch.tensor(python_order(r)[:k]) for r in x.tolist()]))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(1, 8), st.integers(0, 2**31 - 1), st.booleans())
def test_first_k_members_of_a_ranking_are_the_masked_topk(n, k, seed, coarse):
    """Reading a restricted top-k from the unrestricted ranking gives the top-k of the masked values."""
    gen, k, x = tied_rows(6, n, k, seed, coarse)
    member = torch.rand(6, n, generator=gen) < 0.4
    member[torch.arange(6)[:, None], torch.randperm(n, generator=gen)[:k]] = True    # at least k per row
    masked = x.masked_fill(~member, float("-inf"))
    assert torch.equal(first_k_in(order_desc(x), member, k), topk_ids(masked, k))
    assert torch.equal(first_k_in(order_desc(x), member[:1], k), topk_ids(x.masked_fill(~member[:1], float("-inf")), k))


@settings(max_examples=100, deadline=None)
@given(problems())
def test_route_breaks_ties_to_the_lower_index(problem):
    """Natural and constrained routing pick the k largest choice values (the logits, or the scores plus the bias;
    group-limited: the token's groups first), ties to the lower expert index."""
    logits, _, router, _, _ = problem
    z = logits.to(torch.bfloat16).float()                                    # bf16-rounded: ties
    E, k = z.shape[1], router.top_k
    eligible = torch.arange(E) % 3 != 1
    eligible[:k] = True
    scores = router.scores(z)                                                # the logits, or the scores
    first = router.in_groups(scores).float() if router.grouped else scores
    for mask in (None, eligible):
        ids, _ = route(z, mask, router)
        allowed = torch.ones(E, dtype=torch.bool) if mask is None else mask
        assert ids.tolist() == [[e for e in python_order(p, s) if allowed[e]][:k]
                                for p, s in zip(first.tolist(), scores.tolist(), strict=True)]


def torch_verifier(plan, blocks):
    verifier = make_verifier("torch", plan)
    verifier.prepare(blocks)
    return verifier


@settings(max_examples=150, deadline=None)
@given(problems(), st.sampled_from(SPECULATING))
def test_batched_agrees_exactly_with_reference(problem, method):
    logits, block, router, cfg, budget = problem
    plan = plan_of(method, block, router, cfg, budget, logits.shape[1])
    ref = select(plan, logits, block)
    fast = torch_verifier(plan, block)(logits[None])
    assert torch.equal(ref.eligible, fast.eligible[0])
    assert torch.equal(ref.anchor, fast.anchor[0])
    assert torch.equal(ref.utility, fast.utility[0])
    ids, weights = route(logits, ref.eligible, router)
    assert torch.equal(ids, fast.ids[0]) and torch.allclose(weights, fast.weights[0], rtol=0, atol=1e-7)


@settings(max_examples=40, deadline=None)
@given(problems(max_t=12), st.sampled_from(SPECULATING), st.integers(2, 4))
def test_batched_over_blocks_equals_per_block(problem, method, blocks):
    logits, block, router, cfg, budget = problem
    plan = plan_of(method, block, router, cfg, budget, logits.shape[1])
    stack = torch.stack([logits * (1 + 0.5 * i) for i in range(blocks)])    # [B, T, E]
    fast = torch_verifier(plan, [block] * blocks)(stack)
    for i, sel in enumerate(select_pass(plan, stack, [block] * blocks)):
        assert torch.equal(fast.eligible[i], sel.eligible)


@settings(max_examples=150, deadline=None)
@given(problems(), st.sampled_from(SPECULATING))
def test_set_invariants(problem, method):
    logits, block, router, cfg, budget = problem
    plan = plan_of(method, block, router, cfg, budget, logits.shape[1])
    spec, sel = plan.spec, select(plan, logits, block)
    k = router.top_k
    size = int(sel.eligible.sum())
    assert not (sel.anchor & ~sel.eligible).any()                            # anchor inside S
    assert size >= k
    if spec.sizing is Sizing.FIXED:
        assert size == budget
    if spec.sizing is Sizing.ALL:
        assert size == logits.shape[1]
    if spec.anchor:
        assert int(sel.anchor.sum()) == k                                     # A = K_root
    if spec.sizing is Sizing.SELF:
        demand = int(((sel.utility > 0) & ~sel.anchor).sum())
        n_er = size - int(sel.anchor.sum())
        assert (1 <= n_er <= demand) if demand else n_er == 0
    ids, weights = route(logits, sel.eligible, router)
    assert sel.eligible[ids].all()                                           # routed ids always eligible
    assert torch.allclose(weights.sum(-1), torch.full((len(ids),), router.scale)) or not router.renormalize


@settings(max_examples=100, deadline=None)
@given(problems())
def test_all_eligible_routing_is_natural_bit_for_bit(problem):
    logits, _, router, _, _ = problem
    nat_ids, nat_w = router.natural(logits)
    ids, w = route(logits, torch.ones(logits.shape[1], dtype=torch.bool), router)
    assert torch.equal(ids, nat_ids) and torch.equal(w, nat_w)


@settings(max_examples=100, deadline=None)
@given(problems(), st.integers(0, 2**31 - 1))
def test_mask_before_or_after_softmax_gives_same_weights(problem, seed):
    """For renormalising routers: the score over the masked logits, top-k, renormalise equals the unmasked
    scores of the same chosen experts renormalised (a score after the top-k ignores the rest, and a sigmoid does
    not see the mask)."""
    logits, _, router, _, _ = problem
    if not router.renormalize:
        return
    E, k = logits.shape[1], router.top_k
    gen = torch.Generator().manual_seed(seed)
    eligible = torch.zeros(E, dtype=torch.bool)
    eligible[torch.randperm(E, generator=gen)[: int(torch.randint(k, E + 1, (1,), generator=gen))]] = True
    ids, w = route(logits, eligible, router)
    z = logits.float()
    if router.order is Order.TOPK_THEN_SCORE:                                # the chosen logits alone
        p = torch.softmax(z.gather(-1, ids), -1) if router.scoring is Scoring.SOFTMAX else z.gather(-1, ids).sigmoid()
    else:                                                                    # mask after the score
        p = (torch.softmax(z, -1) if router.scoring is Scoring.SOFTMAX else z.sigmoid()).gather(-1, ids)
    after = p / p.sum(-1, keepdim=True) * router.scale
    assert torch.allclose(w, after, atol=1e-6)


@settings(max_examples=100, deadline=None)
@given(st.integers(3, 64), st.floats(0.05, 0.9), st.integers(0, 2**31 - 1))
def test_concentrated_demand_gives_smaller_set_than_diffuse(n, share, seed):
    """One expert holding over 92% of the demand vs near-uniform demand over the same n >= 3 experts."""
    gen = torch.Generator().manual_seed(seed)
    diffuse = torch.rand(n, generator=gen) * 0.1 + 1.0                         # near-uniform
    concentrated = diffuse.clone()
    concentrated[0] = diffuse[1:].sum() * (1 + 10 / share)                   # one expert dominates
    # block scores as gates give them: each token's demand sums to at most 1 (here one token's worth)
    assert rank_of(concentrated / concentrated.sum()) < rank_of(diffuse / diffuse.sum())


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 128))
def test_uniform_demand_over_n_experts_has_rank_n(n):
    assert rank_of(torch.full((n,), 0.37)) == n
    assert rank_of(torch.zeros(n)) == 0


@st.composite
def prune_cases(draw):
    E = draw(st.integers(2, 40))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    eligible = torch.rand(E, generator=gen) < draw(st.floats(0.2, 1.0))
    anchor = eligible & (torch.rand(E, generator=gen) < 0.2)
    utility = torch.where(torch.rand(E, generator=gen) < 0.2, 0.0, torch.rand(E, generator=gen))
    if draw(st.booleans()):
        utility = torch.round(utility * 4) / 4                                 # ties
    resident = torch.rand(E, generator=gen) < draw(st.floats(0.0, 1.0))
    k = draw(st.integers(1, min(E, 8)))
    fit = Fit(Router.preset("softmax_topk", k), E, max_depth=1, store="offloaded")
    cfg = SelectorConfig(prune_rho=draw(st.floats(0.0, 1.0)), prune_min_set=draw(st.integers(0, 12)))
    plan = Variant("acceptmoe").bind(fit, commitment=(1.0, 0.5), selector=cfg)
    return Selection(eligible, utility.float(), anchor), resident, plan


@settings(max_examples=200, deadline=None)
@given(prune_cases())
def test_pruning_rules(case):
    sel, resident, plan = case
    cfg = plan.selector
    kept = prune(sel, resident, plan)
    removed = sel.eligible & ~kept
    assert not (kept & ~sel.eligible).any()                                  # only removes
    assert not (removed & (sel.anchor | resident)).any()                     # never anchors or residents
    u = sel.utility.double()
    assert float(u[removed].sum()) <= cfg.prune_rho * float(u[sel.eligible].sum()) * (1 + 1e-4) + 1e-6
    assert int(kept.sum()) >= min(plan.min_set, int(sel.eligible.sum()))   # never below max(s_min, top_k)
    assert plan.min_set == max(cfg.prune_min_set, plan.router.top_k)
    cand = sel.eligible & ~resident & ~sel.anchor
    if removed.any() and (cand & kept).any():                                # removed = lowest prefix
        assert float(u[removed].max()) <= float(u[cand & kept].min())
    assert torch.equal(kept, prune_batched(plan, sel, resident))            # batched form agrees
    everything = torch.ones_like(resident)
    assert torch.equal(prune(sel, everything, plan), sel.eligible)          # full residency: no-op
