"""What ``samza-dsl plan`` says a Spark run moves through a shuffle (``runtime.spark.tiers``): the
rows of a lone ``partition_by`` carried as columns, its key column, and the fields read after
the shuffle. The runner decides with the same functions; tests/spark/test_spark_fields.py runs
such jobs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from runtime.spark.tiers import GENERAL_TIER, carried_streams, message_fields, spark_tiers
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem

MEM = MemorySystem()


def windowed(fold: Any = lambda kv, n: n + 1, key: Any = lambda v: v["country"],
             value: Any = None, keyed_input: bool = False) -> StreamApplication:
    app = StreamApplication("tiers", config={"job.intermediate.stream.partitions": 4})
    serde = KVSerde(StringSerde(), JsonSerde()) if keyed_input else None
    views = app.input(MEM.input("views", serde=serde) if serde else MEM.input("views"))
    (views.partition_by(key, value, name="by-country")
        .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10),
                                       init=lambda: 0, fold=fold,
                                       event_time=lambda kv: kv.value["ts"]), name="count")
        .send_to(app.output(MEM.output("counts"))))
    return app


def columns(app: StreamApplication) -> list[str]:
    return [t.get("columns", "") for t in spark_tiers(app.plan()).values()]


def test_a_lone_partition_by_carries_its_key_column_and_the_fields_read_after_it() -> None:
    app = windowed()
    tiers = spark_tiers(app.plan())
    assert {t["tier"] for t in tiers.values()} == {GENERAL_TIER}
    assert columns(app)[0] == ("over Parquet: rows carried as columns, key from column "
                               "'country', only 'ts' read after the shuffle")
    assert columns(app)[1] == ""
    assert "only 'ts' read after the shuffle" in str(app.plan())
    (sid,) = app.plan().intermediate_streams
    assert message_fields(app.plan(), sid) == {"ts"}


def test_a_fold_that_reads_a_field_adds_it_and_one_that_reads_the_message_stops_pruning() -> None:
    assert "only 'bytes', 'ts' read" in columns(windowed(lambda kv, n: n + kv.value["bytes"]))[0]
    whole = columns(windowed(lambda kv, n: n + len(kv.value)))[0]
    assert whole == "over Parquet: rows carried as columns, key from column 'country'"


def test_a_key_that_computes_is_no_column() -> None:
    text = columns(windowed(key=lambda v: v["country"].lower()))[0]
    assert text == "over Parquet: rows carried as columns, only 'ts' read after the shuffle"


def test_no_carry_for_a_value_function_a_keyed_input_or_a_stream_read_with_another() -> None:
    assert columns(windowed(value=lambda v: {"ts": v["ts"]})) == ["", ""]
    assert columns(windowed(keyed_input=True)) == ["", ""]
    app = StreamApplication("join", config={"job.intermediate.stream.partitions": 2})
    a = app.input(MEM.input("a")).partition_by(lambda v: v["k"], name="by-a")
    b = app.input(MEM.input("b")).partition_by(lambda v: v["k"], name="by-b")
    a.join(b, key=lambda kv: kv.key, other_key=lambda kv: kv.key,
           combine=lambda x, y: KV(x.key, 1), ttl=timedelta(minutes=1), name="j") \
        .send_to(app.output(MEM.output("out")))
    assert carried_streams(app.plan()) == set()
    assert all(c == "" for c in columns(app))
