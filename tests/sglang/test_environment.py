"""Which SGLang environment ./reproduce.sh uses and how each recipe makes it (scripts/sglang_env.py), without
building one: the choice as a function of its inputs, each recipe's steps, and an environment named by
ACCEPTMOE_SGLANG_PYTHON that has no SGLang refused with one line and left as it was. (That a named environment
holding SGLang is used without installing anything is checked in it: live/test_environment.py.)"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def helper():
    spec = importlib.util.spec_from_file_location("sglang_env", ROOT / "scripts" / "sglang_env.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_recipe_is_the_named_environment_then_cuda_then_cpu():
    env = helper()
    assert env.recipe("/opt/serve/bin/python", cuda=False) == "given"
    assert env.recipe("/opt/serve/bin/python", cuda=True) == "given"
    assert env.recipe(None, cuda=True) == env.recipe("", cuda=True) == "gpu"
    assert env.recipe(None, cuda=False) == "cpu"


def test_the_gpu_recipe_takes_sglangs_own_dependencies_and_holds_them():
    env = helper()
    gpu, cpu = env.steps("gpu", "HELD"), env.steps("cpu", "HELD")
    assert gpu[0] == ["pip", "sglang==0.5.23"]                  # with its dependencies: its CUDA torch and kernels
    named = [arg for step in gpu for arg in step[1:]]
    assert not any(arg.startswith(("torch", "triton", "transformers")) for arg in named)    # never re-pinned
    graders = next(i for i, step in enumerate(gpu) if "lm-eval==0.4.13" in step)
    assert gpu.index(["hold", "HELD"]) < graders and gpu[graders][1:3] == ["-c", "HELD"]
    assert cpu[0] == ["pip", "torch==2.13.0"] and cpu[1][1:3] == ["--no-deps", "sglang==0.5.23"]   # the CPU wheel
    for steps in (gpu, cpu):
        assert steps[-1] == ["pip", "--no-deps", "-e", str(ROOT)] and ["pip", "--no-deps", "evalplus==0.3.1"] in steps
        served = [step[-2:] for step in steps]            # SGLang's router and its HTTP servers' imports (serving.dp)
        assert ["--no-deps", "sglang-router==0.3.2"] in served and any("jsonschema" in step for step in steps)


def test_a_named_environment_without_sglang_is_refused_and_left_as_it_was(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")], check=True)
    python = tmp_path / "env" / "bin" / "python"
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "env").rglob("*"))
    proc = subprocess.run([str(ROOT / "scripts" / "sglang-env.sh")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ACCEPTMOE_SGLANG_PYTHON": str(python)})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error:") and "sglang==0.5.23" in lines[0], proc.stderr
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "env").rglob("*")) == before
