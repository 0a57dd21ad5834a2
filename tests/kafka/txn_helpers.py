"""What a partition's log holds, batch by batch, read past any consumer's filtering: which
batches are transactional, and where each transaction's COMMIT or ABORT marker is. Apache Kafka
builds a read_committed reader's list of aborted transactions from these markers."""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

from aiokafka import AIOKafkaClient, AIOKafkaConsumer, TopicPartition
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.memory_records import MemoryRecords

__all__ = ["Batch", "log_batches", "read_isolated"]

READ_UNCOMMITTED = 0
_MARKERS = {0: "ABORT", 1: "COMMIT"}


@dataclass(frozen=True)
class Batch:
    base_offset: int
    producer_id: int
    transactional: bool
    #: "COMMIT" or "ABORT" for a transaction marker, None for records
    marker: str | None
    values: tuple[bytes | None, ...]
    keys: tuple[bytes | None, ...] = ()


async def log_batches(bootstrap: str, topic: str, partition: int) -> list[Batch]:
    """Every batch of the partition from offset 0, control batches included."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        batches: list[Batch] = []
        offset = 0
        while True:
            request = FetchRequest(100, 1, 1 << 20, READ_UNCOMMITTED,
                                   [(topic, [(partition, offset, 1 << 20)])])
            response = await client.send(client.get_random_node(), request)
            (_, parts), = response.topics
            records = MemoryRecords(parts[0][-1])
            before = len(batches)
            while (batch := records.next_batch()) is not None:
                if batch.base_offset < offset:
                    continue
                rows = list(batch)
                marker = None
                if batch.is_control_batch:
                    _version, kind = struct.unpack(">hh", rows[0].key)
                    marker = _MARKERS[kind]
                batches.append(Batch(batch.base_offset, batch.producer_id, batch.is_transactional,
                                     marker, tuple(r.value for r in rows),
                                     tuple(r.key for r in rows)))
                offset = batch.next_offset
            if len(batches) == before:
                return batches
    finally:
        await client.close()


async def read_isolated(bootstrap: str, topic: str, partition: int, isolation_level: str,
                        idle_ms: int = 300, deadline: float = 20.0
                        ) -> list[tuple[int, bytes | None]]:
    """``(offset, value)`` of what a consumer of ``isolation_level`` reads from the start of
    the partition: until the broker has answered a fetch, the consumer stands at the end it
    reported (the last stable offset for read_committed) and nothing more came for ``idle_ms``;
    or ``deadline`` seconds have passed."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation_level,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                fetch_max_wait_ms=50)
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        out: list[tuple[int, bytes | None]] = []
        until = time.monotonic() + deadline
        while time.monotonic() < until:
            got = await consumer.getmany(tp, timeout_ms=idle_ms)
            out += [(r.offset, r.value) for r in got.get(tp, [])]
            end = (consumer.last_stable_offset(tp) if isolation_level == "read_committed"
                   else consumer.highwater(tp))
            if not got and end is not None and await consumer.position(tp) >= end:
                break
        return out
    finally:
        await consumer.stop()
