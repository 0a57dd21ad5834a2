"""What one Avro record may cost to read, checked on its bytes before fastavro reads them.

Avro's binary encoding carries counts: an array or a map is written in blocks, each led by its
number of items, and bytes and strings by their length. fastavro trusts them. An array of
``null`` (whose items take no bytes) led by a count of 2**62 made it build a list until the
machine's memory ran out, from a record of 12 bytes; a recursive record nested a hundred
thousand levels deep crashed the process in fastavro's C code. So the bytes of a record are
first walked against the writer's schema, with no value built, and refused when

- the record is longer than ``max_bytes``;
- a length, or a block's count times the fewest bytes one of its items takes, is more than the
  bytes left;
- the arrays and maps of the record hold more than ``max_items`` items together (this is what
  bounds items of no bytes, and what a record of many small items costs in memory);
- records, arrays and maps nest more than ``max_depth`` levels deep;
- an enum's index or a union's branch is not one of the schema's.

The walk names the field at fault (a dotted path, with ``[i]`` for an item of an array and
``[key]`` for a value of a map), which is also what explains bytes fastavro could not read. It
runs on every record of a schema with an array, a map or a recursive type; a schema with none
has a cost bounded by the schema itself, and is walked only to explain an error.

>>> from samza_dsl.avro_codec import parse_schema
>>> parsed, named = parse_schema({"type": "record", "name": "R", "fields": [
...     {"name": "xs", "type": {"type": "array", "items": "null"}}]})
>>> scanner = AvroScanner(parsed, named, AvroLimits())
>>> scanner.check(b"\\x04\\x00")  # two nulls: fine
>>> try:
...     scanner.check(b"\\x02" + b"\\x80" * 9 + b"\\x01\\x00")
... except AvroUnread as e:
...     print(e.explain())
field 'xs' (array of null): a block claims 4611686018427387904 items, more than the 1000000 items a record may hold
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["AvroLimits", "AvroScanner", "AvroUnread", "MAX_BYTES", "MAX_DEPTH", "MAX_ITEMS",
           "check_limit", "type_text"]

#: The longest record an ``AvroSerde`` (and a ``ProtobufSerde``) reads by default: 16 MiB, as
#: the longest JSON Lines line samza-dsl reads.
MAX_BYTES = 16 * 1024 * 1024
#: The most items the arrays and maps of one record hold together, by default.
MAX_ITEMS = 1_000_000
#: The deepest records, arrays and maps nest within each other, by default (as Protobuf's).
MAX_DEPTH = 100

#: data, position, depth, state ([items so far, check strings' UTF-8]) -> position after it
Skip = Callable[[bytes, int, int, list[Any]], int]


@dataclass(frozen=True)
class AvroLimits:
    """What one record may cost: its bytes, its arrays' and maps' items, its nesting."""

    max_bytes: int = MAX_BYTES
    max_items: int = MAX_ITEMS
    max_depth: int = MAX_DEPTH

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_items", "max_depth"):
            check_limit(getattr(self, name), f"AvroSerde {name}")


def check_limit(value: Any, what: str) -> int:
    """``value`` if it is a positive int.

    Raises:
        ValueError: It is not.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive int, got {value!r}")
    return value


class AvroUnread(Exception):
    """Bytes that are not a record of the schema, or one that costs more than the limits: why,
    and where in the schema (``path``)."""

    def __init__(self, why: str, limit: str | None = None) -> None:
        super().__init__(why)
        self.why = why
        #: the limit the record is over (``"max_items"``...), or None: the bytes are not Avro
        self.limit = limit
        self._parts: list[str] = []  # innermost first

    def at(self, part: str) -> None:
        self._parts.append(part)

    @property
    def path(self) -> str:
        out = ""
        for part in reversed(self._parts):
            out += part if part.startswith("[") or not out else "." + part
        return out

    def explain(self) -> str:
        """What is wrong, after where: ``field 'a.b[3]' (float) is cut short: ...``."""
        path = self.path
        if not path:
            return f"the message {self.why}"
        if len(path) > 100:  # a recursive type nested deep
            path = f"{path[:45]}...{path[-45:]}"
        return f"field {path!r} {self.why}"


def type_text(schema: Any) -> str:
    """A schema as error messages show it: ``array of string``, ``record shop.User``..."""
    if isinstance(schema, list):
        return "union [" + ", ".join(type_text(s) for s in schema) + "]"
    if isinstance(schema, dict):
        t = schema.get("type")
        if t in ("record", "error", "enum", "fixed"):
            return f"{t} {schema.get('name')}"
        if schema.get("logicalType"):
            return f"{t} ({schema['logicalType']})"
        if t == "array":
            return f"array of {type_text(schema.get('items'))}"
        if t == "map":
            return f"map of {type_text(schema.get('values'))}"
        return type_text(t)
    return str(schema)


def _long(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (Avro's int and long) at ``pos``, and the position after it."""
    try:
        b = data[pos]
        pos += 1
        n = b & 0x7F
        shift = 7
        while b & 0x80:
            if shift > 63:
                raise AvroUnread("holds a varint longer than a long's 10 bytes")
            b = data[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            shift += 7
    except IndexError:
        raise AvroUnread(f"is cut short: {_END}") from None
    return (n >> 1) ^ -(n & 1), pos


_END = "the bytes end inside the record"
_CONSTANT = {"null": 0, "boolean": 1, "float": 4, "double": 8}


class AvroScanner:
    """The check of a writer's schema: ``check(data, start)`` raises ``AvroUnread`` for bytes
    that are not a record of it or cost more than ``limits``. A record longer than
    ``scan_above`` bytes must be checked before fastavro reads it; a shorter one need not be:
    its items each take a byte at least, so there are fewer than ``max_items`` of them, and the
    schema nests no deeper than ``max_depth`` (-1: every record is checked, as the schema has
    an array or map of items that may take no bytes, or nests too deep, or without end)."""

    def __init__(self, schema: Any, named: dict[str, Any], limits: AvroLimits) -> None:
        self.limits = limits
        self._named = named
        self._cells: dict[str, list[Skip]] = {}
        self._busy: set[str] = set()
        self._always = False
        self._skip = self._compile(schema)
        if self._always or self._depth(schema, set()) > limits.max_depth:
            self.scan_above = -1
        else:
            self.scan_above = min(limits.max_items, limits.max_bytes)

    def check(self, data: bytes, start: int = 0, *, text: bool = False) -> None:
        """Walk the record at ``data[start:]``; ``text`` also checks that strings are UTF-8.

        Raises:
            AvroUnread: What is wrong, and where.
        """
        if len(data) > self.limits.max_bytes:
            raise AvroUnread(f"is {len(data)} bytes long, more than the {self.limits.max_bytes} "
                             f"bytes a record may take", "max_bytes")
        self._skip(data, start, 0, [0, text])

    # -- the compiled walk ------------------------------------------------------------------------

    def _compile(self, schema: Any) -> Skip:
        if isinstance(schema, list):
            return self._union(schema)
        if isinstance(schema, str):
            if schema in self._named:
                return self._named_ref(schema)
            return self._primitive(schema, {"type": schema})
        t = schema.get("type")
        if t in ("record", "error"):
            return self._record(schema)
        if t == "array":
            return self._blocks(schema, self._compile(schema["items"]), schema["items"], None)
        if t == "map":
            return self._blocks(schema, self._compile(schema["values"]), schema["values"],
                                self._compile("string"))
        if t == "enum":
            return self._index(len(schema.get("symbols", ())), f"enum {schema.get('name')}",
                               "symbol")
        if t == "fixed":
            return self._constant(int(schema["size"]), type_text(schema))
        if t in _CONSTANT or t in ("int", "long", "bytes", "string"):
            return self._primitive(str(t), schema)
        return self._compile(t)

    def _named_ref(self, name: str) -> Skip:
        if name in self._busy:  # a recursive type: its walk is called through its cell
            self._always = True
            cell = self._cells[name]
            return lambda d, p, depth, st: cell[0](d, p, depth, st)
        if name in self._cells:
            return self._cells[name][0]
        return self._compile(self._named[name])

    def _primitive(self, t: str, schema: Any) -> Skip:
        if t in _CONSTANT:
            return self._constant(_CONSTANT[t], type_text(schema))
        if t in ("int", "long"):
            def number(d: bytes, pos: int, depth: int, st: list[Any]) -> int:
                return _long(d, pos)[1]
            return number
        if t in ("bytes", "string"):
            return self._blob(t == "string", type_text(schema))
        raise ValueError(f"not an Avro type: {t!r}")

    def _constant(self, size: int, what: str) -> Skip:
        if size == 0:
            return lambda d, pos, depth, st: pos

        def constant(d: bytes, pos: int, depth: int, st: list[Any]) -> int:
            end = pos + size
            if end > len(d):
                raise AvroUnread(f"({what}) is cut short: it takes {_bytes(size)}, "
                                 f"{len(d) - pos} left; {_END}")
            return end
        return constant

    def _blob(self, string: bool, what: str) -> Skip:
        def blob(d: bytes, pos: int, depth: int, st: list[Any]) -> int:
            n, pos = _long(d, pos)
            if n < 0:
                raise AvroUnread(f"({what}) has a length of {n}")
            end = pos + n
            if end > len(d):
                raise AvroUnread(f"({what}) has a length of {_bytes(n)}, but "
                                 f"{len(d) - pos} left; {_END}")
            if string and st[1]:
                try:
                    d[pos:end].decode()
                except UnicodeDecodeError as exc:
                    raise AvroUnread(f"({what}): a string is not UTF-8 ({exc})") from None
            return end
        return blob

    def _index(self, count: int, what: str, of: str) -> Skip:
        def index(d: bytes, pos: int, depth: int, st: list[Any]) -> int:
            i, pos = _long(d, pos)
            if not 0 <= i < count:
                raise AvroUnread(f"({what}) has the {of} index {i}, but there are {count}")
            return pos
        return index

    def _union(self, schema: list[Any]) -> Skip:
        branches = [self._compile(s) for s in schema]
        count, what = len(branches), type_text(schema)

        def union(d: bytes, pos: int, depth: int, st: list[Any]) -> int:
            i, pos = _long(d, pos)
            if not 0 <= i < count:
                raise AvroUnread(f"({what}) has the branch index {i}, but there are {count}")
            return branches[i](d, pos, depth, st)
        return union

    def _record(self, schema: dict[str, Any]) -> Skip:
        name = str(schema.get("name"))
        cell: list[Skip] = []
        self._cells[name] = cell
        self._busy.add(name)
        names = [str(f["name"]) for f in schema.get("fields", ())]
        skips = [self._compile(f["type"]) for f in schema.get("fields", ())]
        self._busy.discard(name)
        max_depth = self.limits.max_depth

        def record(d: bytes, pos: int, depth: int, st: list[Any]) -> int:
            if depth >= max_depth:
                raise _too_deep(max_depth)
            depth += 1
            i = 0
            try:
                for i, skip in enumerate(skips):  # noqa: B007 - i names the field at fault
                    pos = skip(d, pos, depth, st)
            except AvroUnread as exc:
                exc.at(names[i])
                raise
            return pos
        cell.append(record)
        return record

    def _blocks(self, schema: dict[str, Any], item: Skip, item_schema: Any,
                key: Skip | None) -> Skip:
        """An array's items, or (``key`` given) a map's keys and values, block by block."""
        least = self._least(item_schema, set()) + (1 if key is not None else 0)
        self._always = self._always or least == 0
        size = self._size(item_schema, set()) if key is None else None
        what, items = type_text(schema), "entries" if key is not None else "items"
        max_items, max_depth = self.limits.max_items, self.limits.max_depth

        def blocks(d: bytes, pos: int, depth: int, st: list[Any]) -> int:
            if depth >= max_depth:
                raise _too_deep(max_depth)
            depth += 1
            i = 0
            while True:
                count, pos = _long(d, pos)
                if count == 0:
                    return pos
                if count < 0:
                    count = -count
                    block, pos = _long(d, pos)
                    if not 0 <= block <= len(d) - pos:
                        raise AvroUnread(f"({what}): a block claims {_bytes(block)}, "
                                         f"{len(d) - pos} left; {_END}")
                if count * least > len(d) - pos:
                    raise AvroUnread(f"({what}): a block claims {count} {items} of at least "
                                     f"{_bytes(least)} each, {len(d) - pos} left; {_END}")
                st[0] += count
                if st[0] > max_items:
                    raise AvroUnread(f"({what}): a block claims {count} {items}, more than the "
                                     f"{max_items} items a record may hold", "max_items")
                if size is not None:  # items of one size: no need to walk each
                    pos += count * size
                    i += count
                    continue
                for _ in range(count):
                    start = pos
                    try:
                        if key is not None:
                            pos = key(d, pos, depth, st)
                        pos = item(d, pos, depth, st)
                    except AvroUnread as exc:
                        exc.at(_item_at(d, start, i, key is not None))
                        raise
                    i += 1
        return blocks

    def _depth(self, schema: Any, seen: set[str]) -> int:
        """How deep records, arrays and maps of the schema nest (a recursive one: without
        end, shown as one more than ``max_depth``)."""
        if isinstance(schema, list):
            return max((self._depth(s, seen) for s in schema), default=0)
        if isinstance(schema, str):
            if schema not in self._named:
                return 0
            if schema in seen:
                return self.limits.max_depth + 1
            return self._depth(self._named[schema], seen | {schema})
        t = schema.get("type")
        if t in ("record", "error"):
            inner = seen | {str(schema.get("name"))}
            return 1 + max((self._depth(f["type"], inner) for f in schema.get("fields", ())),
                           default=0)
        if t in ("array", "map"):
            return 1 + self._depth(schema["items" if t == "array" else "values"], seen)
        if t in ("enum", "fixed"):
            return 0
        return self._depth(t, seen)

    def _least(self, schema: Any, seen: set[str]) -> int:
        """The fewest bytes a value of the schema takes."""
        if isinstance(schema, list):
            return 1
        if isinstance(schema, str):
            if schema in self._named:
                if schema in seen:
                    return 0
                return self._least(self._named[schema], seen | {schema})
            return _CONSTANT.get(schema, 1)
        t = schema.get("type")
        if t in ("record", "error"):
            inner = seen | {str(schema.get("name"))}
            return sum(self._least(f["type"], inner) for f in schema.get("fields", ()))
        if t == "fixed":
            return int(schema["size"])
        if t in ("array", "map", "enum"):
            return 1
        return self._least(t, seen)

    def _size(self, schema: Any, seen: set[str]) -> int | None:
        """The bytes every value of the schema takes, if they are always as many."""
        if isinstance(schema, str):
            if schema in self._named:
                return None if schema in seen else self._size(self._named[schema],
                                                              seen | {schema})
            return _CONSTANT.get(schema)
        if isinstance(schema, list):
            return None
        t = schema.get("type")
        if t in ("record", "error"):
            inner = seen | {str(schema.get("name"))}
            sizes = [self._size(f["type"], inner) for f in schema.get("fields", ())]
            return None if None in sizes else sum(s for s in sizes if s is not None)
        if t == "fixed":
            return int(schema["size"])
        if t in ("array", "map", "enum"):
            return None
        return self._size(t, seen)


def _bytes(n: int) -> str:
    return "1 byte" if n == 1 else f"{n} bytes"


def _too_deep(max_depth: int) -> AvroUnread:
    return AvroUnread(f"nests more than {max_depth} levels deep (records, arrays and maps "
                      f"within each other)", "max_depth")


def _item_at(d: bytes, start: int, i: int, keyed: bool) -> str:
    if keyed:
        try:
            n, pos = _long(d, start)
            if 0 <= n <= 40 and pos + n <= len(d):
                return f"[{d[pos:pos + n].decode()!r}]"
        except (AvroUnread, UnicodeDecodeError):
            pass
    return f"[{i}]"
