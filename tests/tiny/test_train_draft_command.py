"""`train-draft` for a user's own target: a random 4-layer Qwen3-MoE saved by transformers whose tokenizer has
no pad token, prompts from a JSONL file rendered with the target's own chat template; the draft it writes
loads beside the target in the engine, Standard SD equals Vanilla AR on the held-out prompts, and a rerun
resumes from the checkpoint instead of starting over."""
from __future__ import annotations

import json

import pytest

from acceptmoe.engine import TreeShape, load_engine
from acceptmoe.errors import UserError
from acceptmoe.evals import generators as tasks
from acceptmoe.methods import Variant
from acceptmoe.tiny import own_draft, tokenizer

from fixtures import tiny_qwen3_moe


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("own") / "target"
    examples = [e for f in tasks.FAMILIES for e in tasks.generate(f, "train", 40)]
    tokenizer.build(tokenizer.corpus(examples), 320, folder)
    tok = AutoTokenizer.from_pretrained(str(folder))
    tok.pad_token = None                                          # a tokenizer without a pad token
    tok.save_pretrained(folder)
    tiny_qwen3_moe(folder, seed=0, num_hidden_layers=4, vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                   pad_token_id=None, max_position_embeddings=512)
    prompts = folder.parent / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": e["question"]}) + "\n"
                               for e in tasks.generate("tiny-gsm", "train", 12)))
    return folder, prompts


def _argv(target, prompts, out, epochs):
    return ["--target", str(target), "--out", str(out), "--prompts", str(prompts), "--eval-prompts", "2",
            "--max-new-tokens", "8", "--epochs", str(epochs), "--batch-size", "4", "--checkpoint-every", "2",
            "--tree", "3", "4", "12", "--threads", "1", "--warmup-steps", "2"]


def test_a_draft_for_your_own_target_loads_runs_lossless_and_resumes(target, tmp_path):
    folder, prompts = target
    out = tmp_path / "draft"
    assert own_draft.main(_argv(folder, prompts, out, epochs=2)) == 0
    first = json.loads((out / "train_summary.json").read_text())
    assert first["prompts"] == {"train": 10, "held_out": 2} and first["train"]["steps"] == 6
    assert first["eval"]["lossless"]["all_equal"] and first["eval"]["tau"] >= 1.0
    engine = load_engine(target=folder, draft=out, tree=TreeShape(3, 4, 12))     # the format the loader reads
    gen = engine.generate([{"role": "user", "content": "Ivan has 7 balloons."}], Variant("standard-sd").bind(engine.fit), 6)
    assert len(gen.tokens) >= 1
    engine.close()
    assert own_draft.main(_argv(folder, prompts, out, epochs=3)) == 0                 # resumes at step 6
    again = json.loads((out / "train_summary.json").read_text())
    assert again["train"]["resumed_at"] == 6 and again["train"]["steps"] == 9


def test_bad_prompt_files_are_one_error(target, tmp_path):
    folder, _ = target
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"question": "no"}\n')
    with pytest.raises(UserError, match=r"bad.jsonl:2: a line needs \"messages\""):
        own_draft.main(["--target", str(folder), "--out", str(tmp_path / "d"), "--prompts", str(bad)])
