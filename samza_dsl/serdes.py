"""Serializers built on msgspec.

A serde turns a message into bytes and back. ``KVSerde`` pairs a key serde with a value serde; a
stream described with a ``KVSerde`` delivers ``KV(key, value)``.

>>> serde = KVSerde(StringSerde(), JsonSerde())
>>> k, v = serde.to_bytes(KV("u1", {"n": 1}))
>>> serde.from_bytes(k, v)
KV(key='u1', value={'n': 1})

``SafeSerde`` (MessagePack with extension types, ``samza_dsl.safe_serde``) is the default of
intermediate streams and of window and join state: it carries Python values faithfully (a tuple
stays a tuple, a ``KV`` a ``KV``) and decoding never runs code. ``PickleSerde`` runs code when it
decodes: it is used only where a user names it.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Mapping
from typing import Any, Generic, TypeVar

import msgspec

from .errors import SerdeError
from .kv import KV

T = TypeVar("T")

__all__ = ["Serde", "JsonSerde", "MsgpackSerde", "StringSerde", "BytesSerde", "KVSerde",
           "NoOpSerde", "PickleSerde", "SafeSerde"]


class Serde(Generic[T]):
    """Base of all serdes. Two serdes are equal when they have the same class and settings."""

    name = "serde"

    def serialize(self, obj: T) -> bytes:
        raise NotImplementedError(f"{type(self).__name__}.serialize must be overridden")

    def deserialize(self, data: bytes) -> T:
        raise NotImplementedError(f"{type(self).__name__}.deserialize must be overridden")

    def _settings(self) -> tuple[Any, ...]:
        return ()

    def describe(self) -> str:
        settings = ", ".join(_describe(s) for s in self._settings())
        return f"{type(self).__name__}({settings})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._settings() == self._settings()

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(map(_describe, self._settings()))))

    def __repr__(self) -> str:
        return self.describe()


def _describe(setting: Any) -> str:
    if isinstance(setting, type):
        return setting.__name__
    if isinstance(setting, Serde):
        return setting.describe()
    return repr(setting)


class _MsgspecSerde(Serde[T]):
    """Shared by JSON and MessagePack: an optional ``type`` (a Struct, dataclass, dict[str, int]...)
    makes decoding validate and build that type."""

    _format = ""

    def __init__(self, type: Any = Any) -> None:  # noqa: A002 - msgspec's own spelling
        self.type = type
        self._encoder, self._decoder = self._codec(type)

    def _codec(self, type: Any) -> tuple[Any, Any]:  # noqa: A002
        raise NotImplementedError(f"{self._format} codec")

    def _settings(self) -> tuple[Any, ...]:
        return () if self.type is Any else (self.type,)

    def serialize(self, obj: T) -> bytes:
        try:
            return self._encoder.encode(obj)
        except (TypeError, msgspec.EncodeError, OverflowError) as exc:
            raise SerdeError(f"{self.describe()} cannot encode {type(obj).__name__}: {exc}. "
                             f"Give the stream a serde that fits the message") from exc

    def deserialize(self, data: bytes) -> T:
        try:
            return self._decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError, TypeError) as exc:
            raise SerdeError(f"{self.describe()} cannot decode message: {exc}. "
                             f"Check the stream's serde or the producer's format",
                             data=data) from exc

    def __getstate__(self) -> dict[str, Any]:
        return {"type": self.type}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["type"])  # type: ignore[misc]


class JsonSerde(_MsgspecSerde[T]):
    """JSON through msgspec; ``type`` optionally validates into a Struct.

    >>> JsonSerde().deserialize(JsonSerde().serialize({"a": [1, 2]}))
    {'a': [1, 2]}
    """

    _format = "json"
    name = "json"

    def _codec(self, type: Any) -> tuple[Any, Any]:  # noqa: A002
        return msgspec.json.Encoder(), msgspec.json.Decoder(type)


class MsgpackSerde(_MsgspecSerde[T]):
    """MessagePack through msgspec."""

    _format = "msgpack"
    name = "msgpack"

    def _codec(self, type: Any) -> tuple[Any, Any]:  # noqa: A002
        return msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(type)


class StringSerde(Serde[str]):
    """Text in an encoding (UTF-8 by default)."""

    name = "string"

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def _settings(self) -> tuple[Any, ...]:
        return () if self.encoding == "utf-8" else (self.encoding,)

    def serialize(self, obj: str) -> bytes:
        if not isinstance(obj, str):
            raise SerdeError(f"{self.describe()} cannot encode {type(obj).__name__} {obj!r}: "
                             f"expected str. Map the message to a str first or use JsonSerde")
        return obj.encode(self.encoding)

    def deserialize(self, data: bytes) -> str:
        try:
            return bytes(data).decode(self.encoding)
        except UnicodeDecodeError as exc:
            raise SerdeError(f"{self.describe()} cannot decode message: {exc}", data=data) from exc


class BytesSerde(Serde[bytes]):
    """Raw bytes, unchanged."""

    name = "bytes"

    def serialize(self, obj: bytes) -> bytes:
        if not isinstance(obj, bytes | bytearray | memoryview):
            raise SerdeError(f"BytesSerde() cannot encode {type(obj).__name__}: expected bytes")
        return bytes(obj)

    def deserialize(self, data: bytes) -> bytes:
        return bytes(data)


class PickleSerde(Serde[Any]):
    """Any picklable Python object. Decoding runs code that the bytes name: whoever can write to
    a stream or store with this serde can run code in the job. It is never a default; name it
    only for streams no one else can write to, and prefer ``SafeSerde``.

    >>> PickleSerde().deserialize(PickleSerde().serialize(("a", 1)))
    ('a', 1)
    """

    name = "pickle"

    def serialize(self, obj: Any) -> bytes:
        try:
            return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise SerdeError(f"PickleSerde() cannot encode {type(obj).__name__}: {exc}. Give the "
                             f"stream a serde that fits the message") from exc

    def deserialize(self, data: bytes) -> Any:
        try:
            return pickle.loads(data)
        except Exception as exc:
            raise SerdeError(f"PickleSerde() cannot decode message: {exc}", data=data) from exc


class NoOpSerde(Serde[Any]):
    """Passes objects through unserialized: for in-memory streams only."""

    name = "noop"

    def serialize(self, obj: Any) -> Any:
        return obj

    def deserialize(self, data: Any) -> Any:
        return data


class KVSerde(Serde[KV[Any, Any]]):
    """A key serde and a value serde; a stream with a KVSerde delivers ``KV``."""

    name = "kv"

    def __init__(self, key_serde: Serde[Any], value_serde: Serde[Any]) -> None:
        if not isinstance(key_serde, Serde) or not isinstance(value_serde, Serde):
            raise TypeError("KVSerde(key_serde, value_serde) takes two Serde instances, e.g. "
                            "KVSerde(StringSerde(), JsonSerde())")
        self.key_serde = key_serde
        self.value_serde = value_serde

    def _settings(self) -> tuple[Any, ...]:
        return (self.key_serde, self.value_serde)

    def to_bytes(self, kv: KV[Any, Any]) -> tuple[bytes | None, bytes | None]:
        """Serialize a KV into (key bytes, value bytes); a None key or value stays None."""
        key = None if kv.key is None else self.key_serde.serialize(kv.key)
        value = None if kv.value is None else self.value_serde.serialize(kv.value)
        return key, value

    def from_bytes(self, key: bytes | None, value: bytes | None) -> KV[Any, Any]:
        k = None if key is None else self.key_serde.deserialize(key)
        v = None if value is None else self.value_serde.deserialize(value)
        return KV(k, v)

    def serialize(self, obj: KV[Any, Any]) -> bytes:
        raise SerdeError("KVSerde serializes a key and a value separately: use to_bytes(kv)")

    def deserialize(self, data: bytes) -> KV[Any, Any]:
        raise SerdeError("KVSerde deserializes a key and a value separately: use from_bytes()")


class SafeSerde(Serde[Any]):
    """Python values as MessagePack, faithfully and without running code on decode: ``None``,
    bool, int (any size), float, str, bytes, list, tuple, dict, set, frozenset, ``KV``,
    datetime, date, time, timedelta, Decimal, UUID, and the ``msgspec.Struct``, dataclass and
    NamedTuple types given in ``types`` (a sequence of classes, or a mapping name -> class).
    A declared type travels as its name and its fields, and decodes as its field annotations
    say; a name that is not declared is an error, never an import. The default of
    intermediate streams and of window and join state, with the types of
    ``app.declare_types(...)``.

    >>> import msgspec
    >>> class Point(msgspec.Struct, frozen=True):
    ...     x: int
    ...     y: int
    >>> serde = SafeSerde(types=[Point])
    >>> serde.deserialize(serde.serialize((KV("a", Point(1, 2)), [b"raw", None], {3: 4.5})))
    (KV(key='a', value=Point(x=1, y=2)), [b'raw', None], {3: 4.5})
    >>> SafeSerde().serialize(Point(1, 2))
    Traceback (most recent call last):
    ...
    samza_dsl.errors.SerdeError: SafeSerde() cannot write a value of type Point
    (samza_dsl.serdes.Point): declare the type (app.declare_types(Point) or
    SafeSerde(types=[Point])) or declare a serde ...
    """

    name = "safe"

    def __init__(self, types: Iterable[type] | Mapping[str, type] = ()) -> None:
        from .safe_serde import ObjectCodec, declared_names

        self.types = declared_names(types)
        self._codec = ObjectCodec(self.types)
        self._encode = self._codec.encode
        self._decode = self._codec.decode

    def _settings(self) -> tuple[Any, ...]:
        from .safe_serde import type_name

        if all(name == type_name(cls) for name, cls in self.types.items()):
            return tuple(self.types.values())
        return ({name: cls.__name__ for name, cls in self.types.items()},)

    def serialize(self, obj: Any) -> bytes:
        try:
            return self._encode(obj)
        except Exception as exc:
            raise self._codec.encode_error(self.describe(), obj) from exc

    def deserialize(self, data: bytes) -> Any:
        try:
            return self._decode(data)
        except Exception as exc:
            reason = exc.reason if isinstance(exc, SerdeError) else (
                f"{type(exc).__name__}: {exc}. The bytes were not written by this serde: check "
                f"the producer")
            raise SerdeError(f"{self.describe()} cannot decode message: {reason}",
                             data=data) from exc

    def __getstate__(self) -> dict[str, Any]:
        return {"types": self.types}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["types"])  # type: ignore[misc]
