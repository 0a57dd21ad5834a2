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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast

import msgspec

from .errors import SerdeError
from .json_text import any_too_deep, check_json_depth, explain_json_error
from .kv import KV

T = TypeVar("T")

__all__ = ["Serde", "JsonSerde", "MsgpackSerde", "StringSerde", "BytesSerde", "KVSerde",
           "NoOpSerde", "PickleSerde", "SafeSerde"]


class Serde(Generic[T]):
    """Base of all serdes. Two serdes are equal when they have the same class and settings.

    A serde of one's own subclasses ``Serde`` and overrides ``serialize`` and ``deserialize``
    (and ``_settings``, if it has settings that make two instances differ).

    Example:
        >>> class UpperSerde(Serde[str]):
        ...     def serialize(self, obj: str) -> bytes:
        ...         return obj.upper().encode()
        ...     def deserialize(self, data: bytes) -> str:
        ...         return data.decode()
        >>> UpperSerde().deserialize(UpperSerde().serialize("hi")), UpperSerde() == UpperSerde()
        ('HI', True)
        >>> UpperSerde().describe(), StringSerde("latin-1").describe()  # as plans show them
        ('UpperSerde()', "StringSerde('latin-1')")
    """

    name = "serde"

    def serialize(self, obj: T) -> bytes:
        """Encode a message.

        Args:
            obj: The message.

        Returns:
            Its bytes.

        Raises:
            SerdeError: The message cannot be encoded by this serde.
            NotImplementedError: A subclass does not override it.
        """
        raise NotImplementedError(f"{type(self).__name__}.serialize must be overridden")

    def deserialize(self, data: bytes) -> T:
        """Decode a message.

        Args:
            data: The bytes, as ``serialize`` wrote them.

        Returns:
            The message.

        Raises:
            SerdeError: The bytes cannot be decoded by this serde (``SerdeError.data`` holds
                them).
            NotImplementedError: A subclass does not override it.
        """
        raise NotImplementedError(f"{type(self).__name__}.deserialize must be overridden")

    def serialize_batch(self, objs: Sequence[T]) -> list[bytes]:
        """Encode many messages at once: the bytes ``serialize`` gives each, in order.

        The msgspec serdes encode the whole batch in one pass with no Python frame per message;
        a message they cannot encode makes the whole call raise ``serialize``'s own error for
        the first such message.

        Args:
            objs: The messages.

        Returns:
            Their bytes, one per message.

        Raises:
            SerdeError: A message cannot be encoded (the first one, as ``serialize`` says).

        Example:
            >>> JsonSerde().serialize_batch([{"a": 1}, [2]])
            [b'{"a":1}', b'[2]']
        """
        return [self.serialize(obj) for obj in objs]

    def deserialize_batch(self, datas: Sequence[bytes]) -> list[T]:
        """Decode many messages at once: what ``deserialize`` gives each, in order.

        Each message is decoded from its own bytes (never by joining them), so a batch rejects
        exactly the messages ``deserialize`` rejects: the first such one raises its error.

        Args:
            datas: The messages' bytes.

        Returns:
            The messages.

        Raises:
            SerdeError: Some bytes do not decode (the first, as ``deserialize`` says).

        Example:
            >>> JsonSerde().deserialize_batch([b'{"a":1}', b'"x"'])
            [{'a': 1}, 'x']
            >>> try:  # two malformed values never merge into valid ones
            ...     JsonSerde().deserialize_batch([b'1,"x', b'y"'])
            ... except SerdeError as e:
            ...     print(e.data)
            b'1,"x'
        """
        return [self.deserialize(data) for data in datas]

    def _settings(self) -> tuple[Any, ...]:
        return ()

    def describe(self) -> str:
        """The serde as text, as plans and error messages show it.

        Returns:
            The class name and settings, e.g. ``"KVSerde(StringSerde(), JsonSerde())"``.
        """
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
    makes decoding validate and build that type.

    Args:
        type: What messages decode to; by default any value of the format.
    """

    _format = ""

    def __init__(self, type: Any = Any) -> None:  # noqa: A002 - msgspec's own spelling
        self.type = type
        self._encoder, self._decoder = self._codec(type)

    def _codec(self, type: Any) -> tuple[Any, Any]:  # noqa: A002
        raise NotImplementedError(f"{self._format} codec")

    def _settings(self) -> tuple[Any, ...]:
        return () if self.type is Any else (self.type,)

    def serialize(self, obj: T) -> bytes:
        """Encode a message.

        Args:
            obj: The message: a value msgspec can encode (dict, list, str, numbers, a Struct,
                a dataclass...).

        Returns:
            Its bytes.

        Raises:
            SerdeError: msgspec cannot encode it.
        """
        try:
            return cast(bytes, self._encoder.encode(obj))
        except (TypeError, msgspec.EncodeError, OverflowError) as exc:
            raise SerdeError(f"{self.describe()} cannot encode {type(obj).__name__}: {exc}. "
                             f"Give the stream a serde that fits the message") from exc
        except RecursionError as exc:
            from .safe_serde import nesting_depth

            raise SerdeError(f"{self.describe()} cannot encode {type(obj).__name__}: it nests "
                             f"{nesting_depth(obj)} levels deep (lists and dicts within each "
                             f"other), too deep to encode; flatten it") from exc

    def deserialize(self, data: bytes) -> T:
        """Decode a message, validated into ``type`` if one was given.

        Args:
            data: The bytes.

        Returns:
            The message.

        Raises:
            SerdeError: The bytes are not of the format, or do not fit ``type``.
        """
        try:
            return cast(T, self._decoder.decode(data))
        except (msgspec.DecodeError, msgspec.ValidationError, TypeError) as exc:
            raise SerdeError(f"{self.describe()} cannot decode message: {self._why(data, exc)}. "
                             f"Check the stream's serde or the producer's format",
                             data=data) from exc
        except RecursionError as exc:
            raise SerdeError(f"{self.describe()} cannot decode message: it nests too deeply "
                             f"(arrays or maps within each other hundreds of levels deep). "
                             f"Check the producer", data=data) from exc

    def _why(self, data: bytes, exc: Exception) -> str:
        return str(exc)

    def serialize_batch(self, objs: Sequence[T]) -> list[bytes]:
        try:
            return list(map(self._encoder.encode, objs))
        except Exception:  # the first message that does not encode, with serialize's error
            return super().serialize_batch(objs)

    def deserialize_batch(self, datas: Sequence[bytes]) -> list[T]:
        try:
            return list(map(self._decoder.decode, datas))
        except Exception:  # the first bytes that do not decode, with deserialize's error
            return super().deserialize_batch(datas)

    def __getstate__(self) -> dict[str, Any]:
        return {"type": self.type}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["type"])  # type: ignore[misc]


class JsonSerde(_MsgspecSerde[T]):
    """JSON through msgspec; ``type`` optionally validates into a Struct.

    A tuple comes back as a list, and a ``KV`` as a list of key and value.

    Args:
        type: What messages decode to (a ``msgspec.Struct``, dataclass, ``dict[str, int]``...);
            by default any JSON value.

    Example:
        >>> JsonSerde().deserialize(JsonSerde().serialize({"a": [1, 2]}))
        {'a': [1, 2]}
        >>> import msgspec
        >>> class View(msgspec.Struct):
        ...     page: str
        >>> JsonSerde(View).deserialize(b'{"page": "home"}')
        View(page='home')
    """

    _format = "json"
    name = "json"

    def _codec(self, type: Any) -> tuple[Any, Any]:  # noqa: A002
        return msgspec.json.Encoder(), msgspec.json.Decoder(type)

    # A message nests at most samza_dsl.json_text.MAX_JSON_DEPTH levels, written or read, as in
    # a JSON Lines file: the same limit wherever it is checked, whatever the depth of the stack.
    def serialize(self, obj: T) -> bytes:
        data = super().serialize(obj)
        deep = check_json_depth(data)
        if deep is not None:
            raise SerdeError(f"{self.describe()} cannot encode {type(obj).__name__}: it is "
                             f"{deep}")
        return data

    def deserialize(self, data: bytes) -> T:
        deep = check_json_depth(data) if isinstance(data, bytes) else None
        if deep is not None:
            raise SerdeError(f"{self.describe()} cannot decode message: it is {deep}. Check "
                             f"the producer", data=data)
        return super().deserialize(data)

    def _why(self, data: bytes, exc: Exception) -> str:
        return explain_json_error(data, exc) if isinstance(data, bytes) else str(exc)

    def serialize_batch(self, objs: Sequence[T]) -> list[bytes]:
        out = super().serialize_batch(objs)
        if any_too_deep(out):
            return [self.serialize(obj) for obj in objs]
        return out

    def deserialize_batch(self, datas: Sequence[bytes]) -> list[T]:
        try:
            deep = any_too_deep(datas)
        except TypeError:  # not all bytes (a memoryview...): each on its own
            deep = True
        if deep:
            return [self.deserialize(data) for data in datas]
        return super().deserialize_batch(datas)


class MsgpackSerde(_MsgspecSerde[T]):
    """MessagePack through msgspec.

    Args:
        type: What messages decode to (a ``msgspec.Struct``, dataclass, ``dict[str, int]``...);
            by default any MessagePack value.

    Example:
        >>> serde = MsgpackSerde()
        >>> serde.deserialize(serde.serialize({"n": 1, "tags": ["a"]}))
        {'n': 1, 'tags': ['a']}
    """

    _format = "msgpack"
    name = "msgpack"

    def _codec(self, type: Any) -> tuple[Any, Any]:  # noqa: A002
        return msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(type)


class StringSerde(Serde[str]):
    """Text in an encoding (UTF-8 by default).

    Args:
        encoding: A Python codec name.

    Example:
        >>> StringSerde().serialize("héllo"), StringSerde("latin-1").serialize("héllo")
        (b'h\\xc3\\xa9llo', b'h\\xe9llo')
        >>> StringSerde().deserialize(b"h\\xc3\\xa9llo")
        'héllo'
    """

    name = "string"

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def _settings(self) -> tuple[Any, ...]:
        return () if self.encoding == "utf-8" else (self.encoding,)

    def serialize(self, obj: str) -> bytes:
        """Encode a str.

        Args:
            obj: The text.

        Returns:
            Its bytes in the serde's encoding.

        Raises:
            SerdeError: ``obj`` is not a str.
        """
        if not isinstance(obj, str):
            raise SerdeError(f"{self.describe()} cannot encode {type(obj).__name__} {obj!r}: "
                             f"expected str. Map the message to a str first or use JsonSerde")
        return obj.encode(self.encoding)

    def deserialize(self, data: bytes) -> str:
        """Decode text.

        Args:
            data: The bytes.

        Returns:
            The text.

        Raises:
            SerdeError: The bytes are not valid in the serde's encoding.
        """
        try:
            return bytes(data).decode(self.encoding)
        except UnicodeDecodeError as exc:
            raise SerdeError(f"{self.describe()} cannot decode message: {exc}", data=data) from exc


class BytesSerde(Serde[bytes]):
    """Raw bytes, unchanged.

    Example:
        >>> BytesSerde().serialize(bytearray(b"raw")), BytesSerde().deserialize(b"raw")
        (b'raw', b'raw')
    """

    name = "bytes"

    def serialize(self, obj: bytes) -> bytes:
        """The bytes as they are.

        Args:
            obj: ``bytes``, ``bytearray`` or ``memoryview``.

        Returns:
            ``obj`` as ``bytes``.

        Raises:
            SerdeError: ``obj`` is not bytes-like.
        """
        if not isinstance(obj, bytes | bytearray | memoryview):
            raise SerdeError(f"BytesSerde() cannot encode {type(obj).__name__}: expected bytes")
        return bytes(obj)

    def deserialize(self, data: bytes) -> bytes:
        """The bytes as they are.

        Args:
            data: The bytes.

        Returns:
            ``data`` as ``bytes``.
        """
        return bytes(data)


class PickleSerde(Serde[Any]):
    """Any picklable Python object. Decoding runs code that the bytes name: whoever can write to
    a stream or store with this serde can run code in the job. It is never a default; name it
    only for streams no one else can write to, and prefer ``SafeSerde``.

    Example:
        >>> PickleSerde().deserialize(PickleSerde().serialize(("a", 1)))
        ('a', 1)
    """

    name = "pickle"

    def serialize(self, obj: Any) -> bytes:
        """Pickle a message.

        Args:
            obj: Any picklable object.

        Returns:
            Its pickle (highest protocol).

        Raises:
            SerdeError: ``obj`` cannot be pickled.
        """
        try:
            return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise SerdeError(f"PickleSerde() cannot encode {type(obj).__name__}: {exc}. Give the "
                             f"stream a serde that fits the message") from exc

    def deserialize(self, data: bytes) -> Any:
        """Unpickle a message; this runs whatever code the bytes name.

        Args:
            data: A pickle.

        Returns:
            The object.

        Raises:
            SerdeError: The bytes cannot be unpickled.
        """
        try:
            return pickle.loads(data)
        except Exception as exc:
            raise SerdeError(f"PickleSerde() cannot decode message: {exc}", data=data) from exc


class NoOpSerde(Serde[Any]):
    """Passes objects through unserialized: for in-memory streams only.

    The serde of a stream descriptor given none (``StreamDescriptor.effective_serde``).

    Example:
        >>> from samza_dsl.systems import MemorySystem
        >>> MemorySystem().input("events").effective_serde
        NoOpSerde()
        >>> message = {"user": "u1"}
        >>> NoOpSerde().serialize(message) is message, NoOpSerde().deserialize(message) is message
        (True, True)
    """

    name = "noop"

    def serialize(self, obj: Any) -> Any:
        """``obj`` itself.

        Args:
            obj: The message.

        Returns:
            ``obj``, unchanged.
        """
        return obj

    def deserialize(self, data: Any) -> Any:
        """``data`` itself.

        Args:
            data: The message.

        Returns:
            ``data``, unchanged.
        """
        return data


class KVSerde(Serde[KV[Any, Any]]):
    """A key serde and a value serde; a stream with a KVSerde delivers ``KV``.

    Args:
        key_serde: The serde of keys.
        value_serde: The serde of values.

    Attributes:
        key_serde: The serde of keys.
        value_serde: The serde of values.

    Raises:
        TypeError: ``key_serde`` or ``value_serde`` is not a ``Serde``.

    Example:
        >>> serde = KVSerde(StringSerde(), JsonSerde())
        >>> serde.to_bytes(KV("u1", {"n": 1})), serde.to_bytes(KV("u1", None))  # a tombstone
        ((b'u1', b'{"n":1}'), (b'u1', None))
        >>> serde.from_bytes(b"u1", b'{"n":1}')
        KV(key='u1', value={'n': 1})
        >>> serde.describe()
        'KVSerde(StringSerde(), JsonSerde())'
        >>> serde.serialize(KV("u1", 1))  # a key and a value are two byte strings
        Traceback (most recent call last):
        samza_dsl.errors.SerdeError: KVSerde serializes a key and a value separately: use to_bytes(kv)
        >>> serde.deserialize(b"u1")
        Traceback (most recent call last):
        samza_dsl.errors.SerdeError: KVSerde deserializes a key and a value separately: use from_bytes()
    """

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
        """Serialize a KV into (key bytes, value bytes); a None key or value stays None.

        Args:
            kv: The ``KV``.

        Returns:
            ``(key bytes or None, value bytes or None)``.

        Raises:
            SerdeError: The key or value serde cannot encode its part.
        """
        key = None if kv.key is None else self.key_serde.serialize(kv.key)
        value = None if kv.value is None else self.value_serde.serialize(kv.value)
        return key, value

    def from_bytes(self, key: bytes | None, value: bytes | None) -> KV[Any, Any]:
        """Deserialize key bytes and value bytes into a KV; a None part stays None.

        Args:
            key: The key's bytes, or None.
            value: The value's bytes, or None.

        Returns:
            ``KV(key, value)``.

        Raises:
            SerdeError: The key or value serde cannot decode its part.
        """
        k = None if key is None else self.key_serde.deserialize(key)
        v = None if value is None else self.value_serde.deserialize(value)
        return KV(k, v)

    def serialize(self, obj: KV[Any, Any]) -> bytes:
        """Not supported: a KVSerde writes a key and a value apart, with ``to_bytes``.

        Args:
            obj: A ``KV``.

        Raises:
            SerdeError: Always.
        """
        raise SerdeError("KVSerde serializes a key and a value separately: use to_bytes(kv)")

    def deserialize(self, data: bytes) -> KV[Any, Any]:
        """Not supported: a KVSerde reads a key and a value apart, with ``from_bytes``.

        Args:
            data: Bytes.

        Raises:
            SerdeError: Always.
        """
        raise SerdeError("KVSerde deserializes a key and a value separately: use from_bytes()")


class SafeSerde(Serde[Any]):
    """Python values as MessagePack, faithfully and without running code on decode: ``None``,
    bool, int (any size), float, str, bytes, list, tuple, dict, set, frozenset, ``KV``,
    datetime, date, time, timedelta, Decimal, UUID, a window's ``WindowPane`` and
    ``LateMessage``, and the ``msgspec.Struct``, dataclass and
    NamedTuple types given in ``types`` (a sequence of classes, or a mapping name -> class).
    A declared type travels as its name and its fields, and decodes as its field annotations
    say; a name that is not declared is an error, never an import. The default of
    intermediate streams and of window and join state, with the types of
    ``app.declare_types(...)``.

    Args:
        types: The declared types: classes (each known by ``module.QualName``), or a mapping
            of name to class.

    Raises:
        TypeError: A type is not a ``msgspec.Struct``, dataclass or NamedTuple class, or two
            types have the same name.

    Example:
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
        """Encode a value.

        Args:
            obj: A value of the supported types, nested as deep as it goes.

        Returns:
            Its MessagePack bytes.

        Raises:
            SerdeError: ``obj`` holds a value of another type, or of an undeclared type; the
                message names it and how to declare it.
        """
        try:
            return self._encode(obj)
        except Exception as exc:
            raise self._codec.encode_error(self.describe(), obj) from exc

    def deserialize(self, data: bytes) -> Any:
        """Decode a value; builds only the supported and declared types, never runs code.

        Args:
            data: Bytes ``serialize`` wrote.

        Returns:
            The value, with its types.

        Raises:
            SerdeError: The bytes were not written by this serde, or name a type that is not
                declared.
        """
        try:
            return self._decode(data)
        except Exception as exc:
            from .safe_serde import MAX_DEPTH

            reason = exc.reason if isinstance(exc, SerdeError) else (
                f"the value nests deeper than this serde writes (at most {MAX_DEPTH} levels, "
                f"samza_dsl.safe_serde.MAX_DEPTH). The bytes were not written by this serde: "
                f"check the producer" if isinstance(exc, RecursionError) else
                f"{type(exc).__name__}: {exc}. The bytes were not written by this serde: check "
                f"the producer")
            raise SerdeError(f"{self.describe()} cannot decode message: {reason}",
                             data=data) from exc

    def __getstate__(self) -> dict[str, Any]:
        return {"types": self.types}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["types"])  # type: ignore[misc]
