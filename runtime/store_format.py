"""How ``LmdbStore`` lays out an entry in LMDB: the key, and the value behind its checksum.

- **Keys.** An encoded key shorter than 511 bytes (``MAX_KEY``, LMDB's limit for the whole LMDB
  key) is held as ``b"\\x00" + key``, so LMDB orders short keys by their bytes. A longer key is
  held as ``b"\\x01" + blake2b-256(key)``, with the full key in the value: any key works, and long
  keys come after all short ones, in the order of their hash. ``MAX_KEY`` is a constant, not the
  library's ``max_key_size()``: which keys are long is part of the file format.
- **Values.** A short key's LMDB value is ``crc32(LMDB key + rest)`` (4 bytes, little-endian)
  and then the encoded value. A long key's is the same checksum over ``len(key)`` (4 bytes,
  little-endian), the key and the encoded value. A value changed on disk (or under another key)
  fails its checksum: ``unframe`` raises ``ChecksumError``.
- The changelog holds ``(encoded key, encoded value)`` as they are: no prefix, no checksum, the
  full key however long.

>>> [(k, v.hex()) for k, v in frame([(b"a", b"1")])]
[(b'\\x00a', 'ce8379d231')]
>>> unframe(*frame([(b"k" * 600, b"v")])[0])[1]
b'v'
>>> unframe(b"\\x00a", bytes.fromhex("ce8379d232"))
Traceback (most recent call last):
...
runtime.store_format.ChecksumError: an LMDB value (LMDB key b'\\x00a') fails its checksum
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable
from operator import itemgetter

from samza_dsl.errors import SamzaError

__all__ = ["MAX_KEY", "ChecksumError", "checksummed", "frame", "lmdb_key", "unframe"]

MAX_KEY = 511
SHORT = b"\x00"
LONG = b"\x01"
_crc = zlib.crc32
_u32 = struct.Struct("<I")
_pack_u32 = _u32.pack
_unpack_u32 = _u32.unpack_from
_blake2b = hashlib.blake2b
_first = itemgetter(0)


class ChecksumError(SamzaError):
    """A value read from LMDB fails its checksum (``lkey``: its LMDB key)."""

    def __init__(self, lkey: bytes) -> None:
        super().__init__(f"an LMDB value (LMDB key {lkey[:60]!r}) fails its checksum")
        self.lkey = lkey


def lmdb_key(kb: bytes) -> bytes:
    """The LMDB key of an encoded key."""
    if len(kb) < MAX_KEY:
        return SHORT + kb
    return LONG + _blake2b(kb, digest_size=32).digest()


def checksummed(lk: bytes, body: bytes) -> bytes:
    """The LMDB value: the checksum of ``lk`` and ``body``, then ``body``."""
    return _pack_u32(_crc(body, _crc(lk))) + body


def frame(entries: Iterable[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
    """The LMDB entries, sorted by LMDB key, of ``(encoded key, encoded value or None)`` pairs
    (None: a delete)."""
    out: list[tuple[bytes, bytes | None]] = []
    append = out.append
    for kb, vb in entries:
        if len(kb) < MAX_KEY:  # the hot case, inlined
            lk = SHORT + kb
            append((lk, None if vb is None else _pack_u32(_crc(vb, _crc(lk))) + vb))
        else:
            lk = LONG + _blake2b(kb, digest_size=32).digest()
            append((lk, None if vb is None else checksummed(lk, _pack_u32(len(kb)) + kb + vb)))
    out.sort(key=_first)
    return out


def unframe(lk: bytes, raw: bytes) -> tuple[bytes, bytes]:
    """``(encoded key, encoded value)`` of an LMDB entry; raises ChecksumError when the value
    fails its checksum or its layout."""
    body = raw[4:]
    if len(raw) < 4 or _unpack_u32(raw)[0] != _crc(body, _crc(lk)):
        raise ChecksumError(lk)
    if lk[:1] == SHORT:
        return lk[1:], body
    n = _unpack_u32(body)[0] if len(body) >= 4 else -1
    if not 0 <= n <= len(body) - 4 or lk[:1] != LONG:
        raise ChecksumError(lk)
    return body[4:4 + n], body[4 + n:]
