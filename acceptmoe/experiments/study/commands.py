"""`./reproduce.sh calibration-study`: the calibration study's run, then its tables.

    ./reproduce.sh calibration-study [--preset tiny|paper] [--limit N] [--budgets-from TABLE1_RUN] [--resume RUN_DIR]
"""
from __future__ import annotations

from acceptmoe.commands import command, parser

from ..spine.config import from_saved
from ..spine.options import add_budgets_option, add_run_options, open_or_resume, run_to_completion
from .config import EXPERIMENT, CalibrationStudyConfig, load_study_config
from .runner import run_experiment
from .tables import write_study


@command("calibration-study", "beta sensitivity, on-policy p_hat, B0 from training-split traces")
def main(argv: list[str] | None = None) -> int:
    p = parser("calibration-study")
    add_run_options(p, "cap on evaluation and training prompts (quick runs)")
    add_budgets_option(p)
    args = p.parse_args(argv)
    cfg, run = open_or_resume(EXPERIMENT, args, lambda o: load_study_config(args.preset, o),
                              lambda saved: from_saved(CalibrationStudyConfig, saved))
    if not run_to_completion(EXPERIMENT, run, lambda: run_experiment(cfg, run)):
        return 130
    print(write_study(run.path))
    return 0
