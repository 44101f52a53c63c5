#!/usr/bin/env bash
# The user's entry point. `./reproduce.sh --help` lists the subcommands.
#   ./reproduce.sh test            create .venv if needed, install the project with test extras, run pytest;
#                                  with no pytest arguments, also the SGLang tests in their own environment
#   ./reproduce.sh <sub> [args]    run an experiment subcommand (python -m acceptmoe <sub> [args])
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

VENV="${ACCEPTMOE_VENV:-.venv}"
PY="$VENV/bin/python"

ensure_env() {  # $1: pip extras to install, e.g. "test" or "eval"
  local extras="$1"
  if [ ! -x "$PY" ]; then
    echo "[reproduce] creating $VENV" >&2
    python3 -m venv "$VENV"
    "$PY" -m pip install -q --upgrade pip >/dev/null
  fi
  # Reinstall only when pyproject.toml or the requested extras change.
  local stamp="$VENV/.acceptmoe-$extras.stamp"
  local want
  want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "[reproduce] installing acceptmoe[$extras] (CPU path: torch==2.13.0, triton==3.7.1)" >&2
    "$PY" -m pip install -q -e ".[$extras]"
    echo "$want" > "$stamp"
  fi
}

sub="${1:---help}"
case "$sub" in
  test)
    shift
    ensure_env test
    if [ $# -gt 0 ]; then exec "$PY" -m pytest -q "$@"; fi
    "$PY" -m pytest -q
    exec tests/sglang/run_live.sh
    ;;
  -h|--help|help)
    ensure_env eval
    exec "$PY" -m acceptmoe --help
    ;;
  *)
    shift
    ensure_env eval
    exec "$PY" -m acceptmoe "$sub" "$@"
    ;;
esac
