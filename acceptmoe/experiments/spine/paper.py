"""The paper's quantitative claims: the one place their values are written (data, no computation).

docs/method.md's table "The paper's claims (the reproduction targets)" is `docs_table()`'s output (a test
compares them); the throughput report's paper column and `./reproduce.sh claims` read the values from here.

A `Claim` has an id, the claim in words, the paper's value in one or more `Part`s, the direction the paper
reports as an `Expect` (what "the direction holds" means for our number), and the command whose run speaks
to it. A claim whose parts each carry their own `Expect` is reported one row per part (pruning: traffic, hit
rate, throughput, accuracy); otherwise one row with the claim's `Expect`.

    >>> from acceptmoe.experiments.spine.paper import claim
    >>> claim("h2d-traffic").paper, claim("stall-share").part("AcceptMoE").paper
    ('-73.6 to -77.1 %', '27-35 %')
"""
from __future__ import annotations

from dataclasses import dataclass

from . import render


@dataclass(frozen=True)
class Expect:
    """The paper's direction, checked on our estimate.

    kind: `parity` (the interval holds 0: no difference resolved), `above` / `below` (estimate > / <
    `threshold`), `near` (abs(estimate - threshold) <= `tolerance`), `increasing` (values in order),
    `decrease` (the second value below the first), `none` (no direction: `words` says why)."""
    kind: str
    words: str
    threshold: float = 0.0
    tolerance: float = 0.0

    KINDS = ("parity", "above", "below", "near", "increasing", "decrease", "none")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ValueError(f"Expect kind {self.kind!r}; valid: {', '.join(self.KINDS)}")


@dataclass(frozen=True)
class Part:
    name: str                      # "" for a claim with one value
    paper: str
    expect: Expect | None = None   # set on every part of a claim reported one row per part


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    parts: tuple[Part, ...]
    expect: Expect | None          # None: one row per part, each with its own Expect
    command: str                   # the ./reproduce.sh command whose run speaks to it

    @property
    def paper(self) -> str:
        return ", ".join(f"{p.name} {p.paper}" if p.name else p.paper for p in self.parts)

    @property
    def split(self) -> bool:
        return self.expect is None

    @property
    def direction(self) -> str:
        return self.expect.words if self.expect else "; ".join(f"{p.name}: {p.expect.words}" for p in self.parts)

    def part(self, name: str) -> Part:
        return next(p for p in self.parts if p.name == name)


PARITY = Expect("parity", "no difference resolved (the interval holds 0)")
FASTER = Expect("above", "faster than Standard SD (ratio > 1)", 1.0)

CLAIMS: tuple[Claim, ...] = (
    Claim("accuracy-vs-sd", "mean accuracy, AcceptMoE minus Standard SD, 12 pairs",
          (Part("", "-0.27 pp (max abs per pair 1.22)"),), PARITY, "table1"),
    Claim("matched-budget", "matched-budget mean accuracy: Count-B / MoE-Spec / AcceptMoE-B",
          (Part("", "82.72 / 88.15 / 90.60 %"),), Expect("increasing", "Count-B < MoE-Spec < AcceptMoE-B"), "table1"),
    Claim("matched-budget-gap", "AcceptMoE-B minus MoE-Spec at B0",
          (Part("", "+2.45 pp"),), Expect("above", "AcceptMoE-B more accurate (> 0)"), "table1"),
    Claim("self-vs-best-fixed", "self-sized vs the best fixed budget (5 swept pairs)",
          (Part("", "-0.97 pp mean, -1.83 worst"),),
          Expect("above", "within 2 pp of the best fixed budget on every pair (worst > -2)", -2.0), "fig5"),
    Claim("b0-range", "B0 across pairs", (Part("", "23 to 34 experts"),),
          Expect("none", "a size, not a direction: compare the ranges"), "table1"),
    Claim("tau-parity", "mean accepted length, AcceptMoE and Standard SD", (Part("", "4.39 both"),),
          Expect("near", "equal (AcceptMoE / Standard SD within 2 % of 1)", 1.0, 0.02), "table1"),
    Claim("resident-throughput", "resident throughput vs Standard SD",
          (Part("", "1.290x mean (1.217-1.339 per pair)"),), FASTER, "fig3"),
    Claim("offload-throughput", "offload throughput vs Standard SD", (Part("", "2.06x mean"),), FASTER, "fig5"),
    Claim("stall-share", "fetch-stall share of wall time",
          (Part("Standard SD", "65-78 %"), Part("AcceptMoE", "27-35 %")),
          Expect("decrease", "AcceptMoE's share below Standard SD's"), "fig5"),
    Claim("h2d-traffic", "host-to-device traffic per output token vs Standard SD",
          (Part("", "-73.6 to -77.1 %"),), Expect("below", "less traffic (< 0)"), "fig5"),
    Claim("hit-rate", "cache hit rate vs Standard SD", (Part("", "+10.8 to +14.2 pp"),),
          Expect("above", "higher hit rate (> 0)"), "fig5"),
    Claim("pruning", "pruning on vs off: traffic, hit rate, throughput, accuracy",
          (Part("traffic", "-38.6 to -48.6 %", Expect("below", "less traffic (< 0)")),
           Part("hit rate", "+6.9 to +8.2 pp", Expect("above", "higher hit rate (> 0)")),
           Part("throughput", "+4.6 to +15.1 %", Expect("above", "faster (> 0)")),
           Part("accuracy", "-0.27 pp", PARITY)), None, "fig5"),
)
BY_ID = {c.id: c for c in CLAIMS}


def claim(claim_id: str) -> Claim:
    return BY_ID[claim_id]


def docs_table() -> str:
    """docs/method.md's claims table (a test checks the doc holds exactly this)."""
    rows = [[f"`{c.id}`", c.text, c.paper, c.direction, f"`{c.command}`"] for c in CLAIMS]
    return render.markdown(["id", "claim", "paper value", "the paper's direction", "run"], rows)
