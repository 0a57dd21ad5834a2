"""The codec behind ``SafeSerde``: MessagePack through msgspec, with extension types for what
MessagePack has no type of its own for.

msgspec writes dicts, lists, str, bytes, numbers, bools, None and UTC datetimes in C. A tuple, a
``KV`` or a declared type would come back as a list or a dict, so a walk in Python first wraps
them in extensions. The walk leaves a container that needs no wrapping as it is, with no copy:
a dict of scalars costs one pass over its values. Decoding is msgspec's alone, plus a call per
extension; it builds only the types named here and the declared ones.

A declared type's fields are written by msgspec and read back as its annotations say: a field
annotated ``tuple[...]`` gives a tuple, one annotated ``Any`` gives lists for tuples, and an
aware datetime field comes back as the same instant in UTC.

Extension codes (a format: never renumber):

==== ======================= ===============================================================
code type                    data
==== ======================= ===============================================================
1    tuple                   the items, as a MessagePack array
2    KV                      ``[key, value]``
3    a declared type         its name, a NUL byte, and msgspec's encoding of the object
4    datetime (not UTC)      ISO 8601 text (naive, or with its offset)
5, 6 set, frozenset          the items, as an array
7, 8 date, time              ISO 8601 text
9    timedelta               ``[days, seconds, microseconds]``
10   Decimal                 its text
11   UUID                    its 16 bytes
12   int beyond 64 bits      its text
13   dict with keys of other ``[[key, value], ...]``
     types than scalars
14   ``LateMessage``         its fields, in order, as an array
15   ``WindowPane``          ``[window key, pane id, message, firing, mode]`` (the enums by
                             their values)
==== ======================= ===============================================================

A value may nest ``MAX_DEPTH`` levels of containers (lists, tuples, dicts, sets, ``KV`` values,
panes and late messages within each other, the outermost counting 1). A deeper one is refused
with its depth named, when it is written: so whatever was written decodes, at any depth of the
caller's stack (the walks recurse, under Python's recursion limit).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec
from msgspec.msgpack import Ext

from .errors import SerdeError
from .kv import KV
from .late import LateMessage
from .windows import AccumulationMode, FiringType, WindowKey, WindowPane

__all__ = ["MAX_DEPTH", "ObjectCodec", "declared_names"]

#: The deepest a value may nest: a JSON message at its limit (``samza_dsl.json_text``'s
#: ``MAX_JSON_DEPTH``, 200) with room for what the runtime wraps around it (a ``KV``, a window
#: pane, a late message, a join's pair). Encoding and decoding take up to three frames a level.
MAX_DEPTH = 256

_TUPLE, _KV, _DECLARED, _DATETIME, _SET, _FROZENSET = 1, 2, 3, 4, 5, 6
_DATE, _TIME, _TIMEDELTA, _DECIMAL, _UUID, _BIGINT, _DICT = 7, 8, 9, 10, 11, 12, 13
_LATE = 14
_PANE = 15

_UTC = dt.UTC
_INT64 = (-(1 << 63), (1 << 64) - 1)  # MessagePack's int range (uint64 above int64)
#: what the walk leaves as it is (ints too: one past 64 bits makes msgspec raise, and is walked
#: again, ``_lowering(big_ints=True)``)
_SCALARS = frozenset({str, float, bool, type(None), bytes, int})
_NONE: Any = object()  # no arrival yet (``_EntryHeads``)


def type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _declarable(cls: Any) -> bool:
    return isinstance(cls, type) and (
        issubclass(cls, msgspec.Struct) or dataclasses.is_dataclass(cls)
        or (issubclass(cls, tuple) and hasattr(cls, "_fields")))


def declared_names(types: Iterable[type] | Mapping[str, type]) -> dict[str, type]:
    """name -> type of the declared types, checked."""
    items = list(types.items()) if isinstance(types, Mapping) else \
        [(type_name(t) if isinstance(t, type) else "", t) for t in types]
    out: dict[str, type] = {}
    for name, cls in items:
        if not _declarable(cls) or cls is KV:
            raise TypeError(f"declared types must be msgspec.Struct, dataclass or NamedTuple "
                            f"classes, got {cls!r}")
        if not isinstance(name, str) or not name or "\x00" in name:
            raise TypeError(f"a declared type's name must be a non-empty str, got {name!r}")
        if out.get(name, cls) is not cls:
            raise TypeError(f"two declared types are named {name!r}: {out[name]!r} and {cls!r}; "
                            f"declare them with a mapping of distinct names")
        out[name] = cls
    return out


class _Unsupported(TypeError):
    def __init__(self, obj: Any) -> None:
        super().__init__(type(obj).__name__)
        self.obj = obj


class _TooDeep(ValueError):
    """A value nests more than ``MAX_DEPTH`` levels."""


def nesting_depth(obj: Any) -> int:
    """How many levels of containers ``obj`` nests (0 for a scalar), walked without recursion.

    >>> nesting_depth([1, {"a": (2, [3])}]), nesting_depth(KV("k", [[]])), nesting_depth("s")
    (4, 3, 0)
    """
    deepest = 0
    todo = [(obj, 1)]
    while todo:
        o, d = todo.pop()
        if isinstance(o, dict):
            children: Iterable[Any] = [*o.keys(), *o.values()]
        elif isinstance(o, list | tuple | set | frozenset) and not isinstance(o, KV):
            children = o
        elif isinstance(o, KV):
            children = (o.key, o.value)
        elif isinstance(o, LateMessage):
            children = (o.message,)
        elif isinstance(o, WindowPane):
            children = (o.key.key, o.message)
        else:
            continue
        deepest = max(deepest, d)
        todo.extend((c, d + 1) for c in children)
    return deepest


class ObjectCodec:
    """``encode(obj) -> bytes`` and ``decode(bytes) -> obj`` for the declared types
    (name -> class)."""

    def __init__(self, types: Mapping[str, type]) -> None:
        self.types = dict(types)
        encode_native = msgspec.msgpack.Encoder().encode
        # a declared type: its name and NUL first, then msgspec's encoding of its fields
        headers = {cls: name.encode() + b"\x00" for name, cls in self.types.items()}
        decoders: dict[bytes, Callable[[Any], Any]] = {
            name.encode(): msgspec.msgpack.Decoder(cls).decode
            for name, cls in self.types.items()}
        self._lower = _lowering(encode_native, headers, big_ints=False)
        self._lower_big = _lowering(encode_native, headers, big_ints=True)
        self._encode_native = encode_native
        #: what goes before a join entry's extensions' data, made at the first flush
        self._ext_heads: tuple[list[bytes], list[bytes]] | None = None
        self._decoder = msgspec.msgpack.Decoder(ext_hook=self._ext_hook)
        self._decoders = decoders
        self.decode: Callable[[bytes], Any] = self._decoder.decode

    def encode(self, obj: Any) -> bytes:
        try:
            t = type(obj)
            if t in _SCALARS:  # as the walk gives it back, with no call of it
                return self._encode_native(obj)
            if t is dict:  # a flat dict (a message) too
                for k, v in obj.items():
                    if type(v) not in _SCALARS or type(k) not in _SCALARS:
                        break
                else:
                    return self._encode_native(obj)
            return self._encode_native(self._lower(obj, 1))
        except OverflowError:  # an int past 64 bits somewhere: walk again, looking at ints
            return self._encode_native(self._lower_big(obj, 1))

    def encode_many(self, objs: Iterable[Any]) -> list[bytes]:
        """``encode`` of each of ``objs``, in one pass (a flush of a store's values); one that
        ``encode`` refuses makes it raise as ``encode`` does. A join's entry, ``(arrival,
        KV(key, value))`` with scalars and a flat dict or scalar value, is written here with
        no walk (the walk's bytes: a test holds them to it): msgspec writes ``[key, value]``,
        and what goes before it (the tuple's extension header, its array header, the arrival,
        the ``KV``'s extension header) is the same for the entries of one arrival whose
        ``[key, value]`` has the same length, so it is made once for them (``_EntryHeads``)."""
        lower, encode = self._lower, self._encode_native
        scalars = _SCALARS
        if self._ext_heads is None:
            self._ext_heads = (_ext_heads(encode, _TUPLE), _ext_heads(encode, _KV))
        heads = _EntryHeads(encode, self._ext_heads)
        head, same = heads.get, heads.heads
        out: list[bytes] = []
        add = out.append
        objs = list(objs)
        try:
            for o in objs:
                if type(o) is tuple and len(o) == 2 and type(o[1]) is KV:
                    a, b = o
                    k, v = b.key, b.value
                    flat = type(a) in scalars and type(k) in scalars
                    if flat and type(v) is dict:
                        for k2, v2 in v.items():
                            if type(v2) not in scalars or type(k2) not in scalars:
                                flat = False
                                break
                    elif flat:
                        flat = type(v) in scalars
                    if flat:
                        pair = encode((k, v))
                        h = same.get(len(pair)) if a is heads.last else None
                        if h is None:  # another arrival, or another length
                            h = head(a, len(pair))
                            same = heads.heads
                        add(h + pair)
                        continue
                add(encode(lower(o, 1)))
        except OverflowError:  # an int past 64 bits somewhere: each as encode writes it
            return [self.encode(o) for o in objs]
        return out

    def _ext_hook(self, code: int, data: memoryview) -> Any:
        decode = self._decoder.decode
        if code == _TUPLE:
            return tuple(decode(data))
        if code == _KV:
            k, v = decode(data)
            return KV(k, v)
        if code == _DECLARED:
            raw = bytes(data)
            cut = raw.find(b"\x00")
            name = raw[:cut]
            de = self._decoders.get(name) if cut > 0 else None
            if de is None:
                raise SerdeError(f"type {name.decode(errors='replace')!r} is not declared "
                                 f"(declared: {', '.join(self.types) or 'none'}); declare it "
                                 f"with app.declare_types(...) or SafeSerde(types=[...])")
            return de(raw[cut + 1:])
        text = bytes(data).decode() if code in (_DATETIME, _DATE, _TIME, _DECIMAL, _BIGINT) \
            else None
        if code == _DATETIME:
            return dt.datetime.fromisoformat(text)  # type: ignore[arg-type]
        if code == _DICT:
            return dict(decode(data))
        if code == _LATE:
            return LateMessage(*decode(data))
        if code == _PANE:
            key, pane_id, message, firing, mode = decode(data)
            return WindowPane(WindowKey(key, pane_id), message, FiringType(firing),
                              AccumulationMode(mode))
        if code == _SET:
            return set(decode(data))
        if code == _FROZENSET:
            return frozenset(decode(data))
        if code == _DATE:
            return dt.date.fromisoformat(text)  # type: ignore[arg-type]
        if code == _TIME:
            return dt.time.fromisoformat(text)  # type: ignore[arg-type]
        if code == _TIMEDELTA:
            d, s, us = decode(data)
            return dt.timedelta(days=d, seconds=s, microseconds=us)
        if code == _DECIMAL:
            return decimal.Decimal(text)  # type: ignore[arg-type]
        if code == _UUID:
            return uuid.UUID(bytes=bytes(data))
        if code == _BIGINT:
            return int(text)  # type: ignore[arg-type]
        raise SerdeError(f"unknown MessagePack extension type {code}")

    def unsupported(self, obj: Any) -> Any:
        """The first object inside ``obj`` the codec cannot write (None if there is none)."""
        try:
            self._lower_big(obj, 1)
        except _Unsupported as exc:
            return exc.obj
        except Exception:
            return obj
        return None

    def encode_error(self, serde: str, obj: Any) -> SerdeError:
        try:
            depth = nesting_depth(obj)
        except Exception:
            depth = 0
        if depth > MAX_DEPTH:
            return SerdeError(f"{serde} cannot write a value nested {depth} levels deep (lists, "
                              f"tuples, dicts, sets and KVs within each other, in a "
                              f"{type(obj).__name__}): it writes at most {MAX_DEPTH} levels "
                              f"(samza_dsl.safe_serde.MAX_DEPTH); flatten the value, or "
                              f"declare a serde for the stream that fits it")
        bad = self.unsupported(obj)
        if bad is None:
            bad = obj
        t = type(bad)
        inside = "" if bad is obj else f" inside a {type(obj).__name__}"
        other = ("or declare a serde for the stream that fits it (partition_by(..., "
                 "serde=KVSerde(...)), a descriptor's serde=...)")
        hint = (f"declare the type (app.declare_types({t.__name__}) or "
                f"SafeSerde(types=[{t.__name__}])) {other}" if _declarable(t) else
                f"convert it to a supported type first (None, bool, int, float, str, bytes, "
                f"list, tuple, dict, set, KV, datetime, a declared msgspec.Struct) {other}")
        return SerdeError(f"{serde} cannot write a value of type {t.__name__} ({type_name(t)})"
                          f"{inside}: "
                          f"{hint}")


def _ext_heads(encode: Callable[[Any], bytes], code: int) -> list[bytes]:
    """What msgspec writes before an extension's data of each length under 256, by code."""
    return [encode(Ext(code, bytes(n)))[:-n or None] for n in range(256)]


class _EntryHeads:
    """The bytes before a join entry's ``[key, value]`` (``encode_many``): ``get(arrival,
    length)`` is msgspec's encoding of ``Ext(1, [arrival, Ext(2, data)])`` less ``data``, for
    ``data`` of that length. Kept for the latest arrival (entries come in arrival order): an
    arrival of the same object is not encoded again, one of another object is compared by its
    bytes (``1`` and ``True`` are equal, not the same bytes)."""

    __slots__ = ("encode", "last", "last_bytes", "heads", "tuple_heads", "kv_heads")

    def __init__(self, encode: Callable[[Any], bytes],
                 ext_heads: tuple[list[bytes], list[bytes]]) -> None:
        self.encode = encode
        self.last: Any = _NONE
        self.last_bytes = b""
        self.heads: dict[int, bytes] = {}
        self.tuple_heads, self.kv_heads = ext_heads

    def get(self, arrival: Any, length: int) -> bytes:
        if arrival is not self.last:
            ab = self.encode(arrival)
            self.last = arrival
            if ab != self.last_bytes:
                self.last_bytes = ab
                self.heads = {}
        head = self.heads.get(length)
        if head is None:
            kv = (self.kv_heads[length] if length < 256 else
                  self.encode(Ext(_KV, bytes(length)))[:-length])
            inner = 1 + len(self.last_bytes) + len(kv) + length  # the array header: 1 byte
            head = self.heads[length] = (
                (self.tuple_heads[inner] if inner < 256 else
                 self.encode(Ext(_TUPLE, bytes(inner)))[:-inner])
                + b"\x92" + self.last_bytes + kv)
        return head


def _lowering(encode: Callable[[Any], bytes], headers: Mapping[type, bytes],
              big_ints: bool) -> Callable[[Any, int], Any]:
    """The walk that wraps what msgspec would not give back as it was in extensions (see the
    module docstring); ``lower(value, depth)``, the value's depth 1 at the top. With
    ``big_ints``, ints are checked against MessagePack's range too. A container deeper than
    ``MAX_DEPTH`` raises ``_TooDeep``."""
    kinds = {str, float, bool, type(None), bytes}
    if not big_ints:
        kinds.add(int)
    scalars = frozenset(kinds)
    lo, hi = _INT64
    utc = _UTC
    limit = MAX_DEPTH
    containers = frozenset({dict, list, tuple, KV, LateMessage, WindowPane, set, frozenset})

    def lower(o: Any, d: int) -> Any:
        t = type(o)
        if t in scalars:
            return o
        if d > limit and t in containers:
            raise _TooDeep(d)
        e = d + 1
        if t is dict:
            for k, v in o.items():
                if type(v) not in scalars or type(k) not in scalars:
                    for k in o:
                        # keys as extensions: pairs (unhashable); an int key in MessagePack's
                        # range is a plain key in either walk, so a dict's bytes do not depend
                        # on a big int elsewhere in the value
                        if type(k) not in scalars and not (type(k) is int and lo <= k <= hi):
                            return Ext(_DICT, encode([(lower(k, e), lower(v, e))
                                                      for k, v in o.items()]))
                    return {k: lower(v, e) for k, v in o.items()}
            return o
        if t is list:
            for v in o:
                tv = type(v)
                if tv in scalars:
                    continue
                if tv is dict and d < limit:  # a list of flat dicts (a pane of messages)
                    for k2, v2 in v.items():
                        if type(v2) not in scalars or type(k2) not in scalars:
                            break
                    else:
                        continue
                return [lower(v, e) for v in o]
            return o
        if t is tuple:  # scalars as they are, with no call (a join's ``(ms, message)``)
            if len(o) == 2:  # a pair, with no list made (an array either way)
                a, b = o
                return Ext(_TUPLE, encode((a if type(a) in scalars else lower(a, e),
                                           b if type(b) in scalars else lower(b, e))))
            return Ext(_TUPLE, encode([v if type(v) in scalars else lower(v, e) for v in o]))
        if t is KV:
            k, v = o.key, o.value
            if type(v) is dict and d < limit:  # a flat dict value as it is (a message)
                for k2, v2 in v.items():
                    if type(v2) not in scalars or type(k2) not in scalars:
                        v = lower(v, e)
                        break
            elif type(v) not in scalars:
                v = lower(v, e)
            return Ext(_KV, encode((k if type(k) in scalars else lower(k, e), v)))
        if t is int:  # only with big_ints
            return o if lo <= o <= hi else Ext(_BIGINT, str(o).encode())
        if t is LateMessage:  # its message keeps its types (a KV, a tuple), unlike a declared Any
            return Ext(_LATE, encode([lower(getattr(o, f), e) for f in o.__struct_fields__]))
        if t is WindowPane:  # so does a pane's value and key
            return Ext(_PANE, encode([lower(o.key.key, e), o.key.pane_id, lower(o.message, e),
                                      o.firing.value, o.mode.value]))
        header = headers.get(t)
        if header is not None:
            return Ext(_DECLARED, header + encode(o))
        if t is dt.datetime:
            return o if o.tzinfo is utc else Ext(_DATETIME, o.isoformat().encode())
        if t is set or t is frozenset:
            return Ext(_SET if t is set else _FROZENSET, encode([lower(v, e) for v in o]))
        if t is dt.date:
            return Ext(_DATE, o.isoformat().encode())
        if t is dt.time:
            return Ext(_TIME, o.isoformat().encode())
        if t is dt.timedelta:
            return Ext(_TIMEDELTA, encode((o.days, o.seconds, o.microseconds)))
        if t is decimal.Decimal:
            return Ext(_DECIMAL, str(o).encode())
        if t is uuid.UUID:
            return Ext(_UUID, o.bytes)
        raise _Unsupported(o)

    return lower
