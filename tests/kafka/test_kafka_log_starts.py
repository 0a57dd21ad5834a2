"""Where a reader with no checkpoint begins: ``log_starts`` (``runtime.kafka.system``).

tansu, while several producers write a new partition at once, makes a later record batch
visible before an earlier one, and answers a ListOffsets for the earliest offset with the
later batch's offset for that moment. A group member whose task began reading an
intermediate stream there never read the batch before it: an upstream task's watermark,
and the session windows after it never closed (the group model matrix, tansu, exactly
once, two members: a pane missing about one run in twenty). ``log_starts`` asks a start
above 0 by reading the partition from offset 0; on a broker whose log start moved up for
real (records deleted), offset 0 is out of range and the broker's start stands."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from kafka_helpers import create_topic, run

from runtime.kafka.system import log_starts
from runtime.kafka.txn_producer import TransactionalProducer

#: writers of each new partition at once (the upstream tasks of an intermediate stream)
WRITERS = 6
#: new partitions tried at most; tansu showed the early answer in about one in sixteen. Apache
#: Kafka never answers early: a few partitions there show that, and that nothing is asked again
TRIALS = {"tansu": 300, "apache-kafka": 20}
#: early answers to meet before the test has seen enough (tansu)
WANTED = 3


async def _race(bootstrap: str, trials: int) -> tuple[int, int, list[str]]:
    """Partitions written by ``WRITERS`` transactional producers at once while a consumer
    asks where each begins: how many were tried, how many answered a start above 0 at
    once, and for each of those that ``log_starts`` did not bring back to 0, a line."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    tag = uuid.uuid4().hex[:8]
    producers = [TransactionalProducer(bootstrap, f"starts-{tag}-{i}") for i in range(WRITERS)]
    wrong: list[str] = []
    early = tried = 0
    try:
        for p in producers:
            await p.start()
        while tried < trials and early < WANTED:
            tried += 1
            tp = TopicPartition(f"starts-{tag}-{tried}", 0)
            await create_topic(bootstrap, tp.topic, 1)

            async def write(p: TransactionalProducer, topic: str = tp.topic) -> None:
                await p.begin()
                await (await p.send(topic, b"", partition=0))
                await p.commit()
            writes = asyncio.gather(*(write(p) for p in producers))
            while not writes.done():
                answer = (await consumer.beginning_offsets([tp]))[tp]
                if answer:
                    early += 1
                    start = (await log_starts(bootstrap, {}, consumer, [tp]))[tp]
                    if start != 0:
                        wrong.append(f"{tp.topic}: the broker answered {answer}, log_starts "
                                     f"{start}, though nothing was deleted")
                    break
            await writes
    finally:
        for p in producers:
            await p.stop()
        await consumer.stop()
    return tried, early, wrong


def test_a_start_answered_too_early_is_asked_again(kafka_bootstrap: str,
                                                   kafka_broker_kind: str) -> None:
    tried, early, wrong = run(_race(kafka_bootstrap, TRIALS[kafka_broker_kind]))
    assert not wrong, "\n".join(wrong)
    if kafka_broker_kind == "tansu":  # else the broker never answers early: nothing to see
        assert early >= WANTED, f"tansu answered a start above 0 for {early} of {tried} " \
                                f"new partitions: the test no longer meets the race it is for"


async def _deleted(bootstrap: str) -> tuple[int, int]:
    """A partition of 10 records whose first 4 were deleted: where ``log_starts`` and the
    broker's own answer put its start."""
    topic = f"starts-deleted-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    await create_topic(bootstrap, topic, 1)
    producer = TransactionalProducer(bootstrap, f"{topic}-writer")
    await producer.start()
    try:
        await producer.begin()
        for i in range(10):
            await producer.send(topic, str(i).encode(), partition=0)
        await producer.commit()
    finally:
        await producer.stop()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_records({tp: RecordsToDelete(before_offset=4)}, timeout_ms=10_000)
    finally:
        await admin.close()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        return ((await log_starts(bootstrap, {}, consumer, [tp]))[tp],
                (await consumer.beginning_offsets([tp]))[tp])
    finally:
        await consumer.stop()


def test_a_start_moved_up_for_real_is_the_new_start(kafka_bootstrap: str,
                                                    kafka_broker_kind: str) -> None:
    if kafka_broker_kind == "tansu":
        pytest.skip("tansu cannot delete records (it closes the connection of a DeleteRecords)")
    start, broker = run(_deleted(kafka_bootstrap))
    assert start == broker == 4, (start, broker)
