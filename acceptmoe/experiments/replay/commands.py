"""`./reproduce.sh replay`: a recorded run's expert work at a model's shapes, then its tables and figure.

    ./reproduce.sh fig4 --record-routes                                # record routes (any graded/timed run)
    ./reproduce.sh replay --run results/fig4/tiny/<run> --shape qwen3-30b-a3b [--device cpu|cuda] [--offload X]
                          [--variants V ...] [--generations N] [--passes-per-generation M] [--repeats R]
                          [--layers n] [--weight-sets S] [--memory-gib G]
    ./reproduce.sh replay --resume results/replay/tiny/<run>
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from acceptmoe.commands import command, parser
from acceptmoe.errors import UserError
from acceptmoe.evals.stats import MIN_UNITS

from ..spine.config import from_saved
from ..spine.options import add_cluster_option, open_or_resume, positive_int, run_and_report
from .config import EXPERIMENT, ReplayConfig, load_replay_config
from .report import write_outputs
from .runner import plan_replay, run_replay

OPTIONS = {"run": "source", "shape": "shape", "device": "device", "dtype": "dtype", "offload": "offload",
           "phase": "phase", "model": "model", "variants": "variants", "generations": "generations",
           "passes_per_generation": "passes_per_generation", "repeats": "repeats", "layers": "layers",
           "weight_sets": "weight_sets", "memory_gib": "memory_gib"}


def _parser() -> argparse.ArgumentParser:
    p = parser(EXPERIMENT)
    p.add_argument("--run", type=Path, default=None, metavar="RUN_DIR", help="a run folder recorded with --record-routes")
    p.add_argument("--shape", default=None, help="tiny | qwen3-30b-a3b | gpt-oss-120b | a model folder (default: "
                                                 "qwen3-30b-a3b)")
    p.add_argument("--device", default=None, help="cpu | cuda (default: the preset's)")
    p.add_argument("--dtype", default=None, help="auto | float32 | bfloat16 | float16 (default auto)")
    p.add_argument("--offload", type=positive_int, default=None, metavar="X",
                   help="also replay with X device slots per layer (default: the recording's X if offloaded)")
    p.add_argument("--phase", default=None, help="the recorded phase (default: the first recorded)")
    p.add_argument("--model", default=None, help="the recorded model (default: the first recorded)")
    p.add_argument("--variants", nargs="+", default=None, help="recorded variants to replay (default: all)")
    p.add_argument("--generations", type=positive_int, default=None,
                   help="first recorded prompts per task, one generation each per variant (default 20)")
    p.add_argument("--passes-per-generation", type=positive_int, default=None,
                   help="step passes replayed from each generation's start (default 16)")
    p.add_argument("--repeats", type=positive_int, default=None, help="rounds, variant order rotated (default 1)")
    p.add_argument("--layers", type=positive_int, default=None, help="replayed MoE layers (default: the recording's)")
    p.add_argument("--weight-sets", type=positive_int, default=None, help="distinct random weight sets (default 2)")
    p.add_argument("--memory-gib", type=float, default=None, help="memory limit for weights and pools (default 16)")
    p.add_argument("--preset", default="tiny", help="the world whose device and threads the replay uses")
    p.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR", help="continue this replay run folder")
    p.add_argument("--results", type=Path, default=None, help="results root (default: results/)")
    p.add_argument("--allow-code-change", action="store_true",
                   help="with --resume: continue although the code differs from the run's")
    add_cluster_option(p)          # a replay is timed: it runs in this process (docs/cluster.md)
    return p


def checked(cfg: ReplayConfig) -> ReplayConfig:
    """The replay's plan made once before a run folder opens: a bad shape, source or size fails here; a
    recording with fewer prompts than a verdict rests on is said before the run starts."""
    plan = plan_replay(cfg)
    counts = plan.recording.per_task()
    if sum(counts.values()) < MIN_UNITS:
        print(f"note: the replay takes {sum(counts.values())} prompts of {cfg.source} "
              f"({', '.join(f'{t} {c}' for t, c in counts.items())}): its intervals will rest on fewer than "
              f"{MIN_UNITS} prompts, too few for a verdict", file=sys.stderr)
    return cfg


@command("replay", "re-run a recorded run's expert work at a model's shapes (resident and X-slot pool), with "
                   "bytes / bandwidth bounds")
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    mine = {key: str(v) if isinstance(v, Path) else v for opt, key in OPTIONS.items()
            if (v := getattr(args, opt)) is not None}
    if args.resume is not None and mine:
        raise UserError(f"--resume continues a replay with its frozen config: drop "
                        f"{', '.join('--' + o.replace('_', '-') for o, k in OPTIONS.items() if k in mine)}")
    if args.resume is None and "source" not in mine:
        raise UserError("replay needs --run RUN_DIR: a run folder recorded with --record-routes (e.g. "
                        "./reproduce.sh fig4 --record-routes)")
    cfg, run = open_or_resume(EXPERIMENT, args, lambda o: checked(load_replay_config(args.preset, {**o, **mine})),
                              lambda saved: from_saved(ReplayConfig, saved))
    return run_and_report(EXPERIMENT, run, lambda: run_replay(cfg, run), write_outputs)
