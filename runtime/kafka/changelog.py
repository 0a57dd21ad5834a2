"""Changelogs of stores in Kafka topics (docs/semantics.md rule 17).

A store's changelog is a compacted topic with a partition per task. Appends go through the
container's producer, so they become durable with its flush at commit. ``LmdbStore.open`` is
synchronous and runs while the container builds its tasks, before any message is handed out: a
restore reads the topic on a loop of its own in a helper thread, and hands the entries over in
bounded chunks, so a large changelog is never all in memory.

A changelog's end offset as of the start comes from ``kafka_system.true_end_offsets``.

Brokers that go away while a changelog is read are the job's broker watch's to judge, as
anywhere else in a run (``runtime.kafka.outage``): the reader waits while they are away, and once
they have not answered for ``job.kafka.unavailable.timeout.ms`` it fails with the watch's one
error. The job's watch runs on the container's loop; a read made on that loop (a static
container builds its tasks there) blocks it, so the reader then runs a watch of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from runtime.kafka.outage import BrokerWatch
from runtime.kafka.system import KafkaProducer, kafka_error, new_consumer, stop_client

__all__ = ["KafkaChangelog"]

_CHUNK = 8192  # entries per chunk handed from the reading thread
_WAIT_MS = 100  # a fetch that returns no record is asked again this soon
_QUEUED = 8  # chunks the reading thread may run ahead


class KafkaChangelog:
    """One task's partition of a store's changelog topic."""

    def __init__(self, servers: str, settings: Mapping[str, Any], producer: KafkaProducer,
                 stream_id: str, topic: str, partition: int, end: int,
                 timeout: float = 30.0, watch: BrokerWatch | None = None) -> None:
        self.servers = servers
        self.settings = dict(settings)
        self.producer = producer
        self.stream_id = stream_id
        self.topic = topic
        self.partition = partition
        self._end = end  # as of the start
        self.timeout = timeout
        #: the job's broker watch: whether the brokers answer, and its error once they have
        #: been away too long
        self.watch = watch
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
        try:  # read on the job's loop, which it blocks: its watch cannot probe meanwhile
            asyncio.get_running_loop()
            shared = None
        except RuntimeError:
            shared = self.watch
        thread = threading.Thread(target=self._reader, args=(start, end, chunks, stop, shared),
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
                stop: threading.Event, shared: BrokerWatch | None) -> None:
        def put(item: Any) -> bool:
            while not stop.is_set():
                with contextlib.suppress(queue.Full):
                    chunks.put(item, timeout=0.1)
                    return True
            return False
        try:
            asyncio.run(self._read(start, end, put, shared))
            put(None)
        except BaseException as exc:  # handed to the reading side
            put(exc)

    async def _read(self, start: int, end: int, put: Any,
                    shared: BrokerWatch | None) -> None:
        own = None
        if shared is None and self.watch is not None:  # the job's watch cannot run now
            own = BrokerWatch(self.servers, self.watch.timeout, settings=self.settings)
            own.start()
        try:
            await self._fetch(start, end, put, shared or own)
        finally:
            if own is not None:
                await own.stop()

    async def _started(self, start: int, watch: BrokerWatch | None) -> AIOKafkaConsumer:
        """A consumer of the partition from ``start``; while the brokers are away, as the
        watch sees it, it is tried again."""
        tp = TopicPartition(self.topic, self.partition)
        while True:
            consumer = new_consumer(self.servers, self.settings, brief=True)
            try:
                async with asyncio.timeout(self.timeout):
                    await consumer.start()
                consumer.assign([tp])
                consumer.seek(tp, start)
                return consumer
            except (KafkaError, TimeoutError, OSError) as exc:
                await stop_client(consumer, 1.0)
                if not await _away(watch):
                    raise kafka_error(f"reading {self._where()}", self.servers, exc) from exc

    def _where(self) -> str:
        return f"changelog {self.topic!r} partition {self.partition}"

    async def _fetch(self, start: int, end: int, put: Any, watch: BrokerWatch | None) -> None:
        tp = TopicPartition(self.topic, self.partition)
        consumer = await self._started(start, watch)
        loop = asyncio.get_running_loop()
        try:
            pos = start
            chunk: list[tuple[bytes, bytes | None]] = []
            offsets: list[int] = []  # each entry's: a compacted topic has gaps
            until = loop.time() + self.timeout  # for the next record
            while pos < end:
                _check(watch)
                try:
                    # short waits: markers and aborted records move the position with no record
                    batch = await consumer.getmany(tp, timeout_ms=_WAIT_MS, max_records=_CHUNK)
                    records = batch.get(tp, [])
                    if not records and await consumer.position(tp) >= end:
                        break  # the rest were transaction markers or aborted records
                except (KafkaError, OSError):  # a connection lost: aiokafka connects again
                    records = []
                    await asyncio.sleep(_WAIT_MS / 1000)
                if not records:
                    if watch is not None and not watch.healthy:
                        until = loop.time() + self.timeout  # the watch's timeout counts
                    elif loop.time() >= until:
                        raise kafka_error(
                            f"reading {self._where()}", self.servers,
                            TimeoutError(f"no records past offset {pos} within {self.timeout}s, "
                                         f"though the checkpoint needs entries up to {end}"))
                    continue
                until = loop.time() + self.timeout
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
            # never raises: aiokafka may raise CancelledError from a fetch of its own that was
            # retrying a lost connection as it stops
            await stop_client(consumer)


def _check(watch: BrokerWatch | None) -> None:
    """The watch's error, once the brokers have been away for longer than it allows."""
    if watch is not None:
        watch.check()


async def _away(watch: BrokerWatch | None) -> bool:
    """After a request failed: whether the brokers are away as the watch sees it (it probes
    about once a second: given two probes to tell), so that the request is tried again; raises
    the watch's error once they have been away too long. False: no watch, or they answer it."""
    if watch is None:
        return False
    loop = asyncio.get_running_loop()
    until = loop.time() + 2 * watch.interval + 0.5
    while True:
        _check(watch)
        if not watch.healthy or loop.time() >= until:
            return not watch.healthy
        await asyncio.sleep(min(watch.interval, 0.2))
