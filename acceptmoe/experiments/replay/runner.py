"""The replay's runner: each recorded pass's expert work re-executed at a model's expert shapes through the
engine's own `ExpertStore` (`make_store`, `store.run`: the same grouped matmuls, pool and counters as a
generation), resident and with an X-slot pool, every variant in one process, order rotated, repeated.

Rules (each stated in the run's `replay.json` and its report):
- Layers: replayed layer j (of n, default the recording's L MoE layers) replays recorded MoE layer
  floor(j * L / n); the target has L_t MoE layers, so per-pass times and bytes are the replayed layers' sums
  times L_t / n (each replayed layer stands for L_t / n target layers).
- Weights: random, in the shape's storage format (`shapes.ExpertShape.stored_weights`); `weight_sets`
  distinct sets, replayed layer j uses set j mod weight_sets (consecutive layers never share weights; the
  sets keep memory within `memory_gib`).
- Generations: per task the first `generations` recorded prompts (`source.select`), one generation per
  prompt and variant: the prompt is the unit of the report's intervals (`intervals`).
- Order: prompt by prompt, each prompt's variants back to back with their order rotated by one per prompt
  and round, so host load that drifts over a long run reaches every variant of a prompt alike (`rounds`
  repeat the whole schedule; a pass's time is its median over rounds).
- Pool: when the recording was offloaded with the same X, every generation starts from the pool the run had
  at its start (`store.restore_pool`), so loads, hits and misses equal the run's counters exactly (checked per
  generation and layer). Otherwise each variant's pool starts empty in each round and carries over between
  its generations (`Pools`; a resumed round starts them empty again).
- Dtype: the shape's on CUDA; on CPU fp32, because bf16 matrix multiplication on a CPU without bf16 units is
  emulated and compute-bound (time would not follow bytes); bytes for the GPU bounds stay in the shape's dtype.
- Inputs: one random hidden state [T, H] per pass length T (expert time does not depend on its values).
- Stores: every variant with the X-slot pool; with the resident store only variants whose routes did not
  prune (pruning acts against the recorded pool: those routes are not what a resident engine runs; resident
  AcceptMoE's routing is the recording's AcceptMoE with pruning off).

One `samples.jsonl` row per (store, round, prompt, variant), its one generation in `generations` (runs made
before prompts were interleaved hold a variant's whole sequence in one row; the report reads both): per pass
the kind, tokens, output tokens, seconds, experts used, loads and hits (summed over replayed layers), the
engine's recorded expert seconds, and whether the counters matched the run's; where its reply ended by itself
(`natural_tokens`, when the recording run's row says). An interrupted replay resumes at the first unfinished
row.
"""
from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from acceptmoe.costs.shapes import ExpertShape, get_shape, parse_dtype
from acceptmoe.engine.routes import Routes
from acceptmoe.engine.store import PoolState, make_store
from acceptmoe.errors import UserError

from ..spine.engines import set_threads
from ..spine.progress import RunProgress
from ..spine.runs import Run, SampleLog, unit_key, write_json
from . import bandwidth
from .config import ReplayConfig
from .source import GenKey, Recording, find_recording, select

CPU_DTYPE_REASON = ("CPU: fp32, because bf16 matrix multiplication on a CPU without bf16 units is emulated and "
                    "compute-bound (time would not follow bytes); GPU bounds use the shape's bf16 bytes")


@dataclass(frozen=True)
class ReplayPlan:
    """Everything a replay run decided before it starts (saved as replay.json)."""
    shape: ExpertShape
    dtype: torch.dtype
    dtype_reason: str
    device: torch.device
    recording: Recording
    keys: tuple[GenKey, ...]
    layers: int                       # n replayed layers
    mapping: tuple[int, ...]          # replayed layer j -> recorded MoE layer position
    slots: int | None                 # X of the offloaded replay (None: resident only)
    exact_pool: bool                  # the recorded pool is restored per generation
    steps: int | None                 # step passes per generation (None: all)

    routes: dict                      # variant -> {"method", "prune"} (`Recording.routes`)
    wanted: int | None = None         # prompts per task asked for (`generations`; None: every recorded one)

    @property
    def stores(self) -> tuple[str, ...]:
        return ("resident",) + ((f"offloaded-{self.slots}",) if self.slots else ())

    def variants(self, store: str) -> tuple[str, ...]:
        """The variants replayed with a store: all offloaded; resident, those whose routes did not prune."""
        rec = self.recording.variants
        return rec if store != "resident" else tuple(v for v in rec if not self.routes[v]["prune"])

    @property
    def same_shape(self) -> bool:
        """The replay runs the recorded model's own experts (shape, dtype, device, every layer once): its times
        are comparable with the engine's recorded expert seconds."""
        m, s = self.recording.meta, self.shape
        return ((m.get("hidden_size"), m.get("intermediate_size"), m.get("activation"), len(m["layers"]))
                == (s.hidden_size, s.intermediate_size, s.activation, s.num_layers)
                and m.get("dtype") == str(self.dtype) and m.get("device") == str(self.device)
                and self.layers == len(m["layers"]))

    @property
    def scale(self) -> float:
        return self.shape.num_layers / self.layers

    def describe(self) -> dict:
        rec, L = self.recording, len(self.recording.meta["layers"])
        return {"shape": self.shape.describe(), "dtype": str(self.dtype).removeprefix("torch."),
                "dtype_reason": self.dtype_reason, "device": str(self.device),
                "recording": {"phase": rec.phase, "model": rec.model, "variants": list(rec.variants),
                              "store": rec.meta["store"], "slots": rec.meta.get("slots"), "layers": rec.meta["layers"],
                              "num_experts": rec.meta["num_experts"], "top_k": rec.meta["top_k"],
                              "hidden_size": rec.meta.get("hidden_size"),
                              "intermediate_size": rec.meta.get("intermediate_size"),
                              "dtype": rec.meta.get("dtype"), "device": rec.meta.get("device")},
                "generations": [k.name for k in self.keys], "generations_per_task": rec.per_task(),
                "wanted_per_task": self.wanted, "layers": self.layers, "mapping": list(self.mapping),
                "steps_per_generation": self.steps, "scale": self.scale, "slots": self.slots, "exact_pool": self.exact_pool, "stores": list(self.stores),
                "local_bytes": [self.shape.dense_bytes(self.dtype), self.shape.stored_bytes(self.dtype)],
                "routes": self.routes, "store_variants": {s: list(self.variants(s)) for s in self.stores},
                "same_shape": self.same_shape,
                "rules": {"layers": f"replayed layer j of {self.layers} replays recorded MoE layer floor(j * {L} / "
                                    f"{self.layers}); per-pass sums x {self.shape.num_layers}/{self.layers} = the "
                                    f"target's {self.shape.num_layers} MoE layers",
                          "pool": ("the run's pool restored at every generation's start (counters exact)"
                                   if self.exact_pool else "empty at the start of each variant's generations in "
                                                           "each round, carried over between them"),
                          "order": ORDER}}


def plan_replay(cfg: ReplayConfig) -> ReplayPlan:
    shape = get_shape(cfg.shape)
    rec = find_recording(_source(cfg), cfg.phase, cfg.model)
    E, k = rec.meta["num_experts"], rec.meta["top_k"]
    if (shape.num_experts, shape.top_k) != (E, k):
        raise UserError(f"shape {shape.name} routes top-{shape.top_k} of {shape.num_experts} experts; the recording "
                        f"routes top-{k} of {E}: replay it at a shape with the same experts and top-k "
                        f"(tiny, qwen3-30b-a3b for the tiny world), or record a model that routes like {shape.name}")
    device = torch.device(cfg.run_device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError("device cuda: this machine has no CUDA GPU; use --device cpu")
    if cfg.dtype != "auto":
        dtype, why = parse_dtype(cfg.dtype), "as configured"
    elif device.type == "cuda" or shape.dtype == torch.float32:
        dtype, why = shape.dtype, "the shape's dtype"
    else:
        dtype, why = torch.float32, CPU_DTYPE_REASON
    L = len(rec.meta["layers"])
    n = cfg.layers or L
    slots = cfg.offload or (rec.meta.get("slots") if rec.meta["store"] == "offloaded" else None)
    if slots is not None and slots > E:
        raise UserError(f"offload {slots}: X is at most the {E} experts per layer")
    exact = rec.meta["store"] == "offloaded" and slots == rec.meta.get("slots")
    rec = select(rec, cfg.variants, cfg.generations)
    plan = ReplayPlan(shape, dtype, why, device, rec, rec.keys, n, tuple(j * L // n for j in range(n)), slots, exact,
                      cfg.passes_per_generation, rec.routes(), cfg.generations)
    check_memory(plan, cfg)
    return plan


def _source(cfg: ReplayConfig) -> Path:
    path = Path(cfg.source)
    if not path.is_dir():
        raise UserError(f"--run {cfg.source}: not a folder; give a run folder recorded with --record-routes")
    return path


def check_memory(plan: ReplayPlan, cfg: ReplayConfig) -> None:
    """Weights (the sets, plus their dense copies for a packed format) and the offloaded store (its host arena, one
    copy of the sets, and its pools) must fit."""
    s, E, d = plan.shape, plan.shape.num_experts, plan.dtype
    sets = min(cfg.weight_sets, plan.layers)
    need = sets * E * (s.stored_bytes(d) + (s.dense_bytes(d) if s.format == "mxfp4" else 0))
    if plan.slots:
        need += sets * E * s.stored_bytes(d)
        need += plan.layers * (plan.slots + 1) * (s.dense_bytes(d) + (s.stored_bytes(d) if s.format == "mxfp4" else 0))
    if need > cfg.memory_gib * (1 << 30):
        raise UserError(f"replay needs about {need / (1 << 30):.1f} GiB ({sets} weight sets of {E} experts, "
                        f"{plan.layers} layers x {plan.slots or 0} slots at {s.name}, {str(d).removeprefix('torch.')}) "
                        f"> memory_gib {cfg.memory_gib}: lower --layers, --weight-sets or --offload, or raise "
                        f"--memory-gib")


# ----- stores -----
def weight_sets(plan: ReplayPlan, cfg: ReplayConfig) -> list[dict[str, torch.Tensor]]:
    """The random weight sets in the stored format, in host memory (the offloaded store copies them into its
    page-locked arena; the resident one to the device)."""
    return [plan.shape.stored_weights(plan.dtype, cfg.seed + i) for i in range(min(cfg.weight_sets, plan.layers))]


def build_store(plan: ReplayPlan, kind: str, sets: list[dict]):
    """The engine's store over n replayed layers sharing the weight sets (no copy per layer)."""
    math = plan.shape.math(plan.dtype)
    if kind == "resident":
        dense = [{n: t.to(plan.device) for n, t in math.dense(w).items()} for w in sets]
        layers = {j: dict(dense[j % len(sets)]) for j in range(plan.layers)}
        return make_store("resident", math, layers, plan.shape.num_experts, plan.device)
    layers = {j: dict(sets[j % len(sets)]) for j in range(plan.layers)}
    return make_store("offloaded", math, layers, plan.shape.num_experts, plan.device, plan.slots)


def mapped_pool(plan: ReplayPlan, routes: Routes) -> PoolState:
    pool = routes.pool()
    idx = torch.tensor(plan.mapping)
    return PoolState(pool.expert_in[idx], pool.last_use[idx], pool.clock)


# ----- one generation -----
class Inputs:
    """One random hidden state [T, H] per pass length, made once."""

    def __init__(self, plan: ReplayPlan, seed: int):
        self.plan, self.gen, self.held = plan, torch.Generator().manual_seed(seed), {}

    def __call__(self, T: int) -> torch.Tensor:
        if T not in self.held:
            x = torch.randn(T, self.plan.shape.hidden_size, generator=self.gen)
            self.held[T] = x.to(self.plan.dtype).to(self.plan.device)
        return self.held[T]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def replay_generation(plan: ReplayPlan, store, routes: Routes, xs: Inputs) -> dict:
    """The prefill and the first `plan.steps` step passes of one recorded generation, in order: per pass seconds
    and counts (summed over replayed layers), and whether the counters agree with the run's (`counters_match`)."""
    dev, mapping = plan.device, plan.mapping
    exact = plan.exact_pool and store.kind == "offloaded"
    if exact:
        store.restore_pool(mapped_pool(plan, routes))
    store.reset_counters()
    out = {"kinds": [], "tokens": [], "output": [], "seconds": [], "used": [], "loads": [], "hits": [],
           "engine_s": []}
    before, pool_agrees, steps = store.tally.clone(), True, 0
    for p in routes.passes():
        if p.kind != "prefill":
            if plan.steps is not None and steps == plan.steps:
                break
            steps += 1
        ids, weights = p.ids.to(dev), p.weights.to(dev)
        x = xs(ids.shape[1])
        if exact:                       # the pool at pass start is the run's: every hit and miss is the run's
            pool_agrees &= all(bool(torch.equal(store.resident(j).cpu(), p.resident[r])) for j, r in enumerate(mapping))
        _sync(dev)
        t0 = time.perf_counter()
        for j, r in enumerate(mapping):
            store.run(j, x, ids[r], weights[r])
        _sync(dev)
        seconds = time.perf_counter() - t0
        after = store.tally.clone()
        hits, misses, loads, _ = (after - before).sum(0).tolist()
        before = after
        for name, v in (("kinds", p.kind), ("tokens", int(ids.shape[1])), ("output", p.output_tokens),
                        ("seconds", seconds), ("used", hits + misses), ("loads", loads), ("hits", hits),
                        ("engine_s", p.expert_s)):
            out[name].append(v)
    whole = len(out["kinds"]) == routes.num_passes
    out["counters_match"] = counters_match(plan, store, routes, whole, pool_agrees if exact else None)
    return out


def counters_match(plan: ReplayPlan, store, routes: Routes, whole: bool, pool_agrees: bool | None) -> bool | None:
    """Replayed counters against the run's. With the run's pool restored: the pool at every pass start equals
    the recorded residency (so every hit and miss is the run's) and, over a whole generation, hits, misses
    and loads per layer equal the run's counters. Resident: over a whole generation, experts used per layer
    equal the run's hits + misses. None where nothing is comparable."""
    recorded = [routes.meta["counters"][str(routes.meta["layers"][r])] for r in plan.mapping]
    mine = store.stats()["layers"]
    if store.kind == "resident":
        return all(mine[j]["hits"] == rec["hits"] + rec["misses"] for j, rec in enumerate(recorded)) if whole else None
    if pool_agrees is None:
        return None
    if not whole:
        return pool_agrees
    return pool_agrees and all((mine[j]["hits"], mine[j]["misses"], mine[j]["loads"]) ==
                               (rec["hits"], rec["misses"], rec["loads"]) for j, rec in enumerate(recorded))


# ----- the run -----
ORDER = ("prompt by prompt: each prompt's variants back to back, their order rotated by one per prompt and "
         "round")


def rotated(items: tuple[str, ...], r: int) -> list[str]:
    r %= len(items)
    return list(items[r:] + items[:r])


def unit_of(store: str, rnd: int, key: GenKey, variant: str) -> str:
    return unit_key(store, rnd, key.name, variant)


def schedule(plan: ReplayPlan, repeats: int) -> list[tuple[str, int, int, GenKey, str, int]]:
    """Every (store, round, prompt position, key, variant, position among the prompt's variants) in run order."""
    return [(s, r, i, key, v, pos) for s in plan.stores for r in range(repeats) for i, key in enumerate(plan.keys)
            for pos, v in enumerate(rotated(plan.variants(s), r + i))]


class Pools:
    """Without the run's pool (`exact_pool` false): each variant's pool carries over between its generations in a
    round, starting empty (kept in memory: a resumed round starts them empty again)."""

    def __init__(self):
        self.held: dict[tuple[int, str], object] = {}

    def before(self, store, rnd: int, variant: str) -> None:
        store.restore_pool(self.held.get((rnd, variant)))

    def after(self, store, rnd: int, variant: str) -> None:
        self.held[(rnd, variant)] = store.pool_state()


def run_replay(cfg: ReplayConfig, run: Run, show_progress: bool = True) -> dict:
    """Every (store, round, prompt, variant) of the plan into `run`, one row each (finished rows are skipped)."""
    set_threads(cfg.world)
    plan = plan_replay(cfg)
    samples = SampleLog(run.path / "samples.jsonl")
    if not (run.path / "bandwidth.json").is_file():
        write_json(run.path / "bandwidth.json", bandwidth.measure(plan.device, plan.dtype))
    write_json(run.path / "replay.json", plan.describe())
    if not (run.path / "engine-ratios.json").is_file():
        write_json(run.path / "engine-ratios.json", engine_ratios(plan))
    every = schedule(plan, cfg.repeats)
    todo = [u for u in every if unit_of(u[0], u[1], u[3], u[4]) not in samples]
    sets = weight_sets(plan, cfg) if todo else []
    counts = {label: (sum(u[0] == label for u in every), sum(u[0] == label for u in todo)) for label in plan.stores}
    bar = RunProgress.start(run.path, {label: (total, total - left) for label, (total, left) in counts.items()},
                            show=show_progress)
    for label in plan.stores:
        units = [u for u in todo if u[0] == label]
        if units:
            replay_store(plan, cfg, label, units, sets, samples, bar)
    return {"generations": len(plan.keys), "stores": list(plan.stores)}


def replay_store(plan: ReplayPlan, cfg: ReplayConfig, label: str, units: list, sets: list, samples: SampleLog,
                 bar: RunProgress) -> None:
    """One store's units in order, after an untimed warm-up generation; each replayed generation is one row."""
    rec = plan.recording
    store = build_store(plan, "resident" if label == "resident" else "offloaded", sets)
    xs, pools = Inputs(plan, cfg.seed), Pools()
    replay_generation(plan, store, rec.load(rec.variants[0], plan.keys[0]), xs)     # untimed warm-up
    carried = store.kind == "offloaded" and not plan.exact_pool
    for _, rnd, _, key, v, pos in units:
        if carried:
            pools.before(store, rnd, v)
        g = replay_generation(plan, store, rec.load(v, key), xs)
        if carried:
            pools.after(store, rnd, v)
        recorded, natural = rec.natural_end(v, key)
        gen = {"task": key.task, "rep": key.rep, "index": key.index, **g,
               **({"natural_tokens": natural} if recorded else {})}
        samples.append(unit_of(label, rnd, key, v), {"store": label, "round": rnd, "variant": v, "position": pos,
                                                     "generations": [gen]})
        bar.tick(label, f"{label} r{rnd} {key.name} {v}")
    del store
    gc.collect()


ENGINE_TABLES = {"resident": "throughput-resident.csv", "offload-timed": "throughput-offload.csv"}


def engine_ratios(plan: ReplayPlan) -> dict:
    """The recorded run's own measured tokens/s ratio to Standard SD per variant (its throughput table, mean
    over the replayed tasks), for the store it ran with: what the replay's ratios stand beside."""
    rec = plan.recording
    table = rec.root.parents[2] / ENGINE_TABLES.get(rec.phase, "")
    if rec.phase not in ENGINE_TABLES or not table.is_file():
        return {}
    import csv
    tasks = {k.task for k in plan.keys}
    rows = [r for r in csv.DictReader(table.open()) if r["model"] == rec.model and r["task"] in tasks]
    store = "resident" if rec.meta["store"] == "resident" else f"offloaded-{rec.meta.get('slots')}"
    out = {}
    for v in rec.variants:
        vals = [float(r["ratio_vs_standard_sd"]) for r in rows if r["variant"] == v and r.get("ratio_vs_standard_sd")]
        if vals:
            out[v] = sum(vals) / len(vals)
    return {"store": store, "table": str(table.relative_to(rec.root.parents[2])), "tasks": sorted(tasks),
            "ratios": out}

