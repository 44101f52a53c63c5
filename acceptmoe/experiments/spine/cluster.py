"""Ray as the engine for an experiment's units (`--cluster auto|local|<address>`; the optional `cluster` extra).

    use_cluster("local")                            # the command line's --cluster, once per process
    with opened(model, world, run_dir, pooled=True) as loaded:    # a pool of workers, each holding the model
        for worker, gen in generations(loaded.engine, calls):      # calls: (prompt ids, plan, max_new, options)
            ...                                                    # in call order, whoever generated them

Without `--cluster` nothing here runs: `generations` calls the engine in process, one call after another, as
before. With it, `opened(..., pooled=True)` starts one Ray actor per device the cluster offers (a GPU each on
CUDA, `world.threads` cores each on CPU); each actor opens the model once (`engines.load_model`) and keeps it
for every unit it is given. A unit is one prompt's generation; Ray hands the next unit to whichever worker is
free (`ray.util.ActorPool`), and the driver receives each Generation and yields them in call order, so traces
and rows are written by the driver alone, into the one run folder, in the same order as a one-process run
(`--resume`, the run's lock and its provenance are unchanged). A worker lost mid-unit is restarted by Ray
(`max_restarts`) and its unit run again there (`max_task_retries`): only that unit is lost; past those limits
the error propagates, the finished rows stay, and `--resume` finishes.

Only the native engine's graded and calibration units are pooled (runners pass `pooled=True`); timed units
(fig3, fig4, table2, batch-study) open the model in the driver, alone on its device, as without `--cluster`.
The settings go to `cluster.jsonl` in the run folder, never into config.json: a run started with `--cluster`
resumes without it and back. docs/cluster.md says how to run on an 8-GPU node, a Ray cluster and Slurm.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import socket
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acceptmoe.errors import UserError

RESTARTS = 3                  # a lost worker is restarted this often (its unit retried as often), then the run stops
INSTALL = "pip install -e '.[cluster]'"

Call = tuple[Sequence[int], Any, int, Any]      # (prompt ids, Plan, max_new_tokens, GenerationOptions)


@dataclass(frozen=True)
class ClusterSpec:
    """Where the units run: "local" (a Ray instance started here on this machine's devices), "auto" (the Ray
    cluster this machine belongs to: RAY_ADDRESS or `ray start` here) or a Ray address ("host:6379",
    "ray://host:10001")."""
    where: str

    @classmethod
    def parse(cls, text: str) -> ClusterSpec:
        text = text.strip()
        if not text or any(c.isspace() for c in text):
            raise UserError(f"--cluster {text!r}: give auto, local or a Ray address such as 10.0.0.1:6379 or "
                            f"ray://10.0.0.1:10001")
        if text not in ("auto", "local") and ":" not in text:
            raise UserError(f"--cluster {text!r}: not auto, local or a Ray address (host:port, ray://host:port): "
                            f"give one of those")
        return cls(text)


_ACTIVE: ClusterSpec | None = None


def use_cluster(text: str | None) -> None:
    """The process's --cluster (None: run in process); checks that Ray is installed and, for a cluster of
    others' making (auto, an address), connects to it, before any work; a local Ray starts at first use."""
    global _ACTIVE
    if text is None:
        _ACTIVE = None
        return
    spec = ClusterSpec.parse(text)
    _ray()
    if spec.where != "local":
        _start(spec)
    _ACTIVE = spec


def active() -> ClusterSpec | None:
    return _ACTIVE


def _ray():
    try:
        import ray
    except ImportError:
        raise UserError(f"--cluster needs Ray, which is not installed here: {INSTALL} (or run without "
                        f"--cluster, in this process)") from None
    return ray


def _start(spec: ClusterSpec) -> None:
    """Connect to (or start) Ray once per process; workers import this checkout's acceptmoe."""
    ray = _ray()
    if ray.is_initialized():
        return
    from acceptmoe.paths import REPO
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    quiet = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    if spec.where == "local":
        ray.init(num_cpus=os.cpu_count() or 1, **quiet)
    else:
        _reachable(spec.where)
        try:
            ray.init(address=spec.where, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UserError(f"--cluster {spec.where}: no Ray cluster there ({str(exc)[:200]}); start one "
                            f"(`ray start --head`, docs/cluster.md) or use --cluster local") from None


def _reachable(where: str, timeout_s: float = 10.0) -> None:
    """An explicit address must answer a TCP connect within `timeout_s` (Ray itself retries for minutes)."""
    if where == "auto":
        return
    host, _, port = where.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as exc:
        raise UserError(f"--cluster {where}: nothing answers there ({exc}); start the head node "
                        f"(`ray start --head`, docs/cluster.md) or check the address") from None


def worker_resources(world) -> dict:
    """What one worker asks Ray for: one GPU on CUDA (and a core for its host), else `world.threads` cores."""
    if str(world.device).startswith("cuda"):
        return {"num_gpus": 1, "num_cpus": 1}
    return {"num_cpus": world.threads or 1}


def worker_count(world, resources: dict) -> int:
    """How many workers the cluster holds at once: its GPUs, or its cores over a worker's cores."""
    ray = _ray()
    have = ray.cluster_resources()
    if "num_gpus" in resources:
        return int(have.get("GPU", 0))
    return max(1, int(have.get("CPU", 1)) // resources["num_cpus"])


class Worker:
    """A Ray actor's body: one model opened once, generating the units it is handed."""

    def __init__(self, label: str, model, world, load: Callable):
        self.label, self.model, self.refused = label, model.name, None
        try:
            self.loaded = load(model, world)
        except UserError as exc:              # the model does not fit this worker's device, ...: the driver says so
            self.refused = str(exc)

    def describe(self) -> dict:
        import ray
        where = {"model": self.model, "worker": self.label, "pid": os.getpid(), "node": ray.util.get_node_ip_address()}
        return {**where, "refused": self.refused} if self.refused else {**where, **self.loaded.engine.describe()}

    def engine_facts(self) -> tuple:
        e = self.loaded.engine
        return e.name, e.fit, set(e.eos_token_ids)

    def generate(self, index: int, prompt: Sequence[int], plan, max_new: int, options) -> tuple[int, str, Any]:
        return index, self.label, self.loaded.engine.generate(prompt, plan, max_new, options)


class PooledEngine:
    """The driver's engine when units run on Ray workers: `fit`, `describe` and `generate` as an in-process
    engine has them (a `generate` call is one unit, run on a free worker), `map` for many units at once."""

    def __init__(self, model, world, run_dir: Path, capabilities, load: Callable):
        """`load(model, world) -> engines.Loaded`: what each worker runs once to open the model."""
        ray = _ray()
        from ray.util import ActorPool
        spec = active()
        assert spec is not None
        _start(spec)
        self.capabilities = capabilities
        resources = worker_resources(world)
        remote = ray.remote(max_restarts=RESTARTS, max_task_retries=RESTARTS, **resources)(Worker)
        count = worker_count(world, resources)
        if count < 1:
            raise UserError(f"--cluster {spec.where}: the cluster offers no GPU for the {world.device} device; "
                            f"add GPU nodes or run on CPU")
        self.actors = [remote.remote(f"w{i}", model, world, load) for i in range(count)]
        self.workers = ray.get([a.describe.remote() for a in self.actors])
        refused = [w for w in self.workers if "refused" in w]
        if refused:
            self.close()
            raise UserError(f"--cluster: worker {refused[0]['worker']} on {refused[0]['node']}: {refused[0]['refused']}")
        self.name, self.fit, self.eos_token_ids = ray.get(self.actors[0].engine_facts.remote())
        self.pool = ActorPool(self.actors)
        self._record(Path(run_dir), spec, resources)

    def _record(self, run_dir: Path, spec: ClusterSpec, resources: dict) -> None:
        """The session's cluster and workers in `cluster.jsonl`, their engines in `engines.jsonl` (provenance)."""
        now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        with open(run_dir / "cluster.jsonl", "a") as f:
            f.write(json.dumps({"time": now, "cluster": spec.where, "per_worker": resources,
                                "workers": [{k: w[k] for k in ("worker", "pid", "node")} for w in self.workers]},
                               sort_keys=True) + "\n")
        with open(run_dir / "engines.jsonl", "a") as f:
            for w in self.workers:
                f.write(json.dumps(w, sort_keys=True) + "\n")

    def map(self, calls: Iterable[Call]) -> Iterator[tuple[str, Any]]:
        """(worker, Generation) per call, in call order; every call is in flight as soon as a worker is free."""
        calls = list(calls)
        for i, (prompt, plan, max_new, options) in enumerate(calls):
            self.pool.submit(lambda a, v: a.generate.remote(*v), (i, list(prompt), plan, max_new, options))
        ready: dict[int, tuple[str, Any]] = {}      # arrived before an earlier call's: held until its turn
        nxt = 0
        while nxt < len(calls):                   # a stop leaves units in flight: `close` ends their workers
            if nxt not in ready:
                index, label, gen = self.pool.get_next_unordered()
                ready[index] = (label, gen)
                continue
            yield ready.pop(nxt)
            nxt += 1

    def generate(self, prompt_ids: Sequence[int], plan, max_new_tokens: int, options=None):
        from acceptmoe.engine.backend import GenerationOptions
        ((_, gen),) = self.map([(prompt_ids, plan, max_new_tokens, options or GenerationOptions())])
        return gen

    def generate_many(self, prompts, plan, max_new_tokens: int, options=None) -> list:
        from acceptmoe.engine.backend import GenerationOptions, per_request
        opts = per_request(options or GenerationOptions(), len(prompts))
        return [g for _, g in self.map([(p, plan, max_new_tokens, o) for p, o in zip(prompts, opts, strict=True)])]

    def describe(self) -> dict:
        return {"name": self.name, "cluster": active().where if active() else None, "workers": len(self.actors)}

    def close(self) -> None:
        ray = _ray()
        for a in self.actors:
            ray.kill(a)
        self.actors = []


def generations(engine, calls: Iterable[Call]) -> Iterator[tuple[str | None, Any]]:
    """(worker, Generation) per call, in call order: on the pool's workers for a pooled engine (worker: its
    label), else one `generate` after another in this process (worker: None), lazily."""
    if isinstance(engine, PooledEngine):
        yield from engine.map(calls)
        return
    for prompt, plan, max_new, options in calls:
        yield None, engine.generate(prompt, plan, max_new, options)


def check_pooled(world) -> None:
    """Refuse --cluster where its units cannot run: engines other than the native one serve their own batches."""
    if active() is not None and world.engine != "native":
        raise UserError(f"--cluster runs the native engine's units on Ray workers; the {world.engine} engine spreads "
                        f"over devices itself (docs/{world.engine}.md): drop --cluster or use --engine native")
