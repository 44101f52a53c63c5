"""Experiment runners: small modules, each a pure-ish function plus a `main(argv)` behind ./reproduce.sh.

| module        | what it does                                                                         |
|---------------|--------------------------------------------------------------------------------------|
| `config`      | the frozen `Table1Config`, loaded from configs/experiments/table1.yaml + a preset      |
| `prompts`     | chat-template prompt ids, decoding of generated tokens (plain or raw Harmony)         |
| `tracelog`    | resumable JSONL trace files (one complete trace per finished unit, never duplicated)  |
| `calibrate`   | Standard SD on a training split -> `CommitmentTable` per (model, calibration source)   |
| `b0`          | the budget B0 from AcceptMoE traces (METHOD.md's first-50 / first-100 rule)           |
| `accuracy`    | every method on every (model, task) pair; one `samples.jsonl` row per (prompt, method) |
| `table1`      | `./reproduce.sh table1`: the whole experiment, then the table from saved results      |
| `tables`      | `./reproduce.sh tables`: rebuild every table and figure from saved results only       |
| `budgets`     | p_hat and B0 for other runners: from a Table 1 run, or computed by Table 1's code      |
| `perf_config` | the frozen `ThroughputConfig` (resident, offload, sweep sections + the Table 1 world)  |
| `perf`        | throughput phases (resident, offload-timed, offload-counters, sweep) and their command |
| `perf_tables` | throughput, ratios, traffic, hit rate, stall share, sweep accuracy from saved rows      |
| `perf_report` | Markdown / CSV / LaTeX outputs and the comparison with the paper's numbers              |
| `figures`     | Figures 3, 4, 5 (matplotlib, Agg backend), PNG and PDF                                 |
| `fig3` `fig4` `table2` `sweep` `fig5` | the commands: each a phase selection of `perf`                 |
| `calibration_study` | beta sensitivity, on-policy p_hat, B0 from training-split traces                 |
"""
