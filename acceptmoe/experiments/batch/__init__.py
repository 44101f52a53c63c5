"""The batch study: AcceptMoE where production serves, B requests per verify pass and chain drafts as well as
the paper's trees (docs/batch-study.md).

| module     | what it holds                                                                              |
|------------|--------------------------------------------------------------------------------------------|
| `config`   | `BatchStudyConfig`, the `batch-study:` section; `DraftShape` (num_steps/topk/num_draft_tokens) |
| `runner`   | per draft shape: budgets, every composable method graded with routes; then one counted row per batch size |
| `batched`  | the server budget (one p_hat and B0 per model, every task); draws verified together (`Engine.generate_batch`) |
| `compose`  | requests from recorded routes, drawn and composed into batched passes, counted by the engine's store |
| `prompts`  | the pool of prompts draws are made of: each composed request's recorded sets, read from routes |
| `intervals`| every interval over prompts: a cell's draws and the pool's deletions for `evals.stats`      |
| `records`  | per (shape, batch, method) work and bytes with paired ratios; tau and accuracy per shape   |
| `report`   | tables (Markdown, CSV, LaTeX) and the figure from saved files only                         |
| `commands` | `batch-study`                                                                              |
"""
from acceptmoe.experiments.spine.catalog import Experiment

# found by `spine.catalog` (docs/architecture.md, "Experiments are found")
EXPERIMENT = Experiment(__name__, order=50, config="config:BatchStudyConfig",
                        tables={"batch-study": "report:rebuild"}, claims=("batch-study",), records=("records",))
