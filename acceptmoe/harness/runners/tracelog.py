"""Resumable trace files: one JSONL file of complete traces (harness.trace format), one trace per finished unit.

Each trace's meta carries its unit `key` and `n_blocks`. A trace is appended in one write and fsynced. On
open, the file is cleaned: a torn last line, traces with fewer blocks than `n_blocks` (a crash mid-write),
repeated keys and, when `keep` is given, traces whose unit has no finished sample row (written just before a
crash, so the unit runs again) are dropped and the file is rewritten. The file therefore never holds a
duplicate, and `load_traces` reads it like any trace file.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Container, Iterator

from acceptmoe.harness.trace import Trace, load_traces, save_traces


class TraceLog:
    def __init__(self, path: str | Path, keep: Container[str] | None = None):
        """keep: keys whose traces stay (None: every complete trace stays)."""
        self.path = Path(path)
        self._traces: dict[str, Trace] = {}
        if self.path.exists():
            self._load(keep)

    def _load(self, keep: Container[str] | None) -> None:
        raw = self.path.read_bytes()
        body = raw[: raw.rfind(b"\n") + 1]          # drop a torn last line
        tmp = self.path.with_name(self.path.name + ".check")
        tmp.write_bytes(body)
        traces = load_traces(tmp)
        tmp.unlink()
        for t in traces:
            key = t.meta.get("key")
            if key is None:
                raise ValueError(f"{self.path}: a trace without a 'key' in its meta; not a runner trace log")
            complete = len(t.blocks) == t.meta.get("n_blocks")
            if complete and key not in self._traces and (keep is None or key in keep):
                self._traces[key] = t
        if len(self._traces) != len(traces) or body != raw:
            save_traces(self.path, self._traces.values())

    def __contains__(self, key: str) -> bool:
        return key in self._traces

    def __len__(self) -> int:
        return len(self._traces)

    def __iter__(self) -> Iterator[Trace]:
        return iter(self._traces.values())

    def get(self, key: str) -> Trace:
        return self._traces[key]

    def append(self, key: str, trace: Trace) -> None:
        if key in self._traces:
            raise KeyError(f"trace {key!r} is already in {self.path}")
        trace.meta.update(key=key, n_blocks=len(trace.blocks))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write("\n".join(trace.lines()) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._traces[key] = trace

