"""``samza-dsl load``, ``dump`` and ``run --input``/``--sample`` on a job whose streams are Kafka
topics: the same commands as on the embedded local log, against the topics.

- ``kafka_streams`` plans the job against the broker (partition counts of existing topics) and
  gives each stream's topic, partition count and codec, and the topics of the stores'
  changelogs and of ``<job>-dead-letter``, without creating anything;
- ``kafka_load`` appends messages to a topic as ``LocalJob.load`` appends them to the local log:
  a ``KV`` to the partition of its serialized key (murmur2, Kafka's default partitioner), other
  messages round-robin. Every message is encoded before anything is sent (``encode_load``), so
  a message that does not encode fails the load with nothing written, naming its file and line.
  A topic the plan needs that does not exist yet is created with the planned count (and the
  stream's ``retention.*`` configs). Then the records are sent (``produce_load``): Kafka has no
  transaction across partitions here, so a failure part way (the broker gone) cannot be undone;
  it raises ``PartialLoad``, which says how many messages each partition acknowledged and
  where the others are to load them once more (the tail of the file, or a file of them);
- ``kafka_held`` counts the records a topic holds (end less start offsets);
- ``TopicReader`` reads topics on demand and offers the part of ``LocalLog``'s reading interface
  that ``runtime.engine.dump`` uses, so a dump prints the same lines on both systems, a fetch at a
  time (each bounded by its own timeout), and ``dump --limit N`` reads only the last messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shlex
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from operators.hashing import KeyPartitioner
from runtime.engine.codec import Record, StreamCodec, serde_error_policy, stream_serde
from runtime.engine.serde_util import default_key_bytes
from runtime.host.jsonlines import JsonLines
from runtime.kafka.admin import TopicSpec, describe_topics, ensure_topics, retention_configs
from runtime.kafka.outage import close_connections, quiet_aiokafka
from runtime.kafka.resolved import fetch_position
from runtime.kafka.security import check_login, security_settings
from runtime.kafka.system import (
    KafkaProducer,
    kafka_error,
    log_starts,
    new_consumer,
    offset_bounds,
    stop_client,
    true_end_offsets,
)
from samza_dsl.errors import SamzaError
from samza_dsl.jobconfig import JobConfig
from samza_dsl.kv import KV
from samza_dsl.serdes import KVSerde

__all__ = ["KafkaStreams", "kafka_streams", "reader_config", "kafka_load", "kafka_load_file",
           "encode_load", "produce_load",
           "EncodedLoad", "PartialLoad", "kafka_held", "TopicReader"]


@dataclass
class KafkaStreams:
    """A job's streams on Kafka: what ``load``, ``dump`` and ``run --input`` need."""

    job_name: str
    servers: str
    consumer_settings: dict[str, Any]
    producer_settings: dict[str, Any]
    plan: Any
    physical: dict[str, str]
    counts: dict[str, int]
    codecs: dict[str, StreamCodec]
    existing: dict[str, int | None]
    #: store name -> the topic of its changelog
    changelogs: dict[str, str] = field(default_factory=dict)
    #: the job's dead-letter topic
    dead_letter: str = ""
    #: every topic of the job (streams, changelogs, dead letters) -> its partition count on the
    #: brokers, None where it does not exist
    topics: dict[str, int | None] = field(default_factory=dict)

    def check(self, stream_id: str, what: str = "stream") -> None:
        if stream_id not in self.physical:
            raise SamzaError(f"{stream_id!r} is not a {what} of job {self.job_name!r}; its "
                             f"streams: {', '.join(sorted(self.physical))}")


def reader_config(app: Any, config: Mapping[str, Any]) -> JobConfig:
    """The config of a command that reads a Kafka job's topics or resets them (``load``,
    ``dump``, ``status``, ``reset``): the run's own flags, taken as they are, except how a run's
    containers share the tasks (``job.coordinator``), which does not apply to a command that
    runs none."""
    return JobConfig.of(app, config).updated({"job.coordinator": "static"})


async def kafka_streams(app: Any, config: Mapping[str, Any], timeout: float = 10.0
                        ) -> KafkaStreams:
    """Plan ``app`` against its Kafka brokers; creates nothing."""
    from runtime.host.jobdir import dead_letter_stream, metrics_stream
    from runtime.kafka.job import KafkaJob

    job = KafkaJob(app, reader_config(app, config), timeout=timeout)  # checks the systems; no I/O
    await check_login(job.servers, job.login, job.security, min(timeout, 10.0))
    declared = {**app.spec().inputs, **app.spec().outputs}
    found = await describe_topics(job.servers, {d.physical_name for d in declared.values()},
                                  timeout=timeout, **job.login)
    known = {sid: found[d.physical_name] for sid, d in declared.items()
             if d.partitions is None and found[d.physical_name] is not None}
    plan = app.plan(partitions=known, config=job.config)
    counts = {sid: s.partitions for sid, s in plan.streams.items()}
    widest = max([n for sid, n in counts.items() if n and plan.streams[sid].kind == "input"]
                 or [1])
    codecs = {}
    for sid, s in plan.streams.items():
        serde = stream_serde(s.descriptor.serde, keyed=s.keyed,
                             intermediate=s.kind in ("intermediate", "broadcast"),
                             types=plan.app.types)
        codecs[sid] = StreamCodec(sid, serde, policy=serde_error_policy(plan.config, sid))
    physical = {sid: s.physical_name for sid, s in plan.streams.items()}
    # as KafkaJob names them
    changelogs = {name: store.changelog_stream
                  for name, store in plan.stores.items() if store.changelog is not None}
    dead = dead_letter_stream(job.job_name)
    topics: dict[str, int | None] = dict(found)
    others = [t for t in [*physical.values(), *changelogs.values(), dead,
                          metrics_stream(job.job_name)] if t not in topics]
    topics.update(await describe_topics(job.servers, others, timeout=timeout, **job.login))
    return KafkaStreams(job.job_name, job.servers, job.consumer_settings, job.producer_settings,
                        plan, physical, {sid: (n if n else widest) for sid, n in counts.items()},
                        codecs, {sid: topics.get(p) for sid, p in physical.items()},
                        changelogs, dead, topics)


async def kafka_held(streams: KafkaStreams, stream_ids: Iterable[str], timeout: float = 10.0
                     ) -> dict[str, int]:
    """The records each topic holds now (0 for one that does not exist)."""
    out: dict[str, int] = {}
    tps: dict[str, list[TopicPartition]] = {}
    for sid in stream_ids:
        n = streams.existing.get(sid)
        out[sid] = 0
        if n:
            tps[sid] = [TopicPartition(streams.physical[sid], p) for p in range(n)]
    flat = [tp for v in tps.values() for tp in v]
    if not flat:
        return out
    ends = await true_end_offsets(streams.servers, flat, streams.consumer_settings, timeout)
    consumer = new_consumer(streams.servers, streams.consumer_settings, brief=True)
    try:
        async with asyncio.timeout(timeout):
            await consumer.start()
            starts = await log_starts(streams.servers, streams.consumer_settings, consumer, flat)
    except (KafkaError, TimeoutError, OSError) as exc:
        raise kafka_error("reading the start offsets of topics", streams.servers, exc) from exc
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()
        await close_connections(consumer)
    for sid, parts in tps.items():
        out[sid] = sum(max(0, ends[tp] - starts[tp]) for tp in parts)
    return out


# -- load ------------------------------------------------------------------------------------------


@dataclass
class EncodedLoad:
    """The messages of one load, encoded and assigned to partitions, before anything is sent."""

    stream_id: str
    topic: str
    messages: Sequence[Any]
    #: per partition: its records, and the index in ``messages`` of each
    records: list[list[Record]]
    indices: list[list[int]]


class PartialLoad(SamzaError):
    """Producing failed part way: ``acked[p]`` messages of partition ``p`` were acknowledged (of
    ``sent[p]``); ``rest`` is the file holding the others (None if they were not written to a
    file: ``resume_line`` is then the line of the input file to load again from)."""

    def __init__(self, message: str, acked: list[int], sent: list[int], rest: str | None,
                 resume_line: int | None) -> None:
        super().__init__(message)
        self.acked = acked
        self.sent = sent
        self.rest = rest
        self.resume_line = resume_line


def _where(messages: Sequence[Any], index: int, label: str) -> str:
    return messages.where(index) if isinstance(messages, JsonLines) else f"{label} {index + 1:,}"


def encode_load(streams: KafkaStreams, stream_id: str, messages: Iterable[Any],
                label: str = "message") -> EncodedLoad:
    """Every message encoded with the stream's serde and given its partition, as ``kafka_load``
    sends them; no I/O. A message that does not encode raises a ``SamzaError`` naming it (its
    file and line for a ``JsonLines``, else ``label`` and its number)."""
    streams.check(stream_id)
    topic = streams.physical[stream_id]
    n = streams.existing.get(stream_id) or streams.counts[stream_id]
    codec = streams.codecs[stream_id]
    key_serde = codec.serde.key_serde if isinstance(codec.serde, KVSerde) else None
    partitioner = KeyPartitioner(n, key_serde.serialize if key_serde is not None
                                 else default_key_bytes)
    msgs = messages if isinstance(messages, Sequence) else list(messages)
    records: list[list[Record]] = [[] for _ in range(n)]
    indices: list[list[int]] = [[] for _ in range(n)]
    rr = 0
    for i, m in enumerate(msgs):
        try:
            record = codec.encode(m)
            if type(m) is KV and m.key is not None:
                p = partitioner(m.key)
            else:
                p, rr = rr % n, rr + 1
        except Exception as exc:
            raise SamzaError(f"{_where(msgs, i, label)}: {exc}; nothing was loaded into stream "
                             f"{stream_id!r} (topic {topic!r}): every message is checked before "
                             f"any is sent. Fix it and load again") from None
        records[p].append(record)
        indices[p].append(i)
    return EncodedLoad(stream_id, topic, msgs, records, indices)


async def kafka_load(streams: KafkaStreams, stream_id: str, messages: Iterable[Any],
                     timeout: float = 30.0, *, label: str = "message",
                     load_command: str | None = None) -> int:
    """Append ``messages`` to the stream's topic; returns how many. Nothing is sent unless
    every message encodes; a failure while sending raises ``PartialLoad``. ``load_command`` is
    the ``samza-dsl load`` command (without the file) that its message tells to run for the rest."""
    return await produce_load(streams, encode_load(streams, stream_id, messages, label),
                              timeout, load_command=load_command)


#: messages a file load reads, encodes and sends at a time: its memory is about this many
#: messages, whatever the file's size
LOAD_CHUNK = 20_000


async def kafka_load_file(streams: KafkaStreams, stream_id: str, path: str,
                          lines: Callable[[], Iterable[tuple[int, Any]]], timeout: float = 30.0,
                          *, load_command: str | None = None, chunk: int = LOAD_CHUNK) -> int:
    """Append the messages of the JSON Lines file ``path`` to the stream's topic; returns how
    many. ``lines()`` gives ``(line number, message)`` of each message, and is called twice:
    first every message is encoded (a bad line loads nothing, and the error names its
    ``path:line``), then the file is sent ``chunk`` messages at a time, so a load's memory does
    not grow with its file. A failure while sending raises ``PartialLoad``, covering what the
    earlier chunks loaded and the lines after the chunk that failed."""

    def chunks() -> Iterable[JsonLines]:
        it = iter(lines())
        while True:
            batch = JsonLines(path)
            for lineno, m in itertools.islice(it, chunk):
                batch.append(m)
                batch.lines.append(lineno)
            if not batch:
                return
            yield batch

    total = sum(len(encode_load(streams, stream_id, c).messages) for c in chunks())
    done = 0
    for c in chunks():
        done += await produce_load(streams, encode_load(streams, stream_id, c), timeout,
                                   load_command=load_command, loaded=(done, total))
    return done


async def produce_load(streams: KafkaStreams, load: EncodedLoad, timeout: float = 30.0, *,
                       load_command: str | None = None,
                       loaded: tuple[int, int] | None = None) -> int:
    """Send an encoded load (creating its topic if missing); returns the message count.
    ``loaded`` is, for one chunk of a file, (messages the chunks before it loaded, messages
    of the whole file): a ``PartialLoad`` then speaks of the file."""
    sid, topic = load.stream_id, load.topic
    n = len(load.records)
    if streams.existing.get(sid) is None:
        await ensure_topics(streams.servers, [TopicSpec(
            topic, n, configs=retention_configs(streams.plan.config.stream(sid)))], timeout=timeout,
            **security_settings(streams.consumer_settings))
        streams.existing[sid] = n
        streams.topics[topic] = n
    total = len(load.messages)
    if not total:
        return 0
    acked, ends, error = await _produce(streams, topic, load.records, timeout)
    if all(sum(c for _, c in ranges) == len(recs)
           for ranges, recs in zip(acked, load.records, strict=True)):
        return total
    raise _partial(streams, load, acked, ends, error, load_command, loaded)


async def _produce(streams: KafkaStreams, topic: str, records: list[list[Record]],
                   timeout: float
                   ) -> tuple[list[list[tuple[int, int]]], list[int | None], BaseException | None]:
    """Send each partition's records in order, as whole record batches, all partitions at once;
    returns the records of each partition the broker acknowledged, as ``(first, count)``
    ranges of its list, the offset after the last acknowledged one (None where none was), and
    the first error. After an error, what was sent gets ``timeout / 2`` more to be
    acknowledged, and the producer as long to stop."""
    n = len(records)
    settings = {"max_batch_size": KafkaProducer.BATCH_BYTES,
                "request_timeout_ms": max(1, int(timeout * 1000)), **streams.producer_settings}
    producer = AIOKafkaProducer(bootstrap_servers=streams.servers, **settings)
    #: per partition: (delivery future, first record, records) of each batch sent
    sent: list[list[tuple[asyncio.Future[Any], int, int]]] = [[] for _ in range(n)]
    error: BaseException | None = None
    with quiet_aiokafka():  # each of aiokafka's messages once while the broker is away
        try:
            error = await _send(producer, topic, records, sent, timeout)
            futures = [fut for batches in sent for fut, _, _ in batches]
            if futures:
                await asyncio.wait(futures, timeout=timeout if error is None else timeout / 2)
        finally:
            await stop_client(producer, timeout if error is None else timeout / 2)
    acked: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    ends: list[int | None] = [None] * n
    for p, batches in enumerate(sent):
        for fut, first, count in batches:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                acked[p].append((first, count))
                end = fut.result().offset + count
                ends[p] = max(end, ends[p] or 0)
            elif error is None:
                error = (fut.exception() if fut.done() and not fut.cancelled()
                         else TimeoutError(f"no acknowledgement within {timeout:g} s"))
    return acked, ends, error


async def _send(producer: AIOKafkaProducer, topic: str, records: list[list[Record]],
                sent: list[list[tuple[asyncio.Future[Any], int, int]]], timeout: float
                ) -> BaseException | None:
    """Start ``producer`` and hand it the records, a batch per partition in turn, noting each
    batch in ``sent``; the error that stopped it, if one did."""
    try:
        async with asyncio.timeout(timeout):
            await producer.start()
    except (KafkaError, TimeoutError, OSError) as exc:
        return exc
    pos = [0] * len(records)
    while any(pos[p] < len(recs) for p, recs in enumerate(records)):
        for p, recs in enumerate(records):
            if pos[p] >= len(recs):
                continue
            batch = producer.create_batch()
            count = 0
            for k, v, h in recs[pos[p]:]:  # a first record always fits
                if batch.append(timestamp=None, key=k, value=v,
                                headers=list(h) if h else None) is None:
                    break
                count += 1
            try:
                async with asyncio.timeout(timeout):
                    fut = await producer.send_batch(batch, topic, partition=p)
            except TimeoutError:
                return TimeoutError(f"the producer could not hand over more records within "
                                    f"{timeout:g} s")
            except (KafkaError, OSError) as exc:
                return exc
            sent[p].append((fut, pos[p], count))
            pos[p] += count
    return None


def _partial(streams: KafkaStreams, load: EncodedLoad, acked: list[list[tuple[int, int]]],
             ends: list[int | None], error: BaseException | None,
             load_command: str | None, loaded: tuple[int, int] | None = None) -> PartialLoad:
    """The error of a load that failed part way: what each partition acknowledged, and how to
    load the rest (the messages the broker did not acknowledge, in the order given, then, for
    a chunk of a file, the file's lines after the chunk)."""
    sid, topic, msgs = load.stream_id, load.topic, load.messages
    total = len(msgs)
    before, file_total = loaded if loaded is not None else (0, total)
    sent = [len(r) for r in load.records]
    counts = [sum(c for _, c in ranges) for ranges in acked]
    done = sum(counts)
    rest_set = set(range(total))
    for p, ranges in enumerate(acked):
        for first, count in ranges:
            rest_set.difference_update(load.indices[p][first:first + count])
    rest = sorted(rest_set)
    others = len(rest) + file_total - before - total  # with the lines after this chunk
    reason = f"{type(error).__name__}: {error}" if error is not None else "not acknowledged"
    parts = ", ".join(
        f"partition {p}: {counts[p]:,} of {sent[p]:,}"
        + (f" (it should end at offset {ends[p]:,})" if ends[p] is not None else "")
        for p in range(len(sent)) if sent[p])
    if file_total != total:
        parts = f"of the chunk of {total:,} sent last: {parts}"
    command = load_command or f"samza-dsl load APP {sid}"
    path = msgs.path if isinstance(msgs, JsonLines) else None
    rest_file = resume_line = None
    if isinstance(msgs, JsonLines) and path is not None and rest == list(range(rest[0], total)):
        resume_line = msgs.lines[rest[0]]
        todo = (f"The {others:,} other(s) are lines {resume_line:,} to the end of {path}: "
                f"once the broker is back, load them with "
                f"`tail -n +{resume_line} {shlex.quote(path)} > rest.jsonl && {command} rest.jsonl`")
    else:
        lines = msgs.lines if isinstance(msgs, JsonLines) else []
        after = lines[-1] if lines and others > len(rest) else None
        rest_file, problem = _write_rest(msgs, rest, path, sid, after)
        if rest_file is not None:
            todo = (f"The {others:,} other(s) are in {rest_file}, in the order given: once "
                    f"the broker is back, load them with `{command} {shlex.quote(rest_file)}`")
        else:
            todo = (f"The {others:,} other(s) could not be written to a file ({problem}): "
                    f"they are, in each partition, the messages after the acknowledged ones, "
                    f"in the order given"
                    + (f", then lines {after + 1:,} to the end of {path}" if after else ""))
    return PartialLoad(
        f"loading {file_total:,} message(s) into stream {sid!r} (topic {topic!r}) on Kafka at "
        f"{streams.servers} failed part way ({reason}): {before + done:,} of them were "
        f"acknowledged and "
        f"stay in the topic, as Kafka cannot take them back ({parts}). {todo}. (A request in "
        f"flight when the connection broke may have been written without an acknowledgement: "
        f"if a partition ends past the offset given, its first messages among the others are "
        f"there already.)", counts, sent, rest_file, resume_line)


def _write_rest(msgs: Sequence[Any], rest: list[int], path: str | None, sid: str,
                after: int | None = None) -> tuple[str | None, str]:
    """The messages ``rest`` of ``msgs`` as JSON Lines in a new file next to the input file
    (or in the current directory; else in the temporary directory), then the lines of the
    input file after line ``after`` as they are: (its path, or None and why not)."""
    import msgspec

    try:
        data = b"".join(msgspec.json.encode({"key": msgs[i].key, "value": msgs[i].value}
                                            if type(msgs[i]) is KV else msgs[i]) + b"\n"
                        for i in rest)
    except (TypeError, msgspec.EncodeError) as exc:
        return None, f"a message is not JSON: {exc}"
    base = os.path.basename(path) if path else sid
    problem = ""
    for folder in (os.path.dirname(os.path.abspath(path)) if path else os.getcwd(),
                   tempfile.gettempdir()):
        try:
            fd, name = tempfile.mkstemp(prefix=f"{base}.unloaded-", suffix=".jsonl", dir=folder)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                if after is not None and path is not None:
                    with open(path, "rb") as src:
                        for line in itertools.islice(src, after, None):
                            f.write(line if line.endswith(b"\n") else line + b"\n")
            return name, ""
        except OSError as exc:
            problem = f"{folder}: {exc.strerror or exc}"
    return None, problem


# -- dump ------------------------------------------------------------------------------------------


class TopicReader:
    """Reads a job's topics on demand, for ``runtime.engine.dump``: the reading part of ``LocalLog``'s
    interface. A partition's end is the offset after its last record as of the first look at
    its topic (``true_end_offsets``); every fetch waits at most ``fetch_timeout`` seconds for
    records that the partition holds. It runs an event loop of its own: use it outside one,
    and ``close()`` it (or use it as a context manager)."""

    def __init__(self, streams: KafkaStreams, fetch_timeout: float = 10.0, *,
                 committed: bool = True) -> None:
        self.streams = streams
        self.fetch_timeout = fetch_timeout
        #: read as a downstream reader of the job does: committed records only (by the log's
        #: transaction markers); False: every record, those of open or aborted transactions too
        self.settings = {**streams.consumer_settings,
                         "isolation_level": "read_committed" if committed
                         else "read_uncommitted"}
        self._loop = asyncio.new_event_loop()
        self._consumer: Any = None
        self._bounds: dict[str, dict[int, tuple[int, int]]] = {}
        self._at: tuple[TopicPartition, int] | None = None  # where the consumer reads on

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            if self._consumer is not None:
                self._loop.run_until_complete(stop_client(self._consumer))
        finally:
            self._consumer = None
            self._loop.close()

    def _run(self, coro: Any, what: str) -> Any:
        try:
            return self._loop.run_until_complete(coro)
        except (KafkaError, TimeoutError, OSError) as exc:
            raise kafka_error(what, self.streams.servers, exc) from exc

    def partitions(self, physical: str) -> int | None:
        return self.streams.topics.get(physical)

    def bounds(self, physical: str, partition: int) -> tuple[int, int]:
        """(first offset, offset after the last record) of a partition."""
        b = self._bounds.get(physical)
        if b is None:
            tps = [TopicPartition(physical, p) for p in range(self.partitions(physical) or 0)]
            got = self._run(offset_bounds(self.streams.servers, dict.fromkeys(tps),
                                          self.streams.consumer_settings, self.fetch_timeout,
                                          what=f"reading the offsets of topic {physical!r}"),
                            f"reading the offsets of topic {physical!r}")
            b = self._bounds[physical] = {tp.partition: v for tp, v in got.items()}
        return b[partition]

    def end_offset(self, physical: str, partition: int) -> int:
        return self.bounds(physical, partition)[1]

    def read_with_offsets(self, physical: str, partition: int, offset: int, max_records: int
                          ) -> tuple[Sequence[int], list[Record]]:
        """Up to ``max_records`` records from ``offset`` on (from the partition's start if that
        is later) below its end, with their offsets."""
        start, end = self.bounds(physical, partition)
        offset = max(offset, start)
        if offset >= end or max_records < 1:
            return [], []
        return self._run(self._read(TopicPartition(physical, partition), offset, end,
                                    max_records),
                         f"reading topic {physical!r} partition {partition}")

    async def _read(self, tp: TopicPartition, offset: int, end: int, max_records: int
                    ) -> tuple[list[int], list[Record]]:
        consumer = self._consumer
        if consumer is None:
            consumer = new_consumer(self.streams.servers, self.settings, brief=True)
            async with asyncio.timeout(self.fetch_timeout):
                await consumer.start()
            self._consumer = consumer
        if self._at is None or self._at[0] != tp:
            consumer.assign([tp])
            self._at = None
        if self._at != (tp, offset):  # else the consumer reads on from there, fetched ahead
            consumer.seek(tp, offset)
        self._at = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.fetch_timeout
        while True:
            batch = await consumer.getmany(tp, timeout_ms=200, max_records=max_records)
            got = [r for r in batch.get(tp, []) if offset <= r.offset < end]
            if got:
                self._at = (tp, batch[tp][-1].offset + 1)
                return ([r.offset for r in got],
                        [(r.key, r.value, tuple(r.headers) or None) for r in got])
            position = await fetch_position(consumer, tp)
            if position >= end:  # only control batches (transaction markers) were left, or
                # records of transactions not committed, which wait for their markers
                self._at = (tp, position)
                return [], []
            if loop.time() > deadline:
                raise SamzaError(
                    f"topic {tp.topic!r} partition {tp.partition}: no record came from offset "
                    f"{offset:,} within {self.fetch_timeout:g} s, though the partition ends at "
                    f"offset {end:,} on Kafka at {self.streams.servers}; check that the broker "
                    f"is healthy and try again")
