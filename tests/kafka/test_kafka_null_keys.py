"""On Kafka too, a None key or a key the table's serde cannot serialize sent to a table, and a
None value through ``partition_by``, fail with the line every other runner gives
(tests/runtime/test_null_keys.py), naming the operator and the input topic's stream, partition
and offset."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka_helpers import create_topic, keyed, produce_each, run

from runtime import LocalRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import TaskError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

SERDE = KVSerde(StringSerde(), JsonSerde())


@pytest.mark.parametrize("mistake, op, says", [
    ("none-key", "send_to-1", "TaskError: send_to table 't' ({op_id}): the key of KV(key=None, "
                              "value={{'n': 2}}) is None, and a table holds no None key (as in "
                              "Samza)"),
    ("int-key", "send_to-1", "SerdeError: table 't': cannot serialize a key (StringSerde() "
                             "cannot encode int 2: expected str."),
    ("none-value", "partition_by-by-key", "TaskError: partition_by '{op_id}': the value for "
                                          "KV(key='k2', value={{'n': 2}}) is None, and an "
                                          "intermediate stream '{op_id}' carries no None value "
                                          "(as in Samza)"),
])
def test_null_keys_and_values_on_kafka(kafka_bootstrap: str, tmp_path: Path, mistake: str,
                                       op: str, says: str) -> None:
    tag = uuid.uuid4().hex[:8]
    topic = f"in-{tag}"
    run(create_topic(kafka_bootstrap, topic, 1))
    run(produce_each(kafka_bootstrap, topic, keyed(((f"k{i}", {"n": i}) for i in range(5)), 1)))
    app = StreamApplication(f"nulls-{tag}")
    kafka = KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap)
    inp = app.input(kafka.input("in", serde=SERDE, physical_name=topic))
    if mistake == "none-value":
        out = app.output(kafka.output("out", serde=SERDE, physical_name=f"out-{tag}",
                                      partitions=1))
        inp.partition_by(lambda kv: kv.key, lambda kv: None if kv.value["n"] == 2 else kv.value,
                         serde=SERDE, name="by-key").send_to(out)
    else:
        table = app.table("t", serde=SERDE, changelog=False)
        bad: Any = None if mistake == "none-key" else 2
        inp.map(lambda kv: KV(bad, kv.value) if kv.value["n"] == 2 else kv,
                name="rekey").send_to(table)
    op_id = f"nulls-{tag}-1-{op}"
    with pytest.raises(TaskError) as info:
        LocalRunner(app, {"job.dir": str(tmp_path / "job")}).run()
    err: Any = info.value
    assert (err.op_id, err.stream, err.partition, err.offset) == (op_id, "in", 0, 2), str(err)
    assert str(err).startswith(f"operator {op_id!r} failed in task 'Partition 0' on stream 'in' "
                               f"partition 0 offset 2: {says.format(op_id=op_id)}"), str(err)
