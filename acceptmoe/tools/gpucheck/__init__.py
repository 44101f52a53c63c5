"""gpu-check: the one script a person with a CUDA GPU runs as is (`./reproduce.sh gpu-check`, `command`), in
at most 10 minutes, and the only GPU evidence the project gets. Every check takes a device and returns a dict
with a verdict (PASS / FAIL / SKIP; INFO for the informational row), so its CPU side runs in the tests (the
kernels under TRITON_INTERPRET=1); a verdict that needs CUDA is SKIP on a CPU, with its reason.

| module      | what it holds                                                                              |
|-------------|--------------------------------------------------------------------------------------------|
| `agreement` | the kernel against the torch backend: what is compared, the one-unit-per-term tolerance, the margin |
| `kernel`    | the verifier-kernel checks: `kernel` (against torch, tied logits), `kernel-reference` (informational) |
| `parity`    | logits against transformers on small random checkpoints (their configs: the tests' fixtures too) |
| `graphs`    | CUDA-graph replay = static passes: tiny world (`graphs`), Qwen3-30B-A3B layer shape (`layer-graphs`) |
| `checks`    | lossless SD, pinned host memory sized to the experts, the replay of recorded routes            |
| `layer`     | a random MoE at a layer shape and its decode / verify passes as steps                       |
| `timing`    | timing rows, each labelled with the step mode that actually ran                             |
| `table`     | the Markdown table (a detail line per check)                                                |
| `command`   | `run_all` (the stages under a time budget) and the command                                  |

The experts kernel's check and timing live in `tools/gpu_experts.py` (the kernel tests share them); the
random checkpoints of the parity check in `acceptmoe.testing` (the tests' fixtures too).
"""
