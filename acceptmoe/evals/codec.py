"""Values as JSON, both ways: test inputs into a sandboxed program, return values back out.

This file is standard-library only and self-contained: `acceptmoe.evals.harness` runs its source text
inside the sandboxed harness (to decode inputs and encode return values) and the parent imports it (to
encode inputs and decode return values), so both ends share one definition. It never imports numpy
itself; the parent's decoder imports it only to rebuild a numpy value.

Encoding (`encode`): None, bool, int, float and str map to JSON scalars (ints beyond 2**53 and
non-finite floats are tagged so they survive any JSON reader); list maps to a JSON array; every other
type is a one-key JSON object: {"t": [...]} tuple, {"s": [...]} set, {"f": [...]} frozenset, {"d": [[key,
value], ...]} dict (and collections.defaultdict), {"C": ...} collections.Counter, {"O": ...}
collections.OrderedDict, {"q": [...]} collections.deque, {"c": [re, im]} complex, {"b": "hex"} bytes,
{"i": "hex"} big int, {"x": "nan" | "inf" | "-inf"} float, {"F": [numerator, denominator]}
fractions.Fraction, {"D": "text"} decimal.Decimal, {"n": [dtype, shape or null, data]} a numpy scalar or
array of a bool, integer, float or complex dtype, and {"u": [type name, value]} an instance of a subclass
of one of the built-in types above (a namedtuple, an IntEnum member, a str subclass, ...) as its
built-in value. The decoder rebuilds a subclass as a class of its own with that name and the built-in
type's behaviour (`subclass`; kept in the `Names` of the run that sent it, after the shared ones of trusted
values): its data is compared, never its own `__eq__`. Anything else, and anything
nested deeper than MAX_DEPTH, becomes {"o": "<type name>"}, decoded as an `Opaque` value that equals
nothing but itself.

A value whose encoding is longer than the byte cap given to `encode_result` (`VALUE_CAP` at most)
travels as {"h": [sha256 hex, size]}, a digest of its canonical form (types and values; set and dict
members in sorted order of their own digests), decoded as a `Digest`. Two digests are equal exactly when
the values have equal built-in types and values, so large values are compared by exact match only. A
program cannot forge a digest of a value it does not produce: it never sees the value it is compared with.

Decoding (`decode`) builds only built-in values, `Opaque`, `Digest`, Fraction, Decimal, numpy values and
the named subclasses; it never imports, calls or evaluates anything taken from the text. Its work is
bounded: nesting by MAX_DEPTH, and the members of every set and the keys of every mapping may share one
hash among at most MAX_COLLISIONS distinct values (crafted collisions would make building a set
quadratic), so decoding what an untrusted program wrote is safe.
"""
import collections
import decimal
import fractions
import hashlib
import itertools
import json
import marshal
import math
import os

MAX_DEPTH = 64
VALUE_CAP = 8 << 20           # bytes of one encoded value, beyond which it travels as a digest
MAX_COLLISIONS = 16           # distinct members of one set (or keys of one mapping) sharing a hash
MAX_FRACTION_BITS = 1 << 16   # numerator and denominator of a decoded Fraction (normalising costs a gcd)
_SAFE_INT = 1 << 53
_MAPPINGS = {dict: "d", collections.defaultdict: "d", collections.Counter: "C", collections.OrderedDict: "O"}
_SET_TAGS = {set: b"S", frozenset: b"F"}
_SCALARS = (str, int, float, bool, type(None))
_DIGESTED = (bool, int, float, complex, str, bytes, list, tuple, set, frozenset, collections.deque, *_MAPPINGS)
# Built-in types a subclass travels as, most derived first; each with how to read its built-in value
# without calling methods the subclass may override.
_BASES = (
    (collections.Counter, lambda v: collections.Counter(dict(dict.items(v)))),
    (collections.OrderedDict, lambda v: collections.OrderedDict(dict.items(v))),
    (collections.defaultdict, lambda v: dict(dict.items(v))),
    (dict, lambda v: dict(dict.items(v))),
    (int, int.__index__),
    (float, float.__float__),
    (complex, complex.__complex__),
    (str, str.__str__),
    (bytes, bytes.__bytes__),
    (tuple, lambda v: tuple.__getitem__(v, slice(None))),
    (list, lambda v: list.__getitem__(v, slice(None))),
    (set, lambda v: set(set.__iter__(v))),
    (frozenset, lambda v: frozenset(frozenset.__iter__(v))),
    (collections.deque, lambda v: collections.deque(collections.deque.__iter__(v))),
)
_BASE_TYPES = tuple(base for base, _ in _BASES)
_NUMPY_KINDS = "biufc"


class Opaque:
    """A value that was not data this module knows (an object, a generator, a function, ...)."""

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
        return "Digest(%s..., %d bytes)" % (self.hex[:12], self.weight)


def size_floor(value, limit):
    """min(limit + 1, a lower bound of the length of `value`'s encoding), without encoding it."""
    total, stack = 0, [value]
    while stack and total <= limit:
        item = stack.pop()
        kind = type(item)
        total += 1
        if kind is str:
            total += len(item)
        elif kind is bytes:
            total += 2 * len(item)
        elif kind is int:
            total += item.bit_length() // 4
        elif kind in (list, tuple, set, frozenset, collections.deque):
            stack.extend(item)
        elif kind in _MAPPINGS:
            stack.extend(item.keys())
            stack.extend(item.values())
    return min(total, limit + 1)


def _feed(h, value, depth):
    kind = type(value)
    if depth > MAX_DEPTH or not (value is None or kind in _DIGESTED):
        h.update(b"o" + os.urandom(16))  # not built-in data: equal to nothing, as Opaque
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
        fast = _marshal_digest(list(value) if kind is collections.deque else value, depth)
        if fast is not None:
            h.update(b"m" + fast)
            return
        for item in value:
            _feed(h, item, depth + 1)
    else:  # sets and mappings: members in sorted order of their digests
        members = value.items() if kind in _MAPPINGS else ((v,) for v in value)
        h.update(b"%s%d:" % (_SET_TAGS.get(kind) or _MAPPINGS[kind].encode(), len(value)))
        for d in sorted("".join(_digest(part, depth + 1) for part in member) for member in members):
            h.update(d.encode())


_MARSHAL_SCALARS = {str, int, float, bool, type(None), bytes, complex}


def _marshal_is_canonical(value, depth):
    """True if `value` (a list, tuple or deque) holds only lists, tuples and scalars, nested at most to
    MAX_DEPTH: then marshal's version 2 (no references, no interning marks) writes equal values, and only
    equal values, as equal bytes. The types of each level are collected at C speed."""
    level, below = [value], 0
    while level:
        types = set(map(type, itertools.chain.from_iterable(level)))
        if not types <= _MARSHAL_SCALARS | {list, tuple} or depth + below > MAX_DEPTH:
            return False
        if list not in types and tuple not in types:
            return True
        level = [item for item in itertools.chain.from_iterable(level) if type(item) is list or type(item) is tuple]
        below += 1
    return True


def _marshal_digest(items, depth):
    """The sha256 of `items` (a list or tuple) in marshal's version 2, chunk by chunk, when that form is
    canonical (see `_marshal_is_canonical`; a chunk whose bytes cannot hold a set or dict's type code needs
    no check); None when it is not (sets, dicts, other types inside)."""
    sub = hashlib.sha256()
    for start in range(0, len(items), 4096):
        chunk = items[start:start + 4096]
        try:
            data = marshal.dumps(chunk, 2)
        except (ValueError, TypeError):
            return None
        if (b"{" in data or b"<" in data or b">" in data) and not _marshal_is_canonical(chunk, depth):
            return None
        sub.update(data)
    return sub.digest()


def _digest(value, depth=0):
    h = hashlib.sha256()
    _feed(h, value, depth)
    return h.hexdigest()


def encode_result(value, cap=VALUE_CAP):
    """`encode(value)`, or its digest form when its JSON text would be longer than `cap` bytes."""
    cap = min(cap, VALUE_CAP)
    if size_floor(value, cap) <= cap:
        data = encode(value)
        size = len(json.dumps(data, separators=(",", ":"), allow_nan=False))
        if size <= cap:
            return data
    else:
        size = cap + 1
    return {"h": [_digest(value), size]}


def _type_name(value):
    try:
        kind = type(value)
        return ("%s.%s" % (kind.__module__, kind.__qualname__))[:200]
    except BaseException:
        return "?"


def _numpy(value, depth):
    dtype = value.dtype
    if dtype.kind not in _NUMPY_KINDS or dtype.hasobject:
        return None
    shape = [int(n) for n in value.shape] if type(value).__name__ == "ndarray" else None
    return {"n": [str(dtype.name), shape, encode(value.tolist(), depth + 1)]}


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
    if kind is fractions.Fraction:
        return {"F": [encode(value.numerator, depth + 1), encode(value.denominator, depth + 1)]}
    if kind is decimal.Decimal:
        return {"D": str(value)}
    if kind is Digest:  # a decoded result written back (e.g. to a cache)
        return {"h": [value.hex, value.weight]}
    if kind is Opaque:
        return {"o": value.type_name}
    try:
        if getattr(kind, "__module__", None) == "numpy" and hasattr(value, "dtype"):
            found = _numpy(value, depth)
            if found is not None:
                return found
        if isinstance(value, _BASE_TYPES):
            name = value.type_name if isinstance(value, Subclassed) else _type_name(value)
            for base, read in _BASES:
                if isinstance(value, base):
                    return {"u": [name, encode(read(value), depth + 1)]}
    except Exception:
        pass
    return {"o": _type_name(value)}


class DecodeError(ValueError):
    """The text is not a value this module encodes."""


class Subclassed:
    """Marks the classes `subclass` makes; `type_name` is the program's name for its class."""

    type_name = "?"


MAX_SUBCLASSES = 1024


class Names:
    """Where the classes `subclass` makes are kept, one per (base, name). `SHARED` holds those of trusted
    values (expected outputs, inputs) and has no cap; each untrusted run decodes into a Names of its own,
    at most `cap` classes, looked up after SHARED (so its values share the expected values' classes), and
    dropped with the run: what one program names never changes how another's values decode."""

    def __init__(self, cap=MAX_SUBCLASSES):
        self.classes, self.cap = {}, cap


SHARED = Names(cap=None)


def subclass(base, name, names=SHARED):
    """The class standing for the program's subclass `name` of `base`: `base`'s behaviour, one class per
    (base, name) in SHARED and `names`, so two values of the same named type have the same type; None
    when `names` is full."""
    key = (base, name)
    found = SHARED.classes.get(key) or names.classes.get(key)
    if found is None:
        if names.cap is not None and len(names.classes) >= names.cap:
            return None
        short = name.rpartition(".")[2] or "subclass"
        found = names.classes[key] = type(short if short.isidentifier() else "subclass", (base, Subclassed),
                                          {"type_name": name, "__module__": "acceptmoe.evals.codec.named"})
    return found


def distinct_members(members):
    """`members` (a list) if no hash is shared by more than MAX_COLLISIONS distinct members; else DecodeError.
    Unhashable members are a DecodeError too."""
    buckets = {}
    try:
        for item in members:
            h = hash(item)
            seen = buckets.get(h)
            if seen is None:
                buckets[h] = [item]
            elif not any(item == other for other in seen):
                if len(seen) >= MAX_COLLISIONS:
                    raise DecodeError("more than %d distinct members share one hash" % MAX_COLLISIONS)
                seen.append(item)
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError("a member cannot be hashed or compared (%s)" % type(exc).__name__) from None
    return members


def decode(data, depth=0, names=SHARED):
    """The value `encode` produced `data` from; raises DecodeError on anything else. `names`: where named
    subclasses go (`Names`; an untrusted run's own)."""
    if data is None or type(data) in (bool, str, int, float):
        return data
    if depth > 2 * MAX_DEPTH + 8:
        raise DecodeError("nested deeper than %d" % MAX_DEPTH)
    if type(data) is list:
        return [decode(v, depth + 1, names) for v in data]
    if type(data) is not dict or len(data) != 1:
        raise DecodeError("not an encoded value: %s" % (type(data).__name__,))
    (tag, body), = data.items()
    if tag == "t":
        return tuple(decode(v, depth + 1, names) for v in _items(body))
    if tag in ("s", "f"):
        members = distinct_members([decode(v, depth + 1, names) for v in _items(body)])
        return set(members) if tag == "s" else frozenset(members)
    if tag in ("d", "C", "O"):
        pairs = _items(body)
        if not all(type(p) is list and len(p) == 2 for p in pairs):
            raise DecodeError("dict entries must be [key, value] pairs")
        keys = distinct_members([decode(k, depth + 1, names) for k, _ in pairs])
        mapping = {"d": dict, "C": collections.Counter, "O": collections.OrderedDict}[tag]()
        for k, (_, v) in zip(keys, pairs, strict=True):
            mapping[k] = decode(v, depth + 1, names)
        return mapping
    if tag == "q":
        return collections.deque(decode(v, depth + 1, names) for v in _items(body))
    if tag == "c":
        parts = [decode(v, depth + 1, names) for v in _items(body)]
        if len(parts) != 2 or not all(type(p) in (int, float) for p in parts):
            raise DecodeError("complex needs [real, imag]")
        return complex(parts[0], parts[1])
    if tag == "b" and type(body) is str:
        try:
            return bytes.fromhex(body)
        except ValueError:
            raise DecodeError("bytes need hex digits") from None
    if tag == "i" and type(body) is str:
        try:
            return int(body, 16)
        except ValueError:
            raise DecodeError("a big int needs hex digits") from None
    if tag == "x" and body in ("nan", "inf", "-inf"):
        return float(body)
    if tag == "F":
        parts = [decode(v, depth + 1, names) for v in _items(body)]
        if (len(parts) != 2 or not all(type(p) is int and p.bit_length() <= MAX_FRACTION_BITS for p in parts)
                or parts[1] <= 0):
            raise DecodeError("a Fraction needs [numerator, denominator > 0] of bounded size")
        return fractions.Fraction(parts[0], parts[1])
    if tag == "D" and type(body) is str and len(body) <= 100_000:
        try:
            return decimal.Decimal(body)
        except decimal.InvalidOperation:
            raise DecodeError("not a Decimal") from None
    if tag == "n":
        return _decode_numpy(_items(body), depth, names)
    if tag == "u":
        return _decode_subclass(_items(body), depth, names)
    if tag == "o" and type(body) is str:
        return Opaque(body[:200])
    if tag == "h" and type(body) is list and len(body) == 2 and type(body[0]) is str and type(body[1]) is int:
        return Digest(body[0][:64], body[1])
    raise DecodeError("unknown tag %r" % (tag[:20],))


def _decode_subclass(body, depth, names):
    if len(body) != 2 or type(body[0]) is not str:
        raise DecodeError("a subclass needs [type name, value]")
    value = decode(body[1], depth + 1, names)
    base = type(value)
    cls = subclass(base, body[0][:200], names) if base in _BASE_TYPES else None
    if cls is None:
        return Opaque(body[0][:200])
    if base in _MAPPINGS or base is collections.deque:
        made = cls()
        if base is collections.deque:
            made.extend(value)
        else:
            dict.update(made, value)
        return made
    return cls(value)


def _decode_numpy(body, depth, names):
    import numpy
    if len(body) != 3 or type(body[0]) is not str or not (body[1] is None or type(body[1]) is list):
        raise DecodeError("a numpy value needs [dtype, shape, data]")
    try:
        dtype = numpy.dtype(body[0])
    except Exception:
        raise DecodeError("unknown numpy dtype") from None
    if dtype.kind not in _NUMPY_KINDS or dtype.hasobject:
        raise DecodeError("numpy dtype %s is not a number type" % dtype)
    data = decode(body[2], depth + 1, names)
    try:
        if body[1] is None:
            if type(data) not in (bool, int, float, complex):
                raise DecodeError("a numpy scalar needs a number")
            return dtype.type(data)
        shape = body[1]
        if len(shape) > 32 or not all(type(n) is int and 0 <= n for n in shape):
            raise DecodeError("bad numpy shape")
        array = numpy.array(data, dtype=dtype)
        if array.shape != tuple(shape):
            if array.size or math.prod(shape):
                raise DecodeError("numpy data does not have its shape")
            array = array.reshape(shape)
        return array
    except (TypeError, ValueError, OverflowError) as exc:
        if isinstance(exc, DecodeError):
            raise
        raise DecodeError("not numpy data (%s)" % type(exc).__name__) from None


def _items(body):
    if type(body) is not list:
        raise DecodeError("expected a list, found %s" % type(body).__name__)
    return body


def dumps(value):
    """One-line JSON text of `encode(value)`."""
    return json.dumps(encode(value), separators=(",", ":"), allow_nan=False)


def loads(text):
    """The value of JSON text written by `dumps` (DecodeError for anything else; unhashable set members
    and malformed JSON included). For text from an untrusted program use `acceptmoe.evals.readback`."""
    try:
        return decode(json.loads(text))
    except DecodeError:
        raise
    except (ValueError, TypeError, RecursionError) as exc:
        raise DecodeError(str(exc)[:200]) from None
