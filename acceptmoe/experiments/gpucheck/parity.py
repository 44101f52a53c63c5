"""gpu-check's parity check: our logits against transformers' on small random Qwen3-MoE and GPT-OSS
checkpoints, fp32 and bf16. Its configs and `spread` are the tests' fixtures too (tests/fixtures.py)."""
from __future__ import annotations

from pathlib import Path

import torch

from .base import verdict

# small random configs: the parity check here and the tests' fixtures
QWEN3_SMALL = dict(vocab_size=96, hidden_size=64, intermediate_size=80, moe_intermediate_size=32,
                   num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, eos_token_id=[1, 2])
GPT_OSS_SMALL = dict(vocab_size=96, hidden_size=64, intermediate_size=32, num_hidden_layers=3,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=8,
                     num_experts_per_tok=2, sliding_window=4, eos_token_id=3,
                     layer_types=["sliding_attention", "full_attention", "sliding_attention"])


def random_checkpoint(kind: str, folder: Path, seed: int = 0):
    """A small random Qwen3-MoE ("qwen3_moe") or GPT-OSS ("gpt_oss") checkpoint saved to folder, with router
    weights spread (no near-ties) and, for GPT-OSS, expert weights and sinks large enough to matter."""
    from transformers import GptOssConfig, GptOssForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM
    torch.manual_seed(seed)
    if kind == "qwen3_moe":
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**QWEN3_SMALL)).eval()
    else:
        model = GptOssForCausalLM(GptOssConfig(**GPT_OSS_SMALL)).eval()
    spread(model, kind)
    model.save_pretrained(folder)
    return model


def spread(model, kind: str) -> None:
    """Router weights larger than the default init, so top-k choices are well separated (no near-ties); for
    GPT-OSS also expert weights, biases and sinks large enough that the SwiGLU clamps and the sinks matter."""
    with torch.no_grad():
        for layer in model.model.layers:
            router = getattr(layer.mlp, "gate", None) or getattr(layer.mlp, "router", None)
            if router is not None:                       # dense layers have none
                router.weight.normal_(0.0, 0.5)
        for layer in model.model.layers if kind == "gpt_oss" else ():
            layer.mlp.experts.gate_up_proj.normal_(0.0, 1.0)
            layer.mlp.experts.gate_up_proj_bias.normal_(0.0, 1.0)
            layer.mlp.experts.down_proj_bias.normal_(0.0, 0.1)
            layer.self_attn.sinks.normal_(0.0, 2.0)


def check_parity(device, folder: Path, tokens: int = 24, load=None) -> dict:
    """Our logits vs transformers' on the same random checkpoints: relative max error (to max |logit|)
    <= 1e-4 in fp32 and <= 0.1 in bf16 (both sides in that dtype), plus top-1 agreement. load(path, device,
    dtype) -> our model (default `MoEModel.from_pretrained`)."""
    from acceptmoe.engine.model import MoEModel
    load = load or (lambda path, device, dtype: MoEModel.from_pretrained(path, device=device, dtype=dtype))
    device, rows, ok = torch.device(device), [], True
    for kind in ("qwen3_moe", "gpt_oss"):
        hf = random_checkpoint(kind, Path(folder) / kind)
        ids = torch.randint(0, 96, (tokens,), generator=torch.Generator().manual_seed(1))
        for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 0.1)):
            ours = load(Path(folder) / kind, device, dtype)
            logits, _ = ours.forward(ids.to(device), torch.arange(tokens, device=device),
                                     ours.new_cache(tokens), 0)
            with torch.no_grad():
                ref = hf.to(device=device, dtype=dtype)(ids[None].to(device)).logits[0].float()
            rel = float((logits - ref).abs().max() / ref.abs().max())
            top1 = float((logits.argmax(-1) == ref.argmax(-1)).float().mean())
            rows.append({"model": kind, "dtype": str(dtype)[6:], "rel_max_err": rel, "top1_agree": top1,
                         "tolerance": tol})
            ok &= rel <= tol
    return {"check": "parity", "verdict": verdict(ok), "rows": rows}
