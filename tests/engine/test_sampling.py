"""Sampling in the native engine (`acceptmoe.engine.sampling`, docs/method.md "Sampling") on the tiny world:
refused options, temperature/top-k/top-p by hand, temperature 0 is the greedy engine of before, a seed
reproduces, every batched request draws from a generator of its own, a restricting method samples, the tree
rule has the law of the recursive rejection rule, and Standard SD's first tokens have Vanilla AR's law.

Both statistical tests are chi-square goodness-of-fit tests at alpha = 0.01 against exact laws, over fixed
seeds (deterministic on one machine). Power: for an alternative law q at total variation delta from the law p
(on the cells tested, rare cells pooled so each expects >= 5), the noncentrality is
n * sum((q - p)^2 / p) >= 4 n delta^2 (Cauchy-Schwarz, sum p = 1); the smallest delta detected with 80 % power
against every such q is therefore sqrt(lambda_80 / 4n), lambda_80 the noncentrality at which the noncentral
chi-square passes the critical value with probability 0.8 (`acceptmoe.evals.goodness`, computed in each test).
"""
from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from acceptmoe.engine import DraftTree, TreeShape, load_engine
from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.sampling import accept, distribution, exact_law, generator
from acceptmoe.errors import UserError
from acceptmoe.evals.goodness import ALPHA, chi_square, min_detectable_tv
from acceptmoe.paths import TINY

from spec_checkpoints import one_thread
from variants import plan

P_HAT = (1.0, 0.7, 0.4, 0.2)
# "Question: Tom has 3 apples and buys 4 more. How many apples does he have?\nAnswer:" in the tiny tokenizer
QUESTION = [51, 87, 343, 75, 312, 28, 428, 413, 429, 223, 21, 810, 406, 484, 223, 22, 533, 16, 385, 368, 810,
            403, 522, 437, 33, 201, 35, 80, 367, 265, 28]
# its 24 greedy tokens (EOS ignored) and Standard SD's accept lengths, from the engine before sampling existed
GREEDY = [24, 708, 223, 21, 272, 223, 22, 201, 22, 336, 223, 22, 272, 223, 25, 201, 379, 223, 25, 2, 2, 2, 2, 339]
GREEDY_SD_ACCEPTS = [3, 3, 3, 3, 2, 2, 2, 4, 1]
UNSURE = [16, 223, 932, 484, 223, 24]   # ". Zoe buys 6": the target spreads its next tokens; the draft holds some


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    yield from one_thread()


@pytest.fixture(scope="module")
def engine():
    return load_engine(TINY, tree=TreeShape(3, 4, 12))


def sampled(**kw) -> GenerationOptions:
    return GenerationOptions(ignore_eos=True, trace_layers=False, **kw)


# ----- the options record -----
@pytest.mark.parametrize("field, value", [("temperature", -0.5), ("temperature", float("nan")), ("top_p", 0.0),
                                          ("top_p", 1.5), ("top_k", -1), ("top_k", 2.5), ("seed", -3)])
def test_bad_sampling_options_are_refused_by_name(field, value):
    with pytest.raises(UserError, match=field):
        GenerationOptions(**{field: value})


def test_temperature_then_top_k_then_top_p():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    p = distribution(logits, GenerationOptions(temperature=2.0))
    torch.testing.assert_close(p, torch.softmax(logits / 2, -1))
    ties = distribution(torch.tensor([[3.0, 2.0, 2.0, 1.0]]), GenerationOptions(temperature=1.0, top_k=2))
    assert ties[0, 3] == 0 and ties[0, 1] == ties[0, 2] > 0                   # a tie with the k-th stays
    probs = torch.tensor([[0.4, 0.3, 0.2, 0.1]])
    nucleus = distribution(probs.log(), GenerationOptions(temperature=1.0, top_p=0.65))
    torch.testing.assert_close(nucleus, torch.tensor([[4 / 7, 3 / 7, 0.0, 0.0]]))   # 0.4 < 0.65 <= 0.7
    # top-k first: {0.4, 0.3} renormalised to {4/7, 3/7}, whose first already holds top_p = 0.5 (the other
    # order, top-p then top-k, would keep both)
    both = distribution(probs.log(), GenerationOptions(temperature=1.0, top_k=2, top_p=0.5))
    torch.testing.assert_close(both, torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="greedily"):
        distribution(logits, GenerationOptions())


# ----- greedy, seeds, batches, restriction -----
def test_temperature_zero_is_the_greedy_engine_of_before(engine):
    ignored = GenerationOptions(ignore_eos=True, top_k=3, top_p=0.5, seed=7)     # temperature 0: all ignored
    for method in ("vanilla-ar", "standard-sd", "acceptmoe"):
        p = plan(engine, method, commitment=P_HAT, b0=12)
        for options in (GenerationOptions(ignore_eos=True), ignored):
            gen = engine.generate(QUESTION, p, 24, options)
            assert gen.tokens == GREEDY
            if method != "vanilla-ar":
                assert gen.accept_lengths == GREEDY_SD_ACCEPTS


def test_a_seed_reproduces_and_seeds_differ(engine):
    for method in ("vanilla-ar", "standard-sd"):
        p = plan(engine, method)
        runs = [engine.generate(UNSURE, p, 16, sampled(temperature=1.0, seed=s)).tokens for s in (0, 0, 1, 2)]
        assert runs[0] == runs[1]
        assert len({tuple(r) for r in runs}) == 3
    a, b = (generator(sampled(temperature=1.0), engine.device) for _ in range(2))     # seed None: fresh
    assert a is not None and b is not None and a.initial_seed() != b.initial_seed()
    assert generator(GenerationOptions(), engine.device) is None


def test_batched_requests_draw_from_generators_of_their_own(engine):
    """Two identical requests of one batch, seeded alike, draw alike (a generator shared by the batch would
    give them different draws), and each is the request generated alone."""
    p = plan(engine, "standard-sd")
    options = sampled(temperature=1.0, seed=11)
    batch = engine.generate_batch([UNSURE, UNSURE, QUESTION], p, 12, options)
    alone = engine.generate(UNSURE, p, 12, options)
    assert batch[0].tokens == batch[1].tokens == alone.tokens
    assert batch[0].accept_lengths == alone.accept_lengths
    assert batch[2].tokens == engine.generate(QUESTION, p, 12, options).tokens


def test_a_restricting_method_samples(engine):
    """AcceptMoE under sampling: generate and a batched verify pass run, reproduce with their seed, and at
    the full budget (its sets hold every expert) draw what Standard SD draws with the same seed."""
    options = sampled(temperature=0.8, top_p=0.95, seed=5)
    restricted = plan(engine, "acceptmoe", commitment=P_HAT, b0=12)
    gens = [engine.generate(UNSURE, restricted, 16, options) for _ in range(2)]
    assert gens[0].tokens == gens[1].tokens and len(gens[0].tokens) == 16
    batch = engine.generate_batch([UNSURE, QUESTION], restricted, 16, options)
    assert [len(g.tokens) for g in batch] == [16, 16] and batch[0].tokens == gens[0].tokens
    full = plan(engine, "acceptmoe-b", budget=engine.fit.num_experts, commitment=P_HAT)
    natural = plan(engine, "standard-sd")
    for prompt in (UNSURE, QUESTION):
        assert engine.generate(prompt, full, 16, options).tokens == engine.generate(prompt, natural, 16, options).tokens


# ----- exactness in distribution -----
def rule_law(tree: DraftTree, probs: torch.Tensor) -> dict[tuple[int, ...], float]:
    """The exact law of one step's output (accepted tokens, then the bonus) under the recursive rule as
    docs/method.md states it, written out independently of `sampling.accept`: at each node try the children
    in order, accept x with probability p(x) (q = 1: a top-k child is a deterministic proposal), on rejection
    p <- norm(max(0, p - q)) (x removed); all rejected: the bonus from the residual."""
    toks, pars = tree.tokens.tolist(), tree.parents.tolist()
    kids: dict[int, list[int]] = {}
    for node in range(1, len(toks)):
        kids.setdefault(pars[node], []).append(node)
    law: dict[tuple[int, ...], float] = Counter()

    def walk(node: int, prefix: tuple[int, ...], weight: float) -> None:
        p = probs[node].double().clone()
        for child in kids.get(node, []):
            x = toks[child]
            mass = float(p.sum())
            a = float(p[x]) / mass if mass > 0 else 0.0
            if a > 0:
                walk(child, prefix + (x,), weight * a)
            weight *= 1 - a
            p[x] = 0
        if weight > 0:
            p = p / p.sum()
            for z in torch.nonzero(p).flatten().tolist():
                law[prefix + (z,)] += weight * float(p[z])
    walk(0, (), 1.0)
    return dict(law)


def test_the_tree_rule_has_the_recursive_rules_law():
    """`sampling.accept` (one draw per node, then the walk) against `rule_law` over a tree of depth 3 with a
    repeated sibling token, under temperature, top-k and top-p: N = 20000 draws; min_detectable_tv (80 %
    power, alpha 0.01) is asserted below 0.03 at the df the law gives (about 0.02)."""
    parents = [-1, 0, 0, 0, 1, 1, 2, 4, 4]
    tokens = [9, 0, 1, 0, 2, 3, 4, 5, 1]                  # node 3 repeats node 1's token: rejected surely
    tree = DraftTree.from_parents(tokens, parents)
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(len(tokens), 7, generator=g) * 1.5
    options = GenerationOptions(temperature=0.9, top_k=6, top_p=0.97, seed=2)
    law = rule_law(tree, distribution(logits, options))
    assert math.isclose(sum(law.values()), 1.0, rel_tol=1e-9)
    assert any(len(s) == 4 for s in law) and any(len(s) == 1 for s in law)       # deep accepts and root bonuses
    rng, n = generator(options, torch.device("cpu")), 20000
    samples = []
    for _ in range(n):
        path, bonus = accept(tree, logits, options, rng)
        samples.append(tuple(tokens[i] for i in path[1:]) + (bonus,))
    stat, pvalue, df = chi_square(samples, law)
    assert min_detectable_tv(n, df) < 0.03
    assert pvalue > ALPHA, f"chi2 = {stat:.1f}, df = {df}, p = {pvalue:.2g}"


@pytest.mark.slow
def test_standard_sd_draws_the_first_tokens_with_vanilla_ars_law(engine):
    """The first two tokens after UNSURE at temperature 1, top_k 6, top_p 0.95, tree (3, 4, 12): the first is
    the prefill's draw, the second the first tree step's (a root child accepted in 56 % of draws, the bonus
    drawn from the residual in 44 %). Standard SD over 1000 seeds and Vanilla AR over 500 other seeds, each
    against `sampling.exact_law` (11 pairs; 10 and 9 df once rare pairs are pooled): min_detectable_tv (80 % power,
    alpha 0.01) is 0.074 for Standard SD and 0.104 for Vanilla AR (asserted below 0.08 and 0.11). Against
    the likely wrong rules, computed for these trees, the power is 1.0: the bonus drawn from p rather than
    the residual (TV 0.21; chi2 = 245 when injected), acceptance min(1, p / q) with q the draft's softmax
    (TV 0.44), and greedy acceptance with a sampled bonus (TV 0.43; chi2 = 839 when injected)."""
    options = dict(temperature=1.0, top_k=6, top_p=0.95)
    law = exact_law(engine.model, UNSURE, GenerationOptions(**options), 2)
    for method, seeds, bound in (("standard-sd", range(1000), 0.08), ("vanilla-ar", range(1000, 1500), 0.11)):
        p = plan(engine, method)
        samples = [tuple(engine.generate(UNSURE, p, 2, sampled(seed=s, **options)).tokens) for s in seeds]
        stat, pvalue, df = chi_square(samples, law)
        assert min_detectable_tv(len(samples), df) < bound, method
        assert pvalue > ALPHA, f"{method}: chi2 = {stat:.1f}, df = {df}, p = {pvalue:.2g}"
