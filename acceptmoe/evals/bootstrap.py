"""The trusted bootstrap every sandboxed program starts in (its source, run with `python -I -S -B -c`).

It reads the program from stdin, applies the resource limits (address space, CPU time, file size, open
files, no core files, and RLIMIT_NPROC: threads and processes), makes installed packages importable when
asked (their folders are bound read-only by `confine.bwrap_args`), drops root privileges to the program's
uid, installs the seccomp filter where it is the one to do so, reports "ready" on a private pipe, then
executes the program and writes the run's pass token only if the program ran to its end. Exit codes:
1 on AssertionError, EXIT_EXCEPTION on any other exception, 3 on SystemExit, 4 if the pass token could not
be written, 0 after writing it. `sandbox` builds its command line (`ARGUMENTS` in order).
"""

EXIT_EXCEPTION = 2
ARGUMENTS = ("memory bytes", "cpu seconds", "file bytes", "open files", "uid (-1: keep)", "patch sockets (0/1)",
             "keep stdlib reachable (0/1)", "SysV shm pages (-1: leave)", "control fd", "tasks (RLIMIT_NPROC)",
             "package folders (os.pathsep-joined, '-': none)", "seccomp filter (hex, '-': none)")

SOURCE = r'''
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
def _packages(folders):
    import site
    for folder in folders.split(os.pathsep):
        site.addsitedir(folder)
def _setup(mem, cpu, fsize, nofile, uid, patch, reach, shm_pages, tasks, folders, seccomp):
    if shm_pages >= 0:  # SysV shared memory of the program's own IPC namespace, total in pages
        with open("/proc/sys/kernel/shmall", "w") as f:
            f.write(str(shm_pages))
    if folders != "-":
        _packages(folders)
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
    _limit(resource.RLIMIT_NPROC, tasks, tasks)
    if patch:
        _block_sockets()
    if seccomp != "-":
        _seccomp(bytes.fromhex(seccomp))
def _main():
    mem, cpu, fsize, nofile, uid, patch, reach, shm_pages, control, tasks = (int(a) for a in sys.argv[1:11])
    nonce, _, source = sys.stdin.buffer.read().partition(b"\n")
    _setup(mem, cpu, fsize, nofile, uid, patch, reach, shm_pages, tasks, sys.argv[11], sys.argv[12])
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
