"""What the plugin does inside SGLang's worker process: per-pass state, constrained routing, routing records.

One `Runtime` per process. The hooks in `plugin.py` call it:

    runtime.start(Limits(...))                    # once: the server's limits (rows, tree depth, TP rank, router)
    runtime.draft_scores(score_list, top_index)   # organize_draft_results: the drafted nodes' survival (admission)
    runtime.begin_verify(spec_info, batch_size, rids)   # ModelRunner.forward, target TARGET_VERIFY pass (host side)
    runtime.begin_capture(graph_runner)          # a target TARGET_VERIFY CUDA graph is being captured
    out = runtime.restrict(topk, orig, hidden, router_logits, ...)   # TopK.forward, every MoE layer
    runtime.end_pass()                            # after the forward: read this pass's records (when recording)
    runtime.finish_step(rids, accept_index, n)    # after verification: paths and accept lengths per request
    runtime.refresh()                             # before a target pass: new settings if the file changed

With a method that routes naturally (Standard SD) and nothing recorded, `active` is False and every hook
passes straight through: no selector work, no copies.

Inside the forward (`restrict`) the work is fixed-shape tensor code on buffers allocated once: the verify
batch is request-major with a fixed width n (token t belongs to request t // n), so router logits [B*n, E]
are viewed as [B, n, E], the eligible sets [B, E] come from the project's one verifier interface
(`acceptmoe.kernels.make_verifier` with the plugin's `Plan`: the Triton kernel on CUDA, the torch backend
elsewhere, or the one `ACCEPTMOE_VERIFIER` names; never the compiled cpu library, an opaque call no graph can
hold), and router logits outside each request's set are masked to -inf before SGLang's own top-k (Eq. 2 for
every output format), or, for a router that does not rank its logits, SGLang's ids and weights are rewritten (`routers`). Per
layer and request the trace fields come from `acceptmoe.engine.trace.layer_stats`, the function the native
engine records with, into a static record buffer read after the pass. Everything that varies per step (trees, valid tokens, commitment weights) is written into
the verifier's step buffers before the forward (`Verifier.prepare`, rows sized once from the server's limits),
so a captured graph replays it correctly. New settings between generations (`reconfigure`) rebuild everything
while no graph was captured; after a capture they may change only what a step writes before its replay
(`config.restart_reason`), and the same verifier, with its buffers, is rebound to the new plan.
"""
from __future__ import annotations

import fcntl
import json
import os
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from acceptmoe.engine.trace import LAYER_FIELDS, BlockRecord, layer_columns, layer_stats
from acceptmoe.errors import UserError
from acceptmoe.kernels import Verifier, VerifierOutput, make_verifier
from acceptmoe.methods import Fit, Router, route_in

from .admission import Admissions, AdmissionUnavailableError, cut_links, node_survival, subtree_record
from .config import PluginConfig, PluginConfigError, Watched, restart_reason
from .routers import UnsupportedRouterError, reroute, router_of, selection_bias
from .tree import parents_from_links

MAX_LAYERS = 512


# the verifier backend inside the forward, per device type: work a captured (or traced) graph can hold
GRAPH_BACKEND = {"cuda": "triton"}

@dataclass(frozen=True)
class Limits:
    """What the server was started with, read once from its model runner: the buffers are sized from it."""
    requests: int = 1          # the most requests one pass can hold (the request pool, max_running_requests,
                               # the largest captured graph batch)
    depth: int = 1             # speculative_num_steps: the deepest draft node
    rank: int = 0              # tensor-parallel rank: only rank 0 writes records
    router: Router | None = None   # the served target's (`engine.config.ModelConfig`; None: SGLang's reading)
    experts: int = 0           # its routed experts per MoE layer (0: not read, a model no family serves)


class Runtime:
    def __init__(self, cfg: PluginConfig, source: Watched | None = None):
        self.source = source                  # where cfg came from, read again by `refresh` (None: fixed)
        self.limits: Limits | None = None     # fixed at the first verify pass or graph capture
        self.captured = False                 # a target verify graph was captured (it holds the passes' work)
        self.step = 0
        self._serve(cfg)

    def _serve(self, cfg: PluginConfig) -> None:
        """Everything that follows from the settings, made afresh (the limits, capture and step count stay)."""
        self.cfg = cfg
        self.recording = cfg.recording
        # with a method that routes naturally and nothing recorded, the hooks do nothing at all
        self.active = cfg.restricts or self.recording or cfg.admits
        self.mode: str | None = None          # None (pass through), "verify", "star" (test switch)
        self.width = 0                        # tokens per request in the current pass
        self.verifier: Verifier | None = None
        self.ready = False                    # the verifier (if any), router and record buffer exist
        self.router: Router | None = None
        self.records: Tensor | None = None    # [MAX_LAYERS, rows, len(LAYER_FIELDS)] fp64, written inside the forward
        self.slots: dict[int, int] = {}       # TopK.layer_id -> row of `records`
        self.calls = 0                        # restricted TopK calls (eager passes only)
        self.parents: list[list[int]] = []    # per request of the last recorded pass (host copy, after it)
        self.tree: Tensor | None = None       # [bs, n] parents of the current pass, on the device
        self.batch = 0                        # requests in the current pass
        self.pending: tuple | None = None     # (parents, layer records [L, B, S] on the host, admitted nodes | None)
        self.done: deque = deque(maxlen=cfg.max_records)
        self.dump: Dump | None = Dump(Path(cfg.dump)) if cfg.dump else None
        self.admissions: Admissions | None = None     # token-side admission (an admitting method), at its first pass
        self.scores: Tensor | None = None     # [B, n-1] the last draft's node survival, taken by the next verify
        self.keeps: list[list[int]] | None = None   # per request of the current pass: its admitted nodes
        self.rids: list[str] = []             # request ids of the current pass
        self.admitted: Tensor | None = None   # bool [rows, n] static: the current pass's admitted tokens
        self.step_admitted: Tensor | None = None   # its first B rows this pass (None: every token)

    def refresh(self) -> None:
        """Serve the settings file's new contents when it was replaced since the last look (one stat)."""
        changed = self.source.poll() if self.source is not None else None
        if changed is not None:
            self.reconfigure(changed)

    def reconfigure(self, cfg: PluginConfig) -> None:
        """Serve `cfg` from the next pass on (called between generations, when the settings file changed). Before
        a graph capture everything is made again; after one, `config.restart_reason` must find nothing the graph
        holds changed, and the verifier keeps its buffers (`Verifier.rebind`)."""
        if not self.captured:
            self._serve(cfg)
            return
        fit = self.verifier.plan.fit if self.verifier is not None else None
        why = restart_reason(self.cfg, cfg, fit, captured=True)
        if why is not None:
            raise PluginConfigError(f"acceptmoe plugin: new settings cannot be served by this server: {why}; start "
                                    f"a new server with them")
        if self.verifier is not None:
            self.verifier.rebind(cfg.bind(fit))
        self.cfg = cfg
        self.done = deque(self.done, maxlen=cfg.max_records)

    # ----- before the forward (host) -----
    def start(self, limits: Limits) -> None:
        """The server's limits, once: every buffer is sized from them, so no later pass reallocates."""
        if self.limits is None:
            self.limits = limits

    def draft_scores(self, score_list, top_scores_index: Tensor) -> None:
        """The draft that precedes the next verify pass chose its nodes: keep their survival (admission only)."""
        if self.cfg.admits:
            self.scores = node_survival(score_list, top_scores_index)

    def begin_verify(self, verify_input, batch_size: int, rids: list[str] | None = None) -> None:
        """A target verify pass: trees from SGLang's linked lists, on the device, into the verifier's step
        buffers. Nothing is read on the host here unless the method admits draft nodes (then the trees and the
        draft's scores are read, each request's admitted nodes chosen and the other nodes cut from SGLang's
        links); the host copy of the trees is otherwise taken after the pass, and only when recording."""
        n, bs = int(verify_input.draft_token_num), int(batch_size)
        self._check_rows(bs)
        self.tree = parents_from_links(verify_input.retrieve_next_token[:bs].long(),
                                       verify_input.retrieve_next_sibling[:bs].long())          # [bs, n] device
        self.mode, self.width, self.batch, self.parents = "verify", n, bs, []
        self.rids = [str(r) for r in rids] if rids is not None else [str(b) for b in range(bs)]
        self.step_admitted = self._admit(verify_input, bs, n) if self.cfg.admits else None
        if self.verifier is not None:
            self.verifier.prepare_tree(self.tree, rows=self.capacity, admitted=self.step_admitted)
        if self.dump is not None:
            self.dump.begin(verify_input, bs)

    def _admit(self, verify_input, bs: int, n: int) -> Tensor:
        """Each request's admitted nodes (host), cut into SGLang's links, written into the static mask."""
        scores, self.scores = self.scores, None
        if scores is None or scores.shape != (bs, n - 1):
            raise AdmissionUnavailableError(
                f"acceptmoe plugin: method {self.cfg.method} admits draft nodes by the drafter's probabilities, and "
                f"this verify pass of {bs} requests x {n} tokens has none from its draft: SGLang's top-1 chain path "
                f"drafts by argmax without them (use a tree with speculative_eagle_topk > 1), and a draft replayed "
                f"from a CUDA graph runs no Python (start the server with --disable-cuda-graph)")
        if self.admissions is None:
            self.admissions = Admissions(self.cfg.bind(self._admission_fit()), self.cfg.max_records)
        self.keeps, mask = self.admissions.admit(self.rids, scores, self.tree.cpu())
        cut_links(verify_input.retrieve_next_token, verify_input.retrieve_next_sibling, self.keeps)
        buf = self._admitted_buffer(n, self.tree.device)
        buf[:bs].copy_(mask.to(buf.device))
        return buf[:bs]

    def _admission_fit(self) -> Fit:
        """The served model's router and experts, read before its first pass (the family's config)."""
        lim = self.limits
        if lim.router is None or lim.experts < 1:
            raise AdmissionUnavailableError(
                f"acceptmoe plugin: method {self.cfg.method} admits draft nodes under a cost that counts the "
                f"served model's experts, which only a registered model family's config gives (acceptmoe "
                f"check-model names the families); serve a model of one, or use a method that admits every node")
        return Fit(lim.router, lim.experts, lim.depth, "resident")

    def _admitted_buffer(self, n: int, device) -> Tensor:
        if self.admitted is None or self.admitted.shape[1] != n:
            self.admitted = torch.ones(self.capacity, n, dtype=torch.bool, device=device)
        return self.admitted

    def begin_star(self, batch_size: int) -> None:
        """Test switch: a decode pass's tokens (one per request) as one block, all children of the first."""
        bs = int(batch_size)
        self.tree = torch.tensor([[-1] + [0] * (bs - 1)])
        self.mode, self.width, self.batch, self.parents = "star", bs, 1, []
        if self.verifier is not None:
            self.verifier.prepare_tree(self.tree, rows=self.capacity)
        if self.dump is not None:
            self.dump.begin(None, 1)

    def begin_capture(self, graph_runner) -> None:
        if self.cfg.dump or self.cfg.force_decode:
            raise PluginConfigError("ACCEPTMOE_DUMP and ACCEPTMOE_FORCE_DECODE are test switches that run host "
                                    "code inside the forward, which a CUDA graph replay skips: start the server "
                                    "with --disable-cuda-graph, or unset them")
        self._check_rows(int(getattr(graph_runner, "max_bs", 1)))
        self.mode, self.width, self.batch, self.parents = "verify", int(graph_runner.captured_req_width), 0, []

    def _check_rows(self, bs: int) -> None:
        if self.limits is None:
            raise RuntimeError("acceptmoe plugin: a pass reached the runtime before the server's limits were read")
        if bs > self.limits.requests:
            raise UserError(f"acceptmoe plugin: a verify pass of {bs} requests exceeds the {self.limits.requests} "
                            f"rows sized from the server's limits (max_running_requests, the request pool)")

    def _prepare_idle(self) -> None:
        """Step buffers before the first real pass (a graph capture): one star-shaped block of the pass width."""
        star = torch.zeros(1, max(1, self.width), dtype=torch.long, device=self.verifier.device)
        star[0, 0] = -1
        self.verifier.prepare_tree(star, rows=self.capacity)

    # ----- inside the forward (tensor code only) -----
    def restrict(self, topk, orig, hidden_states: Tensor, router_logits: Tensor, *args, **kwargs):
        if self.mode is None or getattr(topk, "is_draft", False):
            return orig(topk, hidden_states, router_logits, *args, **kwargs)
        N, E = router_logits.shape
        n = self.width
        B = N // n
        self._ensure(topk, E, router_logits.device)
        z = router_logits[: B * n].view(B, n, E)                                   # [B, n, E]
        bias = selection_bias(topk)                                                # [E] | None
        sel = self.verifier(z, route=False, bias=bias) if self.verifier is not None else None
        eligible = sel.eligible if sel is not None and self.cfg.restricts else None   # [B, E] | None
        allow = masked = None
        if self.cfg.admits:
            allow = self._admission_allow(z, eligible, bias, self._admitted_buffer(n, z.device)[:B])
        elif eligible is not None:
            allow = eligible[:, None, :].expand(B, n, E)
        if allow is not None:
            allow = allow.reshape(B * n, E)                                        # [B*n, E]
            if N > B * n:                                                          # rows beyond whole requests
                allow = torch.cat([allow, allow.new_ones(N - B * n, E)])
            if self.router.ranks_logits:                                          # Eq. 2 by masking
                masked = router_logits.masked_fill(~allow, float("-inf"))
        out = orig(topk, hidden_states, router_logits if masked is None else masked, *args, **kwargs)
        if allow is not None and not self.router.ranks_logits:                    # Eq. 2 written in
            out = reroute(topk, out, router_logits, allow, self.router, bias)
        ids = getattr(out, "topk_ids", None)
        if self.cfg.restricts and not self.router.renormalize and self.router.ranks_logits:
            if ids is None:
                raise UnsupportedRouterError(
                    f"MoE layer {topk.layer_id}: a router without renormalisation needs its weights re-gathered "
                    f"from the unmasked softmax, which the {type(out).__name__} output format does not expose; "
                    f"serve this model with the standard MoE runner (--moe-runner-backend triton or torch)")
            # non-renormalising router: keep the unmasked scores of the chosen experts (`Router.gates`)
            full = router_logits.float()                                           # every row, [N, E]
            out.topk_weights.copy_(self.router.gates(full, ids.long(), full).to(out.topk_weights.dtype))
        if self.recording or self.cfg.measures:
            self._record(topk, z, sel, ids[: B * n].view(B, n, -1) if ids is not None else None, bias)
        if self.dump is not None:
            self.dump.layer(int(topk.layer_id), router_logits, sel, out)
        self.calls += 1
        return out

    def _admission_allow(self, z: Tensor, eligible: Tensor | None, bias: Tensor | None, admitted: Tensor) -> Tensor:
        """bool [B, n, E]: an admitted token routes within the eligible set (every expert under natural routing);
        any other token only to experts an admitted token of its request routes to, so it adds nothing to the
        pass's expert union (its output is never accepted)."""
        B, n, E = z.shape
        ids, _ = route_in(z, eligible, self.router, bias=bias)                    # [B, n, k] Eq. 2
        ids = torch.where(admitted[..., None], ids, E).reshape(B, -1)
        read = torch.zeros(B, E + 1, dtype=torch.bool, device=z.device).scatter_(1, ids, True)[:, :E]   # [B, E]
        base = eligible if eligible is not None else torch.ones_like(read)
        return torch.where(admitted[..., None], base[:, None, :], read[:, None, :])

    @property
    def capacity(self) -> int:
        return max(self.limits.requests, 1)

    def _ensure(self, topk, E: int, device) -> None:
        if self.ready:
            return
        self.router = router_of(topk, self.limits.router)
        if self.cfg.variant is not None and self.cfg.restricts:
            plan = self.cfg.bind(Fit(self.router, E, self.limits.depth, "resident"))
            backend = self.cfg.verifier
            if backend == "auto":
                backend = GRAPH_BACKEND.get(torch.device(device).type, "torch")
            self.verifier = make_verifier(backend, plan, device)
            if self.tree is not None:                      # the first pass: its step, made before the verifier
                self.verifier.prepare_tree(self.tree.to(device), rows=self.capacity, admitted=self.step_admitted)
            else:
                self._prepare_idle()
        if self.recording or self.cfg.measures:
            self.records = torch.zeros(MAX_LAYERS, self.capacity, len(LAYER_FIELDS), dtype=torch.float64,
                                       device=device)
        self.ready = True

    def _record(self, topk, z: Tensor, sel: VerifierOutput | None, ids: Tensor | None,
                bias: Tensor | None) -> None:
        """Per request: the trace fields of this layer over the request's valid tokens (`layer_stats`)."""
        slot = self.slots.setdefault(int(topk.layer_id), len(self.slots))
        B, n, E = z.shape
        nat_ids, _ = self.router.natural(z, bias=bias)                             # [B, n, k]
        if ids is None:                                                            # fused formats: no ids out
            ids, _ = route_in(z, sel.eligible if sel is not None else None, self.router, bias=bias)  # Eq. 2
        if sel is None:                                                            # natural routing
            sel = VerifierOutput(None, None, torch.ones(B, E, dtype=torch.bool, device=z.device),
                                 torch.zeros(B, E, device=z.device), torch.zeros(B, E, dtype=torch.bool, device=z.device))
            valid = None
        else:
            valid = self.verifier.rows(B).valid > 0                                # [B, n]
        if self.cfg.admits:                                                        # the admitted subtrees
            valid = self._admitted_buffer(n, z.device)[:B]
        k = nat_ids.shape[-1]
        self.records[slot, :B].copy_(layer_stats(int(topk.layer_id), nat_ids, ids[..., :k].long(), sel, valid))

    # ----- after the forward (host) -----
    def end_pass(self) -> None:
        """After the forward: read this pass's trees and records back (one copy each, only when recording)."""
        if self.records is not None and self.tree is not None and self.mode in ("verify", "star"):
            rows = self.records[:len(self.slots), :self.batch].cpu()                   # [L, bs, fields]
            if self.admissions is not None and self.keeps is not None and self.cfg.measures:
                self.admissions.observe(self.rids, self.keeps, rows)
            if self.recording:
                self.parents = self.tree.cpu().tolist()
                self.pending = (self.parents, rows, self.keeps)
        if self.dump is not None:
            self.dump.end(self.tree, self.keeps)
        self.mode, self.tree, self.keeps = None, None, None

    def finish_step(self, rids, accept_index: Tensor | None, width: int) -> None:
        """Pair the last verify pass's records with the verification result: one record per request."""
        if self.pending is None:
            return
        parents, layer, keeps = self.pending
        self.pending = None
        acc = accept_index.cpu().tolist() if accept_index is not None else [[0]] * len(parents)
        for b, parent in enumerate(parents):
            path = [g - b * width for g in acc[b] if g >= 0]
            if keeps is not None:                                                  # the admitted subtree
                parent, path = subtree_record(parent, keeps[b], path)
            rec = {"rid": str(rids[b]) if b < len(rids) else str(b), "pid": os.getpid(), "step": self.step,
                   "parents": parent,
                   "path": path, "accept_length": len(path),
                   "layers": layer_columns(layer[:, b].tolist())}
            self.done.append(rec)
        self.step += 1
        if self.cfg.trace:
            self.flush()

    def flush(self) -> None:
        """Append the finished records to the trace-steps file and clear them. Under tensor parallelism every
        rank sees the same passes: only rank 0 writes. Data-parallel schedulers share the file: each append is
        one locked write."""
        if not self.done:
            return
        if self.limits is not None and self.limits.rank != 0:
            self.done.clear()
            return
        text = "".join(json.dumps(r) + "\n" for r in self.done)
        self.done.clear()
        with Path(self.cfg.trace).open("a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                f.write(text)
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


class Dump:
    """Test switch `ACCEPTMOE_DUMP`: one file per pass (at most `limit`) with what SGLang verified (its tree
    mask, links and draft tokens), the trees the plugin recovered, and per MoE layer the router logits, the
    eligible sets and SGLang's routing. Device tensors are kept during the forward and read after it; it runs
    only in eager passes (refused under CUDA graphs)."""

    def __init__(self, folder: Path, limit: int = 256):
        self.folder, self.limit, self.count = folder, limit, 0
        self.current: dict | None = None

    def begin(self, verify_input, bs: int) -> None:
        if self.count >= self.limit:
            self.current = None
            return
        self.current = {"pid": os.getpid(), "layers": {}}
        if verify_input is not None:
            n = int(verify_input.draft_token_num)
            self.current.update(
                width=n, mask=verify_input.custom_mask[: bs * n * n].view(bs, n, n).cpu(),
                draft_token=verify_input.draft_token[: bs * n].view(bs, n).cpu(),
                positions=verify_input.positions[: bs * n].view(bs, n).cpu(),
                next_token=verify_input.retrieve_next_token[:bs].cpu(),
                next_sibling=verify_input.retrieve_next_sibling[:bs].cpu())

    def layer(self, layer_id: int, router_logits: Tensor, sel, out) -> None:
        if self.current is None:
            return
        self.current["layers"][layer_id] = {
            "logits": router_logits.detach().float().clone(),
            "eligible": None if sel is None else sel.eligible.clone(),
            "topk_ids": getattr(out, "topk_ids", None), "topk_weights": getattr(out, "topk_weights", None)}

    def end(self, tree: Tensor | None, admitted: list[list[int]] | None = None) -> None:
        if self.current is None:
            return
        self.current["parents"] = tree.cpu().tolist() if tree is not None else []
        if admitted is not None:                 # token-side admission: each request's admitted nodes
            self.current["admitted"] = admitted
        for rec in self.current["layers"].values():
            for key, value in rec.items():
                if isinstance(value, Tensor):
                    rec[key] = value.detach().float().cpu() if value.is_floating_point() else value.cpu()
        self.folder.mkdir(parents=True, exist_ok=True)
        torch.save(self.current, self.folder / f"pass{os.getpid()}-{self.count:04d}.pt")
        self.count += 1
        self.current = None


def read_steps(path: str | Path | None) -> dict[str, list[BlockRecord]]:
    """The plugin's per-step records grouped by request id, as native trace blocks (step order kept)."""
    return parse_steps(Path(path).read_text().splitlines() if path is not None and Path(path).is_file() else [])


def parse_steps(lines, pids: dict[str, set[int]] | None = None) -> dict[str, list[BlockRecord]]:
    """Per request id, its verify steps in order; `pids` (when given) collects, per request id, the processes that
    wrote its records (several servers write one file: `fleet`)."""
    out: dict[str, list[BlockRecord]] = defaultdict(list)
    for line in lines:
        if line.strip():
            d = json.loads(line)
            blocks = out[d["rid"]]
            layers = {name: d["layers"][name] for name in LAYER_FIELDS}
            blocks.append(BlockRecord(len(blocks), d["parents"], d["path"], d["accept_length"], layers))
            if pids is not None and "pid" in d:
                pids.setdefault(d["rid"], set()).add(int(d["pid"]))
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
