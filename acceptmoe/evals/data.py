"""Checksummed access to the evaluation data files under `data/` (see `data/SOURCES.md`).

Every file is listed once in `FILES` with its sha256; `read_records(name)` checks the bytes before parsing
and names the file, the line and the problem when a record is malformed. The data folder is `data/` at the
repository root unless the environment variable `ACCEPTMOE_DATA_DIR` points elsewhere.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from acceptmoe.errors import UserError
from acceptmoe.paths import REPO

DATA_DIR_ENV = "ACCEPTMOE_DATA_DIR"


@dataclass(frozen=True)
class DataFile:
    """One data file: path relative to the data folder, its sha256, and the fields every record needs."""

    path: str
    sha256: str
    fields: tuple[str, ...]


FILES: dict[str, DataFile] = {
    "gsm8k-test": DataFile("gsm8k/test.jsonl",
                           "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14", ("question", "answer")),
    "gsm8k-train": DataFile("gsm8k/train.jsonl",
                            "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465", ("question", "answer")),
    "math500": DataFile("math500/test.jsonl",
                        "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132",
                        ("problem", "solution", "answer", "subject", "level", "unique_id")),
    "humaneval": DataFile("humaneval/HumanEval.jsonl.gz",
                          "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef",
                          ("task_id", "prompt", "entry_point", "canonical_solution", "test")),
    "mbpp": DataFile("mbpp/mbpp.jsonl",
                     "ccf64ceae9c5403bf50a044cb6d505bfd2a2963ee58338ba268fd65beab92a9f",
                     ("task_id", "text", "code", "test_setup_code", "test_list", "challenge_test_list")),
    "humaneval-plus": DataFile("evalplus/HumanEvalPlus-v0.1.10.jsonl.gz",
                               "272720b90ac375502c8ed23cd791c2a93dfb22a911641a494da74a426c09f101",
                               ("task_id", "prompt", "entry_point", "canonical_solution", "test")),
    "mbpp-plus": DataFile("evalplus/MbppPlus-v0.2.0.jsonl.gz",
                          "af43697e8791c4c149bdfd6b489d8b5412507551ac20e28a439f650b8225db63",
                          ("task_id", "prompt", "entry_point", "canonical_solution", "assertion")),
}


class DataError(UserError, RuntimeError):
    """A data file is missing, has other bytes than recorded, or holds a malformed record."""


def data_dir() -> Path:
    """The data folder: $ACCEPTMOE_DATA_DIR if set, else `data/` at the repository root."""
    override = os.environ.get(DATA_DIR_ENV)
    return Path(override) if override else REPO / "data"


def data_path(name: str) -> Path:
    """Absolute path of the data file registered as `name`."""
    if name not in FILES:
        raise DataError(f"unknown data file {name!r}; known: {', '.join(sorted(FILES))}")
    return data_dir() / FILES[name].path


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_checksum(path: Path, expected: str) -> None:
    """Raise DataError naming the file unless it exists and its sha256 is `expected`."""
    if not path.is_file():
        raise DataError(f"data file missing: {path}. Copy it from the shared data snapshot "
                        f"(see data/SOURCES.md) or set {DATA_DIR_ENV} to the folder holding it.")
    actual = sha256_of(path)
    if actual != expected:
        raise DataError(f"checksum mismatch for {path}: expected sha256 {expected}, found {actual}. "
                        "The file was changed or truncated; restore it from the source in data/SOURCES.md.")


def parse_jsonl(text: str, source: str, fields: tuple[str, ...]) -> list[dict]:
    """Parse JSON Lines; every non-blank line must be an object with `fields`. Errors name source and line."""
    records = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{source}, line {lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(record, dict):
            raise DataError(f"{source}, line {lineno}: expected a JSON object, found {type(record).__name__}")
        missing = [f for f in fields if f not in record]
        if missing:
            raise DataError(f"{source}, line {lineno}: record lacks field(s) {missing}")
        records.append(record)
    return records


def read_text(path: Path) -> str:
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    return raw.decode("utf-8")


@cache
def _read_cached(name: str, root: str) -> tuple[dict, ...]:
    entry = FILES[name]
    path = Path(root) / entry.path
    verify_checksum(path, entry.sha256)
    return tuple(parse_jsonl(read_text(path), str(path), entry.fields))


def read_records(name: str) -> list[dict]:
    """All records of data file `name`, checksum-verified (each call returns fresh dict copies)."""
    data_path(name)  # validates the name
    return [dict(r) for r in _read_cached(name, str(data_dir()))]


def take(records: list[dict], limit: int | None) -> list[dict]:
    """The first `limit` records (all when None); a negative limit is an error."""
    if limit is None:
        return records
    if limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    return records[:limit]
