"""Our MoEModel against transformers on tiny random checkpoints of every model family (Qwen3-MoE in three
variants, GPT-OSS, Mixtral, OLMoE, Qwen2-MoE, DeepSeek-V3): logits, natural routing (with the selection bias),
aux hidden states, KV-cache decoding, tree masks, cache compaction, sharded and MXFP4 loading, errors."""
import json
import shutil

import pytest
import torch

from acceptmoe.engine import mxfp4
from acceptmoe.engine.config import CheckpointError
from acceptmoe.engine.model import MoEModel

from fixtures import FAMILIES, tiny_gpt_oss, tiny_qwen3_moe, write_mxfp4_experts

VARIANTS = {
    **{family: None for family in FAMILIES},                   # the shared checkpoints (`family_checkpoint`)
    "qwen3_moe_dense_tied": (tiny_qwen3_moe, dict(mlp_only_layers=[1], norm_topk_prob=False,
                                                  tie_word_embeddings=True)),
    "qwen3_moe_sparse_step": (tiny_qwen3_moe, dict(decoder_sparse_step=2, num_hidden_layers=4)),
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def pair(request, tmp_path_factory, family_checkpoint):
    """(transformers model, our model, variant name) for each variant, fp32 on CPU."""
    if VARIANTS[request.param] is None:
        folder, hf = family_checkpoint(request.param)
    else:
        make, overrides = VARIANTS[request.param]
        folder = tmp_path_factory.mktemp(request.param)
        hf = make(folder, **overrides)
    return hf, MoEModel.from_pretrained(folder), request.param


def _prompt(n, vocab, seed=1):
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed))


def _ours(model, ids, max_len=64):
    logits, _ = model.forward(ids, torch.arange(len(ids)), model.new_cache(max_len), 0)
    return logits


def _hf_routers(hf):
    """Hook transformers' routers; returns {layer: [top-k ids of the last call]}."""
    seen = {}
    for i, layer in enumerate(hf.model.layers):
        router = getattr(layer.mlp, "gate", None) or getattr(layer.mlp, "router", None)
        if router is not None:
            router.register_forward_hook(lambda m, a, out, i=i: seen.__setitem__(i, out[2]))
    return seen


def test_logits_routing_and_aux_match_transformers(pair):
    hf, ours, name = pair
    ids = _prompt(20, ours.config.vocab_size)
    seen = _hf_routers(hf)
    with torch.no_grad():
        out = hf(ids[None], output_hidden_states=True)
    mine = {}

    def policy(layer, z):
        routed = ours.router.natural(z, bias=ours.selection_bias(layer))
        mine[layer] = routed[0]
        return routed

    aux_layers = (0, 1)
    logits, aux = ours.forward(ids, torch.arange(20), ours.new_cache(32), 0, policy=policy, aux_layers=aux_layers)
    torch.testing.assert_close(logits, out.logits[0], atol=1e-5, rtol=1e-5)
    assert set(mine) == set(seen) == set(ours.config.moe.layer_ids) == set(ours.store.layer_ids)
    for layer in seen:
        assert torch.equal(mine[layer].sort(-1).values, seen[layer].sort(-1).values), (name, layer)
    expected = torch.cat([out.hidden_states[l + 1][0] for l in aux_layers], dim=-1)
    torch.testing.assert_close(aux, expected, atol=1e-5, rtol=1e-5)


def test_config_fields(pair):
    hf, ours, name = pair
    cfg = ours.config
    assert cfg.arch == hf.config.model_type and cfg.moe.num_experts == 8 and cfg.moe.top_k == 2
    assert cfg.eos_token_ids == {"qwen3_moe": (1, 2), "gpt_oss": (3,)}.get(cfg.arch, (2,))
    if name == "qwen3_moe_dense_tied":
        assert cfg.moe.layers == (True, False, True) and ours.router.renormalize is False
    if name == "qwen3_moe_sparse_step":
        assert cfg.moe.layers == (False, True, False, True)
    if cfg.arch == "gpt_oss":
        assert cfg.attn.windows == (4, None, 4) and cfg.attn.rope.kind == "yarn"
    if name == "qwen2_moe":                                   # mlp_only_layers=[1]; a gated shared expert
        assert cfg.moe.layers == (True, False, True) and cfg.moe.shared_gate and cfg.moe.shared_intermediate_size == 48
    if name == "deepseek_v3":                                 # first_k_dense_replace=1, MLA, grouped sigmoid
        assert cfg.moe.layers == (False, True, True) and cfg.attn.latent.v_head_dim == 12 and cfg.attn.head_dim == 24
        assert (ours.router.groups, ours.router.group_top, ours.router.scale) == (4, 2, 2.5)
        assert ours.selection_bias(1).abs().sum() > 0 and ours.selection_bias(0) is None
        assert cfg.attn.rope.kind == "yarn" and ours.new_cache(4).v.shape[-1] == 12


def test_incremental_decoding_equals_full_forward(pair):
    _, ours, _ = pair
    ids = _prompt(18, ours.config.vocab_size, seed=2)
    full = _ours(ours, ids)
    cache = ours.new_cache(32)
    parts = [ours.forward(ids[:10], torch.arange(10), cache, 0)[0]]
    for t in range(10, 15):
        parts.append(ours.forward(ids[t:t + 1], torch.tensor([t]), cache, t)[0])
    parts.append(ours.forward(ids[15:], torch.arange(15, 18), cache, 15)[0])
    torch.testing.assert_close(torch.cat(parts), full, atol=1e-5, rtol=1e-5)


PARENTS = [-1, 0, 0, 1, 1, 2, 3, 6]  # root, two children, grandchildren, a depth-4 chain


def _tree(parents, start):
    """depth [T], ancestor-or-self mask [T, T], positions [T] for a parent list."""
    T = len(parents)
    depth, mask = [0] * T, torch.eye(T, dtype=torch.bool)
    for t in range(1, T):
        depth[t] = depth[parents[t]] + 1
        mask[t] |= mask[parents[t]]
    return depth, mask, torch.tensor(depth) + start


def _path(parents, t):
    path = []
    while t >= 0:
        path.append(t)
        t = parents[t]
    return path[::-1]


def test_tree_mask_equals_each_path_causally(pair):
    _, ours, _ = pair
    V, start = ours.config.vocab_size, 7
    prefix, tree_ids = _prompt(start, V, seed=3), _prompt(len(PARENTS), V, seed=4)
    cache = ours.new_cache(32)
    ours.forward(prefix, torch.arange(start), cache, 0)
    _, mask, positions = _tree(PARENTS, start)
    tree_logits, _ = ours.forward(tree_ids, positions, cache, start, mask=mask)
    for t in range(len(PARENTS)):
        seq = torch.cat((prefix, tree_ids[_path(PARENTS, t)]))
        torch.testing.assert_close(tree_logits[t], _ours(ours, seq)[-1], atol=1e-5, rtol=1e-5)


def test_keep_then_continue_equals_recomputation(pair):
    _, ours, _ = pair
    V, start = ours.config.vocab_size, 7
    prefix, tree_ids, nxt = _prompt(start, V, seed=5), _prompt(len(PARENTS), V, seed=6), _prompt(2, V, seed=7)
    cache = ours.new_cache(32)
    ours.forward(prefix, torch.arange(start), cache, 0)
    _, mask, positions = _tree(PARENTS, start)
    ours.forward(tree_ids, positions, cache, start, mask=mask)
    accepted = _path(PARENTS, 7)                                        # [0, 1, 3, 6, 7]
    cache.keep(start, accepted)
    n = start + len(accepted)
    logits, _ = ours.forward(nxt, torch.arange(n, n + 2), cache, n)
    full = _ours(ours, torch.cat((prefix, tree_ids[accepted], nxt)))
    torch.testing.assert_close(logits, full[-2:], atol=1e-5, rtol=1e-5)


def test_sharded_checkpoint_loads_identically(tmp_path):
    hf = tiny_qwen3_moe(tmp_path / "single")
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="100KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    ids = _prompt(9, 96)
    a = _ours(MoEModel.from_pretrained(tmp_path / "single"), ids)
    b = _ours(MoEModel.from_pretrained(tmp_path / "sharded"), ids)
    assert torch.equal(a, b)


def test_bf16_close_to_transformers_bf16(tmp_path):
    hf = tiny_gpt_oss(tmp_path).to(torch.bfloat16)
    ours = MoEModel.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert ours.lm_head.weight.dtype == torch.bfloat16 and ours.new_cache(4).k.dtype == torch.bfloat16
    ids = _prompt(12, 96, seed=8)
    with torch.no_grad():
        ref = hf(ids[None]).logits[0].float()
    ref32 = _ours(MoEModel.from_pretrained(tmp_path), ids)
    logits = _ours(ours, ids)
    assert (logits - ref32).abs().max() < 0.1 * ref32.abs().max()
    assert (logits - ref).abs().max() < 0.1 * ref.abs().max()


def test_mxfp4_dequantize_matches_transformers_and_hand_example():
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    g = torch.Generator().manual_seed(0)
    blocks = torch.randint(0, 256, (3, 8, 2, 16), dtype=torch.uint8, generator=g)   # [E, R, G, 16]
    scales = torch.randint(120, 134, (3, 8, 2), dtype=torch.uint8, generator=g)     # [E, R, G]
    theirs = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)        # [E, G*32, R]
    assert torch.equal(mxfp4.dequantize(blocks, scales, torch.float32), theirs.transpose(1, 2))
    # byte 0x2F: low nibble 0xF = -6.0, high nibble 0x2 = 1.0; scale 128 -> x2
    hand = mxfp4.dequantize(torch.tensor([[0x2F] + [0] * 15], dtype=torch.uint8), torch.tensor([128], dtype=torch.uint8))
    assert hand[:2].tolist() == [-12.0, 2.0] and hand[2:].abs().sum() == 0
    w = torch.randn(4, 64, generator=g)
    err = (mxfp4.dequantize(*mxfp4.quantize(w), torch.float32) - w).abs()
    assert err.max() <= w.abs().max() / 4                                 # FP4 step is at most 2**(e-1)


def test_mxfp4_checkpoint_matches_transformers_with_dequantised_experts(tmp_path):
    hf = tiny_gpt_oss(tmp_path)
    reference = write_mxfp4_experts(tmp_path)
    assert set(reference) <= set(hf.state_dict())
    hf.load_state_dict(reference, strict=False)
    ours = MoEModel.from_pretrained(tmp_path)
    assert {t.dtype for t in ours.store.weights[0].values()} == {torch.float32}   # dequantised once
    off = MoEModel.from_pretrained(tmp_path, store="offloaded", slots=3)
    assert off.store.host[0]["w1_blocks"].dtype == torch.uint8           # offloaded: host keeps it packed
    ids = _prompt(12, 96, seed=9)
    with torch.no_grad():
        ref = hf(ids[None]).logits[0]
    torch.testing.assert_close(_ours(ours, ids), ref, atol=1e-5, rtol=1e-5)
    assert torch.equal(_ours(off, ids), _ours(ours, ids))


def test_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        MoEModel.from_pretrained(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="no config.json"):
        MoEModel.from_pretrained(tmp_path)
    tiny_qwen3_moe(tmp_path / "m")
    shutil.copytree(tmp_path / "m", tmp_path / "noweights")
    (tmp_path / "noweights" / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        MoEModel.from_pretrained(tmp_path / "noweights")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**cfg, "model_type": "llama"}))
    with pytest.raises(CheckpointError, match="unsupported model_type 'llama'.*qwen3_moe, gpt_oss"):
        MoEModel.from_pretrained(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(json.dumps({**cfg, "hidden_act": "gelu"}))
    with pytest.raises(CheckpointError, match="hidden_act 'gelu' is not supported"):
        MoEModel.from_pretrained(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="dtype 'int8' not supported"):
        MoEModel.from_pretrained(tmp_path / "m", dtype="int8")
    (tmp_path / "m" / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 4}))
    with pytest.raises(CheckpointError, match="no tensor 'model.layers.3"):
        MoEModel.from_pretrained(tmp_path / "m")


@pytest.mark.parametrize("damage", ["truncated", "corrupted", "empty"])
def test_a_damaged_safetensors_file_is_a_user_error_naming_it(tmp_path, damage):
    from acceptmoe.errors import UserError

    tiny_qwen3_moe(tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    raw = weights.read_bytes()
    if damage == "truncated":
        raw = raw[: len(raw) // 2]
    elif damage == "corrupted":
        raw = raw[:8] + b"#" * 64 + raw[72:]  # inside the JSON header
    else:
        raw = b""
    weights.write_bytes(raw)
    with pytest.raises(UserError, match=f"{weights}.*truncated or corrupted.*again") as info:
        MoEModel.from_pretrained(tmp_path / "m")
    assert isinstance(info.value, CheckpointError)


def test_frozen_linear_is_f_linear_bit_for_bit_in_one_op():
    from torch import nn
    from torch.nn import functional as F

    from acceptmoe.engine.layers import Linear
    from acceptmoe.tools.bench.engine_speed import AtenCounter
    torch.manual_seed(0)
    for bias in (False, True):
        lin = Linear(24, 40, bias=bias).requires_grad_(False)
        x = torch.randn(7, 24)
        want = F.linear(x, lin.weight, lin.bias)
        lin.freeze()
        with AtenCounter() as c:
            got = lin(x)
        assert torch.equal(got, want) and c.total == 1                     # mm / addmm, no transpose
        assert torch.equal(lin(x[None])[0], F.linear(x[None], lin.weight, lin.bias)[0])   # 3-D: F.linear
        lin.weight = nn.Parameter(torch.randn(40, 24), requires_grad=False)   # replaced after freeze
        assert torch.equal(lin(x), F.linear(x, lin.weight, lin.bias))
