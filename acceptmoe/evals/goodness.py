"""Goodness of fit against an exact law: the chi-square test the sampling exactness checks use (the native
engine's test, `tests/engine/test_sampling.py`, and gpu-check's SGLang check), and its power.

    stat, pvalue, df = chi_square(samples, law)        # samples: tuples of tokens; law: tuple -> probability
    min_detectable_tv(len(samples), df)                # the TV an alpha-0.01 test detects with 80 % power

Cells expecting fewer than 5 samples are pooled into one, which joins the smallest kept cell when it expects
fewer than 5 itself. Power: for an alternative q at total variation delta from p (on the cells tested), the
noncentrality is n * sum((q - p)^2 / p) >= 4 n delta^2 (Cauchy-Schwarz, sum p = 1), so the smallest delta
detected with `power` against every such q is sqrt(lambda / 4n), lambda the noncentrality at which the
noncentral chi-square passes the critical value with that probability (docs/method.md, "Sampling").
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence

from scipy import optimize, stats

ALPHA = 0.01              # the exactness tests' level


def min_detectable_tv(n: int, df: int, alpha: float = ALPHA, power: float = 0.8) -> float:
    """The smallest total variation a chi-square test with df degrees of freedom over n samples detects with
    `power` against every alternative."""
    crit = stats.chi2.ppf(1 - alpha, df)
    lam = optimize.brentq(lambda x: stats.ncx2.sf(crit, df, x) - power, 1e-9, 1e6)
    return math.sqrt(lam / (4 * n))


def outside_support(samples: Sequence[Hashable], law: Mapping[Hashable, float]) -> list:
    """The sampled values the law gives no mass (any one refutes the law outright)."""
    return [s for s in Counter(samples) if law.get(s, 0.0) <= 0]


def chi_square(samples: Sequence[Hashable], law: Mapping[Hashable, float]) -> tuple[float, float, int]:
    """(statistic, p-value, df) of samples against an exact law (rare cells pooled, above). A sample outside the
    law's support is a ValueError naming it."""
    n, counts = len(samples), Counter(samples)
    outside = outside_support(samples, law)
    if outside:
        raise ValueError(f"sampled outside the target's support: {outside[:5]}")
    kept = sorted((c for c in law if law[c] * n >= 5), key=lambda c: -law[c])
    obs, exp = [float(counts[c]) for c in kept], [law[c] * n for c in kept]
    rest_obs, rest_exp = n - sum(obs), n - sum(exp)
    if rest_exp >= 5:
        obs, exp = obs + [rest_obs], exp + [rest_exp]
    else:
        obs[-1], exp[-1] = obs[-1] + rest_obs, exp[-1] + rest_exp
    res = stats.chisquare(obs, exp)
    return float(res.statistic), float(res.pvalue), len(obs) - 1


def total_variation(samples: Sequence[Hashable], law: Mapping[Hashable, float]) -> float:
    """The total variation between the samples' empirical law and `law` (a description, not a test)."""
    n, counts = len(samples), Counter(samples)
    keys = set(counts) | set(law)
    return 0.5 * sum(abs(counts[k] / n - law.get(k, 0.0)) for k in keys)
