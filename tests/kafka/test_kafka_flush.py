"""``KafkaProducer.flush`` returns once the broker has acknowledged every record buffered before
it was called, even when another flush sent them and awaits their acknowledgements (the tasks of
a container commit at once, e.g. when its group rebalances). A flush that returned early let a
task checkpoint its changelog's end as of before its last entries: the task's next container
restored its store short of the checkpoint, and its counts stayed low for good (tansu on
127.0.0.1)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from kafka_helpers import consume_all, create_topic, run

from runtime.kafka.system import KafkaProducer


def test_a_flush_waits_for_the_records_another_flush_is_sending(kafka_bootstrap: str) -> None:
    topic = f"flush-{uuid.uuid4().hex[:8]}"
    run(create_topic(kafka_bootstrap, topic, 2))

    async def two_commits() -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        producer = KafkaProducer(kafka_bootstrap, {}, 1)
        producer.add_stream("changelog", topic, 2, None)
        try:
            await producer.flush()  # started, nothing sent yet
            # task 0 wrote 5 changelog entries, task 1 wrote 3; task 0's commit flushes first
            producer.buffer("changelog", 0).extend((b"k%d" % i, b"v", None) for i in range(5))
            producer.buffer("changelog", 1).extend((b"k%d" % i, b"v", None) for i in range(3))
            first = asyncio.create_task(producer.flush())
            await asyncio.sleep(0)  # it sends both tasks' entries and awaits their acks
            await producer.flush()  # task 1's commit
            seen = dict(producer.end_offsets)  # what task 1 would checkpoint now
            await first
            return seen, dict(producer.end_offsets)
        finally:
            await producer.close()

    seen, after = run(two_commits())
    assert after == {(topic, 0): 5, (topic, 1): 3}
    assert seen == after, "the second flush returned before the broker acknowledged the " \
        f"records the first one sent: end offsets {seen}, then {after}"
    got = run(consume_all(kafka_bootstrap, topic, 2))
    assert [len(got[p]) for p in (0, 1)] == [5, 3]


class _SlowSend(KafkaProducer):
    """Each partition's send awaits a while first, as aiokafka's does when the partition's last
    batch has not gone out yet: the tasks go on and buffer more meanwhile."""

    async def _send_records(self, producer: Any, topic: str, partition: int,
                            records: list[Any]) -> None:
        await asyncio.sleep(0.2)
        await super()._send_records(producer, topic, partition, records)


def test_records_buffered_while_a_send_is_under_way_go_out_without_a_commit(
        kafka_bootstrap: str) -> None:
    """A job whose input went quiet sent its last outputs only at its next commit (minutes
    later with a long ``task.commit.ms``): they were buffered while the background send was
    awaiting the client, after it had taken its partition's buffer, and the signal that
    followed found that send still running."""
    topic = f"quiet-{uuid.uuid4().hex[:8]}"
    run(create_topic(kafka_bootstrap, topic, 2))

    async def sent_without_flush() -> dict[int, list[Any]]:
        producer = _SlowSend(kafka_bootstrap, {}, 1)
        producer.add_stream("out", topic, 2, None)
        try:
            await producer.flush()  # started
            producer.buffer("out", 0).append((b"a", b"1", None))
            producer.signal()
            await asyncio.sleep(0.1)  # the send took partition 0's buffer and awaits
            producer.buffer("out", 0).append((b"b", b"2", None))
            producer.buffer("out", 1).append((b"c", b"3", None))
            producer.signal()  # the send is still running
            deadline = time.monotonic() + 20
            while True:  # no flush: what the broker has without one
                got = await consume_all(kafka_bootstrap, topic, 2)
                if sum(map(len, got.values())) >= 3 or time.monotonic() > deadline:
                    return got
                await asyncio.sleep(0.2)
        finally:
            await producer.close()

    got = run(sent_without_flush())
    assert [[(k, v) for _, k, v in got[p]] for p in (0, 1)] == \
        [[(b"a", b"1"), (b"b", b"2")], [(b"c", b"3")]], got
