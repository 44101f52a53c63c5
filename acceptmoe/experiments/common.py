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

from acceptmoe.errors import UserError
from acceptmoe.experiments.runs import Run, SampleLog, code_state, open_run, record_resume

from .config import ModelSpec, Table1Config, WorldConfig, from_saved, load_experiment
from acceptmoe.engine.engine import check_device

from .engines import ENGINES, open_backend, opener
from .prompts import load_tokenizer, resolve_checkpoint

EXPERIMENT = "table1"


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


def load_model(spec: ModelSpec, world: WorldConfig, run_dir: Path, store: str = "resident",
               slots: int | None = None) -> Loaded:
    """A fresh engine (`world.engine`) for `spec`; store/slots select the expert store (offloaded: an X-slot
    pool per layer, native engine only). The engine's `describe()` (name, version, settings) is appended to
    `run_dir/engines.jsonl`, so every run says which engine made its rows."""
    target, draft = resolve_checkpoint(spec.target), resolve_checkpoint(spec.draft)
    engine = open_backend(world.engine, target=target, draft=draft, device=world.device, dtype=world.dtype,
                          store=store, slots=slots, tree=world.tree, selector=world.selector)
    with open(Path(run_dir) / "engines.jsonl", "a") as f:
        f.write(json.dumps({"model": spec.name, **engine.describe()}, sort_keys=True) + "\n")
    return Loaded(spec, engine, load_tokenizer(target), target, draft)


def set_threads(world: WorldConfig) -> None:
    if world.threads is not None:
        torch.set_num_threads(world.threads)


# ----- command line -----
CONFIG_OPTIONS = {"limit": "limit", "methods": "methods", "budgets_from": "budgets_from",   # option -> config key
                  "engine": "world.engine"}


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_run_options(p: argparse.ArgumentParser, limit_help: str = "evaluation prompts per task (overrides the preset)") -> None:
    """--preset, --limit, --resume, --results: the options every experiment command takes."""
    p.add_argument("--preset", default="tiny", help="configs/presets/<name>.yaml or a YAML path (default: tiny)")
    p.add_argument("--limit", type=positive_int, default=None, help=limit_help)
    p.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR",
                   help="continue this run folder with its own frozen config")
    p.add_argument("--results", type=Path, default=None, help="results root (default: results/)")
    p.add_argument("--engine", default=None, choices=tuple(ENGINES),
                   help="the engine that runs the models (default: the preset's, native)")
    p.add_argument("--allow-code-change", action="store_true",
                   help="with --resume: continue although the code differs from the run's (commit or local changes)")


def add_methods_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--methods", nargs="+", default=None, help="methods to run (default: all six)")


def add_budgets_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budgets-from", type=Path, default=None, metavar="TABLE1_RUN",
                   help="reuse p_hat and B0 from this Table 1 run folder (default: compute them in this run)")


def overrides_of(args: argparse.Namespace) -> dict:
    """The config overrides the command-line options give (dotted keys), for a new run."""
    out = {key: getattr(args, opt) for opt, key in CONFIG_OPTIONS.items() if getattr(args, opt, None) is not None}
    if "budgets_from" in out:
        out["budgets_from"] = str(out["budgets_from"])
    return out


def open_or_resume(command: str, args: argparse.Namespace, load: Callable[[dict], object],
                   from_saved: Callable[[dict], object]) -> tuple[object, Run]:
    """The one way a command gets its config and run folder: `--resume RUN_DIR` reopens that folder with its
    frozen config; otherwise `load(overrides)` builds the config and a new (or matching unfinished) run opens."""
    given = overrides_of(args)
    if args.resume is not None:
        if given:
            flags = ", ".join("--" + k.split(".")[-1].replace("_", "-") for k in given)
            raise UserError(f"--resume continues a run with its frozen config: drop {flags}, or start a new run "
                            f"without --resume")
        meta = args.resume / "config.json"
        if not args.resume.is_dir() or not meta.is_file():
            raise UserError(f"--resume {args.resume}: not a run folder (no {meta.name}); give a folder written by "
                            f"`./reproduce.sh {command}`, e.g. results/{command}/<preset>/<run-id>")
        saved = json.loads(meta.read_text())
        now = check_same_code(saved.get("environment", {}), args.resume, args.allow_code_change)
        run = Run(args.resume, resumed=True)
        record_resume(run, now)
        return from_saved(saved["config"]), run
    cfg = load(given)
    opener(cfg.world.engine)                       # fail before creating a run folder
    check_device(cfg.world.device)
    for spec in cfg.world.models:
        resolve_checkpoint(spec.target), resolve_checkpoint(spec.draft)
    return cfg, open_run(command, cfg.world.preset, cfg, root=args.results)


def check_same_code(recorded: dict, run_dir: Path, allowed: bool) -> dict:
    """A resumed run continues only with the code that started it (same commit, no local changes), unless the
    user says otherwise: rows made by different code would be mixed silently. Returns today's code state."""
    now = code_state()
    changed = []
    if recorded.get("git_commit") != now["git_commit"]:
        changed.append(f"commit {str(recorded.get('git_commit'))[:12]} -> {now['git_commit'][:12]}")
    if recorded.get("git_dirty") or now["git_dirty"]:
        changed.append("uncommitted local changes" + (" when the run started" if recorded.get("git_dirty") else ""))
    if changed and not allowed:
        raise UserError(f"--resume {run_dir}: the code differs from the run's ({'; '.join(changed)}): commit or stash "
                        f"the changes, check out the run's commit, or pass --allow-code-change (recorded in "
                        f"{run_dir / 'resumes.jsonl'})")
    return now


def open_experiment(args: argparse.Namespace) -> tuple[Table1Config, Run]:
    """Table 1's config and run folder for these options."""
    return open_or_resume(EXPERIMENT, args, lambda o: load_experiment(Table1Config, args.preset, o),
                          lambda saved: from_saved(Table1Config, saved))


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
