"""The embedded log's segment format: how a batch of records is encoded, checksummed and read
back from its stored bytes, without LMDB (``runtime.local.log`` stores the segments).

A plain segment is one msgpack encoding of ``(timestamp_ms, [(key, value, headers), ...])``; a
compacted one (``runtime.local.compaction`` writes them) ``(span, timestamp_ms, [offset - first,
...], [(key, value, headers), ...])``, told apart by its first byte (``COMPACTED``). A stored
value (a segment, or a metadata value) carries its checksum in front: ``CHECKED``, then the
CRC-32 of the encoding followed by its LMDB key (``seal``, ``sealed``). A segment's record count
and timestamp are read from its msgpack headers alone (``segment_count``, ``segment_ts``). The
layout of the log's keys is in ``runtime.local.log``'s docstring.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import msgspec

from samza_dsl.errors import SamzaError

__all__ = ["CHECKED", "CHECKED_HEAD", "COMPACTED", "CRC", "CRC32", "DECODE_COMPACTED",
           "DECODE_INFO", "DECODE_SEGMENT", "ENCODE", "ENCODE_INTO", "LAST", "MAX_OFFSET",
           "PACK_OFFSET", "LARGE_SEGMENT_BYTES", "SEGMENT_BYTES", "U32", "UNPACK_OFFSET",
           "CorruptSegmentError", "Encoded",
           "Header",
           "Record", "StreamInfo", "seal", "sealed", "segment_count", "segment_kind", "segment_limit",
           "segment_ts"]

Header = tuple[str, bytes]
#: headers, or an int: a record's origin in the log's compact form (``runtime.engine.origins``)
Record = tuple[bytes | None, bytes | None, tuple[Header, ...] | int | None]

#: a batch encoded for the log (``LocalLog.encode_batch``): stream, partition, the segment's
#: stored value but for its key's share of the checksum (None: no record), and the checksum of
#: its encoding
Encoded = tuple[str, int, bytearray | None, int]

_SegmentType = tuple[
    int, list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...] | int | None]]
]


class StreamInfo(msgspec.Struct):
    partitions: int
    #: every segment carries its checksum (streams created before checksums existed: False)
    checked: bool = False


class CorruptSegmentError(SamzaError):
    """A segment of the log fails its checksum or cannot be decoded: the records at offsets
    ``[offset, offset + span)`` of ``stream`` partition ``partition`` are lost (``span`` None:
    not known). ``raw``: the segment's stored bytes."""

    def __init__(self, message: str, *, stream: str = "", partition: int = 0, offset: int = 0,
                 span: int | None = None, raw: bytes = b"") -> None:
        super().__init__(message)
        self.stream = stream
        self.partition = partition
        self.offset = offset
        self.span = span
        self.raw = raw


ENCODE = msgspec.msgpack.Encoder().encode
DECODE_SEGMENT = msgspec.msgpack.Decoder(_SegmentType).decode
_CompactedType = tuple[
    int, int, list[int],
    list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...] | int | None]],
]
DECODE_COMPACTED = msgspec.msgpack.Decoder(_CompactedType).decode
COMPACTED = 0x94  # the first byte of a compacted segment's value
#: the most bytes a stored segment takes (but for a single record larger than that): LMDB keeps a
#: value over about half a page in overflow pages of its own, as many as it needs and contiguous
#: (16 bytes of header, then the value). A segment of one such page fits any page the log's
#: file has free; segments of several need as many free pages side by side, and a log whose
#: retention and compaction freed a mix of sizes grew its file for them (the soak, W9T)
SEGMENT_BYTES = 4096 - 16
#: ... but for records over an eighth of a page each: a page holding k of them can leave a
#: record's worth of it empty, up to 1/(k+1) of the page (half of it for a record of 2.1 KB, the
#: log twice the size of its records), so they go in segments of up to eight pages, which they
#: fill to within one record
LARGE_SEGMENT_BYTES = 8 * 4096 - 16


def segment_limit(record_bytes: int) -> int:
    """The most bytes a segment of records of about ``record_bytes`` each takes."""
    return SEGMENT_BYTES if 8 * record_bytes <= SEGMENT_BYTES else LARGE_SEGMENT_BYTES

CHECKED = 0xC1  # the first byte of a value that carries its checksum
CHECKED_HEAD = 5  # that byte and the checksum
CRC32 = zlib.crc32
CRC = struct.Struct("<I")
ENCODE_INTO = msgspec.msgpack.Encoder().encode_into
DECODE_INFO = msgspec.msgpack.Decoder(StreamInfo).decode
_U64 = struct.Struct(">Q")
U32 = struct.Struct(">I")
PACK_OFFSET = _U64.pack
UNPACK_OFFSET = _U64.unpack
LAST = b"\xff" * 8  # greater than every 8-byte offset
MAX_OFFSET = (1 << 63) - 1

# The size of a msgpack int by its first byte, for the segment's timestamp.
_INT_SIZE = {0xCC: 2, 0xCD: 3, 0xCE: 5, 0xCF: 9, 0xD0: 2, 0xD1: 3, 0xD2: 5, 0xD3: 9}


def _uint_at(value: Any, i: int) -> int:
    """The msgpack unsigned int at ``value[i]``."""
    b = value[i]
    if b <= 0x7F:
        return int(b)
    return int.from_bytes(value[i + 1 : i + _INT_SIZE[b]], "big")


def segment_count(value: Any) -> int:
    """How many offsets an encoded segment covers, from its msgpack headers alone: a plain
    segment's record count, a compacted one's span.

    A plain ``value`` (after its checksum, if any) is ``0x92`` (an array of 2), the timestamp
    (an int of 1 to 9 bytes), then the records' array header (fixarray, array 16 or array
    32)."""
    o = CHECKED_HEAD if value[0] == CHECKED else 0  # read in place: no copy of the rest
    if value[o] == COMPACTED:
        return _uint_at(value, o + 1)
    b = value[o + 1]
    i = o + (2 if (b <= 0x7F or b >= 0xE0) else 1 + _INT_SIZE[b])
    h = value[i]
    if 0x90 <= h <= 0x9F:
        return h - 0x90
    if h == 0xDC:
        return (value[i + 1] << 8) | value[i + 2]
    if h == 0xDD:
        return int.from_bytes(value[i + 1 : i + 5], "big")
    raise KeyError(h)


def segment_kind(value: Any) -> int:
    """The first byte of a segment's encoding: ``COMPACTED`` or a plain segment's."""
    return int(value[CHECKED_HEAD] if value[0] == CHECKED else value[0])


def seal(key: bytes, body: bytes) -> bytes:
    """The stored value of an encoded segment or metadata value ``body`` under ``key``: with
    its checksum (see the module doc)."""
    return bytes((CHECKED,)) + CRC.pack(CRC32(key, CRC32(body))) + body


def sealed(value: Any, key: bytes) -> bool:
    """Whether a value that starts with ``CHECKED`` matches its checksum."""
    return len(value) >= CHECKED_HEAD and \
        CRC.unpack_from(value, 1)[0] == CRC32(key, CRC32(value[CHECKED_HEAD:]))


def segment_ts(value: Any) -> int:
    """An encoded segment's timestamp (ms), from its msgpack header: a compacted segment's
    comes after its span."""
    if value[0] == CHECKED:
        value = value[CHECKED_HEAD:]
    i = 1
    if value[0] == COMPACTED:
        b = value[1]
        i = 2 if b <= 0x7F else 1 + _INT_SIZE[b]
    return _uint_at(value, i)

