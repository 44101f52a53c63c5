"""Experiments: what to run on which models, where results go, and the tables and figures built from them.

| module              | what it does                                                                          |
|---------------------|---------------------------------------------------------------------------------------|
| `config`            | the config spine: `WorldConfig`, `Table1Config`, the strict loader, saved-config upgrade |
| `engines`           | `--engine native|sglang`: which `EngineBackend` runs the models                        |
| `runs`, `rows`      | run folders, resumable sample logs, atomic writes; the typed rows they hold            |
| `common`            | loading a model, the command-line options, `open_or_resume`                            |
| `prompts`           | chat-template prompt ids (fixed template dates), decoding (plain or raw Harmony)       |
| `tracelog`          | resumable trace files (one complete trace per finished unit, never duplicated)        |
| `calibrate`         | Standard SD on a training split -> `CommitmentTable` per (model, calibration source)   |
| `b0`                | the budget B0 from AcceptMoE traces (METHOD.md's first-50 / first-100 rule)            |
| `accuracy`          | every method on every (model, task) pair; one row per (prompt, method)                 |
| `table1`            | `./reproduce.sh table1`: the whole experiment, then the table from saved results       |
| `budgets`           | p_hat and B0 for other runners: from a Table 1 run, or computed by Table 1's code      |
| `perf_config`       | the throughput section (resident, offload, sweep phases)                               |
| `perf`              | throughput phases and the `fig3`, `fig4`, `table2`, `sweep`, `fig5` commands           |
| `perf_tables`       | throughput, ratios, traffic, hit rate, stall share, sweep accuracy from saved rows     |
| `perf_report`       | Markdown / CSV / LaTeX outputs and the comparison with the paper's numbers             |
| `figures`           | Figures 3, 4, 5 (matplotlib, Agg backend), PNG and PDF                                 |
| `calibration_study` | beta sensitivity, on-policy p_hat, B0 from training-split traces                       |
| `tables`            | `./reproduce.sh tables`: rebuild every table and figure from saved results only        |
| `cli`               | `python -m acceptmoe <command>`: commands from their `@command` declarations            |
| `bench/`            | benchmarks that print measured numbers (never run by the tests)                        |
"""
