"""The job's ``read_committed`` consumers (``runtime.kafka.resolved``) on the tansu broker: each
transaction's records come out at its COMMIT marker and never after an ABORT, in log order, with
records written after a still-open transaction's first record held back behind it, whatever the
broker lists as aborted or reports as the last stable offset.

On tansu, aiokafka's own ``read_committed`` hands out an aborted transaction's records (its Fetch
lists no aborted transactions): the first test fails with a plain consumer.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from kafka_helpers import create_topic, run

from runtime.kafka.resolved import ResolvingConsumer
from runtime.kafka.system import new_consumer
from runtime.kafka.txn_producer import TransactionalProducer

_names = itertools.count()


def fresh(prefix: str) -> str:
    return f"resolved-{prefix}-{next(_names)}"


async def read(bootstrap: str, topic: str, until: int, *, start: int = 0,
               deadline: float = 20.0) -> tuple[list[bytes | None], int]:
    """What a job's read_committed consumer reads of partition 0 from ``start`` once its
    position reached ``until`` (or ``deadline`` passed), and that position."""
    consumer = new_consumer(bootstrap, {"isolation_level": "read_committed"}, brief=True)
    assert isinstance(consumer, ResolvingConsumer)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, start)
        out: list[bytes | None] = []
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        while loop.time() < end:
            got = await consumer.getmany(tp, timeout_ms=100)
            out += [r.value for r in got.get(tp, [])]
            if await consumer.position(tp) >= until:
                break
        return out, await consumer.position(tp)
    finally:
        await consumer.stop()


async def plain(bootstrap: str, topic: str, value: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await (await producer.send(topic, value, partition=0))
    finally:
        await producer.stop()


async def end_of(bootstrap: str, topic: str) -> int:
    consumer = new_consumer(bootstrap, {}, brief=True)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()


async def aborted_then_committed(bootstrap: str, topic: str) -> None:
    a = TransactionalProducer(bootstrap, fresh("a"))
    await a.start()
    try:
        await a.begin()
        # each send waits for its delivery: the offsets below are the order of these lines
        await (await a.send(topic, b"aborted-1", partition=0))
        await (await a.send(topic, b"aborted-2", partition=0))
        await plain(bootstrap, topic, b"plain-1")  # written inside the open transaction
        await a.abort()
        await a.begin()
        await (await a.send(topic, b"committed-1", partition=0))
        await a.commit()
        await plain(bootstrap, topic, b"plain-2")
    finally:
        await a.stop()


def test_an_aborted_transaction_is_dropped_and_a_committed_one_read_in_log_order(
        kafka_bootstrap: str) -> None:
    topic = fresh("order")
    run(create_topic(kafka_bootstrap, topic, 1))
    run(aborted_then_committed(kafka_bootstrap, topic))
    end = run(end_of(kafka_bootstrap, topic))
    got, position = run(read(kafka_bootstrap, topic, end))
    assert got == [b"plain-1", b"committed-1", b"plain-2"]
    assert position >= end


async def held_behind_open(bootstrap: str, topic: str) -> tuple[list[Any], list[Any], int]:
    """Records behind an open transaction: what a reader gets while it is open, and after it
    commits; and the reader's position while it is open."""
    a = TransactionalProducer(bootstrap, fresh("open"))
    await a.start()
    consumer = new_consumer(bootstrap, {"isolation_level": "read_committed"}, brief=True)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        await plain(bootstrap, topic, b"before")
        await a.begin()
        await (await a.send(topic, b"in-txn", partition=0))
        await plain(bootstrap, topic, b"after")
        loop = asyncio.get_running_loop()
        while_open: list[Any] = []
        until = loop.time() + 3.0
        while loop.time() < until:  # the fetches reach the log's end meanwhile
            got = await consumer.getmany(tp, timeout_ms=100)
            while_open += [r.value for r in got.get(tp, [])]
        position = await consumer.position(tp)
        await a.commit()
        after_commit: list[Any] = []
        until = loop.time() + 10.0
        while loop.time() < until and len(after_commit) < 2:
            got = await consumer.getmany(tp, timeout_ms=100)
            after_commit += [r.value for r in got.get(tp, [])]
        return while_open, after_commit, position
    finally:
        await consumer.stop()
        await a.stop()


def test_records_after_an_open_transaction_wait_for_its_marker(kafka_bootstrap: str) -> None:
    topic = fresh("held")
    run(create_topic(kafka_bootstrap, topic, 1))
    while_open, after_commit, position = run(held_behind_open(kafka_bootstrap, topic))
    assert while_open == [b"before"]
    assert position == 1, "the position is the first record still waiting"
    assert after_commit == [b"in-txn", b"after"]


def test_a_reader_that_starts_inside_a_transaction_reads_its_rest(kafka_bootstrap: str) -> None:
    topic = fresh("mid")
    run(create_topic(kafka_bootstrap, topic, 1))
    run(aborted_then_committed(kafka_bootstrap, topic))
    end = run(end_of(kafka_bootstrap, topic))
    # offsets: aborted-1 0, aborted-2 1, plain-1 2, ABORT 3, committed-1 4, COMMIT 5, plain-2 6
    got, _ = run(read(kafka_bootstrap, topic, end, start=1))
    assert got == [b"plain-1", b"committed-1", b"plain-2"]
    got, _ = run(read(kafka_bootstrap, topic, end, start=4))
    assert got == [b"committed-1", b"plain-2"]


async def taken_two_at_a_time(bootstrap: str, topic: str) -> list[Any]:
    """A transaction of five records, committed, then three plain ones, read two at a time with
    the partition paused and resumed after each take (which drops what a fetch held)."""
    a = TransactionalProducer(bootstrap, fresh("slow"))
    await a.start()
    try:
        await a.begin()
        for i in range(5):
            await a.send(topic, f"t{i}".encode(), partition=0)
        await a.commit()
    finally:
        await a.stop()
    for i in range(3):
        await plain(bootstrap, topic, f"p{i}".encode())
    consumer = new_consumer(bootstrap, {"isolation_level": "read_committed"}, brief=True)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        out: list[Any] = []
        loop = asyncio.get_running_loop()
        until = loop.time() + 20.0
        while loop.time() < until and len(out) < 8:
            got = await consumer.getmany(tp, timeout_ms=100, max_records=2)
            out += [r.value for r in got.get(tp, [])]
            consumer.pause(tp)  # a take while paused drops what the fetch held
            await consumer.getmany(tp, timeout_ms=0)
            consumer.resume(tp)
        return out
    finally:
        await consumer.stop()


def test_a_reader_that_takes_few_records_at_a_time_loses_none(kafka_bootstrap: str) -> None:
    topic = fresh("few")
    run(create_topic(kafka_bootstrap, topic, 1))
    got = run(taken_two_at_a_time(kafka_bootstrap, topic))
    assert got == [b"t0", b"t1", b"t2", b"t3", b"t4", b"p0", b"p1", b"p2"]
