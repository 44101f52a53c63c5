"""Training data of the tiny EAGLE-3 draft: the target's own greedy replies and, per position, its fused
aux-layer features and greedy next token.

    seqs = build(model, tok, questions, aux_ids, max_new_tokens, batch_size)   # list[DraftSequence]
    for batch in batches(seqs, batch_size, rng): ...                          # DraftBatch, padded

`model` is the target as a transformers `Qwen3MoeForCausalLM` (batched, left-padded greedy generation,
then one right-padded forward with `output_hidden_states`). The features at position j are the outputs of
decoder layers `aux_ids` (transformers' `hidden_states[l + 1]`), the same residual stream that
`MoEModel.forward(..., aux_layers=aux_ids)` returns to the engine's drafter.

Labels: position j carries the target's argmax after x_0..x_j where that token is one the draft may have to
propose at inference, i.e. a reply token after the first one (the first comes from the prefill pass), up to
and including the EOS; elsewhere -100 (no loss).
"""
from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .tokenizer import chat_text

IGNORE = -100


@dataclass(frozen=True)
class DraftSequence:
    ids: Tensor       # [n] long: prompt + greedy reply (EOS included when the target stopped)
    feats: Tensor     # [n, 3 * Ht] fp32: aux-layer outputs at each position
    labels: Tensor    # [n] long: target argmax after position j, IGNORE outside the reply
    prompt_len: int


@dataclass(frozen=True)
class DraftBatch:
    ids: Tensor       # [B, N] long, right-padded with 0
    feats: Tensor     # [B, N, 3 * Ht] fp32, zero-padded
    labels: Tensor    # [B, N] long, IGNORE on padding

    def to(self, device) -> DraftBatch:
        return DraftBatch(self.ids.to(device), self.feats.to(device), self.labels.to(device))

    @property
    def num_labels(self) -> int:
        return int((self.labels != IGNORE).sum())


@torch.inference_mode()
def greedy_replies(model, tok, prompts: list[list[int]], max_new_tokens: int, batch_size: int) -> list[list[int]]:
    """The target's greedy reply ids to each tokenised prompt, cut after the first EOS."""
    eos = tok.eos_token_id
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos    # a tokenizer without a pad token: EOS
    replies: list[list[int]] = [[] for _ in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    for lo in range(0, len(order), batch_size):
        rows = order[lo:lo + batch_size]
        width = max(len(prompts[i]) for i in rows)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)              # [B, P] left-padded
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, i in enumerate(rows):
            ids[r, width - len(prompts[i]):] = torch.tensor(prompts[i])
            mask[r, width - len(prompts[i]):] = 1
        out = model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                             max_new_tokens=max_new_tokens, do_sample=False,
                             eos_token_id=eos, pad_token_id=pad)
        for r, i in enumerate(rows):
            new = out[r, width:].tolist()
            replies[i] = new[:new.index(eos) + 1] if eos in new else new
    return replies


@torch.inference_mode()
def target_features(model, seqs: list[list[int]], aux_ids: Sequence[int], batch_size: int
                    ) -> list[tuple[Tensor, Tensor]]:
    """Per sequence: (fused aux features [n, 3 * Ht] fp32, target argmax after each position [n])."""
    out: list[tuple[Tensor, Tensor] | None] = [None] * len(seqs)
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    for lo in range(0, len(order), batch_size):
        rows = order[lo:lo + batch_size]
        width = max(len(seqs[i]) for i in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)                 # [B, N] right-padded
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, i in enumerate(rows):
            ids[r, :len(seqs[i])], mask[r, :len(seqs[i])] = torch.tensor(seqs[i]), 1
        res = model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device), output_hidden_states=True,
                    use_cache=False)
        fused = torch.cat([res.hidden_states[l + 1] for l in aux_ids], dim=-1).float()   # [B, N, 3Ht]
        argmax = res.logits.argmax(-1)                                                   # [B, N]
        for r, i in enumerate(rows):
            n = len(seqs[i])
            out[i] = (fused[r, :n].cpu().clone(), argmax[r, :n].cpu().clone())     # kept on the host
    return out  # type: ignore[return-value]


def build(model, tok, questions: list[str], aux_ids: Sequence[int], max_new_tokens: int,
          batch_size: int) -> list[DraftSequence]:
    """Greedy replies of the target to the tiny world's chat-formatted questions, with features and labels."""
    prompts = [tok(chat_text(q), add_special_tokens=False)["input_ids"] for q in questions]
    return build_from_ids(model, tok, prompts, aux_ids, max_new_tokens, batch_size)


def build_from_ids(model, tok, prompts: list[list[int]], aux_ids: Sequence[int], max_new_tokens: int,
                   batch_size: int) -> list[DraftSequence]:
    """Greedy replies of the target to tokenised prompts (rendered with any chat template), with features
    and labels."""
    replies = greedy_replies(model, tok, prompts, max_new_tokens, batch_size)
    full = [p + r for p, r in zip(prompts, replies, strict=True)]
    feats = target_features(model, full, aux_ids, batch_size)
    seqs = []
    for p, ids, (f, argmax) in zip(prompts, full, feats, strict=True):
        seqs.append(DraftSequence(torch.tensor(ids), f, reply_labels(argmax, len(p), tok.eos_token_id, ids),
                                  len(p)))
    return seqs


def reply_labels(argmax: Tensor, prompt_len: int, eos: int, ids: list[int]) -> Tensor:
    """argmax [n] -> labels [n]: kept at positions prompt_len..n-2 (they predict reply tokens 2.. and the
    EOS), and at n-1 too when the reply was cut by the length cap (no EOS) since the target's next token
    is still known there."""
    n = argmax.shape[0]
    labels = torch.full_like(argmax, IGNORE)
    last = n - 1 if ids[-1] == eos else n
    labels[prompt_len:last] = argmax[prompt_len:last]
    return labels


def collate(seqs: list[DraftSequence]) -> DraftBatch:
    width = max(s.ids.shape[0] for s in seqs)
    fdim = seqs[0].feats.shape[-1]
    ids = torch.zeros((len(seqs), width), dtype=torch.long)                     # [B, N]
    feats = torch.zeros((len(seqs), width, fdim))                               # [B, N, 3Ht]
    labels = torch.full((len(seqs), width), IGNORE, dtype=torch.long)           # [B, N]
    for r, s in enumerate(seqs):
        n = s.ids.shape[0]
        ids[r, :n], feats[r, :n], labels[r, :n] = s.ids, s.feats, s.labels
    return DraftBatch(ids, feats, labels)


def batches(seqs: list[DraftSequence], batch_size: int, rng: random.Random) -> Iterator[DraftBatch]:
    """One epoch of length-bucketed batches in random order (padding stays small)."""
    order = sorted(range(len(seqs)), key=lambda i: (seqs[i].ids.shape[0], rng.random()))
    chunks = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(chunks)
    for chunk in chunks:
        yield collate([seqs[i] for i in chunk])
