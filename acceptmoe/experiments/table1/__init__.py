"""Table 1: every method on every (model, task) pair, greedy, with calibration and B0 first.

| module     | what it holds                                                            |
|------------|--------------------------------------------------------------------------|
| `config`   | `Table1Config`, the `table1:` section                                    |
| `runner`   | the method order and the runs (calibration, B0, every method)            |
| `table`    | the table from saved results only (Markdown, CSV, LaTeX)                 |
| `commands` | `table1`, `calibrate`, `b0`, `admission`                                 |
| `worlds`   | `worlds`: Table 1 on independently trained tiny worlds, the spread across |
| `work`     | its work counted for `./reproduce.sh plan`                               |
| `admission`| `admission`: a Table 1 of AcceptMoE beside token-side admission, side by side |
"""
from acceptmoe.experiments.spine.catalog import Experiment

# found by `spine.catalog` (docs/architecture.md, "Experiments are found")
EXPERIMENT = Experiment(__name__, order=10, config="config:Table1Config",
                        tables={"table1": "table:write_table1", "worlds": "worlds:write_worlds",
                                "admission": "admission:write_admission"},
                        plan={"table1": "work:work", "admission": "work:admission_work"}, claims=("table1", "worlds", "admission"),
                        records=("table", "admission"))
