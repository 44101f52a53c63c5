"""Torch versions of the `sgl_kernel` CPU ops SGLang 0.5.23's EAGLE path calls, for CPUs without its kernel build.

SGLang's CPU speculative path (the `intel_amx` attention backend, `EAGLEWorkerV2`) calls eleven ops of
sgl-kernel's CPU library. No wheel on the registry ships that library, so on a CPU without it these pure-torch
versions stand in, with the same signatures and the same contracts as the C++ sources (sgl-kernel
`csrc/cpu/speculative.cpp`, `extend.cpp`, `decode.cpp`): outputs written in place where the C++ op writes in
place, int32/int64 index tensors accepted where it accepts both, and one loud error for every feature the
EAGLE-3 path of the models served here does not use (sliding windows, attention sinks, logit caps,
cross-attention, scaled fp8 KV) instead of a silently different result.

    extend_attention_cpu, decode_attention_cpu        attention over the paged KV pool (tree mask in verify)
    build_tree_kernel_efficient_cpu, verify_tree_greedy_cpu   the draft tree's links and mask; greedy acceptance
    build_draft_decode_metadata_cpu                   per-candidate req->token rows for multi-step draft decode
    assign_req_to_token_pool_cpu, assign_draft_cache_locs_contiguous_cpu, assign_extend_cache_locs_cpu,
    fill_bonus_tokens_cpu, fill_accept_out_cache_loc_cpu, copy_all_layer_kv_cache_cpu   KV slot bookkeeping

These run on the host with Python loops over requests (a CPU serving batch is small); they are correctness
stand-ins, not kernels. `register()` puts the two attention ops under `torch.ops.sgl_kernel`, where the
attention backend looks them up.
"""
from __future__ import annotations

import ctypes
import types
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor

OPS = ("extend_attention_cpu", "decode_attention_cpu", "build_tree_kernel_efficient_cpu", "verify_tree_greedy_cpu",
       "build_draft_decode_metadata_cpu", "assign_req_to_token_pool_cpu", "assign_draft_cache_locs_contiguous_cpu",
       "assign_extend_cache_locs_cpu", "fill_bonus_tokens_cpu", "fill_accept_out_cache_loc_cpu",
       "copy_all_layer_kv_cache_cpu")


class UnsupportedOpError(NotImplementedError):
    """A feature of an sgl_kernel op that the torch stand-in does not implement."""


def _refuse(op: str, what: str) -> None:
    raise UnsupportedOpError(f"sgl_kernel.{op}: {what} is not implemented by acceptmoe's torch CPU stand-in "
                             f"(install sgl-kernel's CPU build, or serve a model without it)")


def _attention_features(op, k_scale, v_scale, logit_cap, is_cross_attn, sliding_window, sinks) -> None:
    if logit_cap and logit_cap > 0:
        _refuse(op, "a logit cap")
    if is_cross_attn:
        _refuse(op, "cross-attention")
    if sliding_window and sliding_window > 0:
        _refuse(op, "a sliding window")
    if sinks is not None:
        _refuse(op, "attention sinks")
    if (k_scale or 1.0) != 1.0 or (v_scale or 1.0) != 1.0:
        _refuse(op, "a scaled (fp8) KV cache")


def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float) -> Tensor:
    """q [Hq, T, D], k [Hkv, S, D], v [Hkv, S, Dv], mask [T, S] bool (True: attend) -> [T, Hq, Dv], fp32 math."""
    group = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
    o = F.scaled_dot_product_attention(q.float()[None], k.float()[None], v.float()[None],
                                       attn_mask=None if mask is None else mask[None, None], scale=scale)[0]
    return o.transpose(0, 1)


# ----- attention -----
def extend_attention_cpu(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, k_scale, v_scale,
                         req_to_token, req_pool_indices, seq_lens, extend_seq_lens, extend_start_loc,
                         max_len_extend, sm_scale, logit_cap=0.0, is_cross_attn=False, sliding_window_size=0,
                         encoder_lens=None, sinks=None, tree_mask=None, is_causal=True) -> None:
    """Per request: its new tokens attend to the committed prefix (from the pool) and to the new tokens
    (`k_extend` / `v_extend`), causally, or through `tree_mask` (QLEN_ONLY layout [bs * n * n], row q column k
    over the new tokens, True: visible) in a speculative verify pass. Writes `o_extend` [T, Hq, Dv]."""
    _attention_features("extend_attention_cpu", k_scale, v_scale, logit_cap, is_cross_attn, sliding_window_size,
                        sinks)
    offset = 0
    for b in range(seq_lens.numel()):
        seq, new = int(seq_lens[b]), int(extend_seq_lens[b])
        start, prefix = int(extend_start_loc[b]), seq - new
        slots = req_to_token[int(req_pool_indices[b]), :prefix].long()
        k = torch.cat([k_buffer[slots], k_extend[start:start + new]]).transpose(0, 1)      # [Hkv, seq, D]
        v = torch.cat([v_buffer[slots], v_extend[start:start + new]]).transpose(0, 1)
        if tree_mask is not None:
            local = tree_mask[offset:offset + new * new].view(new, new)
            offset += new * new
        elif is_causal:
            local = torch.ones(new, new, dtype=torch.bool).tril()
        else:
            local = torch.ones(new, new, dtype=torch.bool)
        mask = torch.cat([torch.ones(new, prefix, dtype=torch.bool), local], 1)             # [new, seq]
        o_extend[start:start + new] = _attend(q_extend[start:start + new].transpose(0, 1), k, v, mask,
                                              sm_scale).to(o_extend.dtype)


def decode_attention_cpu(query, k_buffer, v_buffer, k_scale, v_scale, output, key, value, loc, attn_logits,
                         req_to_token, req_pool_indices, seq_lens, sm_scale, logit_cap=0.0, is_cross_attn=False,
                         sliding_window_size=0, encoder_lens=None, sinks=None) -> None:
    """One new token per sequence: write its K/V at `loc` (when given), then attend over the sequence's
    `seq_lens[b]` slots of `req_to_token`. Writes `output` [B, Hq, Dv]; `attn_logits` is scratch."""
    _attention_features("decode_attention_cpu", k_scale, v_scale, logit_cap, is_cross_attn, sliding_window_size,
                        sinks)
    if key is not None and value is not None:
        k_buffer[loc.long()] = key.to(k_buffer.dtype)
        v_buffer[loc.long()] = value.to(v_buffer.dtype)
    lens = seq_lens.long()
    width = int(lens.max())
    valid = torch.arange(width)[None, :] < lens[:, None]                                  # [B, L]
    slots = req_to_token[req_pool_indices.long(), :width].long().masked_fill(~valid, 0)   # [B, L]
    k, v = k_buffer[slots].float(), v_buffer[slots].float()                               # [B, L, Hkv, D]
    group = query.shape[1] // k.shape[2]
    k = k.repeat_interleave(group, 2).transpose(1, 2)                                     # [B, Hq, L, D]
    v = v.repeat_interleave(group, 2).transpose(1, 2)
    o = F.scaled_dot_product_attention(query.float()[:, :, None], k, v, attn_mask=valid[:, None, None],
                                       scale=sm_scale)                                    # [B, Hq, 1, Dv]
    output.copy_(o[:, :, 0].to(output.dtype))


# ----- the draft tree -----
def _find(selected: list[int], token: int) -> int:
    return selected.index(token) if token in selected else -1


def build_tree_kernel_efficient_cpu(parent_list, selected_index, verified_seq_len, tree_mask, positions,
                                    retrive_index, retrive_next_token, retrive_next_sibling, topk, depth,
                                    draft_token_num, tree_mask_mode) -> None:
    """The draft tree's links (first child / next sibling, children in increasing index), positions and
    attention mask from EAGLE's parent list and selected token indices; `retrive_next_*` come pre-filled with
    -1. A node whose parent was not selected is skipped, with a warning, as sgl-kernel does."""
    if tree_mask_mode not in (0, 1):
        raise RuntimeError(f"build_tree_kernel_efficient_cpu: only FULL_MASK (0) and QLEN_ONLY (1) are "
                           f"supported, got {tree_mask_mode}")
    n = draft_token_num
    bs = parent_list.shape[0]
    parents, selected = parent_list.tolist(), selected_index.tolist()
    seq_lens = verified_seq_len.tolist()
    nt, ns = retrive_next_token.view(bs, n), retrive_next_sibling.view(bs, n)
    ri, pos = retrive_index.view(bs, n), positions.view(bs, n)
    acc = 0
    for b in range(bs):
        sel, seq = selected[b], int(seq_lens[b])
        first, sibling = nt[b].tolist(), ns[b].tolist()
        pos_b = [seq] * n
        ri[b] = torch.arange(b * n, (b + 1) * n, dtype=ri.dtype)
        for i in range(n - 1, 0, -1):
            parent_tb = sel[i - 1] // topk
            parent_pos = 0
            if parent_tb > 0:
                found = _find(sel, parents[b][parent_tb])
                if found < 0:
                    warnings.warn(f"build_tree_kernel_efficient_cpu: invalid eagle tree, parent of node {i} not found",
                                  stacklevel=1)
                    continue
                parent_pos = found + 1
            if first[parent_pos] != -1:
                sibling[i] = first[parent_pos]
            first[parent_pos] = i
        if tree_mask_mode == 1:
            rows = tree_mask.view(bs, n, n)[b]
            col0 = 0
        else:
            width = seq + n
            rows = tree_mask[b * n * n + acc: b * n * n + acc + n * width].view(n, width)
            acc += seq * n
            col0 = seq
        rows[:, col0] = True
        rows[:, col0 + 1:col0 + n] = False
        for tid in range(1, n):
            position, cur = 0, tid - 1
            while position < depth:
                position += 1
                rows[tid, col0 + cur + 1] = True
                ptb = sel[cur] // topk
                if ptb == 0:
                    break
                cur = _find(sel, parents[b][ptb])
                if cur < 0:
                    break
            pos_b[tid] = position + seq
        nt[b] = torch.tensor(first, dtype=nt.dtype)
        ns[b] = torch.tensor(sibling, dtype=ns.dtype)
        pos[b] = torch.tensor(pos_b, dtype=pos.dtype)


def verify_tree_greedy_cpu(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                           retrive_next_sibling, target_predict) -> None:
    """Greedy acceptance: from the root, follow the child whose draft token equals the target's argmax at the
    last accepted node, for at most `accept_index.shape[1] - 1` steps; the bonus token is the target's argmax
    at the last accepted node. `accept_index` comes pre-filled with -1."""
    bs, n = candidates.shape
    steps = accept_index.shape[1]
    cand, ri = candidates.tolist(), retrive_index.tolist()
    first, sib, target = retrive_next_token.tolist(), retrive_next_sibling.tolist(), target_predict.view(-1).tolist()
    for b in range(bs):
        last = ri[b][0]
        accept_index[b, 0] = last
        correct, cur = 0, 0
        for _ in range(1, steps):
            cur = first[b][cur]
            while cur != -1:
                if cand[b][cur] == target[last]:
                    predicts[last] = target[last]
                    correct += 1
                    accept_index[b, correct] = ri[b][cur]
                    last = ri[b][cur]
                    break
                cur = sib[b][cur]
            if cur == -1:
                break
        accept_token_num[b] = correct
        predicts[last] = target[last]


def build_draft_decode_metadata_cpu(req_to_token, req_pool_indices, seq_lens, topk, num_steps, pool_len) -> Tensor:
    """[bs * topk, pool_len]: row b*topk+tk is request b's committed prefix followed by candidate tk's draft slots
    (laid out at seq_len + tk * num_steps); only the first seq_len + num_steps entries are defined."""
    bs = req_pool_indices.numel()
    out = torch.zeros(bs * topk, pool_len, dtype=req_to_token.dtype)
    for b in range(bs):
        src, sl = req_to_token[int(req_pool_indices[b])], int(seq_lens[b])
        for tk in range(topk):
            row = out[b * topk + tk]
            row[:sl] = src[:sl]
            row[sl:sl + num_steps] = src[sl + tk * num_steps: sl + (tk + 1) * num_steps]
    return out


# ----- KV slot bookkeeping -----
def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                                 pool_len) -> None:
    """req_to_token[req_pool_indices[i], start[i]:end[i]] = the next end[i] - start[i] entries of out_cache_loc."""
    at = 0
    for i in range(req_pool_indices.numel()):
        s, e = int(start_offset[i]), int(end_offset[i])
        req_to_token[int(req_pool_indices[i]), s:e] = out_cache_loc[at:at + e - s].to(req_to_token.dtype)
        at += e - s


def assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len, topk,
                                           num_steps) -> None:
    """out_cache_loc[i * topk * num_steps:...] = request i's topk * num_steps slots from seq_lens[i] on."""
    width = topk * num_steps
    for i in range(req_pool_indices.numel()):
        s = int(seq_lens[i])
        out_cache_loc[i * width:(i + 1) * width] = req_to_token[int(req_pool_indices[i]), s:s + width].long()


def assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                                 pool_len) -> None:
    """out_cache_loc = the concatenation of req_to_token[req_pool_indices[i], start[i]:end[i]] (a prefix of it)."""
    at = 0
    for i in range(req_pool_indices.numel()):
        s, e = int(start_offset[i]), int(end_offset[i])
        out_cache_loc[at:at + e - s] = req_to_token[int(req_pool_indices[i]), s:e].long()
        at += e - s


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride) -> None:
    """bonus_tokens[i] = the last accepted token of request i (accept_lens include the bonus)."""
    flat = accept_tokens.reshape(-1)
    idx = torch.arange(accept_lens.numel()) * accept_stride + accept_lens.long() - 1
    bonus_tokens.copy_(flat[idx].to(bonus_tokens.dtype))


def fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc) -> None:
    """The KV slots of the accepted tokens, in order, skipping rejected (-1) entries."""
    idx = accept_index.reshape(-1).long()
    kept = out_cache_loc[idx[idx > -1]]
    accept_out_cache_loc[:kept.numel()] = kept


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc) -> None:
    """For every KV buffer (a base address and a row stride in bytes): row tgt_loc[j] = row src_loc[j], all
    sources read before any target is written (safe when they overlap)."""
    if tgt_loc.numel() == 0:
        return
    src, tgt = src_loc.long(), tgt_loc.long()
    rows = int(torch.maximum(src.max(), tgt.max())) + 1
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=False):
        raw = (ctypes.c_uint8 * (rows * stride)).from_address(ptr)
        buf = torch.frombuffer(raw, dtype=torch.uint8).view(rows, stride)
        buf[tgt] = buf[src]


def register() -> None:
    """Make the attention ops reachable as `torch.ops.sgl_kernel.<name>`, where the attention backend reads them,
    unless a real sgl-kernel library registered them. A plain namespace: the backend only calls them, so no
    dispatcher schema is needed."""
    if hasattr(torch.ops.sgl_kernel, "decode_attention_cpu"):
        return
    torch.ops.sgl_kernel = types.SimpleNamespace(extend_attention_cpu=extend_attention_cpu,
                                                 decode_attention_cpu=decode_attention_cpu)
