#!/usr/bin/env bash
# Build (once) the separate SGLang 0.5.23 environment, CPU only: the SGLang tests, `cross-engine` and
# `--engine sglang` on a CPU run in it (./reproduce.sh calls this when they are asked for).
#   scripts/sglang-env.sh                -> prints the environment's python path on stdout
# SGLang pins other torch/transformers versions than the project, so it never goes into the project's venv.
# A plain `pip install sglang` pulls a CUDA torch and ~10 GB: install it without dependencies beside the CPU
# torch wheel, plus the light dependencies its serving path imports. Rebuilt only when this script or
# pyproject.toml (the plugin's entry point, the graders' pins) changes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ACCEPTMOE_SGLANG_VENV:-$ROOT/.venv-sglang}"
PY="$VENV/bin/python"
stamp="$VENV/.acceptmoe-sglang.stamp"
want="$(cat "${BASH_SOURCE[0]}" "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ -x "$PY" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$PY"; exit 0
fi
log() { echo "[sglang-env] $*" >&2; }
if [ ! -x "$PY" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
pip() { "$PY" -m pip install -q --disable-pip-version-check --no-warn-conflicts "$@" >&2; }
log "installing torch (CPU) and sglang 0.5.23 without its dependencies"
pip torch==2.13.0
pip --no-deps sglang==0.5.23 compressed-tensors==0.18.0
log "installing sglang's light serving dependencies"
pip triton==3.8.0 transformers==5.19.0 tokenizers==0.23.2 safetensors numpy pyyaml aiohttp fastapi \
  "uvicorn>=0.51" uvloop pyzmq psutil orjson msgspec pydantic requests setproctitle pybase64 \
  python-multipart prometheus-client partial_json_parser interegular einops packaging tqdm xxhash regex \
  sentencepiece tiktoken openai==2.8.0 pillow ipython dill apache-tvm-ffi==0.1.11 gguf loguru xgrammar==0.2.7 \
  pytest
log "installing the graders (the project's eval extra, read from pyproject.toml) for --engine sglang runs"
# shellcheck disable=SC2046
pip $("$PY" "$ROOT/scripts/requirements.py" extra eval)
# shellcheck disable=SC2046
pip --no-deps $("$PY" "$ROOT/scripts/requirements.py" no-deps)
log "installing acceptmoe (editable, no dependencies) so its sglang.srt.plugins entry point is registered"
pip --no-deps -e "$ROOT"
echo "$want" > "$stamp"
echo "$PY"
