"""`./reproduce.sh plan`: before a long run, what each model of a preset needs for one experiment on each of the
paper's GPUs, and about how long the run takes, from config files alone (runs on a CPU, reads no weights).

    ./reproduce.sh plan --preset paper --experiment fig4 [--json] [--limit N] [--budgets-from TABLE1_RUN]

One row per (model, GPU): device GB (the largest of the experiment's phases: expert store, other weights,
draft, KV cache), pinned host GB, expert GB (every expert's stored bytes), host peak GB while loading (all from
`costs.fit`, which sizes by `engine.memory`, the rules the stores allocate by), whether the device bytes plus
the runtime reserve fit the GPU's memory, generations and tokens (counted as the runners count them:
calibration, B0's prompts when budgets are not read from a Table 1 run, warm-ups, repetitions, methods,
variants), and estimated hours on the native engine and on SGLang. `--json` prints the rows as a JSON list.

Cost model (`seconds`, one generation of N tokens; the constants are printed under the table):
- A target pass reads the non-expert weights and, per MoE layer, the U experts it routes to, at the GPU's
  published device bandwidth, plus a fixed host overhead per pass (`GRAPH_PASS_S` for the resident store's
  captured passes, `EAGER_PASS_S` for the offloaded store's eager ones and every pass a prefill makes).
  Vanilla AR: N passes with U = k. Speculative methods: N / TAU verification passes over the tree's
  T = num_draft_tokens + 1 tokens, each after `num_steps` draft levels (the draft's weights read once per
  level); natural routing (Standard SD) routes to U = E(1 - (1 - k/E)^T) distinct experts (independent
  draws), restricted sets to their budget, or to `SET_SIZE` where it is B0 or self-sized.
- The prefill of `costs.fit.PROMPT_TOKENS` prompt tokens reads every expert once.
- Offloaded store (X slots): a pass misses U(1 - X/E) experts per layer (a pool holding a uniform X of E:
  pessimistic, real routing repeats itself), each copied at the GPU link's typical pinned host-to-device rate
  (`DeviceBound.h2d_typical_gbps`), plus `HOST_READ_S` per layer (the pass's one host read).
- Graded generations run `MEAN_GRADED_TOKENS` tokens (at most the model's cap) and add `GRADE_S` each (an upper
  bound: on a GPU graders run beside generation); timed ones exactly `generation.timed_tokens`.
- SGLang: graded phases that go through `generate_many` (Table 1, the sweep, the study, B0) run
  `generation.batch` requests in flight: a step reads the union of their experts (E(1 - (1 - u/E)^b) for
  b requests of u experts each) once for all of them; phases that generate one prompt at a time (calibration,
  the timed phases) run as on the native engine with CUDA graphs; offloaded phases run on the native engine
  only (SGLang has no X-slot cache), so they keep the native estimate; one GPU (serving.dp = 1).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass

import torch

from acceptmoe.commands import command, parser
from acceptmoe.costs.fit import GB, PROMPT_TOKENS, RUNTIME_RESERVE, Need, model_need, required_config
from acceptmoe.costs.shapes import GPUS, DeviceBound
from acceptmoe.engine.config import DTYPES, ModelConfig
from acceptmoe.engine.memory import draft_bytes, expert_bytes, mxfp4_in_config, other_params
from acceptmoe.evals.tasks import get_task
from acceptmoe.experiments.spine import calibration
from acceptmoe.experiments.spine.config import load_experiment
from acceptmoe.experiments.spine.options import positive_int
from acceptmoe.experiments.spine.render import markdown
from acceptmoe.experiments.study.config import CalibrationStudyConfig
from acceptmoe.experiments.study.runner import eval_variants
from acceptmoe.experiments.table1.config import Table1Config
from acceptmoe.experiments.throughput.commands import COMMAND_PHASES
from acceptmoe.experiments.throughput.config import load_throughput_config, needs_budgets
from acceptmoe.experiments.throughput.runner import repetitions
from acceptmoe.methods import B0_METHOD, CALIBRATION, Variant

EXPERIMENTS = ("table1", "fig3", "fig4", "table2", "sweep", "fig5", "calibration-study")
TAU = 4.39                 # output tokens per speculative step: the paper's, Standard SD and AcceptMoE alike
SET_SIZE = 28.5            # experts per layer of a restricted set at B0 or self-sized: the paper's B0 range 23-34
MEAN_GRADED_TOKENS = 512   # a graded reply's length (stops at EOS), at most the model's cap
GRADE_S = 1.0              # grading seconds per graded reply
GRAPH_PASS_S = 0.002       # host seconds per captured pass (resident store, and SGLang)
EAGER_PASS_S = 0.010       # host seconds per eager pass (offloaded store, prefill)
HOST_READ_S = 30e-6        # the offloaded store's one host read per layer and pass
B0_RANGE = (23, 34)        # the paper's B0 range (the study's two B0s stand for it)
GiB = 1 << 30


@dataclass(frozen=True)
class Work:
    """Generations of one variant in one phase of an experiment, for one model."""
    phase: str
    variant: Variant
    store: str                 # resident | offloaded
    generations: int
    tokens: int                # per generation
    graded: bool
    batched: bool              # handed to the engine `generation.batch` at a time (generate_many)
    slots: int | None = None   # X of an offloaded store


# ----- the work an experiment does, per model -----
def eval_count(world, task: str, limit: int | None) -> int:
    return examples(task, world.eval_split, limit)


@functools.cache
def examples(task: str, split: str, limit: int | None) -> int:
    return len(get_task(task).load(split, limit))


def graded_tokens(world, model) -> int:
    return min(MEAN_GRADED_TOKENS, world.max_new_tokens(model))


def calibration_work(world, model) -> list[Work]:
    return [Work("calibration", Variant(CALIBRATION), "resident", len(calibration.calibration_examples(world, s)),
                 graded_tokens(world, model), False, False) for s in calibration.sources(world)]


def budgets_work(world, model, limit: int | None) -> list[Work]:
    """`spine.budgets.compute_budgets`: calibration, then B0's method on the B0 rule's prompts per task."""
    n = min(x for x in (limit, max(world.b0.prompts, world.b0.fallback_prompts)) if x is not None)
    return calibration_work(world, model) + [
        Work("b0", Variant(B0_METHOD), "resident", eval_count(world, t, n), graded_tokens(world, model), True, True)
        for t in world.tasks]


def table1_work(preset, overrides: dict) -> tuple[object, dict]:
    cfg = load_experiment(Table1Config, preset, overrides)
    w = cfg.world
    return w, {m.name: calibration_work(w, m) + [
        Work("table1", Variant(meth), "resident", eval_count(w, t, cfg.limit), graded_tokens(w, m), True, True)
        for t in w.tasks for meth in cfg.methods] for m in w.models}


def throughput_work(preset, experiment: str, overrides: dict) -> tuple[object, dict]:
    cfg = load_throughput_config(preset, COMMAND_PHASES[experiment], overrides)
    w, out = cfg.world, {}
    for m in w.models:
        work = budgets_work(w, m, cfg.limit) if needs_budgets(cfg) and not cfg.budgets_from else []
        for phase in cfg.phases:
            if phase == "sweep":
                work += [Work(phase, v, "resident", eval_count(w, t, cfg.prompts(phase)), graded_tokens(w, m), True,
                              True) for t in w.tasks for v in cfg.variants(phase)]
                continue
            store, slots = ("offloaded", cfg.offload.slots) if phase.startswith("offload") else ("resident", None)
            work += [Work(phase, v, store, repetitions(cfg, phase) * (cfg.prompts(phase) + 1),
                          w.generation.timed_tokens, phase == "offload-counters", False, slots)
                     for t in w.tasks for v in cfg.variants(phase)]
        out[m.name] = work
    return w, out


def study_work(preset, overrides: dict) -> tuple[object, dict]:
    """The study's B0s from evaluation and training traces are taken to differ (one more variant: an upper
    bound; the paper's B0 range stands for them)."""
    cfg = load_experiment(CalibrationStudyConfig, preset, overrides)
    w, out = cfg.world, {}
    for m in w.models:
        work = budgets_work(w, m, cfg.limit) if not cfg.budgets_from else []
        work += [Work("onpolicy", Variant(B0_METHOD), "resident", cfg.train_prompts(), graded_tokens(w, m), False,
                      False) for _ in calibration.sources(w)]
        work += [Work("study", v, "resident", eval_count(w, t, cfg.eval_prompts()), graded_tokens(w, m), True, True)
                 for t in w.tasks for v in eval_variants(cfg, *B0_RANGE)]
        out[m.name] = work
    return w, out


def experiment_work(experiment: str, preset, overrides: dict) -> tuple[object, dict[str, list[Work]]]:
    """(world, {model name: its work}) of `experiment` as its runner would do it."""
    if experiment == "table1":
        return table1_work(preset, overrides)
    if experiment == "calibration-study":
        return study_work(preset, overrides)
    return throughput_work(preset, experiment, overrides)


# ----- the cost model -----
@dataclass(frozen=True)
class Target:
    """What the cost model reads of one model: its config, one expert's bytes as a GPU keeps it (the stored
    form), the other weights' bytes, the draft's bytes."""
    cfg: ModelConfig
    expert: int
    other: int
    draft: int

    @classmethod
    def of(cls, entry, world, target: dict, draft: dict) -> Target:
        cfg = ModelConfig.from_dict(target)
        dtype = DTYPES.get(world.dtype, cfg.dtype)
        size = torch.empty((), dtype=dtype).element_size()
        return cls(cfg, expert_bytes(cfg, mxfp4_in_config(target), dtype), other_params(cfg) * size,
                   draft_bytes(draft, dtype) if draft else 0)


def union(E: int, u: float, n: float) -> float:
    """Distinct experts among n independent choices of u of E experts each."""
    return E * (1 - (1 - u / E) ** n)


def seconds(w: Work, t: Target, world, gpu: DeviceBound, batch: int = 1) -> float:
    """One generation of `w` on `gpu`, `batch` requests sharing every step (the module docstring's model)."""
    cfg, spec = t.cfg, w.variant.spec
    E, L, X = cfg.num_experts, len(cfg.moe_layer_ids), w.slots
    bw, h2d = gpu.memory_gbps * 1e9, (gpu.h2d_typical_gbps or gpu.h2d_gbps) * 1e9
    u = (w.variant.budget or SET_SIZE) if spec.restricts else cfg.top_k
    draws = batch * (world.tree.num_draft_tokens + 1 if spec.speculates and not spec.restricts else 1)
    U = union(E, u, draws)                                               # experts a step reads per layer
    overhead = EAGER_PASS_S if w.store == "offloaded" else GRAPH_PASS_S
    step = (t.other + L * U * t.expert) / bw + overhead
    if spec.speculates:
        step += world.tree.num_steps * (t.draft / bw + overhead)
    prefill = (t.other + L * E * t.expert) / bw + EAGER_PASS_S
    if w.store == "offloaded":
        step += L * (U * (1 - X / E) * t.expert / h2d + HOST_READ_S)
        prefill += L * (E - X) * t.expert / h2d
    steps = math.ceil(w.tokens / (TAU if spec.speculates else 1))
    return prefill + steps * step / batch + (GRADE_S if w.graded else 0.0)


def hours(work: list[Work], t: Target, world, gpu: DeviceBound, engine: str) -> float:
    """Native: every generation alone. SGLang: batched phases `generation.batch` at a time, offloaded phases
    on the native engine."""
    total = 0.0
    for w in work:
        batch = world.generation.batch if engine == "sglang" and w.batched and w.store == "resident" else 1
        total += w.generations * seconds(w, t, world, gpu, batch)
    return total / 3600


ASSUMPTIONS = (
    f"passes read weights at the GPU's published device bandwidth; host overhead {GRAPH_PASS_S * 1e3:g} ms per "
    f"captured pass, {EAGER_PASS_S * 1e3:g} ms per eager pass (offloaded store, prefill)",
    f"speculative steps: {TAU} output tokens each (the paper's tau), the tree's draft levels read the draft once "
    f"each; Standard SD routes to E(1-(1-k/E)^T) experts per layer, restricted sets to their budget or "
    f"{SET_SIZE} (the paper's B0 range 23-34)",
    f"prefill: {PROMPT_TOKENS} prompt tokens reading every expert once",
    f"offloaded: U(1-X/E) misses per layer and pass (uniform reuse: pessimistic) at the link's typical pinned "
    f"host-to-device rate, plus {HOST_READ_S * 1e6:g} us per layer for the pass's one host read",
    f"graded replies {MEAN_GRADED_TOKENS} tokens (at most the model's cap) plus {GRADE_S:g} s grading each "
    f"(an upper bound: graders run beside generation); timed ones exactly generation.timed_tokens",
    "SGLang: Table 1, the sweep, the study and B0 run generation.batch requests in flight (one step reads their "
    "experts' union once); calibration and timed phases run one at a time; offloaded phases run on the native "
    "engine only; one GPU (serving.dp = 1)",
    f"device GB: expert store, other weights, draft (with its own embedding), KV cache for {PROMPT_TOKENS} prompt "
    f"tokens + the generation cap + the draft tokens; fits: device GB + {RUNTIME_RESERVE / GB:g} GB runtime "
    f"reserve within the GPU's memory",
    "host peak: the pinned arena (offloaded) plus one MoE layer being read; budgets (p_hat, B0) computed in the "
    "run unless --budgets-from names a Table 1 run",
)


# ----- rows and the command -----
def plan_rows(experiment: str, preset, overrides: dict) -> list[dict]:
    """One row per (model, GPU) for `experiment` (see the module docstring for the keys)."""
    world, work = experiment_work(experiment, preset, overrides)
    gpu_world = dataclasses.replace(world, device="cuda")
    rows = []
    for entry in world.models:
        items = work[entry.name]
        target = required_config(entry.target, "target")
        draft = required_config(entry.draft, "draft") if entry.draft is not None else {}
        needs = {store: model_need(entry, gpu_world, store, slots, target, draft)
                 for store, slots in dict.fromkeys((w.store, w.slots) for w in items)}
        need = Need(*(max(getattr(n, f) for n in needs.values()) for f in ("device", "pinned", "host_peak", "experts")))
        t = Target.of(entry, world, target, draft)
        for gpu in GPUS:
            rows.append({"model": entry.name, "experiment": experiment, "gpu": gpu.name,
                         "gpu_memory_gb": round(gpu.memory_gib * GiB / GB, 1),
                         "device_gb": round(need.device / GB, 2), "pinned_host_gb": round(need.pinned / GB, 2),
                         "expert_gb": round(need.experts / GB, 2), "host_peak_gb": round(need.host_peak / GB, 2),
                         "fits": need.device + RUNTIME_RESERVE <= gpu.memory_gib * GiB,
                         "device_gb_by_store": {k: round(n.device / GB, 2) for k, n in needs.items()},
                         "generations": sum(w.generations for w in items),
                         "tokens": sum(w.generations * w.tokens for w in items),
                         "est_hours_native": round(hours(items, t, world, gpu, "native"), 2),
                         "est_hours_sglang": (round(hours(items, t, world, gpu, "sglang"), 2)
                                              if "resident" in needs else None)})
    return rows


def render(rows: list[dict]) -> str:
    header = ["model", "GPU", "fits", "device GB", "pinned host GB", "expert GB", "host peak GB", "generations",
              "tokens", "native h", "SGLang h"]
    body = [[r["model"], f"{r['gpu']} ({r['gpu_memory_gb']:g} GB)", "yes" if r["fits"] else "NO",
             f"{r['device_gb']:.1f}", f"{r['pinned_host_gb']:.1f}", f"{r['expert_gb']:.1f}", f"{r['host_peak_gb']:.1f}",
             f"{r['generations']:,}", f"{r['tokens']:,}", f"{r['est_hours_native']:g}",
             "-" if r["est_hours_sglang"] is None else f"{r['est_hours_sglang']:g}"] for r in rows]
    split = {r["model"]: r["device_gb_by_store"] for r in rows if len(r["device_gb_by_store"]) > 1}
    by_store = "".join(f"{m}: device GB by store: {', '.join(f'{k} {v:.1f}' for k, v in d.items())}\n"
                       for m, d in split.items())
    notes = "\n".join(f"- {a}" for a in ASSUMPTIONS)
    title = f"plan: {rows[0]['experiment']}, one row per model and GPU" if rows else None
    return f"{markdown(header, body, title=title)}\n{by_store}\nAssumptions:\n{notes}\n"


@command("plan", "before a long run: device, pinned and host memory, generations, tokens and hours per model and GPU")
def main(argv: list[str] | None = None) -> int:
    p = parser("plan")
    p.add_argument("--preset", default="tiny", help="configs/presets/<name>.yaml or a YAML path (default: tiny)")
    p.add_argument("--experiment", required=True, choices=EXPERIMENTS, help="the experiment to plan")
    p.add_argument("--limit", type=positive_int, default=None, help="evaluation prompts per task, as the run's --limit")
    p.add_argument("--budgets-from", default=None, metavar="TABLE1_RUN",
                   help="the run will read p_hat and B0 from this Table 1 run (not read here)")
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    args = p.parse_args(argv)
    overrides = {k: v for k, v in (("limit", args.limit), ("budgets_from", args.budgets_from)) if v is not None}
    if args.experiment == "table1":
        overrides.pop("budgets_from", None)
    rows = plan_rows(args.experiment, args.preset, overrides)
    print(json.dumps(rows, indent=1) if args.json else render(rows))
    return 0
