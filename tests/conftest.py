"""Test setup: the Triton kernel runs under the interpreter on CPU, so TRITON_INTERPRET must be set before
any @triton.jit decorator executes (that is, before the package is imported)."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)  # tiny test models run fastest single-threaded
