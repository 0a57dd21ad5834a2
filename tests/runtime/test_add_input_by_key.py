"""``TestRunner.add_input(desc, [KV...])`` places each keyed message as Kafka's producer would:
in the partition of murmur2 of its serialized key; unkeyed messages go to partition 0, and
``{partition: [...]}`` puts messages where it says."""

from __future__ import annotations

from typing import Any

import pytest

from operators.hashing import partition_for
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner

KEYS = [f"user-{i}" for i in range(40)]


def _app(serde: Any, partitions: int | None = 4) -> tuple[StreamApplication, Any, Any]:
    app, mem = StreamApplication("by-key"), MemorySystem()
    clicks = mem.input("clicks", serde=serde, partitions=partitions)
    out = mem.output("seen", serde=serde, partitions=partitions)
    app.input(clicks).send_to(app.output(out))
    return app, clicks, out


def test_keyed_messages_land_in_their_keys_partition_as_the_producer_would_place_them() -> None:
    app, clicks, _ = _app(KVSerde(StringSerde(), StringSerde()))
    msgs = [KV(k, f"click-{i}") for i, k in enumerate(KEYS * 2)]
    result = TestRunner(app).add_input(clicks, msgs).run()

    parts = result.partitions(clicks)
    expected: dict[int, list[KV[str, str]]] = {p: [] for p in range(4)}
    for m in msgs:  # Kafka's default partitioner on the key's bytes, as a Java producer picks
        expected[partition_for(m.key.encode(), 4)].append(m)
    assert parts == expected
    assert sum(1 for p in parts.values() if p) == 4  # 40 keys spread over all four partitions


def test_the_key_is_serialized_by_the_streams_key_serde_before_it_is_hashed() -> None:
    serde = KVSerde(JsonSerde(), StringSerde())
    app, clicks, _ = _app(serde)
    msgs = [KV({"id": i}, "x") for i in range(20)]
    parts = TestRunner(app).add_input(clicks, msgs).run().partitions(clicks)
    for p, got in parts.items():
        for m in got:
            assert partition_for(serde.key_serde.serialize(m.key), 4) == p


def test_unkeyed_messages_go_to_partition_zero_and_explicit_partitions_stay() -> None:
    app, mem = StreamApplication("unkeyed"), MemorySystem()
    words = mem.input("words", partitions=3)
    app.input(words).send_to(app.output(mem.output("out", partitions=3)))
    runner = TestRunner(app).add_input(words, ["a", "b", KV(None, "c")])
    runner.add_input(words, {2: [KV("ann", "d")]})
    parts = runner.run().partitions(words)
    assert parts == {0: ["a", "b", KV(None, "c")], 1: [], 2: [KV("ann", "d")]}


def test_an_input_without_a_declared_count_is_placed_by_the_planned_count() -> None:
    serde = KVSerde(StringSerde(), StringSerde())
    app, clicks, _ = _app(serde, partitions=None)
    msgs = [KV(k, "v") for k in KEYS]
    # one partition when nothing says more
    assert list(TestRunner(app).add_input(clicks, msgs).run().partitions(clicks)) == [0]
    # a partition given explicitly widens the input; the list is placed over the wider count
    parts = TestRunner(app).add_input(clicks, {2: []}).add_input(clicks, msgs).run() \
        .partitions(clicks)
    assert {p: len(m) for p, m in parts.items()} == {
        p: sum(1 for k in KEYS if partition_for(k.encode(), 3) == p) for p in range(3)}


def test_a_bare_message_on_a_keyed_input_is_still_an_error() -> None:
    app, clicks, _ = _app(KVSerde(StringSerde(), StringSerde()))
    with pytest.raises(Exception, match=r"input 'clicks' is keyed \(KVSerde\): message 1 of the "
                                        r"list must be a KV"):
        TestRunner(app).add_input(clicks, [KV("a", "b"), "oops"])
