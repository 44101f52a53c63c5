"""No method name outside `acceptmoe/methods/`: code elsewhere decides behaviour from the registry's roles
(`BASELINE`, `B0_METHOD`, `REFERENCE`, `CALIBRATION`, `DEFAULT_METHOD`) and `MethodSpec` properties, never by
spelling a method (docs/architecture.md, "A method is a registry entry"). Docstrings, comments and the YAML
configs (user input) may name methods."""
from __future__ import annotations

import ast
from pathlib import Path

from acceptmoe.methods import METHODS, Variant

PACKAGE = Path(__file__).resolve().parents[2] / "acceptmoe"


def spelled_names() -> set[str]:
    """Every registered method's name and the variant names derived from it without run-time inputs."""
    out = set()
    for name, spec in METHODS.items():
        out.add(name)
        for prune in ((None, False, True) if spec.restricts else (None,)):
            out.add(Variant(name, prune=prune).name)
    return out


def literals(path: Path, names: set[str]) -> list[str]:
    """`file:line: 'name'` for every string literal in `path` equal to one of `names` (a docstring is one
    literal, so its prose never equals a name)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            where = path.relative_to(PACKAGE.parent) if path.is_relative_to(PACKAGE) else path.name
            found.append(f"{where}:{node.lineno}: {node.value!r}")
    return found


def test_no_method_name_is_spelled_outside_methods():
    names = spelled_names()
    assert {"acceptmoe", "standard-sd", "acceptmoe-noprune"} <= names
    bad = [hit for path in sorted(PACKAGE.rglob("*.py")) if "methods" not in path.relative_to(PACKAGE).parts[:1]
           for hit in literals(path, names)]
    assert not bad, ("method names spelled outside acceptmoe/methods/ (use a role or a MethodSpec property):\n"
                     + "\n".join(bad))


def test_the_scan_finds_a_spelled_name_and_skips_prose(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('"""Docs may say standard-sd."""\nif m == "acceptmoe-noprune":  # a comment: acceptmoe\n'
                     '    pass\nlabel = f"{m} (acceptmoe)"\n')
    assert literals(probe, spelled_names()) == ["probe.py:2: 'acceptmoe-noprune'"]
