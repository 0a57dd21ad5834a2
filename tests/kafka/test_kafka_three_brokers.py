"""A job on three Apache Kafka brokers (KRaft, three controllers, on 127.0.0.1): its topics are
replicated, and losing brokers under load loses nothing.

- The topics a job creates (intermediate streams, changelogs, checkpoints, dead letters,
  outputs) get ``min(3, brokers)`` replicas and ``min.insync.replicas=2``; its producers write
  with ``acks=all``.
- SIGKILL the broker that leads the most partitions while input flows, then start it again:
  every event is counted, at least once, and under exactly-once once (a plain
  ``read_committed`` consumer of the broker reads exactly what the job's marker-based reading
  reads), and the member never stops.
- Two brokers down at once: nothing can be written (fewer in-sync replicas than 2); the job
  waits, says so, loses nothing, and goes on by itself once they are back.

Apache Kafka only: tansu is one broker and replicates nothing.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from group_helpers import Member, settled, wait_for
from test_kafka_exactly_once import committed

from runtime.kafka.admin import TopicSpec, ensure_topics
from samza_dsl.testing.apache_kafka import ApacheKafkaCluster

KEYS = 20
EOS = ("-c", "job.processing.guarantee=exactly-once")
#: the member's own settings: a 6 s session (a broker's loss may hold its heartbeats a while)
SETTINGS = ("-c", "systems.kafka.consumer.session.timeout.ms=10000",
            "-c", "job.kafka.unavailable.timeout.ms=120000")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafkaCluster]:
    with ApacheKafkaCluster(3, root=tmp_path_factory.mktemp("three-brokers")) as c:
        yield c


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


async def _feed_async(bootstrap: str, topic: str, n: int, stop: threading.Event) -> None:
    """``n`` events over 20 keys, 40 at a time every 0.25 s, idempotent with acks=all: a
    broker lost meanwhile delays them, and loses or repeats none."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                enable_idempotence=True, request_timeout_ms=30_000)
    await producer.start()
    try:
        for start in range(0, n, 40):
            if stop.is_set():
                return
            sent = [await producer.send(topic, key=f"k{i % KEYS}".encode(),
                                        value=json.dumps({"i": i}).encode(),
                                        partition=i % 4)
                    for i in range(start, min(n, start + 40))]
            await asyncio.gather(*sent)
            await asyncio.sleep(0.25)
    finally:
        await producer.stop()


def _feeder(bootstrap: str, topic: str, n: int, stop: threading.Event) -> threading.Thread:
    return threading.Thread(target=lambda: run(_feed_async(bootstrap, topic, n, stop)))


def _outputs(bootstrap: str, tag: str) -> list[list[int]]:
    """[count, pid, i] of each output a read_committed reader reads (from the markers)."""
    return [json.loads(v) for v in committed(bootstrap, f"gout-{tag}", 2) if v]


async def _read_committed(bootstrap: str, topic: str) -> list[bytes]:
    """What a plain aiokafka consumer with isolation_level=read_committed reads of ``topic``:
    the broker's own last stable offset and aborted-transaction list."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                isolation_level="read_committed", enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(2)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)  # the last stable offsets
        out: list[bytes] = []
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            got = await consumer.getmany(timeout_ms=500)
            out += [r.value for rs in got.values() for r in rs if r.value is not None]
        return out
    finally:
        await consumer.stop()


async def _describe(bootstrap: str, topics: list[str]) -> dict[str, tuple[int, str]]:
    """Per topic: its replica count and its min.insync.replicas."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        replicas = {t["topic"]: len(t["partitions"][0]["replicas"])
                    for t in await admin.describe_topics(topics)}
        answers = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics])
    finally:
        await admin.close()
    out = {}
    for answer in answers:
        for resource in answer.to_object()["resources"]:
            entries = {e["config_names"]: e["config_value"] for e in resource["config_entries"]}
            name = resource["resource_name"]
            out[name] = (replicas[name], entries.get("min.insync.replicas", ""))
    return out


async def _leaders(bootstrap: str, topics: list[str]) -> Counter[int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return Counter(p["leader"] for t in await admin.describe_topics(topics)
                       for p in t["partitions"] if p["leader"] >= 0)
    finally:
        await admin.close()


def _wind_down(cluster: ApacheKafkaCluster, stop: threading.Event, feeder: threading.Thread,
               member: Member, down: list[int]) -> int:
    """The feed stopped, the brokers still down started again, the member stopped: its code."""
    stop.set()
    if feeder.ident is not None:
        feeder.join(120)
    for i in down:
        cluster.start_node(i)
    return member.stop(90)


def _input(cluster: ApacheKafkaCluster, tag: str) -> str:
    topic = f"gevents-{tag}"
    run(ensure_topics(cluster.bootstrap, [TopicSpec(topic, 4)], replication_factor=None))
    return topic


def test_the_topics_a_job_makes_are_replicated_three_times_and_need_two_in_sync(
        cluster: ApacheKafkaCluster, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    _input(cluster, tag)
    member = Member(tmp_path / "host", cluster.bootstrap, tag, *SETTINGS, *EOS)
    try:
        wait_for("the member runs the tasks", lambda: settled([member], 4), 90, [member])
    finally:
        assert member.stop() == 0, member.text()[-3000:]
    job = f"group-{tag}-1"
    made = [f"gout-{tag}", f"__samza_checkpoint_{job}", f"{job}-counts-changelog",
            f"{job}-dead-letter"]
    described = run(_describe(cluster.bootstrap, made))
    assert described == {t: (3, "2") for t in made}, described


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_losing_the_busiest_broker_under_load_loses_nothing(
        cluster: ApacheKafkaCluster, tmp_path: Path, guarantee: str) -> None:
    tag = uuid.uuid4().hex[:8]
    topic = _input(cluster, tag)
    n = 1200
    stop = threading.Event()
    feeder = _feeder(cluster.bootstrap, topic, n, stop)
    member = Member(tmp_path / "host", cluster.bootstrap, tag, *SETTINGS,
                    "-c", f"job.processing.guarantee={guarantee}")
    killed = None
    try:
        wait_for("the member runs the tasks", lambda: settled([member], 4), 90, [member])
        feeder.start()
        wait_for("outputs come", lambda: _outputs(cluster.bootstrap, tag), 60, [member])
        job = f"group-{tag}-1"
        leaders = run(_leaders(cluster.bootstrap, [topic, f"gout-{tag}",
                                                   f"{job}-counts-changelog"]))
        busiest = leaders.most_common(1)[0][0]
        killed = busiest - 1
        cluster.kill(killed)  # SIGKILL: the broker leading the most partitions is lost
        time.sleep(5)
        assert member.alive(), member.text()[-3000:]
        cluster.start_node(killed)
        killed = None
        feeder.join(180)
        wait_for("every event is counted", lambda: len(
            {o[2] for o in _outputs(cluster.bootstrap, tag)}) == n, 180, [member])
    finally:
        code = _wind_down(cluster, stop, feeder, member, [] if killed is None else [killed])
    assert code == 0, member.text()[-3000:]
    outs = _outputs(cluster.bootstrap, tag)
    seen = Counter(o[2] for o in outs)
    assert set(seen) == set(range(n)), sorted(set(range(n)) - set(seen))[:10]
    if guarantee == "exactly-once":
        assert max(seen.values()) == 1, [i for i, c in seen.items() if c > 1][:10]
        plain = Counter(json.loads(v)[2] for v in run(_read_committed(cluster.bootstrap,
                                                                      f"gout-{tag}")))
        assert plain == seen, "a plain read_committed consumer reads what the job's reading does"


def test_two_brokers_down_stop_the_writes_and_the_job_goes_on_once_they_are_back(
        cluster: ApacheKafkaCluster, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    topic = _input(cluster, tag)
    n = 800
    stop = threading.Event()
    feeder = _feeder(cluster.bootstrap, topic, n, stop)
    member = Member(tmp_path / "host", cluster.bootstrap, tag, *SETTINGS)
    down: list[int] = []
    try:
        wait_for("the member runs the tasks", lambda: settled([member], 4), 90, [member])
        feeder.start()
        wait_for("outputs come", lambda: _outputs(cluster.bootstrap, tag), 60, [member])
        up = [i for i in range(3) if cluster.nodes[i].alive()]
        down = up[:2]
        for i in down:
            cluster.kill(i)
        wait_for("the member says why it cannot write", lambda: "only 1 of its 3 brokers are "
                 "up" in member.text(), 90, [member])
        said = [line for line in member.text().splitlines() if "brokers are up" in line]
        assert "min.insync.replicas" in said[0] and "retries" in said[0], said
        for i in down:
            cluster.start_node(i)
        down = []
        feeder.join(240)
        wait_for("every event is counted", lambda: len(
            {o[2] for o in _outputs(cluster.bootstrap, tag)}) == n, 240, [member])
    finally:
        code = _wind_down(cluster, stop, feeder, member, down)
    assert code == 0, member.text()[-3000:]
    seen = {o[2] for o in _outputs(cluster.bootstrap, tag)}
    assert seen == set(range(n))
