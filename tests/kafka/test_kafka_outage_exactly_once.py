"""A broker that goes away under a job (tansu of the test's own, the job in a process of its
own), at least once and exactly once: the job says that Kafka does not answer and then, in one
error line, that it has not answered for job.kafka.unavailable.timeout.ms; never a traceback,
never "fenced", and none of aiokafka's own log lines unless asked for
(``SAMZA_DSL_AIOKAFKA_LOG``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka_helpers import free_port
from outage_helpers import JobProcess
from test_kafka_outage import TIMEOUT_MS, _input, _one_clear_error, _processed

from samza_dsl.testing.kafka_broker import TansuBroker

#: what aiokafka logs as its broker goes away: none of it is the job's to say
AIOKAFKA_LINES = ("NodeNotReadyError", "HeartbeatRequest", "Heartbeat send request failed",
                  "Unable connect to node", "Failed fetch messages", "UnknownError",
                  "marking coordinator dead")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[TansuBroker]:
    b = TansuBroker(tmp_path / "tansu.log", port=free_port())
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.mark.parametrize("guarantee,asked", [("at-least-once", ""), ("exactly-once", ""),
                                             ("exactly-once", "warning")])
def test_a_broker_gone_is_named_unreachable_whatever_the_guarantee(
        broker: TansuBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guarantee: str,
        asked: str) -> None:
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
    assert TIMEOUT_MS / 1000 <= took < TIMEOUT_MS / 1000 + 20, (took, out)
    assert f"Kafka at {bootstrap} has not answered for" in error, out
    assert "job.kafka.unavailable.timeout.ms=3000" in error, out
    assert f"Kafka at {bootstrap} does not answer" in out.split("samza-dsl run: error")[0], out
    assert "fenced" not in out and "newer producer" not in out, out
    shown = [line for line in out.splitlines() if any(n in line for n in AIOKAFKA_LINES)]
    if asked:  # asked for: each of aiokafka's lines once
        assert shown and len(shown) == len(set(shown)), out
    else:
        assert not shown, out
