"""Torch versions of the `sgl_kernel` CPU ops SGLang 0.5.23's EAGLE path calls, for CPUs without its kernel build.

SGLang's CPU speculative path (the `intel_amx` attention backend, `EAGLEWorkerV2`) calls eleven ops of
sgl-kernel's CPU library (and seeded sampling a twelfth, the hash). No wheel on the registry ships that library, so on a CPU without it these pure-torch
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
    murmur_hash32_cpu                                 the per-request seeded hash (seeded sampling coins)

and, for verify at temperature > 0, the three ops SGLang's sampling branch calls that have no CPU version at
all (`SAMPLING`, bound in by `acceptmoe.serving.sglang.cpu.sampling`):

    tree_speculative_sampling_target_only             the tree rejection rule (sgl-kernel's CUDA kernel)
    top_k_renorm_prob, top_p_renorm_prob              top-k / top-p renormalisation (flashinfer's on CUDA)

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
       "copy_all_layer_kv_cache_cpu", "murmur_hash32_cpu")
SAMPLING = ("tree_speculative_sampling_target_only", "top_k_renorm_prob", "top_p_renorm_prob")


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


# ----- sampling -----
_MASK32 = 0xFFFFFFFF


def _rotl32(x: Tensor, r: int) -> Tensor:
    return ((x << r) | (x >> (32 - r))) & _MASK32


def _murmur_mix(h: Tensor, k: Tensor) -> Tensor:
    k = _rotl32((k * 0xCC9E2D51) & _MASK32, 15)
    h = h ^ ((k * 0x1B873593) & _MASK32)
    return (_rotl32(h, 13) * 5 + 0xE6546B64) & _MASK32


def murmur_hash32_cpu(seed: Tensor, positions: Tensor, col_indices: Tensor) -> Tensor:
    """uint32 [n, m]: MurmurHash3 (32 bit) of the blocks (seed low, seed high, position, column) per row and column,
    as SGLang's Triton kernel (`kernels/ops/sampling/murmur_hash.py`). int64 arithmetic, every product masked to
    its low 32 bits (two's complement keeps them exact)."""
    s = seed.reshape(-1, 1).view(torch.int64) if seed.dtype == torch.uint64 else seed.reshape(-1, 1).long()
    pos = (positions.reshape(-1, 1).view(torch.int64) if positions.dtype == torch.uint64
           else positions.reshape(-1, 1).long()) & _MASK32
    col = col_indices.reshape(1, -1).long() & _MASK32
    h = _murmur_mix(torch.zeros_like(s), s & _MASK32)
    h = _murmur_mix(h, (s >> 32) & _MASK32)
    h = _murmur_mix(h, pos)
    h = _murmur_mix(h.expand(-1, col.shape[1]), col.expand(h.shape[0], -1))
    h = h ^ 16
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & _MASK32
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & _MASK32
    return (h ^ (h >> 16)).to(torch.uint32)


def _per_row(value, rows: int, dtype) -> Tensor:
    return value.reshape(-1).to(dtype) if isinstance(value, Tensor) else torch.full((rows,), value, dtype=dtype)


def top_k_renorm_prob(probs: Tensor, top_k) -> Tensor:
    """Each row's probabilities kept where they reach its k-th largest (ties with it kept, flashinfer's pivot
    rule; k >= V keeps all), renormalised."""
    v = probs.shape[-1]
    k = _per_row(top_k, probs.shape[0], torch.long).clamp(1, v)
    kth = probs.sort(dim=-1, descending=True).values.gather(1, (k - 1)[:, None])
    kept = probs.masked_fill(probs < kth, 0.0)
    return kept / kept.sum(-1, keepdim=True)


def top_p_renorm_prob(probs: Tensor, top_p) -> Tensor:
    """Each row's smallest top set holding at least top_p of its mass (every token tied with the last one kept,
    flashinfer's pivot rule), renormalised."""
    ranked = probs.sort(dim=-1, descending=True).values
    p = _per_row(top_p, probs.shape[0], probs.dtype)
    last = (ranked.cumsum(-1) < p[:, None]).sum(-1).clamp(max=probs.shape[-1] - 1)
    kept = probs.masked_fill(probs < ranked.gather(1, last[:, None]), 0.0)
    return kept / kept.sum(-1, keepdim=True)


def _residual_draw(q: Tensor, p: Tensor | None, coin: Tensor) -> int:
    """Inverse-CDF draw from relu(q - p) (q alone when p is None) with `coin` in [0, 1): the first index whose
    running sum exceeds coin * total; past the end (rounding), the last index with mass, else the last index."""
    relu = q if p is None else (q - p).clamp_min(0)
    cdf = relu.cumsum(0)
    u = coin * relu.sum()
    at = int(torch.searchsorted(cdf, u.reshape(1), right=True))
    if at < relu.numel():
        return at
    valid = torch.nonzero(relu > 0).flatten()
    return int(valid[-1]) if valid.numel() else relu.numel() - 1


def tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                          retrive_next_token, retrive_next_sibling, uniform_samples,
                                          uniform_samples_for_final_sampling, target_probs, draft_probs,
                                          threshold_single=1.0, threshold_acc=1.0, deterministic=True) -> None:
    """sgl-kernel's `TreeSpeculativeSamplingTargetOnly` (sglang/kernels/jit/include/sgl_kernel/speculative/
    sampling.cuh) per request, in fp32: from the root, with the coin uniform_samples[b, node] of the last accepted
    node, try its children in sibling order, adding each child's target probability to a running sum, and accept
    the first child with target mass whose running sum exceeds coin * threshold_acc (or whose own probability
    reaches threshold_single); a rejected child's target probability is copied into draft_probs (so the residual
    below leaves it out). At most accept_index.shape[1] - 1 accepts. The bonus token is drawn from
    relu(target - draft_probs) at the last accepted node (target alone after a full-depth accept) with the coin
    uniform_samples_for_final_sampling[b]. `predicts[parent]` = the token after each accepted node;
    `accept_index` (pre-filled with -1), `accept_token_num`, `predicts`, `draft_probs` are written in place.
    `deterministic` picks the CUDA scan algorithm only: no effect here."""
    bs, n = candidates.shape
    steps = accept_index.shape[1]
    target, drafted = target_probs.reshape(bs * n, -1), draft_probs.reshape(bs * n, -1)
    cand, ri = candidates.tolist(), retrive_index.tolist()
    first, sib = retrive_next_token.tolist(), retrive_next_sibling.tolist()
    coins = uniform_samples.reshape(bs, n).float()
    finals = uniform_samples_for_final_sampling.reshape(bs).float()
    single = torch.tensor(threshold_single, dtype=torch.float32)
    acc_div = torch.tensor(threshold_acc, dtype=torch.float32)
    for b in range(bs):
        row, coin, last = b * n, coins[b, 0], ri[b][0]
        prob_acc = torch.zeros((), dtype=torch.float32)
        accept_index[b, 0] = last
        accepted, cur = 0, 0
        for _ in range(1, steps):
            cur = first[b][cur]
            while cur != -1:
                token = cand[b][cur]
                single_p = target[row, token].float()
                prob_acc = prob_acc + single_p
                if single_p > 0 and (coin < prob_acc / acc_div or single_p >= single):
                    prob_acc = torch.zeros((), dtype=torch.float32)
                    row, coin = b * n + cur, coins[b, cur]
                    predicts[last] = token
                    accepted += 1
                    accept_index[b, accepted] = ri[b][cur]
                    last = ri[b][cur]
                    break
                drafted[row, token] = target[row, token]
                cur = sib[b][cur]
            if cur == -1:
                break
        accept_token_num[b] = accepted
        residual = None if accepted == steps - 1 else drafted[row].float()
        predicts[last] = _residual_draw(target[row].float(), residual, finals[b])


def register() -> None:
    """Make the attention ops and the seeded hash reachable as `torch.ops.sgl_kernel.<name>`, where SGLang reads
    them, unless a real sgl-kernel library registered them. A plain namespace: the backend only calls them, so no
    dispatcher schema is needed."""
    if hasattr(torch.ops.sgl_kernel, "decode_attention_cpu"):
        return
    torch.ops.sgl_kernel = types.SimpleNamespace(
        extend_attention_cpu=extend_attention_cpu, decode_attention_cpu=decode_attention_cpu,
        murmur_hash32_cpu=types.SimpleNamespace(default=murmur_hash32_cpu))   # called as `.default`
