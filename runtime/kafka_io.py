"""``samza-dsl load``, ``dump`` and ``run --input``/``--sample`` on a job whose streams are Kafka
topics: the same commands as on the embedded local log, against the topics.

- ``kafka_streams`` plans the job against the broker (partition counts of existing topics) and
  gives each stream's topic, partition count and codec, without creating anything;
- ``kafka_load`` appends messages to a topic as ``LocalJob.load`` appends them to the local log:
  a ``KV`` to the partition of its serialized key (murmur2, Kafka's default partitioner), other
  messages round-robin. A topic the plan needs that does not exist yet is created with the
  planned count (and the stream's ``retention.*`` configs). Kafka has no transaction across partitions here: a failure part way leaves
  what was acknowledged;
- ``kafka_held`` counts the records a topic holds (end less start offsets);
- ``TopicSnapshot`` reads a topic's records once, up to its end as of the call, and offers the
  part of ``LocalLog``'s reading interface that ``runtime.dump`` uses, so a dump prints the same
  lines on both systems (control records of any run and records that do not decode are left
  out, as there).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from operators.hashing import KeyPartitioner
from samza_dsl.errors import SamzaError
from samza_dsl.kv import KV
from samza_dsl.serdes import KVSerde

from .codec import Record, StreamCodec, serde_error_policy, stream_serde
from .kafka_admin import TopicSpec, describe_topics, ensure_topics, retention_configs
from .kafka_system import KafkaProducer, kafka_error, new_consumer, true_end_offsets
from .serde_util import default_key_bytes

__all__ = ["KafkaStreams", "kafka_streams", "kafka_load", "kafka_held", "TopicSnapshot"]


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

    def check(self, stream_id: str, what: str = "stream") -> None:
        if stream_id not in self.physical:
            raise SamzaError(f"{stream_id!r} is not a {what} of job {self.job_name!r}; its "
                             f"streams: {', '.join(sorted(self.physical))}")


async def kafka_streams(app: Any, config: Mapping[str, Any], timeout: float = 10.0
                        ) -> KafkaStreams:
    """Plan ``app`` against its Kafka brokers; creates nothing."""
    from .kafka_job import KafkaJob

    job = KafkaJob(app, config, timeout=timeout)  # checks the systems; no I/O
    declared = {**app._inputs, **app._outputs}
    found = await describe_topics(job.servers, {d.physical_name for d in declared.values()},
                                  timeout=timeout)
    known = {sid: found[d.physical_name] for sid, d in declared.items()
             if d.partitions is None and found[d.physical_name] is not None}
    plan = app.plan(partitions=known, config=job.config)
    counts = {sid: s.partitions for sid, s in plan.streams.items()}
    widest = max([n for sid, n in counts.items() if n and plan.streams[sid].kind == "input"]
                 or [1])
    codecs = {}
    for sid, s in plan.streams.items():
        serde = stream_serde(getattr(s.descriptor, "serde", None), keyed=s.keyed,
                             intermediate=s.kind in ("intermediate", "broadcast"),
                             types=plan.app.types)
        codecs[sid] = StreamCodec(sid, serde, policy=serde_error_policy(plan.config, sid))
    physical = {sid: s.physical_name for sid, s in plan.streams.items()}
    existing = dict(found)
    existing.update(await describe_topics(job.servers, [p for p in physical.values()
                                                        if p not in found], timeout=timeout))
    return KafkaStreams(job.job_name, job.servers, job.consumer_settings, job.producer_settings,
                        plan, physical, {sid: (n if n else widest) for sid, n in counts.items()},
                        codecs, {sid: existing.get(p) for sid, p in physical.items()})


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
            starts = await consumer.beginning_offsets(flat)
    except (KafkaError, TimeoutError, OSError) as exc:
        raise kafka_error("reading the start offsets of topics", streams.servers, exc) from exc
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()
    for sid, parts in tps.items():
        out[sid] = sum(max(0, ends[tp] - starts[tp]) for tp in parts)
    return out


async def kafka_load(streams: KafkaStreams, stream_id: str, messages: Iterable[Any],
                     timeout: float = 30.0) -> int:
    """Append ``messages`` to the stream's topic; returns how many."""
    streams.check(stream_id)
    topic, n = streams.physical[stream_id], streams.counts[stream_id]
    if streams.existing.get(stream_id) is None:
        await ensure_topics(streams.servers, [TopicSpec(
            topic, n, configs=retention_configs(streams.plan.config, stream_id))],
            timeout=timeout)
        streams.existing[stream_id] = n
    n = streams.existing[stream_id] or n
    codec = streams.codecs[stream_id]
    key_serde = codec.serde.key_serde if isinstance(codec.serde, KVSerde) else None
    partitioner = KeyPartitioner(n, key_serde.serialize if key_serde is not None
                                 else default_key_bytes)
    producer = KafkaProducer(streams.servers, streams.producer_settings, 0, timeout=timeout)
    producer.add_stream(stream_id, topic, n, None)
    bufs = [producer.buffer(stream_id, p) for p in range(n)]
    count = rr = 0
    try:
        for m in messages:
            if type(m) is KV and m.key is not None:
                p = partitioner(m.key)
            else:
                p, rr = rr % n, rr + 1
            bufs[p].append(codec.encode(m))
            count += 1
            if count % 65536 == 0:
                await producer.flush()
        await producer.flush()
    finally:
        await producer.close()
    return count


class TopicSnapshot:
    """The records of a job's topics, each read once up to its end (as the call found it)."""

    def __init__(self, parts: Mapping[str, list[tuple[list[int], list[Record]]]]) -> None:
        self._parts = dict(parts)

    @classmethod
    async def read(cls, streams: KafkaStreams, stream_id: str, timeout: float = 30.0
                   ) -> TopicSnapshot:
        topic = streams.physical[stream_id]
        n = streams.existing.get(stream_id) or 0
        tps = [TopicPartition(topic, p) for p in range(n)]
        parts: list[tuple[list[int], list[Record]]] = [([], []) for _ in range(n)]
        if tps:
            ends = await true_end_offsets(streams.servers, tps, streams.consumer_settings,
                                          timeout)
            consumer = new_consumer(streams.servers, streams.consumer_settings, brief=True)
            try:
                async with asyncio.timeout(timeout):
                    await consumer.start()
                    consumer.assign(tps)
                    await consumer.seek_to_beginning(*tps)
                    todo = {tp for tp in tps if ends[tp] > await consumer.position(tp)}
                    while todo:
                        batch = await consumer.getmany(*todo, timeout_ms=200)
                        for tp, records in batch.items():
                            offs, recs = parts[tp.partition]
                            for r in records:
                                if r.offset >= ends[tp]:
                                    break
                                offs.append(r.offset)
                                recs.append((r.key, r.value, tuple(r.headers) or None))
                        for tp in list(todo):
                            if await consumer.position(tp) >= ends[tp]:
                                todo.discard(tp)
            except (KafkaError, TimeoutError, OSError) as exc:
                raise kafka_error(f"reading topic {topic!r}", streams.servers, exc) from exc
            finally:
                with contextlib.suppress(Exception):
                    await consumer.stop()
        return cls({topic: parts})

    # -- what runtime.dump reads ------------------------------------------------------------------

    def partitions(self, physical: str) -> int | None:
        parts = self._parts.get(physical)
        return None if parts is None else len(parts)

    def end_offset(self, physical: str, partition: int) -> int:
        offs = self._parts[physical][partition][0]
        return offs[-1] + 1 if offs else 0

    def read_with_offsets(self, physical: str, partition: int, offset: int, max_records: int
                          ) -> tuple[Sequence[int], list[Record]]:
        from bisect import bisect_left

        offs, recs = self._parts[physical][partition]
        i = bisect_left(offs, offset)
        return offs[i:i + max_records], recs[i:i + max_records]
