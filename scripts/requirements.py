"""Print requirement lines from pyproject.toml, one per line, for the install scripts.

  python scripts/requirements.py extra eval   -> the `eval` extra's requirements
  python scripts/requirements.py no-deps      -> what is installed with --no-deps ([tool.acceptmoe] no-deps)

One list in pyproject.toml serves ./reproduce.sh (the project's .venv) and scripts/sglang-env.sh (.venv-sglang,
or the environment ACCEPTMOE_SGLANG_PYTHON names, which may run Python 3.10: pip's own TOML reader then).
"""
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:                                   # Python 3.10
    from pip._vendor import tomli as tomllib


def lines(kind: str = "", *args: str) -> list[str]:
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    if kind == "extra" and len(args) == 1:
        return list(project["project"]["optional-dependencies"][args[0]])
    if kind == "no-deps" and not args:
        return list(project["tool"]["acceptmoe"]["no-deps"])
    raise SystemExit("usage: requirements.py extra NAME | no-deps")


if __name__ == "__main__":
    print("\n".join(lines(*sys.argv[1:])))
