"""`./reproduce.sh divergence`: the divergence report's run, then its table.

    ./reproduce.sh divergence [--preset tiny|paper] [--limit N] [--budgets-from TABLE1_RUN] [--resume RUN_DIR]
"""
from __future__ import annotations

from acceptmoe.commands import command, parser

from ..spine.config import from_saved
from ..spine.options import add_budgets_option, add_methods_option, add_run_options, open_or_resume, run_and_report
from .config import EXPERIMENT, DivergenceConfig, load_divergence_config
from .report import write_report
from .runner import run_experiment


def outputs(run_dir) -> tuple[str, list]:
    text = write_report(run_dir)
    return text, [run_dir / "divergence.md", run_dir / "divergence.csv"]


@command("divergence", "restricted routing under sampling: KL and TV from natural routing, tau and accuracy at "
                       "temperatures 0.6 and 1.0, per restricting method, with intervals over prompts")
def main(argv: list[str] | None = None) -> int:
    p = parser("divergence")
    add_run_options(p, "cap on evaluation prompts per pair and on the budgets' prompts (quick runs)")
    add_methods_option(p)
    add_budgets_option(p)
    args = p.parse_args(argv)
    cfg, run = open_or_resume(EXPERIMENT, args, lambda o: load_divergence_config(args.preset, o),
                              lambda saved: from_saved(DivergenceConfig, saved))
    return run_and_report(EXPERIMENT, run, lambda: run_experiment(cfg, run), outputs)
