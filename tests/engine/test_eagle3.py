"""EAGLE-3 draft head: SpecForge-format loading, layer semantics against an independent reference, cache and
tree-mask consistency, save/load round trip, pairing errors."""
from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from acceptmoe.engine import DraftMismatchError, Eagle3Draft, Eagle3Drafter, TreeShape
from acceptmoe.engine.model import MoEModel

from spec_checkpoints import HIDDEN, VOCAB, cached_target, draft_config, draft_state, make_draft, one_thread


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    yield from one_thread()


@pytest.fixture(scope="module")
def target():
    return MoEModel.from_pretrained(cached_target())


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory):
    return make_draft(tmp_path_factory.mktemp("d") / "draft", seed=3)


def rms(x, w, eps=1e-6):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, pos, theta=10000.0):
    """x [T, heads, hd]: the rotate-half RoPE of Llama, written out with explicit angles."""
    hd = x.shape[-1]
    ang = pos[:, None].double() * theta ** (-torch.arange(0, hd, 2).double() / hd)     # [T, hd/2]
    c, s = ang.cos()[:, None].float(), ang.sin()[:, None].float()
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def reference_forward(sd, embeds, fused, positions):
    """SGLang's LlamaForCausalLMEagle3 layer on a whole sequence, causal: returns the pre-norm output."""
    T = embeds.shape[0]
    h = fused @ sd["fc.weight"].T
    x = torch.cat([rms(embeds, sd["midlayer.input_layernorm.weight"]),
                   rms(h, sd["midlayer.hidden_norm.weight"])], dim=-1)                    # [T, 2H]
    q = rope((x @ sd["midlayer.self_attn.q_proj.weight"].T).view(T, 4, 16), positions)
    k = rope((x @ sd["midlayer.self_attn.k_proj.weight"].T).view(T, 2, 16), positions)
    v = (x @ sd["midlayer.self_attn.v_proj.weight"].T).view(T, 2, 16)
    k, v = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    att = torch.einsum("thd,shd->hts", q, k) / math.sqrt(16)
    att = att.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
    o = torch.einsum("hts,shd->thd", att, v).reshape(T, 64) @ sd["midlayer.self_attn.o_proj.weight"].T
    h = h + o
    m = rms(h, sd["midlayer.post_attention_layernorm.weight"])
    mlp = (torch.nn.functional.silu(m @ sd["midlayer.mlp.gate_proj.weight"].T)
           * (m @ sd["midlayer.mlp.up_proj.weight"].T)) @ sd["midlayer.mlp.down_proj.weight"].T
    return h + mlp


def test_loads_specforge_checkpoint(draft_dir, target):
    draft = Eagle3Draft.from_pretrained(draft_dir).bind(target)
    sd = load_file(str(draft_dir / "model.safetensors"))
    assert draft.aux_layer_ids == (0, 1, 2) and draft.draft_vocab_size == 96 and draft.embed_tokens is None
    ids = torch.arange(96)
    assert torch.equal(draft.to_target(ids), ids + sd["d2t"])
    assert torch.equal(torch.nonzero(sd["t2d"]).flatten(), draft.to_target(ids))     # the hot vocabulary


def test_forward_matches_reference_and_cache_is_consistent(draft_dir, target):
    draft = Eagle3Draft.from_pretrained(draft_dir).bind(target)
    sd = load_file(str(draft_dir / "model.safetensors"))
    g = torch.Generator().manual_seed(0)
    ids, fused = torch.randint(0, VOCAB, (9,), generator=g), torch.randn(9, 3 * HIDDEN, generator=g)
    pos = torch.arange(9)
    ref = reference_forward(sd, target.embed(ids), fused, pos)
    whole = draft(ids, fused, pos, draft.new_cache(16), 0)
    torch.testing.assert_close(whole, ref, rtol=1e-4, atol=1e-5)
    cache = draft.new_cache(16)                                     # the same sequence in three chunks
    parts = [draft(ids[a:b], fused[a:b], pos[a:b], cache, a) for a, b in ((0, 4), (4, 5), (5, 9))]
    torch.testing.assert_close(torch.cat(parts), ref, rtol=1e-4, atol=1e-5)
    assert draft.logits(whole).shape == (9, 96)


def test_a_drafts_own_embedding_is_used_where_sglang_uses_it(tmp_path, target):
    """SGLang embeds a draft's tokens with the target's embedding unless the draft's config names a
    target_hidden_size other than its hidden_size: a checkpoint's own embed_tokens of the target's width is left
    unused (as SGLang leaves it), one of another width embeds."""
    g = torch.Generator().manual_seed(2)
    ids, fused = torch.randint(0, VOCAB, (6,), generator=g), torch.randn(6, 3 * HIDDEN, generator=g)
    pos = torch.arange(6)
    same = make_draft(tmp_path / "same", own_embedding=True)                       # hidden_size = the target's
    draft = Eagle3Draft.from_pretrained(same).bind(target)
    sd = load_file(str(same / "model.safetensors"))
    out = draft(ids, fused, pos, draft.new_cache(8), 0)
    assert draft.embed_tokens is None
    torch.testing.assert_close(out, reference_forward(sd, target.embed(ids), fused, pos), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(out, reference_forward(sd, sd["embed_tokens.weight"][ids], fused, pos), rtol=1e-3,
                              atol=1e-3)
    narrow = make_draft(tmp_path / "narrow", config=draft_config(hidden=32, target_hidden_size=HIDDEN), hidden=32,
                        own_embedding=True)
    draft = Eagle3Draft.from_pretrained(narrow).bind(target)
    sd = load_file(str(narrow / "model.safetensors"))
    assert draft.embed_tokens is not None
    torch.testing.assert_close(draft(ids, fused, pos, draft.new_cache(8), 0),
                               reference_forward(sd, sd["embed_tokens.weight"][ids], fused, pos), rtol=1e-4, atol=1e-5)


def test_tree_follows_sglang_beam_slots(draft_dir, target):
    """SGLang's draft passes: the node fed in beam slot j at level l takes its tree parent's hidden state but
    attends to the committed prefix and to the nodes fed in slot j at levels 1..l (each slot keeps its own KV
    history, SGLang's per-step out_cache_loc and `build_draft_decode_metadata` layout), not to its ancestors
    when the beam was re-parented. Reference: one plain cache per slot, one token at a time; the tree is the
    best num_draft_tokens - 1 of its candidates, each scored by its cumulative log-probability."""
    draft = Eagle3Draft.from_pretrained(draft_dir).bind(target)
    g = torch.Generator().manual_seed(1)
    L = 7
    prefix, fused = torch.randint(0, VOCAB, (L,), generator=g), torch.randn(L, 3 * HIDDEN, generator=g)
    shape = TreeShape(4, 3, 14)
    drafter = Eagle3Drafter(draft, 64, shape)
    drafter.extend(prefix, fused, 0)
    tree = drafter.propose(root_token=int(prefix[-1]))
    assert torch.equal(tree.positions, tree.depths + L)

    k = shape.topk
    caches = [draft.new_cache(64) for _ in range(k)]
    root_hidden = [draft(prefix, fused, torch.arange(L), c, 0)[-1:] for c in caches][0]
    root_logp = torch.log_softmax(draft.logits(root_hidden)[0], -1)
    score, tok = root_logp.topk(k)
    fed = [(float(score[j]), (int(tok[j]),), root_hidden) for j in range(k)]   # per slot: score, path, hidden
    cands = {path: s for s, path, _ in fed}
    for level in range(1, shape.num_steps):
        children = []
        for j, (s, path, hidden) in enumerate(fed):
            ids = draft.to_target(torch.tensor([path[-1]]))
            out = draft(ids, hidden, torch.tensor([L - 1 + level]), caches[j], L - 1 + level)   # slot j's history
            lp, ct = torch.log_softmax(draft.logits(out)[0], -1).topk(k)
            children += [(s + float(lp[c]), path + (int(ct[c]),), out) for c in range(k)]
        cands.update({path: s for s, path, _ in children})
        order = sorted(range(len(children)), key=lambda i: -children[i][0])[:k]
        fed = [children[i] for i in order]                 # slot j now holds the j-th best child
    to_draft = {int(t): d for d, t in enumerate(draft.to_target(torch.arange(96)).tolist())}
    kept = {}
    for node in range(1, tree.num_tokens):
        path = tuple(to_draft[int(tree.tokens[n])] for n in tree.block.path_to(node)[1:])
        kept[path] = float(tree.scores[node])
        assert kept[path] == pytest.approx(cands[path], abs=1e-4), path
    best = sorted(cands.values(), reverse=True)[: shape.num_draft_tokens - 1]
    assert sorted(kept.values(), reverse=True) == pytest.approx(best, abs=1e-4)


def test_save_load_round_trip(draft_dir, target, tmp_path):
    a = Eagle3Draft.from_pretrained(draft_dir).bind(target)
    a.save_pretrained(tmp_path / "copy")
    b = Eagle3Draft.from_pretrained(tmp_path / "copy").bind(target)
    assert set(load_file(str(tmp_path / "copy" / "model.safetensors"))) == set(load_file(str(draft_dir / "model.safetensors")))
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items(), strict=False):
        assert ka == kb and torch.equal(va, vb)
    cfg = json.loads((tmp_path / "copy" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2] and cfg["draft_vocab_size"] == 96
    ids, fused = torch.tensor([3, 4, 5]), torch.randn(3, 3 * HIDDEN)
    assert torch.equal(a(ids, fused, torch.arange(3), a.new_cache(4), 0),
                       b(ids, fused, torch.arange(3), b.new_cache(4), 0))


def test_own_embedding_and_bf16(tmp_path, target):
    folder = make_draft(tmp_path / "d", config=draft_config(hidden=32, target_hidden_size=HIDDEN), hidden=32,
                        own_embedding=True)
    draft = Eagle3Draft.from_pretrained(folder, dtype=torch.bfloat16).bind(target)
    assert draft.embed_tokens is not None and draft.dtype == torch.bfloat16
    out = draft(torch.tensor([1, 2]), torch.randn(2, 3 * HIDDEN), torch.arange(2), draft.new_cache(4), 0)
    assert out.dtype == torch.bfloat16 and draft.logits(out).dtype == torch.float32
    assert draft.midlayer.rope.inv_freq.dtype == torch.float32          # RoPE frequencies stay fp32


def test_default_aux_layers_follow_sglang(tmp_path, target):
    draft = Eagle3Draft.from_pretrained(make_draft(tmp_path / "d", config=draft_config(aux_ids=None)))
    assert draft.aux_layer_ids is None
    L = target.config.num_layers
    assert draft.bind(target).aux_layer_ids == (1, L // 2 - 1, L - 4)


@pytest.mark.parametrize("config, state_kw, match", [
    (draft_config(target_hidden_size=32), {"target_hidden": 32}, "fc reads 96 fused features"),
    (draft_config(aux_ids=(0, 1, 9)), {}, r"eagle_aux_hidden_state_layer_ids \[0, 1, 9\]"),
    (draft_config(aux_ids=(0, 1)), {}, "must be 3 layer ids"),
    (draft_config(hidden=32, target_hidden_size=HIDDEN), {"hidden": 32}, "cannot be shared"),
])
def test_pairing_errors(tmp_path, target, config, state_kw, match):
    draft = Eagle3Draft.from_pretrained(make_draft(tmp_path / "d", config=config, **state_kw))
    with pytest.raises(DraftMismatchError, match=match):
        draft.bind(target)


def test_checkpoint_errors(tmp_path):
    folder = make_draft(tmp_path / "bad")
    sd = draft_state()
    del sd["norm.weight"]
    from safetensors.torch import save_file
    save_file(sd, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match=r"missing \['norm.weight'\]"):
        Eagle3Draft.from_pretrained(folder)
    wrong = make_draft(tmp_path / "arch", config=draft_config(architectures=["LlamaForCausalLM"]))
    with pytest.raises(ValueError, match="is not LlamaForCausalLMEagle3"):
        Eagle3Draft.from_pretrained(wrong)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        Eagle3Draft.from_pretrained(tmp_path / "nothing")
    unbound = Eagle3Draft.from_pretrained(make_draft(tmp_path / "ok"))
    with pytest.raises(RuntimeError, match="call draft.bind"):
        unbound.embed(torch.tensor([1]))
