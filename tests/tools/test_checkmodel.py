"""`./reproduce.sh check-model`: exit 0 with parity on every family's tiny random checkpoint (and a draft's
acceptance), one `error:` line and exit 2 on a damaged checkpoint and on a family the engine does not serve."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from acceptmoe.cli import main

from fixtures import FAMILIES


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_checks_out(family, family_checkpoint, capsys):
    folder, _ = family_checkpoint(family)
    assert main(["check-model", "--model", str(folder), "--prompts", "2", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["family"] == family and r["logits"]["greedy_agreement"] == 1.0 and r["logits"]["max_rel_diff"] < 1e-5
    assert r["router_kind"] == ("sigmoid_grouped" if family == "deepseek_v3" else r["router_kind"])
    assert set(r["methods"].values()) == {"ok"} and r["backends"]["reference"] == "all methods"
    assert r["memory"]["experts_per_layer"] == 8 and r["memory"]["gpus"][0]["fits"] == "resident"


def test_a_draft_reports_its_format_and_acceptance(family_checkpoint, tmp_path, capsys):
    from engine.spec_checkpoints import draft_config, make_draft
    draft = make_draft(tmp_path / "draft", seed=3, config=draft_config(64, vocab_size=96), vocab=96, draft_vocab=64)
    folder, _ = family_checkpoint("qwen3_moe")
    assert main(["check-model", "--model", str(folder), "--draft", str(draft), "--prompts", "1", "--tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert "EAGLE-3" in out and "acceptance  tau" in out and "same tokens as vanilla-ar: True" in out


def _damage(folder, how):
    weights, config = folder / "model.safetensors", folder / "config.json"
    if how == "truncated":
        weights.write_bytes(weights.read_bytes()[:5000])
    elif how == "missing tensor":
        state = load_file(weights)
        del state["model.layers.1.self_attn.o_proj.weight"]
        save_file(state, weights, metadata={"format": "pt"})
    elif how == "bad config":
        config.write_text(config.read_text()[:40])
    elif how == "quantized":                  # weights the engine cannot read (DeepSeek-V3's released fp8)
        raw = json.loads(config.read_text())
        config.write_text(json.dumps({**raw, "quantization_config": {"quant_method": "fp8"}}))
    else:                                     # config.json without a field the family needs
        raw = json.loads(config.read_text())
        del raw["moe_intermediate_size"]
        config.write_text(json.dumps(raw))


@pytest.mark.parametrize("how, message", [
    ("truncated", "truncated or corrupted"), ("missing tensor", "no tensor 'model.layers.1.self_attn.o_proj.weight'"),
    ("bad config", "not valid JSON"), ("missing field", "lacks 'moe_intermediate_size'"),
    ("quantized", "'fp8'-quantized weights")])
def test_a_damaged_checkpoint_is_one_error_line(how, message, family_checkpoint, tmp_path, capsys):
    shutil.copytree(family_checkpoint("qwen2_moe")[0], tmp_path / "m")
    _damage(tmp_path / "m", how)
    assert main(["check-model", "--model", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err


def test_an_unsupported_family_is_one_error_line_naming_the_supported(tmp_path, capsys):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1)).save_pretrained(tmp_path / "llama")
    capsys.readouterr()
    assert main(["check-model", "--model", str(tmp_path / "llama")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unsupported model_type 'llama'" in err and "deepseek_v3" in err
