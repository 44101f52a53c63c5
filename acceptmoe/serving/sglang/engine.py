"""`open_engine`: the `EngineBackend` contract over SGLang's offline `sglang.Engine` with EAGLE-3 and the plugin.

    backend = open_engine(target="Qwen/Qwen3-30B-A3B-Instruct-2507", draft="lmsys/SGLang-EAGLE3-...",
                          device="cuda", tree=TreeShape(5, 10, 64))
    plan = Variant("acceptmoe").bind(backend.fit, commitment=p_hat)
    gens = backend.generate_many(prompts, plan, max_new_tokens=256)

The plugin is configured per process through the environment (`config.py`), so a generation with another
plan restarts the engine with that plan's settings (one engine is kept at a time); the plugin binds the same
variant, budget, p_hat and base selector again inside SGLang's worker, so both sides run the same plan. Accuracy runs go
through `generate_many` (all prompts in flight, greedy); throughput runs call `generate`, batch 1. Routing
traces come back through the plugin's trace file and are returned in the native trace format. Only resident
expert stores exist here (SGLang has no X-slot expert cache): offloaded runs use the native engine.

This module imports SGLang when it is imported: on a machine without SGLang or without a CUDA device the
import fails with one message saying what is needed (EAGLE-3 verification in SGLang needs a CUDA GPU).
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from pathlib import Path
from typing import Sequence

import torch

from acceptmoe.engine.config import ModelConfig
from acceptmoe.engine.trace import BlockRecord, Trace, trace_meta
from acceptmoe.errors import UserError
from acceptmoe.methods import Fit, Plan, Router

from .config import PluginConfig, to_env
from .runtime import output_lengths, parse_steps

NEEDS = "SGLang serving needs sglang==0.5.23 and a CUDA GPU (EAGLE-3 verification runs in SGLang only on CUDA)"


class SGLangUnavailableError(UserError, ImportError):
    """SGLang or a CUDA device is missing on this machine."""


def requirements_missing() -> str | None:
    """What this machine lacks for `--engine sglang`, or None."""
    missing = []
    try:
        import sglang  # noqa: F401
    except ImportError:
        missing.append("sglang is not installed")
    if not torch.cuda.is_available():
        missing.append("no CUDA device is visible")
    return "; ".join(missing) or None


_why = requirements_missing()
if _why is not None:
    raise SGLangUnavailableError(f"{NEEDS}; this machine: {_why}")


def open_engine(target, draft, device: str = "cuda", dtype=None, store: str = "resident", slots=None,
                tree=None, **settings) -> "SGLangBackend":
    """An `EngineBackend` serving `target` with its EAGLE-3 `draft` in SGLang (resident experts only)."""
    if store != "resident":
        raise UserError("the SGLang engine keeps every expert resident: offloaded runs use --engine native")
    return SGLangBackend(Path(target), Path(draft), dtype=dtype, tree=tree, **settings)


class SGLangBackend:
    name = "sglang"

    def __init__(self, target: Path, draft: Path, dtype=None, tree=None, **server_args):
        import sglang
        from acceptmoe.engine.tree import TreeShape

        self.target, self.draft, self.tree = target, draft, tree or TreeShape()
        self.dtype = {None: "auto", torch.bfloat16: "bfloat16", torch.float16: "float16",
                      torch.float32: "float32"}.get(dtype, str(dtype))
        self.server_args, self.version = server_args, sglang.__version__
        model = ModelConfig.from_folder(target)
        self.eos_token_ids = set(model.eos_token_ids)
        self.fit = Fit(Router(model.router_kind, model.top_k, model.norm_topk_prob), model.num_experts,
                       self.tree.num_steps, "resident")
        self._engine, self._key = None, None
        self._dir = Path(tempfile.mkdtemp(prefix="acceptmoe-sglang-"))

    # ----- one engine per plan (the plugin reads its settings at process start) -----
    def _open(self, plan: Plan):
        if plan == self._key:
            return self._engine
        self.close()
        import sglang
        v, base = plan.variant, plan.selector
        plugin = PluginConfig(variant=v if plan.spec.speculates else None,
                              b0=plan.budget if v.budget is None else None, p_hat=base.p_hat,
                              selector=dataclasses.replace(base, budget=None, p_hat=None),
                              trace=str(self._dir / f"steps-{len(os.listdir(self._dir))}.jsonl"))
        os.environ.update(to_env(plugin))
        speculative = {}
        if plan.spec.speculates:
            speculative = dict(speculative_algorithm="EAGLE3", speculative_draft_model_path=str(self.draft),
                        speculative_num_steps=self.tree.num_steps, speculative_eagle_topk=self.tree.topk,
                        speculative_num_draft_tokens=self.tree.num_draft_tokens)
        self._engine = sglang.Engine(model_path=str(self.target), dtype=self.dtype, random_seed=0,
                                     **speculative, **self.server_args)
        self._key, self._plugin, self._offset = plan, plugin, 0
        return self._engine

    def _new_steps(self):
        """Records the plugin appended since the last read (its file grows for the engine's lifetime)."""
        path = Path(self._plugin.trace)
        if not path.is_file():
            return parse_steps([])
        with path.open() as f:
            f.seek(self._offset)
            text = f.read()
            self._offset = f.tell()
        return parse_steps(text.splitlines())

    def close(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
        self._engine, self._key = None, None

    # ----- EngineBackend -----
    def generate(self, prompt_ids: Sequence[int], plan: Plan, max_new_tokens: int, ignore_eos: bool = False, *,
                 trace_layers: bool = True, record_routes: bool = False):
        return self.generate_many([prompt_ids], plan, max_new_tokens, ignore_eos, trace_layers=trace_layers,
                                  record_routes=record_routes)[0]

    def generate_many(self, prompts: Sequence[Sequence[int]], plan: Plan, max_new_tokens: int,
                      ignore_eos: bool = False, *, trace_layers: bool = True, record_routes: bool = False) -> list:
        from acceptmoe.engine.engine import Generation

        if record_routes:
            raise UserError("record_routes: the SGLang backend does not record routes; record them with the native "
                            "engine (--engine native)")
        if plan.fit != self.fit:
            raise UserError(f"plan {plan.name} was bound to {plan.fit}, not to this engine ({self.fit})")
        engine = self._open(plan)
        params = {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": ignore_eos}
        start = time.perf_counter()
        outs = engine.generate(input_ids=[list(map(int, p)) for p in prompts], sampling_params=params)
        wall = time.perf_counter() - start
        steps = self._new_steps()
        gens = []
        for prompt, out in zip(prompts, outs):
            meta = out["meta_info"]
            blocks = steps.get(str(meta["id"]), [])
            trace = Trace(meta=trace_meta(self.name, plan, self.tree, "resident", len(prompt), max_new_tokens,
                                          ignore_eos),
                          blocks=[b if trace_layers else BlockRecord(b.step, b.parents, b.path, b.accept_length)
                                  for b in blocks])
            tokens = list(out["output_ids"])
            gens.append(Generation(tokens=tokens, accept_lengths=output_lengths([b.accept_length for b in blocks],
                                                                                len(tokens)),
                                   step_times=[wall / max(1, len(blocks))] * len(blocks), trace=trace,
                                   stop_reason="eos" if meta.get("finish_reason", {}).get("type") == "stop"
                                   else "length"))
        return gens

    def clock(self) -> float:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter()

    def reset_counters(self) -> None:
        pass

    def counters(self) -> dict:
        return {"store": "resident", "loads": 0, "bytes": 0, "hits": 0, "misses": 0, "wait_s": 0.0, "passes": 0}

    def describe(self) -> dict:
        return {"engine": "sglang", "version": self.version, "target": str(self.target), "draft": str(self.draft),
                "dtype": self.dtype, "tree": [self.tree.num_steps, self.tree.topk, self.tree.num_draft_tokens],
                "server_args": {k: str(v) for k, v in self.server_args.items()}}
