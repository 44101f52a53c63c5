"""What the Table 1 runners share: the run folder's layout, loading a model, and the command-line options.

Run folder `results/table1/<preset>/<run-id>/`:

    config.json                                   frozen config, hash, environment (experiments.runs)
    samples.jsonl                                 one row per (model, task, prompt, method)
    calibration/<model>/<source>-<split>.json     CommitmentTable: counts and provenance
    calibration/<model>/<source>-<split>.traces.jsonl   the Standard SD traces it counts
    traces/<model>/<task>/<method>.jsonl          one trace per evaluation prompt
    b0/<model>/<task>.json                        B0 and how it was decided
    summary.json, table1.{md,csv,tex}             written when the run finishes
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from typing import Callable
from pathlib import Path

import torch

from acceptmoe.experiments.runs import Run, SampleLog, open_run

from .config import ModelSpec, Table1Config, config_from_saved, load_table1_config
from .prompts import load_tokenizer, resolve_checkpoint

EXPERIMENT = "table1"


def unit_key(model: str, task: str, example_id: str, method: str) -> str:
    return f"{model}|{task}|{example_id}|{method}"


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @property
    def samples(self) -> Path:
        return self.root / "samples.jsonl"

    def calibration(self, model: str, source: str, split: str) -> Path:
        return self.root / "calibration" / model / f"{source}-{split}.json"

    def calibration_traces(self, model: str, source: str, split: str) -> Path:
        return self.root / "calibration" / model / f"{source}-{split}.traces.jsonl"

    def traces(self, model: str, task: str, method: str) -> Path:
        return self.root / "traces" / model / task / f"{method}.jsonl"

    def b0(self, model: str, task: str) -> Path:
        return self.root / "b0" / model / f"{task}.json"


@dataclass
class Loaded:
    """A model ready to generate: its spec, engine and tokenizer, and where its checkpoints were found."""
    spec: ModelSpec
    engine: object
    tokenizer: object
    target: Path
    draft: Path


def load_model(spec: ModelSpec, cfg: Table1Config, store: str = "resident", slots: int | None = None) -> Loaded:
    """A fresh engine for `spec`; store/slots select the expert store (offloaded: an X-slot pool per layer)."""
    from acceptmoe.engine import load_engine
    target, draft = resolve_checkpoint(spec.target), resolve_checkpoint(spec.draft)
    engine = load_engine(target=target, draft=draft, device=cfg.device, dtype=cfg.dtype, store=store, slots=slots,
                         tree=cfg.tree, selector=cfg.selector)
    return Loaded(spec, engine, load_tokenizer(target), target, draft)


def set_threads(cfg: Table1Config) -> None:
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)


# ----- command line -----
def add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="tiny", help="configs/presets/<name>.yaml or a YAML path (default: tiny)")
    p.add_argument("--limit", type=int, default=None, help="evaluation prompts per task (overrides the preset)")
    p.add_argument("--methods", nargs="+", default=None, help="methods to run (default: all six)")
    p.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR",
                   help="continue this run folder with its own frozen config")
    p.add_argument("--results", type=Path, default=None, help="results root (default: results/)")


def open_experiment(args: argparse.Namespace) -> tuple[Table1Config, Run]:
    """The config and run folder for these options: a resumed folder keeps its frozen config."""
    if args.resume is not None:
        if args.limit is not None or args.methods is not None:
            raise SystemExit("--resume continues a run with its frozen config: drop --limit/--methods, "
                             "or start a new run without --resume")
        meta = args.resume / "config.json"
        if not meta.is_file():
            raise SystemExit(f"{args.resume} is not a run folder (no config.json)")
        return config_from_saved(json.loads(meta.read_text())["config"]), Run(args.resume, resumed=True)
    overrides = {k: v for k, v in (("limit", args.limit), ("methods", args.methods)) if v is not None}
    cfg = load_table1_config(args.preset, overrides)
    for spec in cfg.models:                        # fail before creating a run folder
        resolve_checkpoint(spec.target), resolve_checkpoint(spec.draft)
    return cfg, open_run(EXPERIMENT, cfg.preset, cfg, root=args.results)


def run_to_completion(command: str, run: Run, work: Callable[[], dict | None]) -> bool:
    """Run `work` into `run` and write its summary (`work`'s fields, rows, this session's seconds).
    Ctrl-C keeps every finished row, prints the resume command and returns False."""
    print(f"run folder: {run.path}{' (resumed)' if run.resumed else ''}", flush=True)
    start = time.perf_counter()
    try:
        extra = work() or {}
    except KeyboardInterrupt:
        print(f"\ninterrupted; finished rows are saved. Resume with: ./reproduce.sh {command} --resume {run.path}")
        return False
    run.finish({**extra, "rows": len(SampleLog(run.path / "samples.jsonl")),
                "seconds_this_session": round(time.perf_counter() - start, 1)})
    return True
