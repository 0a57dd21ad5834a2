"""The embedded local system's producer and consumer: what a container writes to and reads from
the local log (``runtime.local.log``) with, as the engine's ``Producer`` and ``Consumer``
(``runtime.engine.systems``). A producer's buffered partitions go into the log in one
transaction per flush; a consumer keeps a position per reader, ends a bounded input with an
``EndOfStream`` and hands on a segment it cannot read back under the stream's serde error
policy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from runtime.engine.codec import BufferedProducer, Record, StreamCodec
from runtime.engine.job import SSP
from runtime.engine.origins import ORIGIN_IDS
from runtime.engine.records import EndOfStream
from runtime.engine.systems import Consumer
from runtime.local.log import LocalLog
from runtime.local.segments import CorruptSegmentError

__all__ = ["LocalProducer", "LocalConsumer"]

_log = logging.getLogger("samza_dsl.retention")


class LocalProducer(BufferedProducer):
    """Buffers records per partition; a flush (or a ``signal`` after each processed batch)
    appends every buffered partition to the log in one transaction."""

    def __init__(self, log: LocalLog, generation: int) -> None:
        super().__init__(generation)
        self.log = log
        self._written: list[Callable[[], None]] = []
        self._scheduled = False
        self._error: Exception | None = None

    def on_write(self, callback: Callable[[], None]) -> None:
        self._written.append(callback)

    def origin_ids(self, keys: list[str]) -> Mapping[str, int] | None:
        """The log stores records' origins in their compact form, its ids of origin keys in
        its metadata (``runtime.engine.origins``)."""
        return self.log.assign_ids(ORIGIN_IDS, keys)

    def written_out(self) -> None:
        """Records were appended to the log for this producer's readers (an exactly-once
        commit): tell them."""
        for callback in self._written:
            callback()

    def signal(self) -> None:
        """Write what is buffered soon: once the tasks ready to run now have run, so their
        batches share one transaction."""
        if self._error is not None:  # the last write failed: fail the task that signals
            raise self._error
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._deferred_write)

    def _deferred_write(self) -> None:
        self._scheduled = False
        try:
            self._write()
        except Exception as exc:  # the records stay buffered; flush() raises it again
            self._error = exc

    def _write(self) -> None:
        batches: dict[tuple[str, int], list[Record]] = {}
        taken: list[tuple[str, int, list[Record]]] = []
        for sid, parts in self._bufs.items():
            for p, buf in enumerate(parts):
                if buf:
                    batches[(self._physical[sid], p)] = buf
                    taken.append((sid, p, buf))
        if not batches:
            return
        began, before = time.perf_counter_ns(), self.log.appended_bytes
        self.log.append_many(batches)
        self.flush_ns += time.perf_counter_ns() - began
        self.sent_bytes += self.log.appended_bytes - before
        for sid, p, buf in taken:
            self.sends += len(buf)
            self._taken(sid, p, len(buf))
            buf.clear()
        for callback in self._written:
            callback()

    async def flush(self) -> None:
        self._error = None
        self._write()

    async def close(self) -> None:
        self._write()


class LocalConsumer(Consumer):
    """Reads log partitions for the container. A reader key (a task and its partition) has its
    own position. Bounded inputs end with an ``EndOfStream`` at their end offset as of
    registration."""

    def __init__(self, log: LocalLog, physical: Mapping[str, str],
                 codecs: Mapping[str, StreamCodec], generation: int, *,
                 bounded: set[str], upcoming: set[str]) -> None:
        self.log = log
        self.physical = dict(physical)
        self.codecs = dict(codecs)
        self.generation = generation
        self.bounded = set(bounded)
        self.upcoming = set(upcoming)
        self.positions: dict[Any, list[Any]] = {}
        #: where reading of each partition began
        self.starts: dict[SSP, int] = {}
        self._event: asyncio.Event | None = None
        self._woken = False
        self._warned: set[SSP] = set()

    def register(self, key: Any, ssp: SSP, next_offset: int | None) -> None:
        phys = self.physical[ssp.stream_id]
        end = self.log.end_offset(phys, ssp.partition)
        if next_offset is None:
            next_offset = end if ssp.stream_id in self.upcoming else 0
        elif next_offset > 0:
            start = self.log.start_offset(phys, ssp.partition)
            if next_offset < start:
                self._below_start(ssp, next_offset - 1, start, "checkpoint")
        stop = end if ssp.stream_id in self.bounded else None
        # [ssp, physical, position, stop offset or None, end-of-stream given]
        self.positions[key] = [ssp, phys, next_offset, stop, False]
        self.starts[ssp] = min(self.starts.get(ssp, next_offset), next_offset)

    def _below_start(self, ssp: SSP, at: int, start: int, what: str) -> None:
        if ssp in self._warned:  # one warning per partition
            return
        self._warned.add(ssp)
        _log.warning(
            "stream %s partition %d: the %s is at offset %d, but the local log at %s now starts "
            "at offset %d (retention deleted the records in between before they were read); "
            "continuing at offset %d, as Kafka's auto.offset.reset=earliest. Raise "
            "streams.%s.retention.ms or retention.bytes if the job must not miss records",
            ssp.stream_id, ssp.partition, what, at, self.log.path, start, start, ssp.stream_id)

    def notify(self) -> None:
        if self._event is not None:
            self._event.set()

    async def poll(self, keys: list[Any], max_per_key: int, timeout: float | None = None,
                   limits: Mapping[Any, int] | None = None,
                   ) -> list[tuple[Any, int, list[Any]]]:
        if self._event is None:
            self._event = asyncio.Event()
        event = self._event
        self._woken = False
        read = self.log.read
        while True:
            event.clear()
            out: list[tuple[Any, int, list[Any]]] = []
            for key in keys:
                pos = self.positions[key]
                ssp, phys, offset, stop, ended = pos
                limit = max_per_key if limits is None else limits.get(key, max_per_key)
                if stop is not None:
                    if offset >= stop:
                        if not ended:
                            pos[4] = True
                            out.append((key, offset, [EndOfStream(None)]))
                        continue
                    limit = min(limit, stop - offset)
                try:
                    first, records = read(phys, ssp.partition, offset, limit,
                                          whole_segments=True)
                except CorruptSegmentError as e:
                    first, messages = self._around_corrupt(e, ssp, phys, offset, limit, stop)
                    pos[2] = first + len(messages)
                    out.append((key, first, messages))
                    continue
                if stop is not None and first + len(records) > stop:
                    records = records[:stop - first]
                if first > offset and records:  # retention went past this reader
                    self._below_start(ssp, offset, first, "position to read next")
                if records:
                    pos[2] = first + len(records)
                    out.append((key, first, self.codecs[ssp.stream_id].decode_batch(
                        ssp, first, records, self.generation)))
            if out or not keys:
                return out
            # another process may append (a CLI load): look again now and then
            wait = 0.1 if timeout is None else min(timeout, 0.1)
            try:
                async with asyncio.timeout(wait):
                    await event.wait()
            except TimeoutError:
                if timeout is not None:
                    return []
            if self._woken:
                self._woken = False
                return []

    def _around_corrupt(self, e: CorruptSegmentError, ssp: SSP, phys: str, offset: int,
                        limit: int, stop: int | None) -> tuple[int, list[Any]]:
        """What to hand out when a read met a segment the log cannot read back: the records
        before it, or its offsets under the stream's serde error policy."""
        codec = self.codecs[ssp.stream_id]
        if e.offset > offset:
            first, records = self.log.read(phys, ssp.partition, offset,
                                           min(limit, e.offset - offset))
            return first, codec.decode_batch(ssp, first, records, self.generation)
        if e.span is None:
            raise e
        end = e.offset + e.span if stop is None else min(e.offset + e.span, stop)
        return offset, codec.unreadable(ssp, offset, end - offset, e.raw, str(e))

    def wakeup(self) -> None:
        self._woken = True
        self.notify()

    async def read_bounds(self, keys: list[Any]) -> dict[Any, tuple[int, int]]:
        """Per reader key: the next offset it reads, and its partition's end offset now."""
        out = {}
        for key in keys:
            ssp, phys, offset = self.positions[key][:3]
            out[key] = (offset, self.log.end_offset(phys, ssp.partition))
        return out

    def waiting_for(self, key: Any) -> str:
        ssp, phys, offset, stop = self.positions[key][:4]
        end = self.log.end_offset(phys, ssp.partition)
        return (f"read to offset {offset}; the log ends at {end}"
                + (f", the run stops at {stop}" if stop is not None else ""))

    def behind(self, key: Any) -> bool:
        ssp, phys, offset, stop = self.positions[key][:4]
        end = self.log.end_offset(phys, ssp.partition)
        return offset < (end if stop is None else min(end, stop))

    def progress(self) -> list[tuple[SSP, int, int | None]]:
        """Per partition read: where reading began, and the log's end offset now."""
        phys = {ssp: p for ssp, p, _, _, _ in list(self.positions.values())}
        return [(ssp, start, self.log.end_offset(phys[ssp], ssp.partition))
                for ssp, start in list(self.starts.items())]

    async def close(self) -> None:
        return None
