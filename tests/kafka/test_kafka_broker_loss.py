"""One broker of three lost (SIGKILL) while a job runs on a replicated Apache Kafka cluster
(replication 3, ``min.insync.replicas=2``): the job goes on, and stalls no longer than a plain
client of the cluster does.

Until the controllers fence the lost broker, once its session (``broker.session.timeout.ms``)
has run out, the partitions it led have no leader that answers, and a write with ``acks=all``
to any partition that has it among its in-sync replicas waits (every partition here): the
test's own producers wait as long as the job. Then new leaders are elected, the in-sync
replicas shrink, and writes go on. The session is 25 s here, three times the job's
``job.kafka.unavailable.timeout.ms`` of 8 s: an election counted against that timeout stops
the job every time. The lost broker is the first bootstrap server and leads the input's
partitions 0 and 1 (the checkpoint check reads them); the test creates the job's topics with
their replicas placed so.

Apache Kafka only: tansu is one broker and replicates nothing.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from group_helpers import Member, settled, wait_for

from samza_dsl.testing.apache_kafka import ApacheKafkaCluster

#: how long the controllers wait before they fence a broker that stopped heartbeating
SESSION_S = 25
UNAVAILABLE_MS = 8000
#: the input's partitions the lost broker leads, and the others
LOST_PARTS, KEPT_PARTS = (0, 1), (2, 3)
#: how much longer than the test's own producers the job may pause: its clients learning the
#: new leaders, a fetch, a few commit intervals
SLACK_S = 5.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafkaCluster]:
    with ApacheKafkaCluster(3, root=tmp_path_factory.mktemp("broker-loss"), settings={
            "broker.session.timeout.ms": SESSION_S * 1000}) as c:
        yield c


async def _create(bootstrap: str, tag: str) -> None:
    """The job's topics, three replicas each and two in sync: node 1 (the first bootstrap
    server) leads the input's partitions 0 and 1, nodes 2 and 3 lead every other partition.
    Made once the metadata lists the three brokers (one started again registers a moment after
    it answers)."""
    job = f"group-{tag}-1"
    compact = {"cleanup.policy": "compact"}

    def topic(name: str, leaders: list[int], configs: dict[str, str] | None = None) -> NewTopic:
        return NewTopic(name, -1, -1, replica_assignments={
            p: [lead, *(n for n in (1, 2, 3) if n != lead)] if lead == 1
            else [lead, 5 - lead, 1] for p, lead in enumerate(leaders)},
            topic_configs={"min.insync.replicas": "2", **(configs or {})})
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        async with asyncio.timeout(60):
            while len((await admin.describe_cluster())["brokers"]) < 3:
                await asyncio.sleep(0.2)
        await admin.create_topics([
            topic(f"gevents-{tag}", [1, 1, 2, 3]),
            topic(f"gout-{tag}", [2, 3]),
            topic(f"{job}-counts-changelog", [2, 3, 2, 3], compact),
            topic(f"__samza_checkpoint_{job}", [2], compact),
            topic(f"{job}-dead-letter", [3])])
    finally:
        await admin.close()


async def _feed(bootstrap: str, topic: str, stop: threading.Event, sent: set[int],
                acked: list[float]) -> None:
    """Events on each of the input's 4 partitions, 5 every 0.25 s per partition, each
    partition by a producer of its own, with ``acks=all``. ``i % 4`` is the partition;
    ``sent`` gets the i of each event the brokers took, ``acked`` when they took them."""
    async def one(p: int) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                    enable_idempotence=True, request_timeout_ms=120_000)
        await producer.start()
        try:
            i = p
            while not stop.is_set():
                batch = [await producer.send(topic, key=f"k{j % 20}".encode(),
                                             value=json.dumps({"i": j}).encode(), partition=p)
                         for j in range(i, i + 20, 4)]
                await asyncio.gather(*batch)
                sent.update(range(i, i + 20, 4))
                acked.append(time.time())
                i += 20
                await asyncio.sleep(0.25)
        finally:
            await producer.stop()
    await asyncio.gather(*(one(p) for p in range(4)))


def _feeder(bootstrap: str, topic: str, stop: threading.Event, sent: set[int],
            acked: list[float]) -> threading.Thread:
    return threading.Thread(target=lambda: asyncio.run(_feed(bootstrap, topic, stop, sent,
                                                             acked)))


def _pause(times: list[float], start: float) -> tuple[float, float]:
    """The longest gap between ``times`` from ``start`` on, and when it ended."""
    at = sorted(t for t in times if t >= start)
    return max((b - a, b) for a, b in zip(at, at[1:], strict=False))


async def _read(bootstrap: str, topic: str) -> list[tuple[float, int]]:
    """By a plain aiokafka consumer (not the job's code): (when the job wrote it, in s since
    the epoch; the event's i) of each record of ``topic``'s two partitions."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(2)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out = []
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                out += [(r.timestamp / 1000, json.loads(r.value)[2]) for r in records if r.value]
        return sorted(out)
    finally:
        await consumer.stop()


def _written(bootstrap: str, tag: str) -> list[tuple[float, int]]:
    return asyncio.run(_read(bootstrap, f"gout-{tag}"))


@pytest.mark.parametrize("member_args", [
    (), ("--container-id", "0", "-c", "job.processing.guarantee=exactly-once")],
    ids=["group-at-least-once", "static-exactly-once"])
def test_a_job_goes_on_through_the_loss_of_one_broker_of_three(
        cluster: ApacheKafkaCluster, tmp_path: Path, member_args: tuple[str, ...]) -> None:
    tag = uuid.uuid4().hex[:8]
    asyncio.run(_create(cluster.bootstrap, tag))
    topic = f"gevents-{tag}"
    lost = cluster.leader_of(topic, LOST_PARTS[0])
    assert lost == 0 and cluster.leader_of(topic, LOST_PARTS[1]) == 0  # the first bootstrap
    assert {cluster.leader_of(topic, p) for p in KEPT_PARTS} == {1, 2}
    stop = threading.Event()
    sent: set[int] = set()
    acked: list[float] = []
    feeder = _feeder(cluster.bootstrap, topic, stop, sent, acked)
    member = Member(tmp_path / "host", cluster.bootstrap, tag,
                    "-c", "systems.kafka.consumer.session.timeout.ms=10000",
                    "-c", f"job.kafka.unavailable.timeout.ms={UNAVAILABLE_MS}", *member_args)
    killed_at = 0.0
    try:
        wait_for("the member runs the tasks", lambda: settled([member], 4), 90, [member])
        feeder.start()
        wait_for("outputs come", lambda: len(_written(cluster.bootstrap, tag)) > 100, 60,
                 [member])
        killed_at = time.time()
        cluster.kill(lost)  # SIGKILL
        wait_for("the lost broker's partitions flow again", lambda: any(
            i % 4 in LOST_PARTS and at > killed_at + 2
            for at, i in _written(cluster.bootstrap, tag)), SESSION_S + 40, [member])
        time.sleep(2)
        stop.set()
        feeder.join(60)
        wait_for("every event is counted", lambda: sent <= {
            i for _, i in _written(cluster.bootstrap, tag)}, 60, [member])
    finally:
        stop.set()
        if feeder.ident is not None:
            feeder.join(60)
        code = member.stop(60)
        if not cluster.nodes[lost].alive():  # back for the next test, with its data
            cluster.start_node(lost)
    text = member.text()
    assert code == 0, text[-3000:]
    for outage in ("has not answered", "does not answer", "writes wait"):
        assert outage not in text, text[-3000:]
    written = _written(cluster.bootstrap, tag)
    assert {i for _, i in written} == sent
    # the test's producers wait for the election; the job's pause ends with theirs
    waited, took_again = _pause(acked, killed_at - 1)
    paused, wrote_again = _pause([at for at, _ in written], killed_at - 1)
    assert waited > SESSION_S / 2, (waited, "the election took no time: nothing is tested")
    assert paused <= waited + SLACK_S, (paused, waited, text[-3000:])
    assert wrote_again <= took_again + SLACK_S, (wrote_again - took_again, text[-3000:])
