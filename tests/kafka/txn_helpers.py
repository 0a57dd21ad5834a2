"""What a partition's log holds, batch by batch, read past any consumer's filtering: which
batches are transactional, and where each transaction's COMMIT or ABORT marker is. Apache Kafka
builds a read_committed reader's list of aborted transactions from these markers."""

from __future__ import annotations

import time

from aiokafka import AIOKafkaConsumer, TopicPartition

# the log batch by batch, as the job reads its checkpoints under exactly once
from runtime.kafka.committed import Batch, log_batches

__all__ = ["Batch", "log_batches", "read_isolated"]


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
