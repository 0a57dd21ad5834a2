"""The Confluent wire format, written and read by ``AvroSerde`` and ``ProtobufSerde`` with
``wire_format="confluent"``: the framing a schema registry's clients put around each message.

===========  ========  ===================================================================
bytes        what      how
===========  ========  ===================================================================
0            magic     always 0
1 to 4       schema    the id the registry gave the writer's schema, a 4-byte big-endian
             id        int
then (Protobuf only)   which message of the schema's ``.proto`` file: its message indexes
             message   (the path from the file's top-level messages down to the nested
             indexes   one) as zigzag varints, the count first; ``[0]``, the file's first
                       message, is the single byte 0
then         payload   the message, in Avro binary or in Protobuf's encoding
===========  ========  ===================================================================

>>> frame(7, b"payload")
b'\\x00\\x00\\x00\\x00\\x07payload'
>>> read_header(b"\\x00\\x00\\x00\\x01\\x00rest")
256
>>> encode_message_indexes([0]), encode_message_indexes([1]), encode_message_indexes([1, 0])
(b'\\x00', b'\\x02\\x02', b'\\x04\\x02\\x00')
>>> decode_message_indexes(b"\\x04\\x02\\x00payload", 0)
([1, 0], 3)
>>> read_header(b'{"a": 1}')
Traceback (most recent call last):
ValueError: the first byte is 0x7b, not the Confluent magic byte 0x00: the bytes are not in the Confluent wire format
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["MAGIC", "HEADER_SIZE", "MAX_SCHEMA_ID", "check_schema_id", "header", "frame",
           "unknown_id",
           "read_header", "encode_message_indexes", "decode_message_indexes"]

MAGIC = 0
#: the magic byte and the schema id
HEADER_SIZE = 5
#: a schema id is a Java int that registries hand out from 1 upwards
MAX_SCHEMA_ID = 2**31 - 1
#: more message indexes than any .proto file nests messages: the count of garbage bytes
_MAX_INDEXES = 1000


def check_schema_id(schema_id: object, what: str) -> int:
    """``schema_id`` as an int, if it is one a registry can give.

    Raises:
        TypeError: It is not an int.
        ValueError: It is out of 0 to 2**31 - 1.
    """
    if isinstance(schema_id, bool) or not isinstance(schema_id, int):
        raise TypeError(f"{what} must be an int (the id the schema registry gave the schema), "
                        f"got {type(schema_id).__name__} {schema_id!r}")
    if not 0 <= schema_id <= MAX_SCHEMA_ID:
        raise ValueError(f"{what} must be in 0 to {MAX_SCHEMA_ID} (a 4-byte schema id), "
                         f"got {schema_id}")
    return schema_id


def unknown_id(sid: int, schema_id: int | None, known: Iterable[int], option: str) -> str:
    """Why bytes of schema id ``sid`` are refused by a serde of ``schema_id`` that also reads
    ``known`` ids, and the serde ``option`` that would read them."""
    others = sorted(i for i in known if i != schema_id)
    more = f" nor a known id ({', '.join(map(str, others))})" if others else ""
    return (f"the bytes have schema id {sid}, not this serde's schema id {schema_id}{more}; "
            f"give the serde {option}")


def header(schema_id: int) -> bytes:
    """The magic byte and the schema id."""
    return bytes((MAGIC,)) + schema_id.to_bytes(4, "big")


def frame(schema_id: int, payload: bytes) -> bytes:
    """``payload`` behind the header of ``schema_id``."""
    return header(schema_id) + payload


def read_header(data: bytes) -> int:
    """The schema id of framed bytes.

    Raises:
        ValueError: The bytes are shorter than the header or do not start with the magic byte;
            the message says which, on one line.
    """
    if len(data) < HEADER_SIZE:
        raise ValueError(f"{len(data)} bytes are shorter than the Confluent header (the magic "
                         f"byte 0x00 and a 4-byte schema id)")
    if data[0] != MAGIC:
        raise ValueError(f"the first byte is 0x{data[0]:02x}, not the Confluent magic byte "
                         f"0x00: the bytes are not in the Confluent wire format")
    return int.from_bytes(data[1:HEADER_SIZE], "big")


def _zigzag_varint(n: int, out: bytearray) -> None:
    z = (n << 1) ^ (n >> 63)
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def encode_message_indexes(indexes: Iterable[int]) -> bytes:
    """The message indexes as Confluent's Protobuf clients write them: the count and each index
    as zigzag varints, and ``[0]`` as the single byte 0."""
    ints = list(indexes)
    if ints == [0]:
        return b"\x00"
    out = bytearray()
    for n in (len(ints), *ints):
        _zigzag_varint(n, out)
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = z = 0
    while True:
        if pos >= len(data):
            raise ValueError("the message indexes end before their last byte")
        b = data[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("a message index is longer than a 64-bit varint")


def decode_message_indexes(data: bytes, pos: int) -> tuple[list[int], int]:
    """The message indexes at ``data[pos:]``, and the position of the payload after them.

    Raises:
        ValueError: They are cut short, or their count is negative or beyond any .proto file.
    """
    count, pos = _read_varint(data, pos)
    if count == 0:
        return [0], pos
    if not 0 < count <= _MAX_INDEXES:
        raise ValueError(f"the message indexes' count is {count}: the bytes after the schema "
                         f"id are not Confluent message indexes")
    out = []
    for _ in range(count):
        n, pos = _read_varint(data, pos)
        out.append(n)
    return out, pos
