"""The offloaded store's device-side LRU keeps the host-side definition exactly: the same loads, hits,
misses, bytes and residency as a plain Python LRU (below) on random routings, and the counters and tokens
recorded on the tiny world (data/offloaded_counters.json: recorded with the host-side store; the speculative
runs re-recorded when the drafter took SGLang's beam-slot rule, which changed their trees, with the Vanilla AR
runs, which no draft touches, unchanged); under CUDA's admission rule (every wave a pass could need admitted
before the pass's one host read) the same, with exactly the waves needed computed."""
import json
from pathlib import Path

import pytest
import torch

from acceptmoe.engine import load_engine
from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.store import ExpertMath, make_store
from acceptmoe.methods import Variant

DATA = Path(__file__).parent / "data" / "offloaded_counters.json"
ROOT = Path(__file__).parents[2]


class PlainLRU:
    """The definition: per pass, used experts in order (resident first, then by id), waves of at most X;
    a miss takes a free slot (lowest index) or evicts the least-recently-used expert the wave does not need."""

    def __init__(self, E: int, X: int):
        self.X, self.slot_of, self.expert_in, self.last_use = X, [-1] * E, [-1] * X, [-1] * X
        self.clock = self.hits = self.misses = self.loads = 0

    def run(self, ids: list[int]) -> None:
        used = sorted(set(ids), key=lambda e: (self.slot_of[e] < 0, e))
        hits = sum(self.slot_of[e] >= 0 for e in used)
        self.hits, self.misses = self.hits + hits, self.misses + len(used) - hits
        for start in range(0, len(used), self.X):
            wave = used[start:start + self.X]
            for e in wave:
                if self.slot_of[e] < 0:
                    free = [s for s, x in enumerate(self.expert_in) if x < 0]
                    s = free[0] if free else min((s for s, x in enumerate(self.expert_in) if x not in wave),
                                                 key=lambda s: self.last_use[s])
                    if self.expert_in[s] >= 0:
                        self.slot_of[self.expert_in[s]] = -1
                    self.slot_of[e], self.expert_in[s] = s, e
                    self.loads += 1
                self.clock += 1
                self.last_use[self.slot_of[e]] = self.clock


@pytest.mark.parametrize("E, X, k, seed", [(8, 1, 2, 0), (8, 3, 2, 1), (16, 5, 4, 2), (16, 16, 4, 3), (32, 7, 3, 4)])
def test_device_lru_equals_the_plain_lru(E, X, k, seed):
    H, I = 8, 4
    g = torch.Generator().manual_seed(seed)
    layers = {0: {"w1": torch.randn(E, 2 * I, H, generator=g), "w2": torch.randn(E, H, I, generator=g)}}
    store = make_store("offloaded", ExpertMath("swiglu", torch.float32), layers, E, "cpu", slots=X)
    plain = PlainLRU(E, X)
    for _ in range(40):
        T = int(torch.randint(1, 7, (1,), generator=g))
        hot = torch.randint(0, E, (1,), generator=g)                     # skewed routing: some reuse
        logits = torch.randn(T, E, generator=g)
        logits[:, hot] += 2.0
        ids = logits.topk(k, dim=-1).indices
        store.run(0, torch.randn(T, H, generator=g), ids, torch.full((T, k), 1.0 / k))
        plain.run(ids.flatten().tolist())
        c = store.stats()["layers"][0]
        assert (c["hits"], c["misses"], c["loads"]) == (plain.hits, plain.misses, plain.loads)
        assert store.resident(0).tolist() == [s >= 0 for s in plain.slot_of]
        assert store.slot_of[0][:E].tolist() == plain.slot_of


def test_tiny_world_counters_and_tokens_as_recorded():
    """Counters, final residency and tokens of the offloaded tiny world equal those recorded with the
    host-side store on the same prompts (every method, two pool sizes)."""
    ref = json.loads(DATA.read_text())
    torch.set_num_threads(1)
    engines = {}
    for run in ref["runs"]:
        eng = engines.get(run["slots"]) or engines.setdefault(
            run["slots"], load_engine(ROOT / ref["model"], store="offloaded", slots=run["slots"]))
        eng.model.store.reset_counters()
        p_hat = (1.0, 0.8, 0.64, 0.512, 0.41, 0.33)
        options = GenerationOptions(ignore_eos=ref["ignore_eos"], trace_layers=False)
        gen = eng.generate(run["prompt"], Variant(run["method"]).bind(eng.fit, commitment=p_hat), ref["max_new_tokens"],
                           options)
        s = eng.model.store.stats()
        where = f"{run['method']} slots={run['slots']} prompt={run['prompt'][:3]}"
        assert gen.tokens == run["tokens"], where
        assert {k: s["total"][k] for k in run["total"]} == run["total"], where
        assert {str(l): {k: c[k] for k in run["total"]} for l, c in s["layers"].items()} == run["layers"], where
        assert {str(l): eng.model.store.resident(l).nonzero().flatten().tolist()
                for l in eng.model.store.layer_ids} == run["resident"], where


@pytest.mark.parametrize("E, X, k, seed", [(8, 1, 2, 5), (16, 5, 4, 6), (32, 7, 3, 7)])
def test_cuda_admission_rule_computes_exact_waves_after_one_read(E, X, k, seed, monkeypatch):
    """On CUDA a pass computes every wave's admission it could need (no host sync) and then reads the host once:
    run here with that rule (the CPU store otherwise admits exactly the waves it needs), each pass still makes
    one read, computes exactly ceil(union / X) waves, and gives the outputs, counters and pool state (clock and
    LRU stamps included) of the plain LRU and of the CPU rule."""
    from acceptmoe.engine import offload
    H, I = 8, 4
    g = torch.Generator().manual_seed(seed)
    weights = {"w1": torch.randn(E, 2 * I, H, generator=g), "w2": torch.randn(E, H, I, generator=g)}
    cpu = make_store("offloaded", ExpertMath("swiglu", torch.float32), {0: dict(weights)}, E, "cpu", slots=X)
    bound = make_store("offloaded", ExpertMath("swiglu", torch.float32), {0: dict(weights)}, E, "cpu", slots=X)
    bound._admissions = lambda used, pairs: offload.waves_bound(pairs, E, X)    # the CUDA rule
    reads, waves = [], []
    read, compute = bound._read, offload.experts_by_group
    bound._read = lambda *a: reads.append(1) or read(*a)
    monkeypatch.setattr(offload, "experts_by_group", lambda *a, **kw: waves.append(1) or compute(*a, **kw))
    plain = PlainLRU(E, X)
    for _ in range(30):
        T = int(torch.randint(1, 9, (1,), generator=g))
        ids = torch.randn(T, E, generator=g).topk(k, dim=-1).indices
        x, w = torch.randn(T, H, generator=g), torch.full((T, k), 1.0 / k)
        n_reads, n_waves = len(reads), len(waves)
        y = bound.run(0, x, ids, w)
        assert len(reads) - n_reads == 1
        assert len(waves) - n_waves == offload.waves_needed(ids.unique().numel(), X)
        assert offload.waves_bound(ids.numel(), E, X) >= len(waves) - n_waves
        monkeypatch.setattr(offload, "experts_by_group", compute)
        assert torch.equal(y, cpu.run(0, x, ids, w))
        monkeypatch.setattr(offload, "experts_by_group", lambda *a, **kw: waves.append(1) or compute(*a, **kw))
        plain.run(ids.flatten().tolist())
        c = bound.stats()["layers"][0]
        assert (c["hits"], c["misses"], c["loads"]) == (plain.hits, plain.misses, plain.loads)
        assert bound.slot_of[0][:E].tolist() == plain.slot_of
        a, b = bound.pool_state(), cpu.pool_state()
        assert torch.equal(a.expert_in, b.expert_in) and torch.equal(a.last_use, b.last_use) and a.clock == b.clock
