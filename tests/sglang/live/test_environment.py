"""`ACCEPTMOE_SGLANG_PYTHON` naming this environment (it holds SGLang, the project, the graders and pytest):
scripts/sglang-env.sh, which ./reproduce.sh runs before every SGLang command, hands it back and installs
nothing: every package and version in it is the same afterwards."""
import os
import subprocess
import sys

from common import ROOT


def freeze() -> str:
    return subprocess.run([sys.executable, "-m", "pip", "freeze", "--all"], capture_output=True, text=True,
                          check=True).stdout


def test_a_named_environment_is_used_as_it_is():
    before = freeze()
    proc = subprocess.run([str(ROOT / "scripts" / "sglang-env.sh")], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "ACCEPTMOE_SGLANG_PYTHON": sys.executable})
    assert proc.returncode == 0 and proc.stdout.strip() == sys.executable, proc.stderr
    assert "pip install" not in proc.stderr, proc.stderr
    assert freeze() == before
