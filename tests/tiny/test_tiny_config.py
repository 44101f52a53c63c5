"""The tiny-world config (unknown keys rejected) and the target's training pieces (encoding, schedule, size)."""
import dataclasses

import pytest

from acceptmoe.tiny import config as tiny_config
from acceptmoe.tiny import train_target


def test_default_config_loads():
    cfg = tiny_config.load()
    assert cfg.target.top_k * 8 <= cfg.target.num_experts and cfg.target.num_layers >= 4


def test_unknown_key_is_an_error(tmp_path):
    path = tmp_path / "world.yaml"
    path.write_text("train:\n  learning_rate: 0.1\n")
    with pytest.raises(tiny_config.TinyConfigError, match="unknown key.*learning_rate.*valid keys"):
        tiny_config.load(path)
    path.write_text("extra: 1\n")
    with pytest.raises(tiny_config.TinyConfigError, match="extra"):
        tiny_config.load(path)


def test_values_are_coerced_and_checked(tmp_path):
    path = tmp_path / "world.yaml"
    path.write_text("train:\n  lr: 3e-3\n")          # YAML 1.1 reads this as a string
    assert tiny_config.load(path).train.lr == pytest.approx(3e-3)
    path.write_text("target:\n  num_experts: 64\n  top_k: 16\n")
    with pytest.raises(tiny_config.TinyConfigError, match="top_k"):
        tiny_config.load(path)


def test_lr_schedule():
    cfg = dataclasses.replace(tiny_config.TrainConfig(), max_tokens=1000, warmup_frac=0.1, lr=1.0, min_lr_ratio=0.1)
    assert train_target.lr_at(50, cfg) == pytest.approx(0.5)
    assert train_target.lr_at(100, cfg) == pytest.approx(1.0)
    assert train_target.lr_at(1000, cfg) == pytest.approx(0.1)
    assert train_target.lr_at(5000, cfg) == pytest.approx(0.1)


def test_encode_masks_the_prompt(tmp_path):
    from transformers import AutoTokenizer

    from acceptmoe.evals import generators as tasks
    from acceptmoe.tiny import tokenizer

    examples = [e for f in tasks.FAMILIES for e in tasks.generate(f, "train", 100)]
    tokenizer.build(tokenizer.corpus(examples), 400, tmp_path)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    ex = examples[0]
    ids, labels = train_target.encode(tok, ex)
    prompt = tok.apply_chat_template([{"role": "user", "content": ex["question"]}], add_generation_prompt=True,
                                     tokenize=False)
    n_prompt = len(tok(prompt, add_special_tokens=False)["input_ids"])
    assert labels[:n_prompt] == [-100] * n_prompt and ids[n_prompt:] == labels[n_prompt:]
    assert labels[-1] == tok.eos_token_id
    assert tok.decode(ids[n_prompt:-1]) == ex["reference"]
    model = train_target.build_model(tiny_config.load().target, tok, seed=0)
    assert train_target.count_params(model) <= 8_000_000
    assert model.config.norm_topk_prob and model.config.output_router_logits


def test_mixture_section(tmp_path):
    path = tmp_path / "world.yaml"
    path.write_text("train:\n  mixture:\n    gsm: 3\n    math: 2\n")
    weights = tiny_config.load(path).train.mixture.weights()
    assert weights == {"tiny-gsm": 3, "tiny-math": 2, "tiny-humaneval": 1, "tiny-mbpp": 1}
    path.write_text("train:\n  mixture:\n    code: 1\n")
    with pytest.raises(tiny_config.TinyConfigError, match="unknown key.*code.*valid keys"):
        tiny_config.load(path)
    path.write_text("train:\n  mixture:\n    gsm: 0\n    math: 0\n    humaneval: 0\n    mbpp: 0\n")
    with pytest.raises(tiny_config.TinyConfigError, match="at least one positive"):
        tiny_config.load(path)


def test_another_world_changes_the_weights_seed_only(tmp_path):
    """`train-tiny --seed S`: the data and tokenizer keep `seed`, the weights start from S."""
    from acceptmoe.tiny import train_tiny

    cfg = tiny_config.load()
    assert cfg.weights_seed is None and cfg.init_seed == cfg.seed
    path = tmp_path / "world.yaml"
    path.write_text("weights_seed: 7\n")
    other = tiny_config.load(path)
    assert (other.seed, other.init_seed) == (cfg.seed, 7)
    path.write_text("weights_seed: seven\n")
    with pytest.raises(tiny_config.TinyConfigError, match="weights_seed"):
        tiny_config.load(path)
    for seed, out in ((None, tmp_path / "a"), (7, tmp_path / "b")):
        args = ["--stages", "data", "--out", str(out)] + ([] if seed is None else ["--seed", str(seed)])
        assert train_tiny.main(args) == 0
    assert (tmp_path / "a/data/manifest.json").read_text() == (tmp_path / "b/data/manifest.json").read_text()
