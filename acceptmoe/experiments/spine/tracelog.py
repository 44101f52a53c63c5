"""Resumable trace files: one JSONL file of complete traces (engine.trace format), one trace per finished unit.

Each trace's meta carries its unit `key` and `n_blocks`. A trace is appended in one write and fsynced. On
open, the file is cleaned: a torn last line, traces with fewer blocks than `n_blocks` (a crash mid-write),
repeated keys and, when `keep` is given, traces whose unit has no finished sample row (written just before a
crash, so the unit runs again) are dropped and the file is rewritten. The file therefore never holds a
duplicate, and `load_traces` reads it like any trace file.

Only the keys stay in memory (a paper-scale file holds gigabytes of per-layer fields); `read(where)` parses
the traces whose meta passes `where`, streaming through the file.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Container, Iterator
from pathlib import Path

from acceptmoe.engine.trace import FORMAT_VERSION, BlockRecord, Trace

_META, _BLOCK = b'{"kind": "meta"', b'{"kind": "block"'


class TraceLog:
    def __init__(self, path: str | Path, keep: Container[str] | None = None):
        """keep: keys whose traces stay (None: every complete trace stays)."""
        self.path = Path(path)
        self._keys: set[str] = set()
        if self.path.exists():
            self._clean(keep)

    def _groups(self) -> Iterator[tuple[dict, list[bytes]]]:
        """(meta, block lines) per trace in file order; stops at a torn last line (no newline)."""
        meta, blocks = None, []
        with open(self.path, "rb") as f:
            for n, line in enumerate(f, start=1):
                if not line.endswith(b"\n"):
                    break
                if line.startswith(_META):
                    if meta is not None:
                        yield meta, blocks
                    meta, blocks = json.loads(line), []
                elif line.startswith(_BLOCK) and meta is not None:
                    blocks.append(line)
                elif line.strip():
                    raise ValueError(f"{self.path}:{n}: not a trace log line (expected a meta or block record)")
        if meta is not None:
            yield meta, blocks

    def _clean(self, keep: Container[str] | None) -> None:
        def kept(meta: dict, blocks: list[bytes], seen: set[str]) -> bool:
            key = meta.get("key")
            if key is None:
                raise ValueError(f"{self.path}: a trace without a 'key' in its meta; not a runner trace log")
            return len(blocks) == meta.get("n_blocks") and key not in seen and (keep is None or key in keep)

        dropped = 0
        for meta, blocks in self._groups():
            if kept(meta, blocks, self._keys):
                self._keys.add(meta["key"])
            else:
                dropped += 1
        if dropped or self._torn():
            self._rewrite(kept)

    def _torn(self) -> bool:
        with open(self.path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"

    def _rewrite(self, kept: Callable[[dict, list[bytes], set], bool]) -> None:
        tmp, seen = self.path.with_name(self.path.name + ".tmp"), set()
        with open(tmp, "wb") as out:
            for meta, blocks in self._groups():
                if kept(meta, blocks, seen):
                    seen.add(meta["key"])
                    out.write(json.dumps(meta).encode() + b"\n" + b"".join(blocks))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def read(self, where: Callable[[dict], bool] | None = None) -> list[Trace]:
        """The traces whose meta passes `where` (all when None), in file order."""
        out = []
        if not self.path.exists():
            return out
        for meta, blocks in self._groups():
            if where is None or where(meta):
                if meta.get("format_version") != FORMAT_VERSION:
                    raise ValueError(f"{self.path}: trace format {meta.get('format_version')} is not {FORMAT_VERSION}")
                info = {k: v for k, v in meta.items() if k not in ("kind", "format_version")}
                out.append(Trace(meta=info, blocks=[BlockRecord.from_json(json.loads(b)) for b in blocks]))
        return out

    def append(self, key: str, trace: Trace) -> None:
        if key in self._keys:
            raise KeyError(f"trace {key!r} is already in {self.path}")
        trace.meta.update(key=key, n_blocks=len(trace.blocks))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write("\n".join(trace.lines()) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._keys.add(key)
