"""``max_event_time_ahead=`` on a Kafka input (tansu on 127.0.0.1): a record dated in the year
9999, or at 1e18 ms, follows the stream's serde error policy instead of moving the watermark,
as on the embedded local system (docs/windows.md, "Event times far ahead")."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kafka_helpers import create_topic, keyed, produce_each, run

from runtime import LocalRunner
from runtime.engine.codec import ERROR_HEADER, SOURCE_HEADER
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.errors import EventTimeAheadError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

SERDE = KVSerde(StringSerde(), JsonSerde())
YEAR_9999 = 253402300799.0
FAR = 1e15


async def dead_letters(bootstrap: str, job_name: str) -> list[Any]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    tp = TopicPartition(f"{job_name}-dead-letter", 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([tp])
        batch = await consumer.getmany(tp, timeout_ms=3000)
        return [(r.key, r.value, dict(r.headers)) for r in batch.get(tp, [])]
    finally:
        await consumer.stop()


def counting_app(name: str, bootstrap: str, tag: str) -> StreamApplication:
    app = StreamApplication(name, config={"task.commit.ms": 200})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    views = app.input(kafka.input("views", serde=SERDE, physical_name=f"views-{tag}",
                                  event_time=lambda kv: kv.value["ts"],
                                  max_event_time_ahead=timedelta(hours=1)))
    out = app.output(kafka.output("counts", serde=SERDE, physical_name=f"counts-{tag}"))
    (views.window(Windows.tumbling(timedelta(seconds=10), init=lambda: 0,
                                   fold=lambda kv, n: n + 1, event_time=lambda kv: kv.value["ts"]),
                  name="count")
        .map(lambda pane: KV(pane.key.pane_id, pane.message), name="row")
        .send_to(out))
    return app


@pytest.mark.parametrize("policy", ["fail", "skip", "dead-letter"])
def test_a_far_event_time_on_a_kafka_input_meets_the_policy(
        kafka_bootstrap: str, tmp_path: Path, policy: str) -> None:
    tag = uuid.uuid4().hex[:8]
    name = f"ahead-{tag}"
    app = counting_app(name, kafka_bootstrap, tag)
    run(create_topic(kafka_bootstrap, f"views-{tag}", 1))
    run(produce_each(kafka_bootstrap, f"views-{tag}", keyed(
        [("a", {"ts": 1}), ("b", {"ts": YEAR_9999}), ("c", {"ts": 2}), ("d", {"ts": FAR}),
         ("e", {"ts": 15})], 1)))
    config = {"job.dir": str(tmp_path / "job"), "streams.views.samza.serde.error": policy}

    if policy == "fail":
        with pytest.raises(EventTimeAheadError) as err:
            LocalRunner(app, config).run()
        e = err.value
        assert (e.stream, e.partition, e.offset, e.event_time) == ("views", 0, 1, YEAR_9999)
        assert "9999-12-31T23:59:59" in str(e) and "samza.serde.error" in str(e)
        return
    runner = LocalRunner(app, config).run()
    assert sorted((m.key, m.value) for m in runner.messages("counts")) == [("0", 2),
                                                                          ("10000", 1)]
    assert runner.late_counts == {}
    assert runner.metrics["views.event-time-ahead-skipped"] == 2
    dead = run(dead_letters(kafka_bootstrap, f"{name}-1"))
    if policy == "dead-letter":
        assert [(k, json.loads(v)) for k, v, _ in dead] == [(b"b", {"ts": YEAR_9999}),
                                                           (b"d", {"ts": FAR})]
        assert [h[SOURCE_HEADER] for _, _, h in dead] == [b"views/0/1", b"views/0/3"]
        assert all(b"ahead of the wall clock" in h[ERROR_HEADER] for _, _, h in dead)
    else:
        assert dead == []
