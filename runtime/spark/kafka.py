"""Kafka inputs and outputs of a reprocessing run.

Input (``KafkaRange``): the driver asks the broker for the partitions and the offsets to read
(by default from the earliest offset to the offset after the last record); each Kafka partition
becomes one Spark partition, read inside an executor by an aiokafka consumer that decodes records
with the stream's serde. The record timestamp is the record's clock (see ``runner``).

Output (``KafkaOutput``): the messages are computed and kept on the executors' disks first, so a
failing user function fails the run before anything is produced. Then the topic is created with
the planned partition count if it is missing (a topic with another count is an error), emptied of
what an earlier run wrote (a topic holding records is deleted and created again with the planned
count, so topic settings made by hand are not kept), and written by the executors, each message to the partition the streaming runtime would choose (murmur2 of the
serialized key). A rerun therefore replaces the topic's contents.

Both log in as the stream's Kafka system does in a streaming run (``runtime.kafka.security``):
the ``systems.<name>.security.protocol``, ``sasl.*`` and ``ssl.*`` keys of the run's config, over
the system descriptor's, under those the range or output gives in ``security``. The login is
resolved on the driver (a secret's ``env:`` or ``file:`` is read there) and travels to the
executors with their tasks, as Spark's own Kafka source ships its JAAS options; the CA and
certificate files must be at the same paths on the executors.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.spark.outputs import SparkSink
from samza_dsl.connectors import SparkInput
from samza_dsl.errors import SamzaError
from samza_dsl.kv import KV
from samza_dsl.serdes import KVSerde
from samza_dsl.systems import SystemDescriptor

__all__ = ["KafkaOutput", "KafkaRange", "kafka_source"]


@dataclass(frozen=True)
class KafkaRange(SparkInput):
    """An offset range of a Kafka topic: ``start``/``end`` map partition -> offset (``end``
    exclusive); by default from the earliest offset to the end at the time of the run. The
    topic defaults to the input's physical name.

    Example:
        >>> r = KafkaRange("127.0.0.1:9092", topic="page-views", start={0: 100}, end={0: 200})
        >>> r.topic, dict(r.start), dict(r.end)  # partition 0's offsets 100 to 199
        ('page-views', {0: 100}, {0: 200})
        >>> # SparkRunner().reprocess(app, {"page-views": r}): the runner calls r.spark_source(...)
    """

    bootstrap_servers: str
    topic: str | None = None
    start: Mapping[int, int] | None = None
    end: Mapping[int, int] | None = None
    consumer: Mapping[str, Any] = field(default_factory=dict)
    #: the system's security properties (``security.protocol``, ``sasl.password``, ...) for this
    #: range, over the run's config and the descriptor's
    security: Mapping[str, Any] = field(default_factory=dict)

    def spark_source(self, stream_id: str, descriptor: Any, start_ms: int,
                     config: Mapping[str, Any] | None = None) -> Any:
        """How a reprocessing run reads this range as input ``stream_id``: it looks up the
        partitions and offsets on the broker first, so a topic or broker that is not there is
        one error before Spark runs anything.

        Example:
            >>> from samza_dsl.systems import KafkaSystem
            >>> views = KafkaSystem("kafka", bootstrap_servers="127.0.0.1:1").input("views")
            >>> KafkaRange("127.0.0.1:1").spark_source("views", views, 0)
            Traceback (most recent call last):
            samza_dsl.errors.SamzaError: reading the offsets of 'views' on Kafka at 127.0.0.1:1 failed: ... Check bootstrap_servers and that the broker is running
        """
        return kafka_source(stream_id, descriptor, self, start_ms, config)


def _login(system: SystemDescriptor, given: Mapping[str, Any],
           config: Mapping[str, Any] | None) -> Any:
    """The ``KafkaSecurity`` of a range or output of ``system``'s streams (module docstring)."""
    from runtime.kafka.security import kafka_security
    from samza_dsl.jobconfig import JobConfig, SystemConfig

    # the range's own settings over the run's config, over the descriptor's
    under = JobConfig.validated(config).system(system.name).over(system.config)
    return kafka_security(SystemConfig(system.name, properties=given).over(under.properties))




def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def kafka_source(stream_id: str, descriptor: Any, given: Any, start_ms: int,
                 config: Mapping[str, Any] | None = None) -> Any:
    from aiokafka import TopicPartition

    from runtime.kafka.admin import describe_topics
    from runtime.kafka.security import check_login
    from runtime.kafka.system import kafka_error, log_starts, new_consumer, true_end_offsets
    from runtime.spark.ahead import ahead_check
    from runtime.spark.sources import Source, SourceError, source_timing, unreadable

    topic = given.topic or descriptor.physical_name
    servers = given.bootstrap_servers
    security = _login(descriptor.system, given.security, config)
    consumer_settings = dict(given.consumer)
    settings = {**consumer_settings, **security.settings()}

    async def offsets() -> list[tuple[int, int, int]]:
        await check_login(servers, settings, security)
        consumer = new_consumer(servers, settings, brief=True)
        try:
            async with asyncio.timeout(10):
                await consumer.start()
                # an all-topics metadata request (the consumer's own metadata holds only the
                # topics it has asked about, and a broker may answer it without this one)
                count = (await describe_topics(servers, [topic], timeout=10,
                                               **security.settings()))[topic]
                if not count:
                    raise SourceError(f"input {stream_id!r}: topic {topic!r} does not exist on "
                                      f"Kafka at {servers}")
                tps = [TopicPartition(topic, p) for p in range(count)]
                begins = await log_starts(servers, settings, consumer, tps)
        except (TimeoutError, OSError) as exc:
            raise kafka_error(f"reading the offsets of {topic!r}", servers, exc) from exc
        except SamzaError:
            raise
        except Exception as exc:
            raise kafka_error(f"reading the offsets of {topic!r}", servers, exc) from exc
        finally:
            with contextlib.suppress(Exception):
                await consumer.stop()
        ends = await true_end_offsets(servers, tps, settings, 10.0)
        out = []
        for tp in tps:
            s = (given.start or {}).get(tp.partition, begins[tp])
            e = (given.end or {}).get(tp.partition, ends[tp])
            if s < begins[tp]:
                raise SourceError(f"input {stream_id!r}: partition {tp.partition} of {topic!r} "
                                  f"starts at offset {begins[tp]}; offset {s} is gone")
            out.append((tp.partition, s, max(s, e)))
        return out

    splits = _run(offsets())
    n = len(splits)
    if descriptor.partitions is not None and descriptor.partitions != n:
        raise SourceError(f"input {stream_id!r}: topic {topic!r} has {n} partitions, the "
                          f"input declares {descriptor.partitions}")
    names = [f"topic {topic!r} partition {p} offsets {s}..{e}" for p, s, e in splits]
    serde = descriptor.serde
    timing = source_timing(descriptor, start_ms)
    check = ahead_check(stream_id, descriptor)

    def build(spark: Any) -> Any:
        def read(i: int, it: Iterator[tuple[int, int, int]]) -> Iterator[Any]:
            from runtime.spark.executor import PassFailure

            now, limit = check.limit_ms() if check is not None else (0.0, None)
            # the executor's own clients: an SSL context does not travel, the login does
            settings = {**consumer_settings, **security.settings()}
            for p, s, e in it:
                for rec in _run(_fetch(servers, settings, topic, p, s, e)):
                    try:
                        if isinstance(serde, KVSerde):
                            m = serde.from_bytes(rec.key, rec.value)
                        elif serde is not None:
                            m = serde.deserialize(rec.value)
                        else:
                            m = rec.value
                        sort_ms, clock = timing(m, rec.timestamp)
                    except Exception as exc:
                        raise PassFailure(unreadable(
                            f"input {stream_id!r}: topic {topic!r} partition {p} offset "
                            f"{rec.offset}", exc, "the stream's serde")) from exc
                    if limit is not None and sort_ms > limit:
                        assert check is not None
                        check.take(f"topic {topic!r} partition {p} offset {rec.offset}", p,
                                   rec.offset, m, sort_ms, now)
                        continue
                    yield (stream_id, sort_ms, p, rec.offset, clock, m)
        return spark.sparkContext.parallelize(splits, max(n, 1)).mapPartitionsWithIndex(read)
    src = Source(stream_id, n, names, build)
    src.ahead = check
    return src


async def _fetch(servers: str, settings: Mapping[str, Any], topic: str, p: int, start: int,
                 end: int) -> list[Any]:
    from aiokafka import TopicPartition

    from runtime.kafka.system import new_consumer

    if end <= start:
        return []
    tp = TopicPartition(topic, p)
    consumer = new_consumer(servers, settings, brief=True)
    out: list[Any] = []
    try:
        await consumer.start()
        consumer.assign([tp])
        consumer.seek(tp, start)
        idle = 0
        while True:
            batch = await consumer.getmany(tp, timeout_ms=1000, max_records=10_000)
            records = batch.get(tp, [])
            if not records:
                idle += 1
                if idle > 30:
                    raise SamzaError(f"topic {topic!r} partition {p}: no records after offset "
                                     f"{out[-1].offset if out else start - 1} within 30 s; "
                                     f"expected offsets up to {end - 1}")
                continue
            idle = 0
            for r in records:
                if r.offset >= end:
                    return out
                out.append(r)
            if records[-1].offset >= end - 1:
                return out
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()


@dataclass(frozen=True)
class KafkaOutput:
    """An output topic (by default the stream's physical name) on ``bootstrap_servers``.

    Example:
        >>> out = KafkaOutput("127.0.0.1:9092", topic="counts-backfill", producer={"acks": "all"})
        >>> out.bind("counts")  # what the runner writes stream 'counts' through; nothing connects
        Kafka topic 'counts-backfill' at 127.0.0.1:9092
    """

    bootstrap_servers: str
    topic: str | None = None
    producer: Mapping[str, Any] = field(default_factory=dict)
    #: the system's security properties for this output (as ``KafkaRange.security``)
    security: Mapping[str, Any] = field(default_factory=dict)

    def bind(self, stream_id: str) -> _KafkaSink:
        return _KafkaSink(self, stream_id)


class _KafkaSink(SparkSink):
    def __init__(self, spec: KafkaOutput, stream_id: str) -> None:
        self.spec = spec
        self.stream_id = stream_id
        self.topic = spec.topic or ""
        self.partitions = 1
        self._staged: Any = None
        self._placed = False

    #: it takes ``(partition, message)`` items where a ``send_to`` chooses the partitions
    placed = True

    def __repr__(self) -> str:
        return f"Kafka topic {self.topic!r} at {self.spec.bootstrap_servers}"

    def prepare(self, plan: Any, counts: Mapping[str, int]) -> None:
        from runtime.kafka.admin import TopicSpec, ensure_topics

        stream = plan.streams[self.stream_id]
        self.topic = self.spec.topic or stream.physical_name
        self.partitions = counts[self.stream_id]
        self.serde = stream.descriptor.serde
        self.login = _login(stream.descriptor.system, self.spec.security, plan.config)
        _run(_checked(self.spec.bootstrap_servers, self.login))
        _run(ensure_topics(self.spec.bootstrap_servers,
                           [TopicSpec(self.topic, self.partitions)], **self.login.settings()))

    def stage(self, spark: Any, messages: Any, rows: Any = None, placed: bool = False) -> None:
        """Keep ``messages`` (an RDD) on disk until the commit; ``placed``: they are
        ``(partition, message)`` items, each produced to its partition as placed."""
        from pyspark import StorageLevel

        self._placed = placed
        self._staged = messages.persist(StorageLevel.DISK_ONLY)
        self._staged.count()  # every user function runs now, before anything is produced

    def commit(self, spark: Any) -> None:
        servers, topic, n = self.spec.bootstrap_servers, self.topic, self.partitions
        producer = dict(self.spec.producer)
        login = self.login
        _run(_truncate(servers, topic, n, login.settings()))
        serde = self.serde
        sid = self.stream_id
        placed = self._placed

        def produce(i: int, it: Iterator[Any]) -> Iterator[int]:
            settings = {**producer, **login.settings()}  # made on the executor
            yield _run(_produce(servers, settings, topic, n, serde, sid, i, it, placed))
        try:
            self._staged.mapPartitionsWithIndex(produce).sum()
        finally:
            self._staged.unpersist()

    def abort(self, spark: Any) -> None:
        if self._staged is not None:
            self._staged.unpersist()


async def _checked(servers: str, login: Any) -> None:
    from runtime.kafka.security import check_login

    await check_login(servers, login.settings(), login)


async def _truncate(servers: str, topic: str, partitions: int,
                    login: Mapping[str, Any]) -> None:
    """Empty ``topic`` of what an earlier run wrote: a topic holding records is deleted and
    created again with ``partitions`` (DeleteRecords is not offered by every broker)."""
    from aiokafka import TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    from runtime.kafka.admin import TopicSpec, describe_topics, ensure_topics
    from runtime.kafka.system import kafka_error, log_starts, new_consumer, true_end_offsets

    consumer = new_consumer(servers, login, brief=True)
    try:
        await consumer.start()
        count = (await describe_topics(servers, [topic], timeout=10, **login))[topic] or 0
        tps = [TopicPartition(topic, p) for p in range(count)]
        begins = await log_starts(servers, login, consumer, tps)
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()
    ends = await true_end_offsets(servers, tps, login, 10.0)
    if not any(ends[tp] > begins[tp] for tp in tps):
        return
    admin = AIOKafkaAdminClient(bootstrap_servers=servers, **login)
    try:
        await admin.start()
        await admin.delete_topics([topic], timeout_ms=10_000)
        for _ in range(100):  # deletion completes in the background on Apache Kafka
            if topic not in await admin.list_topics():
                break
            await asyncio.sleep(0.1)
    except Exception as exc:
        raise kafka_error(f"deleting topic {topic!r} to replace an earlier run's output",
                          servers, exc) from exc
    finally:
        with contextlib.suppress(Exception):
            await admin.close()
    await ensure_topics(servers, [TopicSpec(topic, partitions)], **login)


async def _produce(servers: str, settings: Mapping[str, Any], topic: str, n: int, serde: Any,
                   stream_id: str, index: int, messages: Iterator[Any],
                   placed: bool = False) -> int:
    """Produces ``messages`` of Spark partition ``index`` to ``topic``: a keyed message to
    its key's partition, any other to ``index % n``; ``placed``: they are ``(partition,
    message)`` items, each produced to its own partition."""
    from aiokafka import AIOKafkaProducer

    from operators.hashing import KeyPartitioner
    from runtime.engine.serde_util import default_key_bytes

    keyed = isinstance(serde, KVSerde)
    key_bytes = serde.key_serde.serialize if keyed else default_key_bytes
    partitioner = KeyPartitioner(n, key_bytes)
    producer = AIOKafkaProducer(bootstrap_servers=servers, **{"linger_ms": 20, **settings})
    count = 0
    await producer.start()
    try:
        pending = []
        for item in messages:
            chosen, m = item if placed else (None, item)
            if keyed:
                k, v = serde.to_bytes(m)
                p = partitioner(m.key)
            else:
                k, v = None, (serde.serialize(m) if serde is not None else m)
                p = partitioner(m.key) if type(m) is KV else index % n
            if chosen is not None:
                p = chosen
            pending.append(await producer.send(topic, v, key=k, partition=p))
            count += 1
            if len(pending) >= 10_000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    except Exception as exc:
        raise SamzaError(f"output {stream_id!r}: writing topic {topic!r} failed after {count} "
                         f"messages: {type(exc).__name__}: {exc}; run again to replace the "
                         f"topic's contents") from exc
    finally:
        await producer.stop()
    return count
