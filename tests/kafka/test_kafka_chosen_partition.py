"""``send_to(output, partition=fn)`` on Kafka: each record is in the partition the application
chose, after a ``partition_by`` whose intermediate topic stays keyed by murmur2, and under
exactly-once, whose transactions take whichever partitions the records go to."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from kafka_helpers import consume_all, create_topic, keyed, produce_each, run

from operators.hashing import partition_for
from runtime import LocalRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

SERDE = KVSerde(StringSerde(), JsonSerde())
OUT_PARTITIONS = 3


def test_records_land_in_the_partitions_the_application_chose(kafka_bootstrap: str,
                                                               tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    words, out_topic = f"cp-words-{tag}", f"cp-out-{tag}"
    run(create_topic(kafka_bootstrap, words, 2))
    items = [(f"k{i % 5}", {"n": i}) for i in range(40)]
    run(produce_each(kafka_bootstrap, words, keyed(items, 2)))
    app = StreamApplication(f"cp-{tag}", config={"task.commit.ms": 100})
    kafka = KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap)
    out = app.output(kafka.output("out", serde=SERDE, physical_name=out_topic,
                                  partitions=OUT_PARTITIONS))

    def chosen(kv: KV[str, Any]) -> int:
        return int(kv.value) % OUT_PARTITIONS

    (app.input(kafka.input("words", serde=SERDE, physical_name=words))
        .partition_by(lambda kv: f"g{kv.value['n'] % 4}", lambda kv: kv.value["n"],
                      serde=SERDE, name="by-group")
        .send_to(out, partition=chosen))
    LocalRunner(app, {"job.dir": str(tmp_path / "job"), "job.intermediate.stream.partitions": 2,
                      "job.processing.guarantee": "exactly-once"}).run()

    got = run(consume_all(kafka_bootstrap, out_topic, OUT_PARTITIONS))
    seen = sorted(json.loads(v) for recs in got.values() for _, _, v in recs)
    assert seen == list(range(40))
    for p, records in got.items():
        assert all(json.loads(v) % OUT_PARTITIONS == p for _, _, v in records), (p, records)
        # the record's key is still the message's key
        assert all(k.decode() == f"g{json.loads(v) % 4}" for _, k, v in records)
    # the intermediate topic is keyed by murmur2 of the key, as ever
    intermediate = f"cp-{tag}-1-partition_by-by-group"
    for p, records in run(consume_all(kafka_bootstrap, intermediate, 2)).items():
        assert all(partition_for(k, 2) == p for _, k, _ in records if k is not None)


def test_spark_reprocessing_writes_each_record_to_its_chosen_partition(
        kafka_bootstrap: str, spark: Any) -> None:
    from runtime.spark import KafkaOutput, SparkRunner

    tag = uuid.uuid4().hex[:8]
    out_topic = f"cp-spark-{tag}"
    app = StreamApplication(f"cp-spark-{tag}")
    kafka = KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap)
    (app.input(kafka.input("in", serde=SERDE, partitions=2))
        .send_to(app.output(kafka.output("out", serde=SERDE, physical_name=out_topic,
                                         partitions=OUT_PARTITIONS)),
                 partition=lambda kv: kv.value % OUT_PARTITIONS))
    inputs = [KV(f"k{i % 5}", i) for i in range(30)]
    SparkRunner(spark).reprocess(app, {"in": inputs}, outputs={"out": KafkaOutput(kafka_bootstrap)})
    got = run(consume_all(kafka_bootstrap, out_topic, OUT_PARTITIONS))
    assert sorted(json.loads(v) for recs in got.values() for _, _, v in recs) == list(range(30))
    for p, records in got.items():
        assert all(json.loads(v) % OUT_PARTITIONS == p for _, _, v in records), (p, records)
        assert all(k.decode() == f"k{json.loads(v) % 5}" for _, k, v in records)
