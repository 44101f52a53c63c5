"""Every example that shows a call runs: each Python block of README.md and docs/*.md, as written and from a
folder outside the repository, printing what its `# prints:` comment shows (doctest's matching: `...` stands
for any text), and every docstring example written as a doctest (`>>>`) in the package, on the embedded tiny
world. A block that needs SGLang says so on its first line and runs in the live SGLang suite's environment
only."""
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


NEEDS_SGLANG = "# in the SGLang environment"


def doc_blocks() -> list[tuple[str, str]]:
    """(where, code) of every Python block in README.md and docs/*.md."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for i, code in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)):
            out.append((f"{path.relative_to(ROOT)} block {i}", code))
    return out


def shown_output(code: str) -> str:
    """What the block's `# prints:` comment shows (the comment lines after it, without their `# `)."""
    lines = code.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "# prints:"), None)
    return "" if start is None else "".join(line.strip()[2:] + "\n" for line in lines[start + 1:]
                                            if line.strip().startswith("#"))


@pytest.mark.parametrize("where, code", doc_blocks(), ids=[w for w, _ in doc_blocks()])
def test_doc_python_block_runs_anywhere_and_prints_what_it_shows(where, code, tmp_path, monkeypatch, capsys):
    if code.startswith(NEEDS_SGLANG):
        pytest.skip("needs SGLang: run in the SGLang environment")
    monkeypatch.chdir(tmp_path)                    # as written, from a folder outside the repository
    exec(compile(code, where, "exec"), {})
    printed, shown = capsys.readouterr().out, shown_output(code)
    assert printed, f"{where} prints nothing: show the user what it computes"
    checker = doctest.OutputChecker()
    assert shown and checker.check_output(shown, printed, doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE), \
        f"{where} printed:\n{printed}\nbut its `# prints:` comment shows:\n{shown}"


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
