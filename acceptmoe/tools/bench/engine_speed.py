"""Benchmark: our engine against transformers on the same target, side by side in one run, plus a profile.

- Vanilla AR (ours) vs transformers' greedy `generate` with its default cache: output tokens/s.
- Standard SD and AcceptMoE (ours, EAGLE-3 tree): output tokens/s and tau. transformers' assisted
  generation needs a causal-LM assistant; an EAGLE-3 head is not one, so vanilla AR is the only method
  transformers can match.
- aten operations dispatched per target step (`AtenCounter`, a TorchDispatchMode): a hardware-independent
  proxy for GPU kernel launches. Per decode step for AR, per verify step including its drafting for SD;
  measured as the difference between two generations of different lengths, so the prefill cancels.
- Where the time goes in the Standard SD and AcceptMoE generations (wall clock per component, from timers
  around the components' functions), and the selection's share: the verifier call and its prepare less the
  natural top-k and gates computed inside the call (`kernels.natural`, what every method's routing computes:
  Standard SD's own natural routing is shown beside it).
- AcceptMoE / Standard SD: the median over repeats of the ratio of the two, measured back to back.

Every generation produces exactly `--tokens` tokens (EOS ignored) and the same prompts are used for every
row; medians over `--repeats` runs. `--tree STEPS TOPK TOKENS` sets the draft tree (default: the tiny
preset's); the verify pass's expert rows grow with the tree's tokens, so on a CPU (time per FLOP) a
smaller tree can trade tau for a cheaper verify step.

    ./reproduce.sh bench-engine [--model models/tiny --tokens 64 --prompts 4 --repeats 3 --threads 1 --tree 5 10 64
                                 --backend auto]
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from acceptmoe.commands import command, parser
from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.methods import B0_METHOD, BASELINE, REFERENCE, Plan, Variant

VERIFIER, PREPARE = "verifier: select + prune + route", "verifier: prepare per step"
NATURAL = "natural routing (kernels.natural)"
# profile components: (label, module, attribute path): the function whose calls are timed (wall clock, the
# outermost call of each component only); components nest inside the target forward
COMPONENTS = (
    ("expert MLPs (ExpertStore.run)", "acceptmoe.engine.store", "ExpertStore.run"),
    (VERIFIER, "acceptmoe.kernels.verifier", "Verifier.__call__"),
    (PREPARE, "acceptmoe.kernels.verifier", "Verifier.prepare"),
    (NATURAL, "acceptmoe.engine.model", "natural"),              # the name each caller holds
    (NATURAL, "acceptmoe.engine.restriction", "natural"),
    (NATURAL, "acceptmoe.kernels.cpu_verifier", "natural_gates"),   # inside the cpu verifier's call
    ("attention core", "acceptmoe.engine.layers", "attend"),
    ("drafting (EAGLE-3 propose/extend)", "acceptmoe.engine.eagle3", "Eagle3Drafter.propose"),
    ("drafting (EAGLE-3 propose/extend)", "acceptmoe.engine.eagle3", "Eagle3Drafter.extend"),
    ("target forward (all of it)", "acceptmoe.engine.model", "MoEModel.forward"),
)

def tiny_prompts(tokenizer, n: int) -> list[list[int]]:
    """Chat-formatted prompts from the tiny test splits (one family after another)."""
    from acceptmoe.evals.generators import FAMILIES, generate
    rows = [generate(f, "test", n)[i] for i in range(n) for f in FAMILIES][:n]
    return [tokenizer.apply_chat_template([{"role": "user", "content": r["question"]}], add_generation_prompt=True,
                                          tokenize=True, return_dict=False) for r in rows]


def time_one(engine, ids, plan: Plan, tokens: int) -> tuple[float, int, float]:
    """(seconds, output tokens, tau) of one generation of exactly `tokens` tokens."""
    t0 = time.perf_counter()
    gen = engine.generate(ids, plan, tokens, GenerationOptions(ignore_eos=True, trace_layers=False))
    return time.perf_counter() - t0, len(gen.tokens), gen.mean_accept_length


def _overall(runs: list[tuple[float, int, float]]) -> tuple[float, float]:
    """`time_one` results -> (output tokens/s over all of them, mean tau)."""
    return sum(n for _, n, _ in runs) / sum(t for t, _, _ in runs), statistics.mean(tau for *_, tau in runs)


def time_ours(engine, prompts, plan: Plan, tokens: int) -> tuple[float, float]:
    """(output tokens/s, tau) over all prompts; each generation exactly `tokens` tokens."""
    return _overall([time_one(engine, ids, plan, tokens) for ids in prompts])


def time_pair(engine, prompts, plans: tuple[Plan, Plan], tokens: int, flip: bool) -> tuple[list, list[float]]:
    """Two methods timed prompt by prompt, back to back (the order alternating from prompt to prompt), so
    that the machine's drift reaches both alike: ([(tokens/s, tau) of each method over all prompts],
    [tokens/s of the second / tokens/s of the first, per prompt])."""
    runs: list[list] = [[], []]
    ratios = []
    for i, ids in enumerate(prompts):
        order = (1, 0) if (i + flip) % 2 else (0, 1)
        one = {m: time_one(engine, ids, plans[m], tokens) for m in order}
        for m in (0, 1):
            runs[m].append(one[m])
        ratios.append((one[1][1] / one[1][0]) / (one[0][1] / one[0][0]))
    return [_overall(r) for r in runs], ratios


def time_transformers(model, prompts, tokens: int) -> float:
    total_t, total_n = 0.0, 0
    for ids in prompts:
        x = torch.tensor([ids])
        t0 = time.perf_counter()
        out = model.generate(x, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
        total_t += time.perf_counter() - t0
        total_n += out.shape[1] - x.shape[1]
    return total_n / total_t


class AtenCounter(TorchDispatchMode):
    """Counts aten operations dispatched while active (every op, views included), by name."""

    def __init__(self):
        super().__init__()
        self.ops: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        self.ops[name] = self.ops.get(name, 0) + 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())


def aten_ops_per_step(run, short: int = 8, long: int = 24) -> float:
    """aten ops per step of `run(tokens) -> steps`: (ops(long) - ops(short)) / (steps(long) - steps(short)),
    after one warm-up run (tables built on first use are not per-step work)."""
    run(short)
    counts = []
    for n in (short, long):
        with AtenCounter() as c:
            steps = run(n)
        counts.append((c.total, steps))
    (o1, s1), (o2, s2) = counts
    return (o2 - o1) / max(s2 - s1, 1)


def ours_ops(engine, ids, plan: Plan) -> float:
    def run(n):
        gen = engine.generate(ids, plan, n, GenerationOptions(ignore_eos=True, trace_layers=False))
        return len(gen.accept_lengths)
    return aten_ops_per_step(run)


def transformers_ops(model, ids) -> float:
    x = torch.tensor([ids])

    def run(n):
        model.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
        return n
    return aten_ops_per_step(run)


def profile_components(fn, store_cls: type) -> tuple[float, dict[str, float], dict[tuple[str, str], float]]:
    """(total seconds, seconds per component, seconds of each component inside another: (outer, inner) ->
    seconds) of one call of fn, each component's functions wrapped in a wall-clock timer for the call
    (perf_counter around the outermost call: a fixed ~1 us per call, where a tracing profiler would slow every
    Python call inside and inflate the Python-heavy parts). store_cls: the engine's store class (its `run`
    overrides ExpertStore's)."""
    import importlib
    totals: dict[str, float] = {label: 0.0 for label, *_ in COMPONENTS}
    inside: dict[tuple[str, str], float] = {}
    depth: dict[str, int] = dict.fromkeys(totals, 0)
    patched = []

    def timed(label, f):
        def wrapper(*args, **kwargs):
            depth[label] += 1
            t0 = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                depth[label] -= 1
                if not depth[label]:
                    dt = time.perf_counter() - t0
                    totals[label] += dt
                    for outer, d in depth.items():
                        if d and outer != label:
                            inside[outer, label] = inside.get((outer, label), 0.0) + dt
        return wrapper

    for label, module, path in COMPONENTS:
        owner = importlib.import_module(module)
        *outer, attr = path.split(".")
        for name in outer:
            owner = getattr(owner, name)
        if owner.__name__ == "ExpertStore":
            owner = store_cls
        patched.append((owner, attr, owner.__dict__.get(attr)))
        setattr(owner, attr, timed(label, getattr(owner, attr)))
    t0 = time.perf_counter()
    try:
        fn()
    finally:
        total = time.perf_counter() - t0
        for owner, attr, original in reversed(patched):
            if original is None:
                delattr(owner, attr)
            else:
                setattr(owner, attr, original)
    return total, totals, inside


@command("bench-engine", "our engine vs transformers on the tiny model: tokens/s, tau, aten ops per step, where the time goes")
def main(argv: list[str] | None = None) -> int:
    p = parser("bench-engine")
    p.add_argument("--model", default="models/tiny", help="folder with target/ and draft/")
    p.add_argument("--commitment", default=None, help="commitment table JSON (default: p_hat = 0.8^d)")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--backend", default="auto", choices=("auto", "torch", "cpu"), help="verifier backend (auto: the compiled cpu backend where it "
                                                      "builds, else torch; torch shows the tensor-code selector)")
    p.add_argument("--tree", type=int, nargs=3, metavar=("STEPS", "TOPK", "TOKENS"), default=None,
                   help="draft tree: levels, top-k per level, tokens verified (root included); "
                        "default: the tiny preset's tree")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from acceptmoe.engine import TreeShape, load_engine
    from acceptmoe.experiments.spine.config import load_world
    from acceptmoe.methods import CommitmentTable
    if a.tree is None:
        tree = load_world("tiny").tree
    else:
        try:
            tree = TreeShape(*a.tree)
        except ValueError as e:
            p.error(f"--tree {' '.join(map(str, a.tree))}: {e}")
    engine = load_engine(a.model, tree=tree, backend=a.backend)   # checks the folders first (clear error if missing)
    target = Path(a.model) / "target"
    tok = AutoTokenizer.from_pretrained(target)
    prompts = tiny_prompts(tok, a.prompts)
    hf = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    steps = tree.num_steps
    commitment = (CommitmentTable.load(a.commitment).p_hat if a.commitment
                  else tuple([1.0] + [0.8 ** d for d in range(1, steps + 1)]))
    hf_name = "transformers generate (greedy)"
    ops = {hf_name: transformers_ops(hf, prompts[0])}
    ar, sd, am = (Variant(m).bind(engine.fit, commitment=commitment) for m in (REFERENCE, BASELINE, B0_METHOD))
    k_ar, k_sd, k_am = (f"ours {v.name}" for v in (ar, sd, am))
    rows = {hf_name: [], k_ar: [], k_sd: [], k_am: []}
    for v in (ar, sd, am):
        ops[f"ours {v.name}"] = ours_ops(engine, prompts[0], v)
    taus: dict[str, float] = {}
    paired: list[float] = []
    for r in range(a.repeats):
        rows["transformers generate (greedy)"].append(time_transformers(hf, prompts, a.tokens))
        tps, taus[k_ar] = time_ours(engine, prompts, ar, a.tokens)
        rows[k_ar].append(tps)
        totals, ratios = time_pair(engine, prompts, (sd, am), a.tokens, flip=bool(r % 2))
        for key, (tps, tau) in zip((k_sd, k_am), totals, strict=True):
            rows[key].append(tps)
            taus[key] = tau
        paired += ratios
    base = statistics.median(rows["transformers generate (greedy)"])
    print(f"{a.prompts} prompts x {a.tokens} tokens, CPU {a.threads} thread(s), median of {a.repeats} runs; "
          f"draft tree: {tree.num_steps} steps, top-{tree.topk}, {tree.num_draft_tokens} tokens verified\n")
    print("| engine | tokens/s | vs transformers | tau | aten ops / target step |\n|---|---:|---:|---:|---:|")
    for name, vals in rows.items():
        med = statistics.median(vals)
        print(f"| {name} | {med:.1f} | {med / base:.2f}x | {taus.get(name, 1.0):.2f} | {ops[name]:.0f} |")
    print("\ntransformers has no EAGLE-3 speculative decoding (assisted generation needs a causal-LM draft), "
          "so vanilla AR is the only method it matches.\naten ops per step: per decode step (AR), per verify "
          "step including its drafting (SD), prefill excluded.")
    med = {name: statistics.median(vals) for name, vals in rows.items()}
    profiles = {v.name: profile_components(lambda: time_ours(engine, prompts, v, a.tokens),  # noqa: B023 (called in this iteration)
                                           type(engine.model.store)) for v in (sd, am)}
    total, parts, inside = profiles[am.name]
    within = inside.get((VERIFIER, NATURAL), 0.0)          # the call's natural top-k and gates
    call_share = 100 * (parts[VERIFIER] + parts[PREPARE]) / total
    share = 100 * (parts[VERIFIER] - within + parts[PREPARE]) / total
    print("\ntargets (tiny world, CPU):")
    for label, value, goal in (
            (f"{ar.name} aten ops / decode step <= 300", ops[k_ar], ops[k_ar] <= 300),
            (f"{sd.name} aten ops / verify step <= 1000", ops[k_sd], ops[k_sd] <= 1000),
            (f"{ar.name} >= 2x transformers", med[k_ar] / base, med[k_ar] >= 2 * base),
            (f"{sd.name} >= 1.2x {ar.name}", med[k_sd] / med[k_ar], med[k_sd] >= 1.2 * med[k_ar]),
            (f"{am.name} >= {sd.name} (median paired ratio)", statistics.median(paired),
             statistics.median(paired) >= 1.0),
            (f"{am.name} selection <= 5 % of its time", share, share <= 5.0)):
        print(f"  {label:<48} {value:8.2f}  {'met' if goal else 'missed'}")
    q = statistics.quantiles(paired, n=4) if len(paired) > 1 else paired * 3
    print(f"\n{am.name} / {sd.name} tokens/s, one generation of each back to back per prompt and repeat: median "
          f"{statistics.median(paired):.3f}, quartiles {q[0]:.3f} - {q[2]:.3f}, range {min(paired):.3f} - "
          f"{max(paired):.3f} over {len(paired)} pairs")
    print(f"selection: the verifier call and its prepare ({call_share:.2f} % of the {am.name} generations) less "
          f"the natural top-k and gates inside the call ({100 * within / total:.2f} %), which every method "
          f"computes ({sd.name}: natural routing {100 * profiles[sd.name][1][NATURAL] / profiles[sd.name][0]:.2f} %)")
    print(f"verifier backend: {engine.backend}")
    for v in (sd, am):
        total, parts, inside = profiles[v.name]
        print(f"\nwhere the time goes, {len(prompts)} {v.name} generations ({total:.2f} s, wall clock per "
              f"component; components nest inside the target forward):")
        for label, t in parts.items():
            print(f"  {label:<36} {t:6.3f} s  {100 * t / total:5.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
