"""SparkRunner over Kafka (tansu on 127.0.0.1): an offset range read in executors, one Spark
partition per Kafka partition, and an output topic that a rerun replaces."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from kafka_helpers import consume_all, create_topic, keyed, produce_batched, run

from runtime.spark import KafkaOutput, KafkaRange, ReprocessError, SparkRunner
from runtime.testing import TestRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem
from samza_dsl.windows import Windows

KV_JSON = KVSerde(StringSerde(), JsonSerde())


def app_for(bootstrap: str, topic: str, out_topic: str) -> StreamApplication:
    app = StreamApplication("spark-kafka", config={"job.intermediate.stream.partitions": 2})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    views = kafka.input("views", serde=KV_JSON, physical_name=topic,
                        event_time=lambda kv: kv.value["ts"])
    w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=5), init=int,
                               fold=lambda kv, n: n + 1, event_time=lambda kv: kv.value["ts"])
    (app.input(views).partition_by(lambda kv: kv.value["country"], lambda kv: kv.value,
                                   name="by-country")
     .window(w, name="w")
     .map(lambda p: KV(f"{p.key.key}@{p.key.pane_id}", p.message), name="row")
     .send_to(app.output(kafka.output("counts", serde=KV_JSON, physical_name=out_topic))))
    return app


def views(n: int) -> list[tuple[str, Any]]:
    return [(f"user{i % 11}", {"country": f"c{i % 3}", "ts": 1000.0 + i * 0.4}) for i in range(n)]


def by_partition(items: list[tuple[str, Any]], partitions: int) -> dict[int, list[KV]]:
    out: dict[int, list[KV]] = {p: [] for p in range(partitions)}
    for p, k, v in keyed(items, partitions):
        out[p].append(KV(k.decode(), json.loads(v)))
    return out


def read_counts(bootstrap: str, topic: str, partitions: int) -> Counter[tuple[str, int]]:
    got = run(consume_all(bootstrap, topic, partitions))
    return Counter((k.decode(), json.loads(v)) for recs in got.values() for _, k, v in recs)


def test_an_offset_range_in_and_a_topic_out_replaced_by_a_rerun(
        kafka_bootstrap: str, spark: Any) -> None:
    items = views(120)
    run(create_topic(kafka_bootstrap, "sp-views", 3))
    run(produce_batched(kafka_bootstrap, "sp-views", keyed(items, 3)))  # multi-record batches
    app = app_for(kafka_bootstrap, "sp-views", "sp-counts")
    expected = TestRunner(app).add_input("views", by_partition(items, 3)).run().messages("counts")
    result = SparkRunner(spark).reprocess(
        app, {"views": KafkaRange(kafka_bootstrap)},
        outputs={"counts": KafkaOutput(kafka_bootstrap)})
    assert result.rows_in == {"views": 120}
    # the output topic was created with the planned count (the widest input: 3)
    assert result.plan.streams["counts"].partitions in (None, 3)
    want = Counter((m.key, m.value) for m in expected)
    assert read_counts(kafka_bootstrap, "sp-counts", 3) == want
    # a rerun replaces what the first run wrote
    SparkRunner(spark).reprocess(app_for(kafka_bootstrap, "sp-views", "sp-counts"),
                                 {"views": KafkaRange(kafka_bootstrap)},
                                 outputs={"counts": KafkaOutput(kafka_bootstrap)})
    assert read_counts(kafka_bootstrap, "sp-counts", 3) == want


def test_a_partial_offset_range(kafka_bootstrap: str, spark: Any) -> None:
    items = views(60)
    run(create_topic(kafka_bootstrap, "sp-range", 2))
    records = keyed(items, 2)
    run(produce_batched(kafka_bootstrap, "sp-range", records))
    app = StreamApplication("spark-range")
    kafka = KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap)
    app.input(kafka.input("in", serde=KV_JSON, physical_name="sp-range")).send_to(
        app.output(kafka.output("out", serde=KV_JSON, physical_name="sp-range-out")))
    # skip the first 3 records of partition 0 and stop partition 1 after 5
    got = SparkRunner(spark).reprocess(
        app, {"in": KafkaRange(kafka_bootstrap, start={0: 3}, end={1: 5})}).messages("out")
    per = by_partition(items, 2)
    assert Counter((m.key, json.dumps(m.value)) for m in got) == Counter(
        (m.key, json.dumps(m.value)) for m in per[0][3:] + per[1][:5])


def test_a_missing_topic_names_it(kafka_bootstrap: str, spark: Any) -> None:
    app = app_for(kafka_bootstrap, "sp-no-such-topic", "sp-unused")
    with pytest.raises(Exception, match=r"input 'views': topic 'sp-no-such-topic' does not exist"):
        SparkRunner(spark).reprocess(app, {"views": KafkaRange(kafka_bootstrap)})


def test_records_that_do_not_fit_the_serde_name_topic_partition_and_offset(
        kafka_bootstrap: str, spark: Any) -> None:
    run(create_topic(kafka_bootstrap, "sp-bad", 1))
    run(produce_batched(kafka_bootstrap, "sp-bad", [(0, b"a", b'{"ts": 1}'), (0, b"b", b"{oops")]))
    app = StreamApplication("spark-bad")
    kafka = KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap)
    app.input(kafka.input("in", serde=KV_JSON, physical_name="sp-bad")).send_to(
        app.output(kafka.output("out", serde=KV_JSON, physical_name="sp-bad-out")))
    with pytest.raises(ReprocessError, match=r"input 'in': topic 'sp-bad' partition 0 offset 1 "
                                             r"does not fit"):
        SparkRunner(spark).reprocess(app, {"in": KafkaRange(kafka_bootstrap)})
