"""The throughput commands: one run folder each, the phases below, then every table and figure they allow.

| command  | phases                                       | writes                                        |
|----------|----------------------------------------------|-----------------------------------------------|
| `fig3`   | resident                                     | throughput-resident.{md,csv}, fig3.{png,pdf}  |
| `fig4`   | offload-timed, offload-counters              | throughput-offload.*, fig4.*, table2.*        |
| `table2` | offload-counters                             | table2.{md,csv,tex}                           |
| `sweep`  | sweep                                        | sweep.{md,csv,png,pdf}                        |
| `fig5`   | sweep, offload-timed, offload-counters       | all of the above for these phases, fig5.*     |

    ./reproduce.sh fig3 [--preset tiny|paper] [--limit N] [--budgets-from TABLE1_RUN] [--resume RUN_DIR]
    ./reproduce.sh fig4 --record-routes --offload-prompts 20     # the replay's recording: 20 prompts per task
    ./reproduce.sh fig3 --resident-methods standard-sd acceptmoe standard-sd-survival acceptmoe-costed
    ./reproduce.sh fig4 --offload-methods standard-sd acceptmoe acceptmoe-costed   # admitting methods offloaded

`--resident-methods` / `--offload-methods` replace a timed phase's variants (configs/experiments/throughput.yaml);
any registered method runs there, the token-side admitting ones (docs/method.md, "Token-side admission") with the
committed verify-cost profile of the phase's store unless the world names one (`verify_cost:`), copied into the
run folder (verify-cost.json, verify-cost-offloaded.json).
"""
from __future__ import annotations

from acceptmoe.commands import command, parser

from ..spine.options import add_budgets_option, add_run_options, open_or_resume, positive_int, run_and_report
from .config import load_throughput_config, throughput_config_from_saved
from .report import write_outputs
from .runner import run_experiment

COMMAND_PHASES = {"fig3": ("resident",), "fig4": ("offload-timed", "offload-counters"),
                  "table2": ("offload-counters",), "sweep": ("sweep",),
                  "fig5": ("sweep", "offload-timed", "offload-counters")}


@command("fig3", "Figure 3: resident throughput vs Standard SD (5 repetitions, variants interleaved, a placebo)")
def fig3(argv: list[str] | None = None) -> int:
    return command_main("fig3", argv)


@command("fig4", "Figure 4 + Table 2: offloaded throughput (X slots per layer) and its counters run")
def fig4(argv: list[str] | None = None) -> int:
    return command_main("fig4", argv)


@command("table2", "Table 2: H2D traffic per token, hit rate, stall share (instrumented offload run)")
def table2(argv: list[str] | None = None) -> int:
    return command_main("table2", argv)


@command("sweep", "fixed-budget sweep of AcceptMoE-B beside self-sized AcceptMoE, graded like Table 1")
def sweep(argv: list[str] | None = None) -> int:
    return command_main("sweep", argv)


@command("fig5", "Figure 5: the sweep, pruning on vs off and the fetch-stall share, in one run")
def fig5(argv: list[str] | None = None) -> int:
    return command_main("fig5", argv)


def command_main(command: str, argv: list[str] | None) -> int:
    p = parser(command)
    add_run_options(p, "cap on prompts per pair in every phase (quick runs)")
    add_budgets_option(p)
    phases = COMMAND_PHASES[command]
    if "resident" in phases:
        p.add_argument("--resident-prompts", type=positive_int, default=None, metavar="N",
                       help="prompts per pair the resident phase times (overrides the preset)")
        p.add_argument("--resident-methods", nargs="+", default=None, metavar="METHOD",
                       help="the methods the resident phase times (default: the config's; Standard SD brings "
                            "its placebo)")
    if any(ph.startswith("offload") for ph in phases):
        p.add_argument("--offload-prompts", type=positive_int, default=None, metavar="N",
                       help="prompts per pair the offloaded phases run (overrides the preset; the replay reads "
                            "routes of 20 per task)")
        p.add_argument("--offload-methods", nargs="+", default=None, metavar="METHOD",
                       help="the methods the offloaded phases run (default: the config's; Standard SD brings its "
                            "placebo)")
    args = p.parse_args(argv)
    cfg, run = open_or_resume(command, args, lambda o: load_throughput_config(args.preset, COMMAND_PHASES[command], o),
                              throughput_config_from_saved)
    return run_and_report(command, run, lambda: run_experiment(cfg, run), write_outputs)
