"""On Kafka too, a ``flat_map`` returning a str and a bare message sent to a keyed output fail
with the error every other runner gives (tests/runtime/test_type_mistakes.py), naming the
operator, task, input topic's stream, partition and offset."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka_helpers import create_topic, keyed, produce_each, run

from runtime import LocalRunner
from samza_dsl import StreamApplication
from samza_dsl.errors import TaskError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

SERDE = KVSerde(StringSerde(), JsonSerde())


@pytest.mark.parametrize("mistake, op, says", [
    ("str", "flat_map-split", "flat_map '{op_id}' returned a str ('hello'), which would emit its "
                              "characters one by one: return a list of messages"),
    ("not-kv", "send_to-1", "stream 'out' is keyed (KVSerde) but was sent a dict ({'n': 2, "
                            "'text': 'hello'}): send KV(key, value) to it"),
])
def test_type_mistakes_on_kafka(kafka_bootstrap: str, tmp_path: Path, mistake: str, op: str,
                                says: str) -> None:
    tag = uuid.uuid4().hex[:8]
    topic = f"in-{tag}"
    run(create_topic(kafka_bootstrap, topic, 1))
    run(produce_each(kafka_bootstrap, topic,
                     keyed(((f"k{i}", {"n": i, "text": "hello"}) for i in range(5)), 1)))
    app = StreamApplication(f"mistake-{tag}")
    kafka = KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap)
    inp = app.input(kafka.input("in", serde=SERDE, physical_name=topic))
    out = app.output(kafka.output("out", serde=SERDE, physical_name=f"out-{tag}", partitions=2))
    if mistake == "str":
        inp.flat_map(lambda kv: kv.value["text"] if kv.value["n"] == 2 else [kv],
                     name="split").send_to(out)
    else:
        inp.map(lambda kv: kv.value if kv.value["n"] == 2 else kv, name="unkey").send_to(out)
    op_id = f"mistake-{tag}-1-{op}"
    with pytest.raises(TaskError) as info:
        LocalRunner(app, {"job.dir": str(tmp_path / "job")}).run()
    err: Any = info.value
    assert (err.op_id, err.stream, err.partition, err.offset) == (op_id, "in", 0, 2)
    assert str(err).startswith(f"operator {op_id!r} failed in task 'Partition 0' on stream 'in' "
                               f"partition 0 offset 2: TypeError: {says.replace('{op_id}', op_id)}"), \
        str(err)
