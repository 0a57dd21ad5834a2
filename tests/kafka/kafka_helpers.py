"""Async helpers for tests against the tansu broker (on how it differs from Apache Kafka, see
``samza_dsl.testing.kafka_broker``).

They use aiokafka directly, not ``runtime.kafka.admin``, so that the tests of that module do not
check it against itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from operators.hashing import partition_for

__all__ = ["ConsumedRecord", "ProducedRecord", "consume_all", "create_topic", "free_port", "keyed",
           "produce_batched", "produce_each", "run"]

T = TypeVar("T")
ProducedRecord = tuple[int, bytes | None, bytes | None]  # (partition, key, value)
ConsumedRecord = tuple[int, bytes | None, bytes | None]  # (offset, key, value)


def keyed(items: Iterable[tuple[str, Any]], partitions: int) -> list[ProducedRecord]:
    """``(key, value)`` pairs as records for ``produce_each``: the key as UTF-8, the value as
    JSON, in the key's partition (murmur2, as Kafka's default partitioner)."""
    out: list[ProducedRecord] = []
    for k, v in items:
        key = k.encode()
        out.append((partition_for(key, partitions), key, json.dumps(v).encode()))
    return out


#: the samza-dsl command of this interpreter's environment
BIN = os.path.dirname(sys.executable)
CLI = os.path.join(BIN, "samza-dsl")

#: the start of a test application on the broker: a tag of its own (TEST_TAG) and the
#: broker's address (TEST_KAFKA), both from the environment its CLI runs in
APP_HEAD = '''
import os
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

TAG = os.environ["TEST_TAG"]
kafka = KafkaSystem("kafka", bootstrap_servers=os.environ["TEST_KAFKA"])
'''


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def create_topic(bootstrap: str, name: str, partitions: int, compacted: bool = False) -> None:
    """Create a topic explicitly (an implicit one would get tansu's 4 partitions); fails if it
    already exists or the broker refuses."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        await admin.start()
        configs = {"cleanup.policy": "compact"} if compacted else None
        response = await admin.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=configs)]
        )
        for result in response.to_object()["topic_errors"]:
            assert result["error_code"] == 0, f"cannot create topic {name!r}: {result}"
        # Apache Kafka answers before every partition has its leader: wait for them, as a
        # client that reads the topic at once would otherwise be refused
        deadline = asyncio.get_running_loop().time() + 15.0
        while True:
            (topic,) = await admin.describe_topics([name])
            parts = topic["partitions"]
            if len(parts) == partitions and all(
                    p["error_code"] == 0 and p["leader"] >= 0 for p in parts):
                break
            assert asyncio.get_running_loop().time() < deadline, f"{name!r} has no leaders: {topic}"
            await asyncio.sleep(0.05)
    finally:
        await admin.close()


async def topic_configs(bootstrap: str, name: str) -> dict[str, str]:
    """The explicitly set configs of a topic (all tansu's DescribeConfigs returns)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name)])
    finally:
        await admin.close()
    [resource] = response.to_object()["resources"]
    assert resource["error_code"] == 0, resource
    return {e["config_names"]: e["config_value"] for e in resource["config_entries"]}


async def topics(bootstrap: str) -> set[str]:
    """The names of every topic on the brokers at ``bootstrap``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def produce_each(bootstrap: str, topic: str, records: Sequence[ProducedRecord]) -> None:
    """Send each ``(partition, key, value)`` and await it before the next, so that every record
    is its own batch and tansu's end offset (last batch's base offset + 1) is the true log end."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await producer.start()
    try:
        for partition, key, value in records:
            await producer.send_and_wait(topic, value=value, key=key, partition=partition)
    finally:
        await producer.stop()


async def produce_batched(bootstrap: str, topic: str, records: Sequence[ProducedRecord]) -> None:
    """Send all records before awaiting any, so the producer packs them into multi-record
    batches (after which tansu's end offset is the last batch's base offset + 1, not the log
    end)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=10_000,
                                linger_ms=50)
    await producer.start()
    try:
        futures = [await producer.send(topic, value=value, key=key, partition=partition)
                   for partition, key, value in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def consume_all(bootstrap: str, topic: str, partitions: int,
                      timeout: float = 10.0) -> dict[int, list[ConsumedRecord]]:
    """Every record of partitions ``0..partitions-1`` from the beginning, as ``{partition:
    [(offset, key, value), ...]}``: reads until each partition's position reaches the end offset
    read at the start, then drains what was already fetched (tansu reports the last batch's base
    offset + 1 as the end). Raises TimeoutError if the end is not reached within ``timeout``."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    out: dict[int, list[ConsumedRecord]] = {p: [] for p in range(partitions)}
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                request_timeout_ms=10_000)
    await consumer.start()
    try:
        consumer.assign(tps)
        # from offset 0, not the broker's earliest offset: tansu may answer that with a later
        # batch's offset for a partition several producers wrote at once (a trimmed log
        # answers 0 out of range, and the reset goes to its start)
        for tp in tps:
            consumer.seek(tp, 0)
        ends = await consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout

        def collect(batch: dict[TopicPartition, list]) -> int:
            n = 0
            for tp, messages in batch.items():
                out[tp.partition].extend((m.offset, m.key, m.value) for m in messages)
                n += len(messages)
            return n

        while True:
            positions = {tp: await consumer.position(tp) for tp in tps}
            if all(positions[tp] >= ends[tp] for tp in tps):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"consume_all({topic!r}): positions {positions} did not reach the end "
                    f"offsets {ends} within {timeout} s; got {out}"
                )
            collect(await consumer.getmany(*tps, timeout_ms=200))
        while collect(await consumer.getmany(*tps, timeout_ms=100)):
            pass
    finally:
        await consumer.stop()
    return out


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` under a short name for the tests."""
    return asyncio.run(coro)
