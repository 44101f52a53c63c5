"""Every interval rule of `evals.stats` against a reference: the percentile bootstrap draw for draw against
scipy.stats.bootstrap, the paired proportions' score interval against a published value and statsmodels' Wilson
limits, the stratified, two-way and hierarchical bootstraps against their definitions, the subset bootstrap of draws of
prompts against the bootstrap that rebuilds every draw from resampled prompts (and its deletions against
enumerated draws); and the B0 rounding rule."""
import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from acceptmoe.evals import stats
from acceptmoe.evals.stats import (
    bootstrap_mean,
    bootstrap_ratio,
    choose_b0,
    crosses_rounding_boundary,
    paired_bootstrap_diff,
    round_half_up,
    totals_and_counts,
)


def _scipy(data, statistic, n_resamples, seed, paired=False):
    """scipy's percentile interval, its resamples drawn in our chunks (so the draws are the same draws)."""
    batch = max(1, stats._CHUNK_ELEMENTS // len(data[0]))
    res = sps.bootstrap(data, statistic, paired=paired, vectorized=True, n_resamples=n_resamples, batch=batch,
                        method="percentile", confidence_level=0.95, rng=np.random.default_rng(seed))
    return res.confidence_interval.low, res.confidence_interval.high


@pytest.mark.parametrize("kind", ["binary", "normal"])
def test_mean_interval_is_scipys_draw_for_draw(kind):
    rng = np.random.default_rng(7)
    x = (rng.random(300) < 0.8).astype(float) if kind == "binary" else rng.normal(5.0, 2.0, 120)
    ours = bootstrap_mean(x, n_resamples=20_000, seed=1)
    low, high = _scipy((x,), lambda s, axis: s.mean(axis=axis), 20_000, 1)
    assert ours.estimate == pytest.approx(x.mean())
    assert ours.low == pytest.approx(low, rel=1e-12) and ours.high == pytest.approx(high, rel=1e-12)
    assert ours.low < ours.estimate < ours.high


def test_paired_difference_of_non_binary_values_is_scipys_paired_bootstrap():
    rng = np.random.default_rng(3)
    a, b = rng.normal(1.0, 1.0, 250), rng.normal(0.9, 1.0, 250)
    ours = paired_bootstrap_diff(a, b, n_resamples=20_000, seed=2)
    low, high = _scipy((a, b), lambda s, t, axis: s.mean(axis=axis) - t.mean(axis=axis), 20_000, 2, paired=True)
    assert ours.method == "percentile-bootstrap" and ours.estimate == pytest.approx(a.mean() - b.mean())
    assert ours.low == pytest.approx(low, rel=1e-12) and ours.high == pytest.approx(high, rel=1e-12)


def test_ratio_is_scipys_bootstrap_of_the_pooled_ratio():
    rng = np.random.default_rng(4)
    num, den = rng.gamma(3.0, 2.0, 80), rng.gamma(2.0, 1.0, 80) + 0.5
    ours = bootstrap_ratio(num, den, n_resamples=5000, seed=9)
    low, high = _scipy((num, den), lambda n, d, axis: n.sum(axis) / d.sum(axis), 5000, 9, paired=True)
    assert ours.low == pytest.approx(low, rel=1e-12) and ours.high == pytest.approx(high, rel=1e-12)


# ----- strata -----

def test_one_stratum_is_the_plain_bootstrap_draw_for_draw():
    x = np.random.default_rng(5).normal(size=90)
    assert bootstrap_mean(x, n_resamples=3000, seed=4, strata=["t"] * 90) == bootstrap_mean(x, n_resamples=3000,
                                                                                          seed=4)


def test_a_stratified_resample_keeps_every_stratum_in_its_place():
    strata = ["a"] * 5 + ["b"] * 7 + ["c"] * 3
    for idx in stats.index_chunks(15, 400, 0, strata):
        assert ((idx[:, :5] < 5).all() and ((idx[:, 5:12] >= 5) & (idx[:, 5:12] < 12)).all()
                and (idx[:, 12:] >= 12).all())


def test_stratifying_removes_the_spread_between_strata():
    """Two tasks with very different means: the task mix never changes in a stratified resample, so the
    interval of the pooled mean is narrower than the plain bootstrap's."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 0.1, 40), rng.normal(10, 0.1, 40)])
    plain, strat = bootstrap_mean(x, n_resamples=4000), bootstrap_mean(x, n_resamples=4000, strata=[0] * 40 + [1] * 40)
    assert strat.high - strat.low < (plain.high - plain.low) / 5
    assert plain.estimate == strat.estimate


def test_strata_need_one_label_per_unit():
    with pytest.raises(ValueError, match="one label per unit"):
        bootstrap_mean([1.0, 2.0, 3.0], strata=["a", "b"])


# ----- paired proportions -----

def test_paired_proportions_give_the_published_newcombe_interval():
    """Fagerland, Lydersen and Laake's paired 2x2 example (59, 6 / 16, 80): Newcombe's square-and-add interval
    -0.0621 (95% CI -0.1186 to -0.0046), as their R package `contingencytables` tests it."""
    a = np.array([1] * 59 + [1] * 6 + [0] * 16 + [0] * 80, float)
    b = np.array([1] * 59 + [0] * 6 + [1] * 16 + [0] * 80, float)
    iv = stats.paired_proportions(a, b)
    assert iv.method == "newcombe-paired-score" and iv.n == 161
    assert (round(iv.estimate, 4), round(iv.low, 4), round(iv.high, 4)) == (-0.0621, -0.1186, -0.0046)


@pytest.mark.parametrize("x, n", [(0, 15), (7, 15), (15, 15), (121, 150), (1, 600)])
def test_the_wilson_limits_are_statsmodels(x, n):
    low, high = proportion_confint(x, n, alpha=0.05, method="wilson")
    assert stats.wilson(x, n) == pytest.approx((low, high), abs=1e-12)


@pytest.mark.parametrize("n", [15, 50, 150, 600])
def test_one_disagreeing_prompt_never_narrows_the_interval_below_none(n):
    a = np.resize([1.0, 0.0, 1.0, 1.0], n)
    none = paired_bootstrap_diff(a, a.copy(), n_resamples=100)
    b = a.copy()
    b[np.argmax(a == 0)] = 1.0                         # one prompt only the second method gets right
    one = paired_bootstrap_diff(a, b, n_resamples=100)
    assert none.method == one.method == "newcombe-paired-score"
    assert none.low < 0 < none.high and none.low == pytest.approx(-none.high)
    assert one.high - one.low >= none.high - none.low and one.low < one.estimate < 0 < one.high


def test_zero_discordance_keeps_a_width_that_shrinks_with_the_prompts():
    """No disagreeing prompt: a width that is not a claim of certainty, below the Clopper-Pearson bound on the
    discordant rate, and shrinking as prompts are added."""
    highs = []
    for n in (15, 150, 600):
        a = np.resize([1.0, 0.0, 1.0, 1.0, 1.0], n)
        iv = paired_bootstrap_diff(a, a.copy())
        assert 0 < iv.high < stats.no_discordance_bound(n) and iv.low == pytest.approx(-iv.high)
        highs.append(iv.high)
    assert highs == sorted(highs, reverse=True)


def test_the_mean_of_equal_binary_strata_is_the_pooled_score_interval_and_else_the_bootstrap():
    rng = np.random.default_rng(2)
    a = [(rng.random(50) < 0.8).astype(float) for _ in range(3)]
    b = [np.where(rng.random(50) < 0.1, 1 - x, x) for x in a]
    iv = stats.mean_of_strata_diff(a, b)
    assert iv == stats.paired_proportions(np.concatenate(a), np.concatenate(b))
    unequal = stats.mean_of_strata_diff([a[0], a[1][:30]], [b[0], b[1][:30]], n_resamples=2000)
    assert unequal.method == "percentile-bootstrap"
    assert unequal.estimate == pytest.approx(np.mean([(a[0] - b[0]).mean(), (a[1][:30] - b[1][:30]).mean()]))
    assert unequal.low < unequal.estimate < unequal.high


# ----- timed ratios, placebo, units -----

def _cells(P, R, seed=0, effect=1.0, drift=0.0):
    rng = np.random.default_rng(seed)
    tokens = np.full((P, R), 30.0)
    base = rng.gamma(20.0, 0.01, (P, 1)) * (1 + drift * rng.random((1, R)))   # per prompt, per repetition drift
    sb = base * rng.normal(1, 0.02, (P, R))
    sa = base * rng.normal(1, 0.02, (P, R)) / effect
    return tokens, sa, tokens, sb


def test_one_repetition_is_the_prompts_bootstrap_of_the_pooled_ratio():
    ta, sa, tb, sb = _cells(24, 1)
    iv = stats.timed_ratio(ta, sa, tb, sb, n_resamples=3000, seed=5)
    ref = stats.paired_bootstrap_speedup(sb[:, 0], tb[:, 0], sa[:, 0], ta[:, 0], n_resamples=3000, seed=5)
    assert iv.method == "two-way-bootstrap" and iv.n == 24
    assert (iv.estimate, iv.low, iv.high) == pytest.approx((ref.estimate, ref.low, ref.high), rel=1e-12)


def test_the_pooled_ratio_is_total_tokens_over_total_seconds():
    ta, sa, tb, sb = _cells(10, 5, effect=1.3)
    iv = stats.timed_ratio(ta, sa, tb, sb, n_resamples=500)
    assert iv.estimate == pytest.approx((ta.sum() / sa.sum()) / (tb.sum() / sb.sum()))
    assert iv.low < 1.3 < iv.high or abs(iv.estimate - 1.3) < 0.05


def test_drift_shared_by_a_cells_two_variants_cancels():
    """Load that slows a whole repetition slows both variants of its cells: the paired ratio does not move."""
    calm, drifting = _cells(20, 5, effect=1.2), _cells(20, 5, effect=1.2, drift=3.0)
    a, b = stats.timed_ratio(*calm, n_resamples=1000), stats.timed_ratio(*drifting, n_resamples=1000)
    assert abs(a.estimate - b.estimate) < 0.02 and b.low < 1.2 < b.high


def test_a_repetitions_shared_slowdown_widens_the_interval():
    """A repetition is one engine timing every prompt: when one variant runs slower in a whole repetition (its
    engine, the host's load then), the prompts of that repetition move together, which resampling repetitions
    once for all prompts carries and resampling them within each prompt would average away."""
    ta, sa, tb, sb = _cells(40, 5, seed=3)
    calm = stats.timed_ratio(ta, sa, tb, sb, n_resamples=2000)
    shifted = sa * np.array([1.0, 1.0, 1.25, 1.0, 0.8])[None, :]        # variant a's repetitions drift
    wide = stats.timed_ratio(ta, shifted, tb, sb, n_resamples=2000)
    assert (wide.high - wide.low) > 10 * (calm.high - calm.low)       # within-prompt draws: about 3.6x


def test_an_effect_counts_only_beyond_its_placebo():
    iv = lambda lo, hi: stats.Interval((lo + hi) / 2, lo, hi, 30, 0.95, 100, 0)   # noqa: E731
    placebo = iv(0.9, 1.1)
    assert stats.beyond_placebo(iv(1.12, 1.4), placebo) == 1
    assert stats.beyond_placebo(iv(0.5, 0.88), placebo) == -1
    assert stats.beyond_placebo(iv(1.05, 1.4), placebo) == 0        # excludes 1, but not the host's noise


def test_a_verdict_needs_enough_units():
    assert not stats.enough_units(stats.Interval(0, 0, 0, stats.MIN_UNITS - 1, 0.95, 1, 0))
    assert stats.enough_units(stats.Interval(0, 0, 0, stats.MIN_UNITS, 0.95, 1, 0))


def test_pairing_narrows_the_interval_for_correlated_methods():
    rng = np.random.default_rng(0)
    a = (rng.random(400) < 0.7).astype(float)
    b = a.copy()
    b[:8] = 1 - b[:8]
    paired = paired_bootstrap_diff(a, b)
    unpaired_width = (bootstrap_mean(a).high - bootstrap_mean(a).low) * np.sqrt(2)
    assert paired.high - paired.low < unpaired_width / 3


def test_fixed_seed_is_reproducible_and_seed_matters():
    x = np.arange(50) % 7
    assert bootstrap_mean(x, seed=5) == bootstrap_mean(x, seed=5)
    assert bootstrap_mean(x, seed=5).low != bootstrap_mean(x, seed=6).low or \
        bootstrap_mean(x, seed=5).high != bootstrap_mean(x, seed=6).high


def test_ratio_is_a_pooled_mean():
    totals, counts = np.array([30.0, 10.0, 50.0]), np.array([1.0, 1.0, 2.0])
    iv = bootstrap_ratio(totals, counts, n_resamples=2000)
    assert iv.estimate == pytest.approx(90 / 4)
    assert 10 <= iv.low <= iv.estimate <= iv.high <= 30


def test_non_binary_pairs_keep_the_bootstrap():
    iv = paired_bootstrap_diff([2.5, 3.0], [2.5, 3.0], n_resamples=100)
    assert iv.method == "percentile-bootstrap" and (iv.low, iv.high) == (0.0, 0.0)


def test_constant_data_gives_a_point_interval():
    iv = bootstrap_mean([1.0] * 20, n_resamples=100)
    assert (iv.estimate, iv.low, iv.high) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize("args, message", [
    (([],), "non-empty 1-D"),
    (([1.0, float("nan")],), "NaN"),
    (([[1.0, 2.0]],), "non-empty 1-D"),
])
def test_bad_inputs_are_errors(args, message):
    with pytest.raises(ValueError, match=message):
        bootstrap_mean(*args)


def test_paired_lengths_must_match():
    with pytest.raises(ValueError, match="one entry per prompt"):
        paired_bootstrap_diff([1, 0, 1], [1, 0])


def test_bad_confidence_and_resamples():
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_mean([1, 2], confidence=1.0)
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_mean([1, 2], n_resamples=0)


@pytest.mark.parametrize("x, expected", [(2.5, 3), (3.5, 4), (2.4999, 2), (-2.5, -2), (24.5, 25), (23.0, 23),
                                         (0.49999999999999994, 0), (33.50000000000001, 34)])
def test_round_half_up(x, expected):
    assert round_half_up(x) == expected


@pytest.mark.parametrize("low, high, crosses", [(23.4, 23.6, True), (23.6, 24.4, False), (22.9, 23.5, True),
                                                (23.5, 24.49, False), (26.0, 28.0, True),
                                                # an even integer's half: Python's round (halves to even) disagrees
                                                (24.5, 24.9, False), (24.1, 24.5, True), (24.5, 24.5, False),
                                                (24.49999, 24.5, True)])
def test_rounding_boundary(low, high, crosses):
    assert crosses_rounding_boundary(low, high) is crosses


@pytest.mark.parametrize("x, expected", [(0.5, 1), (1.5, 2), (2.5, 3), (24.5, 25), (-0.5, 0), (-1.5, -1)])
def test_round_half_up_is_not_pythons_round_at_any_half(x, expected):
    assert round_half_up(x) == expected


def test_b0_of_an_even_integers_half_rounds_up():
    """Every prompt's mean is exactly 24.5: a point interval, B0 = 25 (Python's round gives 24)."""
    totals, counts = np.full(50, 49.0), np.full(50, 2.0)
    d = choose_b0(totals, counts, n_resamples=200)
    assert d.b0 == 25 and not d.crosses_boundary and d.n_prompts == 50


def _prompts(means, blocks=40, spread=0.5, seed=0):
    """Per-prompt (total, count) of set sizes: each prompt has `blocks` block-layer pairs."""
    rng = np.random.default_rng(seed)
    totals = np.array([rng.normal(m, spread, blocks).sum() for m in means])
    return totals, np.full(len(means), float(blocks))


def test_b0_from_first_50_when_the_interval_is_clear():
    totals, counts = _prompts([27.1] * 120)
    d = choose_b0(totals, counts)
    assert (d.b0, d.n_prompts, d.first_crossed, d.crosses_boundary) == (27, 50, False, False)
    assert d.interval.n == 50


def test_b0_falls_back_to_100_prompts_when_the_interval_crosses():
    means = [26.0, 29.0] * 25 + [27.0] * 50  # first 50 average 27.5 with a wide interval
    totals, counts = _prompts(means, spread=0.1)
    d = choose_b0(totals, counts)
    assert d.first_crossed and d.n_prompts == 100 and d.interval.n == 100
    assert d.b0 == round_half_up(totals[:100].sum() / counts[:100].sum())


def test_b0_needs_enough_prompts():
    totals, counts = _prompts([26.0, 29.0] * 30, spread=0.1)
    with pytest.raises(ValueError, match="needs the first 100 prompts; got 60"):
        choose_b0(totals, counts)
    with pytest.raises(ValueError, match="first 50 prompts, got 10"):
        choose_b0(totals[:10], counts[:10])


def test_totals_and_counts_pool_every_block_and_layer():
    totals, counts = totals_and_counts([[[24, 26], [25, 25]], [30]])
    assert totals.tolist() == [100.0, 30.0] and counts.tolist() == [4.0, 1.0]
    with pytest.raises(ValueError, match=r"prompts \[1\] have no recorded set sizes"):
        totals_and_counts([[1], []])


# ----- draws of prompts -----

def _pool(n: int, experts: int = 32, passes: int = 5, seed: int = 0):
    """A pool of prompts with recorded expert sets [N, passes, E] for two methods (the second a subset of the
    first) and output tokens per pass [N, passes]: each prompt its own length, set size and topic (the experts
    it prefers), as a batch study's requests have."""
    rng = np.random.default_rng(seed)
    topic = rng.integers(0, 4, n)
    base = np.zeros((n, passes, experts), bool)
    output = np.zeros((n, passes))
    for i in range(n):
        w = np.exp(2.0 * (np.arange(experts) // (experts // 4) == topic[i]) + 0.5 * rng.normal(size=experts))
        for p in range(rng.integers(1, passes + 1)):
            base[i, p, rng.choice(experts, size=rng.integers(4, 14), replace=False, p=w / w.sum())] = True
            output[i, p] = 1 + rng.poisson(2)
    return base, base & (rng.random(base.shape) < rng.uniform(0.3, 0.9, (n, 1, 1))), output


def _draw_counts(base, method, output, members):
    """Per draw (rows of `members`, prompt indices): the union's size over passes for each method, and the output
    tokens: columns [method reads, output, base reads, output]."""
    reads = [m[members].any(-3).sum((-1, -2)) for m in (method, base)]
    out = output[members].sum((-1, -2))
    return np.stack([reads[0], out, reads[1], out], -1).astype(float)


def _per_token_ratio(m):
    return (m[..., 0] / m[..., 1]) / (m[..., 2] / m[..., 3])


def _width(x) -> float:
    low, high = np.quantile(x, [0.025, 0.975])
    return float(high - low)


@pytest.mark.parametrize("batch", [4, 16, 32])
def test_the_subset_bootstrap_is_the_bootstrap_that_rebuilds_every_draw_from_resampled_prompts(batch):
    """64 prompts, 24 draws of B: the exact reference resamples the pool's prompts, rebuilds every draw from the
    resampled prompts at its positions and recounts each union; the rule's width lies within 25 % of it at every
    B (0.90 to 1.18 over twelve pools and draw seeds). Resampling the draws instead (the old rule) is too narrow
    once B is a quarter of the pool or more (at most 0.52 of it there)."""
    n, draws = 64, 24
    base, method, output = _pool(n, seed=3)
    members = np.stack([np.random.default_rng([5, batch, d]).choice(n, batch, replace=False) for d in range(draws)])
    counts = _draw_counts(base, method, output, members)
    rng = np.random.default_rng(11)
    exact = [_per_token_ratio(_draw_counts(base, method, output, rng.integers(0, n, n)[members]).sum(0))
             for _ in range(600)]
    totals = output.sum(1)
    dels = np.stack([stats.coverage_deletions(method.reshape(n, -1), batch), stats.sum_deletions(totals, batch),
                     stats.coverage_deletions(base.reshape(n, -1), batch), stats.sum_deletions(totals, batch)], 1)
    ours = stats.subset_bootstrap(counts, dels, _per_token_ratio, n_resamples=4000)
    old = stats.paired_bootstrap_speedup(*counts.T, n_resamples=4000)
    assert ours.n == n and ours.method == "subset-bootstrap"
    assert ours.estimate == pytest.approx(_per_token_ratio(counts.sum(0))) == pytest.approx(old.estimate)
    ratio = (ours.high - ours.low) / _width(exact)
    assert 0.8 < ratio < 1.25, ratio
    if batch >= n // 4:
        assert (old.high - old.low) / _width(exact) < 0.6


def test_coverage_and_sum_deletions_are_the_pools_delete_one_expectations():
    """Every ordered draw of B prompts with replacement enumerated, for the pool and for the pool without each
    prompt: the expected union size and sum over a draw, against the closed forms."""
    import itertools
    rng = np.random.default_rng(2)
    sets, values, batch = rng.random((6, 9)) < 0.3, rng.integers(0, 9, 6).astype(float), 3

    def expected(idx):
        draws = list(itertools.product(idx, repeat=batch))
        return (np.mean([sets[list(d)].any(0).sum() for d in draws]), np.mean([values[list(d)].sum() for d in draws]))

    whole = expected(range(6))
    without = np.array([expected([j for j in range(6) if j != i]) for i in range(6)]) - whole
    assert stats.coverage_deletions(sets, batch) == pytest.approx(without[:, 0], abs=1e-12)
    assert stats.sum_deletions(values, batch) == pytest.approx(without[:, 1], abs=1e-12)


def test_calibrated_deletions_scale_the_reference_by_its_slope_over_the_draws():
    x = np.random.default_rng(1).normal(50, 5, 40)
    y = 3 * x + 2 + np.random.default_rng(2).normal(0, 0.01, 40)
    assert stats.calibrated_deletions(y, x, [1.0, -2.0]) == pytest.approx([3.0, -6.0], rel=1e-3)
    flat = np.full(5, 4.0)                                  # the reference does not vary: the ratio of the two
    assert stats.calibrated_deletions(2 * flat, flat, [1.0]) == pytest.approx([2.0])
    with pytest.raises(ValueError, match="one entry per draw"):
        stats.calibrated_deletions([1.0, 2.0], [1.0], [1.0])


def test_subset_bootstrap_parts_strata_and_inputs():
    """Without deletions only the draws vary (their bootstrap, draw for draw); one stratum is no strata; identical
    draws and no deletions are a point; columns and deletions must agree on the counts."""
    rng = np.random.default_rng(4)
    counts = rng.gamma(4.0, 1.0, (30, 4)) + 1
    none = np.zeros((20, 4))
    iv = stats.subset_bootstrap(counts, none, _per_token_ratio, n_resamples=3000, seed=7)
    old = stats.paired_bootstrap_speedup(*counts.T, n_resamples=3000, seed=7)
    assert (iv.low, iv.high) == pytest.approx((old.low, old.high), rel=1e-12) and iv.n == 20
    dels = rng.normal(0, 0.1, (20, 4))
    assert (stats.subset_bootstrap(counts, dels, _per_token_ratio, n_resamples=500, strata=["t"] * 20)
            == stats.subset_bootstrap(counts, dels, _per_token_ratio, n_resamples=500))
    point = stats.subset_bootstrap(np.ones((5, 4)), none, _per_token_ratio, n_resamples=200)
    assert point.low == point.estimate == point.high == 1.0
    with pytest.raises(ValueError, match="share k"):
        stats.subset_bootstrap(counts, np.zeros((20, 3)), _per_token_ratio)
