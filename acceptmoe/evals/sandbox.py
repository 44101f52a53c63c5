"""Run model-written Python programs in a separate, limited process and report pass or fail.

Each program runs in a fresh interpreter (`python -I -S -B`: isolated mode, no site-packages, so neither
the repository nor the virtual environment is importable) whose working directory is a new temporary
folder, deleted afterwards, with an environment that holds none of the caller's variables. A small
trusted bootstrap in the child reads the program from stdin, applies resource limits (address space, CPU
time, file size, no core files), drops root privileges to `nobody` when the caller is root, forbids new
processes and threads (RLIMIT_NPROC = 0), then executes the program. Network: the child is started in a
new, empty network namespace (`unshare --net`) when the machine allows it; otherwise the bootstrap
replaces `socket.socket` with a stub that raises (weaker: a determined program can get around it).
`isolation()` says which measures are in force. The parent enforces a wall-clock timeout and kills the
whole process group.

A program passes only if it runs to its end: after the program returns, the bootstrap writes a random
per-run token to stdout and exits 0. A program that calls `os._exit(0)` or `sys.exit(0)` before its
tests ran never prints the token and counts as failed. Before running the program the bootstrap reports
"ready" on a private pipe (closed before the program starts); without it the run raises SandboxError,
so a broken sandbox is never recorded as a failing program.

Statuses: passed; failed (an assertion failed, or the program exited before its end); error (any other
exception, e.g. SyntaxError, NameError, MemoryError, a refused fork, or death by a signal such as
SIGXFSZ); timeout (wall clock or CPU limit).

What it cannot do: stop a program from reading world-readable files (the repository included), from
writing where `nobody` may write (e.g. /tmp, below RLIMIT_FSIZE per file), or, when the caller is not
root, from writing the caller's own files. Python-level tricks inside the child (inspecting the
bootstrap's frame for the token) are not defended against: this guards against broken and careless
code, not against a targeted attack.
"""
from __future__ import annotations

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
from dataclasses import dataclass
from functools import lru_cache

NOBODY_UID = 65534

STATUSES = ("passed", "failed", "error", "timeout")

# The bootstrap exits 1 on AssertionError, 2 on any other exception, 3 on SystemExit, 4 if the pass token
# could not be written, 0 after writing it.
_EXIT_EXCEPTION = 2

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
def _limit(kind, soft, hard):
    # Never above the inherited hard limit (an unprivileged process cannot raise it).
    current = resource.getrlimit(kind)[1]
    if current != resource.RLIM_INFINITY:
        soft, hard = min(soft, current), min(hard, current)
    resource.setrlimit(kind, (soft, hard))
def _setup(mem, cpu, fsize, uid, patch):
    _limit(resource.RLIMIT_CORE, 0, 0)
    _limit(resource.RLIMIT_AS, mem, mem)
    _limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    _limit(resource.RLIMIT_FSIZE, fsize, fsize)
    if uid >= 0:
        prctl = _keep_stdlib_reachable()
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        prctl(4, 1, 0, 0, 0)
    _limit(resource.RLIMIT_NPROC, 0, 0)
    if patch:
        _block_sockets()
def _main():
    mem, cpu, fsize, uid, patch, control = (int(a) for a in sys.argv[1:7])
    nonce, _, source = sys.stdin.buffer.read().partition(b"\n")
    _setup(mem, cpu, fsize, uid, patch)
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
    """Per-program limits. `cpu_s` defaults to the wall-clock timeout rounded up, plus one second."""

    timeout_s: float = 20.0
    memory_mb: int = 1024
    cpu_s: int | None = None
    file_mb: int = 16
    output_chars: int = 4000

    def cpu_seconds(self) -> int:
        return self.cpu_s if self.cpu_s is not None else math.ceil(self.timeout_s) + 1


@dataclass(frozen=True)
class Isolation:
    """How the child is separated from the machine.

    network: "netns" (new empty network namespace) or "socket-patch" (socket constructors raise).
    run_as_uid: the uid the program runs under (root callers drop to nobody), or None for the caller's.
    launcher: the command prefix that creates the namespaces (empty for socket-patch).
    """

    network: str
    run_as_uid: int | None
    launcher: tuple[str, ...]

    def describe(self) -> str:
        who = f"uid {self.run_as_uid}" if self.run_as_uid is not None else "the caller's uid"
        return f"network={self.network}, runs as {who}, launcher={' '.join(self.launcher) or '-'}"


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


def _launcher_works(launcher: tuple[str, ...]) -> bool:
    try:
        done = subprocess.run([*launcher, sys.executable, "-I", "-S", "-c", "pass"], capture_output=True,
                              timeout=30, env=clean_env("/"), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@lru_cache(maxsize=1)
def isolation() -> Isolation:
    """Detect, once per process, the strongest isolation this machine allows."""
    uid = NOBODY_UID if os.geteuid() == 0 else None
    if shutil.which("unshare"):
        candidates = [("unshare", "--net")] if uid is not None else []
        candidates.append(("unshare", "--user", "--net"))
        for launcher in candidates:
            if _launcher_works(launcher):
                return Isolation("netns", uid, launcher)
    return Isolation("socket-patch", uid, ())


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


def _make_workdir(iso: Isolation) -> tuple[str, str]:
    """(folder to delete, working directory). When programs run as nobody, their working directory sits
    inside a root-owned folder that can be traversed but not listed, so concurrent programs (same uid)
    cannot find each other's directories."""
    outer = tempfile.mkdtemp(prefix="acceptmoe-sandbox-")
    if iso.run_as_uid is None:
        return outer, outer
    os.chmod(outer, 0o711)
    workdir = tempfile.mkdtemp(prefix="run-", dir=outer)
    os.chown(workdir, iso.run_as_uid, iso.run_as_uid)
    return outer, workdir


def _remove_workdir(workdir: str) -> None:
    def retry_writable(func, path, _exc):
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
        func(path)

    try:
        shutil.rmtree(workdir, onerror=retry_writable)
    except OSError as exc:
        warnings.warn(f"sandbox folder {workdir} could not be removed fully: {exc}", RuntimeWarning)


class SandboxError(RuntimeError):
    """The sandbox could not set up a program's process (a problem of the machine, not of the program)."""


def _command(limits: Limits, iso: Isolation, control_fd: int) -> list[str]:
    args = [limits.memory_mb << 20, limits.cpu_seconds(), limits.file_mb << 20,
            -1 if iso.run_as_uid is None else iso.run_as_uid, int(iso.network == "socket-patch"), control_fd]
    return [*iso.launcher, sys.executable, "-I", "-S", "-B", "-c", _BOOTSTRAP, *map(str, args)]


def run_program(source: str, limits: Limits = Limits(), iso: Isolation | None = None) -> ExecResult:
    """Run one program in the sandbox and classify the outcome (see module docstring). Raises
    SandboxError if the process could not be set up (never a verdict on the program)."""
    iso = iso or isolation()
    nonce = secrets.token_hex(16).encode()
    outer, workdir = _make_workdir(iso)
    control_r, control_w = os.pipe()
    try:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            start = time.monotonic()
            try:
                proc = subprocess.Popen(_command(limits, iso, control_w), cwd=workdir, env=clean_env(workdir),
                                        stdin=subprocess.PIPE, stdout=out, stderr=err, start_new_session=True,
                                        pass_fds=(control_w,))
            finally:
                os.close(control_w)
            timed_out = _wait(proc, nonce + b"\n" + source.encode("utf-8"), limits.timeout_s)
            duration = time.monotonic() - start
            ready = os.read(control_r, 16) == b"ready"
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
    finally:
        os.close(control_r)
        _remove_workdir(outer)
    if not ready and not timed_out:
        raise SandboxError(f"the sandbox could not start a program (exit status {proc.returncode}, isolation "
                           f"{iso.describe()}): {stderr.decode('utf-8', 'replace')[-2000:]}")
    token = b"\n" + nonce + b"\n"
    passed_token = stdout.endswith(token)
    if passed_token:
        stdout = stdout[: -len(token)]
    return ExecResult(status=_status(proc.returncode, passed_token, timed_out), duration_s=duration,
                      returncode=proc.returncode,
                      stdout=_truncate(stdout.decode("utf-8", "replace"), limits.output_chars),
                      stderr=_truncate(stderr.decode("utf-8", "replace"), limits.output_chars))


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
