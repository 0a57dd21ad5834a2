"""How ``LmdbStore`` lays out an entry in LMDB: the key, and the value behind its checksum.

- **Keys.** Every LMDB key is ``b"\\x00"`` and then the encoded key (LMDB cannot store an empty
  key), so LMDB orders entries by the bytes of their encoded keys, whatever their length. An
  encoded key of at most 478 bytes (``PREFIX``) is *short*: it is held whole. A longer one is
  *long*: it is held as its first ``PREFIX`` bytes and then its blake2b-256 hash (an LMDB key of
  511 bytes, ``MAX_KEY``, LMDB's limit), with the full key in the value. A long key then sorts
  after every key that is smaller in its first ``PREFIX`` bytes and before every key that is
  larger in them, as its bytes do; only long keys that share their first ``PREFIX`` bytes (a
  *group*, adjacent in LMDB) sort by their hash, and ``LmdbStore`` reads a group whole and sorts
  it by full key. ``PREFIX`` is a constant, not derived from the library's ``max_key_size()``:
  which keys are long is part of the file format.
- **Values.** A short key's LMDB value is ``crc32(LMDB key + rest)`` (4 bytes, little-endian)
  and then the encoded value. A long key's is the same checksum over ``len(key)`` (4 bytes,
  little-endian), the key and the encoded value. A value changed on disk (or under another key)
  fails its checksum: ``unframe`` raises ``ChecksumError``.
- The changelog holds ``(encoded key, encoded value)`` as they are: no prefix, no checksum, the
  full key however long.
- **Format 2** (``unframe_2``, read only to migrate a store) held a key shorter than 511 bytes
  whole and a longer one as ``b"\\x01"`` + its hash, so long keys came after all others, in the
  order of their hash. Format 1 had no checksums and no long keys.

>>> [(k, v.hex()) for k, v in frame([(b"a", b"1")])]
[(b'\\x00a', 'ce8379d231')]
>>> long = frame([(b"k" * 600, b"v")])[0]
>>> len(long[0]), long[0][:4], unframe(*long)
(511, b'\\x00kkk', (b'kkk...kkk', b'v'))
>>> unframe(b"\\x00a", bytes.fromhex("ce8379d232"))
Traceback (most recent call last):
...
runtime.state.format.ChecksumError: an LMDB value (LMDB key b'\\x00a') fails its checksum
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable
from operator import itemgetter

from samza_dsl.errors import SamzaError

__all__ = ["MAX_KEY", "PREFIX", "SHORT_LEN", "VERSION", "OLD_VERSIONS", "META_KEY", "ChecksumError",
           "checksummed", "frame", "full_key", "lmdb_key", "unframe", "unframe_2"]

VERSION = 3  # the format a store's metadata record names: keys in byte order, however long
#: the older formats, which a store is rebuilt from its changelog or migrated from
OLD_VERSIONS = {1: "values without checksums",
                2: "keys of 511 bytes or more in the order of their hash"}
META_KEY = b"state"  # the key of a store's metadata record, in its ``meta`` database

MAX_KEY = 511  # LMDB's limit on the length of an LMDB key
HASH = 32  # bytes of a long key's hash
PREFIX = MAX_KEY - 1 - HASH  # 478: the longest short key, and the part of a long key kept
SHORT_LEN = PREFIX + 1  # the longest LMDB key of a short key; a long key's is MAX_KEY
SHORT = b"\x00"
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
    if len(kb) <= PREFIX:
        return SHORT + kb
    return SHORT + kb[:PREFIX] + _blake2b(kb, digest_size=HASH).digest()


def checksummed(lk: bytes, body: bytes) -> bytes:
    """The LMDB value: the checksum of ``lk`` and ``body``, then ``body``."""
    return _pack_u32(_crc(body, _crc(lk))) + body


def frame(entries: Iterable[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
    """The LMDB entries, sorted by LMDB key, of ``(encoded key, encoded value or None)`` pairs
    (None: a delete)."""
    out: list[tuple[bytes, bytes | None]] = []
    append = out.append
    for kb, vb in entries:
        if len(kb) <= PREFIX:  # the hot case, inlined
            lk = SHORT + kb
            append((lk, None if vb is None else _pack_u32(_crc(vb, _crc(lk))) + vb))
        else:
            lk = SHORT + kb[:PREFIX] + _blake2b(kb, digest_size=HASH).digest()
            append((lk, None if vb is None else checksummed(lk, _pack_u32(len(kb)) + kb + vb)))
    out.sort(key=_first)
    return out


def unframe(lk: bytes, raw: bytes) -> tuple[bytes, bytes]:
    """``(encoded key, encoded value)`` of an LMDB entry; raises ChecksumError when the value
    fails its checksum or its layout."""
    body = raw[4:]
    if len(raw) < 4 or _unpack_u32(raw)[0] != _crc(body, _crc(lk)):
        raise ChecksumError(lk)
    if len(lk) <= SHORT_LEN:
        return lk[1:], body
    n = _unpack_u32(body)[0] if len(body) >= 4 else -1
    if not PREFIX < n <= len(body) - 4 or body[4:4 + PREFIX] != lk[1:SHORT_LEN]:
        raise ChecksumError(lk)
    return body[4:4 + n], body[4 + n:]


def full_key(entry: tuple[bytes, bytes]) -> bytes:
    """The encoded key of a long key's LMDB entry ``(LMDB key, value)``, unchecked (a sort
    key: ``unframe`` checks it later)."""
    raw = entry[1]
    if len(raw) < 8:
        return b""
    return raw[8:8 + _unpack_u32(raw, 4)[0]]


def unframe_2(lk: bytes, raw: bytes) -> tuple[bytes, bytes]:
    """``unframe`` for an entry of a format-2 store."""
    body = raw[4:]
    if len(raw) < 4 or _unpack_u32(raw)[0] != _crc(body, _crc(lk)):
        raise ChecksumError(lk)
    if lk[:1] == SHORT:
        return lk[1:], body
    n = _unpack_u32(body)[0] if len(body) >= 4 else -1
    if not 0 <= n <= len(body) - 4 or lk[:1] != b"\x01":
        raise ChecksumError(lk)
    return body[4:4 + n], body[4 + n:]
