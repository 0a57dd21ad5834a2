"""A table with an event-time ttl on Kafka (a static assignment):
lookups miss expired entries, the changelog topic ends each expired key with a tombstone, and a
store rebuilt from the topic brings none back (tests/runtime/test_table_ttl.py has the rest)."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from kafka_helpers import consume_all, create_topic, keyed, produce_each, run, topic_configs

from runtime import LocalRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

SERDE = KVSerde(StringSerde(), JsonSerde())
EVENTS = [("u1", {"kind": "put", "ts": 0}), ("u1", {"kind": "get", "ts": 5}),
          ("u2", {"kind": "put", "ts": 20}), ("u1", {"kind": "get", "ts": 21}),
          ("u2", {"kind": "get", "ts": 21}), ("u3", {"kind": "put", "ts": 40})]


def ttl_app(name: str, bootstrap: str, events: str, found: str) -> StreamApplication:
    app = StreamApplication(name, config={"task.commit.ms": 200})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    table = app.table("sessions", serde=SERDE, ttl=timedelta(seconds=10),
                      ttl_event_time=lambda e: e["ts"])
    s = app.input(kafka.input("events", serde=SERDE, physical_name=events))
    s.filter(lambda kv: kv.value["kind"] == "put").send_to(table)
    (s.filter(lambda kv: kv.value["kind"] == "get")
     .join_table(table, combine=lambda m, r: KV(m.key, [m.value["ts"], r and r.value["ts"]]))
     .send_to(app.output(kafka.output("found", serde=SERDE, physical_name=found))))
    return app


def _found(app: StreamApplication, config: dict[str, str], bootstrap: str, out: str,
           produce: Callable[[], None]) -> list[tuple[str, list[int | None]]]:
    """Produces, runs the job to the inputs' ends, and gives what the output topic says."""
    produce()
    LocalRunner(app, config).run().close()
    records = run(consume_all(bootstrap, out, 1))[0]
    return [(k.decode(), json.loads(v)) for _, k, v in records]


def test_ttl_table_on_kafka(kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    name, ev, out = f"ttl-{tag}", f"events-{tag}", f"found-{tag}"
    run(create_topic(kafka_bootstrap, ev, 1))
    app = ttl_app(name, kafka_bootstrap, ev, out)
    config = {"job.dir": str(tmp_path / "job"), "job.coordinator": "static"}
    assert _found(app, config, kafka_bootstrap, out, lambda: run(produce_each(
        kafka_bootstrap, ev, keyed(EVENTS, 1)))) == [
        ("u1", [5, 0]), ("u1", [21, None]), ("u2", [21, 20])]
    changelog = run(consume_all(kafka_bootstrap, f"{name}-1-sessions-changelog", 1))[0]
    last = {k.decode(): v for _, k, v in changelog}
    assert last["u1"] is None and last["u2"] is None and last["u3"] is not None
    # the local store is lost: rebuilt from the topic, it holds u3 only
    shutil.rmtree(tmp_path / "job" / "stores")
    more = keyed([("u2", {"kind": "get", "ts": 41}), ("u3", {"kind": "get", "ts": 41})], 1)
    assert _found(app, config, kafka_bootstrap, out,
                  lambda: run(produce_each(kafka_bootstrap, ev, more)))[3:] == [
        ("u2", [41, None]), ("u3", [41, 40])]


def test_a_processing_time_ttl_changelog_topic_also_deletes_records_older_than_the_ttl(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """A table with a ttl on processing time: its changelog topic is created ``compact,delete``
    with ``retention.ms`` the ttl and a minute, so that the brokers drop records older than
    the ttl whatever their keys, as the embedded log does; an event-time table's stays
    ``compact`` (a record's timestamp says nothing of its event time)."""
    tag = uuid.uuid4().hex[:8]
    name, ev, out = f"pttl-{tag}", f"events-{tag}", f"found-{tag}"
    run(create_topic(kafka_bootstrap, ev, 1))
    app = StreamApplication(name, config={"task.commit.ms": 200})
    kafka = KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap)
    wall = app.table("wall", serde=SERDE, ttl=timedelta(hours=1))
    event = app.table("event", serde=SERDE, ttl=timedelta(hours=1),
                      ttl_event_time=lambda e: e["ts"])
    s = app.input(kafka.input("events", serde=SERDE, physical_name=ev))
    s.send_to(wall)
    s.send_to(event)
    s.join_table(wall, combine=lambda m, r: KV(m.key, r is not None)).send_to(
        app.output(kafka.output("found", serde=SERDE, physical_name=out)))
    config = {"job.dir": str(tmp_path / "job"), "job.coordinator": "static"}
    assert _found(app, config, kafka_bootstrap, out, lambda: run(produce_each(
        kafka_bootstrap, ev, keyed([("u1", {"ts": 1})], 1)))) == [("u1", True)]
    wall_configs = run(topic_configs(kafka_bootstrap, f"{name}-1-wall-changelog"))
    assert wall_configs.get("cleanup.policy") == "compact,delete", wall_configs
    assert wall_configs.get("retention.ms") == str(3_600_000 + 60_000), wall_configs
    event_configs = run(topic_configs(kafka_bootstrap, f"{name}-1-event-changelog"))
    assert event_configs.get("cleanup.policy") == "compact", event_configs
    assert "retention.ms" not in event_configs or event_configs["retention.ms"] != str(
        3_660_000), event_configs
