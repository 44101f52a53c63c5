"""The batch study's intervals, every one over prompts, the units that are independent (docs/batch-study.md,
"Intervals: prompts are the unit"): a cell's per-draw counts with the pool's deletions fed to
`evals.stats.subset_bootstrap`, and per-prompt accuracy fed to `evals.stats.paired_bootstrap_diff`. The rules
are the statistics module's; this module only gathers their data.

    cell = Cell(cfg, row, pool)                          # one (draft shape, batch size) row of samples.jsonl
    cell.ratio(v, "reads", "output", versus)             # v's reads per output token over versus's (or None)
    cell.ratio(v, ("whole", seconds), "output", versus)  # a per-draw function of the counts, affine in them
    prompt_accuracy(cell, v, versus)                     # each drawn prompt's accuracy over the draws holding it

Deletions (how a count's expectation over draws moves when a prompt leaves the pool) come from the pool's
recordings for a composed variant (`prompts.PoolPrompts.deletions`); its X-slot loads, which the pool's history
within a draw decides, are calibrated on its reads; every count of a batch-crediting variant, which no batch-1
recording determines, is calibrated on the same count of the method it is alone (`methods.alone_twin`).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from acceptmoe.evals.stats import Interval, calibrated_deletions, paired_bootstrap_diff, subset_bootstrap
from acceptmoe.methods import METHODS, Variant, alone_twin

from .config import BatchStudyConfig
from .prompts import PoolPrompts, count_of

COUNTS = ("reads", "loads", "active", "passes")      # what a per-draw function of the counts may read


def variant_method(v: str) -> str | None:
    return next((m for m in METHODS if Variant(m).name == v), None)


def twin_of(v: str) -> str | None:
    """The variant `v`'s method is at one request per pass, if it has one (a batch-crediting method)."""
    method = variant_method(v)
    other = alone_twin(method) if method is not None else None
    return None if other is None else Variant(other).name


def per_token_ratio(m: np.ndarray) -> np.ndarray:
    """(numerator / denominator of one variant) / (the same of the other), from column means [..., 4]."""
    return (m[..., 0] / m[..., 1]) / (m[..., 2] / m[..., 3])


class Cell:
    """One (draft shape, batch size) row: its draws' counts per variant and their deletions over its pool."""

    def __init__(self, cfg: BatchStudyConfig, row: dict, pool: PoolPrompts):
        self.cfg, self.pool, self.draws, self.batch = cfg, pool, row["draws"], row["batch"]
        self._deletions: dict[tuple[str, str], np.ndarray] = {}
        self._columns: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
        for v in pool.recordings:
            if v in self.draws[0]["methods"]:
                pool.check(v, self.draws)

    @property
    def prompts(self) -> int:
        return len(self.pool.keys)

    def counts(self, v: str, key: str) -> np.ndarray:
        return np.array([count_of(d["methods"][v], key) for d in self.draws])

    def deletions(self, v: str, key: str) -> np.ndarray:
        """[N]: the change in `v`'s count `key`, in expectation over draws, when each prompt leaves the pool."""
        if (v, key) not in self._deletions:
            if v in self.pool.recordings and key != "loads":
                out = self.pool.deletions(v, self.batch)[key]
            else:
                ref, ref_key = (v, "reads") if v in self.pool.recordings else (twin_of(v), key)
                if ref not in self.draws[0]["methods"]:
                    raise ValueError(f"{v}: no batch-1 recording or alone twin in the draws to calibrate {key} on")
                out = calibrated_deletions(self.counts(v, key), self.counts(ref, ref_key), self.deletions(ref, ref_key))
            self._deletions[(v, key)] = out
        return self._deletions[(v, key)]

    def column(self, v: str, num) -> tuple[np.ndarray, np.ndarray]:
        """(per-draw values [D], deletions [N]) of a count (its name), or of (name, function of a draw's counts)
        where the function is affine in the counts (the whole-pass bound): its deletions are its slopes times
        the counts' deletions."""
        name, fn = (num, None) if isinstance(num, str) else num
        if (v, name) not in self._columns:
            if fn is None:
                got = self.counts(v, name), self.deletions(v, name)
            else:
                means = {k: float(self.counts(v, k).mean()) for k in COUNTS}
                at = fn(means)
                got = (np.array([fn(d["methods"][v]) for d in self.draws], dtype=np.float64),
                       sum((fn({**means, k: means[k] + 1.0}) - at) * self.deletions(v, k) for k in COUNTS))
            self._columns[(v, name)] = got
        return self._columns[(v, name)]

    def ratio(self, v: str, num, den: str, versus: str) -> Interval | None:
        """(sum num / sum den of `v`) / (the same of `versus`) over the draws, with its interval over prompts
        (`subset_bootstrap`, within tasks); None where a sum is not positive."""
        cols = [self.column(x, k) for x, k in ((v, num), (v, den), (versus, num), (versus, den))]
        values, dels = np.stack([c[0] for c in cols], 1), np.stack([c[1] for c in cols], 1)
        if values.sum(0).min() <= 0:
            return None
        bs = self.cfg.world.bootstrap
        return subset_bootstrap(values, dels, per_token_ratio, self.cfg.bootstrap_resamples, bs.confidence, bs.seed,
                                strata=self.pool.tasks)


@dataclass(frozen=True)
class AccuracyDiff:
    """Two variants' accuracy on the prompts their draws held, each prompt once (its mean over those draws)."""
    accuracy: float               # %
    versus: float                 # %
    diff: Interval                # pp, over the prompts drawn
    discordant: int               # prompts whose grade differed between the two in some draw
    prompts: int                  # prompts drawn


def prompt_accuracy(cell: Cell, v: str, versus: str) -> AccuracyDiff:
    """Per drawn prompt, each variant's correct rate over the draws that held it; their paired difference by the
    statistics module's rule (`paired_bootstrap_diff`: Newcombe's score interval where every prompt's rates are
    0 or 1, else the bootstrap over prompts within tasks)."""
    got: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for d in cell.draws:
        pairs = zip(d["prompts"], d["methods"][v]["quality"]["correct_each"],
                    d["methods"][versus]["quality"]["correct_each"], strict=False)
        for p, a, b in pairs:
            got[p].append((a, b))
    drawn = sorted(got)
    a = np.array([np.mean([x for x, _ in got[p]]) for p in drawn])
    b = np.array([np.mean([y for _, y in got[p]]) for p in drawn])
    bs, tasks = cell.cfg.world.bootstrap, cell.pool.tasks
    iv = paired_bootstrap_diff(a, b, cell.cfg.bootstrap_resamples, bs.confidence, bs.seed, [tasks[p] for p in drawn])
    pp = Interval(100 * iv.estimate, 100 * iv.low, 100 * iv.high, iv.n, iv.confidence, iv.n_resamples, iv.seed,
                  iv.method)
    discordant = sum(any(x != y for x, y in got[p]) for p in drawn)
    return AccuracyDiff(100 * float(a.mean()), 100 * float(b.mean()), pp, discordant, len(drawn))
