"""What the plugin does inside SGLang's worker process: per-pass state, constrained routing, routing records.

One `Runtime` per process. The hooks in `plugin.py` call it:

    runtime.begin_verify(runner, forward_batch)   # ModelRunner.forward, target TARGET_VERIFY pass (host side)
    runtime.begin_capture(graph_runner)          # a target TARGET_VERIFY CUDA graph is being captured
    out = runtime.restrict(topk, orig, hidden, router_logits, ...)   # TopK.forward, every MoE layer
    runtime.end_pass()                            # after the forward: snapshot this pass's layer records
    runtime.finish_step(rids, accept_index, n)    # after verification: paths and accept lengths per request

Inside the forward (`restrict`) the work is fixed-shape tensor code on buffers allocated once: the verify
batch is request-major with a fixed width n (token t belongs to request t // n), so router logits [B*n, E]
are viewed as [B, n, E], the eligible sets [B, E] come from the project's one verifier interface
(`acceptmoe.kernels.make_verifier` with the plugin's `Plan`: the Triton kernel on CUDA, torch elsewhere),
and router logits outside each request's set are masked to -inf before SGLang's own top-k (Eq. 2 for every
output format). Per layer and request the trace fields come from `acceptmoe.engine.trace.layer_stats`, the
function the native engine records with, into a static record buffer read after the pass. Everything that
varies per step (trees, valid tokens, commitment weights) is written into the verifier's step buffers
before the forward (`Verifier.prepare`, rows reserved for the server's largest batch), so a captured graph
replays it correctly.
"""
from __future__ import annotations

import json
import os
from collections import defaultdict, deque
from pathlib import Path

import torch
from torch import Tensor

from acceptmoe.engine.trace import LAYER_FIELDS, BlockRecord, layer_columns, layer_stats
from acceptmoe.errors import UserError
from acceptmoe.kernels import Verifier, VerifierOutput, make_verifier
from acceptmoe.methods import BlockInfo, Fit, Router

from .config import PluginConfig
from .tree import parents_from_links

MAX_LAYERS = 512


class UnsupportedRouterError(UserError, ValueError):
    """A MoE router the plugin cannot restrict exactly (grouped, biased, sigmoid or fused-shared routing)."""


def router_of(topk) -> Router:
    """Our `Router` for an SGLang `TopK` module (softmax routing, optional renormalisation)."""
    c = topk.topk_config
    if (c.use_grouped_topk or c.scoring_func != "softmax" or c.correction_bias is not None
            or c.custom_routing_function is not None or c.num_shared_topk_slots):
        raise UnsupportedRouterError(
            f"MoE layer {topk.layer_id}: the plugin restricts softmax top-k routers only (this one is grouped, "
            f"biased, sigmoid-scored or carries fused shared experts); unset ACCEPTMOE_METHOD for this model")
    return Router("softmax_topk", top_k=c.top_k, renormalize=bool(c.renormalize))


class Runtime:
    def __init__(self, cfg: PluginConfig):
        self.cfg = cfg
        self.mode: str | None = None          # None (pass through), "verify", "star" (test switch)
        self.width = 0                        # tokens per request in the current pass
        self.max_requests = 1
        self.max_depth = 1                    # the server's speculative_num_steps (deepest draft node)
        self.verifier: Verifier | None = None
        self.ready = False                    # the verifier (if any), router and record buffer exist
        self.router: Router | None = None
        self.records: Tensor | None = None    # [MAX_LAYERS, B_max, len(LAYER_FIELDS)] fp64, written inside the forward
        self.slots: dict[int, int] = {}       # TopK.layer_id -> row of `records`
        self.calls = 0                        # restricted TopK calls (eager passes only)
        self.step = 0
        self.parents: list[list[int]] = []    # per request of the current pass
        self.pending: tuple | None = None     # (parents, layer records [L, B, S] on the host)
        self.done: deque = deque(maxlen=cfg.max_records)
        self.dumped = 0

    # ----- before the forward (host) -----
    def begin_verify(self, runner, forward_batch) -> None:
        verify_input = forward_batch.spec_info
        n, bs = int(verify_input.draft_token_num), int(forward_batch.batch_size)
        parents = parents_from_links(verify_input.retrieve_next_token[:bs].long(),
                                     verify_input.retrieve_next_sibling[:bs].long()).cpu()   # [bs, n]: one copy
        self.max_depth = max(self.max_depth, int(getattr(verify_input, "spec_steps", 0) or 0))
        self._begin("verify", n, [p.tolist() for p in parents], runner)

    def begin_star(self, runner, forward_batch) -> None:
        """Test switch: a decode pass's tokens (one per request) as one block, all children of the first."""
        bs = int(forward_batch.batch_size)
        self._begin("star", bs, [[-1] + [0] * (bs - 1)], runner)

    def begin_capture(self, graph_runner) -> None:
        self.max_requests = max(self.max_requests, int(getattr(graph_runner, "max_bs", 1)))
        self._depth(getattr(graph_runner, "model_runner", None))
        self.mode, self.width = "verify", int(graph_runner.captured_req_width)
        self.parents = []

    def _depth(self, runner) -> None:
        """The deepest draft node the server verifies: its speculative_num_steps (the verify input's
        spec_steps where a pass has one)."""
        steps = getattr(getattr(runner, "server_args", None), "speculative_num_steps", None)
        self.max_depth = max(self.max_depth, int(steps or 1))

    def _begin(self, mode: str, width: int, parents: list[list[int]], runner) -> None:
        pool = getattr(runner, "req_to_token_pool", None)
        self.max_requests = max(self.max_requests, len(parents), int(getattr(pool, "size", 0) or 0))
        self._depth(runner)
        self.mode, self.width, self.parents = mode, width, parents
        if self.verifier is not None:
            self._prepare()

    def _prepare(self) -> None:
        blocks = [BlockInfo.from_parents(p) for p in self.parents] or [BlockInfo.from_parents([-1])]
        self.verifier.prepare(blocks, pad_to=self.width, rows=self.capacity)

    # ----- inside the forward (tensor code only) -----
    def restrict(self, topk, orig, hidden_states: Tensor, router_logits: Tensor, *args, **kwargs):
        if self.mode is None or getattr(topk, "is_draft", False):
            return orig(topk, hidden_states, router_logits, *args, **kwargs)
        N, E = router_logits.shape
        n = self.width
        B = N // n
        self._ensure(topk, E, router_logits.device)
        z = router_logits[: B * n].view(B, n, E)                                   # [B, n, E]
        sel = self.verifier(z, route=False) if self.verifier is not None else None
        if sel is not None and self.cfg.restricts:
            allow = sel.eligible[:, None, :].expand(B, n, E).reshape(B * n, E)     # [B*n, E]
            if N > B * n:                                                          # rows beyond whole requests
                allow = torch.cat([allow, allow.new_ones(N - B * n, E)])
            masked = router_logits.masked_fill(~allow, float("-inf"))
        else:
            masked = router_logits
        out = orig(topk, hidden_states, masked, *args, **kwargs)
        ids = getattr(out, "topk_ids", None)
        if self.cfg.restricts and not self.router.renormalize and ids is not None:
            # non-renormalising router: keep the unmasked softmax probabilities of the chosen experts
            out.topk_weights.copy_(torch.softmax(router_logits.float(), -1).gather(-1, ids.long())
                                   .to(out.topk_weights.dtype))
        self._record(topk, z, sel, ids[: B * n].view(B, n, -1) if ids is not None else None)
        self.calls += 1
        if self.cfg.dump and sel is not None and self.cfg.restricts:
            self._dump(router_logits, sel.eligible, out)
        return out

    @property
    def capacity(self) -> int:
        return max(self.max_requests, self.width)

    def _ensure(self, topk, E: int, device) -> None:
        if self.ready:
            return
        self.router = router_of(topk)
        if self.cfg.variant is not None:
            plan = self.cfg.bind(Fit(self.router, E, self.max_depth, "resident"))
            self.verifier = make_verifier("auto", plan, device)
            self._prepare()
        self.records = torch.zeros(MAX_LAYERS, self.capacity, len(LAYER_FIELDS), dtype=torch.float64, device=device)
        self.ready = True

    def _record(self, topk, z: Tensor, sel: VerifierOutput | None, ids: Tensor | None) -> None:
        """Per request: the trace fields of this layer over the request's valid tokens (`layer_stats`)."""
        slot = self.slots.setdefault(int(topk.layer_id), len(self.slots))
        B, n, E = z.shape
        nat_ids, _ = self.router.natural(z)                                        # [B, n, k]
        if ids is None:                                                            # fused formats: no ids out
            zs = z.masked_fill(~sel.eligible[:, None, :], float("-inf")) if self.cfg.restricts else z
            ids, _ = self.router.natural(zs)                                       # Eq. 2, no host sync
        if sel is None:                                                            # no method: natural routing
            sel = VerifierOutput(None, None, torch.ones(B, E, dtype=torch.bool, device=z.device),
                                 torch.zeros(B, E, device=z.device), torch.zeros(B, E, dtype=torch.bool, device=z.device))
            valid = None
        else:
            valid = self.verifier.rows(B).valid > 0                                # [B, n]
        k = nat_ids.shape[-1]
        self.records[slot, :B].copy_(layer_stats(int(topk.layer_id), nat_ids, ids[..., :k].long(), sel, valid))

    # ----- after the forward (host) -----
    def end_pass(self) -> None:
        if self.mode == "verify" and self.records is not None and self.parents:
            L, bs = len(self.slots), len(self.parents)
            self.pending = (self.parents, self.records[:L, :bs].cpu())            # [L, bs, fields]
        elif self.mode == "star" and self.records is not None:
            self.pending = (self.parents, self.records[: len(self.slots), :1].cpu())
        self.mode = None

    def finish_step(self, rids, accept_index: Tensor | None, width: int) -> None:
        """Pair the last verify pass's records with the verification result: one record per request."""
        if self.pending is None:
            return
        parents, layer = self.pending
        self.pending = None
        acc = accept_index.cpu().tolist() if accept_index is not None else [[0]] * len(parents)
        for b, parent in enumerate(parents):
            path = [g - b * width for g in acc[b] if g >= 0]
            rec = {"rid": str(rids[b]) if b < len(rids) else str(b), "step": self.step, "parents": parent,
                   "path": path, "accept_length": len(path),
                   "layers": layer_columns(layer[:, b].tolist())}
            self.done.append(rec)
        self.step += 1
        if self.cfg.trace:
            self.flush()

    def flush(self) -> None:
        """Append the finished records to the trace-steps file and clear them."""
        if not self.done:
            return
        with Path(self.cfg.trace).open("a") as f:
            while self.done:
                f.write(json.dumps(self.done.popleft()) + "\n")

    def _dump(self, router_logits: Tensor, eligible: Tensor, out) -> None:
        if self.dumped >= 64 or not hasattr(out, "topk_ids"):
            return
        d = Path(self.cfg.dump)
        d.mkdir(parents=True, exist_ok=True)
        torch.save({"pid": os.getpid(), "logits": router_logits.detach().float().cpu(), "eligible": eligible.cpu(),
                    "width": self.width, "topk_ids": out.topk_ids.cpu(), "topk_weights": out.topk_weights.float().cpu(),
                    "top_k": self.router.top_k, "renormalize": self.router.renormalize, "method": self.cfg.method},
                   d / f"call{self.dumped:04d}.pt")
        self.dumped += 1


def read_steps(path: str | Path | None) -> dict[str, list[BlockRecord]]:
    """The plugin's per-step records grouped by request id, as native trace blocks (step order kept)."""
    return parse_steps(Path(path).read_text().splitlines() if path is not None and Path(path).is_file() else [])


def parse_steps(lines) -> dict[str, list[BlockRecord]]:
    out: dict[str, list[BlockRecord]] = defaultdict(list)
    for line in lines:
        if line.strip():
            d = json.loads(line)
            blocks = out[d["rid"]]
            layers = {name: d["layers"][name] for name in LAYER_FIELDS}
            blocks.append(BlockRecord(len(blocks), d["parents"], d["path"], d["accept_length"], layers))
    return out


def output_lengths(accept_lengths: list[int], num_tokens: int) -> list[int]:
    """Per step, the tokens it output: accepted paths in order, the last cut so they sum to num_tokens - 1."""
    out, left = [], max(0, num_tokens - 1)
    for a in accept_lengths:
        if left <= 0:
            break
        out.append(min(a, left))
        left -= out[-1]
    return out
