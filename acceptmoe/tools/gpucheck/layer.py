"""A random MoE at a layer shape (no checkpoint) and its target passes as steps: what the layer-shape graphs
check captures and the layer-shape timing times.

    work = layer_work("cuda", QWEN3_30B_LAYERS, torch.bfloat16)      # after a 256-token prefill
    steps = StepGraphs("cuda", "graphs", state=(work.model.store.tally,))
    for name, (step, inputs) in work.passes(steps).items():          # decode, verify (natural), verify (AcceptMoE)
        logits = steps.run(step, inputs[0])[0]
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from acceptmoe.engine.graphs import StepGraphs
from acceptmoe.engine.passes import TargetPass
from acceptmoe.methods import B0_METHOD, Fit, Variant

from .base import P_HAT, random_block

# Qwen3-30B-A3B's MoE layer shape, 4 layers
QWEN3_30B_LAYERS = dict(hidden_size=2048, moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
                        num_hidden_layers=4, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                        vocab_size=4096, intermediate_size=6144)


def random_model(shape: dict, device, dtype=torch.bfloat16, seed: int = 0):
    """A MoEModel with random weights built in memory (no checkpoint): Qwen3-MoE config `shape`."""
    from torch import nn

    from acceptmoe.engine.config import ModelConfig
    from acceptmoe.engine.model import MoEModel, _build_skeleton
    from acceptmoe.engine.store import ExpertMath, make_store
    raw = dict(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], rms_norm_eps=1e-6,
               rope_theta=1e6, max_position_embeddings=4096, norm_topk_prob=True, eos_token_id=2,
               torch_dtype="bfloat16", **shape)
    cfg = ModelConfig.from_dict(raw, ())
    torch.manual_seed(seed)
    device = torch.device(device)
    state = {n: (torch.ones(p.shape) if n.endswith("norm.weight") else torch.randn(p.shape) * 0.02)
             for n, p in _build_skeleton(nn.Module(), cfg).named_parameters()}
    E, H, I = cfg.moe.num_experts, cfg.hidden_size, shape["moe_intermediate_size"]
    experts = {l: {"w1": torch.randn(E, 2 * I, H, device=device, dtype=dtype) * 0.02,
                   "w2": torch.randn(E, H, I, device=device, dtype=dtype) * 0.02} for l in cfg.moe.layer_ids}
    store = make_store("resident", ExpertMath(cfg.moe.activation, dtype), experts, E, device)
    return MoEModel(cfg, store, state, device, dtype)


@dataclass
class LayerWork:
    """A random model after a `context`-token prompt, two decode inputs and two verify inputs of one random
    draft tree (different tokens, so a replay that kept its first inputs would show), and AcceptMoE's verifier
    prepared for that tree."""
    model: object
    verifier: object
    prompt: Tensor                 # [context]
    context: int
    tree_tokens: int
    decode: tuple[dict, dict]
    verify: tuple[dict, dict]

    def prefilled(self, max_len: int):
        """A fresh cache of max_len slots holding the prompt (eager prefill)."""
        cache = self.model.new_cache(max_len)
        self.model.forward(self.prompt, torch.arange(self.context, device=self.prompt.device), cache, 0)
        return cache

    def passes(self, steps: StepGraphs) -> dict[str, tuple[TargetPass, tuple[dict, dict]]]:
        """name -> (step, its two inputs): decode, verify with natural routing and with AcceptMoE, as the engine
        builds them (`TargetPass` over the cache prefix each reads) on `steps`' persistent cache, prefilled."""
        end = self.context + self.tree_tokens
        held = steps.cache("target", end + 1, self.prefilled)
        return {"decode": (TargetPass(self.model, held.upto(self.context + 1)), self.decode),
                "verify, natural routing": (TargetPass(self.model, held.upto(end)), self.verify),
                "verify, AcceptMoE": (TargetPass(self.model, held.upto(end), self.verifier), self.verify)}


def layer_work(device, shape: dict = QWEN3_30B_LAYERS, dtype=torch.bfloat16, context: int = 256,
               tree_tokens: int = 64) -> LayerWork:
    from acceptmoe.engine.tree import DraftTree
    from acceptmoe.kernels import make_verifier
    device = torch.device(device)
    model = random_model(shape, device, dtype)
    gen = torch.Generator().manual_seed(0)
    V = model.config.vocab_size
    prompt = torch.randint(0, V, (context,), generator=gen).to(device)
    block = random_block(tree_tokens, gen)
    plan = Variant(B0_METHOD).bind(Fit(model.router, model.config.moe.num_experts, max_depth=5), commitment=P_HAT)
    verifier = make_verifier("auto", plan, device)
    verifier.prepare([block])
    decode, verify = [], []
    for _ in range(2):
        tree = DraftTree.from_parents(torch.randint(0, V, (tree_tokens,), generator=gen), block.parents, context)
        verify.append({"ids": tree.tokens.to(device), "positions": tree.positions.to(device), "start": context,
                       "mask": tree.mask.to(device)})
        decode.append({"ids": torch.randint(0, V, (1,), generator=gen).to(device),
                       "positions": torch.tensor([context], device=device), "start": context})
    return LayerWork(model, verifier, prompt, context, tree_tokens, tuple(decode), tuple(verify))
