#!/usr/bin/env bash
# The user's entry point. `./reproduce.sh --help` lists the subcommands.
#   ./reproduce.sh test            create .venv if needed, install the project with test extras, run the linter
#                                  (ruff), the type checker (mypy) and pytest (a worker per core, up to 4),
#                                  then the SGLang plugin's live tests in their own environment (.venv-sglang)
#   ./reproduce.sh <sub> [args]    run an experiment subcommand (python -m acceptmoe <sub> [args]); with --cluster
#                                  the cluster extra (Ray) is installed too (docs/cluster.md)
#   ./reproduce.sh cross-engine    native engine against SGLang; it and `--engine sglang` run in the SGLang
#                                  environment: ACCEPTMOE_SGLANG_PYTHON's as it is, else .venv-sglang, built by
#                                  scripts/sglang-env.sh on first use (SGLang's CUDA build on a GPU machine)
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
    local pins="CPU path: torch==2.13.0, triton==3.7.1"
    if [ "$(python3 scripts/sglang_env.py cuda)" = yes ]; then   # nvidia-smi lists a GPU
      pins="torch==2.13.0 (PyPI's Linux wheel is its CUDA build), triton==3.7.1"
    fi
    echo "[reproduce] installing acceptmoe[$extras] ($pins)" >&2
    "$PY" -m pip install -q -e ".[$extras]"
    # Code grading reuses evalplus's sanitiser and oracles; its dependencies are in the eval extra.
    # shellcheck disable=SC2046
    "$PY" -m pip install -q --no-deps $("$PY" scripts/requirements.py no-deps)
    echo "$want" > "$stamp"
  fi
}

ensure_bwrap() {  # bubblewrap gives the code sandbox its namespaces (acceptmoe/evals/confine.py)
  command -v bwrap >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[reproduce] installing bubblewrap for the code sandbox" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; } >/dev/null 2>&1 \
      || echo "[reproduce] could not install bubblewrap: the code sandbox falls back (it says how)" >&2
  else
    echo "[reproduce] bubblewrap (bwrap) is missing: install it (sudo apt-get install bubblewrap, or your" \
         "distribution's package) for the full code sandbox; until then it falls back (it says how)" >&2
  fi
}

sub="${1:---help}"
case "$sub" in
  test)
    shift
    ensure_env test
    ensure_bwrap
    if [ $# -gt 0 ]; then exec "$PY" -m pytest -q "$@"; fi
    "$PY" -m ruff check --no-cache acceptmoe tests scripts   # the linter (pyproject.toml [tool.ruff])
    "$PY" -m mypy                   # the type checker: methods, kernels, engine (pyproject.toml [tool.mypy])
    # one test file per worker process (module fixtures are built once), a worker per core up to 4;
    # ACCEPTMOE_TEST_WORKERS overrides (1: in this process, no workers)
    workers="${ACCEPTMOE_TEST_WORKERS:-$(nproc)}"
    if [ "$workers" -gt 4 ]; then workers=4; fi
    if [ "$workers" -le 1 ]; then "$PY" -m pytest -q; else "$PY" -m pytest -q -n "$workers" --dist loadfile; fi
    # the SGLang plugin against a live SGLang, in its own environment (SGLang's pins differ from ours)
    exec tests/sglang/run_live.sh
    ;;
  cross-engine)
    shift
    exec "$(scripts/sglang-env.sh)" -m acceptmoe cross-engine "$@"
    ;;
  -h|--help|help)
    ensure_env eval
    exec "$PY" -m acceptmoe --help
    ;;
  *)
    shift
    case " $* " in
      *" --engine sglang "*|*" --engine=sglang "*)   # SGLang's pins differ from ours: its own environment
        ensure_bwrap
        exec "$(scripts/sglang-env.sh)" -m acceptmoe "$sub" "$@" ;;
    esac
    case " $* " in
      *" --cluster "*|*" --cluster="*) ensure_env eval,cluster ;;   # Ray (docs/cluster.md)
      *) ensure_env eval ;;
    esac
    ensure_bwrap
    exec "$PY" -m acceptmoe "$sub" "$@"
    ;;
esac
