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
| `tables`      | `./reproduce.sh tables`: rebuild every table from saved results only                  |
"""
