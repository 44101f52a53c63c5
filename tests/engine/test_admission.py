"""Token-side admission (docs/method.md, "Token-side admission") on the tiny world: a truncation-only method (an
admission rule with every expert eligible) is lossless, its greedy tokens Vanilla AR's, alone and batched, while
its trees really are cut; every rule admits an ancestor-closed prefix by survival; an admitting method batched
is each request alone; recording never changes what admission computes; the rules, the plan checks and the
refusal of an engine without admission."""
from __future__ import annotations

import random

import pytest
import torch

from acceptmoe.costs.verify import DEFAULT_PROFILE, fit, load_profile
from acceptmoe.engine import TreeShape, load_engine
from acceptmoe.engine.admission import subtree
from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.tree import DraftTree
from acceptmoe.errors import UserError
from acceptmoe.methods import (
    METHODS,
    Admission,
    ConfigError,
    MethodSpec,
    Score,
    Sizing,
    UnionGrowth,
    Variant,
    VerifyCost,
    admitted,
)
from acceptmoe.methods.admission import RULES, ranked
from acceptmoe.paths import TINY

P_HAT = (1.0, 0.7, 0.4, 0.2)
PROMPTS = [[5, 17, 300], [3, 9, 27, 81, 115, 89, 11], list(range(40, 60)), [250, 251, 252]]
NEW = 24
TREE = TreeShape(3, 4, 12)
# a cost whose tokens are dear: every rule cuts the tiny world's trees (the committed profile cuts few of them)
DEAR = VerifyCost(fixed_s=1e-3, per_token_s=4e-4, per_byte_s=1e-10, expert_bytes=49152, moe_layers=4, source="test")
TRUNCATION_ONLY = [m for m, s in METHODS.items() if s.admits and not s.restricts]
ADMITTING = [m for m, s in METHODS.items() if s.admits]
GREEDY = GenerationOptions(ignore_eos=True)


@pytest.fixture(scope="module")
def engine():
    torch.set_num_threads(1)
    return load_engine(TINY, tree=TREE)


def _plan(engine, method, cost=DEAR):
    return Variant(method).bind(engine.fit, commitment=P_HAT, b0=12, cost=cost)


def _sizes(gen) -> list[int]:
    return [len(b.parents) for b in gen.trace.blocks]


def test_the_registry_has_truncation_only_and_composed_admitting_methods():
    assert len(TRUNCATION_ONLY) >= 2 and any(METHODS[m].restricts for m in ADMITTING)
    assert {METHODS[m].admission for m in ADMITTING} == {a for a in Admission if a.truncates}
    assert all(METHODS[m].beyond_paper for m in ADMITTING)
    assert set(RULES) == set(Admission)                      # checked at import: one rule per member


@pytest.mark.parametrize("method", TRUNCATION_ONLY)
def test_a_truncation_only_method_is_vanilla_ar_greedy(engine, method):
    ar = engine.generate_many(PROMPTS, Variant("vanilla-ar").bind(engine.fit), NEW, GREEDY)
    plan = _plan(engine, method)
    alone = engine.generate_many(PROMPTS, plan, NEW, GREEDY)
    together = engine.generate_batch(PROMPTS, plan, NEW, GREEDY)
    assert [g.tokens for g in alone] == [g.tokens for g in ar]
    assert [g.tokens for g in together] == [g.tokens for g in ar]
    sizes = [n for g in alone for n in _sizes(g)]
    assert min(sizes) < TREE.num_draft_tokens                # the rule did cut trees: the test can fail
    assert all(len(g.tokens) == NEW for g in alone)


@pytest.mark.parametrize("method", ADMITTING)
def test_an_admitting_method_batched_is_each_request_alone(engine, method):
    plan = _plan(engine, method)
    alone = [engine.generate(p, plan, NEW, GREEDY) for p in PROMPTS]
    together = engine.generate_batch(PROMPTS, plan, NEW, GREEDY)
    assert [g.tokens for g in together] == [g.tokens for g in alone]
    assert [_sizes(g) for g in together] == [_sizes(g) for g in alone]
    assert [[b.layers["set_size"] for b in g.trace.blocks] for g in together] == \
        [[b.layers["set_size"] for b in g.trace.blocks] for g in alone]


@pytest.mark.parametrize("method", ["standard-sd-prefix", "acceptmoe-costed"])
def test_recording_never_changes_what_admission_admits(engine, method):
    plan = _plan(engine, method)
    traced = engine.generate(PROMPTS[2], plan, NEW, GREEDY)
    bare = engine.generate(PROMPTS[2], plan, NEW, GenerationOptions(ignore_eos=True, trace_layers=False))
    assert bare.tokens == traced.tokens and _sizes(bare) == _sizes(traced)
    assert traced.trace.blocks[0].layers and bare.trace.blocks[0].layers is None


def test_the_committed_profile_runs_and_admission_never_grows_a_tree(engine):
    plan = _plan(engine, "standard-sd-prefix", load_profile())
    gen = engine.generate(PROMPTS[1], plan, NEW, GREEDY)
    assert max(_sizes(gen)) <= TREE.num_draft_tokens
    assert plan.describe()["admission"]["cost"]["source"].startswith("COMMITTED DEFAULT")
    assert "admission" not in _plan(engine, "standard-sd").describe()      # other methods' records unchanged


def _random_tree(rng: random.Random, T: int) -> tuple[list[float], list[int]]:
    parents, logp = [-1], [0.0]
    for i in range(1, T):
        p = rng.randrange(i)
        parents.append(p)
        logp.append(logp[p] + rng.choice([0.0, -0.1, -0.7, -2.0, -5.0]))     # ties included
    return [float(torch.tensor(x).exp()) for x in logp], parents


@pytest.mark.parametrize("rule", list(Admission))
def test_every_rule_admits_an_ancestor_closed_prefix_by_survival(rule):
    rng = random.Random(0)
    for _ in range(200):
        survival, parents = _random_tree(rng, rng.randrange(1, 30))
        cost = VerifyCost(rng.random() * 1e-2, rng.random() * 1e-3, rng.random() * 1e-9, 49152, 4)
        keep = admitted(rule, survival, parents, cost, UnionGrowth(64, 4, rng.random()),
                        UnionGrowth(64, 4, rng.random()), rng.choice([None, 8, 16]))
        assert keep[0] == 0 and keep == sorted(set(keep))
        assert all(parents[i] in keep for i in keep[1:])
        assert keep[1:] == sorted(ranked(survival)[: len(keep) - 1])
        if rule is Admission.ALL:
            assert keep == list(range(len(survival)))


def test_costed_admission_weighs_the_methods_own_set():
    """With experts dear, a method whose own set stays small (a cap) admits more than the natural union allows."""
    survival, parents = [1.0] + [0.3] * 12, [-1] + [0] * 12
    cost = VerifyCost(1e-3, 1e-5, 2e-9, 49152, 4)
    natural = UnionGrowth(128, 8)
    wide = admitted(Admission.COSTED, survival, parents, cost, natural)
    capped = admitted(Admission.COSTED, survival, parents, cost, natural, UnionGrowth(128, 8), cap=8)
    assert len(wide) == 1 and len(capped) == 13                 # the root alone vs every node


def test_union_growth_refits_to_a_measured_pass():
    g = UnionGrowth(128, 8)
    assert g.at(1) == pytest.approx(8) and g.at(0) == 0
    g.observe(16, 30.0)
    assert 0 < g.c < 1 and g.at(16) == pytest.approx(30.0, rel=1e-6)


def test_subtree_keeps_tokens_scores_and_positions():
    tree = DraftTree.from_parents([9, 1, 2, 3, 4], [-1, 0, 0, 1, 2], root_position=7,
                                  scores=torch.tensor([0.0, -0.1, -0.5, -0.2, -0.9]))
    cut = subtree(tree, [0, 1, 3])
    assert cut.tokens.tolist() == [9, 1, 3] and cut.parents.tolist() == [-1, 0, 1]
    assert cut.positions.tolist() == [7, 8, 9] and cut.scores.tolist() == pytest.approx([0.0, -0.1, -0.2])


def test_plans_check_the_cost_profile(engine):
    with pytest.raises(ConfigError, match="verify-cost model: bind a profile"):
        Variant("standard-sd-survival").bind(engine.fit)
    assert _plan(engine, "acceptmoe").cost is None                   # ignored where a method admits everything
    with pytest.raises(ValueError, match="admission truncates"):
        MethodSpec("toy", Sizing.NONE, None, admission=Admission.SURVIVAL)
    offloaded = Variant("standard-sd-prefix").bind
    with pytest.raises(ConfigError, match="fetch cost"):
        offloaded(type(engine.fit)(engine.fit.router, engine.fit.num_experts, 3, "offloaded"), cost=DEAR)
    assert Score.GATE_MASS is METHODS["standard-sd-prefix"].score


def test_an_engine_without_admission_refuses_it_before_a_run():
    from acceptmoe.engine import Capabilities, Engine
    from acceptmoe.experiments.spine.engines import ENGINES, require_admission

    class Plain(Engine):
        name = "plain-admit"
        capabilities = Capabilities(records_routes=False, offloads=False, switches_plans_freely=True,
                                    verifies_batched=False)
    ENGINES.add("plain-admit", Plain)
    try:
        require_admission("plain-admit", ["standard-sd", "acceptmoe"])
        with pytest.raises(UserError, match="standard-sd-survival: token-side admission is not wired into the "
                                            "plain-admit engine .* use an engine that admits \\(native"):
            require_admission("plain-admit", ["standard-sd", "standard-sd-survival"])
        require_admission("native", ADMITTING)
    finally:
        ENGINES.remove("plain-admit")


def test_the_profile_fit_recovers_its_parameters():
    truth = VerifyCost(2e-3, 1e-4, 3e-10, 1000, 4)
    samples = [{"tokens": n, "experts": e, "fetched": 0, "seconds": truth.seconds(n, e)}
               for n in (1, 2, 4, 8, 16) for e in (8, 16, 40)]
    got = fit(samples, 1000, 4, "synthetic")
    assert got.fixed_s == pytest.approx(truth.fixed_s) and got.per_token_s == pytest.approx(truth.per_token_s)
    assert got.per_byte_s == pytest.approx(truth.per_byte_s) and got.fetch_per_byte_s is None
    assert DEFAULT_PROFILE.is_file()
