"""Whether our measurement holds the paper's direction: one rule per `Expect` kind, judged on an interval.

    verdict(expect, Evidence(estimate, low, high, bounds=CI, unit="prompts", n=150))   -> "yes" | "no" | "not resolved (...)"

Only a 95 % interval over enough units is judged (`stats.enough_units`: at least `stats.MIN_UNITS`); a spread
(min-max over repetitions or pairs), a point estimate or an interval over fewer units reads "not resolved" and
says why. A timed ratio carries its run's placebo interval (the same variant timed twice): it is judged only
beyond it (`stats.beyond_placebo`). For a threshold t:

| kind         | "yes" (it excludes the opposite) | "no" (it excludes the paper's direction) |
|--------------|----------------------------------|------------------------------------------|
| `above`      | low > t                          | high <= t                                |
| `below`      | high < t                         | low >= t                                 |
| `equivalent` | t - m <= low and high <= t + m   | low > t + m or high < t - m              |

and "not resolved" otherwise: an equivalence is never read off an interval that merely holds t, so low power
reads "not resolved", not "yes". `increasing` judges each consecutive difference as `above 0`; a claim the
paper makes of every pair (`Expect.every_pair`) judges each pair's interval, then says "yes" when every pair's
does, "no" when any pair's does "no" (naming them), "not resolved" otherwise; where the pairs' intervals rest on
too few units, the interval pooled over the pairs is judged instead and the verdict says so.
"""
from __future__ import annotations

from dataclasses import dataclass

from acceptmoe.evals.stats import MIN_UNITS

from ..spine.paper import Expect

YES, NO, OPEN = "yes", "no", "not resolved"
POINT = "point estimate"
CI = "95 % interval"


@dataclass(frozen=True)
class Evidence:
    """One estimate with its interval; `bounds` names what low-high are (CI: a 95 % interval; or a spread), ""
    when there are none (a point estimate); `unit` and `n` what the interval resampled; `placebo` the run's
    placebo interval of a timed ratio; `label` names a pair in an every-pair claim."""
    estimate: float
    low: float | None = None
    high: float | None = None
    bounds: str = ""
    label: str = ""
    unit: str = ""
    n: int = 0
    placebo: tuple[float, float] | None = None

    @property
    def ends(self) -> tuple[float, float]:
        return (self.estimate, self.estimate) if self.low is None else (self.low, self.high)

    def why_not(self) -> str | None:
        """Why this evidence cannot carry a verdict, or None when it can."""
        if self.low is None or not self.bounds:
            return f"a {POINT}, no interval"
        if self.bounds != CI:
            return f"a {self.bounds}, not an interval"
        if self.n < MIN_UNITS:
            return f"{self.n} {self.unit or 'units'}, fewer than {MIN_UNITS}"
        return None


def judge(kind: str, t: float, m: float, ev: Evidence) -> str:
    """YES, NO or OPEN for one interval (a point estimate is an interval of zero width)."""
    low, high = ev.ends
    if kind == "above":
        return YES if low > t else NO if high <= t else OPEN
    if kind == "below":
        return YES if high < t else NO if low >= t else OPEN
    if kind == "equivalent":
        return YES if t - m <= low and high <= t + m else NO if low > t + m or high < t - m else OPEN
    raise ValueError(f"no interval rule for kind {kind!r}")


def _holds_what(expect: Expect) -> str:
    if expect.kind == "equivalent":
        return f"reaches outside {expect.threshold - expect.margin:g} to {expect.threshold + expect.margin:g}"
    return f"holds {expect.threshold:g}"


def _placebo_judge(kind: str, got: str, ev: Evidence) -> str:
    """A timed ratio's verdict, kept only where its interval lies beyond the placebo's in that direction."""
    if ev.placebo is None or got == OPEN:
        return got
    low, high = ev.ends
    p_low, p_high = ev.placebo
    up = kind == "above"
    beyond = (low > p_high) if (got == YES) == up else (high < p_low)
    return got if beyond else OPEN


def _one(expect: Expect, ev: Evidence) -> str:
    reason = ev.why_not()
    if reason is not None:
        return f"{OPEN} ({reason})"
    got = _placebo_judge(expect.kind, judge(expect.kind, expect.threshold, expect.margin, ev), ev)
    if got == OPEN:
        if ev.placebo is not None and judge(expect.kind, expect.threshold, expect.margin, ev) != OPEN:
            return f"{OPEN} (inside the placebo's interval [{ev.placebo[0]:.3f}, {ev.placebo[1]:.3f}])"
        if expect.kind == "equivalent" and not ev.ends[0] <= expect.threshold <= ev.ends[1]:
            return (f"{OPEN} (a difference from {expect.threshold:g} is resolved; equality within "
                    f"{expect.margin:g} is not shown: the interval {_holds_what(expect)})")
        return f"{OPEN} (the {ev.bounds} {_holds_what(expect)})"
    return got


def _each(expect: Expect, items: list[Evidence], noun: str) -> str:
    """Every item judged by the rule: yes when all are, no when any is (named), otherwise not resolved."""
    got = [(p, _one(expect, p).split(" ")[0]) for p in items]
    failed = [p.label for p, g in got if g == NO]
    if failed:
        return f"{NO} ({len(failed)} of {len(items)} {noun}: {', '.join(failed)})"
    if all(g == YES for _, g in got):
        return f"{YES} (all {len(items)} {noun})"
    open_ = [p.label for p, g in got if g != YES]
    return f"{OPEN} ({len(open_)} of {len(items)} {noun}: {', '.join(open_)})"


def verdict(expect: Expect, overall: Evidence | None, pairs: list[Evidence] = (),
            steps: list[Evidence] = ()) -> str:
    """The "direction holds" cell: `pairs` for a claim made of every pair (each pair's evidence), `steps` for
    `increasing` (each consecutive difference), otherwise `overall`."""
    if expect.kind == "none":
        return f"n/a ({expect.words})"
    if expect.kind == "increasing":
        if not steps:
            return "n/a (no estimate)"
        return _each(Expect("above", expect.words), list(steps), "steps")
    if expect.every_pair and pairs:
        if all(p.why_not() is None for p in pairs) or overall is None:
            return _each(expect, list(pairs), "pairs")
        pooled = _one(expect, overall)
        return f"{pooled} (pooled over {len(pairs)} pairs: per pair {pairs[0].why_not() or 'too few units'})"
    if overall is None:
        return "n/a (no estimate)"
    return _one(expect, overall)
