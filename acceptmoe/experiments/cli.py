"""`python -m acceptmoe <subcommand>`: the dispatcher behind ./reproduce.sh.

Subcommands register themselves in COMMANDS with a one-line description; an unknown name prints the
valid ones.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module with a `main(argv) -> int`, one-line description)
COMMANDS: dict[str, tuple[str, str]] = {
    "bench-select": ("acceptmoe.experiments.bench.select_latency",
                     "selection + routing latency per layer (torch reference vs the batched verifier)"),
    "bench-kernel": ("acceptmoe.experiments.bench.kernel_table", "the verifier kernel compiled for sm_90 and sm_120: registers, spills, SASS, fp64"),
    "bench-copy": ("acceptmoe.experiments.bench.expert_copy", "one expert load (host copy / H2D) vs one expert's compute, per shape"),
    "table1": ("acceptmoe.experiments.table1",
               "Table 1: calibration, B0, every method on every (model, task) pair, then the table"),
    "tables": ("acceptmoe.experiments.tables", "rebuild every table from saved results only"),
    "calibrate": ("acceptmoe.experiments.calibrate",
                  "Standard SD on the training split: commitment tables (p_hat) per model and task"),
    "b0": ("acceptmoe.experiments.b0", "recompute and check B0 of a Table 1 run from its acceptmoe traces"),
    "fig3": ("acceptmoe.experiments.fig3", "Figure 3: resident throughput vs Standard SD (3 repetitions, 256 tokens)"),
    "fig4": ("acceptmoe.experiments.fig4", "Figure 4 + Table 2: offloaded throughput (X slots) and its counters run"),
    "table2": ("acceptmoe.experiments.table2", "Table 2: H2D traffic per token, hit rate, stall share (instrumented run)"),
    "sweep": ("acceptmoe.experiments.sweep", "fixed-budget sweep of AcceptMoE-B beside self-sized AcceptMoE"),
    "fig5": ("acceptmoe.experiments.fig5", "Figure 5: sweep, pruning on vs off, fetch-stall share"),
    "calibration-study": ("acceptmoe.experiments.calibration_study",
                          "beta sensitivity, on-policy p_hat, B0 from training-split traces"),
    "bench-engine": ("acceptmoe.experiments.bench.engine_speed",
                     "our engine vs transformers on the tiny model (tokens/s, tau) and where the time goes"),
    "train-tiny": ("acceptmoe.tiny.train_tiny",
                   "regenerate models/tiny from seeds: data, tokenizer, target, EAGLE-3 draft"),
    "tiny-eval": ("acceptmoe.tiny.quick_eval", "greedy accuracy of a tiny target per tiny task (transformers)"),
}


def usage() -> str:
    width = max(len(n) for n in COMMANDS) + 2
    lines = ["usage: ./reproduce.sh <subcommand> [args]", "", "subcommands:",
             f"  {'test':<{width}}create .venv if needed, install test extras, run pytest"]
    lines += [f"  {name:<{width}}{desc}" for name, (_, desc) in COMMANDS.items()]
    lines += ["", "Run `./reproduce.sh <subcommand> --help` for a subcommand's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"unknown subcommand {name!r}; valid subcommands: test, {', '.join(COMMANDS)}\n", file=sys.stderr)
        print(usage(), file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    try:
        return int(module.main(rest) or 0)
    except _user_errors() as exc:  # bad input: the message names the problem and the fix; no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that report bad input (unknown method, bad config key, missing checkpoint or file, ...)."""
    from acceptmoe.evals.data import DataError
    from acceptmoe.engine.config import CheckpointError
    from acceptmoe.engine.eagle3 import DraftMismatchError
    from acceptmoe.experiments.runs import ConfigKeyError
    from acceptmoe.methods import ConfigError, TreeError, UnknownMethodError
    return (ConfigError, ConfigKeyError, UnknownMethodError, TreeError, CheckpointError, DraftMismatchError,
            DataError, FileNotFoundError)


def parser(name: str, description: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=f"./reproduce.sh {name}", description=description)
