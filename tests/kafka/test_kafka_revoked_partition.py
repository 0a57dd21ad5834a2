"""A container's consumer asked about a partition it does not read (yet, or any more): the
progress printer, the metrics and the event-time clocks ask ``KafkaConsumer.progress``,
``behind`` and ``waiting_for`` at any moment, while a task that came to the container is being
added (its readers registered, its partition resolved over the network before the consumer is
assigned it) or one that left is being removed. aiokafka's ``highwater`` asserts the partition is
assigned ("AssertionError: Partition is not assigned"): a survivor stopped while it took over a
killed member's tasks once died of it. A real aiokafka consumer against a real broker here."""

from __future__ import annotations

import asyncio
import uuid

from kafka_helpers import create_topic, run

from runtime.engine.job import SSP
from runtime.kafka.system import KafkaConsumer


def test_a_partition_being_added_is_asked_about_before_it_is_assigned(
        kafka_bootstrap: str) -> None:
    async def scenario() -> None:
        topic = f"revoked-{uuid.uuid4().hex[:8]}"
        await create_topic(kafka_bootstrap, topic, 2)
        consumer = KafkaConsumer(kafka_bootstrap, {}, {"in": topic}, {}, 0, bounded=set(),
                                 upcoming=set(), timeout=30.0)
        first, second = ("task-0", SSP("in", 0)), ("task-1", SSP("in", 1))
        consumer.register(first, first[1], 0)
        try:
            await consumer.poll([first], 10, timeout=0.2)  # started, partition 0 assigned
            adding = asyncio.create_task(consumer.add([(second, second[1], 0)]))
            while second not in consumer.positions:
                await asyncio.sleep(0)
            # the new reader is registered, its partition not assigned yet: ``add`` waits
            # for the broker (where the partition begins)
            assert not adding.done()
            raw = consumer._consumer
            assert raw is not None
            tp1 = consumer.positions[second][1]
            assert tp1 not in raw.assignment()
            shown = {ssp: high for ssp, _, high in consumer.progress()}
            assert shown[second[1]] is None and second[1] in shown
            assert consumer.behind(second)  # nothing known of it yet: it may lag
            assert "partition 1" in consumer.waiting_for(second)
            await adding
            assert tp1 in raw.assignment()
            await consumer.poll([first, second], 10, timeout=0.2)
            assert {ssp for ssp, _, _ in consumer.progress()} == {first[1], second[1]}

            # removed: the partition is asked about no more
            consumer.remove([second])
            assert tp1 not in raw.assignment()
            assert [ssp for ssp, _, _ in consumer.progress()] == [first[1]]
        finally:
            await consumer.close()
    run(scenario())
