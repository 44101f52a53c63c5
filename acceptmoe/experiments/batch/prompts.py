"""The pool of prompts a draft shape's draws are made of, as the batch study's intervals resample it
(docs/batch-study.md, "Intervals: prompts are the unit"), from the run's saved files only.

    keys = pool_keys(cfg, root)              # (model, task, index) per prompt, in the order draws index them
    pool = PoolPrompts.read(cfg, root)       # per composed variant, every prompt's recorded verify passes
    pool.deletions("acceptmoe", batch=16)    # count -> [N]: how its expectation over draws moves without a prompt
    pool.check("acceptmoe", draws)           # the recordings give the counted draws (sums, passes, a union)

A composed variant's per-draw counts are functions of its prompts' recordings: `reads` the union of their
(pass, layer, expert) cells, `passes` the union of their pass indices (the longest request), `active`,
`output`, `accepted` and `steps` sums over the requests (`evals.stats.coverage_deletions`, `sum_deletions`).
The routes are read for their verify passes' expert ids and output tokens only.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from acceptmoe.engine.routes import FORMAT, KINDS
from acceptmoe.evals.stats import coverage_deletions, sum_deletions
from acceptmoe.methods import Variant

from ..spine.config import Pair
from ..spine.layout import RunPaths
from ..spine.runs import SampleLog
from .config import PHASE, BatchStudyConfig

SUMS = ("active", "output", "accepted", "steps")        # a draw's sums over its requests
UNIONS = ("reads", "passes")                            # a draw's unions over its requests


def graded_rows(root: Path) -> list[dict]:
    """The shape's graded batch-1 rows (one per composed variant and prompt)."""
    return [r for r in SampleLog(root / "samples.jsonl") if r.get("phase") == PHASE]


def pool_keys(cfg: BatchStudyConfig, root: Path, rows: list[dict]) -> list[tuple[str, str, int]]:
    """The pool: every (model, task, evaluation index) graded with routes recorded for every composed variant,
    by model, then task in the world's order, then index (draws index this list)."""
    paths, names = RunPaths(root), [Variant(m).name for m in cfg.composed()]
    keys = sorted({(r["model"], r["task"], r["index"]) for r in rows},
                  key=lambda k: (k[0], cfg.world.tasks.index(k[1]), k[2]))
    return [k for k in keys if all(paths.routes(PHASE, Pair(k[0], k[1]), v, 0, k[2]).is_file() for v in names)]


def verify_sets(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One recorded generation's verify passes: bool [P, L, E], the experts each pass sent rows to per layer (as
    `compose.Request` holds them), and the tokens each output [P]."""
    with np.load(path) as z:
        meta = json.loads(z["meta"].tobytes().decode())
        kind, tokens, output, ids = (z[k] for k in ("kind", "tokens", "output", "ids"))
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: routes format {meta.get('format')} is not {FORMAT}")
    ends = np.cumsum(tokens)
    verify = np.flatnonzero(kind == KINDS.index("verify"))
    sets = np.zeros((len(verify), ids.shape[1], meta["num_experts"]), dtype=bool)
    layers = np.arange(ids.shape[1])[None, :, None]
    for j, p in enumerate(verify):
        sets[j, layers, ids[ends[p] - tokens[p]:ends[p]]] = True
    return sets, output[verify].astype(np.float64)


@dataclass(frozen=True)
class Recording:
    """One composed variant over the pool: the (pass, layer, expert) cells each prompt's verify passes covered
    (bool [N, cells], cells no prompt covers left out), its verify passes and its sums [N]."""
    cells: np.ndarray
    passes: np.ndarray
    sums: dict[str, np.ndarray]

    @classmethod
    def read(cls, files: list[Path], graded: list[dict]) -> Recording:
        return cls.of([verify_sets(f) for f in files], graded)

    @classmethod
    def of(cls, got: list[tuple[np.ndarray, np.ndarray]], graded: list[dict]) -> Recording:
        """From each prompt's (sets [P, L, E], output [P]) of its verify passes and its graded row."""
        longest = max(s.shape[0] for s, _ in got)
        cells = np.zeros((len(got), longest) + got[0][0].shape[1:], dtype=bool)
        for i, (s, _) in enumerate(got):
            cells[i, :s.shape[0]] = s
        cells = cells.reshape(len(got), -1)
        passes = np.array([s.shape[0] for s, _ in got], dtype=np.float64)
        sums = {"active": passes, "output": np.array([o.sum() for _, o in got]),
                "accepted": np.array([r["accepted"] for r in graded], float),
                "steps": np.array([r["steps"] for r in graded], float)}
        return cls(cells[:, cells.any(0)], passes, sums)

    def pass_cells(self) -> np.ndarray:
        """bool [N, longest]: the pass indices each prompt's verify passes reach."""
        return np.arange(int(self.passes.max()))[None] < self.passes[:, None]


@dataclass
class PoolPrompts:
    """A draft shape's pool (`pool_keys`): each prompt's task and every composed variant's `Recording`."""
    keys: list[tuple[str, str, int]]
    recordings: dict[str, Recording]
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def read(cls, cfg: BatchStudyConfig, root: Path) -> PoolPrompts:
        rows = graded_rows(root)
        keys, paths = pool_keys(cfg, root, rows), RunPaths(root)
        by = {(r["variant"], r["model"], r["task"], r["index"]): r for r in rows}
        recordings = {}
        for v in (Variant(m).name for m in cfg.composed()):
            files = [paths.routes(PHASE, Pair(m, t), v, 0, i) for m, t, i in keys]
            recordings[v] = Recording.read(files, [by[(v, *k)] for k in keys])
        return cls(keys, recordings)

    @property
    def tasks(self) -> list[str]:
        return [t for _, t, _ in self.keys]

    def deletions(self, variant: str, batch: int) -> dict[str, np.ndarray]:
        """Per count of a draw of `batch` prompts, per prompt: the change in its expectation over draws when the
        prompt leaves the pool (see the module)."""
        key = (variant, batch)
        if key not in self._cache:
            rec = self.recordings[variant]
            out = {k: sum_deletions(rec.sums[k], batch) for k in SUMS}
            out.update(reads=coverage_deletions(rec.cells, batch), passes=coverage_deletions(rec.pass_cells(), batch))
            self._cache[key] = out
        return self._cache[key]

    def check(self, variant: str, draws: list[dict]) -> None:
        """Raise unless the recordings give every draw's sums and passes and the first draw's union: the pool's
        order is the draws' and its recordings are the ones the draws were counted from."""
        rec = self.recordings[variant]
        members = np.array([d["prompts"] for d in draws])
        counted = {k: np.array([count_of(d["methods"][variant], k) for d in draws]) for k in (*SUMS, "passes")}
        made = {k: rec.sums[k][members].sum(1) for k in SUMS} | {"passes": rec.passes[members].max(1)}
        made["reads"], counted["reads"] = rec.cells[members[0]].any(0).sum(), count_of(draws[0]["methods"][variant],
                                                                                      "reads")
        if any(not np.array_equal(made[k], counted[k]) for k in made):
            raise ValueError(f"the recorded routes of {variant} do not give its counted draws (the pool of "
                             f"{len(self.keys)} prompts does not match the run's samples.jsonl)")


def count_of(c: dict, key: str) -> float:
    """A draw's count: its work counts, or its quality sums (accepted, steps)."""
    return float(c["quality"][key] if key in ("accepted", "steps") else c[key])
