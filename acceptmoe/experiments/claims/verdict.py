"""Whether our measurement holds the paper's direction: one rule per `Expect` kind, judged on an interval.

    verdict(expect, Evidence(estimate, low, high, bounds="95 % interval"))   -> "yes" | "no" | "not resolved (...)"

The interval is a 95 % bootstrap interval, or a spread (min-max over repetitions, or over pairs) where the run
gives no interval; without either, the point estimate is judged and the verdict says so. For a threshold t:

| kind         | "yes" (it excludes the opposite) | "no" (it excludes the paper's direction) |
|--------------|----------------------------------|------------------------------------------|
| `above`      | low > t                          | high <= t                                |
| `below`      | high < t                         | low >= t                                 |
| `equivalent` | t - m <= low and high <= t + m   | low > t + m or high < t - m              |

and "not resolved" otherwise: an equivalence is never read off an interval that merely holds t, so low power
reads "not resolved", not "yes". `increasing` judges each consecutive difference as `above 0`; a claim the
paper makes of every pair (`Expect.every_pair`) judges each pair's interval, then says "yes" when every pair's
does, "no" when any pair's does "no" (naming them), "not resolved" otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..spine.paper import Expect

YES, NO, OPEN = "yes", "no", "not resolved"
POINT = "point estimate"


@dataclass(frozen=True)
class Evidence:
    """One estimate with its interval; `bounds` names what low-high are (a 95 % interval, a spread), "" when
    there are none (a point estimate); `label` names a pair in an every-pair claim."""
    estimate: float
    low: float | None = None
    high: float | None = None
    bounds: str = ""
    label: str = ""

    @property
    def ends(self) -> tuple[float, float]:
        return (self.estimate, self.estimate) if self.low is None else (self.low, self.high)


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


def _one(expect: Expect, ev: Evidence) -> str:
    got = judge(expect.kind, expect.threshold, expect.margin, ev)
    if got == OPEN:
        return f"{OPEN} (the {ev.bounds or 'interval'} {_holds_what(expect)})"
    return got if ev.bounds else f"{got} ({POINT}, no interval)"


def _each(expect: Expect, items: list[Evidence], noun: str) -> str:
    """Every item judged by the rule: yes when all are, no when any is (named), otherwise not resolved."""
    got = [(p, judge(expect.kind, expect.threshold, expect.margin, p)) for p in items]
    points = "" if all(p.bounds for p in items) else f"; {POINT}s"
    failed = [p.label for p, g in got if g == NO]
    if failed:
        return f"{NO} ({len(failed)} of {len(items)} {noun}: {', '.join(failed)}{points})"
    if all(g == YES for _, g in got):
        return f"{YES} (all {len(items)} {noun}{points})"
    open_ = [p.label for p, g in got if g == OPEN]
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
        return _each(expect, list(pairs), "pairs")
    if overall is None:
        return "n/a (no estimate)"
    return _one(expect, overall)
