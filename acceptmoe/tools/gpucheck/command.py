"""`./reproduce.sh gpu-check`: every check and timing of the package on one CUDA GPU, run as is, in at most 10
minutes; writes `<out>/gpu_check.json` (every verdict, what decided it, seconds per stage) next to
`<out>/gpu_check.md` (`table`). Exit 1 on any FAIL; without CUDA one `error:` line and exit 2.

    ./reproduce.sh gpu-check [--model models/tiny --out results/gpu-check]

What it runs, counted (the stages in order; `run_all`'s defaults):
- kernel: 18 cases (2 routers x 9 method / pruning pairs) of one 64-token block, E = 128, k = 8, through both
  backends (22 launches each, Count-B's gate mass included): 18 kernel specialisations compiled;
  kernel-reference: the same 18 kernel launches against the Python reference;
- experts: 3 small launch pairs; parity: 2 random checkpoints x 2 dtypes, 24 tokens;
- graphs: 36 generations of 24 tokens on the tiny world (3 step modes x 6 methods x 2 prompts);
- layer-graphs: 3 passes captured at the Qwen3-30B-A3B layer shape (4 layers, bf16), 12 passes run;
- lossless, pinned: 12 generations of 32 tokens (4 prompts x AR, SD resident, SD offloaded);
- replay: 4 recorded generations; 2 generations x 8 passes replayed twice per store at Qwen3-30B-A3B's expert
  shape;
- sglang-sampling: 1000 Standard SD requests of 2 tokens at temperature 1 through SGLang on the GPU, in
  the SGLang environment (a child process; SKIP without one or off CUDA), chi-square against the target's
  exact law (`sglang_sampling`): sgl-kernel's CUDA verify kernel itself;
- timing: 24 tiny generations of 32 tokens, 7 layer-shape rows of 24 calls, 6 experts rows of 3 paths x 23
  calls.
No stage starts after BUDGET_S seconds (8 minutes): one due later is recorded as not run (a check: SKIP with
the reason), so the run ends within 10 minutes on any machine where no single stage takes two; `seconds` in
the JSON says what each stage took.
"""
from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from acceptmoe.commands import command, parser

from .layer import QWEN3_30B_LAYERS
from .table import detail, table

BUDGET_S = 480      # no stage starts after 8 minutes


class Stages:
    """Runs gpu-check's stages in order while the budget lasts, recording each one's seconds; a stage due after
    the budget is spent does not run (a check is recorded SKIP with the reason, a timing stage is listed)."""

    def __init__(self, results: dict, budget_s: float):
        self.results, self.budget_s, self.t0 = results, budget_s, time.perf_counter()
        results["seconds"], results["not_run"] = {}, []

    def due(self, name: str) -> bool:
        spent = time.perf_counter() - self.t0
        if spent > self.budget_s:
            self.results["not_run"].append(name)
            return False
        return True

    def run(self, name: str, fn):
        t = time.perf_counter()
        out = fn()
        self.results["seconds"][name] = round(time.perf_counter() - t, 2)
        return out

    def check(self, name: str, fn) -> None:
        spent = time.perf_counter() - self.t0
        check = self.run(name, fn) if self.due(name) else {
            "check": name, "verdict": "SKIP", "reason": f"not run: {spent:.0f} s spent, budget {self.budget_s:.0f} s"}
        self.results["checks"].append(check)
        print(f"{check['check']:<16} {check['verdict']:<5} {detail(check)}", flush=True)


def run_all(device, model_dir: Path, out: Path, prompts: int = 4, tokens: int = 32,
            layer_shape: dict = QWEN3_30B_LAYERS, kernel_shape: tuple[int, int, int] = (64, 128, 8),
            replay_shape: str = "qwen3-30b-a3b", budget_s: float = BUDGET_S) -> dict:
    """Every check and the timing table on `device`; writes gpu_check.json and gpu_check.md under out."""
    from transformers import AutoTokenizer

    from acceptmoe.engine import load_engine
    from acceptmoe.engine.store import FELL_BACK
    from acceptmoe.tools.bench.engine_speed import tiny_prompts
    from acceptmoe.tools.gpu_experts import check_experts, time_experts

    from .checks import check_lossless, check_pinned, check_replay
    from .graphs import check_graphs, check_layer_graphs
    from .kernel import check_kernel, check_kernel_torch
    from .parity import check_parity
    from .sglang_sampling import check_sglang_sampling
    from .timing import time_layer_shape, time_tiny
    device = torch.device(device)
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                     "torch": torch.__version__, "checks": [], "timing": {}}
    stages = Stages(results, budget_s)
    stages.check("kernel", lambda: check_kernel_torch(device, *kernel_shape))
    stages.check("kernel-reference", lambda: check_kernel(device, *kernel_shape))
    stages.check("experts", lambda: check_experts(device))
    with tempfile.TemporaryDirectory() as tmp:
        stages.check("parity", lambda: check_parity(device, Path(tmp)))
    stages.check("graphs", lambda: check_graphs(device, model_dir))
    stages.check("layer-graphs", lambda: check_layer_graphs(device, layer_shape))
    stages.check("sglang-sampling", lambda: check_sglang_sampling(model_dir, device) if device.type == "cuda" else
                 {"check": "sglang-sampling", "verdict": "SKIP",
                  "reason": "checks sgl-kernel's CUDA sampling kernel (on a CPU the same measurement runs through "
                            "its torch stand-in: tests/sglang/live/test_sampling.py)"})
    with contextlib.ExitStack() as open_engines:                # every engine closed, however a stage ends
        def load(**kw):
            engine = load_engine(model_dir, device=device, **kw)
            open_engines.callback(engine.close)
            return engine
        engines = {"resident": load()}
        E = engines["resident"].model.config.moe.num_experts
        engines["offloaded"] = load(store="offloaded", slots=max(1, E // 4))
        ids = tiny_prompts(AutoTokenizer.from_pretrained(model_dir / "target"), prompts)
        engines["offloaded"].model.store.reset_counters()
        stages.check("lossless", lambda: check_lossless(engines, ids, tokens))
        stages.check("pinned", lambda: check_pinned(engines["offloaded"]))
        replay: list = []
        with tempfile.TemporaryDirectory() as tmp:
            def replayed() -> dict:
                check, recs = check_replay(engines["offloaded"], ids, tokens, device, Path(tmp), replay_shape)
                replay.extend(recs)
                return check
            stages.check("replay", replayed)
        results["replay"] = replay
        if stages.due("tiny world"):
            def tiny() -> list[dict]:
                rows = time_tiny(engines["resident"], ids, tokens)
                if engines["resident"].steps.mode != "eager":
                    rows += time_tiny(load(steps="eager"), ids, tokens)
                return rows
            results["timing"]["tiny world"] = stages.run("tiny world", tiny)
    shape_name = "random MoE, Qwen3-30B-A3B layer shape x4"
    if stages.due(shape_name):
        results["timing"][shape_name] = stages.run(shape_name, lambda: time_layer_shape(device, layer_shape))
    paper_shapes = device.type == "cuda" and stages.due("experts timing")                # paper shapes: CUDA only
    results["experts_timing"] = stages.run("experts timing", lambda: time_experts(device)) if paper_shapes else []
    results["grouped_mm_fell_back"] = {f"{d}/{str(t)[6:]}": n for (d, t), n in FELL_BACK.items()}   # calls
    (out / "gpu_check.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "gpu_check.md").write_text(table(results) + "\n")
    return results


@command("gpu-check", "check and time the engine and kernel on one CUDA GPU (at most 10 minutes; JSON + table)")
def main(argv: list[str] | None = None) -> int:
    p = parser("gpu-check")
    p.add_argument("--model", default="models/tiny", help="folder with target/ and draft/ (the tiny world)")
    p.add_argument("--out", default="results/gpu-check", help="folder for gpu_check.json and gpu_check.md")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: gpu-check needs a CUDA GPU and this machine has none (torch.cuda.is_available() is False); "
              "run it on a machine with one and the CUDA build of torch", file=sys.stderr, flush=True)
        return 2
    t0 = time.perf_counter()
    results = run_all(torch.device("cuda"), Path(a.model), Path(a.out))
    print("\n" + table(results))
    print(f"\n{time.perf_counter() - t0:.0f} s; wrote {Path(a.out) / 'gpu_check.json'} and gpu_check.md")
    return 1 if any(c["verdict"] == "FAIL" for c in results["checks"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
