"""ExpertStore: offloaded equals resident, counter identities, LRU eviction, waves, the model on both, loading
that streams each layer into the store before reading the next, and weight sets shared across layers held once."""
import pytest
import torch

from acceptmoe.engine import mxfp4
from acceptmoe.engine.model import MoEModel
from acceptmoe.engine.store import ExpertMath, expert_bytes, make_store

from fixtures import FAMILIES, tiny_qwen3_moe

E, H, I, K, T = 8, 64, 32, 2, 6
LAYERS = (0, 2)


def _layers(kind: str, seed: int = 0, experts: int = E, layers=LAYERS) -> dict[int, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for l in layers:
        w = {"w1": torch.randn(experts, 2 * I, H, generator=g) * 0.2,
             "w2": torch.randn(experts, H, I, generator=g) * 0.2}
        if kind != "swiglu":
            w["b1"], w["b2"] = torch.randn(experts, 2 * I, generator=g), torch.randn(experts, H, generator=g)
        if kind == "mxfp4":
            for n in ("w1", "w2"):
                w[f"{n}_blocks"], w[f"{n}_scales"] = mxfp4.quantize(w.pop(n))
        out[l] = w
    return out


def _math(kind: str) -> ExpertMath:
    return ExpertMath("swiglu" if kind == "swiglu" else "clamped_swiglu", torch.float32)


def _routing(seed: int, n_tokens: int = T, experts: int = E):
    """x [T, H], ids [T, K] (distinct per token, among the first `experts`), weights [T, K]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_tokens, H, generator=g)
    ids = torch.rand(n_tokens, experts, generator=g).topk(K, dim=-1).indices
    return x, ids, torch.rand(n_tokens, K, generator=g).softmax(-1)


def _dense_reference(math, layer_w, x, ids, weights):
    """Every (token, slot) through its expert, one at a time: the plain definition."""
    y = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            y[t] += weights[t, j] * math(x[t:t + 1], {n: v[e] for n, v in layer_w.items()})[0]
    return y


@pytest.mark.parametrize("kind", ["swiglu", "clamped_swiglu", "mxfp4"])
@pytest.mark.parametrize("slots", [1, 3, E])
def test_offloaded_equals_resident_and_counters_add_up(kind, slots):
    layers, math = _layers(kind), _math(kind)
    resident = make_store("resident", math, _layers(kind), E, "cpu")
    offloaded = make_store("offloaded", math, _layers(kind), E, "cpu", slots=slots)
    unions = {l: 0 for l in LAYERS}
    waves_seen = False
    for p in range(8):
        x, ids, weights = _routing(p)
        for l in LAYERS:
            a = resident.run(l, x, ids, weights)
            assert torch.equal(a, offloaded.run(l, x, ids, weights))
            union = ids.unique().numel()
            unions[l] += union
            waves_seen |= union > slots
        if p == 0:
            torch.testing.assert_close(a, _dense_reference(math, layers[LAYERS[-1]], x, ids, weights))
    assert waves_seen == (slots < E)
    stats, per_expert = offloaded.stats(), expert_bytes(layers[0])
    for l in LAYERS:
        c = stats["layers"][l]
        assert c["hits"] + c["misses"] == unions[l] and c["passes"] == 8
        assert c["loads"] == c["misses"] and c["bytes"] == c["loads"] * per_expert and c["wait_s"] >= 0
        assert int(offloaded.resident(l).sum()) == min(slots, E)
    assert stats["total"]["hits"] + stats["total"]["misses"] == sum(unions.values())
    assert resident.stats()["total"]["misses"] == 0 and resident.stats()["total"]["hits"] == sum(unions.values())


def test_full_pool_has_no_misses_after_warm_up():
    store = make_store("offloaded", _math("swiglu"), _layers("swiglu"), E, "cpu", slots=E)
    x, _, weights = _routing(0)
    store.run(0, x, torch.arange(T * K).view(T, K) % E, weights)        # warm-up touches every expert
    assert store.stats()["layers"][0]["misses"] == E
    store.reset_counters()
    for p in range(5):
        store.run(0, *_routing(p))
    c = store.stats()["layers"][0]
    assert c["misses"] == 0 and c["loads"] == 0 and c["hits"] > 0 and store.stats()["total"]["hit_rate"] == 1.0


def test_lru_eviction_spares_the_current_wave():
    store = make_store("offloaded", _math("swiglu"), _layers("swiglu"), E, "cpu", slots=2)
    x = torch.randn(1, H)
    one = torch.ones(1, 1)
    for e in (0, 1, 0, 2):                                               # 2 evicts 1, the least recently used
        store.run(0, x, torch.tensor([[e]]), one)
    assert store.resident(0).nonzero().flatten().tolist() == [0, 2]
    store.run(0, x, torch.tensor([[2, 3]]), torch.full((1, 2), 0.5))     # 3 evicts 0, never 2 (same wave)
    assert store.resident(0).nonzero().flatten().tolist() == [2, 3]
    c = store.stats()["layers"][0]
    assert (c["hits"], c["misses"], c["loads"]) == (2, 4, 4)


def test_waves_when_union_exceeds_pool():
    layers, math = _layers("clamped_swiglu"), _math("clamped_swiglu")
    x, ids, weights = _routing(3, n_tokens=16)
    assert ids.unique().numel() > 3
    small = make_store("offloaded", math, _layers("clamped_swiglu"), E, "cpu", slots=3)
    torch.testing.assert_close(small.run(0, x, ids, weights), _dense_reference(math, layers[0], x, ids, weights))
    assert small.stats()["layers"][0]["loads"] == ids.unique().numel()  # each expert loaded once per pass


def test_load_seconds_are_the_stall_and_the_copy_per_layer_until_reset():
    """On CPU a load copies inline, so the compute stalls for the whole copy: wait_s (stall) equals copy_s
    (copy time) per layer, positive where the layer loaded and zero elsewhere; totals add the layers; a
    reset zeroes both; a resident store never loads."""
    from acceptmoe.engine.store import COUNTERS
    store = make_store("offloaded", _math("swiglu"), _layers("swiglu"), E, "cpu", slots=3)
    for p in range(3):
        store.run(LAYERS[0], *_routing(p))                               # only the first layer loads
    stats = store.stats()
    loaded, idle = (stats["layers"][l] for l in LAYERS)
    assert loaded["loads"] > 0 and loaded["wait_s"] == loaded["copy_s"] > 0
    assert idle["loads"] == 0 and idle["wait_s"] == idle["copy_s"] == 0.0
    assert set(COUNTERS) <= set(stats["total"]) and stats["total"]["copy_s"] == loaded["copy_s"]
    store.reset_counters()
    assert all(store.stats()["total"][c] == 0 for c in ("loads", "wait_s", "copy_s"))
    resident = make_store("resident", _math("swiglu"), _layers("swiglu"), E, "cpu")
    resident.run(LAYERS[0], *_routing(0))
    assert resident.stats()["total"]["wait_s"] == resident.stats()["total"]["copy_s"] == 0.0


def test_store_argument_errors():
    layers, math = _layers("swiglu"), _math("swiglu")
    with pytest.raises(ValueError, match="needs slots"):
        make_store("offloaded", math, layers, E, "cpu")
    with pytest.raises(ValueError, match="slots applies to store='offloaded' only"):
        make_store("resident", math, layers, E, "cpu", slots=2)
    with pytest.raises(ValueError, match="unknown store kind 'disk'"):
        make_store("disk", math, layers, E, "cpu")
    with pytest.raises(KeyError, match="layer 1 has no experts"):
        make_store("resident", math, layers, E, "cpu").resident(1)
    assert layers == {}                                                  # the store took ownership


@pytest.mark.parametrize("family", FAMILIES)
def test_model_offloaded_equals_resident(family, family_checkpoint):
    folder, _ = family_checkpoint(family)
    resident = MoEModel.from_pretrained(folder)
    offloaded = MoEModel.from_pretrained(folder, store="offloaded", slots=3)
    ids = torch.randint(0, 96, (12,), generator=torch.Generator().manual_seed(0))
    a, _ = resident.forward(ids, torch.arange(12), resident.new_cache(16), 0)
    b, _ = offloaded.forward(ids, torch.arange(12), offloaded.new_cache(16), 0)
    assert torch.equal(a, b)
    stats = offloaded.store.stats()
    assert stats["kind"] == "offloaded" and stats["slots"] == 3 and stats["total"]["loads"] > 0
    assert set(stats["layers"]) == set(offloaded.config.moe.layer_ids)


@pytest.mark.parametrize("kind", ["swiglu", "clamped_swiglu", "mxfp4"])
@pytest.mark.parametrize("n_tokens", [1, 12])
def test_per_pair_and_grouped_paths_match_the_definition(kind, n_tokens):
    """E=64: one token's k pairs take the gathered per-pair path, twelve tokens the grouped matmul."""
    from acceptmoe.engine.store import expert_path
    E64, math = 64, _math(kind)
    layer = _layers(kind, seed=7, experts=E64, layers=(0,))[0]
    g = torch.Generator().manual_seed(8)
    copy = lambda: {0: {n: t.clone() for n, t in layer.items()}}                  # noqa: E731
    resident = make_store("resident", math, copy(), E64, "cpu")
    offloaded = make_store("offloaded", math, copy(), E64, "cpu", slots=5)
    x = torch.randn(n_tokens, H, generator=g)
    ids = torch.rand(n_tokens, E64, generator=g).topk(K, dim=-1).indices
    weights = torch.rand(n_tokens, K, generator=g).softmax(-1)
    assert expert_path(x, n_tokens * K, E64, resident.weights[0]) == ("per_pair" if n_tokens == 1 else "grouped")
    y = resident.run(0, x, ids, weights)
    torch.testing.assert_close(y, _dense_reference(math, layer, x, ids, weights))
    assert torch.equal(offloaded.run(0, x, ids, weights), y)


def test_resident_pass_is_a_fixed_op_sequence_whatever_the_experts_used():
    """The same aten operations run whether a pass's pairs use one expert or all of them (no per-expert
    loop): two grouped matmuls."""
    from acceptmoe.tools.bench.engine_speed import AtenCounter
    store = make_store("resident", _math("clamped_swiglu"), _layers("clamped_swiglu"), E, "cpu")
    x = torch.randn(T, H)
    weights = torch.full((T, K), 0.5)
    counts = []
    for ids in (torch.zeros(T, K, dtype=torch.long), torch.arange(T * K).view(T, K) % E):
        with AtenCounter() as c:
            store.run(0, x, ids, weights)
        counts.append(dict(c.ops))
    assert counts[0] == counts[1] and counts[0].get("aten._grouped_mm") == 2


def test_large_experts_run_grouped_even_for_one_token():
    """A decode step's gathers copy every pair's weights: at a real model's expert size (here 2 MiB + 1 of w1
    and w2 together) one grouped matmul reads each used expert once instead."""
    from acceptmoe.engine.store import GATHER_BYTES, expert_path
    x = torch.zeros(1, 4)
    small = {"w1": torch.zeros(128, 8, 4), "w2": torch.zeros(128, 4, 4)}
    per_expert = GATHER_BYTES // K + 4                               # K pairs gather just over the limit
    big = {"w1": torch.zeros(128, per_expert // 4, 1), "w2": torch.zeros(128, 1, 0)}
    assert expert_path(x, K, 128, small) == "per_pair" and expert_path(x, K, 128, big) == "grouped"


@pytest.mark.parametrize("kind", ["swiglu", "clamped_swiglu", "mxfp4"])
def test_the_experts_kernel_path_matches_the_definition_on_the_stores_operands(kind):
    """`expert_path` picks the Triton experts kernel on CUDA: here it runs under the interpreter on the very
    operands the stores hold (dense on CPU; for MXFP4 also the packed tensors a CUDA store keeps), the
    offloaded pool's zero slot skipped, against the plain definition."""
    from acceptmoe.engine.store import combine, experts_by_group, grouped_weights
    math, layer = _math(kind), _layers(kind, seed=11, layers=(0,))[0]
    g = torch.Generator().manual_seed(12)
    x = torch.randn(5, H, generator=g)
    ids = torch.rand(5, E, generator=g).topk(K, dim=-1).indices
    weights = torch.rand(5, K, generator=g).softmax(-1)
    want = _dense_reference(math, layer, x, ids, weights)
    forms = [grouped_weights(math.kept(layer, "cpu"))]
    if kind == "mxfp4":
        forms.append(grouped_weights(dict(layer)))                     # packed, as a CUDA store keeps it
        assert "w1" not in forms[-1]
    for w in forms:
        y, _ = experts_by_group(math, x, ids.reshape(-1), weights, E, w, "triton")
        torch.testing.assert_close(combine(y, K), want)
    # the offloaded store's wave: pairs outside it go to the zero slot E (all-zero weights) and are skipped
    wave = ids.reshape(-1) % 2 == 0
    zero = {n: torch.cat([t, torch.zeros_like(t[:1])]) for n, t in forms[-1].items() if n not in ("w1t", "w2t")}
    group = torch.where(wave, ids.reshape(-1), E)
    y, _ = experts_by_group(math, x, group, weights, E + 1, grouped_weights(zero), "triton", skip=E)
    ref, _ = experts_by_group(math, x, group, weights, E + 1, grouped_weights(math.kept(zero, "cpu")), "grouped")
    torch.testing.assert_close(y, ref)
    assert not y[~wave].any()


@pytest.mark.parametrize("store, slots", [("resident", None), ("offloaded", 3)])
def test_from_pretrained_streams_each_layer_into_the_store_before_reading_the_next(store, slots, tmp_path, monkeypatch):
    """Loading reads one MoE layer's experts and hands them to the store before it reads the next layer's, so
    host memory never holds more than the store's own part and the layer being read."""
    from itertools import groupby

    from acceptmoe.engine import loading, offload
    from acceptmoe.engine import store as store_module
    tiny_qwen3_moe(tmp_path, num_hidden_layers=3)
    events = []
    get = loading.Checkpoint.get
    monkeypatch.setattr(loading.Checkpoint, "get", lambda self, name: events.append(name) or get(self, name))
    for cls in (store_module.ResidentStore, offload.OffloadedStore):
        monkeypatch.setattr(cls, "put", lambda self, layer, w, put=cls.put: events.append(layer) or put(self, layer, w))
    model = MoEModel.from_pretrained(tmp_path, store=store, slots=slots)
    steps = [("put", e) if isinstance(e, int) else ("read", int(e.split(".")[2]))
             for e in events if isinstance(e, int) or ".mlp.experts." in e]
    assert [k for k, _ in groupby(steps)] == [(kind, l) for l in model.config.moe.layer_ids for kind in ("read", "put")]


def test_layers_given_the_same_tensors_share_them_in_the_arena():
    """A replay's layers share weight sets: the offloaded store holds each set once (and computes the same)."""
    math, one = _math("swiglu"), _layers("swiglu", layers=(0,))[0]
    shared = make_store("offloaded", math, {l: dict(one) for l in (0, 1, 2)}, E, "cpu", slots=3)
    separate = make_store("offloaded", math, {l: {n: t.clone() for n, t in one.items()} for l in (0, 1, 2)}, E, "cpu",
                          slots=3)
    assert separate.host_expert_bytes() == 3 * shared.host_expert_bytes() == 3 * E * expert_bytes(one)
    x, ids, weights = _routing(4)
    for l in (0, 1, 2):
        assert torch.equal(shared.run(l, x, ids, weights), separate.run(l, x, ids, weights))
