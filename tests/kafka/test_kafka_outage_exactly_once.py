"""A broker that goes away under a job (a broker of the test's own, Apache Kafka and tansu,
the job in a process of its own), at least once and exactly once: the job says that Kafka does not answer and then, in one
error line, that it has not answered for job.kafka.unavailable.timeout.ms; never a traceback,
never "fenced", and none of aiokafka's own log lines unless asked for
(``SAMZA_DSL_AIOKAFKA_LOG``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import UnknownError
from kafka_helpers import create_topic
from outage_helpers import JobProcess
from test_kafka_outage import TIMEOUT_MS, _input, _one_clear_error, _processed

from runtime.kafka.exactly_once import TaskProducer
from runtime.kafka.outage import BrokerWatch, KafkaUnavailable
from runtime.kafka.system import KafkaProducer
from runtime.kafka.txn_producer import TransactionalProducer
from samza_dsl.errors import ProducerFenced
from samza_dsl.testing.kafka_broker import TansuBroker

#: what aiokafka logs as its broker goes away: none of it is the job's to say
AIOKAFKA_LINES = ("NodeNotReadyError", "HeartbeatRequest", "Heartbeat send request failed",
                  "Failed fetch offsets", "Unable to update metadata",
                  "Unable connect to node", "Failed fetch messages", "UnknownError",
                  "marking coordinator dead")



@pytest.mark.parametrize("guarantee,asked", [("at-least-once", ""), ("exactly-once", ""),
                                             ("exactly-once", "warning")])
def test_a_broker_gone_is_named_unreachable_whatever_the_guarantee(
        own_broker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guarantee: str,
        asked: str) -> None:
    broker = own_broker  # Apache Kafka answers a gone broker's clients as tansu does not
    if asked:
        monkeypatch.setenv("SAMZA_DSL_AIOKAFKA_LOG", asked)
    tag = _input(broker.bootstrap, 20)
    job = JobProcess(broker.bootstrap, tag, tmp_path / "job",
                     f"job.kafka.unavailable.timeout.ms={TIMEOUT_MS}",
                     f"job.processing.guarantee={guarantee}")
    _processed(job, broker.bootstrap, tag, 20)
    bootstrap = broker.bootstrap
    broker.stop()
    started = time.monotonic()
    rc = job.wait(TIMEOUT_MS / 1000 + 30)
    took = time.monotonic() - started
    error = _one_clear_error(job, rc)
    out = job.output()
    # it stops soon after the timeout under every guarantee: under exactly-once the tasks'
    # producers neither abort nor wait for their queued batches once the brokers are lost
    assert TIMEOUT_MS / 1000 <= took < TIMEOUT_MS / 1000 + 9, (took, out)
    assert f"Kafka at {bootstrap} has not answered for" in error, out
    assert "job.kafka.unavailable.timeout.ms=3000" in error, out
    assert f"Kafka at {bootstrap} does not answer" in out.split("samza-dsl run: error")[0], out
    assert "fenced" not in out and "newer producer" not in out, out
    shown = [line for line in out.splitlines() if any(n in line for n in AIOKAFKA_LINES)]
    if asked:  # asked for: each of aiokafka's lines once
        assert shown and len(shown) == len(set(shown)), out
    else:
        assert not shown, out


async def _task_producer(bootstrap: str, topic: str, watch: BrokerWatch) -> TaskProducer:
    """A task's transactional producer, its transaction open with one record acknowledged."""
    shared = KafkaProducer(bootstrap, {}, 0, timeout=10.0, watch=watch)
    shared.add_stream("out", topic, 1, None)
    task = TaskProducer(shared, f"{topic}-Partition 0", "Partition 0")
    await task.start()
    task.buffer("out", 0).append((b"k", b"first", None))
    await task.flush()
    return task


def test_unknown_server_error_is_fencing_only_while_the_broker_answers(
        broker: TansuBroker) -> None:
    """tansu answers a fenced producer's Produce with UNKNOWN_SERVER_ERROR, and (the previous
    engineer's reading of a traceback seen once, not reproduced here in many kills) also a
    Produce while it shuts down. ``TaskProducer.diagnosed`` decides: with the broker up, a real
    fenced Produce is ``ProducerFenced``; with the broker stopped, the same error is the watch's
    unreachable-broker error, the line at least once gives, never "fenced"."""
    async def scenario() -> None:
        topic = f"eos-diag-{uuid.uuid4().hex[:8]}"
        await create_topic(broker.bootstrap, topic, 1)
        watch = BrokerWatch(broker.bootstrap, 2.0)
        watch.start()
        try:
            # up: a newer producer takes the id; the next Produce is answered
            # UNKNOWN_SERVER_ERROR by tansu (PRODUCER_FENCED by Apache Kafka)
            fenced = await _task_producer(broker.bootstrap, topic, watch)
            newer = TransactionalProducer(broker.bootstrap, fenced.txn.transactional_id,
                                          timeout=10.0)
            await newer.start()
            fenced.buffer("out", 0).append((b"k", b"second", None))
            with pytest.raises(ProducerFenced):
                await fenced.flush()
            await newer.stop()
            await fenced.close()

            # down: the same error once the broker is gone (SIGINT) is the broker unreachable
            task = await _task_producer(broker.bootstrap, topic, watch)
            bootstrap = broker.bootstrap
            broker.stop()
            began = time.monotonic()
            error = await task.diagnosed(UnknownError("UNKNOWN_SERVER_ERROR"))
            took = time.monotonic() - began
            assert isinstance(error, KafkaUnavailable), repr(error)
            assert f"Kafka at {bootstrap} has not answered for" in str(error), error
            assert "job.kafka.unavailable.timeout.ms=2000" in str(error), error
            assert "fenced" not in str(error) and "newer producer" not in str(error), error
            assert took < 10, took
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await task.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await task._shared.close()
        finally:
            await watch.stop()
    asyncio.run(scenario())
