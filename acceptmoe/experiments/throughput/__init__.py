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
| `commands` | `fig3`, `fig4`, `table2`, `sweep`, `fig5`                                        |
"""
from collections.abc import Callable
from pathlib import Path


def _report(run: Path) -> str:
    from .report import write_outputs
    return write_outputs(run)[0]


# run folder -> its tables and figures, from saved files (one builder per command's experiment name)
BUILDERS: dict[str, Callable[[Path], str]] = {name: _report for name in ("fig3", "fig4", "table2", "sweep", "fig5")}
