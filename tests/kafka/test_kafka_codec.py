"""Bytes on Kafka topics are data, never code (tansu on 127.0.0.1): a pickle payload produced to
an intermediate topic, or put in a changelog topic a store is rebuilt from, runs nothing and
meets the stream's ``serde.error`` policy."""

from __future__ import annotations

import os
import pickle
import shutil
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kafka_helpers import consume_all, create_topic, keyed, produce_each, run

from operators.state import encode_key
from runtime import LocalRunner
from runtime.engine.codec import SOURCE_HEADER
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.errors import SamzaError, SerdeError
from samza_dsl.serdes import JsonSerde, KVSerde, SafeSerde, StringSerde
from samza_dsl.systems import KafkaSystem

SERDE = KVSerde(StringSerde(), JsonSerde())


class Evil:
    """Runs ``touch marker`` when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.marker}",))


def evil_payload(marker: Path) -> bytes:
    payload = pickle.dumps(Evil(marker))
    pickle.loads(payload)  # it does run code when unpickled: the test means something
    assert marker.exists()
    marker.unlink()
    return payload


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


# -- an intermediate topic ---------------------------------------------------------------------

def repartition_app(name: str, bootstrap: str, tag: str) -> StreamApplication:
    app = StreamApplication(name, config={"task.commit.ms": 200})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    inp = app.input(kafka.input("in", serde=SERDE, physical_name=f"in-{tag}"))
    out = app.output(kafka.output("out", serde=SERDE, physical_name=f"out-{tag}"))
    (inp.partition_by(lambda kv: kv.value["user"], lambda kv: kv.value, name="by-user")
        .map(lambda kv: KV(kv.key, kv.value["n"]), name="n")
        .send_to(out))
    return app


@pytest.mark.parametrize("policy", ["fail", "skip", "dead-letter"])
def test_pickle_on_an_intermediate_topic_runs_nothing_and_meets_the_policy(
        kafka_bootstrap: str, tmp_path: Path, policy: str) -> None:
    marker = tmp_path / "pwned"
    payload = evil_payload(marker)
    tag = uuid.uuid4().hex[:8]
    name = f"evil-{tag}"
    app = repartition_app(name, kafka_bootstrap, tag)
    run(create_topic(kafka_bootstrap, f"in-{tag}", 1))
    plan = app.plan(partitions={"in": 1})
    sid = next(iter(plan.intermediate_streams))
    topic = plan.streams[sid].physical_name
    run(create_topic(kafka_bootstrap, topic, plan.streams[sid].partitions or 1))
    run(produce_each(kafka_bootstrap, topic, [(0, SafeSerde().serialize("u9"), payload)]))
    run(produce_each(kafka_bootstrap, f"in-{tag}",
                     keyed([("a", {"user": "u1", "n": 1}), ("b", {"user": "u2", "n": 2})], 1)))
    config = {"job.dir": str(tmp_path / "job"), f"streams.{sid}.samza.serde.error": policy}

    if policy == "fail":
        with pytest.raises(SerdeError) as err:
            LocalRunner(app, config).run()
        text = str(err.value)
        assert repr(sid) in text and "partition 0" in text and "offset 0" in text
    else:
        runner = LocalRunner(app, config).run()
        assert sorted((m.key, m.value) for m in runner.messages("out")) == [("u1", 1), ("u2", 2)]
        assert runner.metrics["serde-errors-skipped"] == 1
        dead = run(dead_letters(kafka_bootstrap, f"{name}-1"))
        if policy == "dead-letter":
            assert [d[1] for d in dead] == [payload]
            assert dead[0][2][SOURCE_HEADER] == f"{sid}/0/0".encode()
        else:
            assert dead == []
    assert not marker.exists()


# -- a changelog topic -------------------------------------------------------------------------

def window_app(name: str, bootstrap: str, tag: str) -> StreamApplication:
    app = StreamApplication(name, config={"task.commit.ms": 200})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    inp = app.input(kafka.input("in", serde=SERDE, physical_name=f"in-{tag}"))
    out = app.output(kafka.output("out", serde=SERDE, physical_name=f"out-{tag}"))
    (inp.window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10),
                                       init=lambda: 0, fold=lambda kv, n: n + kv.value["n"],
                                       event_time=lambda kv: kv.value["ts"]), name="sum")
        .map(lambda pane: KV(pane.key.key, pane.message), name="flat")
        .send_to(out))
    return app


@pytest.mark.parametrize("policy", ["fail", "skip", "dead-letter"])
def test_pickle_in_a_changelog_topic_runs_nothing_and_meets_the_policy(
        kafka_bootstrap: str, tmp_path: Path, policy: str) -> None:
    marker = tmp_path / "pwned"
    payload = evil_payload(marker)
    tag = uuid.uuid4().hex[:8]
    name = f"cl-{tag}"
    app = window_app(name, kafka_bootstrap, tag)
    run(create_topic(kafka_bootstrap, f"in-{tag}", 1))
    # u1's pane closes at ts 15.0 (the window stores its watermark), u3's is open at the end
    run(produce_each(kafka_bootstrap, f"in-{tag}", keyed([("u1", {"n": 1, "ts": 1.0}),
                                                          ("u3", {"n": 1, "ts": 15.0})], 1)))
    config: dict[str, Any] = {"job.dir": str(tmp_path / "job")}
    LocalRunner(app, config).run()
    store = app.plan(partitions={"in": 1}).stores[f"{name}-1-window-sum"]
    changelog = str(store.changelog).partition(".")[2]
    before = run(consume_all(kafka_bootstrap, changelog, 1))[0]
    assert before, "the first run wrote the window's changelog"
    run(produce_each(kafka_bootstrap, changelog, [(0, encode_key((0, "u7")), payload)]))
    # a second run covers the payload with its checkpoint; then the local stores are lost
    run(produce_each(kafka_bootstrap, f"in-{tag}", keyed([("u2", {"n": 2, "ts": 22.0})], 1)))
    LocalRunner(app, config).run()
    shutil.rmtree(tmp_path / "job" / "stores")
    offset = next(o for o, _, v in run(consume_all(kafka_bootstrap, changelog, 1))[0]
                  if v == payload)

    config[f"streams.{changelog}.samza.serde.error"] = policy
    if policy == "fail":
        with pytest.raises(SamzaError) as err:
            LocalRunner(app, config).run()
        text = str(err.value)
        assert repr(changelog) in text and "partition 0" in text and f"offset {offset}" in text
    else:
        runner = LocalRunner(app, config).run()
        assert {i["mode"] for i in runner.job.state.restores.values()} == {"rebuilt"}
        assert runner.metrics["serde-errors-skipped"] == 1
        dead = run(dead_letters(kafka_bootstrap, f"{name}-1"))
        if policy == "dead-letter":
            assert [d[1] for d in dead] == [payload]
            assert dead[0][2][SOURCE_HEADER] == f"{changelog}/0/{offset}".encode()
        else:
            assert dead == []
    assert not marker.exists()
