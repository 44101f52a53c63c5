"""What a run says about one claim (`Measured`), and the small formatting helpers every reader shares.

A `Measured` carries the estimate the verdict is judged on, with its interval: a 95 % interval, or a spread
(min-max over repetitions or pairs) named in `bounds`, and the unit and number of what the interval resampled; a claim the paper makes of every pair also
carries each pair's evidence (`pairs`), and an ordering its consecutive differences (`steps`)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..spine.runs import REPO
from .verdict import CI, Evidence  # noqa: F401  (CI: the bounds of a 95 % interval, for the readers)

ENGINE = "engine"          # the kinds of measurement a claim can have: the tiny engine itself, or the replay
REPLAY = "replay"
REPS = "spread over repetitions"


@dataclass(frozen=True)
class Measured:
    claim: str
    part: str                 # "" for a claim reported in one row
    ours: str
    interval: str             # "[low, high]" (95 %), a min-max over repetitions or per pair, or "-"
    estimate: float | None    # what the direction is checked on (and the worlds spread is taken over)
    low: float | None         # the interval's or the spread's ends, where the run gives them
    high: float | None
    values: tuple[float, ...] = ()   # for `increasing` directions
    measures: str = ""
    kind: str = ENGINE
    run: str = ""
    world: str = ""           # which trained world the run used (its target checkpoints)
    note: str = ""            # e.g. a row from another rule than the claim's own
    spread: tuple[float, ...] = ()   # a row across worlds: each world's estimate
    worlds: int = 0                  # a row across worlds: how many (0: a row of one run)
    bounds: str = ""                 # what low-high are: CI, REPS, "spread over pairs" ("" with no ends)
    pairs: tuple[Evidence, ...] = ()  # a claim made of every pair: each pair's evidence
    steps: tuple[Evidence, ...] = ()  # an ordering: each consecutive difference's evidence
    unit: str = ""                    # what the interval resampled (prompts, generations, worlds x prompts, ...)
    n: int = 0                        # how many of them
    placebo: tuple[float, float] | None = None   # a timed ratio: its run's placebo interval

    @property
    def evidence(self) -> Evidence | None:
        if self.estimate is None:
            return None
        return Evidence(self.estimate, self.low, self.high, self.bounds if self.low is not None else "",
                        unit=self.unit, n=self.n, placebo=self.placebo)

    @property
    def units(self) -> str:
        """The claims table's "unit (n)" cell."""
        return f"{self.unit} ({self.n})" if self.unit else "-"


def where(run: Path) -> str:
    run = Path(run).resolve()
    return str(run.relative_to(REPO)) if run.is_relative_to(REPO) else str(run)


def meta(run: Path) -> dict:
    return json.loads((Path(run) / "config.json").read_text())["config"]


def world_of(world: dict) -> str:
    return ", ".join(m["target"] for m in world["models"])


def device(name: str) -> str:
    return "GPU run" if str(name).startswith("cuda") else "CPU"


def engine_measures(world: dict) -> str:
    d = device(world["device"])
    return "tiny engine on CPU" if d == "CPU" else "tiny engine, GPU run"


def pp(x: float) -> str:
    return f"{x:+.1f}"


def iv(low: float, high: float, digits: int = 1, sign: bool = True) -> str:
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    return f"[{f.format(low)}, {f.format(high)}]"


def pair_range(vals: list[float], unit: str) -> tuple[str, str]:
    mean = sum(vals) / len(vals)
    return f"{mean:+.1f} {unit} mean over {len(vals)} pairs", f"per pair {min(vals):+.1f} to {max(vals):+.1f}"


def points(labels: list[str], vals: list[float]) -> tuple[Evidence, ...]:
    """Per-pair point estimates (no interval) of an every-pair claim."""
    return tuple(Evidence(v, label=label) for label, v in zip(labels, vals, strict=False))
