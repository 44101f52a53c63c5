"""The verify-pass cost model's parameters (docs/method.md, "Token-side admission"): timed on the machine at hand
over a grid of tree sizes and expert-union sizes, fitted by least squares, saved as JSON, loaded by runs that admit.

    cost(pass) = fixed + per_token * tokens + per_byte * moe_layers * expert_bytes * experts_read_per_layer
                 (+ fetch_per_byte * moe_layers * expert_bytes * experts_fetched_per_layer, offloaded store)

The formula is `methods.admission.VerifyCost.seconds` (one place); this module measures and fits its parameters.
`profile` times the engine's own verify pass (`MoEModel.forward` over a tree after a prompt, the per-layer
routing of a `Restriction`) with natural routing (the baseline) and with the fixed-budget twin of B0's method
(AcceptMoE-B) at each budget of the grid, so the union of
experts a pass reads moves apart from its token count; each point is the median of `repeats` timed passes, the
experts read are the pass's measured mean routed union per layer. `DEFAULT_PROFILE` is the committed profile of
the tiny world on CPU, `OFFLOADED_PROFILE` the same under the offloaded X = 48-slot pool (with its fetch cost);
runs use the one of their store (`default_profile`) unless a world names another (`WorldConfig.verify_cost`).
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import torch

from acceptmoe.engine.restriction import LayerRecord, Restriction
from acceptmoe.engine.trace import LAYER_FIELDS
from acceptmoe.engine.tree import ancestor_mask
from acceptmoe.errors import UserError
from acceptmoe.methods import B0_METHOD, BASELINE, Variant, VerifyCost, fixed_twin

PROFILES = Path(__file__).resolve().parent / "profiles"
DEFAULT_PROFILE = PROFILES / "tiny-cpu.json"
OFFLOADED_PROFILE = PROFILES / "tiny-cpu-offloaded.json"   # profile-verify --store offloaded --slots 48
ROUTED_UNION = LAYER_FIELDS.index("routed_union")
PROMPT_TOKENS = 64


def default_profile(store: str = "resident") -> Path:
    """The committed profile for an engine's expert store: the offloaded one carries the fetch cost an admitting
    plan under an offloaded store needs."""
    return OFFLOADED_PROFILE if store == "offloaded" else DEFAULT_PROFILE


def load_profile(path: str | Path | None = None) -> VerifyCost:
    """The verify-cost parameters saved at `path` (None: the committed tiny-world CPU profile)."""
    p = Path(path) if path is not None else DEFAULT_PROFILE
    if not p.is_file():
        raise UserError(f"verify-cost profile {p} not found: measure one with `./reproduce.sh profile-verify --out {p}`")
    return VerifyCost.from_json(json.loads(p.read_text())["cost"])


def save_profile(path: str | Path, cost: VerifyCost, samples: list[dict], meta: dict) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"cost": cost.to_json(), "meta": meta, "samples": samples}, indent=1, sort_keys=True)
                 + "\n")


def fit(samples: list[dict], expert_bytes: int, moe_layers: int, source: str) -> VerifyCost:
    """Least squares of seconds on [1, tokens, bytes read (, bytes fetched)]; a negative coefficient (noise on a
    small machine) is set to 0 and the others refitted."""
    fetched = any(s.get("fetched", 0) for s in samples)
    per_layer = expert_bytes * moe_layers
    cols = ["fixed", "tokens", "read"] + (["fetched"] if fetched else [])
    rows = [[1.0, s["tokens"], s["experts"] * per_layer] + ([s.get("fetched", 0) * per_layer] if fetched else [])
            for s in samples]
    y = torch.tensor([s["seconds"] for s in samples], dtype=torch.float64)
    active = list(range(len(cols)))
    while True:
        X = torch.tensor([[r[i] for i in active] for r in rows], dtype=torch.float64)
        coef = torch.linalg.lstsq(X, y[:, None]).solution[:, 0].tolist()
        if all(c >= 0 for c in coef) or len(active) == 1:
            break
        active = [a for a, c in zip(active, coef, strict=True) if c >= 0 or a == 0]
    full = dict.fromkeys(cols, 0.0)
    full.update({cols[a]: max(c, 0.0) for a, c in zip(active, coef, strict=True)})
    return VerifyCost(full["fixed"], full["tokens"], full["read"], expert_bytes, moe_layers,
                      full["fetched"] if fetched else None, source)


def profile(engine, tokens: list[int], budgets: list[int], repeats: int = 5, seed: int = 0) -> list[dict]:
    """Timed verify passes: per tree size in `tokens` and per routing (natural, then the fixed-budget twin of B0's
    method at each budget of `budgets`), the median seconds and the measured experts read (and fetched) per MoE
    layer."""
    model, gen = engine.model, torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    prompt = torch.randint(0, vocab, (PROMPT_TOKENS,), generator=gen).to(engine.device)
    samples = []
    for n in tokens:
        cache = model.new_cache(PROMPT_TOKENS + n)
        model.forward(prompt, torch.arange(PROMPT_TOKENS, device=engine.device), cache, 0)
        parents = torch.tensor([-1] + [0] * (n - 1))                           # root + n - 1 draft nodes, depth 1
        ids = torch.randint(0, vocab, (n,), generator=gen).to(engine.device)
        positions = PROMPT_TOKENS + (parents >= 0).long().to(engine.device)
        mask = ancestor_mask(parents).to(engine.device)
        for budget in [None, *budgets]:
            variant = Variant(BASELINE) if budget is None else Variant(fixed_twin(B0_METHOD), budget=budget)
            plan = variant.bind(engine.fit, commitment=(1.0,) * (engine.fit.max_depth + 1))
            samples.append(_time(engine, plan, ids, positions, cache, mask, parents, repeats) | {"budget": budget})
    return samples


def _time(engine, plan, ids, positions, cache, mask, parents, repeats: int) -> dict:
    from acceptmoe.kernels import make_verifier
    from acceptmoe.methods import BlockInfo

    model = engine.model
    verifier = make_verifier(engine.backend, plan, engine.device)
    verifier.prepare([BlockInfo.from_parents(parents)])
    seconds, unions, fetched = [], [], []
    for _ in range(repeats + 1):                                               # the first pass warms up
        record = LayerRecord(engine.router)
        policy = Restriction(verifier, model.store, engine.router, False, record, model.selection_bias)
        loads0 = engine.counters().get("loads", 0)
        t0 = engine.clock()
        model.forward(ids, positions, cache, PROMPT_TOKENS, mask=mask, policy=policy)
        seconds.append(engine.clock() - t0)
        stats = record.stacked()
        assert stats is not None
        unions.append(float(stats[:, 0, ROUTED_UNION].double().mean()))
        fetched.append((engine.counters().get("loads", 0) - loads0) / max(len(model.store.layer_ids), 1))
    return {"tokens": int(ids.numel()), "seconds": statistics.median(seconds[1:]),
            "experts": statistics.mean(unions[1:]), "fetched": statistics.mean(fetched[1:])}
