"""Plain-data values as JSON, both ways: test inputs into a sandboxed program, return values back out.

This file is standard-library only and self-contained: `acceptmoe.evals.codecheck` runs its source text
inside the sandboxed harness (to decode inputs and encode return values) and imports it in the parent
(to encode inputs and decode return values), so both ends share one definition.

Encoding (`encode`): None, bool, int, float and str map to JSON scalars (ints beyond 2**53 and
non-finite floats are tagged so they survive any JSON reader); list maps to a JSON array; every other
supported type is a one-key JSON object: {"t": [...]} tuple, {"s": [...]} set, {"f": [...]} frozenset,
{"d": [[key, value], ...]} dict (and collections.defaultdict), {"C": ...} collections.Counter, {"O": ...}
collections.OrderedDict, {"q": [...]} collections.deque, {"c": [re, im]} complex, {"b": "hex"} bytes,
{"i": "hex"} big int, {"x": "nan" | "inf" | "-inf"} float. Types are matched exactly (`type(v) is list`, never isinstance),
so subclasses with their own `__eq__` are not plain data. Anything else, and anything nested deeper than
MAX_DEPTH, becomes {"o": "<type name>"}, decoded as an `Opaque` value that equals nothing but itself.

A large value (more than MAX_WEIGHT: one per element, plus one per 64 characters of a string or
bytes) travels as {"h": [sha256 hex, weight]} (`encode_result`), a digest of its canonical form (types
and values; set and dict members in sorted order of their own digests), decoded as a `Digest`. Two
digests are equal exactly when the values have equal types and values, so large values are compared by
exact match only. A program cannot forge a digest of a value it does not produce: it never sees the
value it is compared with.

Decoding (`decode`) builds only built-in values (and `Opaque`, `Digest`); it never imports, calls or
evaluates anything taken from the text, so decoding what an untrusted program wrote is safe.
"""
import collections
import hashlib
import json
import math
import os

MAX_DEPTH = 64
MAX_WEIGHT = 200_000
_SAFE_INT = 1 << 53


class Opaque:
    """A value that was not plain data (an object, a generator, a subclass of a built-in type, ...)."""

    __slots__ = ("type_name",)

    def __init__(self, type_name):
        self.type_name = type_name

    def __repr__(self):
        return "Opaque(%s)" % (self.type_name,)


class Digest:
    """A large value by its digest (see the module docstring); equal to another Digest of the same hex."""

    __slots__ = ("hex", "weight")

    def __init__(self, hex_digest, weight):
        self.hex, self.weight = hex_digest, weight

    def __eq__(self, other):
        return type(other) is Digest and other.hex == self.hex

    def __hash__(self):
        return hash(self.hex)

    def __repr__(self):
        return "Digest(%s..., weight %d)" % (self.hex[:12], self.weight)


def weight(value, limit):
    """min(limit + 1, size of `value`): one per element, plus one per 64 characters of str or bytes."""
    total, stack = 0, [value]
    while stack and total <= limit:
        item = stack.pop()
        kind = type(item)
        total += 1
        if kind is str or kind is bytes:
            total += len(item) // 64
        elif kind in (list, tuple, set, frozenset, collections.deque):
            stack.extend(item)
        elif kind in _MAPPINGS:
            stack.extend(item.keys())
            stack.extend(item.values())
    return min(total, limit + 1)


def _feed(h, value, depth):
    kind = type(value)
    if depth > MAX_DEPTH or not (value is None or kind in _DIGESTED):
        h.update(b"o" + os.urandom(16))  # not plain data: equal to nothing, as Opaque
    elif value is None:
        h.update(b"N")
    elif kind is bool:
        h.update(b"T" if value else b"F")
    elif kind is int:
        h.update(b"i%x;" % value)
    elif kind is float:
        h.update(b"f" + repr(value).encode() + b";")
    elif kind is complex:
        h.update(b"c" + repr(value).encode() + b";")
    elif kind is str or kind is bytes:
        raw = value.encode("utf-8", "surrogatepass") if kind is str else value
        h.update(b"%s%d:" % (b"s" if kind is str else b"b", len(raw)) + raw)
    elif kind is list or kind is tuple or kind is collections.deque:
        h.update(b"%s%d:" % ({list: b"l", tuple: b"t"}.get(kind, b"q"), len(value)))
        if all(type(item) in _SCALARS for item in value):  # fast path: one repr for a flat container
            h.update(repr(value if kind is not collections.deque else list(value)).encode("utf-8", "surrogatepass"))
            return
        for item in value:
            _feed(h, item, depth + 1)
    else:  # sets and mappings: members in sorted order of their digests
        members = value.items() if kind in _MAPPINGS else ((v,) for v in value)
        h.update(b"%s%d:" % (_SET_TAGS.get(kind) or _MAPPINGS[kind].encode(), len(value)))
        for d in sorted("".join(_digest(part, depth + 1) for part in member) for member in members):
            h.update(d.encode())


_MAPPINGS = {dict: "d", collections.defaultdict: "d", collections.Counter: "C", collections.OrderedDict: "O"}
_SET_TAGS = {set: b"S", frozenset: b"F"}
_SCALARS = (str, int, float, bool, type(None))
_DIGESTED = (bool, int, float, complex, str, bytes, list, tuple, set, frozenset, collections.deque, *_MAPPINGS)


def _digest(value, depth=0):
    h = hashlib.sha256()
    _feed(h, value, depth)
    return h.hexdigest()


def encode_result(value):
    """`encode(value)`, or its digest form when the value weighs more than MAX_WEIGHT."""
    size = weight(value, MAX_WEIGHT)
    if size > MAX_WEIGHT:
        return {"h": [_digest(value), size]}
    return encode(value)


def _type_name(value):
    try:
        kind = type(value)
        return "%s.%s" % (kind.__module__, kind.__qualname__)
    except BaseException:
        return "?"


def encode(value, depth=0):
    """`value` as a JSON-ready structure (see the module docstring)."""
    kind = type(value)
    if depth > MAX_DEPTH:
        return {"o": "nested deeper than %d" % MAX_DEPTH}
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        if -_SAFE_INT <= value <= _SAFE_INT:
            return value
        return {"i": hex(value)}
    if kind is float:
        if math.isfinite(value):
            return value
        return {"x": "nan" if value != value else ("inf" if value > 0 else "-inf")}
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind is tuple:
        return {"t": [encode(v, depth + 1) for v in value]}
    if kind is set or kind is frozenset:
        return {"s" if kind is set else "f": [encode(v, depth + 1) for v in value]}
    if kind in _MAPPINGS:
        return {_MAPPINGS[kind]: [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is collections.deque:
        return {"q": [encode(v, depth + 1) for v in value]}
    if kind is complex:
        return {"c": [encode(value.real, depth + 1), encode(value.imag, depth + 1)]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is Digest:  # a decoded result written back (e.g. to a cache)
        return {"h": [value.hex, value.weight]}
    if kind is Opaque:
        return {"o": value.type_name}
    return {"o": _type_name(value)}


class DecodeError(ValueError):
    """The text is not a value this module encodes."""


def decode(data):
    """The value `encode` produced `data` from; raises DecodeError on anything else."""
    if data is None or type(data) in (bool, str, int, float):
        return data
    if type(data) is list:
        return [decode(v) for v in data]
    if type(data) is not dict or len(data) != 1:
        raise DecodeError("not an encoded value: %r" % (data,)[:200])
    (tag, body), = data.items()
    if tag == "t":
        return tuple(decode(v) for v in _items(body))
    if tag == "s":
        return set(decode(v) for v in _items(body))
    if tag == "f":
        return frozenset(decode(v) for v in _items(body))
    if tag in ("d", "C", "O"):
        pairs = _items(body)
        if not all(type(p) is list and len(p) == 2 for p in pairs):
            raise DecodeError("dict entries must be [key, value] pairs")
        mapping = {"d": dict, "C": collections.Counter, "O": collections.OrderedDict}[tag]()
        for k, v in pairs:
            mapping[decode(k)] = decode(v)
        return mapping
    if tag == "q":
        return collections.deque(decode(v) for v in _items(body))
    if tag == "c":
        parts = [decode(v) for v in _items(body)]
        if len(parts) != 2 or not all(type(p) in (int, float) for p in parts):
            raise DecodeError("complex needs [real, imag]")
        return complex(parts[0], parts[1])
    if tag == "b" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "i" and type(body) is str:
        return int(body, 16)
    if tag == "x" and body in ("nan", "inf", "-inf"):
        return float(body)
    if tag == "o" and type(body) is str:
        return Opaque(body)
    if tag == "h" and type(body) is list and len(body) == 2 and type(body[0]) is str and type(body[1]) is int:
        return Digest(body[0], body[1])
    raise DecodeError("unknown tag %r" % (tag,))


def _items(body):
    if type(body) is not list:
        raise DecodeError("expected a list, found %s" % type(body).__name__)
    return body


def dumps(value):
    """One-line JSON text of `encode(value)`."""
    return json.dumps(encode(value), separators=(",", ":"), allow_nan=False)


def loads(text):
    """The value of JSON text written by `dumps` (DecodeError for anything else; unhashable set members
    and malformed JSON included)."""
    try:
        return decode(json.loads(text))
    except DecodeError:
        raise
    except (ValueError, TypeError, RecursionError) as exc:
        raise DecodeError(str(exc)[:200]) from None
