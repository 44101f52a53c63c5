"""Test setup: the Triton kernel runs under the interpreter on CPU, so TRITON_INTERPRET must be set before
any @triton.jit decorator executes (that is, before the package is imported)."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)  # tiny test models run fastest single-threaded

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def family_checkpoint(tmp_path_factory):
    """family -> (folder, transformers model): one tiny random checkpoint per model family and test session,
    written on first use (`fixtures.tiny_family`). Read-only: a test that damages one copies it first."""
    from fixtures import tiny_family
    built = {}

    def get(family: str):
        if family not in built:
            folder = tmp_path_factory.mktemp(family)
            built[family] = (folder, tiny_family(family, folder))
        return built[family]
    return get
