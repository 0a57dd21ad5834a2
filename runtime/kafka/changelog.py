"""Changelogs of stores in Kafka topics (docs/semantics.md rule 17).

A store's changelog is a compacted topic with a partition per task. Appends go through the
container's producer, so they become durable with its flush at commit. ``LmdbStore.open`` is
synchronous and runs while the container builds its tasks, before any message is handed out: a
restore reads the topic on a loop of its own in a helper thread, and hands the entries over in
bounded chunks, so a large changelog is never all in memory.

A changelog's end offset as of the start comes from ``kafka_system.true_end_offsets``.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from runtime.kafka.outage import close_connections
from runtime.kafka.system import KafkaProducer, kafka_error, new_consumer

__all__ = ["KafkaChangelog"]

_CHUNK = 8192  # entries per chunk handed from the reading thread
_WAIT_MS = 100  # a fetch that returns no record is asked again this soon
_QUEUED = 8  # chunks the reading thread may run ahead


class KafkaChangelog:
    """One task's partition of a store's changelog topic."""

    def __init__(self, servers: str, settings: Mapping[str, Any], producer: KafkaProducer,
                 stream_id: str, topic: str, partition: int, end: int,
                 timeout: float = 30.0) -> None:
        self.servers = servers
        self.settings = dict(settings)
        self.producer = producer
        self.stream_id = stream_id
        self.topic = topic
        self.partition = partition
        self._end = end  # as of the start
        self.timeout = timeout
        self._buf = producer.buffer(stream_id, partition)

    def append(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        self._buf.extend((k, v, None) for k, v in entries)

    def end_offset(self) -> int:
        acked = self.producer.end_offsets.get((self.topic, self.partition), 0)
        return max(self._end, acked)

    def read(self, start: int, end: int
             ) -> Iterator[tuple[Sequence[int], list[tuple[bytes, bytes | None]]]]:
        """Batches of ``(each entry's offset, entries)``."""
        if start >= end:
            return
        chunks: queue.Queue[Any] = queue.Queue(_QUEUED)
        stop = threading.Event()
        thread = threading.Thread(target=self._reader, args=(start, end, chunks, stop),
                                  name=f"changelog-{self.topic}-{self.partition}", daemon=True)
        thread.start()
        try:
            while True:
                item = chunks.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            with contextlib.suppress(queue.Empty):
                while True:  # unblock a reader waiting for room
                    chunks.get_nowait()
            thread.join(self.timeout)

    def _reader(self, start: int, end: int, chunks: queue.Queue[Any],
                stop: threading.Event) -> None:
        def put(item: Any) -> bool:
            while not stop.is_set():
                with contextlib.suppress(queue.Full):
                    chunks.put(item, timeout=0.1)
                    return True
            return False
        try:
            asyncio.run(self._read(start, end, put))
            put(None)
        except BaseException as exc:  # handed to the reading side
            put(exc)

    async def _read(self, start: int, end: int, put: Any) -> None:
        tp = TopicPartition(self.topic, self.partition)
        consumer = new_consumer(self.servers, self.settings, brief=True)
        where = f"changelog {self.topic!r} partition {self.partition}"
        try:
            try:
                async with asyncio.timeout(self.timeout):
                    await consumer.start()
                    consumer.assign([tp])
                    consumer.seek(tp, start)
            except (KafkaError, TimeoutError, OSError) as exc:
                raise kafka_error(f"reading {where}", self.servers, exc) from exc
            pos = start
            chunk: list[tuple[bytes, bytes | None]] = []
            offsets: list[int] = []  # each entry's: a compacted topic has gaps
            idle = 0.0
            while pos < end:
                # short waits: markers and aborted records move the position with no record
                batch = await consumer.getmany(tp, timeout_ms=_WAIT_MS, max_records=_CHUNK)
                records = batch.get(tp, [])
                if not records and await consumer.position(tp) >= end:
                    break  # the rest were transaction markers or aborted records
                if not records:
                    idle += _WAIT_MS / 1000
                    if idle >= self.timeout:
                        raise kafka_error(
                            f"reading {where}", self.servers,
                            TimeoutError(f"no records past offset {pos} within {self.timeout}s, "
                                         f"though the checkpoint needs entries up to {end}"))
                    continue
                idle = 0.0
                for r in records:
                    if r.offset >= end:
                        pos = end
                        break
                    if r.key is not None:
                        offsets.append(r.offset)
                        chunk.append((r.key, r.value))
                    pos = r.offset + 1
                if len(chunk) >= _CHUNK or (chunk and pos >= end):
                    if not put((offsets, chunk)):
                        return
                    chunk, offsets = [], []
            if chunk:
                put((offsets, chunk))
        finally:
            with contextlib.suppress(Exception):
                await consumer.stop()
            await close_connections(consumer)
