"""The tiny EAGLE-3 draft trainer: features agree with the engine's capture, the TTT unroll agrees with the
drafter's tree drafting, and a short end-to-end run lowers the loss and gives a lossless Standard SD draft."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from acceptmoe.engine import Eagle3Draft, Eagle3Drafter, TreeShape
from acceptmoe.engine.model import MoEModel
from acceptmoe.evals import generators as tasks
from acceptmoe.tiny import config as tiny_config
from acceptmoe.tiny import draft_data, tokenizer, train_draft
from acceptmoe.tiny.draft_ttt import step_logits, ttt_loss, unroll

from fixtures import tiny_qwen3_moe

SMALL = tiny_config.DraftConfig(prompts_per_family=6, max_new_tokens=10, gen_batch_size=12, intermediate_size=96,
                                num_heads=4, num_kv_heads=2, head_dim=16, ttt_steps=3, batch_size=6, epochs=12,
                                lr=1e-2, warmup_steps=5, max_minutes=1.0, threads=1, log_every=4,
                                eval_prompts=2, lossless_prompts=2)


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    """A random 4-layer Qwen3-MoE with the tiny world's ChatML tokenizer (fitted on a small corpus)."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("tiny") / "target"
    examples = [e for f in tasks.FAMILIES for e in tasks.generate(f, "train", 60)]
    tokenizer.build(tokenizer.corpus(examples), 320, folder)
    tok = AutoTokenizer.from_pretrained(str(folder))
    tiny_qwen3_moe(folder, seed=0, num_hidden_layers=4, vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                   pad_token_id=tok.pad_token_id, max_position_embeddings=512)
    return folder


@pytest.fixture(scope="module")
def hf_target(target_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(str(target_dir))


def test_aux_layers_are_distinct_and_capturable():
    assert train_draft.aux_layer_ids(4) == (0, 1, 2)
    for L in range(4, 64):
        ids = train_draft.aux_layer_ids(L)
        assert len(set(ids)) == 3 and max(ids) <= L - 2
    with pytest.raises(ValueError, match="3 distinct"):
        train_draft.aux_layer_ids(3)


def test_features_match_the_engine_capture(target_dir, hf_target):
    model, tok = hf_target
    aux = train_draft.aux_layer_ids(4)
    questions = [e["question"] for e in tasks.generate("tiny-gsm", "train", 3)]
    seqs = draft_data.build(model, tok, questions, aux, max_new_tokens=6, batch_size=3)
    ours = MoEModel.from_pretrained(target_dir)
    for s in seqs:
        n = s.ids.shape[0]
        logits, feats = ours.forward(s.ids, torch.arange(n), ours.new_cache(n), 0, aux_layers=aux)
        torch.testing.assert_close(s.feats, feats, atol=1e-4, rtol=1e-4)
        reply = s.labels != draft_data.IGNORE
        assert torch.equal(s.labels[reply], logits.argmax(-1)[reply])
        P = s.prompt_len                        # the left-padded batched generation is the greedy chain
        assert torch.equal(s.ids[P:], logits.argmax(-1)[P - 1:n - 1])
        assert not reply[:s.prompt_len].any() and reply[s.prompt_len:].all()   # no EOS: cut at the cap


def test_reply_labels_skip_the_first_reply_token_and_after_eos():
    argmax = torch.arange(10)
    labels = draft_data.reply_labels(argmax, 4, eos=2, ids=[5] * 9 + [2])
    assert labels.tolist() == [-100] * 4 + [4, 5, 6, 7, 8] + [-100]


def _random_draft(hf_model, steps: int = 3, seed: int = 0) -> Eagle3Draft:
    cfg = dataclasses.replace(SMALL, ttt_steps=steps)
    draft = train_draft.new_draft(hf_model, cfg, seed)
    with torch.no_grad():   # larger weights than the default init, so attention patterns matter
        for name, p in draft.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                p.normal_(0.0, 0.3)
            elif p.dim() == 1:
                p.uniform_(0.5, 1.5)
    return draft.eval()


@pytest.mark.parametrize("topk", [1, 3])
def test_ttt_unroll_agrees_with_tree_drafting(hf_target, topk):
    """A tree node's cumulative draft log-probability equals the TTT unroll over its root path wherever drafting
    sees that path: every node of a chain (topk 1), and nodes up to depth 2 of a tree. Deeper nodes of a
    re-parented beam see their beam slot's history instead (SGLang's draft rule, checked exactly in
    tests/engine/test_eagle3.py)."""
    model, _ = hf_target
    steps, L = 3, 7
    draft = _random_draft(model, steps)
    g = torch.Generator().manual_seed(1)
    V = draft.vocab_size
    prefix = torch.randint(3, V, (L + 1,), generator=g)                   # x_0..x_L, x_L is the root
    feats = torch.randn(L, draft.fc.in_features, generator=g)              # target features h_0..h_{L-1}
    shape = TreeShape(num_steps=steps, topk=topk, num_draft_tokens=1 + topk + (steps - 1) * topk ** 2)
    drafter = Eagle3Drafter(draft, max_len=L + 8, shape=shape)
    drafter.extend(prefix[1:], feats, 0)
    tree = drafter.propose(int(prefix[-1]))
    parents = tree.parents.tolist()
    depths = tree.depths.tolist()
    for node in range(1, tree.num_tokens):
        if topk > 1 and depths[node] > 2:
            continue
        path = [node]
        while parents[path[-1]] > 0:
            path.append(parents[path[-1]])
        path_tokens = tree.tokens[path[::-1]]                              # depth 1..d
        ids = torch.cat([prefix, path_tokens])[None]                       # [1, L + 1 + d]
        f = torch.cat([feats, torch.zeros(ids.shape[1] - L, feats.shape[1])])[None]
        with torch.no_grad():
            outs = unroll(draft, ids, f, len(path))
            logp = [torch.log_softmax(step_logits(draft, h)[0, L - 1], -1) for h in outs]
        expected = sum(float(logp[s][path_tokens[s]]) for s in range(len(path)))
        assert float(tree.scores[node]) == pytest.approx(expected, abs=1e-4)


def test_training_lowers_the_loss_and_the_draft_is_lossless(tmp_path, target_dir, hf_target):
    model, tok = hf_target
    torch.set_num_threads(1)
    aux = train_draft.aux_layer_ids(4)
    questions = [e["question"] for f in tasks.FAMILIES for e in tasks.generate(f, "train", SMALL.prompts_per_family)]
    seqs = draft_data.build(model, tok, questions, aux, SMALL.max_new_tokens, SMALL.gen_batch_size)
    draft = train_draft.new_draft(model, SMALL, seed=0)
    whole = draft_data.collate(seqs)
    embed_before = draft.embed_tokens.weight.clone()
    with torch.no_grad():
        before, _ = ttt_loss(draft, whole, SMALL.ttt_steps, SMALL.step_decay)
    summary = train_draft.train(draft, seqs, SMALL, seed=0)
    with torch.no_grad():
        after, stats = ttt_loss(draft, whole, SMALL.ttt_steps, SMALL.step_decay)
    assert float(after) < 0.8 * float(before), (float(before), float(after), summary["history"])
    assert len(stats) == SMALL.ttt_steps and all(s.labels > 0 for s in stats)
    assert torch.equal(draft.embed_tokens.weight, embed_before)            # frozen, as SpecForge's

    out = tmp_path / "draft"
    draft.save_pretrained(out)
    loaded = Eagle3Draft.from_pretrained(out)
    assert loaded.aux_layer_ids == aux and not loaded.d2t.any()
    assert loaded.embed_tokens is None        # its frozen copy of the target's is unused, as SGLang leaves it
    result = train_draft.measure(target_dir, out, tok, SMALL, seed=0, shape=TreeShape(3, 4, 10))
    assert result["lossless"] == {"checked": 8, "equal": 8, "all_equal": True}
    assert result["tau"] >= 1.0 and set(result["families"]) == set(tasks.FAMILIES)


def test_config_rejects_too_shallow_unrolling(tmp_path):
    path = tmp_path / "world.yaml"
    path.write_text("draft:\n  ttt_steps: 1\n")
    with pytest.raises(tiny_config.TinyConfigError, match="ttt_steps"):
        tiny_config.load(path)
    path.write_text("draft:\n  unroll: 3\n")
    with pytest.raises(tiny_config.TinyConfigError, match="unknown key"):
        tiny_config.load(path)
