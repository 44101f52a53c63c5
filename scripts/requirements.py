"""Print requirement lines from pyproject.toml, one per line, for the install scripts.

  python scripts/requirements.py extra eval   -> the `eval` extra's requirements
  python scripts/requirements.py no-deps      -> what is installed with --no-deps ([tool.acceptmoe] no-deps)

One list in pyproject.toml serves ./reproduce.sh (the project's .venv) and scripts/sglang-env.sh (.venv-sglang).
"""
import sys
import tomllib
from pathlib import Path

project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
kind = sys.argv[1] if len(sys.argv) > 1 else ""
if kind == "extra" and len(sys.argv) == 3:
    lines = project["project"]["optional-dependencies"][sys.argv[2]]
elif kind == "no-deps" and len(sys.argv) == 2:
    lines = project["tool"]["acceptmoe"]["no-deps"]
else:
    sys.exit("usage: requirements.py extra NAME | no-deps")
print("\n".join(lines))
