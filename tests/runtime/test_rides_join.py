"""Issue 62's newcomer's case (``tests/rides.py``): requests joined with acceptances within 60 s
of event time over disordered input give every pair at most 60 s apart, and only those, on
TestRunner and on the embedded local system (one container and two). Spark runs it in
``tests/spark/test_spark_joins.py``, Kafka in ``tests/kafka/test_kafka_rides.py``. The same
newcomer's sessions of drivers give the plain-Python answer on TestRunner (Kafka under a takeover:
``tests/kafka/test_kafka_rides_takeover.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import LocalRunner
from samza_dsl.systems import LocalSystem, MemorySystem
from samza_dsl.testing import TestRunner
from tests import rides

GIVEN = rides.inputs()
EXPECTED = rides.expected(GIVEN)


def late_of(counts: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {op: {s: n for s, n in by.items() if n} for op, by in counts.items() if any(by.values())}


def test_test_runner_gives_every_pair_within_60_s() -> None:
    tested = TestRunner(rides.build(MemorySystem()))
    for sid, parts in GIVEN.items():
        tested.add_input(sid, parts)
    result = tested.run(timeout=60)
    assert rides.outputs(result.messages("accepted")) == EXPECTED
    assert late_of(result.late_counts) == {}
    # pairs more than 60 s apart are not joined, though both messages stay within the input's
    # bound and the same rider has them
    assert all(abs(v) <= 60_000 for v in (m["dt_ms"] for m in result.messages("accepted")))


@pytest.mark.parametrize("containers", [1, 2])
def test_the_local_system_gives_every_pair_within_60_s(tmp_path: Path, containers: int) -> None:
    local = LocalRunner(rides.build(LocalSystem("local")),
                        {"job.dir": str(tmp_path), "job.container.count": containers},
                        inputs=GIVEN).run()
    try:
        assert rides.outputs(local.messages("accepted")) == EXPECTED
        assert late_of(local.late_counts) == {}
    finally:
        local.close()


def test_test_runner_gives_every_drivers_session() -> None:
    given = rides.trip_inputs(6_000)
    tested = TestRunner(rides.build_sessions(MemorySystem()))
    for sid, parts in given.items():
        tested.add_input(sid, parts)
    result = tested.run(timeout=60)
    got = [((kv.key, kv.value["start"]), {k: kv.value[k] for k in ("trips", "fares", "cut")})
           for kv in result.messages("sessions")]
    assert dict(got) == rides.expected_sessions(given)
    assert len(got) == len(dict(got))  # each session once
    assert late_of(result.late_counts) == {}
