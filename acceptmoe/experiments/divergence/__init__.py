"""The divergence report: what restricted routing does to the target's distribution under sampling (docs/method.md,
"Sampling"; docs/commands.md, "divergence"). For every registered method that restricts experts, at each
temperature: KL and total variation of its verify passes' next-token distributions from natural routing's at
the same positions, the acceptance length and the accuracy, each with a bootstrap interval over prompts;
Standard SD beside them (natural routing: no divergence by construction). The claims table reads its newest
reference run (`claims=`) through `report` (`summarise`, and `paired`: one method minus another over prompts).

| module     | what it holds                                                            |
|------------|--------------------------------------------------------------------------|
| `config`   | `DivergenceConfig`, the `divergence:` section                            |
| `runner`   | p_hat and B0 (`spine.budgets`), then every (temperature, method, prompt) |
| `report`   | the report from saved rows only; `paired` differences for the claims     |
| `commands` | `divergence`                                                             |
"""
from acceptmoe.experiments.spine.catalog import Experiment

# found by `spine.catalog` (docs/architecture.md, "Experiments are found")
EXPERIMENT = Experiment(__name__, order=36, config="config:DivergenceConfig",
                        tables={"divergence": "report:write_report"}, claims=("divergence",),
                        records=("report", "config"))
