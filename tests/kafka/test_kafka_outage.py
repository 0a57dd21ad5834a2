"""A Kafka job whose broker goes away (docs/operations.md, "Kafka outages"), against real tansu
brokers of the tests' own, the job in a process of its own: it retries for
job.kafka.unavailable.timeout.ms with a warning every few seconds and then fails with one error,
idle or busy, in a few lines; a broker back in time goes on with exact counts; a broker back
without the job's topics or records is an error, never a reprocessing; and two processes of one
job container conflict."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from kafka_apps import regroup_app
from kafka_helpers import consume_all, create_topic, produce_each, run
from outage_helpers import JobProcess, tansu_behind_proxy, wait_until

from runtime import LocalRunner
from runtime.kafka.admin import describe_topics
from samza_dsl.errors import SamzaError
from samza_dsl.testing.kafka_broker import TansuBroker

TIMEOUT_MS = 3000
MAX_LINES = 50  # what a failed job may print, aiokafka's lines included
ME = "outage-test"  # the client id of the test's own clients



def _events(start: int, n: int) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(i % 4, str(i).encode(), json.dumps({"i": i}).encode())
            for i in range(start, start + n)]


def _seen(bootstrap: str, tag: str) -> list[int]:
    """The ``i`` of every record in the job's output topic (reading a missing topic would have
    tansu create it)."""
    if run(describe_topics(bootstrap, [f"out-{tag}"]))[f"out-{tag}"] is None:
        return []
    records = run(consume_all(bootstrap, f"out-{tag}", 3))
    return sorted(json.loads(v)[1] for recs in records.values() for _, _, v in recs)


def _input(bootstrap: str, n: int) -> str:
    tag = uuid.uuid4().hex[:8]
    run(create_topic(bootstrap, f"events-{tag}", 4))
    run(produce_each(bootstrap, f"events-{tag}", _events(0, n)))
    return tag


def _processed(job: JobProcess, bootstrap: str, tag: str, n: int) -> None:
    try:
        wait_until(f"the job wrote {n} records", lambda: len(_seen(bootstrap, tag)) >= n)
        time.sleep(0.5)  # and committed (task.commit.ms=100)
    except BaseException:
        job.kill()
        raise


def _one_clear_error(job: JobProcess, rc: int) -> str:
    out = job.output()
    lines = out.splitlines()
    assert rc == 2, out
    assert len(lines) < MAX_LINES, f"{len(lines)} lines:\n{out}"
    assert "Traceback" not in out and "CancelledError" not in out, out
    errors = [line for line in lines if line.startswith("samza-dsl run: error:")]
    assert len(errors) == 1, out
    return errors[0]


def _fails_within_the_timeout(job: JobProcess, broker: TansuBroker) -> None:
    bootstrap = broker.bootstrap
    broker.stop()
    started = time.monotonic()
    rc = job.wait(TIMEOUT_MS / 1000 + 30)
    took = time.monotonic() - started
    error = _one_clear_error(job, rc)
    assert TIMEOUT_MS / 1000 <= took < TIMEOUT_MS / 1000 + 10, took
    assert f"Kafka at {bootstrap} has not answered for" in error, error
    assert "job.kafka.unavailable.timeout.ms=3000" in error, error
    before = job.output().split("samza-dsl run: error")[0]
    assert f"Kafka at {bootstrap} does not answer" in before  # the warning


def test_an_idle_following_job_fails_once_the_broker_is_gone_for_the_timeout(
        broker: TansuBroker, tmp_path: Path) -> None:
    tag = _input(broker.bootstrap, 20)
    job = JobProcess(broker.bootstrap, tag, tmp_path / "job",
                     f"job.kafka.unavailable.timeout.ms={TIMEOUT_MS}")
    _processed(job, broker.bootstrap, tag, 20)
    _fails_within_the_timeout(job, broker)


def test_a_busy_job_fails_once_the_broker_is_gone_for_the_timeout(
        broker: TansuBroker, tmp_path: Path) -> None:
    tag = _input(broker.bootstrap, 20)
    job = JobProcess(broker.bootstrap, tag, tmp_path / "job",
                     f"job.kafka.unavailable.timeout.ms={TIMEOUT_MS}")
    _processed(job, broker.bootstrap, tag, 20)
    stop = threading.Event()
    sent = [0]

    async def keep_producing() -> None:  # until the broker is gone
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5,
                                    request_timeout_ms=2000)
        await producer.start()
        try:
            i = 20
            while not stop.is_set():
                await producer.send(f"events-{tag}", json.dumps({"i": i}).encode(),
                                    key=str(i).encode(), partition=i % 4)
                i += 1
                sent[0] = i
                if i % 50 == 0:
                    await asyncio.sleep(0.01)
        except Exception:  # noqa: S110 - the broker went away
            pass
        finally:
            task = asyncio.ensure_future(producer.stop())
            await asyncio.wait({task}, timeout=1)

    thread = threading.Thread(target=lambda: asyncio.run(keep_producing()), daemon=True)
    thread.start()
    try:
        wait_until("the job is busy", lambda: sent[0] > 2000 and len(_seen(broker.bootstrap, tag))
                   > 500)
    except BaseException:
        job.kill()
        raise
    finally:
        stop.set()
    _fails_within_the_timeout(job, broker)
    thread.join(10)


def test_a_broker_back_within_the_timeout_with_its_data_lets_the_job_go_on(
        tmp_path: Path) -> None:
    with tansu_behind_proxy(tmp_path / "tansu.log") as (bootstrap, proxy):
        tag = _input(bootstrap, 30)
        job = JobProcess(bootstrap, tag, tmp_path / "job", "job.kafka.unavailable.timeout.ms=20000")
        _processed(job, bootstrap, tag, 30)
        proxy.stop()  # the broker is away, with its data
        time.sleep(3)
        proxy.start()
        run(produce_each(bootstrap, f"events-{tag}", _events(30, 30)))
        try:
            wait_until("the job wrote the new records", lambda: len(_seen(bootstrap, tag)) >= 60)
        except BaseException:
            job.kill()
            raise
        time.sleep(0.5)
        rc = job.stop()
        out = job.output()
        assert rc == 0, out
        assert _seen(bootstrap, tag) == list(range(60)), out  # each once
        assert f"Kafka at {bootstrap} does not answer" in out
        assert f"Kafka at {bootstrap} answers again after" in out
        assert "Traceback" not in out and len(out.splitlines()) < MAX_LINES, out


def test_a_broker_back_without_the_jobs_topics_is_an_error_not_a_reprocessing(
        broker: TansuBroker, tmp_path: Path) -> None:
    tag = _input(broker.bootstrap, 20)
    job = JobProcess(broker.bootstrap, tag, tmp_path / "job",
                     "job.kafka.unavailable.timeout.ms=20000")
    _processed(job, broker.bootstrap, tag, 20)
    broker.stop()
    time.sleep(1)
    broker.start()  # on the same port, empty
    run(_create_if_missing(broker.bootstrap, f"events-{tag}", 4))  # its input written again
    run(produce_each(broker.bootstrap, f"events-{tag}", _events(0, 8)))
    rc = job.wait(30)
    error = _one_clear_error(job, rc)
    assert "lost" in error and f"__samza_checkpoint_regroup-{tag}-1" in error, error
    assert _seen(broker.bootstrap, tag) == []  # nothing was processed again


@pytest.mark.parametrize("away", [1.5, 0.0])  # noticed by the job's probe, or by aiokafka
def test_a_broker_back_with_fewer_records_than_the_checkpoints_is_an_error(
        tmp_path: Path, away: float) -> None:
    with tansu_behind_proxy(tmp_path / "tansu.log") as (bootstrap, proxy):
        tag = _input(bootstrap, 40)
        job = JobProcess(bootstrap, tag, tmp_path / "job", "job.kafka.unavailable.timeout.ms=20000")
        _processed(job, bootstrap, tag, 40)
        proxy.stop()  # the job is cut off while its input loses its records
        time.sleep(away)  # the job asks every second
        proxy.start(only=ME)
        run(_recreate(bootstrap, f"events-{tag}", 4))
        proxy.stop()
        proxy.start()
        rc = job.wait(30)
        error = _one_clear_error(job, rc)
        assert f"Kafka at {bootstrap}, " in error, error
        assert f"lost records the job has checkpointed: topic 'events-{tag}' partition 0" in error
        assert "ends at offset 0, below the job's checkpoint, which has read it to offset 10" \
            in error, error
        assert _seen(bootstrap, tag) == list(range(40))  # nothing was processed again


async def _create_if_missing(bootstrap: str, topic: str, partitions: int) -> None:
    """(The job's client may have had the broker create it meanwhile.)"""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def _recreate(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000,
                                client_id=ME)
    await admin.start()
    try:
        await admin.delete_topics([topic])
        for _ in range(100):
            if topic not in await admin.list_topics():
                break
            await asyncio.sleep(0.05)
    finally:
        await admin.close()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000,
                                client_id=ME)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


def test_a_checkpoint_past_the_end_of_its_input_is_an_error_at_the_start(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = _input(kafka_bootstrap, 40)
    app = regroup_app(kafka_bootstrap, tag)
    config = {"job.dir": str(tmp_path / "job")}
    LocalRunner(app, config).run()
    assert len(_seen(kafka_bootstrap, tag)) == 40
    run(_recreate(kafka_bootstrap, f"events-{tag}", 4))  # the input lost its records
    run(produce_each(kafka_bootstrap, f"events-{tag}", _events(100, 8)))
    with pytest.raises(SamzaError) as err:
        LocalRunner(app, config).run()
    text = str(err.value)
    assert f"topic 'events-{tag}' partition" in text and "ends at offset 2" in text, text
    assert "has read it to offset 10" in text, text
    assert len(_seen(kafka_bootstrap, tag)) == 40  # nothing more


def test_a_second_process_of_a_kafka_job_container_is_refused(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = _input(kafka_bootstrap, 5)
    # static: the container starts at once (a member of a consumer group waits for its tasks)
    first = JobProcess(kafka_bootstrap, tag, tmp_path / "job", "job.coordinator=static")
    try:
        lock = tmp_path / "job" / "locks" / "job.lock"
        wait_until("the job took its lock",
                   lambda: lock.exists() and lock.read_text().startswith(f"{first.proc.pid} "))
        second = JobProcess(kafka_bootstrap, tag, tmp_path / "job", "job.coordinator=static")
        rc = second.wait(60)
        out = second.output()
        assert rc == 2, out
        assert f"in use by process {first.proc.pid}" in out, out
        assert first.proc.poll() is None
    finally:
        rc = first.stop()
    assert rc == 0, first.output()
    assert len(_seen(kafka_bootstrap, tag)) == 5
