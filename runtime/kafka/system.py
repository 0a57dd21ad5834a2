"""Kafka through aiokafka: the consumer and producer a container uses, and checkpoints in a
compacted topic.

- ``KafkaConsumer``: one aiokafka consumer per container, with the partitions its tasks own
  assigned by hand (no consumer group). Each reader key (a task and its partition) keeps its own
  position, so a broadcast partition is read by every task. Fetches are batched (``getmany``);
  records are decoded per batch by the stream's ``StreamCodec``, split where offsets have gaps
  (compaction, transaction markers). A bounded input ends at its end offset as of the start.
- ``KafkaProducer``: records are buffered per partition, as the local producer does, and sent in
  the background after each processed batch; ``flush`` waits until the broker has acknowledged
  every record and notes the next offset of each partition written.
- ``KafkaCheckpoints``: one record per task, keyed by the task name, in a compacted topic; read
  in full at start (``read_checkpoint_topic``, which ``samza-dsl status`` uses too), the last
  record of a task wins.

Every partition of a topic is chosen by the runtime (murmur2 of the key bytes, as Kafka's default
partitioner), so the producer always names the partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, OffsetOutOfRangeError

from runtime.engine import checkpoints
from runtime.engine.codec import BufferedProducer, Record, StreamCodec
from runtime.engine.job import SSP
from runtime.engine.records import EndOfStream
from runtime.engine.systems import Consumer
from runtime.kafka.admin import live_first
from runtime.kafka.aiokafka_compat import builder_append, seal
from runtime.kafka.committed import read_committed_log
from runtime.kafka.fence import Lease
from runtime.kafka.outage import BrokerWatch, close_connections
from runtime.kafka.resolved import AS_FETCHED, ResolvingConsumer
from runtime.kafka.security import not_authorized
from samza_dsl.errors import SamzaError

__all__ = ["LOST_STOP_S", "KafkaConsumer", "KafkaProducer", "KafkaCheckpoints", "CheckpointTopic", "kafka_error",
           "log_starts", "new_consumer", "offset_bounds", "read_checkpoint_topic", "seek_to_starts",
           "stop_client",
           "true_end_offsets", "CONTAINER_KEY"]

_GENERATION = b"__generation__"
_ELASTICITY = b"__elasticity__"
#: the key prefix of a group member's record (``KafkaCheckpoints.write_member``)
_MEMBER = b"__member__"
#: the key prefix of a static container's claim on its id (``runtime.kafka.claim``)
CONTAINER_KEY = b"__container__"



def new_consumer(servers: str, settings: Mapping[str, Any], *,
                 brief: bool = False, as_fetched: bool = False) -> AIOKafkaConsumer:
    """An aiokafka consumer with no group (partitions are assigned by hand) and no auto-commit.
    A fetch with nothing to return waits ``fetch_max_wait_ms`` on the broker, and a request on
    the same connection waits behind it: 100 ms for a job's consumer, 20 ms for a ``brief``
    reader that reads a partition once (aiokafka's 500 ms would cost half a second at each
    start). ``as_fetched``: its records are aiokafka's fetched ones as they are, with
    ``offset``, ``key``, ``value``, ``headers`` and ``timestamp`` (no ``ConsumerRecord`` built
    for each). The ``settings`` override these."""
    defaults: dict[str, Any] = {"auto_offset_reset": "earliest",
                                "fetch_max_wait_ms": 20 if brief else 100}
    if as_fetched:
        defaults["key_deserializer"] = AS_FETCHED
    # read committed: by the log's transaction markers, not the broker's word (runtime.kafka.resolved)
    kind = ResolvingConsumer if settings.get("isolation_level") == "read_committed" \
        else AIOKafkaConsumer
    return kind(bootstrap_servers=live_first(servers), enable_auto_commit=False, group_id=None,
                **{**defaults, **settings})


def kafka_error(what: str, servers: str, exc: BaseException,
                settings: Mapping[str, Any] | None = None) -> SamzaError:
    """A Kafka error as one line; a refused authorization (``not_authorized``) names the user
    of ``settings`` and what to grant."""
    refused = not_authorized(what, servers, exc, (settings or {}).get("sasl_plain_username"))
    if refused is not None:
        return refused
    return SamzaError(f"{what} on Kafka at {servers} failed: {type(exc).__name__}: {exc}. Check "
                      f"bootstrap_servers and that the broker is running")


async def true_end_offsets(servers: str, tps: Iterable[TopicPartition],
                           settings: Mapping[str, Any], timeout: float
                           ) -> dict[TopicPartition, int]:
    """The offset after the last record of each partition. A broker's LATEST offset is that,
    but some brokers report the base offset of the last record batch + 1 (tansu): reading the
    last batch gives the offset after its last record, right for both."""
    bounds = await offset_bounds(servers, {tp: None for tp in tps}, settings, timeout)
    return {tp: end for tp, (_, end) in bounds.items()}


#: how long ``log_starts`` waits for the records of a partition read from offset 0 (s)
START_PROBE_S = 2.0


async def log_starts(servers: str, settings: Mapping[str, Any], consumer: AIOKafkaConsumer,
                     tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """The first offset of each partition, where a reader that has no checkpoint begins.

    A partition whose leader is still being elected (a topic just made, a broker just lost)
    may answer no offset for a moment: it is asked again. A start above 0 is checked by
    reading the partition from offset 0: a broker whose log start moved up (retention,
    deleted records) answers that offset 0 is out of range, and its start stands; one that
    hands out records is believed from its first record. tansu answers the earliest offset
    of a partition that several producers wrote at once with the offset of a later batch,
    for good; a reader that began there never read the batch before it (an upstream task's
    watermark on an intermediate stream, say: the windows after it never closed)."""
    if not tps:
        return {}
    starts = await consumer.beginning_offsets(tps)
    while any(starts[tp] is None for tp in tps):
        await asyncio.sleep(0.1)
        starts = await consumer.beginning_offsets(tps)
    above = [tp for tp in tps if starts[tp] > 0]
    if above:
        first = await _first_records(servers, settings, above)
        starts.update({tp: min(starts[tp], o) for tp, o in first.items()})
    return starts


async def seek_to_starts(servers: str, settings: Mapping[str, Any], consumer: AIOKafkaConsumer,
                         tps: list[TopicPartition]) -> None:
    """Seeks each of ``tps`` (assigned to ``consumer``) to its first offset (``log_starts``),
    where a reader of a whole partition begins."""
    for tp, start in (await log_starts(servers, settings, consumer, tps)).items():
        consumer.seek(tp, start)


async def _first_records(servers: str, settings: Mapping[str, Any],
                         tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """The offset of the first record of each partition that offset 0 is in range of, read
    uncommitted from offset 0; partitions out of range there, or that hand out nothing within
    ``START_PROBE_S``, are left out."""
    plain = {k: v for k, v in settings.items() if k != "isolation_level"}
    probe = new_consumer(servers, {**plain, "auto_offset_reset": "none"}, brief=True)
    out: dict[TopicPartition, int] = {}
    left = set(tps)
    try:
        await probe.start()
        probe.assign(list(left))
        for tp in left:
            probe.seek(tp, 0)
        loop = asyncio.get_running_loop()
        until = loop.time() + START_PROBE_S
        while left and loop.time() < until:
            try:
                got = await probe.getmany(*left, timeout_ms=100)
            except OffsetOutOfRangeError as exc:
                lost = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
                left.difference_update(lost or left)
                if left:
                    probe.assign(list(left))
                    for tp in left:
                        probe.seek(tp, 0)
                continue
            for tp, records in got.items():
                if records and tp in left:
                    out[tp] = min(r.offset for r in records)
                    left.discard(tp)
    finally:
        await stop_client(probe)
    return out


async def offset_bounds(servers: str, needed: Mapping[TopicPartition, int | None],
                        settings: Mapping[str, Any], timeout: float, *,
                        what: str = "reading end offsets"
                        ) -> dict[TopicPartition, tuple[int, int]]:
    """The first offset of each partition and the offset after its last record. The last batch
    is read (see ``true_end_offsets``) where the reported end is below the offset ``needed``
    there (None: always)."""
    tps = list(needed)
    if not tps:
        return {}
    # the log's end, not the last stable offset: a broker may answer a read_committed
    # ListOffsets below an open transaction with 0 (tansu)
    settings = {k: v for k, v in settings.items() if k != "isolation_level"}
    consumer = new_consumer(servers, settings, brief=True)
    out: dict[TopicPartition, tuple[int, int]] = {}
    try:
        async with asyncio.timeout(timeout):
            await consumer.start()
            consumer.assign(tps)
            latest = await consumer.end_offsets(tps)
            starts = await log_starts(servers, settings, consumer, tps)
            loop = asyncio.get_running_loop()
            until = loop.time() + timeout / 2  # for fetches that come back empty (below)
            for tp in tps:
                end, start = latest[tp], starts[tp]
                out[tp] = (start, end)
                need = needed[tp]
                if end <= start or (need is not None and end >= need):
                    continue
                consumer.seek(tp, end - 1)
                # the batch holding offset end - 1, to its last record. A fetch may come back
                # empty on a busy machine: fetch again while the position has not moved, for
                # half the time given. A fetch that moves it with no record (end - 1 is a
                # transaction marker), or none in that time: the reported end is right
                while True:  # short waits: a marker moves the position with no record
                    batch = await consumer.getmany(tp, timeout_ms=100)
                    records = batch.get(tp, [])
                    if records:
                        out[tp] = (start, max(end, records[-1].offset + 1))
                        break
                    if await consumer.position(tp) >= end or loop.time() >= until:
                        break
    except (KafkaError, TimeoutError, OSError) as exc:
        raise kafka_error(what, servers, exc) from exc
    finally:
        await stop_client(consumer)
    return out


#: how long a producer waits for its queued batches as it closes once the brokers are lost
LOST_STOP_S = 1.0


async def stop_client(client: Any, timeout: float = 5.0) -> None:
    """Stop an aiokafka consumer or producer, giving up after ``timeout`` seconds. Its errors
    are dropped: aiokafka may even raise CancelledError from a task of its own as it stops (a
    fetch that was retrying), which is no cancellation of the caller."""
    task = asyncio.ensure_future(client.stop())
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=1.0)
    if done and not task.cancelled():
        task.exception()  # retrieved
    await close_connections(client)



class KafkaConsumer(Consumer):
    """Reads topics for a container's tasks."""

    def __init__(self, servers: str, settings: Mapping[str, Any], physical: Mapping[str, str],
                 codecs: Mapping[str, StreamCodec], generation: int, *, bounded: set[str],
                 upcoming: set[str], timeout: float = 10.0,
                 watch: BrokerWatch | None = None) -> None:
        self.servers = servers
        # every position is set by the job: a fetch out of range is lost data, never a reset
        self.settings = {**settings, "auto_offset_reset": "none"}
        self.watch = watch
        self._paused = False
        self.physical = dict(physical)
        self.codecs = dict(codecs)
        self.generation = generation
        self.bounded = set(bounded)
        self.upcoming = set(upcoming)
        self.timeout = timeout
        self._consumer: AIOKafkaConsumer | None = None
        # key -> [ssp, topic partition, position (None: not resolved yet), stop, ended]
        self.positions: dict[Any, list[Any]] = {}
        #: where reading of each partition began (known once the consumer started)
        self.starts: dict[SSP, int] = {}
        self._readers: dict[TopicPartition, list[Any]] = {}
        self._backlog: dict[Any, list[Any]] = {}
        #: readers ``add`` is adding: they take no fetch until it has sought their partition
        self._adding: set[Any] = set()
        self._fetched: dict[TopicPartition, int] = {}  # the next offset fetched per partition
        #: the partitions the consumer is assigned now (``_assign``)
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._wake = asyncio.Event()
        self._starting = asyncio.Lock()  # one start of the consumer at a time (``_start``)
        self._closed = False

    def register(self, key: Any, ssp: SSP, next_offset: int | None) -> None:
        tp = TopicPartition(self.physical[ssp.stream_id], ssp.partition)
        self.positions[key] = [ssp, tp, next_offset, None, False]
        self._readers.setdefault(tp, []).append(key)
        self._backlog[key] = []

    async def _start(self) -> AIOKafkaConsumer:
        """The consumer, started on first use: one at a time (a poll and a bounds lookup that
        both find none take the same one), and stopped again if its start fails or is
        cancelled, or the reader was closed meanwhile, so none is left unclosed."""
        async with self._starting:
            if self._consumer is not None:
                return self._consumer
            consumer = new_consumer(self.servers, self.settings, as_fetched=True)
            try:
                await self._open(consumer)
                if self._closed:
                    raise asyncio.CancelledError()  # closed as it started: nothing to read
            except BaseException:
                await asyncio.shield(stop_client(consumer))
                raise
            self._consumer = consumer
            return consumer

    async def _open(self, consumer: AIOKafkaConsumer) -> None:
        tps = list(self._readers)
        try:
            async with asyncio.timeout(self.timeout):
                await consumer.start()
                self._assign(consumer, tps)
        except (KafkaError, TimeoutError, OSError) as exc:
            raise kafka_error("starting the consumer", self.servers, exc, self.settings) from exc
        await self._resolve(consumer, list(self.positions))
        # readers a task that came meanwhile registered (``add`` before the consumer is up)
        while late := [k for k, pos in self.positions.items() if pos[2] is None]:
            await self._resolve(consumer, late)
        if set(self._readers) != set(tps):
            self._assign(consumer, list(self._readers))
        for tp, keys in self._readers.items():
            first = min(self.positions[k][2] for k in keys)
            consumer.seek(tp, first)
            self._fetched[tp] = first

    async def _resolve(self, consumer: AIOKafkaConsumer, keys: list[Any]) -> None:
        """The positions of ``keys`` that are not set yet (their input's ``offset_default``),
        and where bounded inputs end: after their last record as of now."""
        tps = list({self.positions[k][1] for k in keys})
        # where bounded inputs end and upcoming ones start: after their last record
        ends = await true_end_offsets(self.servers, [
            tp for tp in tps if self.positions[self._readers[tp][0]][0].stream_id
            in self.bounded | self.upcoming], self.settings, self.timeout)
        try:
            async with asyncio.timeout(self.timeout):
                starts = await log_starts(self.servers, self.settings, consumer, tps)
        except (KafkaError, TimeoutError, OSError) as exc:
            raise kafka_error("reading where partitions begin", self.servers, exc,
                              self.settings) from exc
        for key in keys:
            pos = self.positions[key]
            ssp, tp = pos[0], pos[1]
            if pos[2] is None:
                pos[2] = ends[tp] if ssp.stream_id in self.upcoming else starts[tp]
            self.starts[ssp] = min(self.starts.get(ssp, pos[2]), pos[2])
            if ssp.stream_id in self.bounded:
                pos[3] = ends[tp]

    async def add(self, entries: list[tuple[Any, SSP, int | None]]) -> None:
        """Readers that come while the consumer runs (``register``'s arguments): a task that
        came to this container. A partition that other readers read already is fetched again
        from the lowest position of its readers (each reader still gets every record once:
        what they had fetched and not taken yet is dropped and fetched again)."""
        before = set(self._readers)
        for key, ssp, start in entries:
            self.register(key, ssp, start)
        consumer = self._consumer
        if consumer is None:  # the first poll starts it with these
            return
        keys = [key for key, _, _ in entries]
        self._adding.update(keys)
        try:
            await self._add(consumer, keys, before)
        finally:
            self._adding.difference_update(keys)

    async def _add(self, consumer: AIOKafkaConsumer, keys: list[Any],
                   before: set[TopicPartition]) -> None:
        """``add``'s readers ``keys`` resolved, and their partitions assigned and sought."""
        await self._resolve(consumer, keys)
        if set(self._readers) != before:
            self._reassign(consumer)
        for tp in {self.positions[k][1] for k in keys}:
            readers = self._readers[tp]
            first = min(self.positions[k][2] for k in readers)
            if tp in before and first >= self._fetched[tp]:
                continue
            for k in readers:
                self._backlog[k] = []
            consumer.seek(tp, first)
            self._fetched[tp] = first

    def remove(self, keys: Iterable[Any]) -> None:
        """Readers of tasks that left this container: their partitions are read no more
        (unless other readers read them)."""
        before = set(self._readers)
        for key in keys:
            pos = self.positions.pop(key, None)
            if pos is None:
                continue
            self._backlog.pop(key, None)
            readers = self._readers[pos[1]]
            readers.remove(key)
            if not readers:
                del self._readers[pos[1]]
                self._fetched.pop(pos[1], None)
                self.starts.pop(pos[0], None)
        if self._consumer is not None and set(self._readers) != before:
            self._reassign(self._consumer)

    def _assign(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> None:
        consumer.assign(tps)
        self._assigned = frozenset(tps)

    def _reassign(self, consumer: AIOKafkaConsumer) -> None:
        """Assign the partitions read now; those read before go on where their fetch was."""
        self._assign(consumer, list(self._readers))
        for tp, offset in self._fetched.items():
            consumer.seek(tp, offset)
        if self._paused and self._readers:
            consumer.pause(*self._readers)

    async def poll(self, keys: list[Any], max_per_key: int, timeout: float | None = None,
                   limits: Mapping[Any, int] | None = None,
                   ) -> list[tuple[Any, int, list[Any]]]:
        watch = self.watch
        if watch is not None:
            watch.check()
        consumer = self._consumer or await self._start()
        if watch is not None and watch.healthy == self._paused:
            # nothing is fetched while the brokers are away, nor once they answer again until
            # the job's topics are checked
            self._paused = not self._paused
            if self._paused:
                consumer.pause(*self._readers)
            else:
                consumer.resume(*self._readers)
        out: list[tuple[Any, int, list[Any]]] = []
        wanted: dict[TopicPartition, int] = {}  # partition -> records to fetch
        for key in keys:
            pos = self.positions[key]
            if pos[3] is not None and pos[2] >= pos[3]:
                if not pos[4]:
                    pos[4] = True
                    out.append((key, pos[2], [EndOfStream(None)]))
                continue
            if self._backlog[key]:
                self._deliver(key, self._backlog[key], _limit(limits, key, max_per_key), out)
            else:
                wanted[pos[1]] = max(wanted.get(pos[1], 0), _limit(limits, key, max_per_key))
        if out:
            return out
        if not wanted:  # every key waits for its task: yield, or nothing else runs
            await self._idle(timeout)
            return out
        # where each partition's fetch begins: if ``add`` seeks it elsewhere meanwhile (for a
        # reader it adds), what this fetch brings back is of the position before
        begun = {tp: self._fetched.get(tp) for tp in wanted}
        try:
            fetched = await consumer.getmany(*wanted, timeout_ms=int((timeout or 0.2) * 1000),
                                             max_records=sum(wanted.values()))
        except OffsetOutOfRangeError as exc:
            raise self._out_of_range(exc) from exc
        except KafkaError as exc:
            raise kafka_error("fetching", self.servers, exc, self.settings) from exc
        active = set(keys)
        for tp, records in fetched.items():
            if tp not in self._readers:  # its tasks left the container during the fetch
                continue
            start = begun.get(tp)
            if self._fetched.get(tp) != start:
                # sought back meanwhile for a reader that came (``add``): these records are
                # of the position before; the consumer fetches again from the new one
                consumer.seek(tp, self._fetched[tp])
                continue
            if records:
                self._fetched[tp] = records[-1].offset + 1
            for key in self._readers[tp]:
                position = self.positions[key][2]
                if position is None:  # a reader ``add`` still resolves: it fetches again for it
                    continue
                if key in self._adding:
                    continue  # behind this fetch, maybe: ``add`` seeks back for it
                mine = [r for r in records if r.offset >= position]
                if key in active:
                    self._deliver(key, mine, _limit(limits, key, max_per_key), out)
                else:
                    self._backlog[key].extend(mine)
        await self._past_markers(consumer, wanted)
        return out

    async def _past_markers(self, consumer: AIOKafkaConsumer,
                            tps: Iterable[TopicPartition]) -> None:
        """Readers that have every record before the consumer's position move to it: offsets
        that hold no record for them (transaction markers, an aborted transaction's records)
        are passed, so a bounded input whose log ends with a marker or aborted records ends, and
        a checkpoint covers them. The position of a read_committed consumer is the first record
        still waiting for its marker: nothing that waits is passed."""
        for tp in tps:
            readers = self._readers.get(tp)
            if not readers:
                continue
            try:
                at = await consumer.position(tp)
            except KafkaError:  # IllegalStateError: its tasks left meanwhile
                continue
            if self._readers.get(tp) is not readers:  # they left, or came again, meanwhile
                continue
            if at > self._fetched.get(tp, at):
                self._fetched[tp] = at
            for key in readers:
                pos = self.positions[key]
                # (a reader added just now has no position until its first fetch sets it; one
                # being added has not had the records before ``at``)
                if pos[2] is not None and pos[2] < at and not self._backlog[key] \
                        and key not in self._adding:
                    pos[2] = at

    async def read_bounds(self, keys: list[Any]) -> dict[Any, tuple[int, int]]:
        """Per reader key: the next offset it reads, and its partition's end offset now (the
        offset after its last record)."""
        if self._consumer is None:
            await self._start()
        tps = {self.positions[k][1] for k in keys}
        try:
            ends = await true_end_offsets(self.servers, tps, self.settings, self.timeout)
        except (KafkaError, TimeoutError, OSError) as exc:
            raise kafka_error("reading end offsets", self.servers, exc, self.settings) from exc
        return {k: (self.positions[k][2], ends[self.positions[k][1]]) for k in keys}

    def waiting_for(self, key: Any) -> str:
        ssp, tp, position, stop = self.positions[key][:4]
        consumer = self._consumer
        text = f"topic {tp.topic!r} partition {tp.partition}: read to offset {position}"
        if consumer is None:
            return text + " (the consumer has not started)"
        high = _highwater(consumer, tp, self._assigned)
        if high is not None:
            text += f", the broker's high watermark {high}"
        if stop is not None:
            text += f", the run stops at {stop}"
        text += f", fetched to {self._fetched.get(tp, position)}"
        held = consumer.held(tp) if isinstance(consumer, ResolvingConsumer) else None
        if held is not None:
            first, producers = held
            text += (f"; the records from offset {first} wait for the COMMIT or ABORT marker "
                     f"of the open transaction of producer id(s) "
                     f"{', '.join(map(str, producers))}")
        return text

    def behind(self, key: Any) -> bool:
        _, tp, position, stop = self.positions[key][:4]
        consumer = self._consumer
        if self._backlog[key]:
            return True
        if consumer is None or position is None:
            return True  # not read yet: the broker may hold records for it
        if stop is not None and position >= stop:
            return False
        # known after a fetch of the partition
        high = _highwater(consumer, tp, self._assigned)
        return high is None or position < high

    def progress(self) -> list[tuple[SSP, int | None, int | None]]:
        """Per partition read: where reading began (None until the consumer started), and the
        broker's high watermark as of the last fetch (None until known), asking nothing of the
        broker."""
        consumer = self._consumer
        tps = {pos[0]: pos[1] for pos in list(self.positions.values())}
        return [(ssp, self.starts.get(ssp), _highwater(consumer, tp, self._assigned))
                for ssp, tp in tps.items()]

    def _out_of_range(self, exc: OffsetOutOfRangeError) -> SamzaError:
        where = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
        parts = ", ".join(f"topic {tp.topic!r} partition {tp.partition} at offset {off}"
                          for tp, off in where.items()) or str(exc)
        return SamzaError(
            f"Kafka at {self.servers} no longer has the records the job reads next ({parts}): "
            f"the broker lost data, or retention removed it before it was read. The job "
            f"stopped rather than skip or reprocess records; see 'Kafka outages' in "
            f"docs/operations.md")

    def _deliver(self, key: Any, records: list[Any], max_per_key: int,
                 out: list[tuple[Any, int, list[Any]]]) -> None:
        """Records of one key, in runs of contiguous offsets, up to its stop; the rest waits."""
        pos = self.positions[key]
        ssp, stop = pos[0], pos[3]
        if stop is not None and records and records[-1].offset >= stop:
            records = [r for r in records if r.offset < stop]
        take, rest = records[:max_per_key], records[max_per_key:]
        self._backlog[key] = rest
        codec = self.codecs[ssp.stream_id]
        if take and take[-1].offset - take[0].offset == len(take) - 1:  # no gap: one run
            first = take[0].offset
            run = [(r.key, r.value, tuple(h) if (h := r.headers) else None) for r in take]
            out.append((key, first, codec.decode_batch(ssp, first, run, self.generation)))
            pos[2] = first + len(run)
            return
        run = []
        first = -1
        for r in take:
            if run and r.offset != first + len(run):
                out.append((key, first, codec.decode_batch(ssp, first, run, self.generation)))
                run = []
            if not run:
                first = r.offset
            run.append((r.key, r.value, tuple(r.headers) if r.headers else None))
        if run:
            out.append((key, first, codec.decode_batch(ssp, first, run, self.generation)))
            pos[2] = first + len(run)

    async def _idle(self, timeout: float | None) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.1 if timeout is None else min(timeout, 0.1)):
                await self._wake.wait()

    def wakeup(self) -> None:
        self._wake.set()

    async def close(self) -> None:
        self._closed = True  # a start under way stops its consumer itself (``_start``)
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await stop_client(consumer)




def _highwater(consumer: AIOKafkaConsumer | None, tp: TopicPartition,
               assigned: frozenset[TopicPartition]) -> int | None:
    """The broker's high watermark of ``tp`` as of the consumer's last fetch of it; None where
    unknown, or where the consumer is not assigned ``tp`` (``assigned``: what it was given
    last, in the loop's same step as the read, so nothing changes it in between). A task's
    reader is registered before its partition is assigned (``add`` first asks the broker where
    the partition begins) and the partition is unassigned as the task leaves; aiokafka asserts
    that the partition is assigned ("Partition is not assigned")."""
    if consumer is None or tp not in assigned:
        return None
    return consumer.highwater(tp)


class KafkaProducer(BufferedProducer):
    """Buffers records per partition; sends them in the background after each processed batch,
    each partition's records as whole record batches (``create_batch``/``send_batch``: no
    future per record); ``flush`` waits for the broker's acknowledgements.

    aiokafka keeps one unsent batch per partition and one produce request in flight per broker,
    so a partition moves at most a batch per round trip: batches are ``BATCH_BYTES`` unless the
    settings give ``max_batch_size`` (aiokafka's 16 KiB made a commit's flush wait for dozens
    of round trips)."""

    BATCH_BYTES = 256 * 1024

    def __init__(self, servers: str, settings: Mapping[str, Any], generation: int,
                 timeout: float = 30.0, watch: BrokerWatch | None = None) -> None:
        super().__init__(generation)
        self.servers = servers
        self.settings = {"max_batch_size": self.BATCH_BYTES, **settings}
        self.timeout = timeout
        self.watch = watch
        self._producer: AIOKafkaProducer | None = None
        #: one per record batch sent and not yet acknowledged: (its delivery future, records)
        self._acks: list[tuple[asyncio.Future[Any], int]] = []
        #: acknowledgements a flush took and awaits: a flush running meanwhile awaits them too
        self._settling: set[asyncio.Task[None]] = set()
        self._sending: asyncio.Task[None] | None = None
        # one sender at a time, so that a partition's records keep their order (made on the
        # running loop: a closed producer may be used again on another one)
        self._send_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._error: BaseException | None = None
        #: (topic, partition) -> the next offset after the last acknowledged record, and the
        #: offset of the first one: the range this producer wrote
        self.end_offsets: dict[tuple[str, int], int] = {}
        self.first_offsets: dict[tuple[str, int], int] = {}
        #: a member of a consumer group sends nothing past its lease (``runtime.kafka.fence``)
        self.lease: Lease | None = None
        #: what closes before this producer: under exactly-once the tasks' own producers
        #: (``runtime.kafka.exactly_once``)
        self.companions: list[Any] = []

    @property
    def brokers_lost(self) -> bool:
        """The broker watch stopped the job: its brokers have not answered for longer than
        ``job.kafka.unavailable.timeout.ms``. Nothing sent reaches them any more, so a close
        does not wait for it."""
        return self.watch is not None and self.watch.error is not None

    def discard(self) -> int:
        """Drop every record not yet handed to the Kafka client (the member was fenced: its
        tasks run elsewhere now), and the error a background send ended with; how many."""
        dropped = 0
        for sid, parts in self._bufs.items():
            for p, buf in enumerate(parts):
                if buf:
                    dropped += len(buf)
                    self._controls.pop((sid, p), None)
                    buf.clear()
        self._error = None
        return dropped

    async def _start(self) -> AIOKafkaProducer:
        producer = AIOKafkaProducer(bootstrap_servers=live_first(self.servers), **self.settings)
        try:
            async with asyncio.timeout(self.timeout):
                await producer.start()
        except (KafkaError, TimeoutError, OSError) as exc:
            with contextlib.suppress(Exception):
                await producer.stop()
            await close_connections(producer)
            raise kafka_error("starting the producer", self.servers, exc, self.settings) from exc
        self._producer = producer
        return producer

    async def _send_buffered(self) -> None:
        loop = asyncio.get_running_loop()
        if self._send_lock is None or self._send_lock[0] is not loop:
            self._send_lock = (loop, asyncio.Lock())
        async with self._send_lock[1]:
            lease = self.lease
            if lease is not None and not lease.valid():
                await lease.wait()
            producer = self._producer or await self._start()
            for sid, parts in self._bufs.items():
                topic = self._physical[sid]
                for p, buf in enumerate(parts):
                    if buf:
                        records = buf[:]
                        buf.clear()
                        self._taken(sid, p, len(records))
                        await self._send_records(producer, topic, p, records)

    async def _send_records(self, producer: AIOKafkaProducer, topic: str, partition: int,
                            records: list[Record]) -> None:
        """Records of one partition, in order, as as few record batches as fit."""
        acks = self._acks
        lease = self.lease
        batch = producer.create_batch()
        # records go straight into the batch's record builder, each at its offset in the batch
        # (aiokafka's ``BatchBuilder.append`` adds a serializer step and keyword handling per
        # record that raw bytes do not need); the batch is told its count before it is sent
        append = builder_append(batch)
        n = 0
        self.sends += len(records)
        for k, v, h in records:
            headers = list(h) if h else []
            if append(n, None, key=k, value=v, headers=headers) is None:  # full
                seal(batch, n)
                self.sent_bytes += batch.size()
                if lease is not None and not lease.valid():
                    await lease.wait()
                acks.append((await producer.send_batch(batch, topic, partition=partition), n))
                batch = producer.create_batch()
                append = builder_append(batch)
                append(0, None, key=k, value=v, headers=headers)  # a first one fits
                n = 0
            n += 1
        seal(batch, n)
        self.sent_bytes += batch.size()
        if lease is not None and not lease.valid():
            await lease.wait()
        acks.append((await producer.send_batch(batch, topic, partition=partition), n))

    def signal(self) -> None:
        if self._error is not None:
            raise self._error
        if self.watch is not None:
            self.watch.check()
        if self._sending is None or self._sending.done():
            self._sending = asyncio.get_running_loop().create_task(self._background())

    async def _background(self) -> None:
        try:
            await self._send_buffered()
        except (KafkaError, OSError) as exc:  # reported by the next signal or flush
            self._error = kafka_error("producing", self.servers, exc, self.settings)
        except Exception as exc:
            self._error = exc
        else:
            # records a task buffered while this send awaited the client, after it had taken
            # their partition's buffer: that task's signal found this send running, and without
            # another send they would wait for the next commit's flush (a quiet input's last
            # outputs did). A send of its own, not a loop in this one: a flush waits for the
            # send under way when it began, not for as long as the tasks keep producing
            if any(buf for parts in self._bufs.values() for buf in parts):
                self._sending = asyncio.get_running_loop().create_task(self._background())

    async def flush(self) -> None:
        """Waits for the broker's acknowledgements; while a ``watch`` says the brokers are away,
        aiokafka retries, and the watch's error ends the wait."""
        began = time.perf_counter_ns()
        try:
            if self.watch is not None:
                await self.watch.guard(self._flush())
            else:
                await self._flush()
        finally:
            self.flush_ns += time.perf_counter_ns() - began

    async def _flush(self) -> None:
        sending = self._sending
        if sending is not None and not sending.cancelled():
            # shielded: a flush cancelled while it waits (a task stopped mid-commit) must not
            # cancel the send that later flushes wait for too
            await asyncio.shield(sending)
        if self._error is not None:
            err, self._error = self._error, None
            raise err
        try:
            async with asyncio.timeout(self.timeout):
                await self._send_buffered()
                acks, self._acks = self._acks, []
                loop = asyncio.get_running_loop()
                if acks:
                    settle = loop.create_task(self._settle(acks))
                    self._settling.add(settle)
                    settle.add_done_callback(self._settled)
                # records buffered before this flush may have been sent by another one (tasks
                # commit at once): their acknowledgements count as this flush's
                settling = [t for t in self._settling if t.get_loop() is loop]
                if settling:
                    await asyncio.wait(settling)
                    for t in settling:
                        t.result()
        except (KafkaError, TimeoutError, OSError) as exc:
            raise kafka_error("producing", self.servers, exc, self.settings) from exc

    def _settled(self, task: asyncio.Task[None]) -> None:
        self._settling.discard(task)
        if not task.cancelled():
            task.exception()  # raised by the flushes that awaited it

    async def _settle(self, acks: list[tuple[asyncio.Future[Any], int]]) -> None:
        """Await the acknowledgements of ``acks`` and note the offsets they give."""
        done = await asyncio.gather(*(fut for fut, _ in acks))
        ends, firsts = self.end_offsets, self.first_offsets
        for md, (_, n) in zip(done, acks, strict=True):
            key = (md.topic, md.partition)
            first = md.offset  # the batch's base offset
            if first + n > ends.get(key, -1):
                ends[key] = first + n
            if first < firsts.get(key, first + 1):
                firsts[key] = first

    async def close(self) -> None:
        for companion in self.companions:
            await companion.close()
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self.flush()
            producer, self._producer = self._producer, None
            # a producer stops once its batches are sent: not while the brokers are away
            await stop_client(producer, LOST_STOP_S if self.brokers_lost else self.timeout)
        if self.watch is not None:  # the container's last client to close
            await self.watch.stop()


@dataclass
class CheckpointTopic:
    """What a job's checkpoint topic holds: the last checkpoint of each task, when the broker
    took each (the record's timestamp, ms), and the job's generation and elasticity factor
    (None where the topic has none yet)."""

    data: dict[str, dict[str, Any]] = field(default_factory=dict)
    timestamps: dict[str, int] = field(default_factory=dict)
    generation: int | None = None
    elasticity: int | None = None
    #: the timestamp of the topic's last record (ms), None when it is empty
    last_write: int | None = None
    #: how many records the topic holds (of any key)
    records: int = 0
    #: per task, its records ignored: written in an older group generation than one before them
    #: (by a member fenced out of the group, ``runtime.kafka.fence``)
    fenced: dict[str, int] = field(default_factory=dict)
    #: the members of the job's consumer group, as each last wrote (``write_member``)
    members: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the latest group generation a member wrote, those that left since included: a member
    #: of an older one is gone, even once every member of the latest has left
    member_generation: int | None = None


async def read_checkpoint_topic(servers: str, topic: str, settings: Mapping[str, Any],
                                timeout: float) -> CheckpointTopic:
    """Read a checkpoint topic in full, without a consumer group (nothing is committed). Read
    committed (exactly once), a checkpoint counts once its transaction's COMMIT marker is in the
    log (``runtime.kafka.committed``): never one of an aborted or an open transaction."""
    out = CheckpointTopic()
    tp = TopicPartition(topic, 0)
    if settings.get("isolation_level") == "read_committed":
        try:
            async with asyncio.timeout(timeout):
                for r in await read_committed_log(servers, topic, 0, settings):
                    _take_checkpoint(out, r.key, r.value, r.timestamp)
        except (KafkaError, TimeoutError, OSError) as exc:
            raise kafka_error(f"reading checkpoints from {topic!r}", servers, exc) from exc
        return out
    consumer = new_consumer(servers, settings, brief=True)
    try:
        async with asyncio.timeout(timeout):
            await consumer.start()
            consumer.assign([tp])
            end = (await consumer.end_offsets([tp]))[tp]
            await seek_to_starts(servers, settings, consumer, [tp])
            # to the end as the reading began, however slow a fetch is (a busy broker, a
            # leader just elected): the overall timeout bounds it, an empty fetch does not
            while end and await consumer.position(tp) < end:
                batch = await consumer.getmany(tp, timeout_ms=200)
                for r in batch.get(tp, []):
                    _take_checkpoint(out, r.key, r.value, r.timestamp)
    except (KafkaError, TimeoutError, OSError) as exc:
        raise kafka_error(f"reading checkpoints from {topic!r}", servers, exc) from exc
    finally:
        await stop_client(consumer)
    return out


def _take_checkpoint(out: CheckpointTopic, key: bytes | None, value: bytes | None,
                     timestamp: int) -> None:
    """One record of a checkpoint topic, read in log order, into ``out``."""
    if key is not None and key.startswith(CONTAINER_KEY):
        return  # a container's claim on its id (runtime.kafka.claim)
    out.records += 1
    out.last_write = timestamp
    if key == _GENERATION and value is not None:
        out.generation = int(value)
    elif key == _ELASTICITY and value is not None:
        out.elasticity = int(value)
    elif key is not None and key.startswith(_MEMBER):
        name = key[len(_MEMBER):].decode()
        if value is None:  # the member left the group
            out.members.pop(name, None)
        else:
            member = out.members[name] = checkpoints.decode(value)
            gen = member.get("generation")
            if isinstance(gen, int) and (out.member_generation is None
                                         or gen > out.member_generation):
                out.member_generation = gen
    elif key is not None and value is not None:
        task = key.decode()
        data = checkpoints.decode(value)
        if not checkpoints.supersedes(out.data.get(task), data):
            out.fenced[task] = out.fenced.get(task, 0) + 1
            return
        out.data[task] = data
        out.timestamps[task] = timestamp


class KafkaCheckpoints:
    """A compacted topic with one record per task: ``load()`` reads it in full before a run."""

    def __init__(self, servers: str, topic: str, producer: KafkaProducer,
                 settings: Mapping[str, Any] | None = None, timeout: float = 10.0) -> None:
        self.servers = servers
        self.topic = topic
        self.producer = producer
        self.settings = dict(settings or {})
        self.timeout = timeout
        self._data: dict[str, dict[str, Any]] = {}
        #: how many runs the job has had: control records carry it (``runtime.engine.codec``)
        self.generation = 0
        #: the job's last ``job.elasticity.factor``
        self.elasticity = 1
        #: whether the topic held no record at the last ``load()``: no run of the job started
        #: on these brokers (every run records its generation before it opens a store)
        self.empty = True
        #: what a member of a consumer group stamps its checkpoints with: its group generation
        #: and its name (``runtime.engine.checkpoints``)
        self.stamp: dict[str, Any] = {}
        #: the producer stream of the topic (a task's own producer has it too, exactly once)
        self.stream_id = f"__checkpoint__{topic}"
        producer.add_stream(self.stream_id, topic, 1, None)
        #: per task, its event-time progress as of the checkpoint being written (``Committer``)
        self.times: dict[str, Any] = {}
        #: per task, its sinks' record for the checkpoint being written (``runtime.engine.sinks``)
        self.sinks: dict[str, Any] = {}
        #: per task, what it applied of its intermediate streams (``runtime.engine.origins``)
        self.applied: dict[str, Any] = {}

    async def load(self) -> None:
        got = await read_checkpoint_topic(self.servers, self.topic, self.settings, self.timeout)
        self._data.update({t: d for t, d in got.data.items()
                           if checkpoints.supersedes(self._data.get(t), d)})
        self.empty = not got.records and not self._data
        self.generation = got.generation if got.generation is not None else self.generation
        self.elasticity = got.elasticity if got.elasticity is not None else self.elasticity

    def read(self, task_name: str) -> dict[SSP, int]:
        return checkpoints.offsets_of(self._data.get(task_name, {}))

    def read_changelogs(self, task_name: str) -> dict[str, int]:
        return checkpoints.changelogs_of(self._data.get(task_name, {}))

    def read_times(self, task_name: str) -> Any:
        return checkpoints.times_of(self._data.get(task_name, {}))

    def read_sinks(self, task_name: str) -> dict[str, Any]:
        return checkpoints.sinks_of(self._data.get(task_name, {}))

    def read_applied(self, task_name: str) -> dict[str, Any]:
        return checkpoints.applied_of(self._data.get(task_name, {}))

    def written(self, task_name: str) -> float | None:
        """When the task's checkpoint was written (seconds since the epoch), as status reads it."""
        return checkpoints.written_of(self._data.get(task_name, {}))

    async def write(self, task_name: str, offsets: Mapping[SSP, int],
                    changelogs: Mapping[str, int] | None = None, *,
                    replace: bool = False) -> None:
        """``replace``: drop what the task's checkpoint held before (not its epoch)."""
        old = self._data.get(task_name, {})
        data = checkpoints.merge({"epoch": checkpoints.epoch_of(old)} if replace else old,
                                 offsets, changelogs, self.stamp, self.times.get(task_name),
                                 self.sinks.get(task_name), self.applied.get(task_name))
        self.producer.buffer(f"__checkpoint__{self.topic}", 0).append(
            (task_name.encode(), checkpoints.encode(data), None))
        await self.producer.flush()
        self._data[task_name] = data

    async def claim(self, task_names: list[str]) -> None:
        """A member of a consumer group takes tasks over: each one's checkpoint again, as it
        is, with the task's epoch one higher; a later checkpoint of an earlier owner is ignored
        (``runtime.kafka.fence``)."""
        buf = self.producer.buffer(f"__checkpoint__{self.topic}", 0)
        claimed = {}
        for name in task_names:
            old = self._data.get(name, {})
            data = checkpoints.merge(old, {}, None,
                                     {**self.stamp, "epoch": checkpoints.epoch_of(old) + 1})
            buf.append((name.encode(), checkpoints.encode(data), None))
            claimed[name] = data
        await self.producer.flush()
        self._data.update(claimed)

    async def write_member(self, name: str, info: Mapping[str, Any] | None) -> None:
        """A member of the job's consumer group says what it runs after a rebalance (None: it
        left the group), for ``samza-dsl status``."""
        value = None if info is None else checkpoints.encode(info)
        self.producer.buffer(f"__checkpoint__{self.topic}", 0).append(
            (_MEMBER + name.encode(), value, None))
        await self.producer.flush()

    def record(self, task_name: str, offsets: Mapping[SSP, int],
               changelogs: Mapping[str, int] | None = None
               ) -> tuple[Record, dict[str, Any]]:
        """The record of the task's checkpoint (for a task's transaction to write), and what
        ``remember`` takes once it is committed."""
        data = checkpoints.merge(self._data.get(task_name, {}), offsets, changelogs, self.stamp,
                                 self.times.get(task_name), self.sinks.get(task_name))
        return (task_name.encode(), checkpoints.encode(data), None), data

    def remember(self, task_name: str, data: dict[str, Any]) -> None:
        """A checkpoint of ``record`` was committed."""
        self._data[task_name] = data

    async def write_generation(self, generation: int, elasticity: int | None = None) -> None:
        """The run's generation, and the job's ``job.elasticity.factor``."""
        buf = self.producer.buffer(f"__checkpoint__{self.topic}", 0)
        if elasticity is not None:
            buf.append((_ELASTICITY, str(elasticity).encode(), None))
            self.elasticity = elasticity
        buf.append((_GENERATION, str(generation).encode(), None))
        await self.producer.flush()
        self.generation = generation

    def tasks(self) -> dict[str, dict[SSP, int]]:
        return {t: self.read(t) for t in self._data}


def _limit(limits: Mapping[Any, int] | None, key: Any, default: int) -> int:
    """A reader key's own limit of records a poll hands it, else ``default``."""
    return default if limits is None else limits.get(key, default)
