"""A task that comes to a container whose consumer already reads the same partition further on
(a broadcast stream, which every task reads whole): the new task reads it from its own
checkpoint, every record once, none passed over. A group member that took over a killed
member's task once read a broadcast partition from where its own task was, skipping the records
in between: a fetch made while the new reader was being added (its partition's start resolved
over the network) was handed to it from the consumer's position, not from its own. A real
aiokafka consumer against a real broker here; the broker's answer to that question is held back
so that a fetch surely comes in between."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from kafka_helpers import create_topic, produce_each, run

from runtime.engine.codec import StreamCodec
from runtime.engine.job import SSP
from runtime.kafka.system import KafkaConsumer
from samza_dsl.serdes import StringSerde

B = SSP("bcast", 0)


def _values(got: list[tuple[Any, int, list[Any]]], key: Any) -> list[tuple[int, Any]]:
    return [(first + i, m) for k, first, ms in got if k == key for i, m in enumerate(ms)]


def test_a_reader_added_behind_the_consumer_reads_every_record_from_its_position(
        kafka_bootstrap: str) -> None:
    async def scenario() -> None:
        topic = f"bcast-{uuid.uuid4().hex[:8]}"
        await create_topic(kafka_bootstrap, topic, 1)
        await produce_each(kafka_bootstrap, topic,
                           [(0, None, str(i).encode()) for i in range(8)])
        consumer = KafkaConsumer(kafka_bootstrap, {}, {"bcast": topic},
                                 {"bcast": StreamCodec("bcast", StringSerde())}, 0,
                                 bounded=set(), upcoming=set(), timeout=30.0)
        ahead, behind = ("task-0", B), ("task-1", B)
        consumer.register(ahead, B, 0)
        try:
            seen: dict[Any, list[tuple[int, Any]]] = {ahead: [], behind: []}
            while len(seen[ahead]) < 8:  # the first task read all 8
                seen[ahead] += _values(await consumer.poll([ahead], 100, timeout=0.5), ahead)
            await produce_each(kafka_bootstrap, topic,
                               [(0, None, str(i).encode()) for i in range(8, 12)])
            resolve, held = consumer._resolve, asyncio.Event()

            async def slow_resolve(raw: Any, keys: list[Any]) -> None:
                await held.wait()  # the broker's answer comes after a fetch
                await resolve(raw, keys)
            consumer._resolve = slow_resolve  # type: ignore[method-assign]
            adding = asyncio.create_task(consumer.add([(behind, B, 3)]))
            while behind not in consumer.positions:
                await asyncio.sleep(0)
            while len(seen[ahead]) < 12:  # fetches while the second task is being added
                got = await consumer.poll([ahead, behind], 100, timeout=0.5)
                seen[ahead] += _values(got, ahead)
                seen[behind] += _values(got, behind)
            held.set()
            await adding
            for _ in range(40):
                if len(seen[behind]) >= 9:
                    break
                got = await consumer.poll([ahead, behind], 100, timeout=0.5)
                seen[ahead] += _values(got, ahead)
                seen[behind] += _values(got, behind)
            assert seen[ahead] == [(i, str(i)) for i in range(12)]
            assert seen[behind] == [(i, str(i)) for i in range(3, 12)], seen[behind]
        finally:
            await consumer.close()
    run(scenario())
