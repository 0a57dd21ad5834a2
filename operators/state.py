"""Operator state: an in-memory sorted key-value store and the order-preserving key encoding.

``encode_key`` turns a key into bytes whose byte order is the key's natural order, so a store
keyed by bytes (LMDB) iterates keys as Python would sort them. Supported keys: ``None``, bools,
ints (any size), floats (incl. infinities and NaN), ``str``, ``bytes`` and tuples of these.

- Numbers share one order: ``1 < 1.5 < 2`` whatever their type, and a key encodes like any key it
  is equal to in Python (``1``, ``1.0`` and ``True`` give the same bytes), so a dict and a
  byte-keyed store agree on which keys are the same. Decoding gives an ``int`` for integral
  numbers and a ``float`` otherwise.
- Types order as: ``None`` < numbers (``-inf`` < ... < ``inf`` < ``nan``) < ``str`` < ``bytes``
  < tuples. Strings order by code point, tuples element by element (a prefix first).

>>> encode_key(2) < encode_key(10) < encode_key(10.5) < encode_key("a") < encode_key(("a", 1))
True
>>> decode_key(encode_key((1700000000000, "user-7", None)))
(1700000000000, 'user-7', None)
>>> s = InMemoryState()
>>> for k in [("b", 2), ("a", 10), ("a", 9)]:
...     s.put(k, 0)
>>> [k for k, _ in s.all()]
[('a', 9), ('a', 10), ('b', 2)]
>>> [k for k, _ in s.range(("a", 10), ("b",))]
[('a', 10)]
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter
from typing import Any, cast

__all__ = ["InMemoryState", "ListKey", "encode_key", "encode_keys", "decode_key", "hashable_key",
           "order_key", "in_key_order", "table_key_order", "table_state", "table_key_check", "serialize_error"]

_END = 0x00  # closes a tuple
_NONE = 0x01
_NEG_INF = 0x10
_NEG_INT = 0x11
_POS_INT = 0x12
_POS_INF = 0x13
_NAN = 0x14
_STR = 0x20
_BYTES = 0x21
_TUPLE = 0x30
_FOREIGN = 0xFE  # order_key only: keys encode_key does not support, after every supported key
# every integer part is followed by its fraction: negative (8 bytes), none, or positive (8 bytes)
_FRAC_NEG = 0x01
_FRAC_NONE = 0x02
_FRAC_POS = 0x03
_MASK64 = (1 << 64) - 1
_NO_FRACTION = bytes((_FRAC_NONE,))
_POS_HEADS = [bytes((_POS_INT, size)) for size in range(9)]  # of an int in [0, 2**63)
#: an int in [0, 2**63) of b bits is written in _SIZES[b] bytes; _POS_FRAMES[size] is what goes
#: around them (its head and tail), as an int: ``(_POS_FRAMES[size] | key << 8).to_bytes(size + 3)``
_SIZES = [(b + 7) >> 3 for b in range(64)]
_POS_FRAMES = [int.from_bytes(_POS_HEADS[size] + bytes(size) + _NO_FRACTION, "big")
               for size in range(9)]

_MISSING: Any = object()
_first = itemgetter(0)  # keys of different types never compare: sort by their bytes alone
_pack_double = struct.Struct(">d").pack
_unpack_double = struct.Struct(">d").unpack
_pack_u64 = struct.Struct(">Q").pack
_unpack_u64 = struct.Struct(">Q").unpack


def _encode_int(n: int, out: bytearray, frac: float = 0.0) -> None:
    """An integer part (any size) and then the fraction of a float: ``n + frac`` with ``frac``
    in (-1, 1) and of n's sign, so the integer parts order first and the fractions next."""
    if n >= 0:
        size = (n.bit_length() + 7) >> 3
        if size > 255:
            raise ValueError(f"int key too large to encode: {size} bytes")
        out.append(_POS_INT)
        out.append(size)
        out += n.to_bytes(size, "big")
    else:
        m = -n
        size = (m.bit_length() + 7) >> 3
        if size > 255:
            raise ValueError(f"int key too large to encode: {size} bytes")
        # more bytes = a larger magnitude = smaller; within a size, the complement orders them
        out.append(_NEG_INT)
        out.append(255 - size)
        out += ((1 << (8 * size)) - 1 - m).to_bytes(size, "big")
    if not frac:
        out.append(_FRAC_NONE)
    elif frac > 0:
        out.append(_FRAC_POS)
        out += _pack_double(frac)  # positive doubles order as their big-endian bits
    else:
        out.append(_FRAC_NEG)
        out += _pack_u64(_unpack_u64(_pack_double(frac))[0] ^ _MASK64)  # negative ones reversed


def _escape(data: bytes) -> bytes:
    # 0x00 terminates, so a literal 0x00 becomes 0x00 0xFF (the FoundationDB tuple-layer scheme)
    return data.replace(b"\x00", b"\x00\xff") if b"\x00" in data else data


def _encode(key: Any, out: bytearray) -> None:
    t = type(key)
    if t is str:
        out.append(_STR)
        out += _escape(key.encode("utf-8", "surrogatepass"))
        out.append(_END)
    elif t is int or t is bool:
        _encode_int(int(key), out)
    elif t is tuple:
        out.append(_TUPLE)
        for item in key:
            _encode(item, out)
        out.append(_END)
    elif key is None:
        out.append(_NONE)
    elif t is float:
        if key != key:
            out.append(_NAN)
        elif key == math.inf:
            out.append(_POS_INF)
        elif key == -math.inf:
            out.append(_NEG_INF)
        else:
            frac, whole = math.modf(key)  # exact: both parts of a double are doubles
            _encode_int(int(whole), out, frac)
    elif t is bytes or t is bytearray or t is memoryview:
        out.append(_BYTES)
        out += _escape(bytes(key))
        out.append(_END)
    elif isinstance(key, tuple):  # named tuples
        _encode(tuple(key), out)
    elif isinstance(key, str):
        _encode(str(key), out)
    elif isinstance(key, int):  # IntEnum and other int subclasses
        _encode_int(int(key), out)
    elif isinstance(key, float):
        _encode(float(key), out)
    else:
        raise TypeError(f"cannot encode a key of type {t.__name__} ({key!r}): keys must be None, "
                        f"bool, int, float, str, bytes or tuples of them")


def encode_key(key: Any) -> bytes:
    """Order-preserving bytes for ``key`` (see the module docstring)."""
    t = type(key)
    if t is int and 0 <= key < 1 << 63:  # the common case: an id or a timestamp
        size: int = (key.bit_length() + 7) >> 3
        return _POS_HEADS[size] + cast(bytes, key.to_bytes(size, "big")) + _NO_FRACTION
    out = bytearray()
    _encode(key, out)
    return bytes(out)


def encode_keys(keys: list[Any]) -> list[bytes]:
    """``encode_key`` of each of ``keys`` (a flush's): a batch of ints in [0, 2**63), a join's
    or a table's ids, with no call each (checked at once in C: their types, least and
    greatest)."""
    if keys and set(map(type, keys)) == {int} and min(keys) >= 0 and max(keys) < 1 << 63:
        frames, sizes = _POS_FRAMES, _SIZES  # one int and its to_bytes each
        return [(frames[size := sizes[k.bit_length()]] | k << 8).to_bytes(size + 3, "big")
                for k in keys]
    return list(map(encode_key, keys))


def _unescape_until_end(data: bytes, i: int) -> tuple[bytes, int]:
    parts = []
    while True:
        j = data.index(b"\x00", i)
        if j + 1 < len(data) and data[j + 1] == 0xFF:
            parts.append(data[i:j + 1])
            i = j + 2
        else:
            parts.append(data[i:j])
            return b"".join(parts), j + 1


def _decode(data: bytes, i: int) -> tuple[Any, int]:
    tag = data[i]
    i += 1
    if tag in (_POS_INT, _NEG_INT):
        size = data[i] if tag == _POS_INT else 255 - data[i]
        raw = int.from_bytes(data[i + 1:i + 1 + size], "big")
        i += 1 + size
        n = raw if tag == _POS_INT else -((1 << (8 * size)) - 1 - raw)
        marker = data[i]
        if marker == _FRAC_NONE:
            return n, i + 1
        bits = data[i + 1:i + 9]
        if marker == _FRAC_NEG:
            bits = _pack_u64(_unpack_u64(bits)[0] ^ _MASK64)
        elif marker != _FRAC_POS:
            raise ValueError(f"not an encoded key: bad number marker 0x{marker:02x} in {data!r}")
        return n + _unpack_double(bits)[0], i + 9
    if tag == _STR:
        text, i = _unescape_until_end(data, i)
        return text.decode("utf-8", "surrogatepass"), i
    if tag == _TUPLE:
        items = []
        while data[i] != _END:
            item, i = _decode(data, i)
            items.append(item)
        return tuple(items), i + 1
    if tag == _NONE:
        return None, i
    if tag == _BYTES:
        return _unescape_until_end(data, i)
    if tag == _NEG_INF:
        return -math.inf, i
    if tag == _POS_INF:
        return math.inf, i
    if tag == _NAN:
        return math.nan, i
    raise ValueError(f"not an encoded key: unknown tag 0x{tag:02x} at byte {i - 1} of {data!r}")


def decode_key(data: bytes) -> Any:
    """The key ``encode_key`` encoded (an integral float comes back as an int)."""
    key, i = _decode(bytes(data), 0)
    if i != len(data):
        raise ValueError(f"not an encoded key: {len(data) - i} trailing bytes in {data!r}")
    return key


def order_key(key: Any) -> bytes:
    """A sort key for any key: ``encode_key`` where it applies; other hashable keys (structs,
    dataclasses...) sort after all of those, by type name and repr, so orders stay deterministic."""
    try:
        return encode_key(key)
    except TypeError:
        t = type(key)
        return bytes((_FOREIGN,)) + f"{t.__module__}.{t.__qualname__}\x00{key!r}".encode()


def in_key_order(keys: Iterable[Any]) -> list[Any]:
    """``sorted(keys, key=order_key)`` for distinct keys, with no bytes made where they are all
    strings or all ints (not bools): strings by code point and ints by value are already that
    order (a window closing its panes sorts the same few keys pane after pane)."""
    out = list(keys)
    if out:
        kinds = set(map(type, out))
        if kinds == {str} or kinds == {int}:
            out.sort()
            return out
    out.sort(key=order_key)
    return out


def _frozen(x: Any) -> Any:
    return tuple(map(_frozen, x)) if isinstance(x, list | tuple) else x


class ListKey(list[Any]):
    """A key that a store gives back as a list (``JsonSerde`` and ``MsgpackSerde`` decode a tuple
    as one): a list that hashes and compares as the tuple of its items (nested lists too), so
    ``get``, ``put`` and ``delete`` of every store take it back as the tuple it was put as.
    ``range`` and ``all`` of a table give such keys; a list made elsewhere is still refused as
    a key (it is unhashable). Do not change one in place: it may be a key of the store's dict.

    >>> k = ListKey(["a", [1, 2]])
    >>> k == ["a", [1, 2]], k == ("a", (1, 2)), {("a", (1, 2)): "x"}[k], k
    (True, True, 'x', ['a', [1, 2]])
    """

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(_frozen(self))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list | tuple):
            return bool(_frozen(self) == _frozen(other))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        if isinstance(other, list | tuple):
            return bool(_frozen(self) != _frozen(other))
        return NotImplemented


def hashable_key(key: Any) -> Any:
    """``key`` as a store gives it back: a list becomes a ``ListKey``."""
    return ListKey(key) if type(key) is list else key


class InMemoryState:
    """A sorted key-value store in memory (the ``KeyValueState`` operators use).

    ``get`` and ``put`` are a dict's own methods: the window and join hot paths pay nothing
    more. Keys follow Python equality (as ``encode_key`` does); ``range`` and ``all`` iterate in
    the byte order of ``order(key)``, sorting lazily after keys were added or removed, as an
    LMDB store iterates in the byte order of its encoded keys. ``order`` is ``order_key`` by
    default (window and join state); a table passes its key serde's serializer, so that it
    orders its keys as its LMDB store does (``table_key_order``), and ``decode`` (its key serde's
    deserializer) so that ``range`` and ``all`` give keys back as the LMDB store does, decoded
    from their bytes (``table_state`` builds both; a key decoded as a list is a ``ListKey``, which
    ``get``, ``put`` and ``delete`` take back), and ``check_key``, which ``send_to`` and ``join_table`` call
to fail a key the serde cannot serialize as the LMDB store would. ``range(start, end)`` is half-open. Iterating while writing is safe: entries deleted meanwhile are skipped. ``get``
    of a missing key is None, so a value of None reads like a missing one; use ``delete``.
    """

    __slots__ = ("_data", "get", "peek", "put", "_order", "_sorted", "_shown", "_deleted",
                 "_order_of", "_decode", "cache_writes", "check_key")

    get: Callable[[Any], Any]
    peek: Callable[[Any], Any]
    put: Callable[[Any, Any], None]
    #: never a remote table's client
    remote = False
    #: every write is done at once
    batched_writes = False

    def __init__(self, order: Callable[[Any], bytes] | None = None,
                 decode: Callable[[bytes], Any] | None = None) -> None:
        self._order_of = order_key if order is None else order
        self._decode = decode
        self._data: dict[Any, Any] = {}
        self.get = self.peek = self._data.get
        self.put = self._data.__setitem__
        self.cache_writes = True  # nothing to cache: every value is in memory
        #: a table's check of a key (``table_key_check``), None for window and join state
        self.check_key: Callable[[Any], None] | None = None
        self._order: list[bytes] = []
        self._sorted: list[Any] = []
        self._shown: list[Any] = []  # the keys as range and all give them
        self._deleted = False

    def maybe_flush(self) -> None:
        """Nothing to write out: every write is done at once."""

    def delete(self, key: Any) -> None:
        if self._data.pop(key, _MISSING) is not _MISSING:
            self._deleted = True

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Any) -> bool:
        return key in self._data

    def _keys_in_order(self) -> tuple[list[bytes], list[Any], list[Any]]:
        data = self._data
        # put is the dict's own __setitem__, so nothing is told of new keys: the cache is
        # stale when the size changed or a key was deleted (a delete then an insert keeps the size)
        if self._deleted or len(self._sorted) != len(data):
            self._deleted = False
            order_of = self._order_of
            pairs = sorted(((order_of(k), k) for k in data), key=_first)
            self._order = [p[0] for p in pairs]
            self._sorted = [p[1] for p in pairs]
            decode = self._decode
            self._shown = (self._sorted if decode is None
                           else [hashable_key(decode(b)) for b in self._order])
        return self._order, self._sorted, self._shown

    def _iter(self, keys: list[Any], shown: list[Any]) -> Iterator[tuple[Any, Any]]:
        data = self._data
        for k, out in zip(keys, shown, strict=True):
            v = data.get(k, _MISSING)
            if v is not _MISSING:
                yield out, v

    def range(self, start: Any, end: Any) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` pairs with ``start <= key < end`` in ``order`` order."""
        order, keys, shown = self._keys_in_order()
        lo = bisect_left(order, self._order_of(start))
        hi = bisect_left(order, self._order_of(end))
        return self._iter(keys[lo:hi], shown[lo:hi])

    def all(self) -> Iterator[tuple[Any, Any]]:
        """Every ``(key, value)`` pair in ``order`` order."""
        _, keys, shown = self._keys_in_order()
        return self._iter(list(keys), list(shown))

    def __repr__(self) -> str:
        return f"InMemoryState({len(self._data)} keys)"


def table_key_order(key_serde: Any) -> Callable[[Any], bytes]:
    """The order of a table's keys: the bytes its key serde writes, as in its LMDB store
    (``NoOpSerde``, which writes no bytes, orders by ``order_key``).

    >>> from samza_dsl.serdes import JsonSerde
    >>> s = InMemoryState(table_key_order(JsonSerde()))
    >>> for k in [9, 10, 2, 100]:
    ...     s.put(k, 0)
    >>> [k for k, _ in s.all()]
    [10, 100, 2, 9]
    """
    from samza_dsl.serdes import NoOpSerde

    if key_serde is None or isinstance(key_serde, NoOpSerde):
        return order_key
    return cast(Callable[[Any], bytes], key_serde.serialize)


def serialize_error(table: str, what: str, reason: str) -> Any:
    """The ``SerdeError`` of a table's key or value its serde cannot serialize, as every store
    words it (the LMDB store's codec, ``runtime.state.codec.table_codec``, and ``table_key_check``)."""
    from samza_dsl.errors import SerdeError

    return SerdeError(f"table {table!r}: cannot serialize a {what} ({reason}); give the table a "
                      f"serde that fits, or map the {what} to one it takes first")


def table_key_check(key_serde: Any, table: str) -> Callable[[Any], None] | None:
    """``check(key)``: raises ``serialize_error`` where the table's key serde cannot serialize
    ``key``, as the table's LMDB store would when it writes or reads it; None for ``NoOpSerde``,
    which takes any key.

    >>> from samza_dsl.serdes import StringSerde
    >>> table_key_check(StringSerde(), "t")(5)
    Traceback (most recent call last):
    ...
    samza_dsl.errors.SerdeError: table 't': cannot serialize a key (StringSerde() cannot encode int 5: ...
    """
    from samza_dsl.errors import SerdeError
    from samza_dsl.serdes import NoOpSerde

    if key_serde is None or isinstance(key_serde, NoOpSerde):
        return None
    serialize = key_serde.serialize

    def check(key: Any) -> None:
        try:
            serialize(key)
        except Exception as exc:
            reason = exc.reason if isinstance(exc, SerdeError) else f"{type(exc).__name__}: {exc}"
            raise serialize_error(table, "key", reason) from exc
    return check


def table_state(key_serde: Any, table: str = "") -> InMemoryState:
    """An in-memory table that answers as its LMDB store would: keys ordered by the bytes of
    ``key_serde`` and given back by ``range``/``all`` as ``key_serde`` decodes them (a tuple key
    under ``JsonSerde`` comes back a list, as it does from LMDB: a ``ListKey``, which ``get``,
    ``put`` and ``delete`` take as the tuple).

    >>> from samza_dsl.serdes import JsonSerde
    >>> t = table_state(JsonSerde())
    >>> t.put(("a", 1), "x")
    >>> t.get(("a", 1)), list(t.all())
    ('x', [(['a', 1], 'x')])
    >>> for k, _ in t.all():
    ...     t.delete(k)
    >>> list(t.all())
    []
    """
    from samza_dsl.serdes import NoOpSerde

    if key_serde is None or isinstance(key_serde, NoOpSerde):
        return InMemoryState()
    state = InMemoryState(key_serde.serialize, key_serde.deserialize)
    state.check_key = table_key_check(key_serde, table)
    return state
