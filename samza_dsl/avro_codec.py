"""The codec behind ``AvroSerde``: Avro binary through fastavro, with the schema given in code.

The schema is parsed once. A message is checked against it before it is written (fastavro's
validation, then its writer in strict mode, which refuses fields the schema does not have), and
a message that does not fit is explained by a walk of the schema that names the first field at
fault and what is wrong with it, on one line. Bytes are read with fastavro's schemaless reader,
after ``samza_dsl.avro_scan`` has checked what the record may cost (its length, its counts, its
nesting); bytes it cannot read, and bytes left over after the record, are an error naming the
field at fault and what went wrong, which the runtime handles under the stream's
``samza.serde.error`` policy.

fastavro is an optional dependency (``pip install 'samza-dsl[avro]'``): this module is imported
only when an ``AvroSerde`` is made.
"""

from __future__ import annotations

import io
import json
import numbers
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .avro_scan import AvroLimits, AvroScanner, AvroUnread, type_text
from .confluent_wire import HEADER_SIZE, check_schema_id, header, read_header, unknown_id
from .errors import SerdeError

try:
    import fastavro
    from fastavro.validation import validate as _fastavro_validate
except ModuleNotFoundError as exc:  # pragma: no cover - the extra is installed in development
    raise ModuleNotFoundError("AvroSerde needs fastavro: pip install 'samza-dsl[avro]'") from exc

__all__ = ["AvroCodec", "parse_schema", "mismatch"]

#: how fastavro names the buffer it read in its errors
_BUFFER = re.compile(r"\s*(?:from|in)?\s*<_io\.BytesIO object at 0x[0-9a-fA-F]+>")

#: Avro's int and long ranges
_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}


def parse_schema(schema: Any, what: str = "schema") -> tuple[Any, dict[str, Any]]:
    """A schema (a dict, a list for a union, or JSON text, or a primitive type's name) parsed by
    fastavro, and the named types it defines.

    Raises:
        ValueError: It is not valid JSON or not a valid Avro schema.
    """
    if isinstance(schema, str):
        text = schema.strip()
        if text[:1] in ("{", "[", '"'):
            try:
                schema = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"the Avro {what} is not valid JSON: {exc}") from exc
    elif not isinstance(schema, dict | list):
        raise TypeError(f"the Avro {what} must be a dict, a list (a union) or JSON text, got "
                        f"{type(schema).__name__}")
    named: dict[str, Any] = {}
    try:
        parsed = fastavro.parse_schema(schema, named_schemas=named)
    except Exception as exc:
        raise ValueError(f"the Avro {what} is invalid: {_one_line(exc)}") from exc
    return parsed, named


def schema_name(parsed: Any) -> str:
    """The full name of a named schema, or the type of any other."""
    if isinstance(parsed, dict):
        return str(parsed.get("name") or parsed.get("type"))
    if isinstance(parsed, list):
        return "union"
    return str(parsed)


def canonical_text(schema: Any) -> str:
    """The schema as it was given, as sorted JSON text: what tells two serdes apart."""
    if isinstance(schema, str):
        text: str = schema.strip()
        try:
            schema = json.loads(text)
        except json.JSONDecodeError:
            return text
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


def _one_line(exc: BaseException) -> str:
    text = _BUFFER.sub("", str(exc))  # fastavro names the buffer it read: no use to a reader
    return " ".join(text.split()).rstrip(".") or type(exc).__name__


def _show(datum: Any) -> str:
    text = repr(datum)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(datum).__name__})"


def _at(path: str) -> str:
    return f"field {path!r} is" if path else "the message is"


_PRIMITIVE_FITS: dict[str, Any] = {
    "null": lambda d: d is None,
    "boolean": lambda d: isinstance(d, bool),
    "int": lambda d: _is_int(d) and -(2**31) <= d < 2**31,
    "long": lambda d: _is_int(d) and -(2**63) <= d < 2**63,
    "float": lambda d: isinstance(d, numbers.Real) and not isinstance(d, bool),
    "double": lambda d: isinstance(d, numbers.Real) and not isinstance(d, bool),
    "bytes": lambda d: isinstance(d, bytes | bytearray),
    "string": lambda d: isinstance(d, str),
}


def _is_int(datum: Any) -> bool:
    return isinstance(datum, numbers.Integral) and not isinstance(datum, bool)


def _fits(datum: Any, schema: Any, named: dict[str, Any]) -> bool:
    return mismatch(datum, schema, named) is None


def _fits_whole(datum: Any, schema: Any) -> bool:
    """fastavro's own check of a message against a parsed (or self-contained) schema."""
    try:
        return bool(_fastavro_validate(datum, schema, raise_errors=False))
    except Exception:
        return False


def mismatch(datum: Any, schema: Any, named: dict[str, Any], path: str = "") -> str | None:
    """Why ``datum`` does not fit ``schema``, naming the first field at fault (a dotted path,
    with ``[i]`` for an array's items and ``[key]`` for a map's values); None if it fits.

    >>> parsed, named = parse_schema({"type": "record", "name": "User", "fields": [
    ...     {"name": "name", "type": "string"},
    ...     {"name": "tags", "type": {"type": "array", "items": "string"}}]})
    >>> mismatch({"name": "ann", "tags": ["a", 3]}, parsed, named)
    "field 'tags[1]' is 3 (int), expected string"
    >>> mismatch({"tags": []}, parsed, named)
    "field 'name' is missing and the schema gives it no default"
    >>> mismatch({"name": "ann", "tags": [], "age": 3}, parsed, named)
    "field 'age' is not in the schema of User"
    """
    if isinstance(schema, list):
        if any(_fits(datum, s, named) for s in schema):
            return None
        branches = [s for s in schema if s != "null"]
        if datum is not None and len(branches) == 1:
            return mismatch(datum, branches[0], named, path)
        return f"{_at(path)} {_show(datum)}, which fits no branch of the {type_text(schema)}"
    if isinstance(schema, str) and schema in named:
        return mismatch(datum, named[schema], named, path)
    t = schema.get("type") if isinstance(schema, dict) else schema
    if t in ("record", "error"):
        return _record_mismatch(datum, schema, named, path)
    if isinstance(schema, dict) and schema.get("logicalType"):
        if _fits_whole(datum, schema):  # fastavro knows what each logical type takes
            return None
        return f"{_at(path)} {_show(datum)}, expected {type_text(schema)}"
    if t == "array":
        if not isinstance(datum, Sequence) or isinstance(datum, str | bytes | bytearray):
            return f"{_at(path)} {_show(datum)}, expected {type_text(schema)} (a list)"
        for i, item in enumerate(datum):
            why = mismatch(item, schema["items"], named, f"{path}[{i}]")
            if why:
                return why
        return None
    if t == "map":
        if not isinstance(datum, Mapping):
            return f"{_at(path)} {_show(datum)}, expected {type_text(schema)} (a dict)"
        for key, value in datum.items():
            if not isinstance(key, str):
                return f"{_at(path)} a map whose key {_show(key)} is not a string"
            why = mismatch(value, schema["values"], named, f"{path}[{key!r}]")
            if why:
                return why
        return None
    if t == "enum":
        if isinstance(datum, str) and datum in schema.get("symbols", ()):
            return None
        return (f"{_at(path)} {_show(datum)}, not one of the symbols of enum "
                f"{schema.get('name')}: {', '.join(schema.get('symbols', []))}")
    if t == "fixed":
        if isinstance(datum, bytes) and len(datum) == schema.get("size"):
            return None
        got = f"{len(datum)} bytes" if isinstance(datum, bytes) else _show(datum)
        return f"{_at(path)} {got}, expected fixed {schema.get('name')} of " \
               f"{schema.get('size')} bytes"
    check = _PRIMITIVE_FITS.get(str(t))
    if check is not None and check(datum):
        return None
    if t in _INT_RANGE and _is_int(datum):
        low, high = _INT_RANGE[t]
        return f"{_at(path)} {datum}, out of the range of an Avro {t} ({low} to {high})"
    return f"{_at(path)} {_show(datum)}, expected {type_text(schema)}"


def _record_mismatch(datum: Any, schema: dict[str, Any], named: dict[str, Any],
                     path: str) -> str | None:
    name = schema.get("name")
    if not isinstance(datum, Mapping):
        return f"{_at(path)} {_show(datum)}, expected record {name} (a dict)"
    fields = schema.get("fields", [])
    for f in fields:
        fpath = f"{path}.{f['name']}" if path else f["name"]
        if f["name"] not in datum:
            if "default" in f:
                continue
            return f"field {fpath!r} is missing and the schema gives it no default"
        why = mismatch(datum[f["name"]], f["type"], named, fpath)
        if why:
            return why
    known = {f["name"] for f in fields}
    for key in datum:
        if key not in known:
            fpath = f"{path}.{key}" if path else str(key)
            return f"field {fpath!r} is not in the schema of {name}"
    return None


class AvroCodec:
    """Avro binary of one schema, plain or in the Confluent wire format.

    Args:
        schema: The schema messages are written with and read into.
        wire_format: ``"plain"`` or ``"confluent"``.
        schema_id: The registry's id of ``schema`` (``"confluent"`` only).
        known_schemas: Other ids whose bytes are read: each id's schema is the writer's, and
            is resolved into ``schema`` as Avro's schema resolution says.
        label: The serde as error messages name it.
        limits: What one record may cost to read.
    """

    def __init__(self, schema: Any, *, wire_format: str, schema_id: int | None,
                 known_schemas: Mapping[int, Any], label: str,
                 limits: AvroLimits = AvroLimits()) -> None:
        self.schema, self.named = parse_schema(schema)
        self.label = label
        self.limits = limits
        self.confluent = wire_format == "confluent"
        self._header = header(schema_id) if schema_id is not None else b""
        self.schema_id = schema_id
        self._scanner = AvroScanner(self.schema, self.named, limits)
        #: per schema id read: its writer's schema, the reader's (None: the same), and the
        #: check of the writer's bytes
        self._readers: dict[int, tuple[Any, Any, AvroScanner]] = {}
        for sid, writer in known_schemas.items():
            check_schema_id(sid, "a key of known_schemas")
            parsed, named = parse_schema(writer, f"schema of id {sid}")
            self._readers[sid] = (parsed, self.schema, AvroScanner(parsed, named, limits))
        if schema_id is not None:
            self._readers[schema_id] = (self.schema, None, self._scanner)

    def encode(self, obj: Any) -> bytes:
        """The bytes of a message that fits the schema.

        Raises:
            SerdeError: It does not fit: names the field at fault and what is wrong.
        """
        if not _fits_whole(obj, self.schema):
            raise self._encode_error(obj, None)
        buf = io.BytesIO()
        buf.write(self._header)
        try:
            fastavro.schemaless_writer(buf, self.schema, obj, strict_allow_default=True)
        except Exception as exc:
            raise self._encode_error(obj, exc) from exc
        return buf.getvalue()

    def _encode_error(self, obj: Any, exc: Exception | None) -> SerdeError:
        why = mismatch(obj, self.schema, self.named)
        if why is None:
            why = _one_line(exc) if exc is not None else "it does not fit the schema"
        return SerdeError(f"{self.label} cannot encode {type(obj).__name__}: {why}. Make the "
                          f"message fit the schema")

    def decode(self, data: bytes) -> Any:
        """The record of bytes written with the schema (or, in the Confluent format, with the
        schema of a known id).

        Raises:
            SerdeError: The bytes are not Avro of the schema, or have another schema id.
        """
        writer, reader, scanner, start = self.schema, None, self._scanner, 0
        if self.confluent:
            try:
                sid = read_header(data)
            except ValueError as exc:
                raise self._decode_error(data, str(exc)) from exc
            if sid not in self._readers:
                raise self._decode_error(data, self._unknown_id(sid))
            writer, reader, scanner = self._readers[sid]
            start = HEADER_SIZE
        if len(data) > scanner.scan_above:
            try:  # before fastavro, which trusts the counts
                scanner.check(data, start)
            except AvroUnread as exc:
                raise self._unread_error(data, exc) from None
        buf = io.BytesIO(data)
        buf.seek(start)
        try:
            record = fastavro.schemaless_reader(buf, writer, reader)
        except Exception as exc:
            try:  # the walk names the field at fault
                scanner.check(data, start, text=True)
            except AvroUnread as unread:
                raise self._unread_error(data, unread) from exc
            raise self._decode_error(data, self._why_unread(data, exc)) from exc
        left = len(data) - buf.tell()
        if left:
            raise self._decode_error(data, f"{left} bytes are left after the record: the bytes "
                                     f"are not Avro of this schema{self._hint(data)}")
        return record

    def _unknown_id(self, sid: int) -> str:
        return unknown_id(sid, self.schema_id, self._readers,
                          f"known_schemas={{{sid}: <its schema>}} to read them")

    def _unread_error(self, data: bytes, exc: AvroUnread) -> SerdeError:
        if exc.limit is None:
            return self._decode_error(data, f"not Avro of this schema: {exc.explain()}"
                                            f"{self._hint(data)}")
        return SerdeError(f"{self.label} cannot decode message: {exc.explain()}. Check the "
                          f"producer, or give the serde a larger {exc.limit}= if such records "
                          f"are expected", data=data)

    def _why_unread(self, data: bytes, exc: Exception) -> str:
        if isinstance(exc, EOFError):
            what = f"the bytes end inside the record ({_one_line(exc)})"
        elif isinstance(exc, UnicodeDecodeError):
            what = f"a string is not UTF-8 ({_one_line(exc)})"
        else:
            what = f"{type(exc).__name__}: {_one_line(exc)}"
        return f"not Avro of this schema: {what}{self._hint(data)}"

    def _hint(self, data: bytes) -> str:
        if not self.confluent and len(data) >= HEADER_SIZE and data[0] == 0:
            sid = int.from_bytes(data[1:HEADER_SIZE], "big")
            return (f" (they start as the Confluent wire format does, with schema id {sid}: "
                    f"is it wire_format='confluent'?)")
        return ""

    def _decode_error(self, data: bytes, why: str) -> SerdeError:
        return SerdeError(f"{self.label} cannot decode message: {why}. Check the producer's "
                          f"schema and wire format", data=data)
