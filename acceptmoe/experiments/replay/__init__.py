"""Expert-work replay: a recorded run's routes re-executed at a model's real expert shapes through the engine's
own ExpertStore, resident and with an X-slot pool, with bytes / bandwidth bounds beside every measured time.

    config -> source (which recorded generations: per task the first prompts, one generation each)
           -> runner (stores, prompt by prompt, samples.jsonl) -> report (intervals over prompts: `intervals`)

The tiny world routes like Qwen3-30B-A3B (128 experts, top-8, 64-token verification blocks) but its experts are
small enough that a CPU pays per multiplied row, not per byte; the replay runs the same routing decisions at
the target's expert sizes, where a verification pass is bandwidth-bound, and measures what the paper's
claims are about: expert bytes read and moved per verification pass.
"""
from acceptmoe.experiments.spine.catalog import Experiment

# found by `spine.catalog` (docs/architecture.md, "Experiments are found")
EXPERIMENT = Experiment(__name__, order=40, config="config:ReplayConfig", tables={"replay": "report:rebuild"},
                        claims=("replay",), records=("report",))
