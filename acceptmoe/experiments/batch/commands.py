"""`./reproduce.sh batch-study`: the verify passes of B requests composed into one batched pass, per method,
draft shape and batch size, then the tables and the figure.

    ./reproduce.sh batch-study [--limit N] [--batch-sizes 1 4 16 64] [--trees 5/10/64 3/1/4] [--draws D]
                               [--slots X] [--methods M ...] [--out RESULTS_ROOT]
    ./reproduce.sh batch-study --resume results/batch-study/tiny/<run-id>
"""
from __future__ import annotations

from pathlib import Path

from acceptmoe.commands import command, parser
from acceptmoe.errors import UserError

from ..spine.config import from_saved
from ..spine.options import add_run_options, open_or_resume, positive_int, run_and_report
from .config import EXPERIMENT, BatchStudyConfig, load_batch_config
from .report import write_outputs
from .runner import run_experiment

OPTIONS = {"batch_sizes": "batch_sizes", "trees": "trees", "draws": "draws", "slots": "slots"}


@command("batch-study", "expert work when B requests verify together (batch 1-64, tree and chain drafts): "
                        "unions, bytes per output token, ratios to Standard SD")
def main(argv: list[str] | None = None) -> int:
    p = parser(EXPERIMENT)
    add_run_options(p, "evaluation prompts per task: the pool requests are drawn from (default 32)")
    p.add_argument("--batch-sizes", type=positive_int, nargs="+", default=None, metavar="B",
                   help="requests verified together (default 1 4 16 64)")
    p.add_argument("--trees", nargs="+", default=None, metavar="S/K/T",
                   help="draft shapes num_steps/topk/num_draft_tokens (default 5/10/64 3/1/4: the paper's tree, "
                        "a chain)")
    p.add_argument("--draws", type=positive_int, default=None, help="request draws per batch size (default 32)")
    p.add_argument("--slots", type=positive_int, default=None, metavar="X", help="X of the X-slot pool (default 48)")
    p.add_argument("--methods", nargs="+", default=None,
                   help="methods to batch (default: every registered method that speculates)")
    p.add_argument("--out", type=Path, default=None, metavar="RESULTS_ROOT", help="the same as --results")
    args = p.parse_args(argv)
    if args.out is not None:
        if args.results is not None and args.results != args.out:
            raise UserError("--out and --results name the same thing: give one of them")
        args.results = args.out
    mine = {key: getattr(args, opt) for opt, key in OPTIONS.items() if getattr(args, opt) is not None}
    if args.resume is not None and mine:
        raise UserError(f"--resume continues a batch study with its frozen config: drop "
                        f"{', '.join('--' + o.replace('_', '-') for o in mine)}")
    cfg, run = open_or_resume(EXPERIMENT, args, lambda o: load_batch_config(args.preset, {**o, **mine}),
                              lambda saved: from_saved(BatchStudyConfig, saved))
    return run_and_report(EXPERIMENT, run, lambda: run_experiment(cfg, run), write_outputs)
