"""Every interval rule of the project, defined once: bootstrap intervals over prompts (plain, stratified by
task, two-way over prompts and repetitions, hierarchical over worlds and prompts), the paired-proportion interval,
the placebo rule for timed ratios, and the B0 rule (docs/method.md, "B0"; docs/architecture.md, "Evaluations").

- **Percentile bootstrap** (`bootstrap`, and `bootstrap_mean`, `bootstrap_ratio`, `paired_bootstrap_speedup`,
  `paired_bootstrap_diff` on it): resample the units with replacement `n_resamples` times (numpy's default
  generator from a fixed seed, drawn `rng.integers(0, n, (size, n))` chunk after chunk, exactly as
  `scipy.stats.bootstrap` draws them), take the statistic of each resample and report the (1 - confidence)/2
  and (1 + confidence)/2 quantiles (linear interpolation, as scipy's percentile method). With `strata` (one
  label per unit, e.g. its task) each stratum is resampled within itself, so every resample keeps each task's
  share; one stratum is the plain bootstrap, draw for draw.
- **Paired proportions** (`paired_proportions`): two methods' 0/1 outcomes on the same prompts get Newcombe's
  (1998) hybrid score interval for the paired difference (his method 10: Wilson score limits of the two
  marginal proportions combined through the corrected phi coefficient). A bootstrap of such data pins an end
  at 0 when one prompt disagrees and collapses to [0, 0] when none does; the score interval is not narrower
  with one disagreeing prompt than with none, and has a width at zero discordance. `paired_bootstrap_diff`
  and `mean_of_strata_diff` use it for every 0/1 difference whose strata are equally large (their mean over
  strata is then the pooled difference), and the bootstrap for anything else.
- **Draws of prompts** (`subset_bootstrap`): a statistic of per-draw counts, each draw a set of B prompts of
  one pool of N (the batch study's requests verified together), is an incomplete U-statistic over the
  prompts: draws share prompts, so they are not independent units. Its variance is the prompts' part (the
  pool's sampling) plus the draws' part (which sets of prompts were drawn from that pool). Each resample adds
  the two: the statistic of resampled draws, and the mean over resampled prompts (within strata) of the
  jackknife pseudo-values (N - 1) (estimate - statistic without prompt i), where "without prompt i" shifts
  each count by the change in its expectation over draws when i leaves the pool, in closed form from
  per-prompt recordings (`coverage_deletions` for a union, `sum_deletions` for a sum; `calibrated_deletions`
  for a count the recordings do not determine, by its slope on one they do, over the draws). Checked against
  the bootstrap that rebuilds every draw from resampled prompts and recounts its union (tests).
- **Two-way bootstrap** (`timed_ratio`): timed cells indexed [prompt, repetition], the two factors crossed (a
  repetition is one fresh engine that times every prompt); each resample draws prompts (within their strata)
  and, once for all of them, repetitions, keeping the two variants of a cell together, so what a repetition
  shares across its prompts (the engine, the host's load at the time) varies between resamples; the statistic
  is the paper's pooled ratio (total tokens / total seconds of one variant over the other's).
  `clustered_mean_diff` draws worlds, then prompts within each drawn world's pairs.
- **Placebo rule** (`beyond_placebo`): a timed effect counts only where its interval lies wholly beyond the
  interval of a placebo pair timed in the same run (the same variant twice), so host drift that a run
  cannot cancel reads as "not resolved".
- **Units**: an interval records how many units it resampled (`Interval.n`); a verdict rests on at least
  `MIN_UNITS` of them (`enough_units`).

B0: the mean AcceptMoE set size over every block and layer of the first 50 evaluation prompts, rounded to
nearest with halves up; if the bootstrap interval of that mean crosses a rounding boundary (a half-integer),
the first 100 prompts are used instead.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

# The statistics rules' defaults, defined here once (B0Config and BootstrapConfig in the config spine read them)
RESAMPLES = 10_000       # bootstrap resamples of an interval
SEED = 0                 # numpy generator seed of the resamples
CONFIDENCE = 0.95        # two-sided interval level
B0_PROMPTS = 50          # B0 from the first 50 evaluation prompts ...
B0_FALLBACK_PROMPTS = 100   # ... or the first 100 when that interval crosses a rounding boundary
MIN_UNITS = 20           # the fewest resampled units a verdict rests on
_CHUNK_ELEMENTS = 1 << 21  # resampled indices held at once

Statistic = Callable[[np.ndarray], np.ndarray]   # unit indices [size, n] -> one value per resample [size]


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval (`method` names the rule; n the units it rests on)."""

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


# ----- the percentile bootstrap -----

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


def _groups(strata, n: int) -> list[np.ndarray]:
    """Unit positions per stratum, in order of first appearance; None: one stratum of every unit."""
    if strata is None:
        return [np.arange(n)]
    labels = list(strata)
    if len(labels) != n:
        raise ValueError(f"strata need one label per unit: {len(labels)} labels for {n} units")
    order = list(dict.fromkeys(labels))
    return [np.array([i for i, s in enumerate(labels) if s == label]) for label in order]


def index_chunks(n: int, n_resamples: int, seed: int, strata=None):
    """Resampled unit indices [size, n], chunk after chunk, each stratum drawn within itself (see the module)."""
    rng = np.random.default_rng(seed)
    groups = _groups(strata, n)
    per_chunk = max(1, _CHUNK_ELEMENTS // n)
    done = 0
    while done < n_resamples:
        size = min(per_chunk, n_resamples - done)
        if len(groups) == 1:
            yield groups[0][rng.integers(0, n, size=(size, n))]
        else:
            yield np.concatenate([g[rng.integers(0, g.size, size=(size, g.size))] for g in groups], axis=1)
        done += size


def percentile(stats: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = (1 - confidence) / 2
    low, high = np.quantile(stats, [alpha, 1 - alpha])
    return float(low), float(high)


def bootstrap(n: int, statistic: Statistic, n_resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
              seed: int = SEED, strata=None, method: str = "percentile-bootstrap", finite_only: bool = False) -> Interval:
    """The percentile interval of `statistic` over `n` units (the estimate: the statistic of the units as they
    are). A resample whose statistic is not finite (e.g. a ratio whose drawn denominators are all 0) is an
    error, or with `finite_only` left out of the quantiles."""
    _check(n_resamples, confidence)
    stats = np.concatenate([statistic(idx) for idx in index_chunks(n, n_resamples, seed, strata)])
    if finite_only:
        stats = stats[np.isfinite(stats)]
    elif not np.all(np.isfinite(stats)):
        raise ValueError("a resample drew only prompts with zero denominator; the ratio is undefined there")
    low, high = percentile(stats, confidence)
    return Interval(float(statistic(np.arange(n)[None])[0]), low, high, n, confidence, n_resamples, seed, method)


def bootstrap_ratio(numerators, denominators, n_resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                    seed: int = SEED, strata=None) -> Interval:
    """Interval for sum(numerators) / sum(denominators), resampling prompts (one entry per prompt).

    With all denominators 1 this is the mean; with per-prompt totals and counts it is a pooled mean
    (e.g. set size over every block and layer of the selected prompts)."""
    num, den = _as_1d(numerators, "numerators"), _as_1d(denominators, "denominators")
    if num.shape != den.shape:
        raise ValueError(f"numerators and denominators differ in length: {num.size} vs {den.size}")
    if den.sum() <= 0 or np.any(den < 0):
        raise ValueError("denominators must be >= 0 with a positive sum")

    def stat(idx):
        with np.errstate(invalid="ignore", divide="ignore"):
            return num[idx].sum(axis=1) / den[idx].sum(axis=1)
    return bootstrap(num.size, stat, n_resamples, confidence, seed, strata)


def bootstrap_mean(values, n_resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                   seed: int = SEED, strata=None) -> Interval:
    """Interval for the mean of per-prompt values (e.g. 0/1 correctness)."""
    vals = _as_1d(values, "values")
    return bootstrap_ratio(vals, np.ones_like(vals), n_resamples, confidence, seed, strata)


def paired_bootstrap_speedup(base_num, base_den, other_num, other_den, n_resamples: int = RESAMPLES,
                             confidence: float = CONFIDENCE, seed: int = SEED, strata=None) -> Interval:
    """Interval for (sum(base_num) / sum(base_den)) / (sum(other_num) / sum(other_den)): how many times
    `other` is faster than `base` per unit of work (e.g. seconds / passes), entry i of all four on the same
    prompt i; each resample draws prompts, keeping the four together."""
    arrs = [_as_1d(v, n) for v, n in ((base_num, "base_num"), (base_den, "base_den"), (other_num, "other_num"),
                                      (other_den, "other_den"))]
    if len({a.size for a in arrs}) != 1:
        raise ValueError(f"paired values need one entry per prompt in all four: {[a.size for a in arrs]}")
    bn, bd, on, od = arrs
    if min(bn.sum(), bd.sum(), on.sum(), od.sum()) <= 0:
        raise ValueError("every sum must be positive")

    def stat(idx):
        with np.errstate(invalid="ignore", divide="ignore"):
            return (bn[idx].sum(-1) / bd[idx].sum(-1)) / (on[idx].sum(-1) / od[idx].sum(-1))
    return bootstrap(bn.size, stat, n_resamples, confidence, seed, strata, finite_only=True)


# ----- paired 0/1 outcomes -----

def _binary(*arrays: np.ndarray) -> bool:
    return all(np.isin(a, (0.0, 1.0)).all() for a in arrays)


def wilson(successes: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson's score interval for a binomial proportion."""
    z = float(norm.ppf(1 - (1 - confidence) / 2))
    p = successes / n
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return center - half, center + half


def paired_proportions(a, b, confidence: float = CONFIDENCE) -> Interval:
    """Newcombe's hybrid score interval for mean(a) - mean(b), a[i] and b[i] two methods' 0/1 outcomes on
    prompt i (his method 10; the phi coefficient with his correction: ad - bc less n/2 when above it, 0 between
    0 and n/2)."""
    a, b = _as_1d(a, "a"), _as_1d(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"paired values need one entry per prompt for both methods: {a.size} vs {b.size}")
    if not _binary(a, b):
        raise ValueError("paired proportions need 0/1 outcomes")
    n = a.size
    both, only_a = int(((a == 1) & (b == 1)).sum()), int(((a == 1) & (b == 0)).sum())
    only_b, neither = int(((a == 0) & (b == 1)).sum()), int(((a == 0) & (b == 0)).sum())
    p1, p2 = (both + only_a) / n, (both + only_b) / n
    l1, u1 = wilson(both + only_a, n, confidence)
    l2, u2 = wilson(both + only_b, n, confidence)
    margins = (both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither)
    cross = both * neither - only_a * only_b
    corrected = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
    phi = corrected / math.sqrt(margins) if margins > 0 else 0.0
    d = p1 - p2
    low = d - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    high = d + math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    return Interval(float(d), max(-1.0, low), min(1.0, high), n, confidence, 0, 0, "newcombe-paired-score")


def paired_bootstrap_diff(a, b, n_resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                          seed: int = SEED, strata=None) -> Interval:
    """Interval for mean(a) - mean(b), a[i] and b[i] two methods' values on the same prompt i: the paired
    proportions' score interval for 0/1 outcomes, else the bootstrap over prompts (pairs kept together;
    within `strata` when given)."""
    a, b = _as_1d(a, "a"), _as_1d(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"paired values need one entry per prompt for both methods: {a.size} vs {b.size}")
    if _binary(a, b):
        _check(n_resamples, confidence)
        return paired_proportions(a, b, confidence)
    return bootstrap_mean(a - b, n_resamples, confidence, seed, strata)


def mean_of_strata_diff(a: Sequence, b: Sequence, n_resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                        seed: int = SEED) -> Interval:
    """The mean over strata (e.g. a model's tasks) of mean(a_s) - mean(b_s), a_s[i] and b_s[i] paired: for 0/1
    outcomes in equally large strata the paired proportions' interval of the pooled prompts (the same
    estimate), else the bootstrap resampling prompts within each stratum."""
    a = [_as_1d(x, "a") for x in a]
    b = [_as_1d(x, "b") for x in b]
    if not a or [x.size for x in a] != [x.size for x in b]:
        raise ValueError("paired strata need one entry per prompt for both methods, stratum by stratum")
    if _binary(*a, *b) and len({x.size for x in a}) == 1:
        return paired_proportions(np.concatenate(a), np.concatenate(b), confidence)
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    labels = [s for s, d in enumerate(diffs) for _ in range(d.size)]
    flat = np.concatenate(diffs)
    bounds = np.cumsum([0] + [d.size for d in diffs])

    def stat(idx):              # idx keeps each stratum's columns in place: the mean of its columns' values
        return np.mean([flat[idx[:, lo:hi]].mean(1) for lo, hi in zip(bounds, bounds[1:], strict=False)], axis=0)
    return bootstrap(flat.size, stat, n_resamples, confidence, seed, labels)


def clustered_mean_diff(diffs: dict[str, list[np.ndarray]], n_resamples: int = RESAMPLES,
                        confidence: float = CONFIDENCE, seed: int = SEED, chunk: int = 200) -> Interval:
    """The mean over clusters (worlds) of their mean over strata (pairs) of paired differences (of 0/1 outcomes:
    values -1, 0, 1), with an interval resampling clusters, then prompts within each drawn cluster's strata.
    Where no prompt of any cluster disagrees (every resample would be 0), the paired proportions' interval of
    the pooled prompts."""
    _check(n_resamples, confidence)
    names = list(diffs)
    pooled = np.concatenate([d for ds in diffs.values() for d in ds])
    if not pooled.any():
        zeros = np.zeros_like(pooled)
        return paired_proportions(zeros, zeros, confidence)
    rng = np.random.default_rng(seed)
    stats = []
    for start in range(0, n_resamples, chunk):
        size = min(chunk, n_resamples - start)
        drawn = rng.integers(0, len(names), size=(size, len(names)))              # [size, W] cluster draws
        per = {w: np.mean([d[rng.integers(0, d.size, size=(size, d.size))].mean(1) for d in diffs[w]], 0)
               for w in names}                                                    # cluster -> [size]
        table = np.stack([per[w] for w in names], 1)                              # [size, W]
        stats.append(np.take_along_axis(table, drawn, 1).mean(1))
    low, high = percentile(np.concatenate(stats), confidence)
    estimate = float(np.mean([np.mean([d.mean() for d in diffs[w]]) for w in names]))
    return Interval(estimate, low, high, len(names), confidence, n_resamples, seed, "clustered-bootstrap")


# ----- timed ratios -----

def timed_ratio(tokens_a, seconds_a, tokens_b, seconds_b, n_resamples: int = RESAMPLES,
                confidence: float = CONFIDENCE, seed: int = SEED, strata=None) -> Interval:
    """How many times variant a's throughput is b's, pooled (total tokens / total seconds of each, the paper's
    protocol), from cells [prompt, repetition] timed side by side (a cell's two variants ran on the same
    engine, one after the other); the two-way bootstrap draws prompts (within `strata`: one label per prompt)
    and repetitions, the same repetitions for every drawn prompt. n is the number of prompts."""
    ta, sa, tb, sb = (np.asarray(x, dtype=np.float64) for x in (tokens_a, seconds_a, tokens_b, seconds_b))
    if ta.ndim != 2 or len({x.shape for x in (ta, sa, tb, sb)}) != 1 or ta.size == 0:
        raise ValueError(f"timed cells must be four equal [prompts, repetitions] arrays, got "
                         f"{[x.shape for x in (ta, sa, tb, sb)]}")
    if min(sa.min(), sb.min()) <= 0 or min(ta.sum(), tb.sum()) <= 0:
        raise ValueError("every timed cell needs positive seconds, and each variant some tokens")
    P, R = ta.shape
    _check(n_resamples, confidence)
    rng = np.random.default_rng(seed + 1)          # the repetitions' draws, beside the prompts' (seed)

    def stat(idx):                                 # idx [size, P] prompts; R repetitions drawn for all of them
        reps = rng.integers(0, R, size=(idx.shape[0], 1, R))
        cell = (idx[..., None], reps)
        return (ta[cell].sum((1, 2)) / sa[cell].sum((1, 2))) / (tb[cell].sum((1, 2)) / sb[cell].sum((1, 2)))

    iv = bootstrap(P, stat, n_resamples, confidence, seed, strata, "two-way-bootstrap")
    return Interval((ta.sum() / sa.sum()) / (tb.sum() / sb.sum()), iv.low, iv.high, P, confidence,
                    n_resamples, seed, iv.method)


def beyond_placebo(effect: Interval, placebo: Interval) -> int:
    """+1 where the effect's interval lies wholly above the placebo's, -1 wholly below, else 0 (the host's
    noise, as the placebo pair measured it, could give it)."""
    if effect.low > placebo.high:
        return 1
    if effect.high < placebo.low:
        return -1
    return 0


def enough_units(iv: Interval, least: int = MIN_UNITS) -> bool:
    """Whether an interval rests on enough units for a verdict (a score interval's n is its prompts)."""
    return iv.n >= least


# ----- B0 -----

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


# ----- draws of prompts (incomplete U-statistics) -----

def coverage_deletions(sets, batch: int) -> np.ndarray:
    """Per prompt of a pool, the change in the expected number of cells a draw of `batch` prompts covers (the
    union of their sets; members drawn with replacement, as a resampled pool draws them) when that prompt
    leaves the pool: `sets` bool [N, M], sets[i, c] whether prompt i covers cell c (e.g. a (pass, layer,
    expert)). Closed form: a cell that n of the N prompts miss is missed by a draw with probability (n/N)^B."""
    a = np.asarray(sets, dtype=bool)
    if a.ndim != 2 or a.shape[0] < 2 or batch < 1:
        raise ValueError(f"coverage needs sets [N >= 2, M] and a batch >= 1, got {a.shape} and {batch}")
    n, misses = a.shape[0], (~a).sum(0).astype(np.float64)
    whole = (1.0 - (misses / n) ** batch).sum()
    covering = (misses / (n - 1)) ** batch               # a draw misses the cell, the pool less one that covers it
    missing = np.where(misses > 0, (np.maximum(misses - 1, 0) / (n - 1)) ** batch, 0.0)   # ... less one that misses it
    return (1.0 - missing).sum() + a @ (missing - covering) - whole


def sum_deletions(values, batch: int) -> np.ndarray:
    """Per prompt, the change in the expected sum of a per-prompt value over a draw of `batch` prompts (e.g. its
    output tokens) when that prompt leaves the pool: batch * (mean of the others - mean of all)."""
    x = _as_1d(values, "values")
    if x.size < 2:
        raise ValueError("a pool of one prompt has nothing to resample")
    return batch * (x.mean() - x) / (x.size - 1)


def calibrated_deletions(values, reference, reference_deletions) -> np.ndarray:
    """Deletions of a per-draw count the pool's recordings do not determine (e.g. a run whose sets depend on the
    whole draw), from a related count they do, measured on the same draws: slope * the reference's deletions,
    the slope of values on reference over the draws (least squares), or their ratio where the reference does
    not vary. The part of the count's dependence on prompts that the reference does not carry is left out."""
    y, x = _as_1d(values, "values"), _as_1d(reference, "reference")
    if x.shape != y.shape:
        raise ValueError(f"values and reference need one entry per draw: {y.size} vs {x.size}")
    dx = x - x.mean()
    spread = float(dx @ dx)
    if spread > 1e-12 * max(1.0, float(x @ x)):
        slope = float(dx @ (y - y.mean())) / spread
    else:
        slope = y.sum() / x.sum() if x.sum() else 0.0
    return slope * np.asarray(reference_deletions, dtype=np.float64)


def _resamples(n: int, n_resamples: int, seed: int, strata=None):
    """`index_chunks`, kept for the next call with the same arguments where they are one chunk (a study's
    intervals resample the same pool and draws many times)."""
    if n * n_resamples > _CHUNK_ELEMENTS:
        yield from index_chunks(n, n_resamples, seed, strata)
    else:
        yield _one_chunk(n, n_resamples, seed, None if strata is None else tuple(strata))


@functools.lru_cache(maxsize=8)
def _one_chunk(n: int, n_resamples: int, seed: int, strata: tuple | None) -> np.ndarray:
    (idx,) = index_chunks(n, n_resamples, seed, strata)
    idx.flags.writeable = False
    return idx


def subset_bootstrap(columns, deletions, statistic: Callable[[np.ndarray], np.ndarray],
                     n_resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = SEED,
                     strata=None) -> Interval:
    """Interval for statistic(the per-draw columns' means), each draw a set of prompts of one pool (see the
    module: draws of prompts). `columns` [D, k]: per draw its k counts; `deletions` [N, k]: per pool prompt the
    change in each count's expectation over draws when it leaves the pool (`coverage_deletions`,
    `sum_deletions`, `calibrated_deletions`); `statistic` maps [size, k] column means to [size] values. Each
    resample adds a resample of the draws (the statistic of their means) to a resample of the prompts (the
    mean of their jackknife pseudo-values, within `strata`: one label per pool prompt); n is the prompts."""
    c = np.asarray(columns, dtype=np.float64)
    dels = np.asarray(deletions, dtype=np.float64)
    if c.ndim != 2 or dels.ndim != 2 or c.shape[1] != dels.shape[1] or c.shape[0] < 1 or dels.shape[0] < 2:
        raise ValueError(f"columns [D, k] and deletions [N >= 2, k] must share k, got {c.shape} and {dels.shape}")
    if not (np.all(np.isfinite(c)) and np.all(np.isfinite(dels))):
        raise ValueError("columns and deletions must be finite")
    _check(n_resamples, confidence)
    n, mean = dels.shape[0], c.mean(0)
    estimate = float(statistic(mean[None])[0])
    pseudo = (n - 1) * (estimate - statistic(mean + dels))                # pseudo-values less the estimate
    for g in _groups(strata, n):
        pseudo[g] -= pseudo[g].mean()
    drawn = np.concatenate([statistic(c[idx].mean(1)) for idx in _resamples(c.shape[0], n_resamples, seed)])
    prompts = np.concatenate([pseudo[idx].mean(1) for idx in _resamples(n, n_resamples, seed + 1, strata)])
    both = drawn + prompts
    both = both[np.isfinite(both)]
    if both.size == 0:
        raise ValueError("every resample's statistic is undefined")
    low, high = percentile(both, confidence)
    return Interval(estimate, low, high, n, confidence, n_resamples, seed, "subset-bootstrap")
