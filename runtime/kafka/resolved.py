"""``read_committed`` decided by the log's own transaction markers, for the job's consumers.

A ``read_committed`` consumer of Apache Kafka relies on the broker twice: the broker hands out
records only up to the last stable offset (the first offset of the oldest open transaction), and
lists the aborted transactions of each Fetch answer so that the client drops their records. A
broker that gets either wrong stalls the job or feeds it aborted records: one that lists no
aborted transactions (tansu) hands them out as committed, and one that holds the last stable
offset back after a transaction ended (tansu does, while other transactions that overlap it on
some partition are open) can hold it there for good once the producers that would move it were
killed.

So the job's consumers read uncommitted and resolve each transaction themselves, from its
COMMIT or ABORT marker in the log, which both kinds of broker write:

- a record outside any transaction is handed out at once when nothing before it waits;
- a record of a transaction waits, with every record after it, until the transaction's
  marker: COMMIT hands them out, ABORT drops them;
- so records come out in log order, the same records a ``read_committed`` consumer of Apache
  Kafka reads.

``new_consumer`` (``runtime.kafka.system``) gives a consumer of ``isolation_level=
read_committed`` this reading. Its ``position`` is the offset of the first record still
waiting, if one is: a reader that stops once its position passed an end stops only when
everything before that end was handed out or dropped.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable, Iterator
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CorruptRecordException

from runtime.kafka import aiokafka_compat as compat

__all__ = ["AS_FETCHED", "MarkerIsolation", "ResolvedRecords", "ResolvingConsumer",
           "fetch_position", "gapless"]

_log = logging.getLogger(__name__)

READ_UNCOMMITTED = 0


class _Pending:
    """One partition's records that wait for a transaction's marker, in log order."""

    __slots__ = ("base", "expected", "held", "open")

    def __init__(self, expected: int) -> None:
        #: the offset the next fetch must start at for this state to go on (else: a seek)
        self.expected = expected
        #: records from the first one of a transaction still open on; None: dropped (aborted)
        self.held: collections.deque[Any] = collections.deque()
        #: how many records left ``held`` from its front since the state began
        self.base = 0
        #: producer id -> the positions (counted from the state's beginning) of its open
        #: transaction's records
        self.open: dict[int, list[int]] = {}

    def first_waiting(self) -> int | None:
        """The offset of the first record that waits for a marker, if one does."""
        for r in self.held:
            if r is not None:
                return int(r.offset)
        return None


class MarkerIsolation(int):
    """The isolation level a resolving consumer's fetcher carries: read uncommitted on the wire
    (it is the int 0), with each partition's records that wait for a marker."""

    pending: dict[TopicPartition, _Pending]

    def __new__(cls) -> MarkerIsolation:
        level = super().__new__(cls, READ_UNCOMMITTED)
        level.pending = {}
        return level


class ResolvedRecords(compat.PartitionRecords):
    """One Fetch answer's records of one partition, each transaction's handed out at its
    COMMIT marker (module docstring). aiokafka's fetcher moves the partition's fetch position
    to ``next_fetch_offset`` as records are taken; records that wait stay in the partition's
    ``_Pending`` across answers."""

    def __init__(self, tp: TopicPartition, records: Any, aborted: Any, fetch_offset: int,
                 key_deserializer: Any, value_deserializer: Any, check_crcs: bool,
                 isolation_level: MarkerIsolation) -> None:
        state = isolation_level.pending.get(tp)
        if state is None or state.expected != fetch_offset:  # new, or the reader moved
            state = isolation_level.pending[tp] = _Pending(fetch_offset)
        self._state = state
        self._partition, self._crcs = tp, check_crcs
        super().__init__(tp, records, None, fetch_offset, key_deserializer, value_deserializer,
                         check_crcs, READ_UNCOMMITTED)

    def _unpack_records(self) -> Iterator[Any]:
        tp = self._partition
        records = compat.fetched_batches(self)
        state = self._state
        held, open_ = state.held, state.open
        make = compat.record_maker(self)
        if held:  # resolved records an earlier answer's reader left untaken
            yield from self._release()
        while records.has_next():
            batch = records.next_batch()
            if self._crcs and not batch.validate_crc():
                raise CorruptRecordException(f"Invalid CRC - {tp}")
            if batch.is_control_batch:
                waiting = open_.pop(batch.producer_id, None)
                self.next_fetch_offset = state.expected = batch.next_offset
                if waiting is not None:
                    if compat.is_abort_marker(self, batch):
                        base = state.base
                        for i in waiting:
                            held[i - base] = None
                    yield from self._release()
                continue
            start = self.next_fetch_offset
            if batch.is_transactional:
                at = open_.get(batch.producer_id)
                if at is None:
                    at = open_[batch.producer_id] = []
                n = state.base + len(held)
                for record in batch:
                    if record.offset >= start:
                        at.append(n)
                        held.append(make(tp, record))
                        n += 1
            elif held:  # behind a transaction that is still open (or records not taken yet)
                held.extend(make(tp, r) for r in batch if r.offset >= start)
                self.next_fetch_offset = state.expected = batch.next_offset
                yield from self._release()
                continue
            else:
                for record in batch:
                    if record.offset >= start:
                        self.next_fetch_offset = state.expected = record.offset + 1
                        yield make(tp, record)
            self.next_fetch_offset = state.expected = batch.next_offset

    def _release(self) -> Iterator[Any]:
        """The records before the first one still waiting, each taken off before it is handed
        out (a consumer that stops taking loses none)."""
        state = self._state
        held = state.held
        stop = min(at[0] for at in state.open.values() if at) \
            if any(state.open.values()) else state.base + len(held)
        while state.base < stop:
            r = held.popleft()
            state.base += 1
            if r is not None:
                yield r


_PLAIN_RECORDS = compat.plain_partition_records()

#: topics whose offsets have no gaps (the job's intermediate streams: never compacted), by
#: ``gapless``: a Fetch answer that skips an offset of one is read up to the gap only
_GAPLESS: set[str] = set()
#: fetches in a row that may find the same gap before it is taken as real (about 5 s)
GAP_FETCHES = 50
#: per partition, the gap last met and how many fetches met it
_gaps: dict[TopicPartition, tuple[int, int]] = {}


def gapless(topics: Iterable[str]) -> None:
    """Topics with no gaps in their offsets: a Fetch answer for one of them whose next batch
    starts past the offset expected (a broker that made a later batch visible before an earlier
    one: tansu does, when several producers write a partition at once) is read up to the gap,
    and the next fetch asks again from it. A gap that stays for ``GAP_FETCHES`` fetches
    is taken as real, with a warning naming it (a broker that lost the records)."""
    _GAPLESS.update(topics)


class _GapGuard:
    """A Fetch answer's record batches of a gapless topic, up to the first offset missing."""

    __slots__ = ("_inner", "_owner", "_peek", "_tp")

    def __init__(self, inner: Any, owner: Any, tp: TopicPartition) -> None:
        self._inner, self._owner, self._tp = inner, owner, tp
        self._peek: Any = None

    def has_next(self) -> bool:
        if self._peek is None:
            if not self._inner.has_next():
                return False
            self._peek = self._inner.next_batch()
        expected = self._owner.next_fetch_offset
        if self._peek.base_offset > expected:
            at, tries = _gaps.get(self._tp, (expected, 0))
            tries = tries + 1 if at == expected else 1
            if tries <= GAP_FETCHES:
                _gaps[self._tp] = (expected, tries)
                return False  # fetched again from the gap
            _gaps.pop(self._tp, None)
            _log.warning("topic %r partition %d: offsets %d to %d did not come in %d fetches, "
                         "though later ones did: the broker does not have them; reading on",
                         self._tp.topic, self._tp.partition, expected,
                         self._peek.base_offset - 1, GAP_FETCHES)
        elif self._tp in _gaps:
            del _gaps[self._tp]
        return True

    def next_batch(self) -> Any:
        if self._peek is None and not self.has_next():
            raise StopIteration
        batch, self._peek = self._peek, None
        return batch


def AS_FETCHED(key: bytes | None) -> bytes | None:  # noqa: N802 (a marker, used by identity)
    """The ``key_deserializer`` that marks a consumer whose records are aiokafka's fetched
    records themselves (``offset``, ``key``, ``value``, ``headers``, ``timestamp``), not a
    ``ConsumerRecord`` built for each: the job's own readers, which take only those."""
    return key


def _as_fetched(tp: TopicPartition, record: Any) -> Any:
    return record


def _partition_records(tp: TopicPartition, records: Any, aborted: Any, fetch_offset: int,
                       key_deserializer: Any, value_deserializer: Any, check_crcs: bool,
                       isolation_level: int) -> Any:
    """What aiokafka's fetcher builds for each partition of a Fetch answer: resolved records
    for a resolving consumer's fetcher, aiokafka's own for any other; either read up to a gap
    in the offsets of a gapless topic."""
    guard = _GapGuard(records, None, tp) if tp.topic in _GAPLESS else None
    given = records if guard is None else guard
    out: Any
    if isinstance(isolation_level, MarkerIsolation):
        out = ResolvedRecords(tp, given, aborted, fetch_offset, key_deserializer,
                              value_deserializer, check_crcs, isolation_level)
    else:
        out = _PLAIN_RECORDS(tp, given, aborted, fetch_offset, key_deserializer,
                             value_deserializer, check_crcs, isolation_level)
    if guard is not None:
        guard._owner = out
    if key_deserializer is AS_FETCHED:
        compat.set_record_maker(out, _as_fetched)
    return out


compat.install_partition_records(_partition_records)


async def fetch_position(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int:
    """The offset the consumer fetches next, past records a resolving consumer holds back
    for their transaction's marker (``ResolvingConsumer.position`` is the first of those)."""
    return int(await AIOKafkaConsumer.position(consumer, tp))


class ResolvingConsumer(AIOKafkaConsumer):
    """An aiokafka consumer (no group) that reads committed records by the log's markers."""

    async def start(self) -> None:
        await super().start()
        compat.set_isolation_level(self, MarkerIsolation())

    def held(self, partition: TopicPartition) -> tuple[int, list[int]] | None:
        """The offset of the first record of ``partition`` that waits for a transaction's
        marker, and the producer ids of the open transactions it waits for; None: none waits."""
        level = compat.isolation_level(self)
        state = level.pending.get(partition) if isinstance(level, MarkerIsolation) else None
        if state is None:
            return None
        first = state.first_waiting()
        if first is None:
            return None
        return first, sorted(pid for pid, at in state.open.items() if at)

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the first record still waiting for its transaction's marker, else
        the fetch position."""
        fetched = int(await super().position(partition))
        level = compat.isolation_level(self)
        state = level.pending.get(partition) if isinstance(level, MarkerIsolation) else None
        if state is None or state.expected != fetched:
            return fetched
        waiting = state.first_waiting()
        return fetched if waiting is None else min(waiting, fetched)
