"""The spine every experiment stands on: configs, run folders and rows, engines and prompts, and the steps
of the world's rules that several experiments take (calibration, B0, graded generations, budgets).

| module        | what it holds                                                                      |
|---------------|------------------------------------------------------------------------------------|
| `config`      | the strict loader, `WorldConfig` (models, tasks, tree, selector, limits, rules), `Pair` |
| `runs`        | run folders, `SampleLog` (resumable rows), atomic writes, the code state            |
| `rows`        | the typed rows `samples.jsonl` holds (`GradedRow`, `TimedRow`, `TraceStats`)        |
| `records`     | pooled records of graded rows (accuracy with intervals, set size, tau)              |
| `tracelog`    | resumable trace files (one complete trace per finished unit)                        |
| `layout`      | where per-pair files live in a run folder (`RunPaths`)                              |
| `engines`     | `--engine native|sglang` and `load_model` -> `Loaded` (engine, tokenizer, `plan`)   |
| `fit`         | what a model needs on a machine from config.json alone; the check before it loads   |
| `prompts`     | checkpoints, tokenizers, chat-template prompts, decoding                            |
| `options`     | the command-line options, `open_or_resume`, `run_to_completion`, `run_and_report`   |
| `calibration` | Standard SD on a training split -> `CommitmentTable` per (model, source)            |
| `b0`          | `B0Decision` from AcceptMoE traces (docs/method.md's rule)                          |
| `grading`     | one pair's prompts under one plan, generated, graded, saved                        |
| `budgets`     | p_hat and B0 for throughput and study runs (read from Table 1, or computed)         |
| `render`      | Markdown, LaTeX and CSV renderers                                                  |
"""
