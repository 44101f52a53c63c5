"""`open_engine`: the `EngineBackend` contract over SGLang's offline `sglang.Engine` with EAGLE-3 and the plugin.

    backend = open_engine(target="Qwen/Qwen3-30B-A3B-Instruct-2507", draft="lmsys/SGLang-EAGLE3-...",
                          device="cuda", tree=TreeShape(5, 10, 64))
    plan = Variant("acceptmoe").bind(backend.fit, commitment=p_hat)
    gens = backend.generate_many(prompts, plan, max_new_tokens=256)

The plugin reads its settings from a file this backend rewrites between generations (`config.Watched`), so
one server serves consecutive plans; it is replaced only when `config.server_restart` says so: EAGLE-3 switched
on or off (Vanilla AR), or a setting its captured CUDA graphs hold (the verifier's calls: method, budget,
selector). The plugin binds the same variant, budget, p_hat and base selector again inside SGLang's
worker, so both sides run the same plan. Accuracy runs go through `generate_many` (all prompts in flight,
greedy); throughput runs call `generate`, batch 1. Routing traces come back through the plugin's trace file and
are returned in the native trace format. Only resident expert stores exist here (SGLang has no X-slot expert
cache): offloaded runs use the native engine.

Memory comes from the run, not from the machine (`memory.size_pools`): `requests` in flight of up to
`request_tokens` tokens each give max_running_requests and max_total_tokens, and on a GPU the share of free
device memory SGLang keeps (mem_fraction_static, at most `memory_cap`). SGLang's overlap scheduler is off unless
`overlap=True` (the paper measured with it off).

On a CUDA GPU SGLang runs as installed (CUDA graphs on unless `disable_cuda_graph=True`). On a CPU
(`device="cpu"`) `acceptmoe.serving.sglang.cpu` supplies what SGLang lacks for its EAGLE loop there (the CPU
ops, the tree-masked backend): the same scheduler, worker and verify pass, at CPU speed. `tp` and `dp` are
SGLang's tensor and data parallelism. With `dp` > 1 and a `router` policy the backend serves through SGLang's own
router (`fleet.Fleet`: `dp` HTTP servers of `tp` devices each behind `sglang-router`, every request sent through
the router with its id); with `router=None`, SGLang's in-process dp controller (`dp_size`) spreads the requests in
flight over its schedulers. Either way the plugin's records come back through one file, keyed by request id.

Importing this module needs SGLang installed; the SGLang environment is built by `scripts/sglang-env.sh`
(`./reproduce.sh` does it when `--engine sglang` or `cross-engine` is asked for).
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import torch

from acceptmoe.engine.backend import Capabilities, GenerationOptions, per_request
from acceptmoe.engine.config import ModelConfig
from acceptmoe.engine.trace import BlockRecord, Trace, trace_meta
from acceptmoe.errors import UserError
from acceptmoe.methods import Fit, Plan

from .config import ENV_FILE, PREFIX, for_plan, server_restart, settings
from .memory import MEMORY_CAP, size_pools
from .runtime import output_lengths, parse_steps

NEEDS = ("SGLang serving needs sglang==0.5.23 (scripts/sglang-env.sh builds a CPU environment for it; on a GPU "
         "install it with its CUDA dependencies)")


class SGLangUnavailableError(UserError, ImportError):
    """SGLang is missing, or the device asked for cannot run it."""


def installed() -> bool:
    """SGLang's distribution is installed (a folder named sglang on the path is not enough)."""
    try:
        importlib.metadata.version("sglang")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def requirements_missing(device: str = "cuda") -> str | None:
    """What this machine lacks for `--engine sglang` on `device`, or None."""
    if not installed():
        return "sglang is not installed"
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        return "no CUDA device is visible (use device: cpu for SGLang's CPU path)"
    return None


if not installed():                 # checked when the runners import the opener: before a run starts
    raise SGLangUnavailableError(f"{NEEDS}; this machine: sglang is not installed")


def open_engine(target, draft, device: str = "cuda", dtype=None, store: str = "resident", slots=None,
                tree=None, tp: int = 1, dp: int = 1, router: str | None = None, dump: str | None = None,
                requests: int = 1, request_tokens: int = 4096, memory_cap: float = MEMORY_CAP, overlap: bool = False,
                **settings) -> SGLangBackend:
    """An `EngineBackend` serving `target` with its EAGLE-3 `draft` in SGLang (resident experts only), its pools
    sized for `requests` in flight of up to `request_tokens` tokens (prompt and generation); `settings` are
    SGLang server arguments and win over the computed ones. With `dp` > 1, `router` names the policy of SGLang's
    router in front of `dp` servers (`fleet.POLICIES`); None keeps SGLang's in-process dp controller."""
    if store != "resident":
        raise UserError("the SGLang engine keeps every expert resident: offloaded runs use --engine native")
    why = requirements_missing(device)
    if why is not None:
        raise SGLangUnavailableError(f"{NEEDS}; this machine: {why}")
    if str(device) == "cpu":
        from . import cpu
        cpu.prepare_process()
        settings = {**cpu.SERVER_ARGS, **settings}
        if tp * dp > 1 and "SGLANG_CPU_OMP_THREADS_BIND" not in os.environ:
            os.environ["SGLANG_CPU_OMP_THREADS_BIND"] = cpu.thread_binding(tp * dp)
    else:
        settings = {"device": str(device), **settings}
    if tp != 1:
        settings["tp_size"] = int(tp)
    fleet = None
    if dp != 1 and router is None:
        settings["dp_size"] = int(dp)
    elif dp != 1:
        from .fleet import check_policy
        fleet = {"dp": int(dp), "policy": check_policy(router)}
    settings = {"disable_overlap_schedule": not overlap, **settings}
    return SGLangBackend(Path(target), Path(draft), dtype=dtype, tree=tree, dump=dump, fleet=fleet,
                         memory=dict(requests=requests, request_tokens=request_tokens, cap=memory_cap), **settings)


def sampling_params(options: GenerationOptions, max_new_tokens: int) -> dict:
    """SGLang's sampling parameters for one request: temperature 0 (greedy) exactly as before sampling existed;
    otherwise temperature, top_k (SGLang's -1 is our 0: no cut), top_p and the request's seed (`sampling_seed`,
    which seeds SGLang's verify coins too)."""
    params = {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": options.ignore_eos}
    if not options.greedy:
        params.update(temperature=options.temperature, top_k=options.top_k or -1, top_p=options.top_p)
        if options.seed is not None:
            params["sampling_seed"] = options.seed
    return params


class SGLangBackend:
    name = "sglang"
    # no X-slot expert cache; routes stay inside the server; a plan a captured graph holds starts a new server
    # (config.server_restart); generate_many runs its prompts concurrently, which SGLang batches as it schedules
    # it samples with SGLang's own verify rule: on CUDA its sgl-kernel kernel, on a CPU the same rule as torch code
    # (`cpu.sampling`; SGLang alone commits the argmax there)
    capabilities: ClassVar[Capabilities] = Capabilities(records_routes=False, offloads=False,
                                                        switches_plans_freely=False, verifies_batched=False,
                                                        samples=("cuda", "cpu"), admits=True)

    @classmethod
    def open(cls, **settings) -> SGLangBackend:
        """`open_engine(**settings)`: the `EngineBackend` opener."""
        return open_engine(**settings)

    def __init__(self, target: Path, draft: Path, dtype=None, tree=None, dump: str | None = None,
                 memory: dict | None = None, fleet: dict | None = None, **server_args):
        import sglang

        from acceptmoe.engine.tree import TreeShape

        self.target, self.draft, self.tree = target, draft, tree or TreeShape()
        model = ModelConfig.from_folder(target)
        self.dtype = {None: "auto", torch.bfloat16: "bfloat16", torch.float16: "float16",
                      torch.float32: "float32"}.get(dtype, str(dtype))
        self.version = sglang.__version__
        self.eos_token_ids = set(model.eos_token_ids)
        self.fit = Fit(model.moe.router, model.moe.num_experts, self.tree.num_steps, "resident")
        self.pools, self.server_args = None, server_args
        if memory is not None:
            kv_dtype = str(model.dtype).removeprefix("torch.") if self.dtype == "auto" else self.dtype
            self.pools = size_pools(target, draft, self.tree, kv_dtype, memory["requests"], memory["request_tokens"],
                                    int(server_args.get("tp_size", 1)))
            device = server_args.get("device", "cuda")
            free = torch.cuda.mem_get_info()[0] if str(device).startswith("cuda") else None
            self.server_args = {**self.pools.server_args(device, free, memory["cap"]), **server_args}
        # a CUDA graph captured at the start holds the plugin's calls: some plan changes need a new server
        self.graphs = self.device.startswith("cuda") and \
            not self.server_args.get("disable_cuda_graph", False)
        self._engine, self._key, self._plugin, self.dump = None, None, None, dump
        self.starts = 0                                     # servers started over this backend's life
        self.fleet = fleet                                  # {"dp", "policy"}: dp servers behind SGLang's router
        self.served: dict[int, int] = {}                    # fleet: requests whose records server i wrote
        self._pids: dict[str, set[int]] = {}                # fleet: request id -> processes that wrote its records
        self._calls = 0
        self._dir = Path(tempfile.mkdtemp(prefix="acceptmoe-sglang-"))
        self._settings = self._dir / "plugin.json"          # the plugin's settings, rewritten between generations

    @property
    def device(self) -> str:
        """The device SGLang runs on (its server argument; SGLang's own default is CUDA)."""
        return str(self.server_args.get("device", "cuda"))

    # ----- one server for consecutive plans (the plugin re-reads its settings file) -----
    def _open(self, plan: Plan):
        dump = None if self.dump is None else str(Path(self.dump) / plan.name)
        if server_restart(self._key if self._engine is not None else None, plan, self.graphs) is None:
            plugin = for_plan(plan, self._plugin.trace, dump)
            if plugin != self._plugin:                      # the plugin reads the file again before its next pass
                self._write_settings(plugin)
            self._key = plan
            return self._engine
        self._stop()
        import sglang
        self._dir.mkdir(parents=True, exist_ok=True)
        self._write_settings(for_plan(plan, str(self._dir / f"steps-{self.starts}.jsonl"), dump))
        speculative = {}
        if plan.spec.speculates:
            speculative = dict(speculative_algorithm="EAGLE3", speculative_draft_model_path=str(self.draft),
                        speculative_num_steps=self.tree.num_steps, speculative_eagle_topk=self.tree.topk,
                        speculative_num_draft_tokens=self.tree.num_draft_tokens)
        if self.fleet is not None:
            from .fleet import Fleet
            env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
            env[ENV_FILE] = str(self._settings)          # the servers read only this backend's file
            self._engine = Fleet(self.fleet["dp"], self.fleet["policy"],
                                 dict(model_path=str(self.target), dtype=self.dtype, random_seed=0, **speculative),
                                 self.server_args, env, self._dir / f"logs-{self.starts}",
                                 tp=int(self.server_args.get("tp_size", 1)))
            self._key, self._offset = plan, 0
            self.starts += 1
            return self._engine
        keys = [k for k in os.environ if k.startswith(PREFIX)]
        saved = {k: os.environ.pop(k) for k in keys}          # SGLang's processes read only this backend's file
        os.environ[ENV_FILE] = str(self._settings)
        try:
            self._engine = sglang.Engine(model_path=str(self.target), dtype=self.dtype, random_seed=0,
                                         **speculative, **self.server_args)
        finally:                               # ... and this process keeps its own environment
            os.environ.pop(ENV_FILE)
            os.environ.update(saved)
        self._key, self._offset = plan, 0
        self.starts += 1
        return self._engine

    def _write_settings(self, plugin) -> None:
        """Replace the settings file (a new file renamed over the old one: the plugin sees a new inode)."""
        tmp = self._settings.with_suffix(".tmp")
        tmp.write_text(json.dumps(settings(plugin), sort_keys=True))
        os.replace(tmp, self._settings)
        self._plugin = plugin

    def _new_steps(self):
        """Records the plugin appended since the last read (its file grows for the engine's lifetime)."""
        path = Path(self._plugin.trace)
        if not path.is_file():
            return parse_steps([])
        with path.open() as f:
            f.seek(self._offset)
            text = f.read()
            self._offset = f.tell()
        return parse_steps(text.splitlines(), self._pids if self.fleet is not None else None)

    def close(self) -> None:
        """Shut the server down (its processes and their memory) and remove its settings and record files."""
        self._stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _stop(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
        self._engine, self._key = None, None

    # ----- EngineBackend -----
    def generate(self, prompt_ids: Sequence[int], plan: Plan, max_new_tokens: int,
                 options: GenerationOptions = GenerationOptions()):
        return self.generate_many([prompt_ids], plan, max_new_tokens, options)[0]

    def generate_many(self, prompts: Sequence[Sequence[int]], plan: Plan, max_new_tokens: int,
                      options: GenerationOptions | Sequence[GenerationOptions] = GenerationOptions()) -> list:
        from acceptmoe.engine.engine import Generation

        each = per_request(options, len(prompts))
        options = each[0] if each else GenerationOptions()
        if any((o.ignore_eos, o.trace_layers, o.record_routes) != (options.ignore_eos, options.trace_layers,
                                                                   options.record_routes) for o in each):
            raise ValueError("the SGLang backend takes one ignore_eos, trace_layers and record_routes per call")
        sampled = [o for o in each if not o.greedy]
        if sampled and not self.capabilities.samples_on(self.device):
            raise UserError(f"temperature={sampled[0].temperature}: the SGLang backend samples on "
                            f"{', '.join(self.capabilities.samples)}, not on {self.device}; sample with the native "
                            f"engine (--engine native), run SGLang on one of those, or set temperature 0")
        if options.record_routes:
            raise UserError("record_routes: the SGLang backend does not record routes; record them with the native "
                            "engine (--engine native)")
        if plan.fit != self.fit:
            raise UserError(f"plan {plan.name} was bound to {plan.fit}, not to this engine ({self.fit})")
        engine = self._open(plan)
        params = [sampling_params(o, max_new_tokens) for o in each]
        inputs = [list(map(int, p)) for p in prompts]
        start = time.perf_counter()
        if self.fleet is not None:                  # request ids the plugin's records are keyed by
            self._calls += 1
            rids = [f"acceptmoe-{self.starts}-{self._calls}-{i}" for i in range(len(prompts))]
            outs = engine.generate(input_ids=inputs, sampling_params=params, rids=rids)
        else:
            outs = engine.generate(input_ids=inputs, sampling_params=params)
        wall = time.perf_counter() - start
        steps = self._new_steps()
        if self.fleet is not None:
            self._count_served(engine, [str(o["meta_info"]["id"]) for o in outs])
        gens = []
        for prompt, out, opts in zip(prompts, outs, each, strict=False):
            meta = out["meta_info"]
            blocks = steps.get(str(meta["id"]), [])
            trace = Trace(meta=trace_meta(self.name, plan, self.tree, "resident", len(prompt), max_new_tokens,
                                          options.ignore_eos, opts.sampling()),
                          blocks=[b if options.trace_layers else BlockRecord(b.step, b.parents, b.path, b.accept_length)
                                  for b in blocks])
            tokens = list(out["output_ids"])
            # target steps after the prefill: verify steps' accepted paths, or one token per plain decode step
            lengths = [b.accept_length for b in blocks] if plan.spec.speculates else [1] * len(tokens)
            accepted = output_lengths(lengths, len(tokens))
            gens.append(Generation(tokens=tokens, accept_lengths=accepted,
                                   step_times=[wall / max(1, len(accepted))] * len(accepted), trace=trace,
                                   stop_reason="eos" if meta.get("finish_reason", {}).get("type") == "stop"
                                   else "length"))
        return gens

    def _count_served(self, fleet, rids: list[str]) -> None:
        """Which server wrote each request's records (its scheduler's process group is the server's)."""
        for rid in rids:
            for server in {fleet.server_of(pid) for pid in self._pids.pop(rid, set())} - {None}:
                self.served[server] = self.served.get(server, 0) + 1

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
                "server_args": {k: str(v) for k, v in self.server_args.items()},
                "pools": None if self.pools is None else self.pools.describe(), **self._describe_fleet()}

    def _describe_fleet(self) -> dict:
        """With SGLang's router: dp, tp and the router (package, version, policy); nothing otherwise."""
        if self.fleet is None:
            return {}
        from .fleet import ROUTER_PACKAGE, router_version
        return {"dp": self.fleet["dp"], "tp": int(self.server_args.get("tp_size", 1)),
                "router": {"package": ROUTER_PACKAGE, "version": router_version(), "policy": self.fleet["policy"]}}
