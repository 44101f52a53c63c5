"""Experiments: what to run on which models, where results go, and the tables and figures built from them.

One package per experiment over a shared spine; imports run spine <- experiment <- the cross-cutting
commands, never from one experiment into another (a test holds it).

| package / module | what it holds                                                                          |
|------------------|----------------------------------------------------------------------------------------|
| `spine/`         | configs (`WorldConfig`, the strict loader), run folders and rows, engines and prompts, and the steps of the world's rules several experiments take: calibration, B0, graded generations, budgets |
| `table1/`        | Table 1: its section config, runner, table and commands (`table1`, `calibrate`, `b0`)   |
| `throughput/`    | Figures 3-5 and Table 2: section config, timed and swept phases, records, report, figures, commands |
| `study/`         | the calibration study: section config, runner, tables, command                         |
| `claims/`        | the paper's claims beside this reproduction, from saved runs (a reader of other experiments' records) |
| `bench/`         | benchmarks that print measured numbers (never run by the tests beyond a small smoke run) |
| `tables`         | `./reproduce.sh tables`: every experiment's outputs rebuilt from saved results only     |
| `gpucheck/`      | `./reproduce.sh gpu-check`: the script a person with a CUDA GPU runs as is             |
| `lm_eval`        | the lm-evaluation-harness model backend (`--model acceptmoe`)                          |
| `cli`            | `python -m acceptmoe <command>`: commands from their `@command` declarations            |
"""
