"""The speculative decoding engine: prefill, draft tree, one verification pass, acceptance (greedy or sampled).

    >>> from acceptmoe.engine import GenerationOptions, TreeShape, load_engine
    >>> from acceptmoe.methods import Variant
    >>> engine = load_engine("models/tiny", tree=TreeShape(3, 4, 12))    # holds target/ and draft/
    >>> options = GenerationOptions(ignore_eos=True)
    >>> ar, sd = (engine.generate([5, 17, 300], Variant(m).bind(engine.fit), 12, options)
    ...           for m in ("vanilla-ar", "standard-sd"))
    >>> ar.tokens == sd.tokens, len(sd.trace.blocks) == len(sd.accept_lengths)   # lossless; one block per step
    (True, True)

Every method shares one loop. `vanilla-ar` decodes one token per target step with natural routing. The
speculative methods draft an EAGLE-2 tree with the EAGLE-3 head, then run one target pass over root +
draft nodes with the tree mask. In that pass every MoE layer's routing goes through the batched verifier
(`acceptmoe.kernels.make_verifier`): the method's eligible set S for the block, residency-aware pruning of
S against the expert pool (AcceptMoE under the offloaded store by default), then constrained top-k.
`standard-sd` verifies with natural routing (`router.natural`, the same function plain decoding uses).
Acceptance (`sampling.accept`) at temperature 0 is greedy: the longest root path whose tokens are the target's
argmax, plus the bonus token; above 0 it is tree rejection sampling, exact in distribution, with the request's
own generator (`sampling`; Vanilla AR then draws from the same distribution). The KV cache keeps the accepted
path and the drafter is fed the accepted tokens with the target's features.
`generate_batch` runs several speculative generations in step, verifying all their trees in one target pass
(`MoEModel.forward_batch`), as a serving engine's batch does; every other part of the loop is shared.
A method with token-side admission (`MethodSpec.admits`; docs/method.md, "Token-side admission") verifies the
admitted subtree of each drafted tree (`admission.Admitting`, per request, also in `generate_batch`, whose
blocks may then differ in size); the trace records the tree that was verified.

A generation's settings (`Request`: the plan, the token cap, its `GenerationOptions`) never change while it
runs; its state is a `GenerationState` (cache, tokens, trace). Passes are `StepGraphs` steps (`passes.TargetPass`
and the drafter's `DraftLevel` / `DraftExtend`): eager, or at fixed shapes over persistent caches (each pass
over the prefix of the cache its sequence reaches, `kv.bucket`), captured as CUDA graphs on CUDA with the
resident store (see `graphs`).

Verifier backends (`Engine(backend=...)`): any name in `acceptmoe.kernels.VERIFIERS` (`torch`, `cpu`,
`triton`, ...) or `auto`, which `kernels.resolve_backend` decides (docs/architecture.md, "Selection").
"""
from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor

from acceptmoe.errors import UserError
from acceptmoe.kernels import Verifier, make_verifier, resolve_backend
from acceptmoe.methods import Fit, Plan, Router

from .admission import Admitting, fetch_share
from .backend import Capabilities, GenerationOptions, per_request
from .device import check_device, free_memory
from .eagle3 import Eagle3Draft, Eagle3Drafter
from .graphs import Inputs, StepGraphs, resolve_steps
from .kv import KVCache
from .passes import TargetPass
from .restriction import LayerRecord, Restriction
from .routes import PassRoutes, RouteLog, Routes
from .sampling import accept, check_divergence, divergence, generator, next_tokens
from .text import as_ids, encode, is_text, load_tokenizer
from .trace import Trace, trace_meta
from .tree import TreeShape


@functools.lru_cache(maxsize=32)
def _verifier(backend: str, plan: Plan, device: torch.device) -> Verifier:
    """One batched verifier per backend, plan and device, shared by generations and engines. The key need not
    hold the tree: a verifier keeps one set of step buffers per block shape for its life and never replaces
    one (`Verifier.prepare`), so a pass captured with one tree still reads live buffers after a generation
    with another tree; and a captured pass holds the verifier it reads."""
    return make_verifier(backend, plan, device)


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
    routes: Routes | None = None      # what every target pass sent to the experts (options.record_routes)
    divergence: list[tuple[float, float]] | None = None   # (KL, TV) per accepted position and bonus of every
                                      # verify pass (options.record_divergence; `sampling.divergence`)
    text: str | None = None           # the reply decoded (special tokens dropped) when the prompt was text

    @property
    def mean_accept_length(self) -> float:
        """tau: output tokens per target step after prefill (sum(accept_lengths) == len(tokens) - 1)."""
        return sum(self.accept_lengths) / len(self.accept_lengths) if self.accept_lengths else 0.0


@dataclass(frozen=True)
class Request:
    """What one generation was asked for (never changes while it runs)."""
    plan: Plan
    max_new_tokens: int
    options: GenerationOptions


@dataclass
class GenerationState:
    """Where one generation is: its cache, the tokens so far, the trace, its random generator (sampling)."""
    cache: KVCache
    trace: Trace
    routes: RouteLog | None = None
    rng: torch.Generator | None = None  # the request's own generator (`sampling.generator`; None: greedy)
    tokens: list[int] = field(default_factory=list)
    length: int = 0                   # committed target positions in the cache (the root is not among them)
    done: bool = False
    stop_reason: str = "length"
    prompt: Tensor | None = None      # the prompt's ids [P] on the device
    divergence: list[tuple[float, float]] | None = None   # options.record_divergence: (KL, TV) per position
    admission: Admitting | None = None   # token-side admission (an admitting plan), its measured union growth


class Engine:
    name = "native"
    capabilities: ClassVar[Capabilities] = Capabilities(records_routes=True, offloads=True,
                                                        switches_plans_freely=True, verifies_batched=True,
                                                        samples=("cpu", "cuda"), admits=True)

    def __init__(self, model, draft: Eagle3Draft | None = None, backend: str = "auto", tree: TreeShape = TreeShape(),
                 steps: str = "auto"):
        """tree: the draft tree shape of every speculative generation; steps: how the target's decode and
        verify passes and the drafter's tree levels and extensions run (`graphs.STEP_MODES`; "auto" = CUDA
        graphs on CUDA with the resident store, eager otherwise)."""
        self.model, self.draft, self.tree = model, draft, tree
        self.source: Path | None = None          # the target's folder (load_engine): where its tokenizer is
        self._tokenizer = None
        self.router: Router = model.router
        self.num_experts: int = model.config.moe.num_experts
        self.device = torch.device(model.device)
        self.eos_token_ids: set[int] = set(model.config.eos_token_ids)
        self.backend = resolve_backend(backend, self.device)
        self.steps = StepGraphs(self.device, resolve_steps(steps, self.device, model.store.kind),
                                state=(model.store.tally,))
        if draft is not None:
            draft.bind(model)

    @property
    def fit(self) -> Fit:
        """What a plan for this engine is fitted to (`Variant.bind(engine.fit, ...)`)."""
        return Fit(self.router, self.num_experts, self.tree.num_steps, self.model.store.kind)

    @property
    def tokenizer(self):
        """The target's tokenizer, loaded from its folder on first use (`load_engine` sets `source`)."""
        if self._tokenizer is None:
            if self.source is None:
                raise UserError("this engine was built from a model object, not a folder: give token ids, or "
                                "set engine.tokenizer")
            self._tokenizer = load_tokenizer(self.source, chat=False)
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, tokenizer) -> None:
        self._tokenizer = tokenizer

    # ----- public -----
    @classmethod
    def open(cls, **settings) -> Engine:
        """`load_engine(**settings)`: the `EngineBackend` opener."""
        return load_engine(**settings)

    def generate(self, prompt, plan: Plan, max_new_tokens: int,
                 options: GenerationOptions = GenerationOptions()) -> Generation:
        """A generation of `plan` (`Variant.bind(engine.fit, ...)`) from `prompt`: text, chat messages (the
        model's chat template) or token ids (`text`); `options`: EOS, the per-layer trace fields, route
        recording (`Generation.routes`, see `routes`), sampling (greedy at temperature 0; `sampling`).
        Recording never changes the computation."""
        if is_text(prompt):
            gen = self.generate(encode(self.tokenizer, prompt), plan, max_new_tokens, options)
            gen.text = self.tokenizer.decode(gen.tokens, skip_special_tokens=True)
            return gen
        req, run, drafter = self._start(prompt, plan, max_new_tokens, options)
        gen = Generation([], [], [], run.trace)
        t0 = self._clock()
        root = self._prefill(req, run, drafter)
        gen.prefill_time = self._clock() - t0
        self._commit(req, run, [root])
        step = 0
        while not run.done:
            t0 = self._clock()
            n = self._ar_step(req, run) if drafter is None else self._sd_step(req, run, drafter, step)
            gen.step_times.append(self._clock() - t0)
            gen.accept_lengths.append(n)
            step += 1
        return self._finish(gen, run)

    def generate_many(self, prompts: Sequence[Sequence[int]], plan: Plan, max_new_tokens: int,
                      options: GenerationOptions | Sequence[GenerationOptions] = GenerationOptions()
                      ) -> list[Generation]:
        """One generation per prompt, in order, each alone (batch 1; `generate_batch` verifies them together);
        `options`: one record for all, or one per prompt."""
        return [self.generate(p, plan, max_new_tokens, o)
                for p, o in zip(prompts, per_request(options, len(prompts)), strict=True)]

    def generate_batch(self, prompts: Sequence, plan: Plan, max_new_tokens: int,
                       options: GenerationOptions | Sequence[GenerationOptions] = GenerationOptions()
                       ) -> list[Generation]:
        """Speculative generations that verify together, as a serving engine's batch: the requests start
        together; each step every unfinished one drafts its own tree, and one target pass verifies all their
        trees (`MoEModel.forward_batch`: attention per request, each MoE layer's routing and experts over the
        whole pass, so a method whose sets depend on the pass sees every block). A finished request leaves
        the batch and none joins. Per request: its Generation, as `generate` returns it; a step's time is the
        batched step's; with options.record_routes its verify passes hold the rows it sent in each batched pass
        (and the store counters in `routes.meta` are the whole batch's). Every pass runs eagerly, each request
        over caches of its own; `options` is one record for all or one per prompt (each request draws from its
        own generator). A one-prompt batch is `generate` in eager mode."""
        if not isinstance(plan, Plan) or not plan.spec.speculates:
            raise UserError("generate_batch verifies draft trees together: give a speculating plan "
                            "(Vanilla AR has no verify pass to batch; use generate_many)")
        starts = [self._start(p, plan, max_new_tokens, o, eager=True)
                  for p, o in zip(prompts, per_request(options, len(prompts)), strict=True)]
        gens = [Generation([], [], [], run.trace) for _, run, _ in starts]
        for (req, run, drafter), gen in zip(starts, gens, strict=True):
            t0 = self._clock()
            root = self._prefill(req, run, drafter)
            gen.prefill_time = self._clock() - t0
            self._commit(req, run, [root])
        step = 0
        while active := [(s, g) for s, g in zip(starts, gens, strict=True) if not s[1].done]:
            t0 = self._clock()
            outputs = self._batch_step([s for s, _ in active], step)  # type: ignore[misc]  # speculating: drafters
            seconds = self._clock() - t0
            for (_, gen), n in zip(active, outputs, strict=True):
                gen.step_times.append(seconds)
                gen.accept_lengths.append(n)
            step += 1
        return [self._finish(gen, run) for (_, run, _), gen in zip(starts, gens, strict=True)]

    # ----- the rest of the EngineBackend contract -----
    def reset_counters(self) -> None:
        self.model.store.reset_counters()

    def counters(self) -> dict:
        """The expert store's counters since the last reset, summed over layers, and its kind."""
        stats = self.model.store.stats()
        return {**stats["total"], "store": stats["kind"]}

    def close(self) -> None:
        """Unregister the expert store's page-locked host memory (`ExpertStore.release`), drop the model, the
        draft, the captured graphs and the verifiers cached for this device, then give the freed device and
        pinned host memory back (`free_memory`). A second call does nothing."""
        if self.model is None:
            return
        self.model.store.release()
        self.model = self.draft = None
        self.steps = StepGraphs(self.device, "eager")
        _verifier.cache_clear()
        free_memory()

    def describe(self) -> dict:
        from importlib import metadata
        return {"engine": self.name, "version": metadata.version(__name__.partition(".")[0]), "device": str(self.device),
                "dtype": str(self.model.dtype).removeprefix("torch."), "store": self.model.store.kind,
                "verifier": self.backend, "steps": self.steps.describe(),
                "tree": dataclasses.asdict(self.tree)}

    # ----- the loop -----
    def _aux_layers(self) -> tuple[int, ...]:
        """The target layers whose outputs the draft reads (`Eagle3Draft.bind` set them)."""
        assert self.draft is not None and self.draft.aux_layer_ids is not None
        return tuple(self.draft.aux_layer_ids)

    def _prefill(self, req: Request, run: GenerationState, drafter: Eagle3Drafter | None) -> int:
        prompt = run.prompt
        assert prompt is not None                                       # `_start` sets it
        n = prompt.numel()
        aux_layers = self._aux_layers() if drafter is not None else ()
        recorder = run.routes.recorder() if run.routes is not None else None
        logits, aux = self.model.forward(prompt, torch.arange(n, device=self.device), run.cache, 0,
                                         aux_layers=aux_layers, routes=recorder)
        root = int(next_tokens(logits[-1:], req.options, run.rng)[0])
        if recorder is not None:
            assert run.routes is not None
            run.routes.add("prefill", recorder.outputs(), 1)
        run.length = n
        if drafter is not None:
            nxt = torch.cat([prompt[1:], torch.tensor([root], device=self.device)])
            drafter.extend(nxt, aux, 0)
        return root

    def _ar_step(self, req: Request, run: GenerationState) -> int:
        root = torch.tensor([run.tokens[-1]], device=self.device)
        inputs: Inputs = {"ids": root, "positions": torch.tensor([run.length], device=self.device),
                          "start": run.length}
        step = TargetPass(self.model, run.cache.upto(run.length + 1), routes=req.options.record_routes)
        logits, _, _, routes = self.steps.run(step, inputs)
        run.length += 1
        output = self._commit(req, run, [int(next_tokens(logits, req.options, run.rng)[0])])   # [1, V]
        if routes is not None:
            assert run.routes is not None                                      # routes recorded: a log holds them
            run.routes.add("decode", routes, output)
        return output

    def _sd_step(self, req: Request, run: GenerationState, drafter: Eagle3Drafter, step: int) -> int:
        tree = self._propose(run, drafter)
        run.cache.check(run.length, tree.num_tokens)
        inputs: Inputs = {"ids": tree.tokens, "positions": tree.positions, "start": run.length, "mask": tree.mask}
        natural = None
        if run.divergence is not None:   # first, so the verify pass below rewrites the tree's cache slots
            natural, _, _, _ = TargetPass(self.model, run.cache.upto(run.length + tree.num_tokens))(inputs)
        logits, aux, stats, routes = self.steps.run(self._verify_pass(tree, req, run), inputs)
        return self._accept(req, run, drafter, step, tree, logits, aux, None if stats is None else stats[:, 0],
                            routes, natural)

    def _batch_step(self, active: list[tuple[Request, GenerationState, Eagle3Drafter]], step: int) -> list[int]:
        """One batched verification pass over every active request's tree (`generate_batch`); their outputs."""
        from .model import Segment
        req = active[0][0]
        plan, aux_layers = req.plan, self._aux_layers()
        trees, segments = [], []
        for _, run, drafter in active:
            tree = self._propose(run, drafter)
            run.cache.check(run.length, tree.num_tokens)
            trees.append(tree)
            segments.append(Segment(tree.tokens, tree.positions, run.cache, run.length, tree.mask))
        record = LayerRecord(self.router) if self._records(req, active[0][1]) else None
        policy = None
        if plan.spec.restricts or record is not None:
            verifier = _verifier(self.backend, plan, self.device)
            verifier.prepare([t.block for t in trees])
            sizes = tuple(t.num_tokens for t in trees)
            policy = Restriction(verifier, self.model.store, self.router, plan.prune, record,
                                 self.model.selection_bias, blocks=len(trees),
                                 sizes=sizes if len(set(sizes)) > 1 else ())
        recording = req.options.record_routes
        recorder = PassRoutes(self.model.store, timed=self.device.type == "cpu") if recording else None
        outs = self.model.forward_batch(segments, policy, aux_layers, recorder)
        stats = record.stacked() if record is not None else None                       # [L, B, 6]
        routes = recorder.outputs() if recorder is not None else None
        done, offsets = [], [0]
        for tree in trees:
            offsets.append(offsets[-1] + tree.num_tokens)
        for b, ((r, run, drafter), tree, (logits, aux)) in enumerate(zip(active, trees, outs, strict=True)):
            mine = None
            if routes is not None:
                ids, weights, resident, seconds = routes
                lo, hi = offsets[b], offsets[b + 1]
                mine = (ids[:, lo:hi], weights[:, lo:hi], resident, seconds)
            done.append(self._accept(r, run, drafter, step, tree, logits, aux,
                                     None if stats is None else stats[:, b], mine))
        return done

    def _accept(self, req: Request, run: GenerationState, drafter: Eagle3Drafter, step: int, tree, logits: Tensor,
                aux: Tensor, stats: Tensor | None, routes: tuple | None, natural: Tensor | None = None) -> int:
        """Acceptance of one verified tree (`sampling.accept`): trace its block, commit the accepted path and the
        bonus, keep their cache slots and feed them to the drafter; the tokens output."""
        path, bonus = accept(tree, logits, req.options, run.rng)
        if natural is not None:
            assert run.divergence is not None
            kl, tv = divergence(logits[path], natural[path], req.options)
            run.divergence += list(zip(kl.tolist(), tv.tolist(), strict=True))
        new = tree.tokens[path[1:]].tolist() + [bonus]
        traced = req.options.trace_layers
        layer_rows = stats.tolist() if stats is not None and traced else ([] if traced else None)
        run.trace.add_block(step, tree.parents.tolist(), path, layer_rows)
        if run.admission is not None:
            run.admission.observe(tree.num_tokens, stats)
        output = self._commit(req, run, new)
        if routes is not None:
            assert run.routes is not None
            run.routes.add("verify", routes, output)
        if not run.done:
            idx = torch.tensor(path, device=self.device)
            run.cache.keep(run.length, idx)
            drafter.extend(torch.tensor(new, device=self.device), aux[idx], run.length)
            run.length += len(path)
        return output

    def _verify_pass(self, tree, req: Request, run: GenerationState) -> TargetPass:
        """The verification pass of this step over the cache's prefix it reads (`KVCache.upto`): natural
        routing without a verifier when nothing restricts or records; otherwise the plan's verifier, prepared
        with this step's tree (its buffers are refilled in place, so a captured pass sees each step's tree)."""
        plan, aux, record = req.plan, self._aux_layers(), self._records(req, run)
        cache = run.cache.upto(run.length + tree.num_tokens)
        if not plan.spec.restricts and not record:
            return TargetPass(self.model, cache, aux_layers=aux, routes=req.options.record_routes)
        verifier = _verifier(self.backend, plan, self.device)
        verifier.prepare([tree.block])
        return TargetPass(self.model, cache, verifier, plan.prune, record, aux, req.options.record_routes)

    def _propose(self, run: GenerationState, drafter: Eagle3Drafter):
        """This step's draft tree: as drafted, or its admitted subtree (an admitting plan)."""
        tree = drafter.propose(run.tokens[-1])
        if run.admission is None:
            return tree
        return run.admission.truncate(tree, fetch_share(self.model.store))

    @staticmethod
    def _records(req: Request, run: GenerationState) -> bool:
        """The verify pass computes its per-layer rows: for the trace, or for an admission rule that counts
        experts (recording never changes the computation)."""
        return req.options.trace_layers or (run.admission is not None and run.admission.measures)

    def _start(self, prompt, plan: Plan, max_new_tokens: int, options: GenerationOptions,
               eager: bool = False) -> tuple[Request, GenerationState, Eagle3Drafter | None]:
        """A generation's checked request, its fresh state and its drafter (None for Vanilla AR); `eager` gives
        it caches of its own rather than the step graphs' persistent ones."""
        prompt_ids = as_ids(prompt)
        if self.model is None:
            raise RuntimeError("this engine was closed (Engine.close); open another with load_engine")
        if not isinstance(plan, Plan):
            raise TypeError(f"generate takes a Plan (Variant(...).bind(engine.fit, ...)), got {type(plan).__name__}")
        if plan.fit != self.fit:
            raise UserError(f"plan {plan.name} was bound to {plan.fit}, not to this engine ({self.fit}): "
                            f"bind it with variant.bind(engine.fit, ...)")
        prompt = torch.as_tensor(list(prompt_ids) if not isinstance(prompt_ids, Tensor) else prompt_ids,
                                 dtype=torch.long).to(self.device).flatten()
        if prompt.numel() == 0:
            raise UserError("the prompt is empty: give at least one token")
        if max_new_tokens < 1:
            raise UserError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        limit = self.model.config.max_position_embeddings
        if limit and prompt.numel() + max_new_tokens > limit:
            raise UserError(f"the prompt's {prompt.numel()} tokens and max_new_tokens={max_new_tokens} pass the "
                            f"target's max_position_embeddings={limit}: lower max_new_tokens or shorten the prompt")
        speculates = plan.spec.speculates
        if speculates and self.draft is None:
            raise UserError(f"method {plan.spec.name!r} speculates and needs an EAGLE-3 draft: load the engine with one "
                            f"(`./reproduce.sh train-draft` trains one for your target)")
        if not isinstance(options, GenerationOptions):
            raise TypeError(f"options is a GenerationOptions, got {type(options).__name__}")
        req = Request(plan, max_new_tokens, options)
        meta = trace_meta(self.name, plan, self.tree, self.model.store.kind, prompt.numel(), max_new_tokens,
                          options.ignore_eos, options.sampling())
        cache_len = prompt.numel() + max_new_tokens + self.tree.num_draft_tokens
        cache = self.model.new_cache(cache_len) if eager else self.steps.cache("target", cache_len,
                                                                                self.model.new_cache)
        routes = RouteLog.begin(self.model.store) if options.record_routes else None
        run = GenerationState(cache, Trace(meta=meta), routes, generator(options, self.device), prompt=prompt,
                              admission=Admitting.start(plan))
        if options.record_divergence:
            check_divergence(plan, options, self.model.store.kind, eager)
            run.divergence = []
        drafter = None
        if speculates:
            assert self.draft is not None                                      # refused above otherwise
            drafter = Eagle3Drafter(self.draft, cache_len, self.tree, None if eager else self.steps)
        return req, run, drafter

    def _finish(self, gen: Generation, run: GenerationState) -> Generation:
        gen.tokens, gen.stop_reason, gen.divergence = run.tokens, run.stop_reason, run.divergence
        if run.routes is not None:
            gen.routes = run.routes.finish(self._route_meta(run.trace.meta))
        return gen

    def _route_meta(self, meta: dict) -> dict:
        """What a routes file says about the experts beside the routes: shapes, activation, the trace's meta."""
        cfg = self.model.config
        return {"hidden_size": cfg.hidden_size, "intermediate_size": cfg.moe.intermediate_size,
                "activation": cfg.moe.activation, "num_hidden_layers": cfg.num_layers,
                "prompt_len": meta["prompt_len"],
                **{k: meta[k] for k in ("method", "variant", "prune", "selector") if k in meta}}

    def _commit(self, req: Request, run: GenerationState, new: list[int]) -> int:
        """Append tokens, stopping at EOS (kept) unless ignored, and at max_new_tokens; returns how many were
        output (an accepted path past EOS or the cap outputs fewer tokens than it accepted)."""
        for i, t in enumerate(new):
            run.tokens.append(int(t))
            if not req.options.ignore_eos and int(t) in self.eos_token_ids:
                run.done, run.stop_reason = True, "eos"
                return i + 1
            if len(run.tokens) >= req.max_new_tokens:
                run.done, run.stop_reason = True, "length"
                return i + 1
        return len(new)

    def clock(self) -> float:
        """Wall seconds, after the device's queued work has finished (what runners time generations with)."""
        return self._clock()

    def _clock(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()


def load_engine(path: str | Path | None = None, device: str | torch.device = "cpu", dtype=None,
                store: str = "resident", slots: int | None = None, target: str | Path | None = None,
                draft: str | Path | None = None, backend: str = "auto", tree: TreeShape = TreeShape(),
                steps: str = "auto") -> Engine:
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
    engine = Engine(model, head, backend=backend, tree=tree, steps=steps)
    engine.source = Path(target)
    return engine
