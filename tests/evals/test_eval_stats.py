"""Bootstrap intervals against scipy.stats.bootstrap, and the B0 rounding rule."""
import numpy as np
import pytest
from scipy import stats as sps

from acceptmoe.evals.stats import (bootstrap_mean, bootstrap_ratio, choose_b0, crosses_rounding_boundary,
                                   no_discordance_bound, paired_bootstrap_diff, round_half_up, totals_and_counts)


def _scipy_percentile(data, statistic, paired=False):
    res = sps.bootstrap(data, statistic, paired=paired, vectorized=True, n_resamples=20_000,
                        method="percentile", confidence_level=0.95, random_state=np.random.default_rng(123))
    return res.confidence_interval.low, res.confidence_interval.high


@pytest.mark.parametrize("kind", ["binary", "normal"])
def test_mean_interval_agrees_with_scipy(kind):
    rng = np.random.default_rng(7)
    x = (rng.random(300) < 0.8).astype(float) if kind == "binary" else rng.normal(5.0, 2.0, 120)
    ours = bootstrap_mean(x, n_resamples=20_000, seed=1)
    low, high = _scipy_percentile((x,), lambda s, axis: s.mean(axis=axis))
    assert ours.estimate == pytest.approx(x.mean())
    tol = 0.01 if kind == "binary" else 0.05
    assert ours.low == pytest.approx(low, abs=tol) and ours.high == pytest.approx(high, abs=tol)
    assert ours.low < ours.estimate < ours.high


def test_paired_difference_agrees_with_scipy():
    rng = np.random.default_rng(3)
    a = (rng.random(250) < 0.85).astype(float)
    b = np.where(rng.random(250) < 0.1, 1 - a, a)  # the second method flips 10% of the outcomes
    ours = paired_bootstrap_diff(a, b, n_resamples=20_000, seed=2)
    low, high = _scipy_percentile((a, b), lambda s, t, axis: s.mean(axis=axis) - t.mean(axis=axis), paired=True)
    assert ours.estimate == pytest.approx(a.mean() - b.mean())
    assert ours.low == pytest.approx(low, abs=0.01) and ours.high == pytest.approx(high, abs=0.01)


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


@pytest.mark.parametrize("n", [1, 20, 164, 500])
def test_pairs_without_disagreement_get_the_exact_clopper_pearson_bound(n):
    a = np.resize([1.0, 0.0, 1.0], n)
    iv = paired_bootstrap_diff(a, a.copy(), n_resamples=100)
    exact = sps.binomtest(0, n).proportion_ci(0.95, method="exact")  # Clopper-Pearson, 0 discordant of n
    assert iv.method == "clopper-pearson-discordant" and iv.n_resamples == 0 and iv.estimate == 0.0
    assert iv.high == pytest.approx(exact.high, rel=1e-9) and iv.low == -iv.high and exact.low == 0.0
    assert no_discordance_bound(n, 0.9) < iv.high  # lower confidence, tighter bound


def test_one_disagreement_is_back_to_the_bootstrap():
    a = np.resize([1.0, 0.0], 50)
    b = a.copy()
    b[0] = 1 - b[0]
    iv = paired_bootstrap_diff(a, b, n_resamples=500)
    assert iv.method == "percentile-bootstrap" and iv.low < iv.high


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
