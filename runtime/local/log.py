"""The storage of the embedded local system: a partitioned log on local disk, in one LMDB environment.

A tiny Kafka: named streams with a fixed number of partitions, each an append-only sequence of
``(key, value, headers)`` records at contiguous offsets from 0, plus a small metadata keyspace
for checkpoints. Several processes may use one log at the same time (a job and a CLI ``load``):
every call is one LMDB transaction, and nothing read from the file is cached across calls.

Layout, in named databases of the environment:

* ``streams``: stream id -> msgpack ``{"partitions": n}``.
* ``log``: one entry per appended batch (a "segment"), or several for a batch larger than
  one of LMDB's pages (eight for records over an eighth of a page: ``runtime.local.segments``,
  ``segment_limit``). The key is the stream id, ``0x00``, the
  partition as 4 bytes big-endian and the segment's first offset as 8 bytes big-endian, so the
  segments of a partition are contiguous and sorted by offset. The value is one msgpack
  encoding of ``(timestamp_ms, [(key, value, headers), ...])``. A segment's record count is
  read from the msgpack array header without decoding the records.

  A *compacted* segment (``runtime.local.compaction`` writes them) keeps some records of the offsets
  it covers: ``(span, timestamp_ms, [offset - first, ...], [(key, value, headers), ...])``, the
  records at the given offsets of ``[first, first + span)``, the others gone. Its value starts
  with ``0x94`` (an array of 4), a plain one's with ``0x92``, so logs written before compaction
  existed read as they always did. Segments tile a partition's offsets: each starts where the
  one before it ends.
* ``meta``: str key -> bytes, for checkpoints.

Checksums. A segment is written as ``0xC1`` (a byte msgpack never uses), the CRC-32 of its
encoding followed by its LMDB key (4 bytes, little-endian), then the encoding above; a metadata
value likewise (``0xC1``, the CRC-32 of the value followed by its key, the value). The checksum
is computed as the batch is encoded and verified where a segment's records are decoded, so a
byte changed on disk is an error naming the stream, partition and offset
(``CorruptSegmentError``), never a wrong record. A stream created since then is marked
``checked`` in ``streams``: a segment of it without a checksum is corrupt too. Streams and
metadata written before keep being read as they are (unchecked); what is appended to them now
is checked.

The segment format is ``runtime.local.segments``; the environment a log is open on (shared in a
process, its transactions and errors) is ``runtime.local.log_env``; the metadata keyspace is
``runtime.local.log_meta``.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import lmdb
import msgspec

from runtime.local.log_env import SharedEnv as _Shared
from runtime.local.log_meta import MetaKeyspace

# the segment format, under the names the log's code has always read it by
from runtime.local.segments import CHECKED as _CHECKED
from runtime.local.segments import CHECKED_HEAD as _CHECKED_HEAD
from runtime.local.segments import (
    COMPACTED,
    DECODE_SEGMENT,
    ENCODE,
    PACK_OFFSET,
    UNPACK_OFFSET,
    CorruptSegmentError,
    Encoded,
    Record,
    seal,
    segment_limit,
)
from runtime.local.segments import CRC as _CRC
from runtime.local.segments import CRC32 as _crc
from runtime.local.segments import DECODE_COMPACTED as _DECODE_COMPACTED
from runtime.local.segments import DECODE_INFO as _DECODE_INFO
from runtime.local.segments import ENCODE_INTO as _encode_into
from runtime.local.segments import LAST as _LAST
from runtime.local.segments import MAX_OFFSET as _MAX_OFFSET
from runtime.local.segments import U32 as _U32
from runtime.local.segments import StreamInfo as _StreamInfo
from runtime.local.segments import sealed as _sealed
from runtime.local.segments import segment_count as _segment_count
from runtime.local.segments import segment_kind as _kind
from runtime.local.segments import segment_ts as _segment_ts
from samza_dsl.errors import SamzaError

__all__ = ["LocalLog"]


def _record_bytes(record: Record) -> int:
    """About the bytes a record takes in a segment (its key, value, headers, and msgpack's
    headers for them)."""
    key, value, headers = record
    n = 6 + len(key or b"") + len(value or b"")
    if headers is None:
        return n
    if headers.__class__ is int:
        return n + 9
    for hk, hv in cast(tuple[tuple[str, bytes], ...], headers):
        n += len(hk) + len(hv) + 6
    return n

_STREAM_ID = re.compile(r"[A-Za-z0-9._-]{1,249}")
#: a trim lets go of the pages its deletes mapped in every this many deleted segments
_TRIM_RELEASE = 16
_BYTES_LIKE = (bytes, bytearray, memoryview)


class LocalLog(MetaKeyspace):
    """A partitioned, persistent, multi-process log in one LMDB environment.

    Open it on a directory (created if missing); share it between processes freely. Every
    method is one transaction; appends to several partitions at once go through
    ``append_many``. Close it (or use it as a context manager) when done.
    """

    def __init__(self, path: str | os.PathLike[str], *, map_size: int = 1 << 36,
                 cap_key: str | None = None) -> None:
        #: the bytes of the batches this handle appended (encoded), for the producer's metrics
        self.appended_bytes = 0
        # the last compacted segment ``read`` decoded: (key, value, (offsets, records))
        self._compacted_cache: tuple[bytes, bytes, tuple[list[int], list[Any]]] | None = None
        #: partition key prefix -> whether its stream's segments all carry checksums
        self._strict: dict[bytes, bool] = {}
        super().__init__(path, map_size=map_size, cap_key=cap_key)

    def _partitions_in(self, txn: Any, shared: _Shared, stream: str) -> int | None:
        info = self._info_in(txn, shared, stream)
        return None if info is None else info.partitions

    def _info_in(self, txn: Any, shared: _Shared, stream: str) -> _StreamInfo | None:
        raw = txn.get(stream.encode(), db=shared.streams)
        if raw is None:
            return None
        try:
            return _DECODE_INFO(raw)
        except msgspec.DecodeError as e:
            raise SamzaError(
                f"the description of stream {stream!r} in the local log at {self.path} is "
                f"corrupt ({e}); delete the stream (reset) or the log directory"
            ) from e

    def _prefix(self, txn: Any, shared: _Shared, stream: str, partition: int) -> bytes:
        """The key prefix of a partition's segments; checks that it exists."""
        info = self._info_in(txn, shared, stream)
        if info is None:
            raise SamzaError(
                f"unknown stream {stream!r} in the local log at {self.path}; "
                f"create it first with create({stream!r}, partitions)"
            )
        n = info.partitions
        if partition.__class__ is not int or not 0 <= partition < n:
            raise SamzaError(
                f"partition {partition!r} is out of range for stream {stream!r}, which has {n} "
                f"partition{'s' if n != 1 else ''} (0..{n - 1}) in the local log at {self.path}"
            )
        prefix = stream.encode() + b"\x00" + _U32.pack(partition)
        self._strict[prefix] = info.checked
        return prefix

    def _end(self, cur: Any, prefix: bytes) -> int:
        """The next offset of a partition: its last segment's first offset plus its count."""
        found = cur.set_range(prefix + _LAST)
        if not (cur.prev() if found else cur.last()):
            return 0
        key = bytes(cur.key())
        n = len(prefix)
        if key[:n] != prefix:
            return 0
        return UNPACK_OFFSET(key[n:])[0] + self._count(cur.value(), prefix, key)

    def _count(self, value: Any, prefix: bytes, key: bytes) -> int:
        try:
            return _segment_count(value)
        except (IndexError, KeyError, ValueError) as e:
            raise self._corrupt_segment(prefix, key, e, value) from e

    def _corrupt_segment(self, prefix: bytes, key: bytes, exc: BaseException | None,
                         value: Any = b"", cur: Any = None) -> CorruptSegmentError:
        """The error for a segment that fails its checksum (``exc`` None) or its decoding;
        with ``cur`` on it, the offsets it covers come from where the next segment starts."""
        stream = prefix[:-5].decode(errors="replace")
        partition = _U32.unpack(prefix[-4:])[0]
        offset = UNPACK_OFFSET(key[len(prefix) :])[0]
        span: int | None = None
        if cur is not None and cur.next() and bytes(cur.key()[: len(prefix)]) == prefix:
            span = UNPACK_OFFSET(cur.key()[len(prefix):])[0] - offset
        elif value:
            with contextlib.suppress(IndexError, KeyError, ValueError):
                span = _segment_count(value)
        held = f" (offsets {offset} to {offset + span - 1})" if span else ""
        if exc is None:
            why = ("fails its checksum: its bytes changed on disk (a failing disk, a file "
                   "edited or copied in part)")
        else:
            why = (f"cannot be decoded ({type(exc).__name__}: {exc}); it holds records that "
                   f"are not (bytes|None, bytes|None, headers|None) or the file is corrupt")
        return CorruptSegmentError(
            f"the segment at offset {offset} of stream {stream!r} partition {partition}{held} in "
            f"the local log at {self.path} {why}. Restore the log directory from another copy, or delete the "
            f"stream (`samza-dsl reset` for a job's own streams; an input must be loaded again)",
            stream=stream, partition=partition, offset=offset, span=span, raw=bytes(value))

    def segment_body(self, value: Any, prefix: bytes, key: bytes, cur: Any = None) -> Any:
        """A stored segment's encoding, its checksum verified (``CorruptSegmentError``)."""
        if value[0] == _CHECKED:
            if not _sealed(value, key):
                raise self._corrupt_segment(prefix, key, None, value, cur)
            return value[_CHECKED_HEAD:]
        if self._strict.get(prefix):
            raise self._corrupt_segment(prefix, key, None, value, cur)
        return value

    def _segment_records(self, value: Any, prefix: bytes, key: bytes, cur: Any) -> list[Any]:
        """A plain segment's records, its checksum verified (``CorruptSegmentError``, naming the
        offsets it covers from ``cur``, on it).

        The checksum is computed after the records are decoded, from the bytes the decoding
        just brought into the CPU's caches: computed first, it reads each segment from memory
        once more, which costs a job reading its input at a million messages a second a few
        percent. No record is handed out before it passes; a segment that fails both is
        reported as failing its checksum."""
        checked = value[0] == _CHECKED
        if not checked and self._strict.get(prefix):
            raise self._corrupt_segment(prefix, key, None, value, cur)
        try:
            records: list[Any] = DECODE_SEGMENT(value[_CHECKED_HEAD:] if checked else value)[1]
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            failed = checked and not _sealed(value, key)
            raise self._corrupt_segment(prefix, key, None if failed else e, value, cur) from e
        if checked and not _sealed(value, key):
            raise self._corrupt_segment(prefix, key, None, value, cur)
        return records

    # ------------------------------------------------------------------ streams

    def create(self, stream: str, partitions: int) -> None:
        """Create a stream with ``partitions`` partitions; a no-op if it exists with that count."""
        if not isinstance(stream, str) or not _STREAM_ID.fullmatch(stream):
            raise SamzaError(
                f"invalid stream id {stream!r} for the local log at {self.path}: use 1 to 249 of "
                f"the characters A-Z a-z 0-9 . _ -"
            )
        if partitions.__class__ is not int or not 1 <= partitions < (1 << 32):
            raise SamzaError(
                f"stream {stream!r} needs a partition count from 1 to 2**32-1, got {partitions!r}"
            )
        shared = self._live()
        try:
            with self._begin(shared, write=True) as txn:
                n = self._partitions_in(txn, shared, stream)
                if n is None:
                    txn.put(stream.encode(), ENCODE(_StreamInfo(partitions, checked=True)),
                            db=shared.streams)
                elif n != partitions:
                    raise SamzaError(
                        f"stream {stream!r} already exists in the local log at {self.path} with "
                        f"{n} partitions, not {partitions}; use {n} partitions, or delete the "
                        f"stream (reset) to re-create it with {partitions}"
                    )
        except lmdb.Error as e:
            raise self._lmdb_error(e, f"creating stream {stream!r}") from e

    def partitions(self, stream: str) -> int | None:
        """The partition count of ``stream``, or None if it does not exist."""
        shared = self._live()
        try:
            with self._begin(shared) as txn:
                return self._partitions_in(txn, shared, stream)
        except lmdb.Error as e:
            raise self._lmdb_error(e, f"reading stream {stream!r}") from e

    def streams(self) -> dict[str, int]:
        """Every stream and its partition count."""
        shared = self._live()
        try:
            with self._begin(shared) as txn:
                return {
                    bytes(k).decode(): _DECODE_INFO(v).partitions
                    for k, v in txn.cursor(shared.streams)
                }
        except lmdb.Error as e:
            raise self._lmdb_error(e, "listing streams") from e

    def delete_stream(self, stream: str) -> None:
        """Drop ``stream`` and all its records (a no-op if it does not exist)."""
        shared = self._live()
        pfx = stream.encode() + b"\x00"
        n = len(pfx)
        try:
            with self._begin(shared, write=True) as txn:
                txn.delete(stream.encode(), db=shared.streams)
                cur = txn.cursor(shared.log)
                if cur.set_range(pfx):
                    while bytes(cur.key()[:n]) == pfx and cur.delete():
                        pass
        except lmdb.Error as e:
            raise self._lmdb_error(e, f"deleting stream {stream!r}") from e

    # ------------------------------------------------------------------ records

    def append(
        self,
        stream: str,
        partition: int,
        records: Sequence[Record],
        timestamp_ms: int | None = None,
    ) -> int:
        """Append ``records`` to one partition in one transaction; the offset of the first."""
        return self.append_many({(stream, partition): records}, timestamp_ms)[(stream, partition)]

    def append_many(
        self,
        batches: Mapping[tuple[str, int], Sequence[Record]],
        timestamp_ms: int | None = None,
    ) -> dict[tuple[str, int], int]:
        """Append a batch to each of several partitions, all in ONE transaction.

        Returns the offset of each batch's first record (for an empty batch, which writes
        nothing, the partition's end offset). Records are ``(key, value, headers)`` with
        key and value bytes or None and headers None or a tuple of ``(str, bytes)``. Only the
        first and last record of each batch are checked: a batch with a malformed record in
        the middle is stored, and reading it raises SamzaError."""
        firsts = self.append_batches([(s, p, r) for (s, p), r in batches.items()], timestamp_ms)
        return dict(zip(batches, firsts, strict=True))

    def append_batches(
        self,
        batches: Sequence[tuple[str, int, Sequence[Record]]],
        timestamp_ms: int | None = None,
        *,
        meta: Callable[[Callable[[str, int], int]], Mapping[str, bytes]] | None = None,
    ) -> list[int]:
        """Append ``(stream, partition, records)`` batches in ONE transaction: all or none of
        them. A partition may come several times (each batch is one or more segments, in order). Returns
        each batch's first offset; see ``append_many``.

        ``meta``, when given, is called inside that transaction, after the appends, with
        ``end(stream, partition)`` (a partition's end offset as the transaction sees it); the
        metadata keys and values it returns are written in the same transaction (an
        exactly-once commit: outputs, changelog entries and the checkpoint that holds their
        positions, together or not at all)."""
        ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        # Encode outside the write transaction: it holds the log's one write lock, for every process.
        encode = self.encode_batch
        parts = [encode(s, p, r, ts) for s, p, r in batches]
        if all(len(segments) == 1 for segments in parts):
            return self.append_encoded([segments[0] for segments in parts], meta=meta)
        firsts = self.append_encoded([seg for segments in parts for seg in segments], meta=meta)
        out, i = [], 0
        for segments in parts:  # a batch's first offset is its first segment's
            out.append(firsts[i])
            i += len(segments)
        return out

    def encode_batch(self, stream: str, partition: int, records: Sequence[Record],
                     timestamp_ms: int) -> list[Encoded]:
        """A batch of records encoded as the segments ``append_encoded`` stores
        (``append_batches`` does both): one, or for a larger batch several, in order, of
        ``segment_limit`` bytes at most each (one page; eight for records over an eighth of a
        page). A batch may be encoded long before it is appended (an exactly-once task's
        records, which wait for its commit): it holds no lock, and the records' bytes are then
        held once, compactly."""
        if not records:
            return [(stream, partition, None, 0)]
        if records.__class__ is not list and records.__class__ is not tuple:
            records = list(records)
        self._check_record(records[0], stream, partition)
        self._check_record(records[-1], stream, partition)
        n = len(records)
        # whole if its first and last records' sizes say it fits; else parts of about ``full``
        # bytes by the sizes of the records encoded so far; a part still too large is cut again
        size = (_record_bytes(records[0]) + _record_bytes(records[-1])) // 2
        limit = segment_limit(size)
        full = limit * 15 // 16  # the bytes a segment cut from a larger batch aims at
        step = n if n * size <= limit else full // size
        out: list[Encoded] = []
        i = 0
        while i < n:
            j = min(n, i + max(step, 1))
            value = self._segment(stream, partition, records if j - i == n else records[i:j],
                                  timestamp_ms)
            while len(value) > limit and j - i > 1:
                j = i + max(1, min(j - i - 1, (j - i) * full // len(value)))
                value = self._segment(stream, partition, records[i:j], timestamp_ms)
            out.append(self._sealed_body(stream, partition, value))
            step = (j - i) * full // len(value)
            i = j
        return out

    def _segment(self, stream: str, partition: int, records: Sequence[Record],
                 timestamp_ms: int) -> bytearray:
        """One segment's encoding of ``records``, with room for its checksum first."""
        value = bytearray(_CHECKED_HEAD)
        try:
            _encode_into((timestamp_ms, records), value, _CHECKED_HEAD)
        except (TypeError, OverflowError, ValueError) as e:
            raise SamzaError(
                f"cannot encode a batch for stream {stream!r} partition {partition} of the "
                f"local log at {self.path}: {e}; records must be (bytes|None, bytes|None, "
                f"tuple[(str, bytes), ...]|None) and timestamp_ms an int"
            ) from e
        return value

    @staticmethod
    def _sealed_body(stream: str, partition: int, value: bytearray) -> Encoded:
        """A segment ready to append: the checksum of its encoding, computed now, outside the
        log's write lock (``append_encoded`` adds its key's share)."""
        value[0] = _CHECKED
        return (stream, partition, value, _crc(memoryview(value)[_CHECKED_HEAD:]))

    def append_encoded(
        self,
        encoded: Sequence[Encoded],
        *,
        meta: Callable[[Callable[[str, int], int]], Mapping[str, bytes]] | None = None,
    ) -> list[int]:
        """Append batches ``encode_batch`` made, in ONE transaction (see ``append_batches``)."""
        shared = self._live()
        size = 0
        for item in encoded:
            if item[2] is not None:
                size += len(item[2])
        self.appended_bytes += size
        out: list[int] = []
        try:
            with self._begin(shared, write=True) as txn:
                cur = txn.cursor(shared.log)
                last: tuple[str, int] | None = None  # the partition appended to just before
                prefix, first = b"", 0
                for stream, partition, payload, crc in encoded:
                    if last is None or last[0] != stream or last[1] != partition:
                        # the segments of a batch cut in parts follow one another
                        prefix = self._prefix(txn, shared, stream, partition)
                        first = self._end(cur, prefix)
                        last = (stream, partition)
                    if payload is None:
                        out.append(first)
                        continue
                    key = prefix + PACK_OFFSET(first)
                    _CRC.pack_into(payload, 1, _crc(key, crc))
                    if not cur.put(key, payload, overwrite=False):
                        raise SamzaError(
                            f"a segment already exists at offset {first} of stream {stream!r} "
                            f"partition {partition} in the local log at {self.path}: the log is "
                            f"corrupt; delete the stream (reset) or the log directory"
                        )
                    out.append(first)
                    first += _segment_count(payload)
                if meta is not None:
                    self._put_meta_in(txn, shared, cur, meta)
        except lmdb.Error as e:
            where = ", ".join(sorted({f"{s!r} partition {p}" for s, p, _, _ in encoded}))
            raise self._lmdb_error(e, f"appending to {where}") from e
        shared.pages.read(size)  # an append maps in pages of the file, as a read does
        return out

    def _put_meta_in(self, txn: Any, shared: _Shared, cur: Any,
                     meta: Callable[[Callable[[str, int], int]], Mapping[str, bytes]]) -> None:
        """Write the metadata ``meta(end)`` returns in the open write transaction ``txn``."""
        def end(stream: str, partition: int) -> int:
            return self._end(cur, self._prefix(txn, shared, stream, partition))

        for k, v in meta(end).items():
            raw = self._meta_key(k)
            txn.put(raw, seal(raw, v), db=shared.meta)

    def _check_record(self, record: Any, stream: str, partition: int) -> None:
        try:
            key, value, headers = record
            if not (
                (key is None or key.__class__ in _BYTES_LIKE)
                and (value is None or value.__class__ in _BYTES_LIKE)
                and (headers is None or (headers.__class__ is int and headers >= 0) or all(
                    hk.__class__ is str and hv.__class__ in _BYTES_LIKE for hk, hv in headers
                ))
            ):
                raise TypeError
        except (TypeError, ValueError):
            raise SamzaError(
                f"cannot append {record!r:.200} to stream {stream!r} partition {partition} of "
                f"the local log at {self.path}: a record must be a (key, value, headers) tuple "
                f"with key and value bytes or None and headers None, a tuple of (str, bytes) "
                f"or a record's origin (an int)"
            ) from None

    def end_offset(self, stream: str, partition: int) -> int:
        """The offset the next record appended to the partition will get (0 when empty)."""
        shared = self._live()
        try:
            with self._begin(shared) as txn:
                prefix = self._prefix(txn, shared, stream, partition)
                return self._end(txn.cursor(shared.log), prefix)
        except lmdb.Error as e:
            raise self._lmdb_error(e, f"reading the end of {stream!r} partition {partition}") from e

    def read(
        self, stream: str, partition: int, offset: int, max_records: int, *,
        whole_segments: bool = False,
    ) -> tuple[int, list[Record]]:
        """Up to ``max_records`` records at offsets ``>= offset``, and the first one's offset.
        With ``whole_segments``, the last stored batch read is returned whole, even past
        ``max_records``: a sequential reader then decodes each batch once.

        Reading at or past the end returns ``(offset, [])``; at an offset compaction removed,
        the run of records at consecutive offsets that starts at the next one kept."""
        self._check_read(stream, partition, offset, max_records)
        shared = self._live()
        try:
            with self._begin(shared) as txn:
                prefix = self._prefix(txn, shared, stream, partition)
                if max_records == 0:
                    return offset, []
                return self._read(txn.cursor(shared.log), prefix, offset, max_records,
                                  whole_segments)
        except lmdb.Error as e:
            raise self._lmdb_error(
                e, f"reading {stream!r} partition {partition} at offset {offset}"
            ) from e

    def _check_read(self, stream: str, partition: int, offset: int, max_records: int) -> None:
        if offset.__class__ is not int or not 0 <= offset <= _MAX_OFFSET:
            raise SamzaError(
                f"cannot read stream {stream!r} partition {partition} of the local log at "
                f"{self.path} at offset {offset!r}: offsets are ints from 0"
            )
        if max_records.__class__ is not int or max_records < 0:
            raise SamzaError(
                f"cannot read stream {stream!r} partition {partition} of the local log at "
                f"{self.path}: max_records must be an int >= 0, got {max_records!r}"
            )

    def _read(
        self, cur: Any, prefix: bytes, offset: int, max_records: int, whole: bool = False
    ) -> tuple[int, list[Record]]:
        n = len(prefix)
        if not self._seek(cur, prefix, offset):
            return offset, []
        start = -1
        out: list[Record] = []
        read_bytes = 0
        while True:
            key = bytes(cur.key())
            if key[:n] != prefix:
                break
            seg_first = UNPACK_OFFSET(key[n:])[0]
            value = cur.value()
            if start < 0:
                if seg_first + self._count(value, prefix, key) <= offset:  # ends before offset
                    if not cur.next():
                        break
                    continue
                if _kind(value) == COMPACTED:
                    run = self._compacted_run(value, prefix, key, seg_first, offset,
                                              max_records, whole)
                    if run is not None:
                        return run
                    if not cur.next():
                        break
                    continue
                skip = offset - seg_first if offset > seg_first else 0
                start = seg_first + skip
            else:
                if _kind(value) == COMPACTED:  # its records do not follow on: the run ends here
                    break
                skip = 0
            records = self._segment_records(value, prefix, key, cur)
            read_bytes += len(value)
            need = len(records) if whole else max_records - len(out)
            if not out and skip == 0 and len(records) <= need:
                out = records  # the common case: a whole segment, no copy
            else:
                out.extend(records[skip : skip + need])
            if len(out) >= max_records or not cur.next():
                break
            if whole:  # the segments that follow, read whole: the common case, inline
                more, done = self._whole_run(cur, prefix, out, max_records)
                read_bytes += more
                if done:
                    break
        if self._shared is not None:
            self._shared.pages.read(read_bytes)
        if start < 0:
            return offset, []
        return start, out

    def _whole_run(self, cur: Any, prefix: bytes, out: list[Record], max_records: int
                   ) -> tuple[int, bool]:
        """``_read`` of the checked plain segments of the partition from ``cur`` on, each
        whole, into ``out``, until it holds ``max_records``: the bytes read, and whether the read
        is done (False: ``cur`` is on a segment to read the general way)."""
        n = len(prefix)
        read_bytes = 0
        decode, crc, head, checked = DECODE_SEGMENT, _crc, _CHECKED_HEAD, _CHECKED
        extend = out.extend
        while True:
            key = cur.key()
            if key[:n] != prefix:
                return read_bytes, True
            value = cur.value()
            if value[0] != checked or len(value) <= head or value[head] == COMPACTED:
                return read_bytes, False
            body = value[head:]
            try:
                records = decode(body)[1]
            except (msgspec.DecodeError, msgspec.ValidationError):
                return read_bytes, False  # named the general way
            if _CRC.unpack_from(value, 1)[0] != crc(key, crc(body)):
                return read_bytes, False
            extend(records)
            read_bytes += len(value)
            if len(out) >= max_records or not cur.next():
                return read_bytes, True

    def _seek(self, cur: Any, prefix: bytes, offset: int) -> bool:
        """Puts ``cur`` on the segment holding ``offset``, or the one before the first segment
        after it; False when the log has no segment at all from there."""
        target = prefix + PACK_OFFSET(offset)
        if cur.set_range(target):
            if bytes(cur.key()) != target:
                # The segment holding `offset` starts before it: step back one, if it is ours.
                if not cur.prev():
                    cur.first()
                elif bytes(cur.key()[: len(prefix)]) != prefix:
                    cur.next()
            return True
        return bool(cur.last())  # no key at or after target: the partition's last segment may hold it

    def _decode_compacted(self, value: Any, prefix: bytes, key: bytes
                          ) -> tuple[int, int, list[int], list[Any]]:
        try:
            return _DECODE_COMPACTED(self.segment_body(value, prefix, key))
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise self._corrupt_segment(prefix, key, e, value) from e

    def _compacted_run(
        self, value: Any, prefix: bytes, key: bytes, seg_first: int, offset: int,
        max_records: int, whole: bool,
    ) -> tuple[int, list[Record]] | None:
        """``read`` in a compacted segment: the run of records at consecutive offsets that
        starts at the first one kept at or after ``offset`` (None: none is). A reader of a
        compacted part gets a run per call, so the last segment decoded is kept while its bytes
        stay the same."""
        raw = bytes(value)
        cached = self._compacted_cache
        if cached is not None and cached[0] == key and cached[1] == raw:
            deltas, records = cached[2]
        else:
            _, _, deltas, records = self._decode_compacted(value, prefix, key)
            self._compacted_cache = (key, raw, (deltas, records))
        i = bisect_left(deltas, offset - seg_first)
        if i == len(deltas):
            return None
        limit = len(deltas) if whole else i + max_records
        j, d = i + 1, deltas[i]
        while j < limit and j < len(deltas) and deltas[j] == d + (j - i):
            j += 1
        return seg_first + d, records[i:j]

    def read_with_offsets(
        self, stream: str, partition: int, offset: int, max_records: int
    ) -> tuple[Sequence[int], list[Record]]:
        """Up to ``max_records`` records at offsets ``>= offset``, with each one's offset: a
        ``range`` when they are consecutive, else a list. Unlike ``read``, it goes on past
        offsets that compaction removed, so a compacted partition reads in few calls.

        Reading at or past the end returns ``(range(offset, offset), [])``."""
        self._check_read(stream, partition, offset, max_records)
        shared = self._live()
        try:
            with self._begin(shared) as txn:
                prefix = self._prefix(txn, shared, stream, partition)
                return self._read_offsets(txn.cursor(shared.log), prefix, offset, max_records)
        except lmdb.Error as e:
            raise self._lmdb_error(
                e, f"reading {stream!r} partition {partition} at offset {offset}"
            ) from e

    def _read_offsets(
        self, cur: Any, prefix: bytes, offset: int, max_records: int
    ) -> tuple[Sequence[int], list[Record]]:
        n = len(prefix)
        empty: tuple[Sequence[int], list[Record]] = (range(offset, offset), [])
        if max_records == 0:
            return empty
        if not self._seek(cur, prefix, offset):
            return empty
        offsets: list[int] | None = None  # None while the records read are consecutive
        first = -1
        out: list[Record] = []
        read_bytes = 0
        while len(out) < max_records:
            key = bytes(cur.key())
            if key[:n] != prefix:
                break
            seg_first = UNPACK_OFFSET(key[n:])[0]
            value = cur.value()
            if seg_first + self._count(value, prefix, key) > offset:
                need = max_records - len(out)
                if _kind(value) == COMPACTED:
                    _, _, deltas, kept = self._decode_compacted(value, prefix, key)
                    i = bisect_left(deltas, offset - seg_first)
                    took = [seg_first + d for d in deltas[i : i + need]]
                    if took:
                        if offsets is None:
                            offsets = list(range(first, first + len(out)))
                        offsets += took
                        if first < 0:
                            first = took[0]
                        out.extend(kept[i : i + need])
                else:
                    skip = offset - seg_first if offset > seg_first else 0
                    records = self._segment_records(value, prefix, key, cur)
                    read_bytes += len(value)
                    took_records = (records if skip == 0 and len(records) <= need
                                    else records[skip : skip + need])
                    at = seg_first + skip
                    if first < 0:
                        first = at
                    elif offsets is None and at != first + len(out):  # a gap
                        offsets = list(range(first, first + len(out)))
                    if offsets is not None:
                        offsets += range(at, at + len(took_records))
                    if out:
                        out.extend(took_records)
                    else:
                        out = took_records  # the common case: a whole segment, no copy
            if not cur.next():
                break
        if self._shared is not None:
            self._shared.pages.read(read_bytes)
        if not out:
            return empty
        return (range(first, first + len(out)) if offsets is None else offsets), out

    # ------------------------------------------------------------------ trimming

    def start_offset(self, stream: str, partition: int) -> int:
        """The first offset the partition still holds: where its first segment starts (its end
        offset when it is empty). Reading below it reads from it."""
        shared = self._live()
        try:
            with self._begin(shared) as txn:
                prefix = self._prefix(txn, shared, stream, partition)
                cur = txn.cursor(shared.log)
                if cur.set_range(prefix) and bytes(cur.key()[: len(prefix)]) == prefix:
                    return int(UNPACK_OFFSET(cur.key()[len(prefix):])[0])
                return 0
        except lmdb.Error as e:
            raise self._lmdb_error(e, f"reading the start of {stream!r} partition {partition}"
                                   ) from e

    def segments(self, stream: str, partition: int, before_ms: int | None = None
                 ) -> list[tuple[int, int, int, int]]:
        """``(first offset, offsets covered, timestamp ms, bytes)`` of each segment of the
        partition, in order, from their headers alone (no record is decoded). ``before_ms``:
        those before the first whose timestamp is at or after it."""
        shared = self._live()
        out: list[tuple[int, int, int, int]] = []
        try:
            with self._begin(shared) as txn:
                prefix = self._prefix(txn, shared, stream, partition)
                n = len(prefix)
                cur = txn.cursor(shared.log)
                if not cur.set_range(prefix):
                    return out
                for key, value in cur:
                    if bytes(key[:n]) != prefix:
                        break
                    k = bytes(key)
                    try:
                        ts = _segment_ts(value)
                    except (IndexError, KeyError) as e:
                        raise self._corrupt_segment(prefix, k, e, value) from e
                    if before_ms is not None and ts >= before_ms:
                        break
                    out.append((UNPACK_OFFSET(k[n:])[0], self._count(value, prefix, k), ts,
                                len(k) + len(value)))
        except lmdb.Error as e:
            raise self._lmdb_error(e, f"reading the segments of {stream!r} partition "
                                   f"{partition}") from e
        return out

    def trim(self, stream: str, partition: int, below: int) -> int:
        """Delete the partition's segments that lie entirely below offset ``below``, in one
        transaction; how many offsets the partition no longer holds because of it. Offsets
        never change; the last segment always stays (it holds the end offset), so a trimmed
        partition's start is at most its last segment's first offset."""
        shared = self._live()
        pages = shared.pages
        gone = deleted = 0
        try:
            with self._begin(shared, write=True) as txn:
                prefix = self._prefix(txn, shared, stream, partition)
                n = len(prefix)
                cur = txn.cursor(shared.log)
                if not cur.set_range(prefix):
                    return 0
                while True:
                    key = bytes(cur.key())
                    if key[:n] != prefix:
                        break
                    first = UNPACK_OFFSET(key[n:])[0]
                    span = self._count(cur.value(), prefix, key)
                    if first + span > below:
                        break
                    if not cur.next() or bytes(cur.key()[:n]) != prefix:
                        break  # the last segment: it stays
                    txn.delete(key, db=shared.log)
                    gone += span
                    deleted += 1
                    if not deleted % _TRIM_RELEASE:  # deletes map in the pages they free
                        pages.release()
        except lmdb.Error as e:
            raise self._lmdb_error(e, f"trimming {stream!r} partition {partition} below "
                                   f"offset {below}") from e
        if deleted:
            pages.release()
        return gone
