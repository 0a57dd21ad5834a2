"""The test broker fixture and the helpers: a round trip, and the end-offset rule of
docs/testing.md, "The two test brokers" (inputs produced one awaited send at a time end where they should)."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, TopicPartition
from kafka_helpers import consume_all, create_topic, produce_each, run


def test_the_fixture_gives_a_local_bootstrap(kafka_bootstrap: str) -> None:
    host, _, port = kafka_bootstrap.rpartition(":")
    assert host == "127.0.0.1"
    assert 0 < int(port) < 65536


def test_records_round_trip_per_partition(kafka_bootstrap: str) -> None:
    records = [(0, b"k0", b"v0"), (1, b"k1", b"v1"), (0, None, b"no key"), (1, b"tomb", None),
               (2, b"k2", b"\x00\xff")]

    async def go() -> dict[int, list[tuple[int, bytes | None, bytes | None]]]:
        await create_topic(kafka_bootstrap, "broker-round-trip", 3)
        await produce_each(kafka_bootstrap, "broker-round-trip", records)
        return await consume_all(kafka_bootstrap, "broker-round-trip", 3, timeout=10)

    got = run(go())
    assert got == {
        0: [(0, b"k0", b"v0"), (1, None, b"no key")],
        1: [(0, b"k1", b"v1"), (1, b"tomb", None)],
        2: [(0, b"k2", b"\x00\xff")],
    }


def test_produce_each_makes_the_end_offset_the_record_count(kafka_bootstrap: str) -> None:
    """tansu reports the last batch's base offset + 1 as the end offset; one record per batch
    makes that the true log end, which bounded inputs rely on."""
    topic = "broker-end-offsets"
    counts = {0: 15, 1: 1, 2: 0}
    records = [(p, str(i).encode(), b"x" * i) for p, n in counts.items() for i in range(n)]

    async def go() -> dict[TopicPartition, int]:
        await create_topic(kafka_bootstrap, topic, 3)
        await produce_each(kafka_bootstrap, topic, records)
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=None)
        await consumer.start()
        try:
            return await consumer.end_offsets([TopicPartition(topic, p) for p in counts])
        finally:
            await consumer.stop()

    ends = run(go())
    assert {tp.partition: end for tp, end in ends.items()} == counts
    got = run(consume_all(kafka_bootstrap, topic, 3, timeout=10))
    assert {p: [offset for offset, _, _ in rs] for p, rs in got.items()} == {
        p: list(range(n)) for p, n in counts.items()
    }
