"""`Fleet`: `dp` SGLang HTTP servers behind SGLang's own router (`sglang-router`), used like one offline engine.

    fleet = Fleet(dp=2, policy="round_robin", model_args={...}, server_args={...}, env=env, logs=folder)
    outs = fleet.generate(input_ids=prompts, sampling_params=params, rids=rids)   # the offline engine's outputs
    fleet.server_of(pid)                            # which server a process (a record's writer) belongs to
    fleet.shutdown()

Each server is `python -m sglang.launch_server` with the same model, EAGLE-3 and server settings as the offline
`sglang.Engine` gets, `tp` devices of its own (`--base-gpu-id`; on a CPU its own group of cores), the plugin
(the installed entry point, its settings file named in `env`); a plugin record names the process that wrote it,
and `server_of` maps that process to its server. The router (`python -m sglang_router.launch_router --worker-urls ...
--policy P`) is the only address requests go to: one HTTP `/generate` per request with its `input_ids`,
sampling parameters and `rid` (the plugin keys its records by it, so records written by several servers into
one file stay attributed to their request). Every process is the leader of its own process group and is
stopped with its group (`shutdown`, also at interpreter exit and after Ctrl-C), and on Linux gets SIGTERM when the
process that started it dies (a kill the exit handler cannot see); ports are free ones from the OS.

Policies are sglang-router's (`POLICIES`). The backend's default is round robin: the runs put a whole batch of
prompts in flight at once, and cache-aware routing keeps prompts that share a prefix (a chat template's) on one
server until the in-flight load differs by more than its thresholds (64 requests and 1.5x by default). docs/sglang.md.
"""
from __future__ import annotations

import atexit
import contextlib
import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from acceptmoe.errors import UserError

POLICIES = ("round_robin", "cache_aware", "power_of_two", "random")   # sglang-router's automatic policies
DEFAULT_POLICY = "round_robin"
ROUTER_PACKAGE = "sglang-router"
START_TIMEOUT_S = 1800.0          # a server loads its weights, warms up, and (GPU) captures its graphs
REQUEST_TIMEOUT_S = 24 * 3600.0   # a whole accuracy batch is in flight at once, at CPU speed here


class RouterUnavailableError(UserError, RuntimeError):
    """sglang-router is missing, or a server or the router did not come up."""


def router_version() -> str | None:
    """The installed sglang-router's version, or None."""
    try:
        return importlib.metadata.version(ROUTER_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise UserError(f"serving.router: {policy!r} is not a router policy; valid: {', '.join(POLICIES)}, or none "
                        f"(SGLang's in-process data-parallel controller)")
    return policy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli_args(settings: dict) -> list[str]:
    """SGLang server settings as `launch_server` flags: True is a bare switch, False and None are left out."""
    out: list[str] = []
    for key, value in settings.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is not False and value is not None:
            out += [flag, str(value)]
    return out


def core_groups(binding: str | None, dp: int) -> list[str | None]:
    """Per server, its part of a SGLANG_CPU_OMP_THREADS_BIND over tp * dp ranks (None: no binding)."""
    if not binding:
        return [None] * dp
    groups = binding.split("|")
    tp = len(groups) // dp
    return ["|".join(groups[i * tp:(i + 1) * tp]) for i in range(dp)]


def _end_with_parent() -> None:
    """In the child, before it runs: SIGTERM when the process that started it ends, however it ends (Linux; SGLang's
    own schedulers end with their server the same way). Elsewhere `shutdown` and the exit handler must run."""
    if sys.platform.startswith("linux"):
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)        # PR_SET_PDEATHSIG


class Fleet:
    def __init__(self, dp: int, policy: str, model_args: dict, server_args: dict, env: dict, logs: Path,
                 tp: int = 1, host: str = "127.0.0.1"):
        if router_version() is None:
            raise RouterUnavailableError(f"serving.dp = {dp} through SGLang's router needs the {ROUTER_PACKAGE} "
                                         f"package (pip install {ROUTER_PACKAGE}; scripts/sglang-env.sh installs it), "
                                         f"or set serving.router: none for SGLang's in-process dp controller")
        self.policy, self.host, self.logs = check_policy(policy), host, Path(logs)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen] = []
        self.urls: list[str] = []
        atexit.register(self.shutdown)
        try:
            cpu = str(server_args.get("device", "cuda")) == "cpu"
            binding = core_groups(env.get("SGLANG_CPU_OMP_THREADS_BIND"), dp) if cpu else [None] * dp
            for i in range(dp):
                port = free_port()
                args = dict(model_args, **server_args, host=host, port=port)
                if not cpu:
                    args["base_gpu_id"] = i * tp
                worker_env = dict(env)
                if binding[i] is not None:
                    worker_env["SGLANG_CPU_OMP_THREADS_BIND"] = binding[i]
                self._spawn(f"server-{i}", [sys.executable, "-m", "sglang.launch_server", *cli_args(args)],
                            worker_env)
                self.urls.append(f"http://{host}:{port}")
            for i, url in enumerate(self.urls):
                self._wait(url + "/health_generate", self.procs[i], f"server-{i}")
            self.url = f"http://{host}:{free_port()}"
            self._spawn("router", [sys.executable, "-m", "sglang_router.launch_router", "--host", host, "--port",
                                   self.url.rsplit(":", 1)[1], "--policy", policy, "--log-level", "warn",
                                   "--request-timeout-secs", str(int(REQUEST_TIMEOUT_S)), "--worker-urls",
                                   *self.urls], env)
            self._wait_workers()
        except BaseException:
            self.shutdown()
            raise

    # ----- processes -----
    def _spawn(self, name: str, argv: list[str], env: dict) -> None:
        log = (self.logs / f"{name}.log").open("ab")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True,      # its own process group, stopped as one
                                           preexec_fn=_end_with_parent))
        log.close()

    def _failed(self, proc: subprocess.Popen, name: str) -> RouterUnavailableError:
        log = self.logs / f"{name}.log"
        tail = log.read_text(errors="replace").strip().splitlines()[-15:] if log.is_file() else []
        return RouterUnavailableError(f"SGLang {name} exited with code {proc.returncode} before it was ready "
                                      f"(log {log}):\n" + "\n".join(tail))

    def _wait(self, url: str, proc: subprocess.Popen, name: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise self._failed(proc, name)
            with contextlib.suppress(OSError, urllib.error.URLError), urllib.request.urlopen(url, timeout=60) as r:
                if r.status == 200:
                    return
            time.sleep(1.0)
        raise RouterUnavailableError(f"SGLang {name} was not ready after {START_TIMEOUT_S:.0f} s (log "
                                     f"{self.logs / (name + '.log')})")

    def _wait_workers(self) -> None:
        """Until the router lists every server as a worker."""
        deadline = time.monotonic() + START_TIMEOUT_S
        router = self.procs[-1]
        while time.monotonic() < deadline:
            if router.poll() is not None:
                raise self._failed(router, "router")
            with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
                with urllib.request.urlopen(self.url + "/workers", timeout=30) as r:
                    listed = json.loads(r.read())
                urls = {w.get("url") for w in listed.get("workers", [])} if isinstance(listed, dict) else set()
                if set(self.urls) <= urls:
                    return
            time.sleep(0.5)
        raise RouterUnavailableError(f"the router did not list all {len(self.urls)} servers after "
                                     f"{START_TIMEOUT_S:.0f} s (log {self.logs / 'router.log'})")

    def shutdown(self) -> None:
        """Stop the router, then the servers, each with its whole process group (SIGTERM, then SIGKILL)."""
        procs, self.procs = list(reversed(self.procs)), []
        for proc in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30.0
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)     # what is left of the group (its children too)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5.0)
        atexit.unregister(self.shutdown)

    # ----- requests -----
    def generate(self, input_ids: Sequence[Sequence[int]], sampling_params: Sequence[dict],
                 rids: Sequence[str]) -> list[dict]:
        """One `/generate` per prompt, all in flight at once through the router; outputs in prompt order, each
        with `output_ids` and `meta_info` as the offline engine returns them."""
        def one(i: int) -> dict:
            body = {"input_ids": list(map(int, input_ids[i])), "sampling_params": sampling_params[i], "rid": rids[i]}
            req = urllib.request.Request(self.url + "/generate", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
                    return json.loads(r.read())
            except urllib.error.HTTPError as exc:
                raise RuntimeError(f"SGLang's router answered {exc.code} for request {rids[i]}: "
                                   f"{exc.read()[:500].decode(errors='replace')}") from None

        pool = ThreadPoolExecutor(max_workers=max(1, min(len(input_ids), 256)))
        try:
            return list(pool.map(one, range(len(input_ids))))
        finally:            # on Ctrl-C, return at once: `shutdown` then ends the requests still in flight
            pool.shutdown(wait=False, cancel_futures=True)

    def server_of(self, pid: int) -> int | None:
        """The server (index) a process belongs to: its process group is the server's, or None."""
        try:
            group = os.getpgid(pid)
        except (ProcessLookupError, PermissionError):
            return None
        leaders = [p.pid for p in self.procs[:len(self.urls)]]
        return leaders.index(group) if group in leaders else None
