"""On Kafka (tansu on 127.0.0.1), records produced by their key (murmur2, as Kafka's default
partitioner) and joined on another key fail the job by default, naming the join, the key and
both partitions (``task.join.partition.check``, docs/semantics.md "Joins that cannot meet")."""

from __future__ import annotations

import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from kafka_helpers import create_topic, keyed, produce_batched, run

from runtime import LocalRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import JoinPartitionError, TaskError
from samza_dsl.systems import KafkaSystem

sys.path.insert(0, str(Path(__file__).parent.parent / "runtime"))
from misjoin_app import SERDE, inputs  # noqa: E402


def test_a_join_on_another_key_fails_the_job_by_default(kafka_bootstrap: str,
                                                        tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    for sid in ("orders", "payments", "paid"):
        run(create_topic(kafka_bootstrap, f"{sid}-{tag}", 4))
    given = inputs()
    for sid in ("orders", "payments"):
        run(produce_batched(kafka_bootstrap, f"{sid}-{tag}",
                            keyed(((m.key, m.value) for m in given[sid]), 4)))
    kafka = KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap)
    app = StreamApplication(f"paid-{tag}")
    orders = app.input(kafka.input("orders", serde=SERDE, physical_name=f"orders-{tag}"))
    payments = app.input(kafka.input("payments", serde=SERDE, physical_name=f"payments-{tag}"))
    orders.join(payments, key=lambda kv: kv.value["order_id"], other_key=lambda kv: kv.key,
                combine=lambda o, p: KV(p.key, o.value), ttl=timedelta(minutes=10),
                name="paid") \
        .send_to(app.output(kafka.output("paid", serde=SERDE, physical_name=f"paid-{tag}")))
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")})
    try:
        with pytest.raises(TaskError) as err:
            runner.run()
    finally:
        runner.close()
    cause = err.value.__cause__
    assert isinstance(cause, JoinPartitionError)
    assert cause.belongs != cause.read_from
    assert f"join 'paid-{tag}-1-join-paid': the left key {cause.key!r} belongs to partition " \
           f"{cause.belongs} of stream 'orders' (4 partitions" in str(err.value)
    assert f"read from partition {cause.read_from}" in str(err.value)
