"""The committed tiny world (models/tiny): it loads in transformers and in the engine, fixed prompts give the
recorded greedy outputs in both, and speculative decoding with the committed draft is lossless on them."""
import json
from pathlib import Path

import pytest
import torch

from acceptmoe.engine import load_engine

from variants import plan

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models" / "tiny"
GOLDEN = json.loads((Path(__file__).parent / "golden_greedy.json").read_text())


@pytest.fixture(scope="module")
def engine():
    return load_engine(MODELS)


@pytest.fixture(scope="module")
def hf_model():
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(MODELS / "target", dtype=torch.float32).eval()


def test_committed_files_and_card_sizes():
    for rel in ("target/config.json", "target/model.safetensors", "target/tokenizer.json", "draft/config.json",
                "draft/model.safetensors", "data/manifest.json"):
        assert (MODELS / rel).is_file(), rel
    cfg = json.loads((MODELS / "target" / "config.json").read_text())
    experts = cfg.get("num_experts", cfg.get("num_local_experts"))
    assert cfg["num_hidden_layers"] >= 4 and experts >= 64 and cfg["num_experts_per_tok"] <= experts // 8
    assert cfg["norm_topk_prob"] is True
    total = sum(f.stat().st_size for f in MODELS.rglob("*") if f.is_file())
    assert total < 64 * 2**20


def test_the_committed_card_is_its_saved_measurements_rendered():
    """models/tiny/README.md is `card.render` of card.json (the card's words change without re-measuring)."""
    from acceptmoe.tiny.card import render
    assert (MODELS / "README.md").read_text() == render(json.loads((MODELS / "card.json").read_text()))


def test_tokenizer_and_chat_template_load():
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(MODELS / "target")
    ids = tok.apply_chat_template([{"role": "user", "content": "2 + 2?"}], add_generation_prompt=True,
                                  tokenize=True, return_dict=False)
    assert tok.decode(ids).endswith("<|im_start|>assistant\n")
    assert tok.eos_token == "<|im_end|>"


@pytest.mark.parametrize("case", GOLDEN, ids=[g["family"] for g in GOLDEN])
def test_recorded_greedy_outputs_in_engine_and_transformers(case, engine, hf_model):
    ours = engine.generate(case["prompt_ids"], plan(engine, "vanilla-ar"), max_new_tokens=48).tokens
    assert ours == case["greedy_ids"]
    n = len(case["prompt_ids"])
    theirs = hf_model.generate(torch.tensor([case["prompt_ids"]]), max_new_tokens=48, do_sample=False,
                               eos_token_id=engine.model.config.eos_token_ids[0], pad_token_id=0)[0, n:].tolist()
    assert theirs == case["greedy_ids"]


@pytest.mark.parametrize("case", GOLDEN, ids=[g["family"] for g in GOLDEN])
def test_standard_sd_with_committed_draft_is_lossless_and_accepts(case, engine):
    gen = engine.generate(case["prompt_ids"], plan(engine, "standard-sd"), max_new_tokens=48)
    assert gen.tokens == case["greedy_ids"]
    assert gen.mean_accept_length >= 2.5


def test_engine_logits_match_transformers(engine, hf_model):
    ids = torch.tensor(GOLDEN[0]["prompt_ids"] + GOLDEN[0]["greedy_ids"][:-1])
    ours, _ = engine.model.forward(ids, torch.arange(len(ids)), engine.model.new_cache(len(ids)), 0)
    theirs = hf_model(ids[None]).logits[0].float()
    assert torch.allclose(ours, theirs, atol=1e-4, rtol=1e-4)


def test_committed_test_splits_match_the_generators():
    """The committed world was built from the current task generators: same version, same test files."""
    import hashlib

    from acceptmoe.evals import generators as tasks
    from acceptmoe.tiny.train_tiny import split_text
    manifest = json.loads((MODELS / "data" / "manifest.json").read_text())
    assert manifest["tasks_version"] == tasks.TASKS_VERSION, "retrain the tiny world after changing the tasks"
    for name, entry in manifest["files"].items():
        family = name.removesuffix("-test.jsonl")
        rows = tasks.generate(family, "test", entry["rows"])
        text = split_text(rows)
        assert hashlib.sha256(text.encode()).hexdigest() == entry["sha256"], name
        assert (MODELS / "data" / name).read_text() == text
