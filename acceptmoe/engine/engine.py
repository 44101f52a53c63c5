"""The speculative decoding engine: prefill, draft tree, one verification pass, greedy acceptance.

    engine = load_engine("models/tiny")                 # holds target/ and draft/
    gen = engine.generate(prompt_ids, Variant("acceptmoe").bind(commitment=table.p_hat), max_new_tokens=256)
    gen.tokens, gen.accept_lengths, gen.step_times, gen.trace

Every method shares one loop. `vanilla-ar` decodes one token per target step with natural routing. The
speculative methods draft an EAGLE-2 tree with the EAGLE-3 head, then run one target pass over root +
draft nodes with the tree mask. In that pass every MoE layer's routing goes through the batched verifier
(`acceptmoe.kernels.make_verifier`): the method's eligible set S for the block, residency-aware pruning of
S against the expert pool (AcceptMoE under the offloaded store by default), then constrained top-k.
`standard-sd` verifies with natural routing (`router.natural`, the same function plain decoding uses). Acceptance is greedy: the longest root path whose tokens are
the target's argmax, plus the bonus token; the KV cache keeps the accepted path and the drafter is fed the
accepted tokens with the target's features.

Passes run through `StepGraphs` (`Engine(steps=...)`): eager, or at fixed shapes over persistent caches,
captured as CUDA graphs on CUDA with the resident store (see `graphs`).

Verifier backends (`Engine(backend=...)`): `torch` (tensor code on any device), `triton` (the fused kernel,
one launch per layer, no host sync), any name registered with `acceptmoe.kernels.register_backend`, and
`auto` = `triton` on CUDA, else `torch`.
"""
from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor

from acceptmoe.errors import UserError
from acceptmoe.kernels import Verifier, VerifierOutput, make_verifier, resolve_backend
from acceptmoe.methods import MethodSpec, Router, SelectorConfig, Variant
from acceptmoe.methods.config import check_for_method

from .eagle3 import Eagle3Draft, Eagle3Drafter
from .graphs import StepGraphs, resolve_steps
from .trace import Trace
from .tree import DraftTree, TreeShape


@functools.lru_cache(maxsize=32)
def _verifier(backend: str, method: str, router: Router, cfg: SelectorConfig, num_experts: int,
              device: torch.device) -> Verifier:
    """One batched verifier per backend, method and config (prepared again at every verification step)."""
    return make_verifier(backend, method, router, cfg, num_experts, device)


@dataclass
class Generation:
    tokens: list[int]                 # generated tokens (the prompt excluded), EOS included when it stopped there
    accept_lengths: list[int]         # per target step after prefill: tokens it output (an accepted path
                                      # cut by EOS or max_new_tokens counts only the tokens before the cut;
                                      # the trace keeps the whole accepted path for calibration)
    step_times: list[float]           # per target step after prefill: wall seconds (drafting included)
    trace: Trace
    prefill_time: float = 0.0         # seconds of the prefill pass (it yields tokens[0])
    stop_reason: str = "length"       # "eos" | "length"

    @property
    def mean_accept_length(self) -> float:
        """tau: output tokens per target step after prefill (sum(accept_lengths) == len(tokens) - 1)."""
        return sum(self.accept_lengths) / len(self.accept_lengths) if self.accept_lengths else 0.0


@dataclass
class _State:
    """One generation in progress."""
    spec: MethodSpec
    cfg: SelectorConfig
    shape: TreeShape
    cache: object
    trace: Trace
    prune: bool
    trace_layers: bool
    max_new: int
    ignore_eos: bool
    tokens: list[int] = field(default_factory=list)
    length: int = 0                   # committed target positions in the cache (the root is not among them)
    done: bool = False
    stop_reason: str = "length"


class Engine:
    name = "native"

    def __init__(self, model, draft: Eagle3Draft | None = None, backend: str = "auto", tree: TreeShape = TreeShape(),
                 selector: SelectorConfig = SelectorConfig(), steps: str = "auto"):
        """steps: how the target's decode and verify passes and the drafter's tree levels and extensions run
        (`graphs.STEP_MODES`; "auto" = CUDA graphs on CUDA with the resident store, eager otherwise)."""
        self.model, self.draft = model, draft
        self.tree, self.selector = tree, selector
        self.router: Router = model.router
        self.num_experts: int = model.config.num_experts
        self.device = torch.device(model.device)
        self.eos_token_ids: set[int] = set(model.config.eos_token_ids)
        self.backend = resolve_backend(backend, self.device)
        self.steps = StepGraphs(self.device, resolve_steps(steps, self.device, model.store.kind),
                                state=(model.store.tally,))
        if draft is not None:
            draft.bind(model)

    # ----- public -----
    def generate(self, prompt_ids: Sequence[int] | Tensor, variant: Variant, max_new_tokens: int = 256,
                 ignore_eos: bool = False, *, tree: TreeShape | None = None, selector: SelectorConfig | None = None,
                 trace_layers: bool = True) -> Generation:
        """Greedy generation of `variant` (bound to its p_hat and budget, see `Variant.bind`).

        tree / selector: the draft tree shape and the base selector config (None: the engine's own);
        trace_layers False skips the per-layer trace fields (blocks are always traced). Recording never
        changes the computation."""
        if not isinstance(variant, Variant):
            raise TypeError(f"generate takes a Variant (acceptmoe.methods.Variant), got {type(variant).__name__}: "
                            f"e.g. Variant({variant!r})" if isinstance(variant, str) else
                            f"generate takes a Variant, got {type(variant).__name__}")
        spec, tree = variant.spec, tree or self.tree
        cfg = variant.selector_config(selector or self.selector)
        if spec.speculates:
            check_for_method(cfg, spec, self.router, self.num_experts, tree.num_steps)
        prompt = torch.as_tensor(list(prompt_ids) if not isinstance(prompt_ids, Tensor) else prompt_ids,
                                 dtype=torch.long).to(self.device).flatten()
        if prompt.numel() == 0:
            raise UserError("prompt_ids is empty: give at least one token")
        if max_new_tokens < 1:
            raise UserError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if spec.speculates and self.draft is None:
            raise UserError(f"method {spec.name!r} speculates and needs an EAGLE-3 draft: load the engine with one")
        store_kind = getattr(self.model.store, "kind", "resident")
        prune = variant.prunes(store_kind)
        meta = {"method": spec.name, "variant": variant.name, "tree": dataclasses.asdict(tree) if spec.speculates else None,
                "selector": _jsonable(dataclasses.asdict(cfg)), "prune": prune, "prompt_len": int(prompt.numel()),
                "store": store_kind, "max_new_tokens": max_new_tokens, "ignore_eos": ignore_eos}
        cache_len = prompt.numel() + max_new_tokens + tree.num_draft_tokens
        st = _State(spec, cfg, tree, self.steps.cache("target", cache_len, self.model.new_cache),
                    Trace(meta=meta), prune, trace_layers, max_new_tokens, ignore_eos)
        gen = Generation([], [], [], st.trace)
        drafter = Eagle3Drafter(self.draft, cache_len, tree, self.steps) if spec.speculates else None
        t0 = self._clock()
        root = self._prefill(prompt, st, drafter)
        gen.prefill_time = self._clock() - t0
        self._commit(st, [root])
        step = 0
        while not st.done:
            t0 = self._clock()
            n = self._ar_step(st) if drafter is None else self._sd_step(st, drafter, step)
            gen.step_times.append(self._clock() - t0)
            gen.accept_lengths.append(n)
            step += 1
        gen.tokens, gen.stop_reason = st.tokens, st.stop_reason
        return gen

    def generate_many(self, prompts: Sequence[Sequence[int]], variant: Variant, max_new_tokens: int = 256,
                      ignore_eos: bool = False, **options) -> list[Generation]:
        """One generation per prompt, in order (this engine runs batch 1; see `EngineBackend`)."""
        return [self.generate(p, variant, max_new_tokens, ignore_eos, **options) for p in prompts]

    # ----- the rest of the EngineBackend contract -----
    def reset_counters(self) -> None:
        self.model.store.reset_counters()

    def counters(self) -> dict:
        """The expert store's counters since the last reset, summed over layers, and its kind."""
        stats = self.model.store.stats()
        return {**stats["total"], "store": stats["kind"]}

    def describe(self) -> dict:
        from importlib import metadata
        return {"engine": self.name, "version": metadata.version("acceptmoe"), "device": str(self.device),
                "dtype": str(self.model.dtype).removeprefix("torch."), "store": self.model.store.kind,
                "verifier": self.backend, "steps": self.steps.describe(),
                "tree": dataclasses.asdict(self.tree)}

    # ----- the loop -----
    def _prefill(self, prompt: Tensor, st: _State, drafter: Eagle3Drafter | None) -> int:
        n = prompt.numel()
        aux_layers = self.draft.aux_layer_ids if drafter is not None else ()
        logits, aux = self.model.forward(prompt, torch.arange(n, device=self.device), st.cache, 0,
                                         aux_layers=aux_layers)
        root = int(logits[-1].argmax())
        st.length = n
        if drafter is not None:
            nxt = torch.cat([prompt[1:], torch.tensor([root], device=self.device)])
            drafter.extend(nxt, aux, 0)
        return root

    def _ar_step(self, st: _State) -> int:
        root = torch.tensor([st.tokens[-1]], device=self.device)
        inputs = {"ids": root, "positions": torch.tensor([st.length], device=self.device), "start": st.length}
        logits, _, _ = self.steps.run("decode", inputs, self._body(st.cache, None, None, ()))
        st.length += 1
        return self._commit(st, [int(logits.argmax())])                       # [1, V]: the one row

    def _sd_step(self, st: _State, drafter: Eagle3Drafter, step: int) -> int:
        tree = drafter.propose(st.tokens[-1])
        rows: list[Tensor] | None = [] if st.trace_layers else None
        policy, key, verifier = self._policy(tree, st, rows)
        st.cache.check(st.length, tree.num_tokens)
        inputs = {"ids": tree.tokens, "positions": tree.positions, "start": st.length, "mask": tree.mask}
        body = self._body(st.cache, policy, rows, self.draft.aux_layer_ids)
        logits, aux, stats = self.steps.run(key, inputs, body, keep=verifier)
        path, bonus = tree.accept(logits.argmax(-1))
        new = tree.tokens[path[1:]].tolist() + [bonus]
        layer_rows = stats.tolist() if stats is not None else ([] if rows is not None else None)
        st.trace.add_block(step, tree.parents.tolist(), path, layer_rows)
        output = self._commit(st, new)
        if not st.done:
            idx = torch.tensor(path, device=self.device)
            st.cache.keep(st.length, idx)
            drafter.extend(torch.tensor(new, device=self.device), aux[idx], st.length)
            st.length += len(path)
        return output

    def _body(self, cache, policy, rows: list[Tensor] | None, aux_layers: Sequence[int]):
        """One target pass as `StepGraphs` runs it: inputs ids, positions, start (and a tree mask) ->
        (logits, aux, the policy's per-layer trace rows stacked [L, 6] or None). What it reads besides its
        inputs is fixed per step key (see `_policy`)."""
        def body(inputs: dict) -> tuple:
            if rows is not None:
                rows.clear()
            logits, aux = self.model.forward(inputs["ids"], inputs["positions"], cache, inputs["start"],
                                             mask=inputs.get("mask"), policy=policy, aux_layers=aux_layers)
            return logits, aux, (torch.stack(rows) if rows else None)
        return body

    def _policy(self, tree: DraftTree, st: _State, rows: list[Tensor] | None):
        """(the verification pass's routing policy or None for natural routing without a trace, its step key,
        the verifier it reads).

        A restricting method routes inside its verifier's set S; Standard SD routes naturally
        (`router.natural`, as plain decoding does) and calls the verifier only for the trace. The key names
        everything the policy reads as Python state; the verifier's buffers are refilled by `prepare` each
        step, so a captured pass sees each step's tree."""
        if not st.spec.restricts and rows is None:
            return None, ("verify",), None
        verifier = _verifier(self.backend, st.spec.name, self.router, st.cfg, self.num_experts, self.device)
        verifier.prepare([tree.block])
        store = self.model.store

        def policy(layer: int, logits: Tensor) -> tuple[Tensor, Tensor]:
            resident = store.resident(layer).to(logits.device) if st.prune else None
            out = verifier(logits[None], resident)                                  # B = 1
            natural = self.router.natural(logits) if rows is not None or not st.spec.restricts else None
            ids, weights = (out.ids[0], out.weights[0]) if st.spec.restricts else natural
            if rows is not None:
                rows.append(_layer_stats(layer, natural[0], ids, out))
            return ids, weights
        return policy, ("verify", id(verifier), st.prune, rows is not None), verifier

    def _commit(self, st: _State, new: list[int]) -> int:
        """Append tokens, stopping at EOS (kept) unless ignored, and at max_new_tokens; returns how many were
        output (an accepted path past EOS or the cap outputs fewer tokens than it accepted)."""
        for i, t in enumerate(new):
            st.tokens.append(int(t))
            if not st.ignore_eos and int(t) in self.eos_token_ids:
                st.done, st.stop_reason = True, "eos"
                return i + 1
            if len(st.tokens) >= st.max_new:
                st.done, st.stop_reason = True, "length"
                return i + 1
        return len(new)

    def clock(self) -> float:
        """Wall seconds, after the device's queued work has finished (what runners time generations with)."""
        return self._clock()

    def _clock(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()


def _layer_stats(layer: int, natural_ids: Tensor, ids: Tensor, out: VerifierOutput) -> Tensor:
    """fp64 [6] in trace.LAYER_FIELDS order from one block's natural ids [T, k], routed ids [T, k] and its
    verifier output (B = 1), computed on the device (no host sync)."""
    E, dev = out.eligible.shape[-1], ids.device
    union = lambda x: torch.zeros(E, dtype=torch.bool, device=dev).scatter(0, x.flatten(), True).sum()
    eligible, u = out.eligible[0], out.utility[0].double()
    total = u.sum()
    kept = torch.where(total > 0, (u * eligible).sum() / total.clamp_min(1e-300), 1.0)
    return torch.stack([torch.full((), float(layer), dtype=torch.float64, device=dev),
                        eligible.sum().double(), out.anchor[0].sum().double(), union(natural_ids).double(),
                        union(ids).double(), kept])


def _jsonable(d: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def check_device(device: str | torch.device) -> None:
    """A device this machine has; otherwise one user error naming what to pass instead."""
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {str(device)!r}: this machine has no CUDA GPU (or torch was built without CUDA); "
                        f"use device cpu (presets: `device: cpu`; lm-eval: --device cpu)")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise UserError(f"device {str(device)!r}: only {torch.cuda.device_count()} CUDA device(s) here")


def load_engine(path: str | Path | None = None, device: str | torch.device = "cpu", dtype=None,
                store: str = "resident", slots: int | None = None, target: str | Path | None = None,
                draft: str | Path | None = None, backend: str = "auto", tree: TreeShape = TreeShape(),
                selector: SelectorConfig = SelectorConfig(), steps: str = "auto") -> Engine:
    """An engine from `path` (holding target/ and, optionally, draft/) or explicit target= and draft= folders.

    dtype None = the target checkpoint's dtype; the draft runs in the target's dtype."""
    from .model import MoEModel
    check_device(device)
    if path is not None:
        if target is not None or draft is not None:
            raise ValueError("give either path (with target/ and draft/) or target= and draft=, not both")
        target, draft = Path(path) / "target", Path(path) / "draft"
        draft = draft if draft.is_dir() else None
    if target is None:
        raise ValueError("load_engine needs path (holding target/ and draft/) or target=")
    model = MoEModel.from_pretrained(target, device=device, dtype=dtype, store=store, slots=slots)
    head = Eagle3Draft.from_pretrained(draft, device=device, dtype=model.dtype) if draft is not None else None
    return Engine(model, head, backend=backend, tree=tree, selector=selector, steps=steps)
