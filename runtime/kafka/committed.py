"""A partition's log read batch by batch, past any consumer's filtering, and what of it a
transaction committed.

A ``read_committed`` consumer relies on the broker's list of aborted transactions in each Fetch
answer to drop their records. The job's checkpoint topic is read here from the log's own
transaction markers instead: a record of a transaction counts only once its COMMIT marker is in
the log, whatever the broker lists (a broker that lists no aborted transactions, as tansu does,
would otherwise hand an aborted checkpoint to the next run, which then skips the inputs that
checkpoint's aborted outputs held).
"""

from __future__ import annotations

import asyncio
import inspect
import struct
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaClient, TopicPartition
from aiokafka.errors import for_code

from runtime.kafka.aiokafka_compat import FetchRequest, MemoryRecords

__all__ = ["Batch", "LogRecord", "batches_from", "log_batches", "committed_records",
           "read_committed_log", "transaction_outcome"]

READ_UNCOMMITTED = 0
_MARKERS = {0: "ABORT", 1: "COMMIT"}
_FETCH_BYTES = 1 << 20
#: how long a retriable fetch error (a partition without its leader yet) is retried
_SETTLE_S = 10.0


@dataclass(frozen=True, slots=True)
class LogRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Batch:
    base_offset: int
    producer_id: int
    transactional: bool
    #: "COMMIT" or "ABORT" for a transaction marker, None for records
    marker: str | None
    records: tuple[LogRecord, ...]
    #: the epoch of the producer that wrote the batch (-1: none)
    producer_epoch: int = -1

    @property
    def values(self) -> tuple[bytes | None, ...]:
        return tuple(r.value for r in self.records)

    @property
    def keys(self) -> tuple[bytes | None, ...]:
        return tuple(r.key for r in self.records)


def client_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``settings`` a plain client takes (security, client id)."""
    accepted = inspect.signature(AIOKafkaClient.__init__).parameters
    return {k: v for k, v in settings.items() if k in accepted and k != "bootstrap_servers"}


async def batches_from(servers: str, topic: str, partition: int, start: int = 0,
                       settings: Mapping[str, Any] | None = None) -> AsyncIterator[Batch]:
    """The batches of the partition from offset ``start`` to its end as the reading began to
    end, transaction markers included (read uncommitted: the reader resolves the markers)."""
    client = AIOKafkaClient(bootstrap_servers=servers, **client_settings(settings or {}))
    await client.bootstrap()
    try:
        tp = TopicPartition(topic, partition)
        node = await _leader(client, tp)
        offset = start
        # a partition just created, or whose leader moves, is refused for a moment with a
        # retriable error (Apache Kafka elects and hosts it after answering CreateTopics)
        settle_until = asyncio.get_running_loop().time() + _SETTLE_S
        while True:
            request = FetchRequest(100, 1, _FETCH_BYTES, READ_UNCOMMITTED,
                                   [(topic, [(partition, offset, _FETCH_BYTES)])])
            response = await client.send(node, request)
            (_, parts), = response.topics
            error = for_code(parts[0][1])
            if error is not for_code(0):
                if error.retriable and asyncio.get_running_loop().time() < settle_until:
                    await asyncio.sleep(0.1)
                    node = await _leader(client, tp)
                    continue
                raise error(f"fetching {topic!r} partition {partition} at offset {offset}")
            records = MemoryRecords(parts[0][-1])
            got = False
            while (batch := records.next_batch()) is not None:
                if batch.next_offset <= offset:
                    continue
                rows = list(batch)
                marker = None
                if batch.is_control_batch:
                    _version, kind = struct.unpack(">hh", rows[0].key)
                    marker = _MARKERS.get(kind)
                got = True
                yield Batch(batch.base_offset, batch.producer_id, batch.is_transactional, marker,
                            tuple(LogRecord(r.offset, r.timestamp, r.key, r.value)
                                  for r in rows if r.offset >= offset),
                            # (a batch of the old message format has no producer)
                            -1 if batch.producer_id is None else batch.producer_epoch)
                offset = batch.next_offset
            if not got:
                return
    finally:
        await client.close()


async def _leader(client: AIOKafkaClient, tp: TopicPartition) -> int:
    """The node leading ``tp`` as the metadata says now (any node while it names none)."""
    node = None
    for _ in range(2):
        await client.force_metadata_update()
        node = client.cluster.leader_for_partition(tp)
        if node is not None and node >= 0:
            return int(node)
    return int(client.get_random_node())


async def log_batches(servers: str, topic: str, partition: int,
                      settings: Mapping[str, Any] | None = None) -> list[Batch]:
    """Every batch of the partition from its first offset, transaction markers included."""
    return [b async for b in batches_from(servers, topic, partition, 0, settings)]


def committed_records(batches: list[Batch]) -> list[LogRecord]:
    """What a ``read_committed`` reader reads of ``batches``, in log order: records outside
    transactions, and those of transactions whose COMMIT marker follows them (not those of
    aborted ones, nor of one still open)."""
    keep: list[bool] = []
    rows: list[LogRecord] = []
    pending: dict[int, list[int]] = {}
    for b in batches:
        if b.marker is not None:
            if b.marker == "ABORT":
                for i in pending.get(b.producer_id, ()):
                    keep[i] = False
            pending.pop(b.producer_id, None)
            continue
        if b.transactional:
            at = pending.setdefault(b.producer_id, [])
            at.extend(range(len(rows), len(rows) + len(b.records)))
        rows.extend(b.records)
        keep.extend([True] * len(b.records))
    for open_ in pending.values():  # no marker yet: not committed
        for i in open_:
            keep[i] = False
    return [r for r, k in zip(rows, keep, strict=True) if k]


async def read_committed_log(servers: str, topic: str, partition: int,
                             settings: Mapping[str, Any] | None = None) -> list[LogRecord]:
    """The committed records of a partition (``committed_records`` of its ``log_batches``)."""
    return committed_records(await log_batches(servers, topic, partition, settings))


async def transaction_outcome(servers: str, topic: str, partition: int, offset: int,
                              settings: Mapping[str, Any] | None = None) -> str | None:
    """How the transaction holding the record at ``offset`` ended, as the log's markers say:
    "COMMIT", "ABORT", or None while no marker of its producer follows the record (still
    open). Raises ``LookupError`` if no transactional record is at ``offset``."""
    producer_id: int | None = None
    async for b in batches_from(servers, topic, partition, offset, settings):
        if producer_id is None:
            if b.marker is not None or not b.transactional \
                    or not any(r.offset == offset for r in b.records):
                raise LookupError(f"{topic!r} partition {partition} holds no transactional "
                                  f"record at offset {offset}")
            producer_id = b.producer_id
        elif b.marker is not None and b.producer_id == producer_id:
            return b.marker
    if producer_id is None:
        raise LookupError(f"{topic!r} partition {partition} ends before offset {offset}")
    return None
