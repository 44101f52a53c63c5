#!/usr/bin/env bash
# Run the SGLang tests (tests/sglang/live) in the separate SGLang environment, building it first if needed.
#   tests/sglang/run_live.sh [pytest args]       (tests/sglang/live/<file>[::<test>] runs only those)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="$("$ROOT/scripts/sglang-env.sh")"
cd "$ROOT"
export TRITON_INTERPRET=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTHONPATH="$ROOT/tests/sglang/live${PYTHONPATH:+:$PYTHONPATH}"   # the CPU stand-ins: live/conftest.py
# the whole live folder, unless the arguments name tests of their own (a path or node id under tests/sglang/live)
where=(tests/sglang/live)
for arg in "$@"; do
  case "$arg" in tests/sglang/live/*) where=() ;; esac
done
exec "$PY" -m pytest -q -p no:cacheprovider -W ignore ${where[@]+"${where[@]}"} "$@"
