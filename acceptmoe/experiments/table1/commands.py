"""Table 1's commands: the whole experiment, its calibration step alone, and B0 checked from saved traces.

    ./reproduce.sh table1 [--preset tiny|paper] [--limit N] [--methods ...] [--resume RUN_DIR]
    ./reproduce.sh calibrate --preset tiny
    ./reproduce.sh b0 --run results/table1/tiny/<run-id>     # recompute and check every pair's B0
    ./reproduce.sh admission [--limit N] [--methods ...]      # Table 1 of the admitting methods, side by side
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from acceptmoe.commands import command, parser
from acceptmoe.methods import B0_METHOD

from ..spine import calibration
from ..spine.b0 import B0Decision, decide_b0, first_traces
from ..spine.config import from_saved, load_experiment
from ..spine.engines import opened, set_threads
from ..spine.layout import RunPaths
from ..spine.options import add_methods_option, add_run_options, open_or_resume, run_to_completion
from ..spine.runs import Run, SampleLog
from ..spine.tracelog import TraceLog
from . import admission
from .config import Table1Config
from .runner import run_summary
from .table import OUTPUTS, write_table1

EXPERIMENT = "table1"


def open_experiment(args: argparse.Namespace) -> tuple[Table1Config, Run]:
    """Table 1's config and run folder for these options."""
    return open_or_resume(EXPERIMENT, args, lambda o: load_experiment(Table1Config, args.preset, o),
                          lambda saved: from_saved(Table1Config, saved))


@command("table1", "Table 1: calibration, B0, every method on every (model, task) pair, then the table")
def main(argv: list[str] | None = None) -> int:
    p = parser("table1")
    add_run_options(p)
    add_methods_option(p)
    cfg, run = open_experiment(p.parse_args(argv))
    if not run_to_completion(EXPERIMENT, run, lambda: run_summary(cfg, run)):
        return 130
    print(write_table1(run.path))
    print(f"written: {', '.join(str(run.path / f) for f in OUTPUTS)}")
    return 0


@command("calibrate", "Standard SD on the training split: commitment tables (p_hat) per model and task")
def calibrate(argv: list[str] | None = None) -> int:
    p = parser("calibrate")
    add_run_options(p, limit_help="calibration prompts per source task (the same as --calibration-limit)")
    args = p.parse_args(argv)
    if args.limit is not None:
        if args.calibration_limit not in (None, args.limit):
            p.error(f"--limit {args.limit} and --calibration-limit {args.calibration_limit} disagree: give one")
        args.calibration_limit, args.limit = args.limit, None
    cfg, run = open_experiment(args)
    set_threads(cfg.world)
    paths = RunPaths(run.path)
    for model in cfg.world.models:
        with opened(model, cfg.world, run.path, pooled=True) as loaded:
            for source in calibration.sources(cfg.world):
                table = calibration.calibrate_source(loaded, cfg.world, source, paths)
                p_hat = ", ".join(f"{p:.3f}" for p in table.p_hat)
                print(f"{model.name} {source}-{cfg.world.calibration.split}: p_hat = [{p_hat}]  "
                      f"(m_d = {table.proposed}) -> "
                      f"{paths.calibration(model.name, source, cfg.world.calibration.split)}")
    print(f"run folder: {run.path}")
    return 0


@command("b0", "recompute and check B0 of a Table 1 run from its saved AcceptMoE traces")
def b0(argv: list[str] | None = None) -> int:
    p = parser("b0")
    p.add_argument("--run", type=Path, required=True, metavar="RUN_DIR", help="a results/table1/... run folder")
    args = p.parse_args(argv)
    cfg = from_saved(Table1Config, json.loads((args.run / "config.json").read_text())["config"])
    paths, mismatches = RunPaths(args.run), 0
    finished = SampleLog(paths.samples)
    for pair in cfg.world.pairs():
        trace_file = paths.traces(pair, B0_METHOD)
        if not trace_file.is_file():
            print(f"{pair.model} {pair.task}: no acceptmoe traces yet")
            continue
        d = decide_b0(first_traces(TraceLog(trace_file, keep=finished), cfg.world.b0), cfg.world.b0)
        saved = B0Decision.load(paths.b0(pair)).b0 if paths.b0(pair).is_file() else None
        mismatches += saved is not None and saved != d.b0
        print(f"{pair.model} {pair.task}: B0 = {d.b0} (mean {d.mean_set_size:.3f}, {cfg.world.b0.confidence:.0%} CI "
              f"[{d.low:.3f}, {d.high:.3f}], first {d.n_prompts} prompts{', limited' if d.limited else ''}); "
              f"saved: {saved}")
    return 1 if mismatches else 0


@command("admission", "AcceptMoE, token-side adaptive verification and their composition side by side (a Table 1 "
                      "of those methods, then admission.md)")
def admission_main(argv: list[str] | None = None) -> int:
    p = parser(admission.EXPERIMENT)
    add_run_options(p)
    add_methods_option(p)
    args = p.parse_args(argv)
    if args.methods is None and args.resume is None:
        args.methods = list(admission.COMPARED)
    if args.methods is not None and not admission.admits_any(args.methods):
        p.error(f"--methods {' '.join(args.methods)}: none admits draft nodes, so there is nothing to compare; add "
                f"one of {', '.join(admission.ADMITTING)} (or run `./reproduce.sh table1`)")
    cfg, run = open_or_resume(admission.EXPERIMENT, args, lambda o: load_experiment(Table1Config, args.preset, o),
                              lambda saved: from_saved(Table1Config, saved))
    if not run_to_completion(admission.EXPERIMENT, run, lambda: run_summary(cfg, run)):
        return 130
    print(admission.write_admission(run.path))
    print(f"written: {', '.join(str(run.path / f) for f in admission.OUTPUTS)} and Table 1's files")
    return 0
