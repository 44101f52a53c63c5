"""Run model-written Python programs in a confined, limited process and report pass or fail.

Each program runs in a fresh interpreter (`python -I -S -B`: isolated mode, no site-packages) with an
environment that holds none of the caller's variables. Where the machine allows (see `isolation()`):

- bubblewrap (`confine.bwrap_args`; why bubblewrap: `confine`'s docstring) gives the program its own PID,
  mount, network, IPC and UTS namespaces: it sees and signals only its own processes, has no network and
  no reachable path-addressed socket, and sees only `/usr`, the Python installation (read-only) and its
  private, size-limited tmpfs mounts (`/tmp` = working directory, `/var/tmp`, `/dev/shm`), which vanish
  with it. The repository, results, virtual environment and home folders do not exist there.
- when the harness runs as root, every program running at the same time gets its own unprivileged uid
  (`confine.UidPool`), so programs cannot signal, trace or write to each other or to outside processes.
- a cgroup v2 leaf per program (`confine.MemoryCgroups`) charges everything it maps or stores (heap,
  memfds, tmpfs files) against `Limits.memory_mb`, with no swap; its processes are killed together.

A small trusted bootstrap in the child reads the program from stdin, applies resource limits (address
space, CPU time, file size, open files, no core files), drops root privileges to the program's uid,
forbids new processes and threads (RLIMIT_NPROC = 0), then executes the program.

Fallbacks, each named by `isolation().fallbacks`, warned about once per process and recorded with a run's
environment: without bubblewrap the program shares the host's filesystem (a fresh working folder that is
deleted afterwards, plus `/tmp` and `/dev/shm`, where files can outlive it until that removal) and PID
namespace, and the network is cut by `unshare --net` where possible, else by replacing `socket.socket`
(weaker). Without a delegated memory controller, memory is bounded by RLIMIT_AS (every mapping, memfds
included), the two tmpfs sizes and SysV shared memory of the program's IPC namespace capped at one
tmpfs size; memfds, which hold memory RLIMIT_AS no longer sees once unmapped, are refused by a seccomp
filter (`confine.no_memfd_filter`; on machines it does not know, at most OPEN_FILES x `Limits.file_mb`).

A program passes only if it runs to its end: after the program returns, the bootstrap writes a random
per-run token to stdout and exits 0. A program that calls `os._exit(0)` or `sys.exit(0)` before its
tests ran never prints the token and counts as failed. Before running the program the bootstrap reports
"ready" on a private pipe (closed before the program starts); without it the run raises SandboxError,
so a broken sandbox is never recorded as a failing program. Problems caused by the program itself (text
that is not UTF-8, leftovers the harness cannot remove) are that program's "error", with the cause in
its stderr; they never stop a batch.

Statuses: passed; failed (an assertion failed, or the program exited before its end); error (any other
exception, e.g. SyntaxError, NameError, MemoryError, a refused fork, or death by a signal such as
SIGXFSZ, or the memory cgroup's kill); timeout (wall clock or CPU limit). Under bubblewrap a death by
signal N reaches the harness as exit status 128 + N and is read back as that signal.

What it does not defend against: Python-level tricks inside the child (inspecting the bootstrap's frame
for the token): the verdict is the program's own exit, so a targeted attack on the grading itself is out
of scope here.
"""
from __future__ import annotations

import atexit
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

from acceptmoe.evals import confine

OPEN_FILES = 32  # RLIMIT_NOFILE of a program

STATUSES = ("passed", "failed", "error", "timeout")

# The bootstrap exits 1 on AssertionError, 2 on any other exception, 3 on SystemExit, 4 if the pass token
# could not be written, 0 after writing it.
_EXIT_EXCEPTION = 2

# Host folders covered by an empty tmpfs should they lie inside a folder bound into the sandbox.
_HIDDEN = tuple(os.path.realpath(p) for p in (Path(__file__).resolve().parents[2], sys.prefix,
                                               os.path.expanduser("~")))

_BOOTSTRAP = r'''
import os, sys, resource
_write, _exit = os.write, os._exit
def _report(exc):
    try:
        import traceback
        traceback.print_exception(exc)
    except BaseException:
        sys.stderr.write("%s: %s\n" % (type(exc).__name__, exc))
    try:
        sys.stderr.flush()
    except BaseException:
        pass
def _block_sockets():
    import socket, _socket
    class _NoSocket:
        def __init__(self, *a, **k):
            raise OSError("network access is disabled in the sandbox")
    socket.socket = _socket.socket = socket.SocketType = _NoSocket
    for name in ("create_connection", "socketpair", "fromfd", "create_server"):
        setattr(socket, name, _NoSocket)
def _keep_stdlib_reachable():
    # The new uid may not be allowed to enter a folder above the interpreter's stdlib (e.g. /root/.pyenv):
    # keep each sys.path folder open and import through /proc/self/fd, which needs the process to stay
    # dumpable after the uid change (PR_SET_DUMPABLE = 4).
    import ctypes
    moved = {}
    for i, path in enumerate(sys.path):
        if os.path.isdir(path):
            moved[path] = sys.path[i] = "/proc/self/fd/%d" % os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    for module in list(sys.modules.values()):  # packages imported at startup, e.g. encodings
        search = getattr(module, "__path__", None)
        if isinstance(search, list):
            for j, entry in enumerate(search):
                for old, new in moved.items():
                    if entry.startswith(old + os.sep):
                        search[j] = new + entry[len(old):]
    sys.path_importer_cache.clear()
    return ctypes.CDLL(None).prctl
def _seccomp(blob):
    # Install a seccomp filter (PR_SET_NO_NEW_PRIVS = 38, PR_SET_SECCOMP = 22, SECCOMP_MODE_FILTER = 2).
    import ctypes
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    buf = ctypes.create_string_buffer(blob, len(blob))
    prog = Prog(len(blob) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(prog), 0, 0):
        raise OSError(ctypes.get_errno(), "seccomp filter refused")
def _limit(kind, soft, hard):
    # Never above the inherited hard limit (an unprivileged process cannot raise it).
    current = resource.getrlimit(kind)[1]
    if current != resource.RLIM_INFINITY:
        soft, hard = min(soft, current), min(hard, current)
    resource.setrlimit(kind, (soft, hard))
def _setup(mem, cpu, fsize, nofile, uid, patch, reach, shm_pages, seccomp):
    if shm_pages >= 0:  # SysV shared memory of the program's own IPC namespace, total in pages
        with open("/proc/sys/kernel/shmall", "w") as f:
            f.write(str(shm_pages))
    _limit(resource.RLIMIT_CORE, 0, 0)
    _limit(resource.RLIMIT_AS, mem, mem)
    _limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    _limit(resource.RLIMIT_FSIZE, fsize, fsize)
    _limit(resource.RLIMIT_NOFILE, nofile, nofile)
    if uid >= 0:
        prctl = _keep_stdlib_reachable() if reach else None
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        if prctl:
            prctl(4, 1, 0, 0, 0)
    _limit(resource.RLIMIT_NPROC, 0, 0)
    if patch:
        _block_sockets()
    if seccomp != "-":
        _seccomp(bytes.fromhex(seccomp))
def _main():
    mem, cpu, fsize, nofile, uid, patch, reach, shm_pages, control = (int(a) for a in sys.argv[1:10])
    nonce, _, source = sys.stdin.buffer.read().partition(b"\n")
    _setup(mem, cpu, fsize, nofile, uid, patch, reach, shm_pages, sys.argv[10])
    _write(control, b"ready")  # the parent's proof that the limits are in force; closed before the program
    os.close(control)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(compile(source, "<program>", "exec"), namespace)
    except AssertionError as exc:
        _report(exc)
        _exit(1)
    except SystemExit as exc:
        sys.stderr.write("program called exit(%r) before finishing\n" % (exc.code,))
        sys.stderr.flush()
        _exit(3)
    except BaseException as exc:
        _report(exc)
        _exit(2)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    try:
        _write(1, b"\n" + nonce + b"\n")
    except BaseException:
        _exit(4)
    _exit(0)
_main()
'''


@dataclass(frozen=True)
class Limits:
    """Per-program limits. `cpu_s` defaults to the wall-clock timeout rounded up, plus one second.
    `tmp_mb`: size of each private tmpfs (`/tmp`, `/dev/shm`) under bubblewrap."""

    timeout_s: float = 20.0
    memory_mb: int = 1024
    cpu_s: int | None = None
    file_mb: int = 16
    output_chars: int = 4000
    tmp_mb: int = 64

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
    memory: "cgroup" (a cgroup v2 leaf per program) or "rlimit" (RLIMIT_AS, tmpfs sizes, memfds refused).
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
    """Outcome of one program: status in STATUSES, wall time, exit code, truncated stdout and stderr."""

    status: str
    duration_s: float
    returncode: int | None
    stdout: str
    stderr: str

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


def _launcher_works(launcher: tuple[str, ...]) -> bool:
    try:
        done = subprocess.run([*launcher, sys.executable, "-I", "-S", "-c", "pass"], capture_output=True,
                              timeout=30, env=clean_env("/"), stdin=subprocess.DEVNULL)
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
        candidates = [("unshare", "--net")] if root else []
        candidates.append(("unshare", "--user", "--net"))
        launcher = next((c for c in candidates if shutil.which("unshare") and _launcher_works(c)), None)
        if launcher is None:
            fallbacks.append("no network namespace: sockets are only disabled inside Python")
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
        fallbacks.append(f"no memory cgroup ({problem}): memory is bounded by RLIMIT_AS over every mapping and "
                         f"{held}; {memfds}")
    iso = replace(iso, fallbacks=tuple(fallbacks))
    if fallbacks:
        warnings.warn(f"sandbox: {iso.describe()}", RuntimeWarning, stacklevel=2)
    return iso


def clean_env(workdir: str) -> dict[str, str]:
    """The child's whole environment: nothing of the caller's, only what Python needs."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


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
    if returncode == _EXIT_EXCEPTION or returncode < 0:
        return "error"  # an exception other than AssertionError, or killed by a signal (e.g. SIGXFSZ)
    return "failed"  # AssertionError, exit() before the end, os._exit(n), lost stdout


def _command(limits: Limits, iso: Isolation, uid: int, control_fd: int, cgroup: str | None,
             filter_fd: int | None) -> list[str]:
    """The child's command line. The seccomp filter (without a memory cgroup) is installed by bubblewrap
    from `filter_fd`, else by the bootstrap (which then has to load ctypes)."""
    private = iso.filesystem == "private"
    in_bootstrap = iso.memory == "rlimit" and _NO_MEMFD is not None and filter_fd is None
    args = [limits.memory_mb << 20, limits.cpu_seconds(), limits.file_mb << 20, OPEN_FILES, uid,
            int(iso.network == "socket-patch"), int(uid >= 0 and not private),
            (limits.tmp_mb << 20) // os.sysconf("SC_PAGE_SIZE") if private and os.geteuid() == 0 else -1, control_fd,
            _NO_MEMFD.hex() if in_bootstrap else "-"]
    if private:
        exe = confine.python_runtime()[0]
        prefix = confine.bwrap_args(iso.launcher[0], limits.tmp_mb << 20, _HIDDEN)
        if filter_fd is not None:
            prefix += ["--seccomp", str(filter_fd)]
    else:
        exe, prefix = sys.executable, list(iso.launcher)
    cmd = [*prefix, exe, "-I", "-S", "-B", "-c", _BOOTSTRAP, *map(str, args)]
    if cgroup is not None:  # enter the program's cgroup before anything else starts
        cmd = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(cgroup, "cgroup.procs"), *cmd]
    return cmd


def _refused(cause: str) -> ExecResult:
    return ExecResult(status="error", duration_s=0.0, returncode=None, stdout="", stderr=f"[sandbox] {cause}\n")


def run_program(source: str, limits: Limits = Limits(), iso: Isolation | None = None) -> ExecResult:
    """Run one program in the sandbox and classify the outcome (see module docstring). Raises
    SandboxError if the process could not be set up (never a verdict on the program)."""
    iso = iso or isolation()
    try:
        payload = source.encode("utf-8")
    except UnicodeEncodeError as exc:
        return _refused(f"the program is not valid UTF-8 text: {exc}")
    uid = _UIDS.acquire() if iso.uid_per_program else (-1 if iso.run_as_uid is None else iso.run_as_uid)
    try:
        return _run(payload, limits, iso, uid)
    finally:
        if iso.uid_per_program:
            _UIDS.release(uid)


def _run(payload: bytes, limits: Limits, iso: Isolation, uid: int) -> ExecResult:
    private = iso.filesystem == "private"
    nonce = secrets.token_hex(16).encode()
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
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            start = time.monotonic()
            try:
                proc = subprocess.Popen(_command(limits, iso, uid, control_w, cgroup, filter_fd), cwd=workdir,
                                        env=clean_env("/tmp" if private else workdir), stdin=subprocess.PIPE,
                                        stdout=out, stderr=err, start_new_session=True, pass_fds=passed_fds)
            except OSError as exc:
                raise SandboxError(f"the sandbox could not start a program ({iso.describe()}): {exc}") from exc
            finally:
                for fd in passed_fds:
                    os.close(fd)
            timed_out = _wait(proc, nonce + b"\n" + payload, limits.timeout_s)
            duration = time.monotonic() - start
            ready = os.read(control_r, 16) == b"ready"
            if cgroup is not None and confine.MemoryCgroups.oom_killed(cgroup):
                notes.append(f"killed: the program's processes exceeded {limits.memory_mb} MiB (memory cgroup)")
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
    finally:
        os.close(control_r)
        if cgroup is not None:
            confine.MemoryCgroups.remove(cgroup)
        if outer is not None:
            try:
                confine.remove_tree(outer)
            except OSError as exc:  # the program's leftovers: its failure, not the run's
                notes.append(f"its files could not be removed: {exc!r}")
                warnings.warn(f"sandbox folder {outer} could not be removed fully: {exc}", RuntimeWarning)
    returncode = proc.returncode
    if not ready and not timed_out:
        raise SandboxError(f"the sandbox could not start a program (exit status {returncode}, isolation "
                           f"{iso.describe()}):\n{stderr.decode('utf-8', 'replace')[-2000:]}")
    if private and 128 < returncode < 128 + 65:
        returncode = 128 - returncode  # bubblewrap reports death by signal N as 128 + N
    token = b"\n" + nonce + b"\n"
    passed_token = stdout.endswith(token)
    if passed_token:
        stdout = stdout[: -len(token)]
    status = "error" if notes else _status(returncode, passed_token, timed_out)
    stderr_text = _truncate(stderr.decode("utf-8", "replace"), limits.output_chars)
    return ExecResult(status=status, duration_s=duration, returncode=returncode,
                      stdout=_truncate(stdout.decode("utf-8", "replace"), limits.output_chars),
                      stderr=stderr_text + "".join(f"\n[sandbox] {n}\n" for n in notes))


def _wait(proc: subprocess.Popen, payload: bytes, timeout_s: float) -> bool:
    """Feed the payload and wait; on timeout kill the process group. Returns whether it timed out."""
    try:
        proc.communicate(payload, timeout=timeout_s)
        return False
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        proc.wait()
        return True


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_many(sources: list[str], limits: Limits = Limits(), workers: int = 2,
             iso: Isolation | None = None) -> list[ExecResult]:
    """Run programs in parallel with `workers` sandbox processes at a time; results keep input order."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    iso = iso or isolation()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda s: run_program(s, limits, iso), sources))
