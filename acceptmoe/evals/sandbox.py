"""Run model-written Python programs in a confined, limited process and report pass or fail.

    results = run_many(sources, Limits(), workers=2)    # one `ExecResult` (status, time, stdout, ...) each

Contract: each program runs in a fresh interpreter with none of the caller's environment, confined as far as
the machine allows (bubblewrap namespaces, a uid of its own, a memory cgroup; every fallback is named by
`isolation()` and recorded with a run), under `Limits`. Status is `passed` only when the program runs to its end
(the bootstrap prints a per-run token after it returns), else `failed`, `error` or `timeout`; a sandbox that
cannot start raises `SandboxError`, never a failing program. What it confines, each fallback, the statuses in
full and what it does not defend against: docs/sandbox.md.
"""
from __future__ import annotations

import atexit
import contextlib
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from acceptmoe.evals import bootstrap, confine
from acceptmoe.evals.pump import Watch, pump

OPEN_FILES = 32  # RLIMIT_NOFILE of a program

STATUSES = ("passed", "failed", "error", "timeout")


# Host folders covered by an empty tmpfs should they lie inside a folder bound into the sandbox.
_HIDDEN = tuple(os.path.realpath(p) for p in (Path(__file__).resolve().parents[2], sys.prefix,
                                               os.path.expanduser("~")))



@dataclass(frozen=True)
class Limits:
    """Per-program limits. `cpu_s` defaults to the wall-clock timeout rounded up, plus one second.
    `tmp_mb`: size of each private tmpfs (`/tmp`, `/dev/shm`) under bubblewrap. `output_chars`: the
    characters of stdout and of stderr kept (half from the head, half from the tail). `threads`: new
    threads (and processes) a program may start under bubblewrap (elsewhere none). `packages`: the
    distributions a solution may import (`confine.SOLUTION_DISTRIBUTIONS`) are importable (read-only)."""

    timeout_s: float = 20.0
    memory_mb: int = 1024
    cpu_s: int | None = None
    file_mb: int = 16
    output_chars: int = 4000
    tmp_mb: int = 64
    threads: int = 0
    packages: bool = False

    def cpu_seconds(self) -> int:
        return self.cpu_s if self.cpu_s is not None else math.ceil(self.timeout_s) + 1


@dataclass(frozen=True)
class Isolation:
    """How programs are separated from the machine and from each other.

    network: "netns" (new empty network namespace) or "socket-patch" (socket constructors raise).
    run_as_uid: the uid programs run under (the first of the pool when uid_per_program), or None for the
        caller's uid.
    launcher: the command prefix that creates the namespaces (bwrap's path when filesystem is "private").
    filesystem: "private" (bubblewrap: own PID, mount, IPC and UTS namespaces, see the module docstring)
        or "shared" (the host's filesystem and PID namespace, with a fresh working folder).
    memory: "cgroup" (a cgroup v2 leaf per program) or "rlimit" (one process under RLIMIT_AS, tmpfs sizes,
        memfds refused).
    uid_per_program: programs running at the same time get distinct uids.
    fallbacks: what this machine could not provide, and why.
    """

    network: str
    run_as_uid: int | None
    launcher: tuple[str, ...]
    filesystem: str = "shared"
    memory: str = "rlimit"
    uid_per_program: bool = False
    fallbacks: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        if self.run_as_uid is None:
            who = "the caller's uid"
        else:
            who = f"uids from {self.run_as_uid}, one per program" if self.uid_per_program else f"uid {self.run_as_uid}"
        text = (f"filesystem={self.filesystem}, pid/ipc={'own' if self.filesystem == 'private' else 'shared'}, "
                f"network={self.network}, memory={self.memory}, runs as {who}, "
                f"launcher={os.path.basename(self.launcher[0]) if self.launcher else '-'}")
        return text + "".join(f"; fallback: {f}" for f in self.fallbacks)

    def record(self) -> dict:
        """A JSON-able summary, stored with each run's environment."""
        return {**asdict(self), "launcher": list(self.launcher), "fallbacks": list(self.fallbacks)}


@dataclass(frozen=True)
class ExecResult:
    """Outcome of one program: status in STATUSES, wall time, exit code, truncated stdout and stderr, and
    why a watch stopped it (None if none did)."""

    status: str
    duration_s: float
    returncode: int | None
    stdout: str
    stderr: str
    stopped: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == "passed"


class SandboxError(RuntimeError):
    """The sandbox could not set up a program's process (a problem of the machine, not of the program)."""


_UIDS = confine.UidPool()
_NO_MEMFD = confine.no_memfd_filter()


@lru_cache(maxsize=1)
def _cgroups() -> confine.MemoryCgroups:
    groups = confine.MemoryCgroups.open()
    atexit.register(groups.close)
    return groups


_PROBE_NAMESPACES = "import os\nassert os.getpid() < 16 and not os.path.exists('/etc'), 'namespaces not in force'\n"


def _probe(iso: Isolation, program: str = "pass") -> str | None:
    """None if `program` passes under `iso`, else why not."""
    try:
        res = run_program(program, Limits(timeout_s=60), iso)
    except (SandboxError, OSError) as exc:  # the end of the message holds the launcher's own complaint
        lines = [line for line in str(exc).splitlines() if line.strip()]
        return lines[-1][-200:] if lines else type(exc).__name__
    return None if res.passed else f"a trivial program ended as {res.status}: {res.stderr.strip()[-300:]}"


# Without bubblewrap, a mount namespace of the program's own covers the code tasks' data (the data folder,
# and data files in the package folders) before the bootstrap starts: an empty read-only tmpfs over a
# folder, /dev/null over a file.
_OWN_MOUNTS = ("--mount", "--propagation", "private")
_COVER = ('while [ "$1" != "--" ]; do '
          'if [ -d "$1" ]; then mount -t tmpfs -o ro,size=4096,mode=0555 none "$1"; '
          'else mount --bind /dev/null "$1"; fi || exit 125; shift; done; shift; exec "$@"')


def _covered(launcher: tuple[str, ...], paths: list[str]) -> list[str]:
    """The launcher's command prefix, covering `paths` first when it makes a mount namespace."""
    if _OWN_MOUNTS[0] not in launcher:
        return list(launcher)
    return [*launcher, "/bin/sh", "-c", _COVER, "sh", *paths, "--"]


def data_paths(packages: bool) -> list[str]:
    """What of the code tasks' data and solutions exists on this machine: the data folder, the evaluation
    packages (`confine.EVALUATION_DISTRIBUTIONS`), and data files in the packages a solution may import
    when those are visible."""
    from acceptmoe.evals.data import data_dir
    found = [str(data_dir().resolve())] if data_dir().is_dir() else []
    evaluation = list(confine.distribution_entries(confine.EVALUATION_DISTRIBUTIONS))
    return found + evaluation + (list(confine.data_files()) if packages else [])


def _launcher_works(launcher: tuple[str, ...]) -> bool:
    with tempfile.TemporaryDirectory() as folder:
        try:
            done = subprocess.run([*_covered(launcher, [folder]), sys.executable, "-I", "-S", "-c", "pass"],
                                  capture_output=True, timeout=30, env=clean_env("/"), stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return False
    return done.returncode == 0


@lru_cache(maxsize=1)
def isolation() -> Isolation:
    """Detect, once per process, the strongest isolation this machine allows (see the module docstring);
    warn once about every fallback."""
    root = os.geteuid() == 0
    uid = _UIDS.first if root else None
    fallbacks: list[str] = []
    iso = None
    bwrap = shutil.which("bwrap")
    if bwrap:
        candidate = Isolation("netns", uid, (bwrap,), "private", "rlimit", root)
        problem = _probe(candidate, _PROBE_NAMESPACES)
        if problem is None:
            iso = candidate
        else:
            fallbacks.append(f"bubblewrap does not work here ({problem}): programs share the host's filesystem "
                             f"and PID namespace")
    else:
        fallbacks.append("bubblewrap is not installed (`apt-get install bubblewrap`): programs share the host's "
                         "filesystem and PID namespace")
    if iso is None:
        bases = ([("unshare", "--net")] if root else []) + [("unshare", "--user", "--net")]
        candidates = [(*b, *_OWN_MOUNTS) for b in bases] + bases
        launcher = next((c for c in candidates if shutil.which("unshare") and _launcher_works(c)), None)
        if launcher is None:
            fallbacks.append("no network namespace: sockets are only disabled inside Python")
        if launcher is None or _OWN_MOUNTS[0] not in launcher:
            fallbacks.append("no mount namespace: the code tasks' data files are readable by programs")
        iso = Isolation("netns" if launcher else "socket-patch", uid, launcher or (), "shared", "rlimit", root)
    if not root:
        fallbacks.append("the harness is not root: programs run under the caller's uid" + (
            " (each still in its own namespaces)" if iso.filesystem == "private" else
            ", so they can change the caller's files and signal its processes"))
    try:
        _cgroups()
        problem = _probe(replace(iso, memory="cgroup"))
    except OSError as exc:
        problem = str(exc)
    if problem is None:
        iso = replace(iso, memory="cgroup")
    else:
        held = "the tmpfs sizes" if iso.filesystem == "private" else "RLIMIT_FSIZE per file on the host's disk"
        memfds = ("memfd_create refused" if _NO_MEMFD else
                  f"up to {OPEN_FILES} open files x Limits.file_mb of unmapped memfds")
        one = ("new processes refused (1 process x Limits.memory_mb)" if _NO_MEMFD else
               "no new processes or threads (1 process x Limits.memory_mb)")
        fallbacks.append(f"no memory cgroup ({problem}): memory is bounded by RLIMIT_AS over every mapping of "
                         f"one process, {one}, and {held}; {memfds}")
    iso = replace(iso, fallbacks=tuple(fallbacks))
    if fallbacks:
        warnings.warn(f"sandbox: {iso.describe()}", RuntimeWarning, stacklevel=2)
    return iso


def clean_env(workdir: str) -> dict[str, str]:
    """The child's whole environment: nothing of the caller's, only what Python needs (and one thread for
    numerical libraries, which otherwise start one per core at import)."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1"}


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def _status(returncode: int, passed_token: bool, timed_out: bool) -> str:
    if timed_out or returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return "timeout"  # wall clock (we killed it) or the CPU limit (SIGXCPU, then SIGKILL)
    if returncode == 0:
        return "passed" if passed_token else "failed"
    if returncode == bootstrap.EXIT_EXCEPTION or returncode < 0:
        return "error"  # an exception other than AssertionError, or killed by a signal (e.g. SIGXFSZ)
    return "failed"  # AssertionError, exit() before the end, os._exit(n), lost stdout


def _command(limits: Limits, iso: Isolation, uid: int, control_fd: int, cgroup: str | None,
             filter_fd: int | None) -> list[str]:
    """The child's command line. The seccomp filter (without a memory cgroup) is installed by bubblewrap
    from `filter_fd`, else by the bootstrap (which then has to load ctypes)."""
    private = iso.filesystem == "private"
    in_bootstrap = iso.memory == "rlimit" and _NO_MEMFD is not None and filter_fd is None
    packages = confine.distribution_entries() if limits.packages else ()
    together = iso.memory == "cgroup" or _NO_MEMFD is not None  # every task's memory under one bound
    tasks = limits.threads + 1 if limits.threads > 0 and private and together else 0
    args = [limits.memory_mb << 20, limits.cpu_seconds(), limits.file_mb << 20, OPEN_FILES, uid,
            int(iso.network == "socket-patch"), int(uid >= 0 and not private),
            (limits.tmp_mb << 20) // os.sysconf("SC_PAGE_SIZE") if private and os.geteuid() == 0 else -1, control_fd,
            tasks, os.pathsep.join(confine.package_folders(packages)) or "-", _NO_MEMFD.hex() if in_bootstrap else "-"]
    if private:
        exe = confine.python_runtime()[0]
        prefix = confine.bwrap_args(iso.launcher[0], limits.tmp_mb << 20, _HIDDEN, packages,
                                    confine.data_files() if packages else ())
        if filter_fd is not None:
            prefix += ["--seccomp", str(filter_fd)]
    else:
        exe, prefix = sys.executable, _covered(iso.launcher, data_paths(limits.packages))
    cmd = [*prefix, exe, "-I", "-S", "-B", "-c", bootstrap.SOURCE, *map(str, args)]
    if cgroup is not None:  # enter the program's cgroup before anything else starts
        cmd = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(cgroup, "cgroup.procs"), *cmd]
    return cmd


def _refused(cause: str) -> ExecResult:
    return ExecResult(status="error", duration_s=0.0, returncode=None, stdout="", stderr=f"[sandbox] {cause}\n")


def run_program(source: str, limits: Limits = Limits(), iso: Isolation | None = None,
                watch: Watch | None = None) -> ExecResult:
    """Run one program in the sandbox and classify the outcome (docs/sandbox.md, "Verdicts"); `watch` sees its
    stdout as it comes and may stop it. Raises SandboxError if the process could not be set up (never a
    verdict on the program)."""
    iso = iso or isolation()
    try:
        payload = source.encode("utf-8")
    except UnicodeEncodeError as exc:
        return _refused(f"the program is not valid UTF-8 text: {exc}")
    uid = _UIDS.acquire() if iso.uid_per_program else (-1 if iso.run_as_uid is None else iso.run_as_uid)
    try:
        return _run(payload, limits, iso, uid, watch)
    finally:
        if iso.uid_per_program:
            _UIDS.release(uid)


def _read_capped(f, keep: int) -> bytes:
    """At most `keep` bytes from the head and `keep` from the tail of the file `f`."""
    size = f.seek(0, os.SEEK_END)
    f.seek(0)
    if size <= 2 * keep:
        return f.read()
    head = f.read(keep)
    f.seek(size - keep)
    return head + b"\n[... %d bytes cut ...]\n" % (size - 2 * keep) + f.read(keep)


def _run(payload: bytes, limits: Limits, iso: Isolation, uid: int, watch: Watch | None) -> ExecResult:
    private = iso.filesystem == "private"
    nonce = secrets.token_hex(16).encode()
    token = b"\n" + nonce + b"\n"
    keep = 2 * limits.output_chars + len(token)
    outer, workdir = (None, "/") if private else confine.make_workdir(uid)
    cgroup = _cgroups().create(f"run-{nonce[:12].decode()}", limits.memory_mb << 20) if iso.memory == "cgroup" else None
    control_r, control_w = os.pipe()
    filter_fd = None
    if private and iso.memory == "rlimit" and _NO_MEMFD is not None:
        filter_fd, filter_w = os.pipe()
        os.write(filter_w, _NO_MEMFD)  # 64 bytes: fits the pipe's buffer
        os.close(filter_w)
    passed_fds = (control_w,) if filter_fd is None else (control_w, filter_fd)
    notes = []
    try:
        with tempfile.TemporaryFile() as err:
            start = time.monotonic()
            try:
                proc = subprocess.Popen(_command(limits, iso, uid, control_w, cgroup, filter_fd), cwd=workdir,
                                        env=clean_env("/tmp" if private else workdir), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=err, start_new_session=True,
                                        pass_fds=passed_fds)
            except OSError as exc:
                raise SandboxError(f"the sandbox could not start a program ({iso.describe()}): {exc}") from exc
            finally:
                for fd in passed_fds:
                    os.close(fd)
            try:
                out = pump(proc, nonce + b"\n" + payload, limits.timeout_s, keep, watch)
            finally:
                if proc.returncode is None:
                    _kill_group(proc.pid)
                    proc.wait()
                proc.stdout.close()
            duration = time.monotonic() - start
            ready = os.read(control_r, 16) == b"ready"
            if cgroup is not None and confine.MemoryCgroups.oom_killed(cgroup):
                notes.append(f"killed: the program's processes exceeded {limits.memory_mb} MiB (memory cgroup)")
            stderr = _read_capped(err, keep)
    finally:
        os.close(control_r)
        if cgroup is not None:
            confine.MemoryCgroups.remove(cgroup)
        if outer is not None:
            try:
                confine.remove_tree(outer)
            except OSError as exc:  # the program's leftovers: its failure, not the run's
                notes.append(f"its files could not be removed: {exc!r}")
                warnings.warn(f"sandbox folder {outer} could not be removed fully: {exc}", RuntimeWarning,
                              stacklevel=1)
    returncode = proc.returncode
    if not ready and not (out.timed_out or out.stopped):
        raise SandboxError(f"the sandbox could not start a program (exit status {returncode}, isolation "
                           f"{iso.describe()}):\n{stderr.decode('utf-8', 'replace')[-2000:]}")
    if private and 128 < returncode < 128 + 65:
        returncode = 128 - returncode  # bubblewrap reports death by signal N as 128 + N
    stdout = out.head if out.total <= keep else out.head + b"\n[... cut ...]\n" + out.tail
    passed_token = out.tail.endswith(token) and not out.stopped
    if passed_token:
        stdout = stdout[: -len(token)]
    if out.stopped:
        notes.append(f"stopped: {out.stopped.reason}")
        status = "timeout" if out.stopped.timeout else "error"
    else:
        status = "error" if notes else _status(returncode, passed_token, out.timed_out)
    stderr_text = _truncate(stderr.decode("utf-8", "replace"), limits.output_chars)
    return ExecResult(status=status, duration_s=duration, returncode=returncode,
                      stdout=_truncate(stdout.decode("utf-8", "replace"), limits.output_chars),
                      stderr=stderr_text + "".join(f"\n[sandbox] {n}\n" for n in notes),
                      stopped=out.stopped.reason if out.stopped else None)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run_many(sources: list[str], limits: Limits = Limits(), workers: int = 2,
             iso: Isolation | None = None) -> list[ExecResult]:
    """Run programs in parallel with `workers` sandbox processes at a time; results keep input order."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    iso = iso or isolation()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda s: run_program(s, limits, iso), sources))
