"""One test per attack class a hostile model reply can try against the sandbox: each shows the attack
contained and the next program, in the same worker, graded correctly.

Attacks that only a private filesystem and PID namespace contain are skipped, with the reason, where
bubblewrap does not work (`isolation().fallbacks` says why); the project's scripts install it.
"""
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

import acceptmoe
from acceptmoe.evals import confine
from acceptmoe.evals.sandbox import OPEN_FILES, Isolation, Limits, isolation, run_many

LIMITS = Limits(timeout_s=60.0, memory_mb=256, tmp_mb=16)
REPO = Path(acceptmoe.__file__).resolve().parents[1]
PRIVATE = isolation().filesystem == "private"
needs_private = pytest.mark.skipif(not PRIVATE, reason="bubblewrap does not work here: programs share the host's "
                                   "filesystem and PID namespace (see isolation().fallbacks)")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="only a root harness can give programs their own uids")

# A correct and a wrong program: whatever ran before, these must grade passed and failed.
GOOD = "def add(a, b):\n    return a + b\nassert add(2, 3) == 5\nprint('good')\n"
BAD = "def add(a, b):\n    return a - b\nassert add(2, 3) == 5\n"


def graded(attack: str, limits: Limits = LIMITS, iso: Isolation | None = None, checks: tuple[str, ...] = ()):
    """Run the attack, then `checks` and GOOD and BAD, one at a time in one worker; return the attack's
    and the checks' results after asserting that GOOD passed and BAD failed."""
    results = run_many([textwrap.dedent(attack), *map(textwrap.dedent, checks), GOOD, BAD], limits, workers=1, iso=iso)
    good, bad = results[-2:]
    assert good.passed and good.stdout == "good\n", good
    assert bad.status == "failed", bad
    return results[:-2]


@needs_private
def test_files_in_tmp_dev_shm_and_var_tmp_do_not_survive_the_program():
    name = f"planted-{uuid.uuid4().hex}"
    attack, check = graded(f"""
        for folder in ("/tmp", "/dev/shm", "/var/tmp", "."):
            open(folder + "/{name}", "w").write("payload")
        print("planted")
    """, checks=("""
        import os
        for folder in ("/tmp", "/dev/shm", "/var/tmp", "."):
            assert os.listdir(folder) == [], (folder, os.listdir(folder))
        print("clean")
    """,))
    assert attack.passed and attack.stdout == "planted\n", attack
    assert check.passed and check.stdout == "clean\n", check
    for folder in ("/tmp", "/dev/shm", "/var/tmp"):
        assert not Path(folder, name).exists()


@needs_private
@pytest.mark.parametrize("folder", ["/dev/shm", "/tmp"])
def test_filling_shared_memory_or_tmp_stops_at_the_tmpfs_size(folder):
    attack, check = graded(f"""
        import signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        written, i = 0, 0
        try:
            while written < (1 << 30):
                with open("{folder}/fill-%d" % i, "wb") as f:  # many files, each under RLIMIT_FSIZE
                    for _ in range(8):
                        f.write(b"x" * (1 << 20))
                        written += 1 << 20
                i += 1
        except OSError as exc:
            print(written >> 20, exc.errno)
    """, checks=(f"""
        import os
        assert os.listdir("{folder}") == []
        open("{folder}/small", "wb").write(b"y" * (1 << 20))
    """,))
    written_mb, errno = map(int, attack.stdout.split())
    assert written_mb <= LIMITS.tmp_mb and errno == 28, attack  # ENOSPC
    assert check.passed, check


def test_memfds_cannot_hold_memory_beyond_the_budget():
    attack, = graded("""
        import os, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        held, fds = 0, []
        try:
            while held < (4 << 30):
                fd = os.memfd_create("hold")
                fds.append(fd)
                for _ in range(8):
                    os.write(fd, b"x" * (1 << 20))
                    held += 1 << 20
        except (OSError, MemoryError) as exc:
            print(held >> 20, type(exc).__name__)
    """, limits=Limits(timeout_s=60.0, memory_mb=256, file_mb=4, tmp_mb=16))
    if isolation().memory == "cgroup":
        bound = 256  # all of it is charged to the program's cgroup
    elif confine.no_memfd_filter() is not None:
        bound = 0  # memfd_create refused by the seccomp filter
        assert attack.stdout == "0 PermissionError\n", attack
    else:
        bound = OPEN_FILES * 4  # each memfd below RLIMIT_FSIZE, at most RLIMIT_NOFILE of them
    if attack.status == "error":  # killed by the memory cgroup before it could report
        assert isolation().memory == "cgroup" and "memory cgroup" in attack.stderr, attack
    else:
        assert int(attack.stdout.split()[0]) <= bound, attack



@pytest.mark.skipif(isolation().memory != "rlimit" or platform.machine() != "x86_64",
                    reason="the seccomp filter is used on x86_64 without a memory cgroup")
def test_the_seccomp_filter_also_covers_other_syscall_abis():
    attack, = graded("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        print(libc.syscall(0x40000000 | 319, b"x", 0), ctypes.get_errno())  # x32 memfd_create
    """)
    assert attack.passed and attack.stdout == "-1 1\n", attack  # EPERM from the filter, not ENOSYS

def test_sysv_shared_memory_is_bounded_and_gone_after_the_program():
    attack, check = graded("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        ids = []
        for _ in range(64):  # 64 x 64 MiB segments would be 4 GiB
            shmid = libc.shmget(0, 64 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
            if shmid < 0:
                break
            ids.append(shmid)
        print(len(ids))
    """, checks=("""
        print(open("/proc/sysvipc/shm").read().count("\\n") - 1)
    """,))
    segments = int(attack.stdout)
    if PRIVATE and os.geteuid() == 0:
        assert segments * 64 <= LIMITS.tmp_mb, attack  # capped like /dev/shm
    if PRIVATE:
        assert check.stdout == "0\n", check  # a fresh IPC namespace


def _unix_server(path: str) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    if not path.startswith("\0"):
        os.chmod(path, 0o777)
    server.listen(1)
    server.settimeout(0.5)
    return server


@pytest.mark.parametrize("address", ["path", "abstract"])
def test_unix_sockets_of_outside_servers_are_unreachable(address):
    if address == "path" and not PRIVATE:
        pytest.skip("without bubblewrap a world-writable socket file on the host is reachable")
    folder = tempfile.mkdtemp(prefix="acceptmoe-socket-")
    os.chmod(folder, 0o755)
    name = os.path.join(folder, "server.sock") if address == "path" else f"\0acceptmoe-{uuid.uuid4().hex}"
    server = _unix_server(name)
    try:
        attack, = graded(f"""
            import socket
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect({name!r})
            conn.sendall(b"hello")
        """)
        assert attack.status == "error", attack
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()
        confine.remove_tree(folder)


@needs_private
def test_the_repository_results_venv_and_home_are_not_visible():
    paths = [str(REPO), str(REPO / "results"), str(REPO / "pyproject.toml"), sys.prefix,
             os.path.join(sys.prefix, "pyvenv.cfg"), os.path.expanduser("~"), "/home", "/etc/passwd", "/run",
             "/var/run", "/work"]
    attack, = graded(f"""
        import os, sys

        def reveals(path):  # only the folders leading to the Python installation may exist, each holding one
            if not os.path.exists(path):
                return False
            if not os.path.isdir(path) or not (sys.base_prefix + "/").startswith(path.rstrip("/") + "/"):
                return True
            return os.listdir(path) != [sys.base_prefix[len(path):].strip("/").split("/")[0]]

        seen = [p for p in {paths!r} if reveals(p)]
        sys.path[:0] = {paths!r}
        try:
            import acceptmoe
            seen.append("import acceptmoe")
        except ImportError:
            pass
        try:
            import torch
            seen.append("import torch")
        except ImportError:
            pass
        print(seen)
    """)
    assert attack.passed and attack.stdout == "[]\n", attack


@needs_private
def test_the_python_installation_is_read_only():
    attack, = graded("""
        import os
        for target in (os.__file__, os.path.dirname(os.__file__) + "/planted.py", "/usr/bin/planted"):
            try:
                open(target, "a").write("x")
                print("wrote", target)
            except OSError:
                pass
    """)
    assert attack.passed and attack.stdout == "", attack


NEIGHBOUR = """
    import os, time
    time.sleep(6)
    print(os.listdir("."))
"""


@needs_root
def test_a_neighbour_cannot_be_killed_stopped_read_or_written():
    attack = """
        import os, signal
        hits = []
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            try:
                os.kill(-1, sig)  # succeeds even when it reaches nothing: judged by the victim's verdict
            except OSError:
                pass
        for pid in os.listdir("/proc"):
            if pid.isdigit() and int(pid) != os.getpid():
                for action in ("kill", "mem", "cwd"):
                    try:
                        if action == "kill":
                            os.kill(int(pid), signal.SIGKILL)
                        elif action == "mem":
                            open("/proc/%s/mem" % pid, "rb").read(1)
                        else:
                            open("/proc/%s/cwd/planted" % pid, "w").write("x")
                        hits.append((pid, action))
                    except OSError:
                        pass
        print(sorted(p for p in os.listdir("/proc") if p.isdigit()), hits)
    """
    victim, attacker, good, bad = run_many([textwrap.dedent(NEIGHBOUR), textwrap.dedent(attack), GOOD, BAD],
                                           LIMITS, workers=2)
    assert victim.passed and victim.stdout == "[]\n", victim  # not killed, not stopped, nothing planted
    assert attacker.passed and attacker.stdout.strip().endswith("[]"), attacker
    if PRIVATE:  # it sees only itself and its namespace's init; elsewhere other uids protect the neighbour
        assert attacker.stdout.startswith("['1', '2']"), attacker
    assert good.passed and bad.status == "failed"


@needs_root
def test_kill_minus_one_does_not_reach_outside_processes_of_any_uid():
    uids = [65534]  # without a PID namespace only other uids are safe: the pool's uids are its own
    if PRIVATE:
        uids += [isolation().run_as_uid, isolation().run_as_uid + 1]
    outside = [subprocess.Popen(["sleep", "120"], user=uid, group=uid) for uid in uids]
    try:
        attack, = graded("""
            import os, signal
            os.kill(-1, signal.SIGKILL)
        """)
        assert all(p.poll() is None for p in outside), "an outside process was killed"
    finally:
        for p in outside:
            p.kill()
            p.wait()


def _processes_of(uid: int) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                found.append(pid)
        except OSError:
            pass
    return found


@needs_root
def test_a_program_that_leaves_its_process_group_is_still_killed_at_the_timeout():
    uid = isolation().run_as_uid  # the pool hands out its lowest free uid: one worker gets this one
    attack, = graded("""
        import os
        try:
            os.setsid()  # refused where the program already leads its process group
        except OSError:
            pass
        while True:
            pass
    """, limits=Limits(timeout_s=2.0, cpu_s=600))
    assert attack.status == "timeout", attack
    deadline = time.monotonic() + 30
    while _processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_of(uid) == []


@pytest.mark.parametrize("mode", ["detected", "shared-filesystem"])
def test_deep_nesting_links_out_and_locked_modes_do_not_break_cleanup(mode, tmp_path):
    iso = isolation()
    if mode == "shared-filesystem":  # the fallback that leaves files on the host for the harness to remove
        iso = Isolation(iso.network if iso.filesystem == "shared" else "socket-patch", iso.run_as_uid,
                        iso.launcher if iso.filesystem == "shared" else (), "shared", "rlimit", iso.uid_per_program)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep me")
    os.chmod(tmp_path, 0o755)
    os.chmod(victim, 0o777)
    attack, = graded(f"""
        import os
        top = os.getcwd()
        os.symlink({str(victim)!r}, "link-out")
        os.symlink("/", "link-root")
        for i in range(3000):
            os.mkdir("d")
            os.chdir("d")
        os.symlink({str(victim)!r}, "deep-link-out")
        open("f", "w").write("x")
        os.chmod(".", 0o500)
        os.chdir(top)
        os.mkdir("locked")
        open("locked/f", "w").write("x")
        os.chmod("locked", 0)
        print("nested")
    """, iso=iso)
    assert attack.passed and attack.stdout == "nested\n", attack
    assert (victim / "keep.txt").read_text() == "keep me" and sorted(os.listdir(victim)) == ["keep.txt"]


def test_remove_tree_handles_any_depth_links_and_modes(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep me")
    root = tmp_path / "tree"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(3000):  # deeper than PATH_MAX and the recursion limit
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.symlink(str(outside), "out", dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o000, dir_fd=fd))
    finally:
        os.close(fd)
    os.symlink(str(outside), root / "link")
    (root / "locked").mkdir()
    (root / "locked" / "f").write_text("x")
    os.chmod(root / "locked", 0)
    confine.remove_tree(str(root))
    assert not root.exists() and (outside / "keep.txt").read_text() == "keep me"


def test_a_signal_death_is_read_back_as_that_signal():
    attack, = graded("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert attack.status == "error" and attack.returncode == -signal.SIGSEGV, attack
