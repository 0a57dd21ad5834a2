"""``KafkaProducer.flush`` returns once the broker has acknowledged every record buffered before
it was called, even when another flush sent them and awaits their acknowledgements (the tasks of
a container commit at once, e.g. when its group rebalances). A flush that returned early let a
task checkpoint its changelog's end as of before its last entries: the task's next container
restored its store short of the checkpoint, and its counts stayed low for good (tansu on
127.0.0.1)."""

from __future__ import annotations

import asyncio
import uuid

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
