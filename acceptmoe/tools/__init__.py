"""Tools: commands that check, measure or size the machinery rather than reproduce a result. They stand on the
experiments (the spine, and an experiment's own modules where a tool runs it, as gpu-check runs the replay),
and nothing imports them (docs/architecture.md, "Rooms and the one-way rule").

| module          | what it holds                                                                             |
|-----------------|-------------------------------------------------------------------------------------------|
| `plan`          | `plan`: memory (`costs.fit`), generations (each experiment's `work`) and hours (`costs.hours`) per model and GPU |
| `checkmodel`    | `check-model`: a user's checkpoint against transformers, its memory, methods, backends and draft |
| `crossengine/`  | `cross-engine`: the native engine against SGLang on the same prompts, method by method    |
| `gpucheck/`     | `gpu-check`: the one script a CUDA GPU runs (kernel, parity, graphs, offload, timing)     |
| `gpu_experts`   | the experts kernel's check and timing (gpu-check's, and the kernel tests')                |
| `bench/`        | `bench-*`: benchmarks that print measured numbers                                         |
"""
