"""The engine: lossless speculative decoding, methods at full budget, EOS and length stops, offloading,
traces and their commitment table, clear errors."""
from __future__ import annotations

import json

import pytest
import torch

from acceptmoe.costs.verify import load_profile
from acceptmoe.engine import DraftTree, Eagle3Drafter, Engine, Trace, TreeShape, load_engine
from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.trace import commitment_table, load_traces, save_traces
from acceptmoe.errors import UserError
from acceptmoe.kernels import VERIFIERS
from acceptmoe.kernels.torch_verifier import TorchVerifier
from acceptmoe.methods import METHODS, CommitmentTable, ConfigError, Variant

from fixtures import FAMILIES
from spec_checkpoints import EXPERTS, TOP_K, cached_target, draft_config, make_draft, one_thread
from variants import plan

IGNORE_EOS = GenerationOptions(ignore_eos=True)        # every generation runs to its max_new_tokens

SMALL = TreeShape(3, 4, 12)
P_HAT = (1.0, 0.6, 0.3, 0.1)
PROMPTS = [[5], [3, 9, 27, 81, 115, 89, 11], list(range(40, 60))]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    yield from one_thread()


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory):
    return make_draft(tmp_path_factory.mktemp("draft") / "draft", seed=5)


@pytest.fixture(scope="module")
def engine(draft_dir):
    return load_engine(target=cached_target(), draft=draft_dir, tree=SMALL)


@pytest.fixture(scope="module")
def offloaded(draft_dir):
    return load_engine(target=cached_target(), draft=draft_dir, store="offloaded", slots=6, tree=SMALL)


@pytest.fixture(scope="module")
def reference(engine):
    """Vanilla AR tokens per prompt (EOS ignored), the ground truth of every lossless check."""
    return [engine.generate(p, plan(engine, "vanilla-ar"), 24, IGNORE_EOS).tokens for p in PROMPTS]


def use_oracle(monkeypatch, prompt_len: int, continuation: list[int]) -> None:
    """Write the true greedy continuation onto the deepest branch of every draft tree (long acceptances)."""
    propose = Eagle3Drafter.propose

    def oracle(self, root_token):
        tree = propose(self, root_token)
        future = continuation[self.length - prompt_len + 1:]
        tokens = tree.tokens.clone()
        for n, t in zip(tree.block.path_to(int(tree.depths.argmax()))[1:], future, strict=False):
            tokens[n] = t
        return DraftTree.from_parents(tokens, tree.parents, int(tree.positions[0]), tree.scores)
    monkeypatch.setattr(Eagle3Drafter, "propose", oracle)


@pytest.mark.parametrize("i, n", [(0, 1), (1, 9), (2, 24)])
def test_standard_sd_is_lossless(engine, reference, i, n):
    gen = engine.generate(PROMPTS[i], plan(engine, "standard-sd"), max_new_tokens=n, options=IGNORE_EOS)
    assert gen.tokens == reference[i][:n]
    assert len(gen.step_times) == len(gen.accept_lengths) == len(gen.trace.blocks)
    assert all(t > 0 for t in gen.step_times) and gen.prefill_time > 0


def test_standard_sd_is_lossless_with_the_paper_tree(engine, reference):
    paper = Engine(engine.model, engine.draft, tree=TreeShape(5, 10, 64))
    gen = paper.generate(PROMPTS[1], plan(paper, "standard-sd"), max_new_tokens=8, options=IGNORE_EOS)
    assert gen.tokens == reference[1][:8]
    assert all(len(b.parents) == 64 for b in gen.trace.blocks)


def test_long_acceptances_stay_lossless_and_truncate(engine, reference, monkeypatch):
    use_oracle(monkeypatch, len(PROMPTS[2]), reference[2])
    gen = engine.generate(PROMPTS[2], plan(engine, "standard-sd"), max_new_tokens=24, options=IGNORE_EOS)
    assert gen.tokens == reference[2]
    assert max(gen.accept_lengths) == SMALL.num_steps + 1
    blocks = [b.accept_length for b in gen.trace.blocks]
    assert blocks[:-1] == gen.accept_lengths[:-1] and blocks[-1] >= gen.accept_lengths[-1]
    short = engine.generate(PROMPTS[2], plan(engine, "standard-sd"), max_new_tokens=6, options=IGNORE_EOS)
    assert short.tokens == reference[2][:6] and short.stop_reason == "length"
    assert sum(short.accept_lengths) + 1 == 6                     # tau counts output tokens only ...
    assert sum(b.accept_length for b in short.trace.blocks) + 1 > 6   # ... the trace keeps the cut path


def test_drafter_state_equals_a_fresh_prefill(engine, reference, monkeypatch):
    """After each step the drafter holds what one pass over the committed text would give it: the accepted
    tokens were fed with the target features of the accepted path."""
    use_oracle(monkeypatch, len(PROMPTS[1]), reference[1])
    seen, propose = [], Eagle3Drafter.propose

    def record(self, root_token):
        seen.append((self.length, root_token, self.root_logp.clone()))
        return propose(self, root_token)
    monkeypatch.setattr(Eagle3Drafter, "propose", record)
    gen = engine.generate(PROMPTS[1], plan(engine, "standard-sd"), max_new_tokens=16, options=IGNORE_EOS)
    assert max(gen.accept_lengths) > 1
    text = PROMPTS[1] + gen.tokens
    for L, root, logp in seen[1:]:
        assert root == text[L]
        ids = torch.tensor(text[:L])
        _, aux = engine.model.forward(ids, torch.arange(L), engine.model.new_cache(L), 0,
                                      aux_layers=engine.draft.aux_layer_ids)
        fresh = Eagle3Drafter(engine.draft, L, SMALL)
        fresh.extend(torch.tensor(text[1:L + 1]), aux, 0)
        torch.testing.assert_close(fresh.root_logp, logp, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("method", ["count-b", "moe-spec", "acceptmoe-b"])
def test_full_budget_methods_equal_standard_sd(engine, reference, monkeypatch, method):
    use_oracle(monkeypatch, len(PROMPTS[1]), reference[1])
    gen = engine.generate(PROMPTS[1], plan(engine, method, budget=EXPERTS, commitment=P_HAT), 16, IGNORE_EOS)
    assert gen.tokens == reference[1][:16]
    assert all(s == EXPERTS for b in gen.trace.blocks for s in b.layers["set_size"])


def test_acceptmoe_sets_hold_the_anchor(engine, reference, monkeypatch):
    seen = []

    class Capture(TorchVerifier):
        def _run(self, logits, resident, route, bias):
            out = super()._run(logits, resident, route, bias)
            seen.append(out)
            return out
    VERIFIERS.add("capture-test", Capture)
    try:
        eng = Engine(engine.model, engine.draft, backend="capture-test", tree=SMALL)
        use_oracle(monkeypatch, len(PROMPTS[1]), reference[1])
        gen = eng.generate(PROMPTS[1], plan(eng, "acceptmoe", commitment=P_HAT), max_new_tokens=12, options=IGNORE_EOS)
    finally:
        VERIFIERS.remove("capture-test")
    assert len(gen.tokens) == 12 and seen
    for out in seen:                                                         # one block per pass: B = 1
        assert not (out.anchor & ~out.eligible).any() and int(out.anchor.sum()) == TOP_K
        assert bool(out.eligible[0][out.ids[0]].all()) and int(out.eligible.sum()) >= TOP_K
    for b in gen.trace.blocks:
        assert all(a == TOP_K <= s <= n for a, s, n in zip(b.layers["anchor_size"], b.layers["set_size"],
                                                             b.layers["natural_union"], strict=True))
        assert all(r <= s for r, s in zip(b.layers["routed_union"], b.layers["set_size"], strict=True))
        assert all(0 < u <= 1 for u in b.layers["utility_kept"])


def test_eos_stops_and_ignore_eos_runs_past(engine, reference, monkeypatch):
    ref = reference[1]
    j = next(i for i in range(2, len(ref)) if ref[i] not in ref[:i])       # first occurrence at index j >= 2
    monkeypatch.setattr(engine, "eos_token_ids", {ref[j]})
    for method in ("vanilla-ar", "standard-sd"):
        gen = engine.generate(PROMPTS[1], plan(engine, method), max_new_tokens=24)
        assert gen.tokens == ref[: j + 1] and gen.stop_reason == "eos"
        exact = engine.generate(PROMPTS[1], plan(engine, method), max_new_tokens=j + 1)   # EOS is the last allowed token
        assert exact.tokens == ref[: j + 1] and exact.stop_reason == "eos"
        past = engine.generate(PROMPTS[1], plan(engine, method), max_new_tokens=24, options=IGNORE_EOS)
        assert past.tokens == ref and past.stop_reason == "length"
    ends_at_eos = PROMPTS[1] + [ref[j]]                                     # a prompt ending in EOS still generates
    ar = engine.generate(ends_at_eos, plan(engine, "vanilla-ar"), max_new_tokens=10)
    sd = engine.generate(ends_at_eos, plan(engine, "standard-sd"), max_new_tokens=10)
    assert ar.tokens == sd.tokens and len(ar.tokens) >= 1


@pytest.mark.parametrize("method, kw", [("standard-sd", {}), ("count-b", {"budget": 8}),
                                        ("moe-spec", {"budget": 8}), ("acceptmoe-b", {"budget": 8}),
                                        ("acceptmoe", {"selector": {"prune_rho": 0.0}})])
def test_offloaded_store_gives_resident_tokens(engine, offloaded, method, kw):
    args = dict(max_new_tokens=10, options=IGNORE_EOS)
    res = engine.generate(PROMPTS[2], plan(engine, method, commitment=P_HAT, **kw), **args)
    off = offloaded.generate(PROMPTS[2], plan(offloaded, method, commitment=P_HAT, **kw), **args)
    assert off.tokens == res.tokens
    assert off.trace.meta["prune"] == (method == "acceptmoe") and not res.trace.meta["prune"]


def test_pruning_runs_offloaded_and_needs_an_offloaded_store(engine, offloaded):
    args = dict(max_new_tokens=10, options=IGNORE_EOS)
    sel = dict(commitment=P_HAT, selector={"prune_rho": 0.5, "prune_min_set": TOP_K})
    offloaded.model.store.reset_counters()
    gen = offloaded.generate(PROMPTS[0], plan(offloaded, "acceptmoe", **sel), **args)
    assert len(gen.tokens) == 10 and gen.trace.meta["prune"]
    assert offloaded.model.store.stats()["total"]["loads"] > 0
    with pytest.raises(ConfigError, match="residency pruning needs an offloaded expert store"):
        plan(engine, "acceptmoe", prune=True, **sel)
    with pytest.raises(UserError, match="not to this engine"):
        engine.generate(PROMPTS[0], plan(offloaded, "acceptmoe", **sel), **args)


def test_trace_round_trip_and_commitment_table(engine, tmp_path):
    gens = [engine.generate(p, plan(engine, "standard-sd"), max_new_tokens=6, options=IGNORE_EOS) for p in PROMPTS]
    save_traces(tmp_path / "trace.jsonl", [g.trace for g in gens])
    back = load_traces(tmp_path / "trace.jsonl")
    assert [t.meta for t in back] == [g.trace.meta for g in gens]
    assert [[b.to_json() for b in t.blocks] for t in back] == [[b.to_json() for b in g.trace.blocks] for g in gens]
    gens[0].trace.save(tmp_path / "one.jsonl")
    assert Trace.load(tmp_path / "one.jsonl").blocks[0].path == gens[0].trace.blocks[0].path
    with pytest.raises(ValueError, match="holds 3 traces"):
        Trace.load(tmp_path / "trace.jsonl")
    for line in (tmp_path / "trace.jsonl").read_text().splitlines():
        json.loads(line)                                                   # plain JSON, no tensors
    table = commitment_table(back)
    n_blocks = sum(len(t.blocks) for t in back)
    assert table.max_depth == SMALL.num_steps and table.provenance["policy"] == "natural"
    assert table.proposed[0] == table.committed[0] == n_blocks
    assert sum(table.proposed) == n_blocks * SMALL.num_draft_tokens
    assert sum(table.committed) == sum(sum(g.accept_lengths) for g in gens)
    gen = engine.generate(PROMPTS[0], plan(engine, "acceptmoe", commitment=table), max_new_tokens=4)
    assert gen.trace.meta["selector"]["p_hat"] == list(table.p_hat)
    assert commitment_table([gen.trace]).provenance["policy"] == "masked"           # a restricting method's traces


def test_vanilla_ar_steps_one_token(engine, reference):
    gen = engine.generate(PROMPTS[0], plan(engine, "vanilla-ar"), max_new_tokens=5, options=IGNORE_EOS)
    assert gen.tokens == reference[0][:5] and gen.accept_lengths == [1] * 4 and not gen.trace.blocks


@pytest.mark.parametrize("method, kw, err, match", [
    ("greedy", {}, KeyError, "valid: vanilla-ar, standard-sd, count-b"),
    ("count-b", {}, ConfigError, "needs a budget"),
    ("count-b", {"budget": TOP_K - 1}, ConfigError, f"must satisfy top_k={TOP_K} <= B"),
    ("count-b", {"budget": EXPERTS + 1}, ConfigError, f"<= B <= E={EXPERTS}"),
    ("acceptmoe", {}, ConfigError, "needs commitment probabilities"),
    ("acceptmoe", {"commitment": (1.0, 0.5)}, ConfigError, "p_hat has 2 entries"),
    ("acceptmoe-b", {"commitment": P_HAT}, ConfigError, "needs a budget"),
    ("standard-sd", {"budget": 8}, ConfigError, "a budget applies to fixed-budget methods only"),
    ("vanilla-ar", {"budget": 8}, ConfigError, "a budget applies to fixed-budget methods only"),
    ("standard-sd", {"prune": True}, ConfigError, "residency pruning applies to restricting methods"),
    ("acceptmoe", {"selector": {"rho": 0.1}}, ConfigError, r"cannot override \['rho'\]"),
])
def test_clear_errors(engine, method, kw, err, match):
    with pytest.raises(err, match=match):
        engine.generate([1, 2, 3], plan(engine, method, **kw), max_new_tokens=2)


def test_generate_takes_a_plan(engine):
    with pytest.raises(TypeError, match=r"takes a Plan"):
        engine.generate([1, 2, 3], "standard-sd", max_new_tokens=2)


def test_setup_errors(engine, draft_dir, tmp_path):
    with pytest.raises(UserError, match="the prompt is empty"):
        engine.generate([], plan(engine, "vanilla-ar"), 4)
    bare = Engine(engine.model, tree=SMALL)
    with pytest.raises(UserError, match="needs an EAGLE-3 draft"):
        bare.generate([1, 2], plan(bare, "standard-sd"), 4)
    assert len(bare.generate([1, 2], plan(bare, "vanilla-ar"), max_new_tokens=3).tokens) <= 3
    with pytest.raises(ValueError, match="either path"):
        load_engine(tmp_path, target=cached_target())
    with pytest.raises(ValueError, match="unknown verifier backend"):
        Engine(engine.model, backend="nope")


def test_load_engine_from_one_folder(draft_dir, tmp_path, reference):
    (tmp_path / "target").symlink_to(cached_target())
    (tmp_path / "draft").symlink_to(draft_dir)
    eng = load_engine(tmp_path, tree=SMALL)
    assert eng.draft is not None and eng.draft.dtype == eng.model.dtype
    assert eng.generate(PROMPTS[0], plan(eng, "standard-sd"), 4, IGNORE_EOS).tokens == reference[0][:4]
    assert isinstance(CommitmentTable(max_depth=1).proposed, list)


@pytest.mark.parametrize("method, kw", [("acceptmoe", {}), ("count-b", {"budget": 8}), ("standard-sd", {})])
def test_triton_backend_gives_torch_tokens(engine, method, kw):
    """The fused kernel (Triton interpreter on CPU) behind the engine's verifier hook."""
    pytest.importorskip("triton")
    fused = Engine(engine.model, engine.draft, backend="triton", tree=TreeShape(2, 3, 6))
    small = Engine(engine.model, engine.draft, backend="torch", tree=TreeShape(2, 3, 6))
    args = dict(max_new_tokens=3, options=IGNORE_EOS)
    v = plan(fused, method, commitment=P_HAT, **kw)
    a, b = fused.generate(PROMPTS[1], v, **args), small.generate(PROMPTS[1], v, **args)
    assert a.tokens == b.tokens
    assert [blk.layers for blk in a.trace.blocks] == [blk.layers for blk in b.trace.blocks]


@pytest.mark.parametrize("method, kw", [("acceptmoe", {}), ("moe-spec", {"budget": 12}), ("count-b", {"budget": 8})])
def test_cpu_backend_gives_torch_tokens_traces_and_routes(engine, method, kw):
    """The compiled CPU backend (the default on a CPU) against the torch backend over a whole generation:
    the same tokens, per-layer traces and routed ids and weights in every pass (as recorded: weights in
    fp16; test_cpu_verifier compares the verifier's outputs bit for bit)."""
    cpu = Engine(engine.model, engine.draft, backend="cpu", tree=engine.tree)
    small = Engine(engine.model, engine.draft, backend="torch", tree=engine.tree)
    args = dict(max_new_tokens=12, options=GenerationOptions(ignore_eos=True, record_routes=True))
    v = plan(cpu, method, commitment=P_HAT, **kw)
    a, b = cpu.generate(PROMPTS[0], v, **args), small.generate(PROMPTS[0], v, **args)
    assert a.tokens == b.tokens
    assert [blk.layers for blk in a.trace.blocks] == [blk.layers for blk in b.trace.blocks]
    for x, y in zip(a.routes.passes(), b.routes.passes(), strict=True):
        assert torch.equal(x.ids, y.ids) and torch.equal(x.weights, y.weights)


def test_tau_counts_output_tokens_only(engine, reference, monkeypatch):
    """An accepted path cut by EOS or the length cap counts only the tokens it output."""
    ref = reference[1]
    j = next(i for i in range(2, len(ref)) if ref[i] not in ref[:i])
    monkeypatch.setattr(engine, "eos_token_ids", {ref[j]})
    for kw in ({"max_new_tokens": 24}, {"max_new_tokens": 7, "options": IGNORE_EOS}):
        gen = engine.generate(PROMPTS[1], plan(engine, "standard-sd"), **kw)
        assert sum(gen.accept_lengths) == len(gen.tokens) - 1          # the prefill pass yields tokens[0]
        path_total = sum(len(b.path) for b in gen.trace.blocks)
        assert path_total >= sum(gen.accept_lengths)                    # the trace keeps whole accepted paths


def test_tracing_standard_sd_does_not_change_its_routing(engine, reference):
    """Standard SD routes with `router.natural` whether or not its layers are traced through the verifier."""
    traced = engine.generate(PROMPTS[1], plan(engine, "standard-sd"), 9, IGNORE_EOS)
    untraced = engine.generate(PROMPTS[1], plan(engine, "standard-sd"), 9,
                               GenerationOptions(ignore_eos=True, trace_layers=False))
    assert traced.tokens == untraced.tokens == reference[1][:9]
    assert all(s == EXPERTS for b in traced.trace.blocks for s in b.layers["set_size"])
    assert all(r == n for b in traced.trace.blocks
               for r, n in zip(b.layers["routed_union"], b.layers["natural_union"], strict=True))


def test_layer_stats_count_only_each_blocks_valid_tokens():
    """The one trace-statistics function both engines record with: per block, the set and anchor sizes,
    the natural and routed unions over the block's valid tokens (padding ignored), the utility kept."""
    from acceptmoe.engine.trace import LAYER_FIELDS, layer_stats
    from acceptmoe.kernels import VerifierOutput
    natural = torch.tensor([[[0, 1], [2, 3], [4, 5]], [[0, 1], [6, 7], [6, 7]]])     # [B=2, T=3, k=2]
    routed = torch.tensor([[[0, 1], [2, 1], [0, 1]], [[0, 1], [6, 1], [7, 1]]])
    eligible = torch.zeros(2, 8, dtype=torch.bool)
    eligible[0, [0, 1, 2]] = eligible[1, [0, 1, 6, 7]] = True
    utility = torch.tensor([[2.0, 1.0, 1.0, 0, 0, 0, 0, 4.0], [1.0, 1.0, 0, 0, 0, 0, 2.0, 0]])
    anchor = torch.zeros(2, 8, dtype=torch.bool)
    anchor[:, [0, 1]] = True
    valid = torch.tensor([[True, True, True], [True, True, False]])                      # block 1: 2 tokens
    rows = layer_stats(3, natural, routed, VerifierOutput(None, None, eligible, utility, anchor), valid)
    got = [dict(zip(LAYER_FIELDS, r, strict=True)) for r in rows.tolist()]
    assert got[0] == {"layer": 3, "set_size": 3, "anchor_size": 2, "natural_union": 6, "routed_union": 3,
                      "utility_kept": 0.5}
    assert got[1] == {"layer": 3, "set_size": 4, "anchor_size": 2, "natural_union": 4, "routed_union": 3,
                      "utility_kept": 1.0}
    everything = layer_stats(3, natural, routed, VerifierOutput(None, None, eligible, utility, anchor))
    assert everything[1, LAYER_FIELDS.index("routed_union")] == 4                     # without a mask: all tokens


@pytest.fixture(scope="module")
def family_draft(tmp_path_factory):
    """A random EAGLE-3 draft over the family checkpoints' vocabulary (96) and hidden size (64)."""
    return make_draft(tmp_path_factory.mktemp("family-draft"), seed=3, config=draft_config(64, vocab_size=96),
                      vocab=96, draft_vocab=64)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_method_runs_on_every_family(family, family_checkpoint, family_draft):
    """Each family's tiny target with a random draft: the methods that route naturally give Vanilla AR's tokens
    (lossless), every registered method generates traced through the verifier, a restricting method over every
    expert gives them too (the verifier routes under the `bias=` of DeepSeek-V3's layers), and the offloaded
    store gives the resident store's tokens, and runs with residency pruning."""
    folder, _ = family_checkpoint(family)
    eng = load_engine(target=folder, draft=family_draft, tree=SMALL)
    off = load_engine(target=folder, draft=family_draft, store="offloaded", slots=3, tree=SMALL)
    prompt, n = [5, 9, 27, 11, 40], 10
    bind = lambda e, name, **kw: Variant(name, **kw).bind(e.fit, commitment=P_HAT, b0=3, cost=load_profile())   # k=2 < 3 < E=8
    truth = eng.generate(prompt, bind(eng, "vanilla-ar"), n, IGNORE_EOS).tokens
    for name, spec in METHODS.items():
        gen = eng.generate(prompt, bind(eng, name), n, GenerationOptions(ignore_eos=True, trace_layers=spec.speculates))
        assert len(gen.tokens) == n, name
        if not spec.restricts:
            assert gen.tokens == truth, name
        if spec.speculates:
            assert gen.trace.blocks and gen.trace.blocks[0].layers, name
    full = eng.generate(prompt, bind(eng, "count-b", budget=8), n, IGNORE_EOS).tokens   # S: every expert
    assert full == truth              # routing inside S is the natural routing, selection bias included
    resident = eng.generate(prompt, bind(eng, "acceptmoe"), n, IGNORE_EOS).tokens
    assert off.generate(prompt, bind(off, "acceptmoe", prune=False), n, IGNORE_EOS).tokens == resident
    assert len(off.generate(prompt, bind(off, "acceptmoe", prune=True), n, IGNORE_EOS).tokens) == n
    assert off.counters()["loads"] > 0

