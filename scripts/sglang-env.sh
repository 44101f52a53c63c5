#!/usr/bin/env bash
# The SGLang environment (./reproduce.sh calls this for the SGLang tests, `cross-engine` and `--engine sglang`):
#   scripts/sglang-env.sh                -> prints the environment's python path on stdout
# SGLang pins other torch/transformers versions than the project, so it never goes into the project's venv. The
# recipe (scripts/sglang_env.py):
#   ACCEPTMOE_SGLANG_PYTHON=/path/to/python   an existing environment with sglang==0.5.23, used as it is: only
#                                             the project (no dependencies), the graders and pytest where missing
#   a machine with a CUDA GPU (nvidia-smi)    .venv-sglang from `pip install sglang==0.5.23` (its CUDA torch)
#   otherwise                                 .venv-sglang for SGLang's CPU path (CPU torch, SGLang without deps)
# A built environment is rebuilt only when its recipe, these scripts or pyproject.toml change.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HELPER="$ROOT/scripts/sglang_env.py"
log() { echo "[sglang-env] $*" >&2; }

run_steps() {  # $1: python of the environment, $2: recipe
  local py="$1" kind="$2" hold step
  hold="$(mktemp)"
  while read -r -a step; do
    [ ${#step[@]} -gt 0 ] || continue
    if [ "${step[0]}" = hold ]; then
      "$py" "$HELPER" hold "${step[1]}"
    else
      log "pip install ${step[*]:1}"
      "$py" -m pip install -q --disable-pip-version-check --no-warn-conflicts "${step[@]:1}" >&2
    fi
  done < <("$py" "$HELPER" steps "$kind" "$hold")
  rm -f "$hold"
}

if [ -n "${ACCEPTMOE_SGLANG_PYTHON:-}" ]; then
  PY="$ACCEPTMOE_SGLANG_PYTHON"
  if ! "$PY" -c "" 2>/dev/null; then
    echo "error: ACCEPTMOE_SGLANG_PYTHON=$PY does not run: point it at an environment's python" >&2
    exit 2
  fi
  "$PY" "$HELPER" check || exit 2
  run_steps "$PY" given
  echo "$PY"; exit 0
fi

recipe="$(python3 "$HELPER" recipe)"
VENV="${ACCEPTMOE_SGLANG_VENV:-$ROOT/.venv-sglang}"
PY="$VENV/bin/python"
stamp="$VENV/.acceptmoe-sglang.stamp"
want="$( (echo "$recipe"; cat "${BASH_SOURCE[0]}" "$HELPER" "$ROOT/pyproject.toml") | sha256sum | cut -d' ' -f1)"
if [ -x "$PY" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$PY"; exit 0
fi
if [ ! -x "$PY" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
log "building the SGLang environment ($recipe recipe, scripts/sglang_env.py)"
run_steps "$PY" "$recipe"
echo "$want" > "$stamp"
echo "$PY"
