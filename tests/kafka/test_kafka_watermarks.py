"""Watermarks on Kafka (tansu on 127.0.0.1): an event-time window behind an async step and a
partition_by through a real topic keeps every in-order message, one input partition slowed,
whether the event time is declared on the input or only on the window (docs/semantics.md rule 8)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kafka_helpers import create_topic, produce_batched, run

from runtime import LocalRunner
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem


def ts(kv: KV[str, Any]) -> float:
    return float(kv.value["ts"])


@pytest.mark.parametrize("declared", [True, False], ids=["declared-on-input", "window-only"])
def test_a_slow_partition_loses_nothing_on_kafka(kafka_bootstrap: str, tmp_path: Path,
                                                 declared: bool) -> None:
    tag = uuid.uuid4().hex[:8]
    topics = {"views": f"views-{tag}", "counts": f"counts-{tag}"}
    run(create_topic(kafka_bootstrap, topics["views"], 2))
    records = []
    for p in range(2):
        for i in range(200):
            u = f"u{p}-{i % 4}"
            records.append((p, u.encode(),
                            json.dumps({"user": u, "ts": i * 0.5, "p": p}).encode()))
    run(produce_batched(kafka_bootstrap, topics["views"], records))

    kafka = KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap)
    serde = KVSerde(StringSerde(), JsonSerde())
    app = StreamApplication(f"wm-{tag}", config={"task.max.concurrency": 50})
    views = app.input(kafka.input("views", serde=serde, physical_name=topics["views"],
                                  **({"event_time": ts} if declared else {})))

    async def slow(kv: KV[str, Any]) -> list[KV[str, Any]]:
        await asyncio.sleep(0.003 if kv.value["p"] == 1 else 0)
        return [kv]

    (views.async_flat_map(slow, name="slow")
     .partition_by(lambda kv: kv.value["user"], lambda kv: kv.value, serde=serde, name="by-user")
     .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                                    fold=lambda m, n: n + 1, event_time=ts), name="w")
     .map(lambda p: KV(f"{p.key.key}@{p.key.pane_id}", p.message), name="record")
     .send_to(app.output(kafka.output("counts", serde=serde, physical_name=topics["counts"]))))
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")}).run()
    counts = {kv.key: kv.value for kv in runner.messages("counts")}
    assert runner.late_counts == {}
    assert counts == {f"u{p}-{k}@{s}": 5 for p in range(2) for k in range(4)
                      for s in range(0, 100_000, 10_000)}
