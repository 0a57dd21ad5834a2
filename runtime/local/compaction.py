"""Compaction of changelog partitions in the local log: the latest record of each key is kept.

A store's changelog only needs, for each key, its last entry: replaying it gives the store. A
partition below a *compaction point* is rewritten as compacted segments (see
``runtime.local.log``) holding only those records, at their own offsets: offsets never change,
so checkpoints and readers keep working, and a restore replays one entry per key instead of
every update the job ever made.

- **Where.** Only below the lowest changelog offset a checkpoint holds for the partition: the
  store's state at every checkpointed offset is unchanged, and the active tail is never touched.
- **How.** As Kafka's log cleaner: the part written since the last pass (the *dirty* part) is
  read into a map of key -> its last offset there; then every segment below the point is
  rewritten keeping a record when no later record of its key is in the map. The part already
  compacted holds each key at most once, so one map of the dirty part's keys is enough. The map
  is bounded (``max_keys``): a pass stops its dirty part at the segment where it fills.
  A compacted segment takes ``segment_limit`` bytes at most (one of LMDB's pages; eight for
  records over an eighth of a page), as an appended one does, so any page a pass or a
  retention frees fits the next segment: a segment of many pages needs as many contiguous free
  pages, and the log's file grew for them (the soak, W9T).
- **Tombstones.** A delete (a None value) is kept while a reader might have seen an older value
  of its key in the same pass over the log: it goes only once a pass that already covered it
  finished at least ``delete_retention_ms`` ago (Kafka's ``delete.retention.ms``).
- **Crash safety.** Each group of segments is replaced in one short write transaction, so the
  log's write lock is held briefly; between two, the partition holds compacted segments, then
  the segments not yet rewritten: a restore gives the same store at any point, and the next pass
  (after a crash) starts over.

- **Expiry.** The changelog of a table with a ``ttl`` on processing time (``app.table(...,
  ttl=...)`` without ``ttl_event_time``) also loses, from its start, the segments appended more
  than the ttl ago (below the compaction point), as a Kafka topic with ``cleanup.policy``
  ``compact,delete`` and ``retention.ms`` = the ttl does: every put in them was written more
  than the ttl ago, so it is expired for every reader (a restore expires it by its write time),
  and every tombstone in them deletes only such puts. So such a changelog holds a ttl's writes
  at most, whatever the compaction passes' pace and ``delete.retention.ms``; without it the
  tombstones of expired keys stay ``delete.retention.ms`` after the pass that covered them, and
  a pass comes only once the part written since the last one is as large as what it kept.
  Event time has no such bound (a record's append time says nothing of its event time).

Pass records live in the log's metadata under ``compaction/<stream>/<partition>``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any, Protocol

import lmdb
import msgspec

from runtime.engine import faults
from runtime.local.log import LocalLog
from runtime.local.retention import retention_point
from runtime.local.segments import (
    CHECKED_HEAD,
    COMPACTED,
    DECODE_SEGMENT,
    ENCODE,
    PACK_OFFSET,
    UNPACK_OFFSET,
    seal,
    segment_limit,
)
from runtime.state.ttl import processing_ttl_ms
from samza_dsl.errors import SamzaError


class CompactedJob(Protocol):
    """What compacting a job's changelogs reads of it (``runtime.local.system.LocalJob``)."""

    @property
    def root(self) -> str: ...
    @property
    def job_name(self) -> str: ...
    @property
    def main_system(self) -> str: ...
    @property
    def plan(self) -> Any: ...
    @property
    def job(self) -> Any: ...
    @property
    def checkpoints(self) -> Any: ...

    def log_of(self, system: str) -> LocalLog: ...
    def job_lock(self) -> Any: ...

__all__ = ["CompactionResult", "compact_partition", "dirty_records", "ChangelogCompactor",
           "DELETE_RETENTION_MS", "DRAIN_SECONDS", "changelog_location", "changelog_partitions",
           "compact_job", "expire_partition"]

log = logging.getLogger("samza_dsl.compaction")

DELETE_RETENTION_MS = 86_400_000  # Kafka's and Samza's default: one day
GROUP_RECORDS = 8_192  # records read per write transaction, at most (plus one segment)
READ_RECORDS = 4_096  # records decoded per read transaction, about (plus one segment)
SEGMENT_RECORDS = 8_192  # records kept per compacted segment, about
#: a compacted segment's encoding besides its records and their offsets, at most: the checksum,
#: the array of 4, the span, the timestamp, and the two arrays' headers
_SEGMENT_HEAD = CHECKED_HEAD + 1 + 9 + 9 + 5 + 5
#: keys in a pass's map, at most: a larger dirty part takes more passes. The map costs about
#: 130 bytes a key (the key, its offset, the dict's entry), so this bounds it near 6.5 MB
MAX_KEYS = 32_768
HELD_RECORDS = 16_384  # dirty records a pass keeps decoded between its two reads, at most
MIN_DIRTY = 10_000  # a background pass needs this many records written since the last one
MIN_DIRTY_RATIO = 0.5  # ... and that share of the records below the compaction point
_PASSES = 32  # pass records kept per partition
DRAIN_SECONDS = 5.0  # a container's last compaction round, at most, as it closes
EXPIRE_SECONDS = 5.0  # a partition's expired segments are looked for at most this often

_STATE = msgspec.msgpack.Decoder(dict[str, Any]).decode
_key = itemgetter(0)


@dataclass
class CompactionResult:
    """What a pass did: the records below ``upto`` before and after, in ``seconds``."""

    stream: str
    partition: int
    upto: int
    records_before: int = 0
    records_after: int = 0
    tombstones_dropped: int = 0
    transactions: int = 0
    seconds: float = 0.0
    done: bool = False  # False: stopped before its end (the next pass starts over)


def expire_partition(lg: LocalLog, stream: str, partition: int, upto: int, ttl_ms: int, *,
                     now_ms: int | None = None) -> int:
    """Deletes the partition's segments appended more than ``ttl_ms`` ago, from its start and
    below ``upto`` (module docstring, *Expiry*); the offsets it no longer holds because of it."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    # Kafka-style retention by time, as inputs and outputs have it, bounded by the point
    older = lg.segments(stream, partition, before_ms=now - ttl_ms)
    below = min(retention_point(older, now, ttl_ms, -1), upto)
    return lg.trim(stream, partition, below) if below > 0 else 0


def _meta_key(stream: str, partition: int) -> str:
    return f"compaction/{stream}/{partition}"


def _state(lg: LocalLog, stream: str, partition: int) -> dict[str, Any]:
    raw = lg.get_meta(_meta_key(stream, partition))
    if raw is None:
        return {"cleaned": 0, "kept": 0, "passes": []}
    try:
        return _STATE(raw)
    except msgspec.DecodeError:  # a lost record only makes the next pass do more work
        log.warning("the compaction record of %s partition %d in %s is unreadable: starting "
                    "over from offset 0", stream, partition, lg.path)
        return {"cleaned": 0, "kept": 0, "passes": []}


class _Seg:
    __slots__ = ("key", "first", "span", "ts", "offsets", "records")

    def __init__(self, key: bytes, first: int, span: int, ts: int, offsets: Sequence[int],
                 records: list[Any]) -> None:
        self.key, self.first, self.span, self.ts = key, first, span, ts
        self.offsets, self.records = offsets, records


def _segments(lg: LocalLog, stream: str, partition: int, start: int, end: int,
              chunk: int = READ_RECORDS) -> Iterator[_Seg]:
    """The whole segments starting at or after ``start`` and ending at or before ``end``,
    decoded, in order; one read transaction per ``chunk`` records or so, none held while the
    caller works on them."""
    pos = start
    while True:
        batch: list[_Seg] = []
        n = 0
        shared = lg._live()
        try:
            with lg._begin(shared) as txn:
                prefix = lg._prefix(txn, shared, stream, partition)
                cur = txn.cursor(shared.log)
                if not cur.set_range(prefix + PACK_OFFSET(pos)):
                    return
                np = len(prefix)
                for key, value in cur:
                    key = bytes(key)
                    if key[:np] != prefix:
                        break
                    first = UNPACK_OFFSET(key[np:])[0]
                    span = lg._count(value, prefix, key)
                    if first + span > end:
                        break
                    body = lg.segment_body(value, prefix, key)
                    if body[0] == COMPACTED:
                        span, ts, deltas, records = lg._decode_compacted(value, prefix, key)
                        offsets: Sequence[int] = [first + d for d in deltas]
                    else:
                        try:
                            ts, records = DECODE_SEGMENT(body)
                        except (msgspec.DecodeError, msgspec.ValidationError) as e:
                            raise lg._corrupt_segment(prefix, key, e) from e
                        offsets = range(first, first + span)
                    batch.append(_Seg(key, first, span, ts, offsets, records))
                    shared.pages.read(len(value))
                    pos = first + span
                    n += len(records) + 1
                    if n >= chunk:
                        break
        except lmdb.Error as e:
            raise lg._lmdb_error(e, f"compacting {stream!r} partition {partition}") from e
        if not batch:
            return
        yield from batch


def _whole_end(lg: LocalLog, stream: str, partition: int, upto: int) -> int:
    """The end of the last whole segment below ``upto`` (0 if none): segments tile offsets."""
    shared = lg._live()
    try:
        with lg._begin(shared) as txn:
            prefix = lg._prefix(txn, shared, stream, partition)
            cur = txn.cursor(shared.log)
            target = prefix + PACK_OFFSET(upto)
            found = cur.set_range(target)
            if found and bytes(cur.key()) == target:
                return upto
            if not (cur.prev() if found else cur.last()):
                return 0
            key = bytes(cur.key())
            if key[: len(prefix)] != prefix:
                return 0
            first = UNPACK_OFFSET(key[len(prefix):])[0]
            end = first + lg._count(cur.value(), prefix, key)
            return end if end <= upto else first
    except lmdb.Error as e:
        raise lg._lmdb_error(e, f"compacting {stream!r} partition {partition}") from e


def dirty_records(lg: LocalLog, stream: str, partition: int, upto: int) -> tuple[int, int]:
    """(records written since the last pass below ``upto``, records the last pass kept)."""
    state = _state(lg, stream, partition)
    cleaned = min(int(state["cleaned"]), upto)
    return max(0, _whole_end(lg, stream, partition, upto) - cleaned), int(state["kept"])


def compact_partition(lg: LocalLog, stream: str, partition: int, upto: int, *,
                      delete_retention_ms: int = DELETE_RETENTION_MS,
                      now_ms: int | None = None, max_keys: int = MAX_KEYS,
                      group_records: int = GROUP_RECORDS, held_records: int = HELD_RECORDS,
                      stop: threading.Event | None = None,
                      pause: Callable[[float], object] | None = None) -> CompactionResult:
    """One pass over ``stream`` partition ``partition`` below offset ``upto`` (see the module
    docstring). ``upto`` must be at most the lowest offset any checkpoint holds for it. A write
    transaction replaces segments of about ``group_records`` records at most; up to
    ``held_records`` records written since the last pass are decoded once for both reads. Between
    two write transactions, ``stop`` ends the pass early and ``pause(seconds the transaction
    took)`` may sleep to leave the log to others."""
    t0 = time.perf_counter()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    result = CompactionResult(stream, partition, upto)
    state = _state(lg, stream, partition)
    end = _whole_end(lg, stream, partition, upto)
    scan = _scan_dirty(lg, stream, partition, min(int(state["cleaned"]), end), end,
                       max_keys=max_keys, held_records=held_records, stop=stop)
    if scan is not None:
        latest, dirty, end = scan
        if dirty:  # the part before the dirty one from the log, then the dirty one as read
            segments: Iterator[_Seg] = chain(
                _segments(lg, stream, partition, 0, dirty[0].first), dirty)
        else:
            segments = _segments(lg, stream, partition, 0, end)
        rewrite = _Rewrite(lg, stream, partition, result, pause)
        if rewrite.run(segments, latest, _horizon(state, now, delete_retention_ms),
                       group_records, stop):
            _record_pass(lg, stream, partition, state, now, end, result.records_after,
                         delete_retention_ms)
            result.upto = end
            result.done = True
    result.seconds = time.perf_counter() - t0
    return result


def _scan_dirty(lg: LocalLog, stream: str, partition: int, cleaned: int, end: int, *,
                max_keys: int, held_records: int, stop: threading.Event | None
                ) -> tuple[dict[Any, int], list[_Seg] | None, int] | None:
    """The first read of a pass, over the part written since the last one (from ``cleaned`` to
    ``end``): its keys and their last offsets there (records without a key are all kept, so
    they are not among them), its segments while they hold at most ``held_records`` records
    (read and decoded once for both reads), and the end of the part the pass covers (earlier
    than ``end`` once ``max_keys`` keys are seen). None if ``stop`` ended the pass."""
    latest: dict[Any, int] = {}
    dirty: list[_Seg] | None = []
    held = 0
    for seg in _segments(lg, stream, partition, cleaned, end):
        if stop is not None and stop.is_set():
            return None
        latest.update(zip(map(_key, seg.records), seg.offsets, strict=True))
        if dirty is not None:
            held += len(seg.records)
            dirty.append(seg)
            if held > held_records:
                dirty = None
        if len(latest) >= max_keys:
            end = seg.first + seg.span
            break
    latest.pop(None, None)
    return latest, dirty, end


def _horizon(state: dict[Any, Any], now: int, delete_retention_ms: int) -> int:
    """The offset below which tombstones can go: the furthest a pass reached at least
    ``delete_retention_ms`` ago (0 if none did)."""
    return max((p_upto for p_time, p_upto in state["passes"]
                if p_time <= now - delete_retention_ms), default=0)


class _Rewrite:
    """The second read of a pass: every segment up to its end in groups of about
    ``group_records`` records, each group replaced by one compacted segment of the records it
    keeps, in one write transaction."""

    def __init__(self, lg: LocalLog, stream: str, partition: int, result: CompactionResult,
                 pause: Callable[[float], object] | None) -> None:
        self.lg, self.stream, self.partition = lg, stream, partition
        self.result, self.pause = result, pause
        self.group: list[_Seg] = []
        self.kept: list[tuple[int, Any]] = []  # the group's records to keep, with their offsets
        self.busy = time.perf_counter()  # since the last pause

    def run(self, segments: Iterator[_Seg], latest: dict[Any, int], horizon: int,
            group_records: int, stop: threading.Event | None) -> bool:
        """Keeps a keyed record only at its key's last offset in ``latest`` (or later) and a
        tombstone only from ``horizon`` on; False if ``stop`` ended it."""
        get = latest.get
        group, kept = self.group, self.kept
        scanned = size = 0
        for seg in segments:
            if stop is not None and stop.is_set():
                return False
            survivors = [(o, r) for o, r in zip(seg.offsets, seg.records, strict=True)
                         if get(r[0], -1) <= o]
            if horizon and seg.first < horizon:
                n = len(survivors)
                survivors = [(o, r) for o, r in survivors if r[1] is not None or o >= horizon]
                self.result.tombstones_dropped += n - len(survivors)
            base = group[0].first if group else seg.first
            grows = sum(_size(k, base) for k in survivors)
            room = segment_limit(grows // (len(survivors) or 1)) - _SEGMENT_HEAD
            if group and size + grows > room:  # the group's segment is full
                self.flush()
                scanned = size = 0
            group.append(seg)
            kept += survivors
            scanned += len(seg.records)
            size += grows
            if scanned >= group_records or len(kept) >= SEGMENT_RECORDS:
                self.flush()
                scanned = size = 0
        if group:
            self.flush()
        return True

    def flush(self) -> None:
        """Replaces the group with its kept records, unless that changes nothing."""
        group, kept, result = self.group, self.kept, self.result
        before = sum(len(s.records) for s in group)
        result.records_before += before
        result.records_after += len(kept)
        if len(group) > 1 or len(kept) < before:  # else it is unchanged: leave it
            first = group[0].first
            end = group[-1].first + group[-1].span
            ts = max(s.ts for s in group)
            pieces = _pieces(kept, first)
            # each piece covers the offsets from its first record's (the group's first, for the
            # first piece) to the next piece's first
            starts = [first, *(piece[0][0] for piece in pieces[1:])]
            ends = [*starts[1:], end]
            prefix = group[0].key[:-8]
            segments = [(prefix + PACK_OFFSET(a), ENCODE((b - a, ts, [o - a for o, _ in piece],
                                                          [r for _, r in piece])))
                        for a, b, piece in zip(starts, ends, pieces, strict=True)]
            _replace(self.lg, self.stream, self.partition, [s.key for s in group], segments)
            result.transactions += 1
            if faults.ARMED:
                faults.reached("compaction.transaction")
            if self.pause is not None:
                self.pause(time.perf_counter() - self.busy)
                self.busy = time.perf_counter()
        group.clear()
        kept.clear()


def _size(kept: tuple[int, Any], base: int) -> int:
    """The bytes a kept record takes in a compacted segment whose first offset is ``base`` or
    later, at most: its offset from there, its key, its value and its headers, with msgpack's
    headers."""
    offset, (key, value, headers) = kept
    delta = offset - base
    n = 1 + (1 if delta < 0x80 else 2 if delta < 0x100 else 3 if delta < 0x10000 else 5)
    n += _bin(key) + _bin(value)
    if headers is None:
        return n + 1
    if headers.__class__ is int:
        return n + 9
    return n + 5 + sum(6 + len(k.encode()) + _bin(v) for k, v in headers)


def _bin(data: bytes | None) -> int:
    """The bytes msgpack takes for ``data`` (a bin, or nil)."""
    if data is None:
        return 1
    n = len(data)
    return n + (2 if n < 0x100 else 3 if n < 0x10000 else 5)


def _pieces(kept: list[tuple[int, Any]], base: int) -> list[list[tuple[int, Any]]]:
    """``kept`` (at offsets from ``base`` on) cut, in order, into the records of segments of
    ``segment_limit`` bytes at most each (one record larger than that alone); one empty piece
    when nothing is kept."""
    sizes = [_size(record, base) for record in kept]
    room = segment_limit(sum(sizes) // (len(sizes) or 1)) - _SEGMENT_HEAD
    pieces: list[list[tuple[int, Any]]] = [[]]
    size = 0
    for record, grows in zip(kept, sizes, strict=True):
        if pieces[-1] and size + grows > room:
            pieces.append([])
            size = 0
        pieces[-1].append(record)
        size += grows
    return pieces


def _record_pass(lg: LocalLog, stream: str, partition: int, state: dict[Any, Any], now: int,
                 end: int, kept: int, delete_retention_ms: int) -> None:
    """Writes down a finished pass: where it ended, the records it kept, and the passes that
    give the tombstone horizon (the one giving it now, those that may give a later one, this
    one)."""
    old = [p for p in state["passes"] if p[0] <= now - delete_retention_ms]
    passes = [max(old, key=lambda p: p[1])] if old else []
    passes += [p for p in state["passes"] if p[0] > now - delete_retention_ms]
    passes.append([now, end])
    lg.put_meta(_meta_key(stream, partition), ENCODE(
        {"cleaned": end, "kept": kept, "passes": passes[-_PASSES:]}))


def _replace(lg: LocalLog, stream: str, partition: int, keys: list[bytes],
             segments: list[tuple[bytes, bytes]]) -> None:
    """One write transaction: the segments at ``keys`` become the compacted ``segments``, (key,
    encoding) pairs, the first at the first key."""
    shared = lg._live()
    try:
        with lg._begin(shared, write=True) as txn:
            for key in keys:
                if txn.get(key, db=shared.log) is None:
                    raise SamzaError(
                        f"a segment of stream {stream!r} partition {partition} in the local log "
                        f"at {lg.path} went away during its compaction: another process "
                        f"compacts or deletes it at the same time. Run one compaction at a time")
            for key in keys[1:]:
                txn.delete(key, db=shared.log)
            for key, value in segments:
                txn.put(key, seal(key, value), db=shared.log)
    except lmdb.Error as e:
        raise lg._lmdb_error(e, f"compacting {stream!r} partition {partition}") from e
    # a rewrite maps in the pages it frees and fills
    shared.pages.read(4 * sum(len(value) for _, value in segments))


class ChangelogCompactor:
    """Compacts a container's changelog partitions in a background thread, below their
    checkpoints. ``add`` a partition, ``request()`` after each commit, ``close()`` before the
    log closes. ``checkpointed(partition key)`` reads the offset the checkpoint holds (None:
    none yet). A pass starts when the partition has ``MIN_DIRTY`` records written since the last
    one, and they are at least ``MIN_DIRTY_RATIO`` of its records below the point; while the job
    runs, it gives the log a rest as long as it worked after each write transaction."""

    def __init__(self, checkpointed: Callable[[Any], int | None]) -> None:
        self.checkpointed = checkpointed
        self.partitions: dict[Any, tuple[LocalLog, str, int, int, int | None]] = {}
        #: when each partition with an expiry was last looked at (``time.monotonic()``)
        self._expired_at: dict[Any, float] = {}
        #: offsets deleted by expiry so far, per partition key
        self.expired: dict[Any, int] = {}
        self.results: deque[CompactionResult] = deque(maxlen=100)  # the last passes
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._rounds = threading.Condition()
        self._asked = 0  # requests so far
        self._done = 0  # requests a finished round covered
        self._draining = False

    def add(self, key: Any, lg: LocalLog, stream: str, partition: int,
            delete_retention_ms: int = DELETE_RETENTION_MS, expire_ms: int | None = None
            ) -> None:
        """``expire_ms``: the processing-time ttl of the store's table (``expiry_ms``)."""
        with self._lock:
            self.partitions[key] = (lg, stream, partition, delete_retention_ms, expire_ms)

    def request(self) -> None:
        """Look at every partition again soon (its checkpoint moved)."""
        if self._thread is None:
            if not self.partitions or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="changelog-compactor",
                                            daemon=True)
            self._thread.start()
        with self._rounds:
            self._asked += 1
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            with self._rounds:
                asked = self._asked
            with self._lock:
                todo = list(self.partitions.items())
            for key, (lg, stream, partition, retention, expire) in todo:
                if self._stop.is_set():
                    return
                try:
                    self._maybe_compact(key, lg, stream, partition, retention, expire)
                except Exception as exc:  # the job goes on; its changelog just stays longer
                    log.warning("compacting changelog %s partition %d in %s failed (%s: %s); "
                                "the job goes on with the changelog as it is", stream, partition,
                                lg.path, type(exc).__name__, exc)
            with self._rounds:
                self._done = asked
                self._rounds.notify_all()

    def _pause(self, seconds: float) -> None:
        if not self._draining:
            self._stop.wait(seconds)

    def _maybe_compact(self, key: Any, lg: LocalLog, stream: str, partition: int,
                       retention: int, expire: int | None = None) -> None:
        upto = self.checkpointed(key)
        if not upto:
            return
        if expire is not None:
            now = time.monotonic()
            if now - self._expired_at.get(key, -math.inf) >= EXPIRE_SECONDS:
                self._expired_at[key] = now
                gone = expire_partition(lg, stream, partition, upto, expire)
                if gone:
                    self.expired[key] = self.expired.get(key, 0) + gone
                    log.debug("changelog %s partition %d: %d offsets older than the ttl "
                              "deleted", stream, partition, gone)
        dirty, kept = dirty_records(lg, stream, partition, upto)
        if dirty < MIN_DIRTY or dirty < MIN_DIRTY_RATIO * (dirty + kept):
            return
        r = compact_partition(lg, stream, partition, upto, delete_retention_ms=retention,
                              stop=self._stop, pause=self._pause)
        self.results.append(r)
        if r.done:
            log.info("compacted changelog %s partition %d below offset %d: %d records to %d "
                     "(%d tombstones dropped) in %.2f s", stream, partition, r.upto,
                     r.records_before, r.records_after, r.tombstones_dropped, r.seconds)

    def close(self, drain_seconds: float = 0.0) -> None:
        """Stops the thread. With ``drain_seconds``, first gives it that long to compact below
        the last checkpoints without pauses (the job has stopped writing), so the next restore
        replays little; a pass still running then stops at its next segment."""
        if self._thread is not None and drain_seconds > 0:
            self._draining = True
            self.request()
            with self._rounds:
                self._rounds.wait_for(lambda: self._done >= self._asked, timeout=drain_seconds)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def changelog_location(job: CompactedJob, store: Any) -> tuple[str, str]:
    """(system, stream) of a store's changelog: ``stores.<name>.changelog`` is
    ``[system.]stream``, on the job's main system when it names none."""
    return store.changelog_system or job.main_system, str(store.changelog_stream)


def changelog_partitions(job: CompactedJob) -> list[tuple[str, LocalLog, str, int, list[str]]]:
    """Every changelog partition of a job on a local log: ``(store, log, stream, partition,
    the tasks whose checkpoints hold its offset)``."""
    out = []
    for name, store in job.plan.stores.items():
        if not store.changelog:
            continue
        system, stream = changelog_location(job, store)
        lg = job.log_of(system)
        for p in range(lg.partitions(stream) or 0):
            tasks = [t.name for t in job.job.tasks if t.index == p]
            out.append((name, lg, stream, p, tasks))
    return out


def compact_job(job: CompactedJob, *, now_ms: int | None = None,
                group_records: int = GROUP_RECORDS) -> list[CompactionResult]:
    """Compacts every changelog partition of a job below its checkpoint (``samza-dsl
    compact``), whatever its dirty share, but those of stores with
    ``stores.<store>.changelog.compaction=false``. Refuses while a container of the job runs."""

    lock = job.job_lock()
    lock.exclusive("compact", f"compact the changelogs of job {job.job_name!r}")
    try:
        results = []
        for store, lg, stream, p, tasks in changelog_partitions(job):
            settings = job.plan.config.store(store)
            if not settings.changelog_compaction:
                continue  # it keeps every entry
            offsets = [job.checkpoints.read_changelogs(t).get(store) for t in tasks]
            upto = min((o or 0 for o in offsets), default=0)
            if upto <= 0:
                continue  # nothing checkpointed: every entry may still be needed
            expire = processing_ttl_ms(job.plan, store)
            if expire is not None:
                expire_partition(lg, stream, p, upto, expire, now_ms=now_ms)
            results.append(compact_partition(
                lg, stream, p, upto, now_ms=now_ms, group_records=group_records,
                delete_retention_ms=settings.changelog_delete_retention_ms))
        return results
    finally:
        lock.release()
