"""The SGLang environment: which recipe makes it, and that recipe's steps (scripts/sglang-env.sh runs them).

  python3 scripts/sglang_env.py recipe        -> given | gpu | cpu
  python3 scripts/sglang_env.py cuda          -> yes | no (nvidia-smi runs and lists a GPU)
  PY scripts/sglang_env.py steps RECIPE       -> one step per line: `pip ARGS...` (pip install ARGS in PY's
                                                 environment) or `hold FILE` (write FILE: PY's torch, triton
                                                 and transformers pinned as installed, for `pip -c FILE`)
  PY scripts/sglang_env.py hold FILE
  PY scripts/sglang_env.py check              -> exit 2 with one `error:` line unless PY holds sglang==0.5.23

Recipes, chosen in this order:
- given: ACCEPTMOE_SGLANG_PYTHON names an environment that holds sglang==0.5.23; it is used as it is. Only what
  it lacks is installed: the project (editable, without dependencies), the graders and pytest, with the
  environment's torch, triton and transformers held where they are.
- gpu: nvidia-smi lists a GPU. `pip install sglang==0.5.23` in a new environment brings SGLang's own CUDA
  torch, triton, transformers and kernels; the graders follow with those held, then the project without
  dependencies.
- cpu: SGLang without its dependencies beside the CPU torch wheel and the light packages its serving path
  imports (no CPU build of its kernels exists; `acceptmoe.serving.sglang.cpu` supplies them).
Every recipe adds SGLang's router (`sglang-router`, without dependencies: SGLang's own serve it) and what SGLang's
HTTP server imports beyond the offline engine (`jsonschema`, `soundfile`): `serving.dp` > 1 runs HTTP servers behind it.
The graders' pins come from pyproject.toml (`requirements.py`), so both environments grade alike.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from requirements import lines as requirements  # noqa: E402 - the one list, in pyproject.toml

SGLANG = "0.5.23"
ROUTER = "0.3.2"                                    # sglang-router: serving.dp > 1 (acceptmoe.serving.sglang.fleet)
SERVE = [["jsonschema", "soundfile==0.13.1"], ["--no-deps", f"sglang-router=={ROUTER}"]]   # HTTP servers, router
HELD = ("torch", "triton", "transformers")          # never moved by what is installed after SGLang
TESTS = ("pytest",)                                 # what tests/sglang/run_live.sh needs beside the graders
CPU = [
    ["torch==2.13.0"],
    ["--no-deps", f"sglang=={SGLANG}", "compressed-tensors==0.18.0"],
    ["triton==3.8.0", "transformers==5.19.0", "tokenizers==0.23.2", "safetensors", "numpy", "pyyaml", "aiohttp",
     "fastapi", "uvicorn>=0.51", "uvloop", "pyzmq", "psutil", "orjson", "msgspec", "pydantic", "requests",
     "setproctitle", "pybase64", "python-multipart", "prometheus-client", "partial_json_parser", "interegular",
     "einops", "packaging", "tqdm", "xxhash", "regex", "sentencepiece", "tiktoken", "openai==2.8.0", "pillow",
     "ipython", "dill", "apache-tvm-ffi==0.1.11", "gguf", "loguru", "xgrammar==0.2.7"],
]


def cuda_reported() -> bool:
    """nvidia-smi is on the PATH, runs, and lists at least one GPU."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def recipe(given: str | None, cuda: bool) -> str:
    """The recipe for these inputs: an environment named by ACCEPTMOE_SGLANG_PYTHON, else CUDA, else CPU."""
    if given:
        return "given"
    return "gpu" if cuda else "cpu"


def installed(requirement: str) -> bool:
    """Whether this interpreter's environment satisfies `requirement` (a name with an optional == pin)."""
    name, _, version = requirement.partition("==")
    name = name.split(">")[0].split("<")[0].split("[")[0].strip()
    try:
        found = metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return not version or found == version


def project_installed() -> bool:
    """acceptmoe is installed from this checkout (so SGLang's processes load this plugin's entry point)."""
    try:
        dist = metadata.distribution("acceptmoe")
    except metadata.PackageNotFoundError:
        return False
    url = json.loads(dist.read_text("direct_url.json") or "{}").get("url")
    points = {e.value for e in dist.entry_points if e.group == "sglang.srt.plugins"}
    return url == ROOT.as_uri() and "acceptmoe.serving.sglang.plugin:load" in points


def steps(kind: str, hold_file: str) -> list[list[str]]:
    """The steps of recipe `kind` (for `given`: only what this environment lacks)."""
    project = ["pip", "--no-deps", "-e", str(ROOT)]
    graders = requirements("extra", "eval") + list(TESTS)
    bare = requirements("no-deps")
    if kind == "cpu":
        return [["pip", *args] for args in CPU + SERVE] + [["pip", *graders], ["pip", "--no-deps", *bare], project]
    if kind == "gpu":
        return [["pip", f"sglang=={SGLANG}"], ["hold", hold_file], *[["pip", "-c", hold_file, *a] for a in SERVE],
                ["pip", "-c", hold_file, *graders], ["pip", "--no-deps", *bare], project]
    if kind != "given":
        raise SystemExit(f"unknown recipe {kind!r}; valid: given, gpu, cpu")
    out = [["pip", "-c", hold_file, *args] for args in SERVE if not installed(args[-1])]
    if out:
        out.insert(0, ["hold", hold_file])
    lacking = [r for r in graders if not installed(r)]
    if lacking:
        out += ([] if out else [["hold", hold_file]]) + [["pip", "-c", hold_file, *lacking]]
    lacking = [r for r in bare if not installed(r)]
    if lacking:
        out.append(["pip", "--no-deps", *lacking])
    return out + ([] if project_installed() else [project])


def hold(path: str) -> None:
    pins = [f"{name}=={metadata.version(name)}" for name in HELD if installed(name)]
    Path(path).write_text("".join(p + "\n" for p in pins))


def check() -> int:
    if installed(f"sglang=={SGLANG}"):
        return 0
    found = metadata.version("sglang") if installed("sglang") else "no sglang"
    print(f"error: ACCEPTMOE_SGLANG_PYTHON={sys.executable} has {found}, not sglang=={SGLANG}: install it there "
          f"(pip install sglang=={SGLANG}) or unset ACCEPTMOE_SGLANG_PYTHON to let ./reproduce.sh build .venv-sglang",
          file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    if argv[:1] == ["recipe"] and len(argv) == 1:
        print(recipe(os.environ.get("ACCEPTMOE_SGLANG_PYTHON"), cuda_reported()))
    elif argv[:1] == ["cuda"] and len(argv) == 1:
        print("yes" if cuda_reported() else "no")
    elif argv[:1] == ["steps"] and len(argv) == 3:
        print("\n".join(" ".join(step) for step in steps(argv[1], argv[2])))
    elif argv[:1] == ["hold"] and len(argv) == 2:
        hold(argv[1])
    elif argv[:1] == ["check"] and len(argv) == 1:
        return check()
    else:
        print("usage: sglang_env.py recipe | cuda | steps RECIPE HOLD_FILE | hold FILE | check", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
