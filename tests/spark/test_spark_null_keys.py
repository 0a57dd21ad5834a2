"""Null keys and values on Spark (local[2]) fail with the words TestRunner and the embedded
local system use (tests/runtime/test_null_keys.py; docs/semantics.md, "Samza itself"): a None
key or a key the table's serde cannot serialize into a table, and a None value through
``partition_by``, each naming the operator and the stream the message came from."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.spark import ReprocessError, SparkRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem

SERDE = KVSerde(StringSerde(), JsonSerde())


def table_app(rekeyed: Any) -> StreamApplication:
    app = StreamApplication("sent")
    mem = MemorySystem()
    ins = app.input(mem.input("in", serde=SERDE, partitions=1))
    table = app.table("t", serde=SERDE, changelog=False)
    ins.map(lambda kv: KV(rekeyed if kv.key == "bad" else kv.key, kv.value),
            name="rekey").send_to(table)
    (ins.join_table(table, combine=lambda m, r: KV(m.key, [m.value, r and r.value]))
     .send_to(app.output(mem.output("out", serde=SERDE, partitions=1))))
    return app


def pb_app() -> StreamApplication:
    app = StreamApplication("pb")
    mem = MemorySystem()
    (app.input(mem.input("in", serde=SERDE, partitions=1))
     .partition_by(lambda kv: kv.key, lambda kv: None if kv.value == "gone" else kv.value,
                   serde=SERDE, name="by-key")
     .send_to(app.output(mem.output("out", serde=SERDE, partitions=1))))
    return app


def failure(spark: Any, app: StreamApplication, msgs: list[Any]) -> str:
    with pytest.raises(ReprocessError) as info:
        SparkRunner(spark).reprocess(app, {"in": {0: msgs}})
    text = str(info.value)
    assert "\n" not in text
    return text


def test_a_none_key_into_a_table_fails_on_spark_as_on_every_runner(spark: Any) -> None:
    text = failure(spark, table_app(None), [KV("a", "x"), KV("bad", "p1")])
    assert "operator 'sent-1-send_to-" in text and "failed on stream 'in'" in text
    assert ("the key of KV(key=None, value='p1') is None, and a table holds no None key (as in "
            "Samza); filter such messages out or give them a key before the send_to") in text


def test_a_key_the_tables_serde_cannot_serialize_fails_on_spark(spark: Any) -> None:
    text = failure(spark, table_app(5), [KV("a", "x"), KV("bad", "p1")])
    assert "failed on stream 'in'" in text
    assert ("table 't': cannot serialize a key (StringSerde() cannot encode int 5: expected "
            "str.") in text


def test_a_none_value_through_partition_by_fails_on_spark(spark: Any) -> None:
    text = failure(spark, pb_app(), [KV("a", "x"), KV("b", "gone")])
    assert "operator 'pb-1-partition_by-by-key' failed on stream 'in'" in text
    assert ("the value for KV(key='b', value='gone') is None, and an intermediate stream "
            "'pb-1-partition_by-by-key' carries no None value (as in Samza)") in text


def test_a_none_join_key_fails_on_spark(spark: Any) -> None:
    from datetime import timedelta

    app = StreamApplication("joined")
    mem = MemorySystem()
    # in event time: Spark refuses a processing-time join
    left = app.input(mem.input("in", serde=SERDE, partitions=1, event_time=lambda kv: 0.0))
    right = app.input(mem.input("side", serde=SERDE, partitions=1, event_time=lambda kv: 0.0))
    (left.join(right, key=lambda kv: None if kv.value == "gone" else kv.key,
               other_key=lambda kv: kv.key, combine=lambda a, b: KV(a.key, [a.value, b.value]),
               within=timedelta(hours=1), name="j")
     .send_to(app.output(mem.output("out", serde=SERDE, partitions=1))))
    with pytest.raises(ReprocessError) as info:
        SparkRunner(spark).reprocess(app, {"in": {0: [KV("a", "x"), KV("b", "gone")]},
                                           "side": {0: [KV("a", "y")]}})
    text = str(info.value)
    assert "failed on stream 'in'" in text
    assert ("join 'joined-1-join-j': the left key of KV(key='b', value='gone') is None; a join "
            "needs a key on both sides (as in Samza)") in text
