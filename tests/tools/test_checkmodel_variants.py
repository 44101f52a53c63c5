"""`check-model` over config variants of every model family: each variant is a config transformers accepts, built
and saved as a tiny random checkpoint with transformers' own classes (`acceptmoe.testing.random_checkpoint`, two
layers), and run through the command itself (`cli.main`). It must either check out (logits within 1e-5 of
transformers' relative to the largest logit, the same greedy token everywhere) or be refused from config.json
alone, before any weight is read, with one `error:` line naming the setting. A variant transformers itself
cannot build or run is skipped, saying so.

Property-style: per family, axes of settings (heads vs KV heads: MHA, GQA, MQA, and DeepSeek-V3's latent-attention
widths; odd expert counts with top-k 1 and above 4; shared experts on and off; dense first layers; tied
embeddings; RoPE default, linear, llama3 and YaRN; windows, biases, router normalisation), combined by a seeded
generator so that every value of every axis occurs in some variant and the combinations differ between axes.
"""
from __future__ import annotations

import json
import random

import pytest
import torch

from acceptmoe.cli import main
from acceptmoe.testing import SMALL, random_checkpoint

# transformers builds a zero-width shared-expert MLP where a variant has none (Qwen2-MoE, DeepSeek-V3, dots.llm1)
pytestmark = pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op:UserWarning")

SEED = 20240601
EXTRA = 2                     # variants per family beyond the fewest that cover every axis value


def _rope(kind: str, **more) -> dict:
    base = {"default": {}, "linear": {"factor": 2.0},
            "yarn": {"factor": 4.0, "original_max_position_embeddings": 32},
            "llama3": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 32}}.get(kind, {})
    return {"rope_parameters": {"rope_type": kind, "rope_theta": 10000.0, **base, **more}}


ROPES = [_rope("default"), _rope("linear"), _rope("yarn"), _rope("llama3")]
TIED = [{"tie_word_embeddings": False}, {"tie_word_embeddings": True}]
HIDDEN = [{"hidden_size": 64}, {"hidden_size": 32}]
# (heads, kv heads, head_dim): MHA, GQA 2, MQA, GQA 4 with a head_dim that is not hidden / heads
HEADS = [dict(num_attention_heads=h, num_key_value_heads=kv, head_dim=d) for h, kv, d in
         ((4, 4, 16), (4, 2, 8), (4, 1, 16), (8, 2, 8))]
HEADS_NO_DIM = [{k: v for k, v in h.items() if k != "head_dim"} for h in HEADS]    # head_dim = hidden / heads
SOFTMAX_EXPERTS = [dict(e, num_experts_per_tok=k) for e, k in
                   (({"num_experts": 5}, 1), ({"num_experts": 7}, 5), ({"num_experts": 6}, 2), ({"num_experts": 9}, 6))]
LOCAL_EXPERTS = [dict(num_local_experts=e["num_experts"], num_experts_per_tok=e["num_experts_per_tok"])
                 for e in SOFTMAX_EXPERTS]
# sigmoid_grouped: (experts, top-k, groups, groups chosen), each top-k within the chosen groups' experts
GROUPED_EXPERTS = [dict(n_routed_experts=e, num_experts_per_tok=k, n_group=g, topk_group=t) for e, k, g, t in
                   ((5, 1, 1, 1), (7, 5, 1, 1), (9, 6, 3, 3), (8, 3, 4, 2), (6, 2, 3, 2))]
WINDOWED = lambda types, w=4: {"layer_types": types, "sliding_window": w}           # noqa: E731

AXES = {
    "qwen3_moe": {
        "heads": HEADS, "hidden": HIDDEN, "experts": SOFTMAX_EXPERTS, "tied": TIED, "rope": ROPES,
        "norm": [{"norm_topk_prob": True}, {"norm_topk_prob": False}],
        "dense": [{}, {"decoder_sparse_step": 2}, {"mlp_only_layers": [0]}],
        "bias": [{"attention_bias": False}, {"attention_bias": True}],
        "window": [{}, {"use_sliding_window": True, "sliding_window": 4}],
    },
    "gpt_oss": {
        "heads": HEADS, "hidden": HIDDEN, "experts": LOCAL_EXPERTS, "tied": TIED,
        "rope": [{}, _rope("default"), _rope("linear"), _rope("yarn", beta_fast=16.0, truncate=False)],
        "layers": [WINDOWED(["sliding_attention", "full_attention"]), WINDOWED(["full_attention"] * 2),
                   WINDOWED(["sliding_attention"] * 2, 3)],
        "bias": [{"attention_bias": True}, {"attention_bias": False}],
        "clamp": [{"swiglu_limit": 7.0}, {"swiglu_limit": 2.0}],
    },
    "mixtral": {
        "heads": HEADS + [dict(HEADS_NO_DIM[1], head_dim=None)], "hidden": HIDDEN, "experts": LOCAL_EXPERTS,
        "tied": TIED, "rope": ROPES, "window": [{"sliding_window": None}, {"sliding_window": 4}],
    },
    "olmoe": {
        "heads": HEADS_NO_DIM, "hidden": HIDDEN, "experts": SOFTMAX_EXPERTS, "tied": TIED, "rope": ROPES,
        "norm": [{"norm_topk_prob": False}, {"norm_topk_prob": True}],
        "bias": [{"attention_bias": False}, {"attention_bias": True}],
    },
    "qwen2_moe": {
        "heads": HEADS, "hidden": HIDDEN, "experts": SOFTMAX_EXPERTS, "tied": TIED, "rope": ROPES,
        "shared": [{"shared_expert_intermediate_size": 48}, {"shared_expert_intermediate_size": 0}],
        "norm": [{"norm_topk_prob": True}, {"norm_topk_prob": False}],
        "dense": [{"mlp_only_layers": []}, {"mlp_only_layers": [1]}, {"mlp_only_layers": [], "decoder_sparse_step": 2}],
        "bias": [{"qkv_bias": True}, {"qkv_bias": False}],
        "window": [{}, {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 2},
                   {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 1}],
    },
    "deepseek_v3": {
        "heads": HEADS_NO_DIM, "hidden": HIDDEN, "experts": GROUPED_EXPERTS, "tied": TIED,
        "latent": [dict(q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12),
                   dict(q_lora_rank=None, kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=16),
                   dict(q_lora_rank=16, kv_lora_rank=32, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8)],
        "interleave": [{"rope_interleave": True}, {"rope_interleave": False}],
        "rope": ROPES[:3] + [_rope("yarn", mscale=0.707, mscale_all_dim=0.707), _rope("yarn", mscale_all_dim=1.0)],
        "shared": [{"n_shared_experts": 1}, {"n_shared_experts": 0}, {"n_shared_experts": 2}],
        "dense": [{"first_k_dense_replace": 1}, {"first_k_dense_replace": 0}],
        "router": [{"norm_topk_prob": True, "routed_scaling_factor": 2.5},
                   {"norm_topk_prob": False, "routed_scaling_factor": 1.0}],
        "bias": [{"attention_bias": False}, {"attention_bias": True}],
    },
    "dots1": {
        "heads": HEADS, "hidden": HIDDEN, "experts": GROUPED_EXPERTS, "tied": TIED, "rope": ROPES,
        "shared": [{"n_shared_experts": 1}, {"n_shared_experts": 0}, {"n_shared_experts": 2}],
        "dense": [{"first_k_dense_replace": 1}, {"first_k_dense_replace": 0}],
        "router": [{"norm_topk_prob": True, "routed_scaling_factor": 2.5},
                   {"norm_topk_prob": False, "routed_scaling_factor": 1.0}],
        "layers": [WINDOWED(["full_attention", "sliding_attention"]), WINDOWED(["full_attention"] * 2),
                   {"layer_types": None, "sliding_window": 3, "max_window_layers": 1}],
        "bias": [{"attention_bias": False}, {"attention_bias": True}],
    },
}
assert set(AXES) == set(SMALL), "every model family has its variant axes"


def variants(family: str) -> list[dict]:
    """Seeded combinations of `AXES[family]`: variant i takes value perm[i % n] of each axis (a random order per
    axis), so the first max(n) variants hold every value of every axis; EXTRA more draw each axis at random."""
    rng = random.Random(f"{SEED}:{family}")
    axes = AXES[family]
    count = max(len(v) for v in axes.values())
    orders = {a: rng.sample(range(len(v)), len(v)) for a, v in axes.items()}
    out = []
    for i in range(count + EXTRA):
        chosen = {a: (orders[a][i % len(v)] if i < count else rng.randrange(len(v))) for a, v in axes.items()}
        settings = {"num_hidden_layers": 2}
        for a, j in chosen.items():
            settings.update(axes[a][j])
        out.append(settings)
    return out


CASES = [(family, i, v) for family in AXES for i, v in enumerate(variants(family))]


def _build(folder, family: str, settings: dict, seed: int):
    """The transformers model of a variant, saved to folder; skips (saying why) where transformers refuses it."""
    try:
        return random_checkpoint(family, folder, seed, **settings)
    except Exception as exc:  # noqa: BLE001 - transformers' own refusal of the config: not ours to judge
        pytest.skip(f"transformers cannot build this {family} config ({type(exc).__name__}: {exc})")


def _check(folder, capsys) -> tuple[int, dict | None, str]:
    capsys.readouterr()
    rc = main(["check-model", "--model", str(folder), "--prompts", "3", "--json"])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 else None), err


def _skip_if_transformers_fails(hf, family: str, vocab: int) -> None:
    """Skip where transformers' own forward fails on the variant too (the reference cannot judge it)."""
    try:
        with torch.no_grad():
            hf(torch.arange(16)[None] % vocab)
    except Exception as exc:  # noqa: BLE001 - transformers' own failure
        pytest.skip(f"transformers cannot run this {family} config ({type(exc).__name__}: {exc})")


@pytest.mark.parametrize("family, index, settings", CASES, ids=[f"{f}-{i}" for f, i, _ in CASES])
def test_a_config_variant_checks_out_against_transformers(family, index, settings, tmp_path, capsys):
    hf = _build(tmp_path / "m", family, settings, seed=index)
    rc, report, err = _check(tmp_path / "m", capsys)
    if rc == 2 and err.startswith("error: transformers"):
        _skip_if_transformers_fails(hf, family, hf.config.vocab_size)
    assert rc == 0, f"{family} {settings}: {err}"
    lg = report["logits"]
    assert lg["max_rel_diff"] < 1e-5 and lg["greedy_agreement"] == 1.0, f"{family} {settings}: {lg}"
    experts = next(settings[k] for k in ("num_experts", "num_local_experts", "n_routed_experts") if k in settings)
    assert report["memory"]["experts_per_layer"] == experts


@pytest.mark.parametrize("kv_heads", [2, 1])
def test_deepseek_v3_with_fewer_kv_heads_than_heads_checks_out(kv_heads, tmp_path, capsys):
    """Latent attention gives every head its own key and value (kv_b_proj), so num_key_value_heads shapes no
    weight; transformers 5 repeats those keys heads / kv_heads times and fails on its own checkpoint. check-model
    compares against the same class loaded with num_key_value_heads = num_attention_heads, and says so."""
    random_checkpoint("deepseek_v3", tmp_path / "m", num_key_value_heads=kv_heads)
    rc, report, err = _check(tmp_path / "m", capsys)
    assert rc == 0, err
    assert report["reference"]["overrides"] == {"num_key_value_heads": 4}
    assert report["logits"]["max_rel_diff"] < 1e-5 and report["logits"]["greedy_agreement"] == 1.0
    assert main(["check-model", "--model", str(tmp_path / "m"), "--prompts", "1"]) == 0
    assert "loaded with num_key_value_heads=4" in capsys.readouterr().out


# variants the engine refuses by name: (family, settings transformers accepts, the setting the error names)
REFUSED = [
    ("qwen3_moe", _rope("dynamic", factor=2.0), "rope_type 'dynamic'"),
    ("gpt_oss", _rope("dynamic", factor=2.0), "rope_type 'dynamic'"),
    ("mixtral", {"hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ("qwen2_moe", {"hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ("olmoe", {"clip_qkv": 1.0}, "clip_qkv=1.0"),
    # transformers runs it, picking experts outside the chosen groups at score 0 (ties in any order)
    ("deepseek_v3", dict(n_routed_experts=8, num_experts_per_tok=3, n_group=4, topk_group=1), "topk_group=1"),
    # transformers cannot run these (groups of one expert; more experts per token than experts)
    ("dots1", dict(n_routed_experts=6, num_experts_per_tok=2, n_group=6, topk_group=2), "n_group=6"),
    ("qwen3_moe", {"num_experts": 4, "num_experts_per_tok": 5}, "num_experts_per_tok=5"),
]


@pytest.mark.parametrize("family, settings, named", REFUSED, ids=[f"{f}-{n.split()[0].split('=')[0]}"
                                                                  for f, _, n in REFUSED])
def test_an_unsupported_variant_is_refused_from_config_json_by_name(family, settings, named, tmp_path, capsys):
    two_layers = {"num_hidden_layers": 2, "layer_types": None} if family in ("gpt_oss", "dots1") else {}
    random_checkpoint(family, tmp_path / "m", **two_layers, **settings)
    (tmp_path / "m" / "model.safetensors").unlink()             # refused before any weight is read
    capsys.readouterr()
    assert main(["check-model", "--model", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and named in err, err


def test_a_reference_that_cannot_run_is_one_error_line(family_checkpoint, monkeypatch, capsys):
    """transformers failing inside its forward (as DeepSeek-V3 did with fewer KV heads) is an `error:` line."""
    from acceptmoe.tools import checkmodel

    class Broken(torch.nn.Module):
        def forward(self, ids):
            raise RuntimeError("The size of tensor a (4) must match the size of tensor b (8)\nat dimension 1")

    monkeypatch.setattr(checkmodel, "reference_model", lambda *a, **k: Broken())
    folder, _ = family_checkpoint("olmoe")
    assert main(["check-model", "--model", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "transformers' Broken cannot run this checkpoint (RuntimeError: The size" in err
