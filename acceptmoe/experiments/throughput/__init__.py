"""Throughput: resident (Figure 3) and offloaded (Figure 4) timings, the offload counters (Table 2) and the
fixed-budget sweep (Figure 5).

| module     | what it holds                                                                   |
|------------|---------------------------------------------------------------------------------|
| `config`   | `ThroughputConfig`, the `throughput:` section (resident, offload, sweep phases) |
| `runner`   | the timed phases and the graded sweep                                           |
| `prompts`  | which evaluation examples a phase runs (in order, or the longest replies first) |
| `records`  | throughput, ratios, traffic, hit rate, stall share, after EOS, natural text     |
| `report`   | Markdown / CSV / LaTeX outputs and the comparison with the paper's numbers      |
| `figures`  | Figures 3, 4, 5 (matplotlib, Agg backend)                                        |
| `work`     | each command's work counted for `./reproduce.sh plan`                           |
| `commands` | `fig3`, `fig4`, `table2`, `sweep`, `fig5`                                        |
"""
from acceptmoe.experiments.spine.catalog import Experiment

COMMANDS = ("fig3", "fig4", "table2", "sweep", "fig5")     # one run folder's experiment name per command

# found by `spine.catalog` (docs/architecture.md, "Experiments are found"); fig5 holds fig4's phases at the same
# sizes (and the sweep), so the claims read fig3 and fig5 by default (fig4's reference run is the replay's source)
EXPERIMENT = Experiment(__name__, order=20, config="config:ThroughputConfig",
                        tables={name: "report:rebuild" for name in COMMANDS},
                        plan={name: "work:work" for name in COMMANDS}, claims=("fig3", "fig5"),
                        records=("records", "timing", "report"))
