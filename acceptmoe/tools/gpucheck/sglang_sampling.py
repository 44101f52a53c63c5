"""gpu-check's SGLang sampling stage: Standard SD served by SGLang on the GPU draws its first tokens with the
target's exact law (docs/method.md, "Sampling"), the native engine's exactness test
(`tests/engine/test_sampling.py`) run through SGLang's own EAGLE verify (`tree_speculative_sampling_target_only`).

- The law: `engine.sampling.exact_law` of the first LENGTH tokens after PROMPT under OPTIONS, from the native
  engine's target on the same device (full forward passes, no speculation).
- The samples: N requests of Standard SD through the SGLang backend (tree TREE, one `generate_many` per chunk,
  each request its own `sampling_seed`), the first LENGTH tokens of each.
- The verdict: `evals.goodness.chi_square` at alpha 0.01 (PASS when p > alpha and no sample lies outside the
  law's support), reported with the test's power (`min_detectable_tv`) and the empirical total variation.

SGLang lives in its own environment (its pins differ from ours), so `check_sglang_sampling` runs this module
there as a child process (`python -m acceptmoe.tools.gpucheck.sglang_sampling`): the interpreter running
gpu-check when it has SGLang, else ACCEPTMOE_SGLANG_PYTHON, else the repository's .venv-sglang; with none of
them the check is SKIP, naming the command that builds one. gpu-check runs it on CUDA, through sgl-kernel's
verify kernel; the live SGLang tests run the same measurement on a CPU, where the kernel is replaced by its torch
stand-in (`serving/sglang/cpu/sampling.py`). The per-request seeds reach SGLang's coins only in its
deterministic-inference mode, which this check does not turn on (docs/sglang.md).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .base import verdict

PROMPT = [16, 223, 932, 484, 223, 24]   # ". Zoe buys 6" in the tiny tokenizer: the target spreads its next tokens
OPTIONS = {"temperature": 1.0, "top_k": 6, "top_p": 0.95}
TREE = (3, 4, 12)
LENGTH = 2
N = 1000
CHUNK = 250                              # requests in flight per generate_many
TIMEOUT_S = 300
REPO = Path(__file__).resolve().parents[3]


def sglang_python() -> str | None:
    """The interpreter of an SGLang environment: this one, ACCEPTMOE_SGLANG_PYTHON, or .venv-sglang."""
    from importlib.metadata import PackageNotFoundError, version
    try:                                  # the installed distribution (a folder named sglang on sys.path is not it)
        version("sglang")
        return sys.executable
    except PackageNotFoundError:
        pass
    given = os.environ.get("ACCEPTMOE_SGLANG_PYTHON")
    built = REPO / ".venv-sglang" / "bin" / "python"
    return given if given else (str(built) if built.is_file() else None)


def check_sglang_sampling(model_dir: Path, device, n: int = N) -> dict:
    """The stage's check, measured in a child process of the SGLang environment."""
    python = sglang_python()
    if python is None:
        return {"check": "sglang-sampling", "verdict": "SKIP",
                "reason": "no SGLang environment: build it once with scripts/sglang-env.sh (or set "
                          "ACCEPTMOE_SGLANG_PYTHON), then run gpu-check again"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "check.json"
        cmd = [python, "-m", "acceptmoe.tools.gpucheck.sglang_sampling", "--model", str(model_dir),
               "--device", str(device), "--n", str(n), "--out", str(out)]
        try:
            done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return {"check": "sglang-sampling", "verdict": "FAIL", "reason": f"did not finish in {TIMEOUT_S} s"}
        if done.returncode != 0 or not out.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return {"check": "sglang-sampling", "verdict": "FAIL",
                    "reason": f"{python} exited {done.returncode}: " + " | ".join(tail)}
        return json.loads(out.read_text())


def measure(model_dir: Path, device: str, n: int) -> dict:
    """Sample N requests through SGLang and test them against the exact law (module docstring)."""
    from acceptmoe.engine import GenerationOptions, TreeShape, load_engine
    from acceptmoe.engine.sampling import exact_law
    from acceptmoe.evals.goodness import ALPHA, chi_square, min_detectable_tv, outside_support, total_variation
    from acceptmoe.methods import BASELINE, Variant
    from acceptmoe.serving.sglang.engine import open_engine

    native = load_engine(model_dir, device=device, tree=TreeShape(*TREE))
    try:
        law = exact_law(native.model, PROMPT, GenerationOptions(**OPTIONS), LENGTH)   # type: ignore[arg-type]
    finally:
        native.close()
    backend = open_engine(model_dir / "target", model_dir / "draft", device=device, tree=TreeShape(*TREE),
                          requests=CHUNK, request_tokens=len(PROMPT) + LENGTH + 16, skip_tokenizer_init=True,
                          log_level="error")
    try:
        plan = Variant(BASELINE).bind(backend.fit)
        samples: list[tuple[int, ...]] = []
        for start in range(0, n, CHUNK):
            seeds = range(start, min(n, start + CHUNK))
            options = [GenerationOptions(ignore_eos=True, trace_layers=False, seed=s, **OPTIONS)    # type: ignore[arg-type]
                       for s in seeds]
            gens = backend.generate_many([PROMPT] * len(options), plan, LENGTH, options)
            samples += [tuple(g.tokens[:LENGTH]) for g in gens]
    finally:
        backend.close()
    outside = outside_support(samples, law)
    row = {"check": "sglang-sampling", "samples": len(samples), "options": OPTIONS, "tree": list(TREE),
           "length": LENGTH, "alpha": ALPHA, "outside_support": [list(s) for s in outside[:5]],
           "empirical_tv": round(total_variation(samples, law), 4)}
    if outside:
        return {**row, "verdict": verdict(False)}
    stat, pvalue, df = chi_square(samples, law)
    return {**row, "verdict": verdict(pvalue > ALPHA), "chi2": round(stat, 2), "df": df, "p": pvalue,
            "min_detectable_tv": round(min_detectable_tv(len(samples), df), 4)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m acceptmoe.tools.gpucheck.sglang_sampling")
    p.add_argument("--model", type=Path, default=Path("models/tiny"))
    p.add_argument("--device", default="cuda")
    p.add_argument("--n", type=int, default=N)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    a.out.write_text(json.dumps(measure(a.model, a.device, a.n), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
