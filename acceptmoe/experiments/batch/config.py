"""The batch study's section of the config spine (`configs/experiments/batch-study.yaml`, then the preset's
`batch-study:` mapping, then the command line).

    >>> from acceptmoe.experiments.batch.config import load_batch_config
    >>> cfg = load_batch_config("tiny", {"batch_sizes": [1, 4], "trees": ["3/1/4"]})
    >>> cfg.batch_sizes, [str(t) for t in cfg.shapes()], cfg.limit
    ((1, 4), ['3/1/4'], 128)
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from acceptmoe.engine.tree import TreeShape
from acceptmoe.methods import BASELINE, METHODS, alone_twin, get_method

from ..spine.config import ConfigKeyError, WorldConfig, load_experiment
from ..spine.engines import backend_class, engines_that

EXPERIMENT = "batch-study"
PHASE = "batch"          # the graded rows' phase and the routes' folder of the study's generations


@dataclass(frozen=True)
class DraftShape:
    """One draft shape of the study: the engine's `TreeShape` and its name in folders and tables."""
    tree: TreeShape

    @classmethod
    def parse(cls, text: str) -> DraftShape:
        """"num_steps/topk/num_draft_tokens", e.g. "5/10/64" (the paper's tree) or "3/1/4" (a chain)."""
        parts = str(text).split("/")
        if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
            raise ConfigKeyError(f"trees: {text!r} is not num_steps/topk/num_draft_tokens (e.g. 5/10/64 or 3/1/4)")
        try:
            return cls(TreeShape(*(int(p) for p in parts)))
        except ValueError as exc:
            raise ConfigKeyError(f"trees: {text!r}: {exc}") from None

    @property
    def chain(self) -> bool:
        return self.tree.topk == 1

    @property
    def folder(self) -> str:
        t = self.tree
        return f"tree-{t.num_steps}-{t.topk}-{t.num_draft_tokens}"

    def __str__(self) -> str:
        t = self.tree
        return f"{t.num_steps}/{t.topk}/{t.num_draft_tokens}"

    def describe(self) -> str:
        return f"{'chain' if self.chain else 'tree'} {self}"

    def folder_in(self, run_dir: str | Path) -> Path:
        """Where this shape's generations live in a run folder (`shapes/tree-S-K-T/`, `spine.layout` inside)."""
        return Path(run_dir) / "shapes" / self.folder


def composable(method: str) -> bool:
    """Whether a batched pass of `method` is the union of its requests' batch-1 routes: not for a score that
    credits the pass's other requests (`Score.credits_batch`), whose sets change with the batch (the study
    runs those batched, draw by draw). Token-side admission composes: each request's admitted subtree depends on
    its own tree, its own measured union growth and, under an offloaded store, the pool's resident share; the
    study's recordings and batched checks run on the resident store, where no request's admission reads another
    (docs/method.md, "Token-side admission"; the first draw of every cell checks it request by request)."""
    score = get_method(method).score
    return score is None or not score.credits_batch


@dataclass(frozen=True)
class BatchStudyConfig:
    SECTION = EXPERIMENT
    world: WorldConfig
    limit: int = 128                                  # evaluation prompts per task: the pool requests come from
    batch_sizes: tuple[int, ...] = (1, 4, 16, 64, 128, 256)   # B = 256 draws half of the 4-task pool
    trees: tuple[str, ...] = ("5/10/64", "3/1/4")     # num_steps/topk/num_draft_tokens
    draws: int = 32                                   # request draws per batch size
    slots: int = 48                                   # X of the X-slot pool
    shapes_at: tuple[str, ...] = ("tiny", "qwen3-30b-a3b", "gpt-oss-120b")
    methods: tuple[str, ...] | None = None            # None: every speculating method that admits every node
                                                      # (the study's first runs); the YAML names every one
    seed: int = 0
    bootstrap_resamples: int = 2000

    def __post_init__(self) -> None:
        if self.limit < 1 or self.draws < 1 or self.slots < 1 or self.bootstrap_resamples < 1:
            raise ConfigKeyError(f"limit, draws, slots and bootstrap_resamples must be >= 1, got {self.limit}, "
                                 f"{self.draws}, {self.slots}, {self.bootstrap_resamples}")
        if not self.batch_sizes or min(self.batch_sizes) < 1 or len(set(self.batch_sizes)) != len(self.batch_sizes):
            raise ConfigKeyError(f"batch_sizes must be distinct whole numbers >= 1, got {list(self.batch_sizes)}")
        pool = self.limit * len(self.world.tasks)
        if max(self.batch_sizes) > pool:
            raise ConfigKeyError(f"batch size {max(self.batch_sizes)} exceeds the {pool} prompts requests are drawn "
                                 f"from ({self.limit} per task x {len(self.world.tasks)} tasks): raise --limit to "
                                 f"at least {-(-max(self.batch_sizes) // len(self.world.tasks))} or lower "
                                 f"--batch-sizes")
        if not self.trees or len({str(s) for s in self.shapes()}) != len(self.trees):
            raise ConfigKeyError(f"trees must be distinct draft shapes, got {list(self.trees)}")
        for m in self.methods or ():
            if not get_method(m).speculates:
                raise ConfigKeyError(f"methods: {m} drafts nothing, so it has no verify pass to batch; drop it")
            if not composable(m) and alone_twin(m) not in self.methods:
                raise ConfigKeyError(f"methods: {m} is compared with {alone_twin(m)}, what it is at one request per "
                                     f"pass: add {alone_twin(m)}")
        if not backend_class(self.world.engine).capabilities.records_routes:
            raise ConfigKeyError(f"engine {self.world.engine}: the batch study composes recorded routes, which "
                                 f"{self.world.engine} does not record: use an engine that does "
                                 f"({', '.join(engines_that('records_routes'))})")
        if len(self.world.models) != 1:
            raise ConfigKeyError(f"the batch study batches one model's requests; the preset lists "
                                 f"{len(self.world.models)} models: give it one (models:)")
        if self.methods is not None and BASELINE not in self.methods:
            raise ConfigKeyError(f"methods must include {BASELINE}: every ratio is taken against it")

    @property
    def preset(self) -> str:
        return self.world.preset

    def shapes(self) -> list[DraftShape]:
        return [DraftShape.parse(t) for t in self.trees]

    def method_names(self) -> tuple[str, ...]:
        """The methods batched, in registry order: the configured ones (configs/experiments/batch-study.yaml names
        every speculating method, the token-side admitting ones included), or with `methods` null every method
        that speculates and verifies every drafted node (what the study's first runs froze as null)."""
        chosen = self.methods if self.methods is not None else tuple(m for m, s in METHODS.items() if not s.admits)
        return tuple(m for m in METHODS if m in chosen and METHODS[m].speculates)

    def composed(self) -> tuple[str, ...]:
        """The methods whose batched passes are composed from batch-1 routes (`composable`)."""
        return tuple(m for m in self.method_names() if composable(m))

    def batched(self) -> tuple[str, ...]:
        """The methods whose every draw runs batched (`composable` false)."""
        return tuple(m for m in self.method_names() if not composable(m))

    def world_for(self, shape: DraftShape) -> WorldConfig:
        """The world with this draft shape, recording routes, calibrating on at most `limit` prompts per task."""
        w = self.world
        return dataclasses.replace(
            w, tree=shape.tree, generation=dataclasses.replace(w.generation, record_routes=True),
            calibration=dataclasses.replace(w.calibration, prompts=min(w.calibration.prompts, self.limit)))


def load_batch_config(preset: str | Path, overrides: dict | None = None) -> BatchStudyConfig:
    return load_experiment(BatchStudyConfig, preset, overrides)
