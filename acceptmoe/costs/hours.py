"""How long a run takes on a GPU, from config files alone: the cost model `./reproduce.sh plan` prints under its
table (`ASSUMPTIONS`), over the work an experiment counts as its runner does it (`Work`, one per variant and
phase; each experiment's `work` module counts them).

    t = Target.of(world, target_config, draft_config)       # what the model reads: expert, other, draft bytes
    hours(work, t, world, gpu, "native")                      # gpu: a `costs.shapes.DeviceBound`

Cost model (`seconds`, one generation of N tokens):
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

import math
from dataclasses import dataclass

import torch

from acceptmoe.engine.config import DTYPES, ModelConfig
from acceptmoe.engine.memory import draft_bytes, expert_bytes, mxfp4_in_config, other_params
from acceptmoe.methods import Variant

from .fit import GB, PROMPT_TOKENS, RUNTIME_RESERVE
from .shapes import DeviceBound

TAU = 4.39                 # output tokens per speculative step: the paper's, Standard SD and AcceptMoE alike
SET_SIZE = 28.5            # experts per layer of a restricted set at B0 or self-sized: the paper's B0 range 23-34
MEAN_GRADED_TOKENS = 512   # a graded reply's length (stops at EOS), at most the model's cap
GRADE_S = 1.0              # grading seconds per graded reply
GRAPH_PASS_S = 0.002       # host seconds per captured pass (resident store, and SGLang)
EAGER_PASS_S = 0.010       # host seconds per eager pass (offloaded store, prefill)
HOST_READ_S = 30e-6        # the offloaded store's one host read per layer and pass


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
    timed: bool = False        # a timed phase: its variants interleaved on one engine, never split across devices
    repetitions: int = 1       # a timed phase's repetitions (each a fresh engine), `generations` counts them all


@dataclass(frozen=True)
class Target:
    """What the cost model reads of one model: its config, one expert's bytes as a GPU keeps it (the stored
    form), the other weights' bytes, the draft's bytes."""
    cfg: ModelConfig
    expert: int
    other: int
    draft: int

    @classmethod
    def of(cls, world, target: dict, draft: dict) -> Target:
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
    E, L = cfg.moe.num_experts, len(cfg.moe.layer_ids)
    bw, h2d = gpu.memory_gbps * 1e9, gpu.h2d_typical * 1e9
    u = (w.variant.budget or SET_SIZE) if spec.restricts else cfg.moe.top_k
    draws = batch * (world.tree.num_draft_tokens + 1 if spec.speculates and not spec.restricts else 1)
    U = union(E, u, draws)                                               # experts a step reads per layer
    overhead = EAGER_PASS_S if w.store == "offloaded" else GRAPH_PASS_S
    step = (t.other + L * U * t.expert) / bw + overhead
    if spec.speculates:
        step += world.tree.num_steps * (t.draft / bw + overhead)
    prefill = (t.other + L * E * t.expert) / bw + EAGER_PASS_S
    if w.store == "offloaded":
        X = w.slots
        if X is None:
            raise ValueError(f"{w.phase}: work on an offloaded store names no slots X")
        step += L * (U * (1 - X / E) * t.expert / h2d + HOST_READ_S)
        prefill += L * (E - X) * t.expert / h2d
    steps = math.ceil(w.tokens / (TAU if spec.speculates else 1))
    return prefill + steps * step / batch + (GRADE_S if w.graded else 0.0)


def generation_seconds(w: Work, t: Target, world, gpu: DeviceBound, engine: str) -> float:
    """One generation of `w` on `engine`. Native: every generation alone. SGLang: batched phases
    `generation.batch` at a time, offloaded phases on the native engine."""
    batch = world.generation.batch if engine == "sglang" and w.batched and w.store == "resident" else 1
    return seconds(w, t, world, gpu, batch)


def hours(work: list[Work], t: Target, world, gpu: DeviceBound, engine: str) -> float:
    """Every generation of `work` one after another on one device (`generation_seconds`)."""
    return sum(w.generations * generation_seconds(w, t, world, gpu, engine) for w in work) / 3600


def weight_bytes(t: Target) -> int:
    """Every byte a device loads for the model: each MoE layer's experts, the other weights, the draft."""
    return len(t.cfg.moe.layer_ids) * t.cfg.moe.num_experts * t.expert + t.other + t.draft


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
