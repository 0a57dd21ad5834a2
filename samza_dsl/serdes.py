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
from typing import Any, Generic, NamedTuple, TypeVar, cast

import msgspec

from .avro_scan import MAX_BYTES, MAX_DEPTH, MAX_ITEMS, check_limit
from .errors import SerdeError
from .json_text import any_too_deep, check_json_depth, explain_json_error
from .kv import KV

T = TypeVar("T")

__all__ = ["Serde", "JsonSerde", "MsgpackSerde", "StringSerde", "BytesSerde", "KVSerde",
           "NoOpSerde", "PickleSerde", "SafeSerde", "AvroSerde", "ProtobufSerde"]


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
    #: the class messages decode to, where the serde decodes to one (``JsonSerde(View)``);
    #: None where it does not say
    type: Any = None
    #: the longest bytes ``deserialize`` takes (longer ones are a ``SerdeError``, so a reader
    #: may refuse them without decoding); None where the serde sets no limit
    max_bytes: int | None = None

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


class _Option(NamedTuple):
    """A serde's setting given by keyword, as ``describe`` shows it: ``max_bytes=1024``."""

    name: str
    value: Any

    def __repr__(self) -> str:
        return f"{self.name}={self.value!r}"


class _MsgspecSerde(Serde[T]):
    """Shared by JSON and MessagePack: an optional ``type`` (a Struct, dataclass, dict[str, int]...)
    makes decoding validate and build that type.

    Args:
        type: What messages decode to; by default any value of the format.
        max_bytes: The longest message decoded (16 MiB by default): decoded, a message takes
            several times its length in memory.
    """

    _format = ""
    max_bytes: int

    def __init__(self, type: Any = Any, *,  # noqa: A002 - msgspec's own spelling
                 max_bytes: int = MAX_BYTES) -> None:
        self.type = type
        self.max_bytes = check_limit(max_bytes, f"{self.__class__.__name__} max_bytes")
        self._encoder, self._decoder = self._codec(type)

    def _codec(self, type: Any) -> tuple[Any, Any]:  # noqa: A002
        raise NotImplementedError(f"{self._format} codec")

    def _settings(self) -> tuple[Any, ...]:
        out: tuple[Any, ...] = () if self.type is Any else (self.type,)
        if self.max_bytes != MAX_BYTES:
            out += (_Option("max_bytes", self.max_bytes),)
        return out

    def _too_long(self, data: bytes) -> SerdeError:
        return SerdeError(f"{self.describe()} cannot decode message: it is {len(data)} bytes "
                          f"long, more than the {self.max_bytes} bytes a message may take. "
                          f"Check the producer, or give the serde a larger max_bytes= if such "
                          f"messages are expected", data=data)

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
            SerdeError: The bytes are not of the format, or do not fit ``type``, or are more
                than ``max_bytes``.
        """
        if len(data) > self.max_bytes:
            raise self._too_long(data)
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
            if datas and max(map(len, datas)) > self.max_bytes:
                raise ValueError("too long")
            return list(map(self._decoder.decode, datas))
        except Exception:  # the first bytes that do not decode, with deserialize's error
            return super().deserialize_batch(datas)

    def __getstate__(self) -> dict[str, Any]:
        return {"type": self.type, "max_bytes": self.max_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["type"],  # type: ignore[misc]
                      max_bytes=state.get("max_bytes", MAX_BYTES))


class JsonSerde(_MsgspecSerde[T]):
    """JSON through msgspec; ``type`` optionally validates into a Struct.

    A tuple comes back as a list, and a ``KV`` as a list of key and value.

    Args:
        type: What messages decode to (a ``msgspec.Struct``, dataclass, ``dict[str, int]``...);
            by default any JSON value.
        max_bytes: The longest message decoded (16 MiB by default); a longer one is a
            ``SerdeError``, under the stream's serde error policy.

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
        if len(data) > self.max_bytes:
            raise self._too_long(data)
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
        max_bytes: The longest message decoded (16 MiB by default); a longer one is a
            ``SerdeError``, under the stream's serde error policy.

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


_WIRE_FORMATS = ("plain", "confluent")


def _check_wire(serde: str, wire_format: str, schema_id: int | None,
                others: object) -> int | None:
    """The schema id, checked against the wire format: ``"confluent"`` needs one, ``"plain"``
    takes none (nor other known ids)."""
    from .confluent_wire import check_schema_id

    if wire_format not in _WIRE_FORMATS:
        raise ValueError(f"{serde} wire_format must be 'plain' or 'confluent', got "
                         f"{wire_format!r}")
    if wire_format == "plain":
        if schema_id is not None or others:
            raise ValueError(f"{serde} takes schema_id and known ids only with "
                             f"wire_format='confluent'")
        return None
    if schema_id is None:
        raise ValueError(f"{serde} with wire_format='confluent' needs schema_id= (the id the "
                         f"schema registry gave the schema)")
    return check_schema_id(schema_id, f"{serde} schema_id")


_LIMITS = {"max_bytes": MAX_BYTES, "max_items": MAX_ITEMS, "max_depth": MAX_DEPTH}


def _limits_text(**limits: int) -> list[str]:
    """The limits set to other than their defaults, as ``describe`` shows them."""
    return [f"{name}={value}" for name, value in limits.items() if value != _LIMITS[name]]


class AvroSerde(Serde[Any]):
    """Avro binary, with the schema given in code (fastavro: ``pip install
    'samza-dsl[avro]'``). A message is a dict of the schema's fields (or, for a schema that is
    not a record, a value of its type); it is checked against the schema when it is written,
    and one that does not fit is an error naming the field and what is wrong. Records decode
    to dicts.

    ``wire_format="confluent"`` writes and reads the framing of Confluent's schema registry
    clients: the byte 0, the schema's registry id (4 bytes, big-endian), then the Avro bytes.
    Decoding checks both; bytes with another id are an error naming both ids, unless
    ``known_schemas`` gives that id's schema, which is then the writer's schema, resolved into
    ``schema`` as Avro's schema resolution says (a field added with a default, say).

    A record's bytes are checked before they are read (``samza_dsl.avro_scan``): a record
    longer than ``max_bytes``, a count or length beyond the bytes left, arrays and maps holding
    more than ``max_items`` items, or nesting deeper than ``max_depth`` levels is refused at
    once, naming the field, rather than read until memory runs out. Bytes that do not decode, or
    cost more than these limits, follow the stream's ``streams.<id>.samza.serde.error`` policy.

    Args:
        schema: The Avro schema: a dict (a list for a union), or its JSON text.
        wire_format: ``"plain"`` (the Avro bytes alone) or ``"confluent"``.
        schema_id: The registry's id of ``schema``; ``"confluent"`` only, and needed there.
        known_schemas: ``{schema id: schema}`` of older (or newer) schemas whose messages the
            stream holds too; ``"confluent"`` only.
        max_bytes: The longest record read (16 MiB by default).
        max_items: The most items the arrays and maps of one record hold together (1,000,000
            by default).
        max_depth: The deepest records, arrays and maps nest in a record (100 by default).

    Raises:
        ValueError: The schema is not valid Avro, the wire format and ids do not go together,
            or a limit is not a positive int.
        ModuleNotFoundError: fastavro is not installed.

    Example:
        >>> user = {"type": "record", "name": "User", "namespace": "shop", "fields": [
        ...     {"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}
        >>> serde = AvroSerde(user)
        >>> serde.serialize({"name": "ann", "age": 3})
        b'\\x06ann\\x06'
        >>> serde.deserialize(b'\\x06ann\\x06')
        {'name': 'ann', 'age': 3}
        >>> serde.serialize({"name": "ann", "age": "3"})
        Traceback (most recent call last):
        samza_dsl.errors.SerdeError: AvroSerde('shop.User') cannot encode dict: field 'age' is '3' (str), expected int. Make the message fit the schema
        >>> framed = AvroSerde(user, wire_format="confluent", schema_id=7)
        >>> framed.serialize({"name": "ann", "age": 3})
        b'\\x00\\x00\\x00\\x00\\x07\\x06ann\\x06'
        >>> framed.deserialize(b'\\x00\\x00\\x00\\x00\\x08\\x06ann\\x06')
        Traceback (most recent call last):
        samza_dsl.errors.SerdeError: AvroSerde('shop.User', wire_format='confluent', schema_id=7) cannot decode message: the bytes have schema id 8, not this serde's schema id 7; ...
        >>> nulls = AvroSerde({"type": "array", "items": "null"})
        >>> nulls.deserialize(b"\\x80\\x80\\x80\\x80\\x80\\x80\\x80\\x80\\x80\\x01\\x00")
        Traceback (most recent call last):
        samza_dsl.errors.SerdeError: AvroSerde('array') cannot decode message: the message (array of null): a block claims 4611686018427387904 items, more than the 1000000 items a record may hold. Check the producer, or give the serde a larger max_items= if such records are expected; ...
    """

    name = "avro"
    max_bytes: int

    def __init__(self, schema: dict[str, Any] | list[Any] | str, *, wire_format: str = "plain",
                 schema_id: int | None = None,
                 known_schemas: Mapping[int, dict[str, Any] | list[Any] | str] | None = None,
                 max_bytes: int = MAX_BYTES, max_items: int = MAX_ITEMS,
                 max_depth: int = MAX_DEPTH) -> None:
        from .avro_codec import AvroCodec, canonical_text, schema_name
        from .avro_scan import AvroLimits

        self.limits = AvroLimits(max_bytes, max_items, max_depth)
        self.max_bytes = max_bytes
        known = dict(known_schemas or {})
        self.schema = schema
        self.wire_format = wire_format
        self.schema_id = _check_wire("AvroSerde", wire_format, schema_id, known)
        self.known_schemas = known
        self._codec = AvroCodec(schema, wire_format=wire_format, schema_id=self.schema_id,
                                known_schemas=known, label="AvroSerde(...)",
                                limits=self.limits)
        self._key = (canonical_text(schema),
                     tuple(sorted((i, canonical_text(s)) for i, s in known.items())))
        self._name = schema_name(self._codec.schema)
        self._codec.label = self.describe()

    def _settings(self) -> tuple[Any, ...]:
        return (self._key, self.wire_format, self.schema_id, self.limits)

    def describe(self) -> str:
        """The serde as plans show it: the schema's name (its fields left out), the wire format
        and the ids.

        Returns:
            E.g. ``"AvroSerde('shop.User', wire_format='confluent', schema_id=7)"``.

        Example:
            >>> user = {"type": "record", "name": "User", "namespace": "shop",
            ...         "fields": [{"name": "name", "type": "string"}]}
            >>> AvroSerde(user, wire_format="confluent", schema_id=7).describe()
            "AvroSerde('shop.User', wire_format='confluent', schema_id=7)"
        """
        parts = [repr(self._name)]
        if self.wire_format != "plain":
            parts += [f"wire_format={self.wire_format!r}", f"schema_id={self.schema_id}"]
        if self.known_schemas:
            parts.append(f"known_ids={sorted(self.known_schemas)}")
        parts += _limits_text(max_bytes=self.limits.max_bytes,
                              max_items=self.limits.max_items,
                              max_depth=self.limits.max_depth)
        return f"AvroSerde({', '.join(parts)})"

    def serialize(self, obj: Any) -> bytes:
        """Encode a message that fits the schema.

        Args:
            obj: The message: a dict of the record's fields (a field with a default may be left
                out; a field the schema does not have is an error).

        Returns:
            Its Avro bytes (behind the Confluent header, in that wire format).

        Raises:
            SerdeError: It does not fit the schema: names the field and what is wrong.
        """
        return self._codec.encode(obj)

    def deserialize(self, data: bytes) -> Any:
        """Decode a message.

        Args:
            data: Avro bytes of the schema (behind the Confluent header, in that wire format).

        Returns:
            The record, as a dict.

        Raises:
            SerdeError: The bytes are not Avro of the schema, bytes are left over after it, or
                (Confluent) the magic byte or the schema id is not the serde's.
        """
        return self._codec.decode(data)

    def __getstate__(self) -> dict[str, Any]:
        return {"schema": self.schema, "wire_format": self.wire_format,
                "schema_id": self.schema_id, "known_schemas": self.known_schemas,
                "max_bytes": self.limits.max_bytes, "max_items": self.limits.max_items,
                "max_depth": self.limits.max_depth}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state.pop("schema"), **state)  # type: ignore[misc]


class ProtobufSerde(Serde[Any]):
    """Protocol Buffers, with the generated message class given in code (protobuf: ``pip
    install 'samza-dsl[protobuf]'``). A message to write is an instance of the class, or a dict
    in protobuf's JSON mapping (``json_format.ParseDict``: a field the message does not have,
    or a value of the wrong type, is an error naming the field). Messages are written
    deterministically, and decode to instances of the class, or with ``as_dict=True`` to dicts
    (``json_format.MessageToDict`` with the fields' proto names, every field present).

    ``wire_format="confluent"`` writes and reads the framing of Confluent's schema registry
    clients: the byte 0, the schema's registry id (4 bytes, big-endian), the message's indexes
    in its ``.proto`` file (zigzag varints; ``[0]``, the file's first message, as the byte 0),
    then the Protobuf bytes. Decoding checks all three: bytes with another schema id are an
    error naming both ids, unless ``known_ids`` lists it.

    A record longer than ``max_bytes`` is refused before it is parsed; protobuf itself refuses a
    length beyond the bytes left and messages nested more than 100 levels deep. Bytes that do not
    decode, or are too long, follow the stream's ``streams.<id>.samza.serde.error`` policy.

    Args:
        message_class: The generated message class (``views_pb2.PageView``), or one built from
            descriptors (``message_factory.GetMessageClass``).
        wire_format: ``"plain"`` (the Protobuf bytes alone) or ``"confluent"``.
        schema_id: The registry's id of the message's schema; ``"confluent"`` only, and needed
            there.
        message_indexes: The message's indexes in its file (``"confluent"`` only); by default
            found from its descriptor, as Confluent's clients find them.
        known_ids: Other schema ids whose messages this class reads (``"confluent"`` only).
        as_dict: Decode to dicts rather than messages.
        max_bytes: The longest record read (16 MiB by default).

    Raises:
        TypeError: ``message_class`` is not a Protobuf message class.
        ValueError: The wire format and ids do not go together, or ``max_bytes`` is not a
            positive int.
        ModuleNotFoundError: protobuf is not installed.

    Example:
        >>> from google.protobuf.source_context_pb2 import SourceContext  # any generated class
        >>> serde = ProtobufSerde(SourceContext)
        >>> serde.serialize(SourceContext(file_name="a.proto")), serde.serialize(
        ...     {"file_name": "a.proto"})
        (b'\\n\\x07a.proto', b'\\n\\x07a.proto')
        >>> serde.deserialize(b"\\n\\x07a.proto") == SourceContext(file_name="a.proto")
        True
        >>> ProtobufSerde(SourceContext, as_dict=True).deserialize(b"\\n\\x07a.proto")
        {'file_name': 'a.proto'}
        >>> serde.serialize({"file": "a.proto"})
        Traceback (most recent call last):
        samza_dsl.errors.SerdeError: ProtobufSerde(google.protobuf.SourceContext) cannot encode dict: Message type "google.protobuf.SourceContext" has no field named "file" at "SourceContext". ...
        >>> ProtobufSerde(SourceContext, wire_format="confluent", schema_id=7).serialize(
        ...     SourceContext(file_name="a.proto"))  # the file's first message: indexes [0]
        b'\\x00\\x00\\x00\\x00\\x07\\x00\\n\\x07a.proto'
    """

    name = "protobuf"
    max_bytes: int

    def __init__(self, message_class: type[Any], *, wire_format: str = "plain",
                 schema_id: int | None = None, message_indexes: Sequence[int] | None = None,
                 known_ids: Iterable[int] = (), as_dict: bool = False,
                 max_bytes: int = MAX_BYTES) -> None:
        from .protobuf_codec import ProtobufCodec, check_message_class, message_indexes_of

        self.message_class = check_message_class(message_class)
        self.max_bytes = check_limit(max_bytes, "ProtobufSerde max_bytes")
        known = tuple(sorted(set(known_ids)))
        self.wire_format = wire_format
        self.schema_id = _check_wire("ProtobufSerde", wire_format, schema_id,
                                     known or message_indexes)
        if message_indexes is not None:
            indexes = [int(i) for i in message_indexes]
            if not indexes:
                raise ValueError("ProtobufSerde message_indexes must name at least one index")
        else:
            indexes = message_indexes_of(self.message_class) if self.schema_id is not None \
                else []
        self.message_indexes = tuple(indexes)
        self.known_ids = known
        self.as_dict = bool(as_dict)
        self._codec = ProtobufCodec(self.message_class, wire_format=wire_format,
                                    schema_id=self.schema_id, message_indexes=indexes,
                                    known_ids=known, as_dict=self.as_dict, label="",
                                    max_bytes=self.max_bytes)
        self._codec.label = self.describe()

    def _settings(self) -> tuple[Any, ...]:
        out: list[Any] = [self.message_class]
        if self.wire_format != "plain":
            out += [self.wire_format, self.schema_id, self.message_indexes]
        if self.known_ids:
            out.append(self.known_ids)
        if self.as_dict:
            out.append("as_dict")
        if self.max_bytes != MAX_BYTES:
            out.append(("max_bytes", self.max_bytes))
        return tuple(out)

    def describe(self) -> str:
        """The serde as plans show it.

        Returns:
            E.g. ``"ProtobufSerde(shop.PageView, wire_format='confluent', schema_id=7)"``.

        Example:
            >>> from google.protobuf.source_context_pb2 import SourceContext
            >>> ProtobufSerde(SourceContext, wire_format="confluent", schema_id=7).describe()
            "ProtobufSerde(google.protobuf.SourceContext, wire_format='confluent', schema_id=7)"
        """
        parts = [self.message_class.DESCRIPTOR.full_name]
        if self.wire_format != "plain":
            parts += [f"wire_format={self.wire_format!r}", f"schema_id={self.schema_id}"]
            if list(self.message_indexes) != [0]:
                parts.append(f"message_indexes={list(self.message_indexes)}")
        if self.known_ids:
            parts.append(f"known_ids={list(self.known_ids)}")
        if self.as_dict:
            parts.append("as_dict=True")
        parts += _limits_text(max_bytes=self.max_bytes)
        return f"ProtobufSerde({', '.join(parts)})"

    def serialize(self, obj: Any) -> bytes:
        """Encode a message.

        Args:
            obj: An instance of the message class, or a dict in protobuf's JSON mapping.

        Returns:
            Its Protobuf bytes, deterministic (behind the Confluent header and message indexes,
            in that wire format).

        Raises:
            SerdeError: A message of another class, a dict that does not fit (names the
                field), or a message missing a required (proto2) field.
        """
        return self._codec.encode(obj)

    def deserialize(self, data: bytes) -> Any:
        """Decode a message.

        Args:
            data: Protobuf bytes of the message (behind the Confluent header and message
                indexes, in that wire format).

        Returns:
            An instance of the message class, or its dict with ``as_dict=True``.

        Raises:
            SerdeError: The bytes do not parse as the message, or (Confluent) the magic byte,
                the schema id or the message indexes are not the serde's.
        """
        return self._codec.decode(data)

    def __getstate__(self) -> dict[str, Any]:
        return {"message_class": self.message_class, "wire_format": self.wire_format,
                "schema_id": self.schema_id,
                "message_indexes": self.message_indexes if self.schema_id is not None else None,
                "known_ids": self.known_ids, "as_dict": self.as_dict,
                "max_bytes": self.max_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state.pop("message_class"), **state)  # type: ignore[misc]
