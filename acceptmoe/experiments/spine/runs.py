"""Run folders and resumable per-sample logs: what every runner writes through (configs: `config.py`).

- `open_run(experiment, preset, config)`: `results/<experiment>/<preset>/<run-id>/` with `config.json`
  (the frozen config, its hash, git commit and dirty flag, package versions, device, seeds). An unfinished
  run (no `summary.json`) with the same config hash is resumed instead of starting a new folder. A new
  folder is made under a hidden temporary name and renamed into place once its `config.json` is written,
  so no folder without one is ever visible; a folder that has no more than that when its run fails is
  removed (`discard_if_empty`).
- `lock_run(folder)`: the process that opens a run folder holds an exclusive lock on its `.lock` file
  (fcntl.flock, released when the process ends), so a second process on the same folder refuses
  (`RunLocked`) instead of writing duplicate rows; `lock_holder(folder)` says whether one holds it now.
- Folders that cannot be made or written (a read-only file system, a full disk, `--results` naming a
  regular file) are `RunFolderError`s naming the path and the fix.
- `recorded_experiment(folder)`: the experiment a run folder's `config.json` names (so copied runs, e.g.
  results/reference/, are read as what they are); a folder that is not a run is a `RunFolderError`.
- `SampleLog`: `samples.jsonl`, one line per finished (prompt, method) unit, flushed and fsynced as each
  finishes; on reopen, finished keys are skipped and a torn last line (a crash mid-write) is dropped, so
  rows are never duplicated.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from acceptmoe.errors import UserError
from acceptmoe.paths import REPO

LOCK_NAME = ".lock"
PROGRESS_NAME = "progress.json"   # a session's unit counts (`progress`)
KEEP_WHEN_EMPTY = ("config.json", LOCK_NAME, "resumes.jsonl", PROGRESS_NAME)  # a folder holding only these has no results


class RunFolderError(UserError):
    """A run folder that cannot be made, read or written; the message names the path and the fix."""


class RunLocked(RunFolderError):
    """Another process holds the run folder's lock."""


def recorded_experiment(run: Path) -> str:
    """The "experiment" key of the run folder's config.json."""
    meta = Path(run) / "config.json"
    try:
        name = json.loads(meta.read_text()).get("experiment") if meta.is_file() else None
    except (ValueError, AttributeError):
        name = None
    if not isinstance(name, str):
        raise RunFolderError(f"{run} is not a run folder ({meta} {'names no experiment' if meta.is_file() else 'not found'}): "
                             f"pass a folder an experiment command wrote, e.g. results/reference/table1/<run-id>")
    return name


_HELD: dict[str, int] = {}   # run folder -> the lock file descriptor this process holds


def lock_run(path: Path) -> None:
    """Hold an exclusive lock on run folder `path` for the rest of this process (again: a no-op); RunLocked
    if another process holds it."""
    key = os.path.realpath(path)
    if key in _HELD:
        return
    try:
        fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise RunFolderError(f"{path}: cannot open its lock file ({exc.strerror}); make the folder writable") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        raise RunLocked(f"{path}: another process (pid {holder}) is running this run folder; wait for it to end "
                        f"(or stop it), then resume") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:  # the pid is only a courtesy to whoever finds the lock taken
        pass
    _HELD[key] = fd


def lock_holder(path: Path) -> tuple[bool, str | None]:
    """(whether a process holds run folder `path`'s lock now, the pid its `.lock` file names). Read from
    /proc/locks where there is one (taking the lock to test it could refuse a run starting that instant), else
    by trying a shared lock and letting it go."""
    lock = Path(path) / LOCK_NAME
    try:
        named = lock.read_text(errors="replace").strip() or None
        st = lock.stat()
    except OSError:
        return False, None
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        return _try_lock(lock), named
    for entry in table.splitlines():
        fields = entry.split()
        if "FLOCK" in fields and inode in fields:
            return True, fields[fields.index(inode) - 1]
    return False, named


def _try_lock(lock: Path) -> bool:
    """Whether another process holds `lock` (a shared lock taken and released at once)."""
    fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def release_run(path: Path) -> None:
    """Give up this process's lock on `path` (if it holds one)."""
    fd = _HELD.pop(os.path.realpath(path), None)
    if fd is not None:
        os.close(fd)


def discard_if_empty(run: Run) -> bool:
    """Remove a new run's folder if it holds nothing but its config (the run failed before its first
    result); True if removed."""
    if run.resumed:
        return False
    try:
        if any(p.name not in KEEP_WHEN_EMPTY for p in run.path.iterdir()):
            return False
        release_run(run.path)
        shutil.rmtree(run.path)
    except OSError:
        return False
    return True


def to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    return obj


def config_hash(config: Any) -> str:
    blob = json.dumps(to_jsonable(config), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


_SAID_SANDBOX: list[bool] = []


def environment() -> dict:
    """Git commit and dirty flag, Python and package versions, device name, CPU model and torch's CPU
    capability, and the code sandbox's isolation on this machine (what is in force and what fell back)."""
    from acceptmoe.evals.sandbox import isolation
    with warnings.catch_warnings():          # said once on stdout below, and recorded with the run
        warnings.simplefilter("ignore", RuntimeWarning)
        iso = isolation()
    if iso.fallbacks and not _SAID_SANDBOX:
        print(f"note: code sandbox: {iso.describe()}", flush=True)
        _SAID_SANDBOX.append(True)
    versions = {}
    for pkg in (__name__.partition(".")[0], "torch", "triton", "transformers", "numpy", "math-verify", "sglang",
                "sglang-router"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    import torch
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu ({platform.processor() or platform.machine()})"
    return {**code_state(), "python": sys.version.split()[0], "platform": platform.platform(), "packages": versions,
            "device": device, "cpu": cpu_model(), "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads(), "sandbox": iso.record()}


def cpu_model() -> str:
    """The CPU's model name and x86 family / model numbers (what a float result's reproducibility is scoped
    to: kernels differ between instruction sets), from /proc/cpuinfo where there is one."""
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines()[:30] if ":" in line)
    except OSError:
        return platform.processor() or platform.machine()
    info = {k.strip(): v.strip() for k, v in info.items()}
    parts = [info.get("model name", platform.machine())]
    if "cpu family" in info:
        parts.append(f"family {info['cpu family']} model {info.get('model', '?')}")
    return ", ".join(parts)


@dataclasses.dataclass
class Run:
    path: Path
    resumed: bool

    @property
    def samples(self) -> SampleLog:
        return SampleLog(self.path / "samples.jsonl")

    def finish(self, summary: dict) -> None:
        write_json(self.path / "summary.json", summary)


def open_run(experiment: str, preset: str, config: Any, root: str | Path | None = None,
             fresh: bool = False) -> Run:
    """Resume the latest unfinished run with the same config hash, else create a new run folder."""
    results = Path(root or REPO / "results")
    base = results / experiment / preset
    h = config_hash(config)
    if results.exists() and not results.is_dir():
        raise RunFolderError(f"--results {results}: a file, not a folder; give a folder for the results")
    if not fresh and base.is_dir():
        for old in sorted((p for p in base.iterdir() if not p.name.startswith(".")), reverse=True):
            meta = old / "config.json"
            if meta.is_file() and not (old / "summary.json").exists():
                try:
                    same = json.loads(meta.read_text()).get("config_hash") == h
                except (ValueError, UnicodeDecodeError, AttributeError, OSError):
                    same = False  # a damaged config.json is never resumed by itself
                if same:
                    lock_run(old)
                    return Run(old, resumed=True)
                break
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    record = {"experiment": experiment, "preset": preset, "config_hash": h, "config": to_jsonable(config),
              "environment": environment()}
    partial = None
    try:
        base.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=base))   # hidden: the resume scan skips it
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(partial, 0o777 & ~mask)
        lock_run(partial)
        write_json(partial / "config.json", record)
        path = base / f"{stamp}-{h[:6]}"
        suffix = 1
        while path.exists():
            path, suffix = base / f"{stamp}-{h[:6]}-{suffix}", suffix + 1
        os.rename(partial, path)
    except OSError as exc:
        if partial is not None:
            release_run(partial)
            shutil.rmtree(partial, ignore_errors=True)
        where = exc.filename or base
        raise RunFolderError(f"--results {results}: cannot make the run folder ({where}: {exc.strerror}); give a "
                             f"writable folder with free space") from None
    _HELD[os.path.realpath(path)] = _HELD.pop(os.path.realpath(partial))
    return Run(path, resumed=False)



def write_json(path: Path, obj: Any) -> None:
    """Atomic write: a crash never leaves a half-written JSON file."""
    atomic_write(path, (json.dumps(to_jsonable(obj), indent=2, sort_keys=True) + "\n").encode())


def atomic_write(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, fsync, rename over `path`: readers see old or new, never half
    (on a failed write, e.g. a full disk, the temporary file is removed and `path` is as it was)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def code_state() -> dict:
    """The code a run is made with: git commit and whether the tree has uncommitted changes."""
    return {"git_commit": _git("rev-parse", "HEAD"), "git_dirty": bool(_git("status", "--porcelain"))}


def record_resume(run: Run, state: dict) -> None:
    """Append the resuming code's state (`code_state()`) to the run's `resumes.jsonl` (every resumed part
    says what made it)."""
    line = {**state, "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    try:
        with open(run.path / "resumes.jsonl", "a") as f:
            f.write(json.dumps(line, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise RunFolderError(f"--resume {run.path}: cannot write {run.path / 'resumes.jsonl'} ({exc.strerror}); "
                             f"free space on that disk (or make it writable), then resume") from None


def unit_key(*parts: object) -> str:
    """The key of one unit of work in a sample log: its identifying parts joined by '|'."""
    return "|".join(str(p) for p in parts)


class NothingToTabulate(UserError, ValueError):
    """A run folder with nothing finished yet that a table could show."""


class SampleLogError(UserError, ValueError):
    """A damaged `samples.jsonl`; the message names the file, the line and the fix."""


class SampleLog:
    """Append-only JSONL of finished units, each with a unique `key`; resumable, never duplicating rows."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._rows: dict[str, dict] = {}
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        complete, tail = lines[:-1], lines[-1]
        if tail:  # a torn last line from a crash mid-write: drop it and rewrite the file without it
            atomic_write(self.path, b"\n".join(complete) + (b"\n" if complete else b""))
        for i, line in enumerate(complete, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise SampleLogError(f"{self.path}:{i}: damaged row ({exc}); delete that line (its unit is "
                                     "computed again when the run resumes) or start a fresh run") from exc
            if not isinstance(row, dict) or "key" not in row:
                raise SampleLogError(f"{self.path}:{i}: row without a 'key'; this file is not a sample log: "
                                     "delete that line or start a fresh run")
            self._rows[row["key"]] = row

    def __contains__(self, key: str) -> bool:
        return key in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[dict]:
        return iter(self._rows.values())

    def append(self, key: str, row: dict) -> None:
        if key in self._rows:
            raise KeyError(f"sample {key!r} is already in {self.path}")
        row = {"key": key, **row}
        with open(self.path, "a") as f:
            f.write(json.dumps(to_jsonable(row), sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._rows[key] = row
