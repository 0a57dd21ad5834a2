"""A broker lost while a store is restored from its changelog (a rebuild, or the trim of the
entries past the checkpoint at a restart): the read waits while the job's broker watch sees the
brokers away, and fails with the watch's one error once they have been away for
job.kafka.unavailable.timeout.ms, as a broker loss anywhere else in a run; never a traceback
(aiokafka's consumer raised CancelledError from its stop once its fetch had lost its connection).
The job ends a few seconds after that limit, its clients' closes giving up at once, a static
container's claim on its id too (it waited 15 s on the dead broker).

The reader hands its chunks over through a bounded queue: with the reading side paused after the
first chunk, the reader has stopped fetching well before the changelog's end, so the broker is
cut while the read is under way, every time."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from group_helpers import Member, outputs, settled, topics_named, wait_for
from kafka_helpers import create_topic, free_port, keyed, produce_each, run
from outage_helpers import TcpProxy, tansu_behind_proxy

from runtime.kafka.changelog import KafkaChangelog
from runtime.kafka.outage import BrokerWatch, KafkaUnavailable
from runtime.kafka.system import KafkaProducer
from samza_dsl.testing.apache_kafka import ApacheKafkaCluster
from samza_dsl.testing.kafka_broker import TansuBroker

ENTRIES = 150_000  # some 18 of the reader's chunks: it stops after 9 until the reading side goes on
TIMEOUT = 3.0


def cut(broker: Any) -> None:
    """The broker gone at once, its connections cut (SIGKILL for Apache Kafka)."""
    if isinstance(broker, ApacheKafkaCluster):
        broker.kill(0)
    else:
        broker.stop()


async def fill_changelog(bootstrap: str, topic: str, partition: int, n: int,
                         create: bool = True) -> None:
    """``n`` entries of distinct keys in a partition of a compacted topic (made first unless
    ``create`` is False)."""
    if create:
        await create_topic(bootstrap, topic, 1, compacted=True)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=50,
                                max_batch_size=1024 * 1024)
    await producer.start()
    try:
        for i in range(n):
            await producer.send(topic, json.dumps(i).encode(), key=json.dumps(f"k{i}").encode(),
                                partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


def _changelog(bootstrap: str, topic: str, watch: BrokerWatch) -> KafkaChangelog:
    producer = KafkaProducer(bootstrap, {}, 0)
    producer.add_stream("__changelog__counts", topic, 1, None)
    # fetches of 64 KiB: tansu answers a Fetch with all it has, up to the limit asked
    settings = {"isolation_level": "read_committed", "max_partition_fetch_bytes": 65536,
                "fetch_max_bytes": 65536}
    return KafkaChangelog(bootstrap, settings, producer,
                          "__changelog__counts", topic, 0, ENTRIES, timeout=30.0, watch=watch)


def _read_through_a_cut(changelog: KafkaChangelog, broker: Any, seen: dict[str, Any]) -> None:
    """Reads the changelog; the broker is cut after the first chunk. ``seen``: how many
    entries were read, and when the cut came (raises what the read raised)."""
    for _offsets, chunk in changelog.read(0, ENTRIES):
        seen["entries"] += len(chunk)
        if "cut" not in seen:
            cut(broker)
            seen["cut"] = time.monotonic()
            time.sleep(0.5)  # the connections are gone before the reader fetches again


@pytest.mark.parametrize("where", ["worker thread", "job's loop"])
def test_a_broker_cut_during_a_changelog_read_is_the_watchs_one_error(
        own_broker: Any, where: str) -> None:
    """In a worker thread (a group member restores there) the job's watch judges; on the job's
    loop (a static container builds its tasks there, blocking the loop and its watch), the
    reader's own."""
    bootstrap = own_broker.bootstrap
    topic = f"cl-outage-{uuid.uuid4().hex[:8]}"
    run(fill_changelog(bootstrap, topic, 0, ENTRIES))

    seen: dict[str, Any] = {"entries": 0}

    async def scenario() -> BaseException | None:
        watch = BrokerWatch(bootstrap, TIMEOUT)
        watch.start()
        changelog = _changelog(bootstrap, topic, watch)
        try:
            if where == "worker thread":
                await asyncio.to_thread(_read_through_a_cut, changelog, own_broker, seen)
            else:
                _read_through_a_cut(changelog, own_broker, seen)
        except BaseException as exc:  # noqa: BLE001 - what the read raised is checked
            return exc
        finally:
            seen["ended"] = time.monotonic()
            await watch.stop()
        return None

    error = asyncio.run(scenario())
    assert 0 < seen["entries"] < ENTRIES, "the read ended before the broker was cut"
    cut_at, ended = seen["cut"], seen["ended"]
    assert isinstance(error, KafkaUnavailable), repr(error)
    text = str(error)
    assert f"Kafka at {bootstrap} has not answered for" in text, text
    assert "job.kafka.unavailable.timeout.ms=3000" in text, text
    assert "\n" not in text
    # once the brokers were away for the timeout, not the reader's own 30 s
    assert ended - cut_at < TIMEOUT + 10, ended - cut_at


RESTART_ENTRIES = 600_000  # past the checkpoint: the trim at the restart reads them for seconds
#: how soon after the brokers have been away for the timeout a job has stopped: its clients'
#: closes give up at once then (a static container's claim waited 15 s on the dead broker)
STOPPED_WITHIN = TIMEOUT + 6


def _one_line_soon(member: Member, bootstrap: str, cut_at: float) -> None:
    """The member ends, with the broker watch's one line and exit 2, soon after the timeout."""
    try:
        rc: int | None = member.proc.wait(TIMEOUT + 30)
    except subprocess.TimeoutExpired:
        rc = None
    took = time.monotonic() - cut_at
    if member.alive():
        member.kill()
    out = member.text()
    assert rc is not None, f"the member did not stop within {TIMEOUT + 30} s:\n{out}"
    assert "Traceback" not in out and "CancelledError" not in out, out
    assert "Unclosed" not in out, out
    errors = [line for line in out.splitlines() if line.startswith("samza-dsl run: error:")]
    assert len(errors) == 1, out
    assert f"Kafka at {bootstrap} has not answered for" in errors[0], out
    assert rc == 2, out
    assert took < STOPPED_WITHIN, f"stopped {took:.1f} s after the cut:\n{out}"


def test_a_broker_cut_during_a_restarts_changelog_trim_is_one_line(
        own_broker: Any, tmp_path: Path) -> None:
    """A member of an exactly-once job stopped, its store's changelog then holding entries
    past its checkpoint (written by a run that stopped before checkpointing); started again,
    it keeps its local copy and trims the changelog (appends the current value of each key
    written past the checkpoint), reading those entries. The broker is cut as soon as the
    first task's store is restored, while the second's trim reads: one error line, exit 2,
    a few seconds after the timeout."""
    bootstrap = own_broker.bootstrap
    tag = uuid.uuid4().hex[:8]
    run(create_topic(bootstrap, f"gevents-{tag}", 4))
    run(produce_each(bootstrap, f"gevents-{tag}",
                     keyed(((f"k{i % 8}", {"i": i}) for i in range(40)), 4)))
    config = ("-c", "job.processing.guarantee=exactly-once",
              "-c", f"job.kafka.unavailable.timeout.ms={int(TIMEOUT * 1000)}")
    first = Member(tmp_path / "host", bootstrap, tag, *config)
    try:
        wait_for("the member runs the tasks", lambda: settled([first], 4), 60, [first])
        wait_for("it counted every event", lambda: len(outputs(bootstrap, tag)) >= 40, 60,
                 [first])
        assert first.stop() == 0, first.text()[-3000:]
    finally:
        if first.alive():
            first.kill()
    (changelog,) = topics_named(bootstrap, tag, "changelog")
    run(fill_changelog(bootstrap, changelog, 1, RESTART_ENTRIES, create=False))
    again = Member(tmp_path / "host", bootstrap, tag, *config)
    try:
        wait_for("the first task's store is restored", lambda: "task Partition 0: store "
                 "'counts' restored" in again.text(), 60, [again])
        cut(own_broker)
        _one_line_soon(again, bootstrap, time.monotonic())
    finally:
        if again.alive():
            again.kill()
    out = again.text()
    assert "task Partition 1: store 'counts' restored" not in out, \
        f"the trim ended before the broker was cut:\n{out}"


def test_a_static_container_whose_broker_is_cut_mid_run_stops_soon(
        own_broker: Any, tmp_path: Path) -> None:
    """A static container (no group member) following its input, the broker cut under it:
    one line, exit 2, soon after the timeout, its claim on its id given up at once."""
    bootstrap = own_broker.bootstrap
    tag = uuid.uuid4().hex[:8]
    run(create_topic(bootstrap, f"gevents-{tag}", 4))
    run(produce_each(bootstrap, f"gevents-{tag}",
                     keyed(((f"k{i % 8}", {"i": i}) for i in range(40)), 4)))
    member = Member(tmp_path / "host", bootstrap, tag, "-c", "job.coordinator=static",
                    "-c", f"job.kafka.unavailable.timeout.ms={int(TIMEOUT * 1000)}")
    try:
        wait_for("it counted every event", lambda: len(outputs(bootstrap, tag)) >= 40, 60,
                 [member])
        cut(own_broker)
        _one_line_soon(member, bootstrap, time.monotonic())
    finally:
        if member.alive():
            member.kill()


@pytest.mark.parametrize("where", ["worker thread", "job's loop"])
def test_a_changelog_read_goes_on_when_the_broker_is_back_in_time(
        tmp_path: Path, where: str, caplog: pytest.LogCaptureFixture) -> None:
    """The broker away for less than the limit (tansu behind a proxy that cuts every
    connection, keeping its data): the read waits, then reads every entry once. The reader's
    own watch (on the job's loop) checks nothing of the job's when the broker is back, and
    does not say it did."""
    with tansu_behind_proxy(tmp_path / "tansu.log") as (bootstrap, proxy):
        topic = f"cl-back-{uuid.uuid4().hex[:8]}"
        run(fill_changelog(bootstrap, topic, 0, ENTRIES))

        def read(changelog: KafkaChangelog) -> list[int]:
            offsets: list[int] = []
            for chunk_offsets, _chunk in changelog.read(0, ENTRIES):
                offsets += chunk_offsets
                if len(offsets) == len(chunk_offsets):  # the first chunk
                    proxy.stop()
                    time.sleep(2.5)  # the watch probes every 0.5 s: it sees the broker away
                    proxy.start()
                else:  # the read lasts until the watch has seen the broker back
                    time.sleep(0.1)
            return offsets

        checks: list[float] = []

        async def check_data(down_for: float) -> None:  # the job's check of its topics
            checks.append(down_for)

        async def scenario() -> list[int]:
            watch = BrokerWatch(bootstrap, 30.0, interval=0.5)
            watch.on_back = check_data
            watch.start()
            try:
                changelog = _changelog(bootstrap, topic, watch)
                if where == "worker thread":
                    return await asyncio.to_thread(read, changelog)
                return read(changelog)
            finally:
                await watch.stop()

        caplog.set_level(logging.WARNING, "samza_dsl.kafka")
        assert asyncio.run(scenario()) == list(range(ENTRIES))
        said = [r.getMessage() for r in caplog.records if "answers again" in r.getMessage()]
        assert said, caplog.text
        # the job's watch, which checked the job's topics (its loop was free), or the reader's
        assert ("intact" in said[0]) == (where == "worker thread") == bool(checks), said


class _CutAtTransactionalId(TcpProxy):
    """Cuts every connection for good at the first request about a task's transactional id
    (FindCoordinator or InitProducerId): a member is then taking its tasks over, none of
    them running yet."""

    cut_at: float | None = None

    def _to_broker(self, data: bytes) -> bool:
        if data[4:6] in (b"\x00\x0a", b"\x00\x16") and b"-Partition " in data:
            self.cut_at = time.monotonic()
            self._stop.set()  # the proxy closes its listener and every connection
            return False
        return True


@pytest.mark.parametrize("coordinator", ["kafka", "static"])
def test_a_broker_cut_while_a_member_takes_its_tasks_over_is_the_watchs_one_line(
        tmp_path: Path, coordinator: str) -> None:
    """An exactly-once container, the broker cut as its tasks' producers first take their
    transactional ids, before their stores are read: a member of a consumer group as the
    group deals it its tasks (none running yet, the job's broker watch running), a static
    container as it starts (before the watch runs). Either waits for the brokers, then stops
    with the watch's one line soon after the timeout, and closes every producer it started
    (a static container stopped at once with the producer's own error, a member did at times;
    the producers still starting as the first failed were left open, and aiokafka said so)."""
    port, behind = free_port(), free_port()
    proxy = _CutAtTransactionalId(port, behind).start()
    broker = TansuBroker(tmp_path / "tansu.log", port=behind, advertised_port=port)
    broker.start()
    bootstrap = f"127.0.0.1:{port}"
    member = None
    try:
        tag = uuid.uuid4().hex[:8]
        run(create_topic(bootstrap, f"gevents-{tag}", 4))
        member = Member(tmp_path / "host", bootstrap, tag,
                        "-c", "job.processing.guarantee=exactly-once",
                        "-c", f"job.kafka.unavailable.timeout.ms={int(TIMEOUT * 1000)}",
                        "-c", f"job.coordinator={coordinator}")
        wait_for("the member takes its tasks over", lambda: proxy.cut_at is not None, 60,
                 [member])
        assert proxy.cut_at is not None
        _one_line_soon(member, bootstrap, proxy.cut_at)
    finally:
        if member is not None and member.alive():
            member.kill()
        broker.stop()
        proxy.stop()
