"""Serializers built on msgspec.

A serde turns a message into bytes and back. ``KVSerde`` pairs a key serde with a value serde; a
stream described with a ``KVSerde`` delivers ``KV(key, value)``.

>>> serde = KVSerde(StringSerde(), JsonSerde())
>>> k, v = serde.to_bytes(KV("u1", {"n": 1}))
>>> serde.from_bytes(k, v)
KV(key='u1', value={'n': 1})
"""

from __future__ import annotations

import pickle
from typing import Any, Generic, TypeVar

import msgspec

from .errors import SerdeError
from .kv import KV

T = TypeVar("T")

__all__ = ["Serde", "JsonSerde", "MsgpackSerde", "StringSerde", "BytesSerde", "KVSerde",
           "NoOpSerde", "PickleSerde"]


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
    """Any picklable Python object, for streams and state the job alone writes and reads: the
    default of intermediate streams declared without a serde, and of window and join state.
    Never use it for data from outside the job (unpickling runs code).

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
