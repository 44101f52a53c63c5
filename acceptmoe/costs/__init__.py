"""Costs: what a model needs and what a pass reads, from config.json files alone, in bytes, FLOPs and seconds at a
GPU's published bandwidths. `plan`, the replay, the batch study, bench-kernel and gpu-check read them; they read
the engine's own sizing (`engine.memory`, `ExpertMath`) and nothing above it (docs/architecture.md).

| module      | what it holds                                                                                 |
|-------------|-----------------------------------------------------------------------------------------------|
| `shapes`    | the paper's expert shapes (random weights in the stored format) and the GPUs' bandwidths (`GPUS`) |
| `passbytes` | the whole-pass byte model: what a step reads besides its experts, and the bound a GPU puts on it |
| `fit`       | what a model needs on a machine (device, pinned, host peak) and the check before it loads      |
| `hours`     | `plan`'s cost model: the seconds a generation takes on a GPU, over the work a run counts        |
"""
