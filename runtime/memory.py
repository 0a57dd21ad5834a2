"""The in-memory system: partitioned streams of Python objects, for tests and local runs.

Offsets are list indexes. Bounded inputs end with an ``EndOfStream`` record."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from runtime.job import SSP
from runtime.records import EndOfStream

__all__ = ["MemoryBroker", "MemoryConsumer", "MemoryProducer"]


class MemoryBroker:
    """Holds every in-memory stream of one run."""

    def __init__(self) -> None:
        self.streams: dict[str, list[list[Any]]] = {}
        self._event: asyncio.Event | None = None

    def create(self, stream_id: str, partitions: int) -> None:
        existing = self.streams.get(stream_id)
        if existing is not None:
            if len(existing) != partitions:
                raise ValueError(f"in-memory stream {stream_id!r} has {len(existing)} partitions, "
                                 f"not {partitions}")
            return
        self.streams[stream_id] = [[] for _ in range(partitions)]

    def partitions(self, stream_id: str) -> int | None:
        s = self.streams.get(stream_id)
        return None if s is None else len(s)

    def append(self, stream_id: str, partition: int, payload: Any) -> int:
        log = self.streams[stream_id][partition]
        log.append(payload)
        if self._event is not None:
            self._event.set()
        return len(log) - 1

    def extend(self, stream_id: str, partition: int, payloads: Iterable[Any]) -> None:
        self.streams[stream_id][partition].extend(payloads)
        if self._event is not None:
            self._event.set()

    def end(self, stream_id: str) -> None:
        """Mark every partition of a bounded stream as ended."""
        for p in range(len(self.streams[stream_id])):
            self.append(stream_id, p, EndOfStream(None))

    def event(self) -> asyncio.Event:
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    def messages(self, stream_id: str, partition: int) -> list[Any]:
        from runtime.records import is_control

        return [m for m in self.streams[stream_id][partition] if not is_control(m)]


class MemoryConsumer:
    """Reads in-memory partitions. A reader key (a task and its partition) has its own position,
    so a broadcast partition is read by every task."""

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker
        self.positions: dict[Any, tuple[SSP, int]] = {}
        self._woken = False

    def register(self, key: Any, ssp: SSP, next_offset: int | None) -> None:
        self.positions[key] = (ssp, 0 if next_offset is None else next_offset)

    async def poll(self, keys: Iterable[Any], max_per_key: int,
                   timeout: float | None = None) -> list[tuple[Any, int, list[Any]]]:
        """Batches of (key, first offset, payloads); waits until one is available."""
        keys = list(keys)
        event = self.broker.event()
        streams = self.broker.streams
        self._woken = False
        while True:
            event.clear()
            out = []
            for key in keys:
                ssp, pos = self.positions[key]
                log = streams[ssp.stream_id][ssp.partition]
                if pos < len(log):
                    batch = log[pos:pos + max_per_key]
                    self.positions[key] = (ssp, pos + len(batch))
                    out.append((key, pos, batch))
            if out or not keys:
                return out
            try:
                # asyncio.timeout, not wait_for: wait_for can swallow a cancellation on 3.11
                async with asyncio.timeout(timeout):
                    await event.wait()
            except TimeoutError:
                return []
            if self._woken:  # the caller's set of partitions changed: let it ask again
                self._woken = False
                return []

    def wakeup(self) -> None:
        """End a waiting ``poll`` now: the set of partitions to read has changed."""
        self._woken = True
        self.broker.event().set()

    async def close(self) -> None:
        return None


class MemoryProducer:
    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker

    def send(self, stream_id: str, partition: int, payload: Any) -> None:
        self.broker.append(stream_id, partition, payload)

    def sender(self, stream_id: str) -> Any:
        """A fast ``send(partition, payload)`` for one stream; ``signal()`` wakes readers."""
        logs = self.broker.streams[stream_id]

        def send(partition: int, payload: Any) -> None:
            logs[partition].append(payload)
        return send

    def signal(self) -> None:
        event = self.broker._event
        if event is not None:
            event.set()

    async def flush(self) -> None:
        self.signal()

    async def close(self) -> None:
        return None
