"""``async_map`` on Kafka (``tests/runtime/test_async_map.py``): a static container gives each
key's outputs once, in input order, under both guarantees."""

from __future__ import annotations

import json
import tempfile
import uuid
from typing import Any

import pytest
from kafka_helpers import create_topic, produce_batched, produce_each, run
from test_kafka_exactly_once import committed_records

from runtime import LocalRunner
from samza_dsl.systems import KafkaSystem
from tests.runtime.test_async_map import PARTITIONS, build, expected, inputs


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_a_static_container_gives_each_keys_outputs_in_order(kafka_bootstrap: str,
                                                             kafka_broker_kind: str,
                                                             guarantee: str) -> None:
    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"in-{tag}", PARTITIONS))
    produce = produce_batched if kafka_broker_kind == "apache-kafka" else produce_each
    run(produce(kafka_bootstrap, f"in-{tag}", [
        (p, kv.key.encode(), json.dumps(kv.value).encode())
        for p, msgs in inputs()["in"].items() for kv in msgs]))
    app = build(KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap), tag=tag)
    with tempfile.TemporaryDirectory() as tmp:
        LocalRunner(app, {"job.dir": tmp, "job.processing.guarantee": guarantee,
                          "task.commit.ms": 200}).run().close()
    got: dict[str, list[Any]] = {}
    for k, v in committed_records(kafka_bootstrap, f"out-{tag}", 1):
        assert k is not None and v is not None
        got.setdefault(k.decode(), []).append(json.loads(v))
    assert got == expected()
