"""A remote table in a job on Kafka (tansu on 127.0.0.1): views read from a topic are joined
with profiles from a real HTTP service on 127.0.0.1, profile updates from another topic are
written to it, and the joined views go to an output topic."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

from kafka_helpers import create_topic, keyed, produce_each, run

from runtime import LocalRunner
from samza_dsl import KV, CacheSpec, RetryPolicy, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem
from samza_dsl.testing.kv_service import HttpKV, KVService

SERDE = KVSerde(StringSerde(), JsonSerde())


def test_a_job_on_kafka_joins_and_writes_a_remote_table(kafka_bootstrap: str,
                                                        tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    views_topic, updates_topic, out_topic = f"views-{tag}", f"updates-{tag}", f"out-{tag}"
    for topic in (views_topic, updates_topic):
        run(create_topic(kafka_bootstrap, topic, 2))
    views = [(f"u{i % 6}", {"page": f"/p/{i}"}) for i in range(40)]
    run(produce_each(kafka_bootstrap, views_topic, keyed(views, 2)))
    run(produce_each(kafka_bootstrap, updates_topic,
                     keyed([("n1", {"tier": "new"}), ("u5", None)], 2)))
    with KVService({f"u{i}": {"tier": f"t{i}"} for i in range(5)} | {"u5": {"tier": "x"}}) as svc:
        svc.fail("u3", times=1)  # retried
        kv = HttpKV(svc.url)
        app = StreamApplication(f"remote-{tag}", config={"task.max.concurrency": 8,
                                                         "task.commit.ms": 200})
        kafka = KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap)
        profiles = app.remote_table("profiles", read=kv.read, write=kv.write, rate_limit=500,
                                    retry=RetryPolicy(max_attempts=3, backoff=0.01),
                                    cache=CacheSpec(ttl=60, size=100))
        app.input(kafka.input("views", serde=SERDE, physical_name=views_topic)).join_table(
            profiles, combine=lambda v, p: KV(v.key, p.value["tier"] if p else None),
            name="tier").send_to(app.output(kafka.output("out", serde=SERDE,
                                                         physical_name=out_topic)))
        app.input(kafka.input("updates", serde=SERDE, physical_name=updates_topic)).send_to(
            profiles)
        runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")}).run()
        # u5's tier may be None: sorted with None as ""
        got = sorted(((m.key, m.value) for m in runner.messages("out")),
                     key=lambda kv: (kv[0], kv[1] or ""))
        assert svc.data["n1"] == {"tier": "new"} and "u5" not in svc.data
    tiers = {f"u{i}": f"t{i}" for i in range(5)}
    # u5's view may be joined before or after its delete: either its old tier or none
    assert [(k, v) for k, v in got if k != "u5"] == sorted(
        (k, tiers[k]) for k, _ in views if k != "u5")
    assert {v for k, v in got if k == "u5"} <= {"x", None}
    assert len(got) == len(views)


def test_exactly_once_with_a_remote_table_write_warns_once_at_start(
        kafka_bootstrap: str, tmp_path: Path, caplog: Any) -> None:
    """On Kafka as on the local system: a job with exactly-once and a remote table that writes
    says once, at start, that those writes stay at least once; at least once, nothing."""
    tag = uuid.uuid4().hex[:8]
    updates_topic = f"updates-{tag}"
    run(create_topic(kafka_bootstrap, updates_topic, 2))
    run(produce_each(kafka_bootstrap, updates_topic,
                     keyed([(f"u{i}", {"tier": f"t{i}"}) for i in range(6)], 2)))
    with KVService({}) as svc:
        kv = HttpKV(svc.url)
        for guarantee in ("at-least-once", "exactly-once"):
            app = StreamApplication(f"remote-{guarantee}-{tag}", config={"task.commit.ms": 200})
            kafka = KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap)
            profiles = app.remote_table("profiles", read=kv.read, write=kv.write)
            app.input(kafka.input("updates", serde=SERDE, physical_name=updates_topic)).send_to(
                profiles)
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="samza_dsl.exactly_once"):
                LocalRunner(app, {"job.dir": str(tmp_path / guarantee),
                                  "job.processing.guarantee": guarantee}).run()
            warned = [r.getMessage() for r in caplog.records
                      if r.name == "samza_dsl.exactly_once"]
            assert len(svc.data) == 6
            if guarantee == "at-least-once":
                assert warned == []
            else:
                assert len(warned) == 1, warned
                assert "remote table(s) profiles stay at least once" in warned[0]
