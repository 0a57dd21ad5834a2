"""Issue 62's newcomer's case (``tests/rides.py``) on Kafka: requests joined with acceptances
within 60 s of event time, over input 4 s out of order, give every pair at most 60 s apart and
only those, each once, under both guarantees: in a static container (a bounded run), and in a
consumer group of two ``samza-dsl run --follow`` members that read the input as it is written
(their committed outputs, as a read_committed reader reads them)."""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from group_helpers import Member, kill_left, stop_all, wait_for
from kafka_helpers import create_topic, produce_batched, produce_each, run
from test_kafka_exactly_once import committed_records

from runtime import LocalRunner
from samza_dsl.systems import KafkaSystem
from tests import rides

GUARANTEES = ["at-least-once", "exactly-once"]
GIVEN = rides.inputs()
EXPECTED = rides.expected(GIVEN)


def load(bootstrap: str, kind: str, tag: str, topics: tuple[str, ...] = ("requests",
                                                                         "acceptances"),
         create: bool = True) -> None:
    """The inputs into ``<id>-<tag>``, each message in the partition ``rides.placed`` chose.
    (tansu's end offset is a true end only after records sent one at a time.)"""
    produce = produce_batched if kind == "apache-kafka" else produce_each
    for sid in topics:
        topic = f"{sid}-{tag}"
        if create:
            run(create_topic(bootstrap, topic, rides.PARTITIONS))
        run(produce(bootstrap, topic, [(p, kv.key.encode(), json.dumps(kv.value).encode())
                                       for p, msgs in GIVEN[sid].items() for kv in msgs]))


def committed(bootstrap: str, tag: str) -> list[Any]:
    return [json.loads(v) for _, v in committed_records(bootstrap, f"accepted-{tag}", 1)
            if v is not None]


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_static_container_gives_every_pair_within_60_s(kafka_bootstrap: str,
                                                         kafka_broker_kind: str,
                                                         guarantee: str) -> None:
    tag = uuid.uuid4().hex[:8]
    load(kafka_bootstrap, kafka_broker_kind, tag)
    app = rides.build(KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap), f"rides{tag}",
                      tag)
    with tempfile.TemporaryDirectory() as tmp:
        result = LocalRunner(app, {"job.dir": tmp, "job.processing.guarantee": guarantee,
                                   "task.commit.ms": 200}).run()
        try:
            assert not any(n for by in result.late_counts.values() for n in by.values())
        finally:
            result.close()
    assert rides.outputs(committed(kafka_bootstrap, tag)) == EXPECTED


def settled(ms: list[Member]) -> bool:
    """Every member runs tasks, all of one generation."""
    seen = [m.assignment() for m in ms]
    return all(s is not None and s[1] for s in seen) and len({s[0] for s in seen if s}) == 1


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_group_of_two_gives_every_pair_within_60_s(kafka_bootstrap: str,
                                                     kafka_broker_kind: str, tmp_path: Path,
                                                     guarantee: str) -> None:
    tag = uuid.uuid4().hex[:8]
    for sid in ("requests", "acceptances"):
        run(create_topic(kafka_bootstrap, f"{sid}-{tag}", rides.PARTITIONS))
    ms = [Member(tmp_path / f"m{i}", kafka_bootstrap, tag, "-c",
                 f"job.processing.guarantee={guarantee}", "-c", "task.commit.ms=200",
                 app="rides") for i in range(2)]
    try:
        wait_for("two members each given tasks, of one generation", lambda: settled(ms), 90, ms)
        load(kafka_bootstrap, kafka_broker_kind, tag, create=False)  # while they run
        wait_for("every pair committed",
                 lambda: rides.outputs(committed(kafka_bootstrap, tag)) == EXPECTED, 90, ms)
        time.sleep(1.0)  # a duplicate would come with a later commit
        assert rides.outputs(committed(kafka_bootstrap, tag)) == EXPECTED
        stop_all(ms)
    finally:
        kill_left(ms)
