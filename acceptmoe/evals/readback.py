"""Reading what an untrusted program wrote, in the parent process, with every cost bounded.

- `LineReader`: bytes as they arrive from a pipe, split into lines; a line longer than its cap, or more
  bytes in all than the total cap, stops the reading (the caller then stops the program), so the parent
  never holds more than one capped line of the program's output.
- `parse_json`: one line of JSON text, its nesting depth checked by a linear scan before `json.loads`
  sees it (no RecursionError), then `codec.decode` (bounded depth, no crafted hash collisions).
- `brief`: a value rendered in at most a given number of characters whatever its size or nesting
  (`repr` of a 5000-digit int raises; `repr` of a large value is as large).
"""
from __future__ import annotations

import json
import re

import numpy as np

from acceptmoe.evals import codec

MAX_JSON_DEPTH = 2 * codec.MAX_DEPTH + 8
_STRINGS = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.S)
_OPEN, _CLOSE = (ord("["), ord("{")), (ord("]"), ord("}"))


class Unreadable(ValueError):
    """Text from a program that is not a value this side accepts; the message says why."""


def json_depth(text: bytes, chunk: int = 1 << 20) -> int:
    """The deepest nesting of arrays and objects in JSON `text` (brackets inside strings not counted),
    counted a chunk at a time so the scan needs little memory beside the text."""
    raw = _STRINGS.sub(b'""', text)
    deepest = level = 0
    for start in range(0, len(raw), chunk):
        part = np.frombuffer(raw, dtype=np.uint8, count=min(chunk, len(raw) - start), offset=start)
        steps = ((part == _OPEN[0]) | (part == _OPEN[1])).astype(np.int8) - ((part == _CLOSE[0]) | (part == _CLOSE[1]))
        steps = steps[steps != 0].astype(np.int32)
        if steps.size:
            depths = np.cumsum(steps) + level
            deepest, level = max(deepest, int(depths.max())), int(depths[-1])
    return deepest


def parse_json(text: bytes, max_depth: int = MAX_JSON_DEPTH):
    """The JSON value of `text`; Unreadable if it is not JSON or nests deeper than `max_depth`."""
    if json_depth(text) > max_depth:
        raise Unreadable(f"nested deeper than {max_depth} levels")
    try:
        return json.loads(text)
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:
        raise Unreadable(f"not JSON ({type(exc).__name__})") from None


def decode_value(data, names: codec.Names | None = None):
    """`codec.decode(data)` with named subclasses in `names` (a fresh `codec.Names` when None: what one
    program sent never shapes another's values), Unreadable instead of its errors."""
    try:
        return codec.decode(data, 0, codec.Names() if names is None else names)
    except codec.DecodeError as exc:
        raise Unreadable(str(exc)[:200]) from None
    except (RecursionError, MemoryError, TypeError, ValueError, OverflowError) as exc:
        raise Unreadable(f"not a value ({type(exc).__name__})") from None


class LineReader:
    """Complete lines out of a byte stream fed in chunks, under a cap per line and a cap in all.
    `feed` returns the completed lines; `overflow` says which cap was passed (None while within both)."""

    def __init__(self, line_cap: int, total_cap: int):
        self.line_cap, self.total_cap = line_cap, total_cap
        self.total = 0
        self.overflow: str | None = None
        self._partial = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        if self.overflow is not None:
            return []
        self.total += len(data)
        if self.total > self.total_cap:
            self.overflow = f"the program wrote more than {self.total_cap} bytes"
            return []
        if b"\n" not in data:  # the common case for a long line: append, never split the whole buffer again
            self._partial += data
            if len(self._partial) > self.line_cap:
                self.overflow = f"the program wrote a line longer than {self.line_cap} bytes"
            return []
        first, *middle, rest = data.split(b"\n")
        self._partial += first
        lines = [bytes(self._partial), *middle]
        self._partial = bytearray(rest)
        if len(self._partial) > self.line_cap or any(len(line) > self.line_cap for line in lines):
            self.overflow = f"the program wrote a line longer than {self.line_cap} bytes"
            return []
        return lines


def brief(value, limit: int = 200) -> str:
    """`value` rendered like repr in at most `limit` characters (cut with "..."), never raising."""
    out: list[str] = []
    try:
        _render(value, out, [limit + 1], 0)
    except Exception as exc:  # a value we do not know how to show: say what it is
        return f"<{type(value).__name__}: {type(exc).__name__}>"[:limit]
    text = "".join(out)
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


def _put(out: list[str], budget: list[int], text: str) -> bool:
    out.append(text[: budget[0]])
    budget[0] -= len(text)
    return budget[0] > 0


_BRACKETS = {list: ("[", "]"), tuple: ("(", ")"), set: ("{", "}"), frozenset: ("frozenset({", "})")}


def _render(value, out: list[str], budget: list[int], depth: int) -> bool:
    kind = type(value)
    if depth > codec.MAX_DEPTH + 4:
        return _put(out, budget, "...")
    if kind is int or isinstance(value, int) and not isinstance(value, bool):
        bits = int.__index__(value).bit_length()
        return _put(out, budget, repr(int.__index__(value)) if bits < 4000 else f"<int of {bits} bits>")
    if kind is str or isinstance(value, str):
        text = str.__str__(value)
        return _put(out, budget, repr(text[: budget[0] + 1]))
    if kind is bytes:
        return _put(out, budget, repr(value[: budget[0] + 1]))
    if isinstance(value, (list, tuple, set, frozenset)) or kind.__name__ == "deque":
        opening, closing = next((v for k, v in _BRACKETS.items() if isinstance(value, k)), ("deque([", "])"))
        if isinstance(value, codec.Subclassed):
            opening = f"{value.type_name}{opening}"
        if not _put(out, budget, opening):
            return False
        for i, item in enumerate(value):
            if (i and not _put(out, budget, ", ")) or not _render(item, out, budget, depth + 1):
                return False
        return _put(out, budget, ("," if kind is tuple and len(value) == 1 else "") + closing)
    if isinstance(value, dict):
        if not _put(out, budget, "{"):
            return False
        for i, (k, v) in enumerate(value.items()):
            if ((i and not _put(out, budget, ", ")) or not _render(k, out, budget, depth + 1)
                    or not _put(out, budget, ": ") or not _render(v, out, budget, depth + 1)):
                return False
        return _put(out, budget, "}")
    if isinstance(value, np.ndarray):
        return _put(out, budget, f"array(shape={value.shape}, dtype={value.dtype})")
    return _put(out, budget, repr(value)[: budget[0] + 1])
