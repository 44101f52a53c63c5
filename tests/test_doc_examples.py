"""Every example that shows a call runs: the README's Python blocks and every docstring example written as a
doctest (`>>>`) in the package, on the embedded tiny world."""
from __future__ import annotations

import doctest
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import acceptmoe

ROOT = Path(__file__).resolve().parents[1]
SKIPPED = ("acceptmoe.__main__", "acceptmoe.serving.sglang.engine", "acceptmoe.serving.sglang.plugin",
           "acceptmoe.serving.sglang.check")          # need SGLang (tests/sglang/live runs them there)


def modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(acceptmoe.__path__, "acceptmoe.") if m.name not in SKIPPED]


def with_doctests() -> list[str]:
    """Modules whose docstrings hold at least one doctest example."""
    finder = doctest.DocTestFinder()
    return [name for name in modules()
            if any(t.examples for t in finder.find(importlib.import_module(name)))]


@pytest.fixture(autouse=True)
def _in_the_repository(monkeypatch):
    monkeypatch.chdir(ROOT)                        # examples name models/tiny, configs/ relative to the repo


def readme_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


@pytest.mark.parametrize("i", range(len(readme_blocks())))
def test_readme_python_block_runs(i):
    exec(compile(readme_blocks()[i], f"README.md block {i}", "exec"), {})


def test_the_key_modules_carry_runnable_examples():
    have = set(with_doctests())
    for name in ("acceptmoe.methods", "acceptmoe.methods.variant", "acceptmoe.methods.reference",
                 "acceptmoe.kernels.verifier", "acceptmoe.engine", "acceptmoe.engine.engine",
                 "acceptmoe.experiments.spine.config", "acceptmoe.experiments.spine.engines"):
        assert name in have, f"{name} shows no runnable example"


@pytest.mark.parametrize("name", with_doctests())
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, f"{name}: {result.failed} of {result.attempted} failed"
