"""``TransactionalProducer`` on the tansu broker: what a transaction's commit and abort leave in
the log and what consumers of each isolation level read, fencing of an older producer of the
same transactional id, and a transaction over two topics.

Where tansu differs from Apache Kafka here (measured with tansu 0.6.0):

- its Fetch responses list no aborted transactions (``aborted_transactions`` is empty), so a
  ``read_committed`` consumer reads an aborted transaction's records. The last stable offset is
  right: an open transaction's records stay hidden until it ends. What Apache Kafka builds its
  list of aborted transactions from, the ABORT marker after the records, is in the log, and the
  tests check that; the records read_committed returns are checked to be the committed ones plus,
  on tansu, the aborted ones and nothing else;
- a fenced producer's Produce is answered UNKNOWN_SERVER_ERROR (Apache Kafka:
  INVALID_PRODUCER_EPOCH), and its EndTxn is not answered at all (the connection is closed;
  Apache Kafka: PRODUCER_FENCED). Its AddPartitionsToTxn and TxnOffsetCommit are answered
  PRODUCER_FENCED, as on Apache Kafka, so the fencing tests have the older producer add a
  partition, as a task's commit does when it writes its checkpoint.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from kafka_helpers import create_topic, run
from txn_helpers import Batch, log_batches, read_isolated

from runtime.kafka.txn_producer import TransactionalProducer
from samza_dsl.errors import ProducerFenced, SamzaError

_names = itertools.count()


def fresh(prefix: str) -> str:
    """A name no other test of the session uses (they share one broker)."""
    return f"txn-{prefix}-{next(_names)}"


def values(batches: Iterable[Batch]) -> list[bytes | None]:
    return [v for b in batches if b.marker is None for v in b.values]


def transactions(batches: list[Batch]) -> list[tuple[list[bytes | None], str | None]]:
    """The partition's transactions in log order: their records and how each ended (None:
    still open)."""
    out: list[tuple[list[bytes | None], str | None]] = []
    records: list[bytes | None] = []
    for b in batches:
        assert b.transactional, f"a non-transactional batch at offset {b.base_offset}"
        if b.marker is None:
            records.extend(b.values)
        else:
            out.append((records, b.marker))
            records = []
    if records:
        out.append((records, None))
    return out


def test_commit_shows_records_to_read_committed_abort_leaves_an_abort_marker(
        kafka_bootstrap: str) -> None:
    bs = kafka_bootstrap
    topic = fresh("out")

    async def scenario() -> None:
        await create_topic(bs, topic, 1)
        producer = TransactionalProducer(bs, fresh("id"))
        await producer.start()
        try:
            await producer.begin()
            await producer.send(topic, b"aborted-1", partition=0)
            await producer.send(topic, b"aborted-2", partition=0)
            await producer.abort()

            await producer.begin()
            await producer.send(topic, b"committed-1", partition=0)
            await producer.send(topic, b"committed-2", partition=0)
            await producer.commit()

            await producer.begin()
            await (await producer.send(topic, b"open", partition=0))  # on the broker, not ended

            assert transactions(await log_batches(bs, topic, 0)) == [
                ([b"aborted-1", b"aborted-2"], "ABORT"),
                ([b"committed-1", b"committed-2"], "COMMIT"),
                ([b"open"], None),
            ]
            uncommitted = [v for _, v in await read_isolated(bs, topic, 0, "read_uncommitted")]
            assert uncommitted == [b"aborted-1", b"aborted-2", b"committed-1", b"committed-2",
                                   b"open"]
            committed = [v for _, v in await read_isolated(bs, topic, 0, "read_committed")]
            # an open transaction is past the last stable offset: hidden on every broker
            assert b"open" not in committed
            # Apache Kafka drops the aborted records too; tansu lists no aborted transactions
            assert [v for v in committed if not v.startswith(b"aborted")] == [
                b"committed-1", b"committed-2"]

            await producer.commit()
            committed = [v for _, v in await read_isolated(bs, topic, 0, "read_committed")]
            assert committed[-1] == b"open"
        finally:
            await producer.stop()

    run(scenario())


@pytest.mark.parametrize("awaits_ack", [False, True], ids=["at-commit", "at-send"])
def test_an_older_producer_of_the_same_id_is_fenced_and_its_transaction_aborted(
        kafka_bootstrap: str, awaits_ack: bool) -> None:
    bs = kafka_bootstrap
    out, checkpoints, txn_id = fresh("out"), fresh("checkpoints"), fresh("job-1-task")

    async def scenario() -> None:
        await create_topic(bs, out, 1)
        await create_topic(bs, checkpoints, 1)
        old, new = TransactionalProducer(bs, txn_id), TransactionalProducer(bs, txn_id)
        await old.start()
        try:
            await old.begin()
            await (await old.send(out, b"old-output", partition=0))
            await new.start()  # takes the id: the old producer's open transaction is aborted

            # the old one goes on to its commit, with its checkpoint record; it learns it is
            # fenced from the record's acknowledgement, or else from the commit
            with pytest.raises(ProducerFenced) as fenced:
                ack = await old.send(checkpoints, b"old-checkpoint", partition=0)
                if awaits_ack:
                    await ack
                await old.commit()
            message = str(fenced.value)
            assert txn_id in message and "fenced" in message and "stop this instance" in message
            assert "\n" not in message
            assert fenced.value.transactional_id == txn_id
            # and it stays fenced: nothing more goes out under the id from it
            for step in (old.commit(), old.begin(), old.abort(),
                         old.send(out, b"more", partition=0)):
                with pytest.raises(ProducerFenced):
                    await step

            await new.begin()
            await new.send(out, b"new-output", partition=0)
            await new.send(checkpoints, b"new-checkpoint", partition=0)
            await new.commit()

            assert transactions(await log_batches(bs, out, 0)) == [
                ([b"old-output"], "ABORT"), ([b"new-output"], "COMMIT")]
            assert transactions(await log_batches(bs, checkpoints, 0)) == [
                ([b"new-checkpoint"], "COMMIT")]
            read = [v for _, v in await read_isolated(bs, checkpoints, 0, "read_committed")]
            assert read == [b"new-checkpoint"]
        finally:
            await old.stop()
            await new.stop()

    run(scenario())


def test_records_to_two_topics_commit_together_or_not_at_all(kafka_bootstrap: str) -> None:
    bs = kafka_bootstrap
    out, checkpoints = fresh("out"), fresh("checkpoints")

    async def scenario() -> None:
        await create_topic(bs, out, 2)
        await create_topic(bs, checkpoints, 1)
        producer = TransactionalProducer(bs, fresh("id"))
        await producer.start()
        try:
            await producer.begin()
            await producer.send(out, b"out-0", partition=0)
            await producer.send(out, b"out-1", partition=1)
            await producer.send(checkpoints, b"ck-1", partition=0)
            await producer.abort()

            await producer.begin()
            acks = [await producer.send(out, b"out-0b", partition=0),
                    await producer.send(out, b"out-1b", partition=1),
                    await producer.send(checkpoints, b"ck-2", partition=0)]
            await asyncio.gather(*acks)
            # all three are on the broker, and a read_committed reader sees none of them yet
            for topic, partition in ((out, 0), (out, 1), (checkpoints, 0)):
                seen = await read_isolated(bs, topic, partition, "read_committed")
                assert not {v for _, v in seen} & {b"out-0b", b"out-1b", b"ck-2"}, topic
            await producer.commit()

            expected = {(out, 0): (b"out-0", b"out-0b"), (out, 1): (b"out-1", b"out-1b"),
                        (checkpoints, 0): (b"ck-1", b"ck-2")}
            for (topic, partition), (aborted, committed) in expected.items():
                assert transactions(await log_batches(bs, topic, partition)) == [
                    ([aborted], "ABORT"), ([committed], "COMMIT")], (topic, partition)
                seen = await read_isolated(bs, topic, partition, "read_committed")
                assert [v for _, v in seen][-1] == committed
        finally:
            await producer.stop()

    run(scenario())


def test_offsets_sent_to_a_transaction_are_committed_with_it_and_dropped_with_an_abort(kafka_bootstrap: str) -> None:
    bs = kafka_bootstrap
    source, out, group = fresh("in"), fresh("out"), fresh("group")

    async def committed_offset() -> int | None:
        consumer = AIOKafkaConsumer(bootstrap_servers=bs, group_id=group,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            return await consumer.committed(TopicPartition(source, 0))
        finally:
            await consumer.stop()

    async def scenario() -> None:
        await create_topic(bs, source, 1)
        await create_topic(bs, out, 1)
        producer = TransactionalProducer(bs, fresh("id"))
        await producer.start()
        try:
            await producer.begin()
            await producer.send(out, b"thrown away", partition=0)
            await producer.send_offsets_to_transaction({TopicPartition(source, 0): 9}, group)
            await producer.abort()
            assert await committed_offset() is None

            await producer.begin()
            await producer.send(out, b"result", partition=0)
            await producer.send_offsets_to_transaction({TopicPartition(source, 0): 17}, group)
            await producer.commit()
            assert await committed_offset() == 17
            assert transactions(await log_batches(bs, out, 0)) == [
                ([b"thrown away"], "ABORT"), ([b"result"], "COMMIT")]
        finally:
            await producer.stop()

    run(scenario())


def test_steps_out_of_order_say_what_to_do(kafka_bootstrap: str) -> None:
    with pytest.raises(SamzaError, match="non-empty transactional id"):
        TransactionalProducer(kafka_bootstrap, "")
    producer = TransactionalProducer(kafka_bootstrap, fresh("id"))
    with pytest.raises(SamzaError, match="is not started: call start"):
        run(producer.begin())

    async def scenario() -> None:
        await producer.start()
        try:
            for step in (producer.commit(), producer.abort(), producer.send("t", b"v")):
                with pytest.raises(SamzaError, match="no transaction of producer .* is open: "
                                                     "call begin"):
                    await step
            await producer.begin()
            with pytest.raises(SamzaError, match="is already open: commit or abort it first"):
                await producer.begin()
            await producer.abort()
        finally:
            await producer.stop()

    run(scenario())


def test_the_jobs_committed_reader_drops_aborted_and_open_transactions(
        kafka_bootstrap: str) -> None:
    """``runtime.kafka.committed`` reads what a read_committed consumer of Apache Kafka reads,
    from the log's markers, whatever the broker lists as aborted: the job's checkpoint reader
    under exactly once never takes an aborted or open transaction's checkpoint (on tansu a
    read_committed consumer would: an aborted checkpoint made a restart skip inputs)."""
    from runtime.engine import checkpoints
    from runtime.engine.job import SSP
    from runtime.kafka.system import read_checkpoint_topic
    bs = kafka_bootstrap
    topic = fresh("checkpoints")

    def at(offset: int) -> bytes:
        return checkpoints.encode(checkpoints.merge({}, {SSP("events", 0): offset}, None))

    async def scenario() -> None:
        await create_topic(bs, topic, 1)
        producer = TransactionalProducer(bs, fresh("cp"))
        await producer.start()
        try:
            await producer.begin()
            await producer.send(topic, at(10), key=b"t0", partition=0)
            await producer.commit()
            await producer.begin()
            await producer.send(topic, at(20), key=b"t0", partition=0)
            await producer.abort()
            await producer.begin()
            await (await producer.send(topic, at(30), key=b"t1", partition=0))
            got = await read_checkpoint_topic(bs, topic, {"isolation_level": "read_committed"},
                                              10.0)
            assert got.data["t0"]["offsets"] == [["events", 0, 10]], got.data
            assert "t1" not in got.data
        finally:
            await producer.stop()

    run(scenario())


def test_committed_records_follow_each_producers_markers() -> None:
    from runtime.kafka.committed import Batch, LogRecord, committed_records

    def rec(offset: int) -> LogRecord:
        return LogRecord(offset, 0, None, str(offset).encode())

    log = [Batch(0, 7, True, None, (rec(0), rec(1))),      # producer 7, committed below
           Batch(2, 8, True, None, (rec(2),)),              # producer 8, aborted below
           Batch(3, -1, False, None, (rec(3),)),            # outside any transaction
           Batch(4, 7, True, "COMMIT", ()),
           Batch(5, 8, True, "ABORT", ()),
           Batch(6, 8, True, None, (rec(6),)),              # producer 8 again, still open
           Batch(7, 7, True, None, (rec(7),)),
           Batch(8, 7, True, "COMMIT", ())]
    assert [r.offset for r in committed_records(log)] == [0, 1, 3, 7]


@pytest.mark.parametrize("refusals, starts", [(2, True), (99, False)], ids=["settles", "for-good"])
def test_a_start_answered_invalid_producer_epoch_asks_again_within_its_timeout(
        kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch, refusals: int,
        starts: bool) -> None:
    """The broker's first answers to InitProducerId are replaced by INVALID_PRODUCER_EPOCH, as
    Apache Kafka answered once right after a restart while it aborted the transaction an earlier
    owner of the id had left open: ``start`` asks again until the broker takes the id, and then
    the producer works. An id refused for longer than ``timeout`` fails the start, naming the id
    and the error."""
    from runtime.kafka import txn_producer
    from runtime.kafka.txn_protocol import InitProducerIdResponse_v4

    real = txn_producer.as_v0_response
    refused: list[int] = []

    def refusing(response: object) -> object:
        answer = real(response)
        if (getattr(response, "API_KEY", None) == InitProducerIdResponse_v4.API_KEY
                and len(refused) < refusals):
            refused.append(answer.error_code)  # type: ignore[attr-defined]
            return type(answer)(answer.throttle_time_ms, 47,  # type: ignore[attr-defined]
                                answer.producer_id, answer.producer_epoch)  # type: ignore[attr-defined]
        return answer

    monkeypatch.setattr(txn_producer, "as_v0_response", refusing)
    bs, topic = kafka_bootstrap, fresh("out")

    async def scenario() -> None:
        await create_topic(bs, topic, 1)
        producer = TransactionalProducer(bs, fresh("id"), timeout=3.0)
        if not starts:
            with pytest.raises(SamzaError, match=r"txn-id-\d+.*answered InvalidProducerEpoch "
                                                 r"to every InitProducerId"):
                await producer.start()
            assert len(refused) >= 3
            return
        await producer.start()
        try:
            assert refused == [0, 0]  # the broker itself took the id each time
            await producer.begin()
            await producer.send(topic, b"after", partition=0)
            await producer.commit()
            assert transactions(await log_batches(bs, topic, 0)) == [([b"after"], "COMMIT")]
        finally:
            await producer.stop()

    run(scenario())
