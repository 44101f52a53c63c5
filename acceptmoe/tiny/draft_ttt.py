"""EAGLE-3 training-time test (TTT): the draft head unrolled over whole sequences, with gradients.

`Eagle3Draft.forward` is the inference path (batch 1, no grad, writes a KV cache), so training runs the
same modules (`fc`, `midlayer.*` with its `rope`, `norm`, `lm_head`) through this batched forward, whose
attention reproduces exactly what `Eagle3Drafter` lets a tree node see.

Unrolled step s at sequence index i (the draft's prediction at depth s + 1 when x_{i+1} is the root):
  input   token x_{i+1+s}; hidden fc(target features h_i) at s = 0, else the step s-1 output at i
  RoPE    position i + s            (the drafter feeds depth-d nodes at position L - 1 + d)
  keys    step 0 at every j <= i    (the committed prefix, fed with target features)
          step t at index i, 1 <= t <= s   (the node's own fed ancestors in the tree, and itself)
  label   the target's greedy token after position i + 1 + s
Step s's loss is weighted decay ** s. SpecForge keeps the position ids of step 0 at every step; here they
advance with the step, as the drafter's do, so training and inference agree exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from acceptmoe.engine.eagle3 import Eagle3Draft
from acceptmoe.engine.layers import apply_rope

from .draft_data import IGNORE, DraftBatch


@dataclass(frozen=True)
class StepStats:
    loss: float
    accuracy: float      # top-1 agreement with the target's greedy token on labelled positions
    labels: int


def shift(x: Tensor, by: int, fill: int) -> Tensor:
    """x [B, N] -> y with y[:, i] = x[:, i + by] (fill past the end)."""
    out = torch.full_like(x, fill)
    if by < x.shape[1]:
        out[:, :x.shape[1] - by] = x[:, by:]
    return out


def ttt_attention(q: Tensor, keys: list[Tensor], values: list[Tensor]) -> Tensor:
    """q [B, N, h, d]; keys/values: one [B, N, h, d] per step so far (heads already repeated for GQA).

    Query i sees step-0 keys j <= i and, of every later step t, only the key at index i. -> [B, N, h, d]"""
    N, d = q.shape[1], q.shape[-1]
    scale = d ** -0.5
    qh = q.transpose(1, 2)                                                        # [B, h, N, d]
    k0, v0 = keys[0].transpose(1, 2), values[0].transpose(1, 2)                   # [B, h, N, d]
    causal = torch.ones(N, N, dtype=torch.bool, device=q.device).tril()
    prefix = (qh @ k0.transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))   # [B, h, N, N]
    diag = [(q * k).sum(-1).transpose(1, 2)[..., None] * scale for k in keys[1:]]     # [B, h, N, 1] each
    probs = torch.cat([prefix, *diag], dim=-1).float().softmax(-1).to(q.dtype)        # [B, h, N, N + s]
    out = probs[..., :N] @ v0                                                           # [B, h, N, d]
    for t, v in enumerate(values[1:]):
        out = out + probs[..., N + t, None] * v.transpose(1, 2)
    return out.transpose(1, 2)


def unroll(draft: Eagle3Draft, ids: Tensor, feats: Tensor, steps: int) -> list[Tensor]:
    """ids [B, N] target ids x_0..x_{N-1}; feats [B, N, 3Ht] target features h_i.

    Returns the draft's output hidden state of each step s, [B, N, H] (before the final norm)."""
    B, N = ids.shape
    layer, attn = draft.midlayer, draft.midlayer.self_attn
    heads, kv_heads, head_dim = attn.nq, attn.nkv, attn.D
    rep = heads // kv_heads
    hidden = draft.fc(feats.to(draft.dtype))                                      # [B, N, H]
    keys: list[Tensor] = []
    values: list[Tensor] = []
    outs = []
    for s in range(steps):
        positions = torch.arange(N, device=ids.device) + s                        # [N]
        embeds = draft.embed(shift(ids, 1 + s, 0))                                # [B, N, H]
        x = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(hidden)], dim=-1)   # [B, N, 2H]
        cos, sin = layer.rope(positions, x.dtype)                                 # [N, 1, d] each
        q = apply_rope(attn.q_proj(x).view(B, N, heads, head_dim), cos, sin)
        k = apply_rope(attn.k_proj(x).view(B, N, kv_heads, head_dim), cos, sin)
        v = attn.v_proj(x).view(B, N, kv_heads, head_dim)
        keys.append(k.repeat_interleave(rep, dim=2))
        values.append(v.repeat_interleave(rep, dim=2))
        o = ttt_attention(q, keys, values).reshape(B, N, heads * head_dim)
        h = hidden + attn.o_proj(o)                                               # [B, N, H]
        hidden = h + layer.mlp(layer.post_attention_layernorm(h))
        outs.append(hidden)
    return outs


def step_logits(draft: Eagle3Draft, hidden: Tensor) -> Tensor:
    """[..., H] -> fp32 logits over the draft vocabulary [..., Vd] (with gradients)."""
    return draft.lm_head(draft.norm(hidden)).float()


def draft_labels(draft: Eagle3Draft, labels: Tensor) -> Tensor:
    """Target-vocabulary labels [B, N] -> draft-vocabulary labels; tokens outside it become IGNORE."""
    if draft.draft_vocab_size == draft.vocab_size and not bool(draft.d2t.any()):
        return labels
    t2d_index = torch.full((draft.vocab_size,), IGNORE, dtype=torch.long, device=labels.device)
    t2d_index[draft.to_target(torch.arange(draft.draft_vocab_size, device=labels.device))] = \
        torch.arange(draft.draft_vocab_size, device=labels.device)
    return torch.where(labels == IGNORE, labels, t2d_index[labels.clamp_min(0)])


def ttt_loss(draft: Eagle3Draft, batch: DraftBatch, steps: int, decay: float) -> tuple[Tensor, list[StepStats]]:
    """Weighted sum over steps of the cross-entropy against the target's greedy tokens."""
    labels = draft_labels(draft, batch.labels)
    total = torch.zeros((), device=batch.ids.device)
    stats = []
    for s, hidden in enumerate(unroll(draft, batch.ids, batch.feats, steps)):
        target = shift(labels, 1 + s, IGNORE)                                     # [B, N]
        valid = target != IGNORE
        n = int(valid.sum())
        if n == 0:
            stats.append(StepStats(0.0, 0.0, 0))
            continue
        logits = step_logits(draft, hidden[valid])                                # [n, Vd], labelled only
        loss = F.cross_entropy(logits, target[valid])
        total = total + decay ** s * loss
        with torch.no_grad():
            acc = float((logits.argmax(-1) == target[valid]).float().mean())
        stats.append(StepStats(float(loss.detach()), acc, n))
    return total, stats
