"""Bootstrap statistics over prompts: intervals for a mean, for a paired difference, and the B0 rule.

Intervals are percentile bootstrap intervals: resample the prompts with replacement `n_resamples`
times (a fixed seed, numpy's default generator, resamples drawn in fixed-size chunks so memory stays
small and results depend only on the seed), take the statistic of each resample, and report the
(1 - confidence)/2 and (1 + confidence)/2 quantiles (numpy's linear interpolation, as scipy's percentile
method does).

One exception (`paired_bootstrap_diff`): two methods' 0/1 outcomes that agree on every prompt. Every
resample then gives a difference of 0, a [0, 0] interval that claims certainty. The difference of two
paired proportions is (n10 - n01) / n, so its size is at most the discordant rate, the share of prompts
on which they disagree. With 0 discordant prompts out of n, the exact (Clopper-Pearson) upper confidence
bound for that rate is U = 1 - ((1 - confidence) / 2) ** (1 / n); the interval reported is [-U, U]
(method "clopper-pearson-discordant", n_resamples 0). It is conservative: its coverage is at least the
stated confidence whatever the true rates.

B0 (docs/method.md, "B0"): the mean AcceptMoE set size over every block and layer of the first 50 evaluation
prompts, rounded to nearest with halves up; if the bootstrap interval of that mean crosses a rounding
boundary (a half-integer), the first 100 prompts are used instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# The statistics rules' defaults, defined here once (B0Config and BootstrapConfig in the config spine read them)
RESAMPLES = 10_000       # bootstrap resamples of an interval
SEED = 0                 # numpy generator seed of the resamples
CONFIDENCE = 0.95        # two-sided interval level
B0_PROMPTS = 50          # B0 from the first 50 evaluation prompts ...
B0_FALLBACK_PROMPTS = 100   # ... or the first 100 when that interval crosses a rounding boundary
_CHUNK_ELEMENTS = 1 << 21  # resampled indices held at once


@dataclass(frozen=True)
class Interval:
    """A point estimate with its percentile bootstrap interval."""

    estimate: float
    low: float
    high: float
    n: int
    confidence: float
    n_resamples: int
    seed: int
    method: str = "percentile-bootstrap"

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _resampled_index_chunks(n: int, n_resamples: int, seed: int):
    rng = np.random.default_rng(seed)
    per_chunk = max(1, _CHUNK_ELEMENTS // n)
    done = 0
    while done < n_resamples:
        size = min(per_chunk, n_resamples - done)
        yield rng.integers(0, n, size=(size, n))  # [size, n]
        done += size


def _check(n_resamples: int, confidence: float) -> None:
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")


def _as_1d(values, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence (one value per prompt), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} holds NaN or infinite values")
    return arr


def bootstrap_ratio(numerators, denominators, n_resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                    seed: int = SEED) -> Interval:
    """Interval for sum(numerators) / sum(denominators), resampling prompts (one entry per prompt).

    With all denominators 1 this is the mean; with per-prompt totals and counts it is a pooled mean
    (e.g. set size over every block and layer of the selected prompts)."""
    _check(n_resamples, confidence)
    num, den = _as_1d(numerators, "numerators"), _as_1d(denominators, "denominators")
    if num.shape != den.shape:
        raise ValueError(f"numerators and denominators differ in length: {num.size} vs {den.size}")
    if den.sum() <= 0 or np.any(den < 0):
        raise ValueError("denominators must be >= 0 with a positive sum")
    stats = []
    for idx in _resampled_index_chunks(num.size, n_resamples, seed):
        with np.errstate(invalid="ignore", divide="ignore"):
            stats.append(num[idx].sum(axis=1) / den[idx].sum(axis=1))  # [size]
    stats = np.concatenate(stats)
    if not np.all(np.isfinite(stats)):
        raise ValueError("a resample drew only prompts with zero denominator; the ratio is undefined there")
    alpha = (1 - confidence) / 2
    low, high = np.quantile(stats, [alpha, 1 - alpha])
    return Interval(float(num.sum() / den.sum()), float(low), float(high), int(num.size), confidence,
                    n_resamples, seed)


def paired_bootstrap_speedup(base_num, base_den, other_num, other_den, n_resamples: int = RESAMPLES,
                             confidence: float = CONFIDENCE, seed: int = SEED) -> Interval:
    """Interval for (sum(base_num) / sum(base_den)) / (sum(other_num) / sum(other_den)): how many times
    `other` is faster than `base` per unit of work (e.g. seconds / passes), entry i of all four on the same
    prompt i; each resample draws prompts, keeping the four together."""
    _check(n_resamples, confidence)
    arrs = [_as_1d(v, n) for v, n in ((base_num, "base_num"), (base_den, "base_den"), (other_num, "other_num"),
                                      (other_den, "other_den"))]
    if len({a.size for a in arrs}) != 1:
        raise ValueError(f"paired values need one entry per prompt in all four: {[a.size for a in arrs]}")
    bn, bd, on, od = arrs
    if min(bn.sum(), bd.sum(), on.sum(), od.sum()) <= 0:
        raise ValueError("every sum must be positive")

    def stat(idx):
        return (bn[idx].sum(-1) / bd[idx].sum(-1)) / (on[idx].sum(-1) / od[idx].sum(-1))

    with np.errstate(invalid="ignore", divide="ignore"):
        stats = np.concatenate([stat(idx) for idx in _resampled_index_chunks(bn.size, n_resamples, seed)])
    stats = stats[np.isfinite(stats)]
    alpha = (1 - confidence) / 2
    low, high = np.quantile(stats, [alpha, 1 - alpha])
    return Interval(float(stat(np.arange(bn.size))), float(low), float(high), int(bn.size), confidence,
                    n_resamples, seed)


def bootstrap_mean(values, n_resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                   seed: int = SEED) -> Interval:
    """Interval for the mean of per-prompt values (e.g. 0/1 correctness)."""
    vals = _as_1d(values, "values")
    return bootstrap_ratio(vals, np.ones_like(vals), n_resamples, confidence, seed)


def paired_bootstrap_diff(a, b, n_resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                          seed: int = SEED) -> Interval:
    """Interval for mean(a) - mean(b) where a[i] and b[i] are two methods' values on the same prompt i;
    each resample draws prompts, keeping the pairs together."""
    a, b = _as_1d(a, "a"), _as_1d(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"paired values need one entry per prompt for both methods: {a.size} vs {b.size}")
    if np.array_equal(a, b) and np.isin(a, (0.0, 1.0)).all():
        _check(n_resamples, confidence)
        bound = no_discordance_bound(a.size, confidence)
        return Interval(0.0, -bound, bound, int(a.size), confidence, 0, seed, "clopper-pearson-discordant")
    return bootstrap_mean(a - b, n_resamples, confidence, seed)


def no_discordance_bound(n: int, confidence: float = CONFIDENCE) -> float:
    """Exact (Clopper-Pearson) upper bound on a rate when 0 of n prompts show it, at the upper tail of a
    two-sided `confidence` interval: the rate U with P(0 of n | U) = (1 - confidence) / 2."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return 1.0 - ((1.0 - confidence) / 2.0) ** (1.0 / n)


def round_half_up(x: float) -> int:
    """Nearest integer, halves up (2.5 -> 3, -2.5 -> -2), exact for floats (no x + 0.5 rounding error)."""
    floor = math.floor(x)
    return int(floor + (1 if x - floor >= 0.5 else 0))


def crosses_rounding_boundary(low: float, high: float) -> bool:
    """True if [low, high] straddles a half-integer, i.e. its ends round (halves up) differently."""
    return round_half_up(low) != round_half_up(high)


@dataclass(frozen=True)
class B0Choice:
    """The budget B0 and how the interval rule reached it (`spine.b0.B0Decision` is the saved record of a pair)."""

    b0: int
    interval: Interval  # of the mean set size over the prompts used
    n_prompts: int
    crosses_boundary: bool  # of the interval that was used
    first_crossed: bool  # whether the first-`first` interval crossed (so `fallback` prompts were used)


def totals_and_counts(sizes_per_prompt) -> tuple[np.ndarray, np.ndarray]:
    """Per-prompt sum and number of set sizes, from one sequence of sizes (every block and layer) per prompt."""
    sizes = [np.asarray(s, dtype=np.float64).ravel() for s in sizes_per_prompt]
    empty = [i for i, s in enumerate(sizes) if s.size == 0]
    if empty:
        raise ValueError(f"prompts {empty[:5]} have no recorded set sizes")
    return np.array([s.sum() for s in sizes]), np.array([float(s.size) for s in sizes])


def choose_b0(size_totals, block_layer_counts, first: int = B0_PROMPTS, fallback: int = B0_FALLBACK_PROMPTS,
              n_resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = SEED) -> B0Choice:
    """B0 from per-prompt sums of AcceptMoE set sizes and per-prompt numbers of (block, layer) pairs,
    in evaluation order: the pooled mean over the first `first` prompts, or over the first `fallback`
    prompts when the first interval crosses a rounding boundary."""
    totals, counts = _as_1d(size_totals, "size_totals"), _as_1d(block_layer_counts, "block_layer_counts")
    if totals.size < first:
        raise ValueError(f"B0 needs set sizes of the first {first} prompts, got {totals.size}")

    def decide(n: int) -> tuple[Interval, bool]:
        iv = bootstrap_ratio(totals[:n], counts[:n], n_resamples, confidence, seed)
        return iv, crosses_rounding_boundary(iv.low, iv.high)

    interval, crossed = decide(first)
    if not crossed:
        return B0Choice(round_half_up(interval.estimate), interval, first, False, False)
    if totals.size < fallback:
        raise ValueError(f"the B0 interval over {first} prompts [{interval.low:.3f}, {interval.high:.3f}] "
                         f"crosses a rounding boundary, so B0 needs the first {fallback} prompts; got {totals.size}")
    interval2, crossed2 = decide(fallback)
    return B0Choice(round_half_up(interval2.estimate), interval2, fallback, crossed2, True)
