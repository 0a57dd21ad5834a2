"""runtime.kafka.admin against the tansu test broker: creating planned topics, refusing
partition-count mismatches, and bounded, explained failures for bad or dead brokers."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from kafka_helpers import create_topic, free_port, run

from runtime.kafka.admin import TopicSpec, check_bootstrap, describe_topics, ensure_topics
from samza_dsl.errors import SamzaError


async def topic_configs(bootstrap: str, name: str) -> dict[str, str]:
    """The explicitly set configs of a topic (all tansu's DescribeConfigs returns)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name)]
        )
    finally:
        await admin.close()
    [resource] = response.to_object()["resources"]
    assert resource["error_code"] == 0, resource
    return {e["config_names"]: e["config_value"] for e in resource["config_entries"]}


def test_missing_topics_are_created_with_the_planned_counts(kafka_bootstrap: str) -> None:
    specs = [TopicSpec("admin-create-in", 3), TopicSpec("admin-create-changelog", 2, True),
             TopicSpec("admin-create-one", 1)]
    names = [s.name for s in specs]
    assert run(describe_topics(kafka_bootstrap, names)) == dict.fromkeys(names)

    got = run(ensure_topics(kafka_bootstrap, specs))

    expected = {"admin-create-in": 3, "admin-create-changelog": 2, "admin-create-one": 1}
    assert got == expected
    assert run(describe_topics(kafka_bootstrap, names)) == expected


def test_ensure_topics_is_idempotent(kafka_bootstrap: str) -> None:
    specs = [TopicSpec("admin-again-a", 4), TopicSpec("admin-again-b", 2, compacted=True)]
    first = run(ensure_topics(kafka_bootstrap, specs))
    second = run(ensure_topics(kafka_bootstrap, specs + specs))  # repeats are one topic
    assert first == second == {"admin-again-a": 4, "admin-again-b": 2}
    assert run(ensure_topics(kafka_bootstrap, specs, create_missing=False)) == first


def test_compacted_topics_get_cleanup_policy_compact(kafka_bootstrap: str) -> None:
    run(ensure_topics(kafka_bootstrap, [TopicSpec("admin-policy-changelog", 2, compacted=True),
                                        TopicSpec("admin-policy-plain", 2)]))
    assert run(topic_configs(kafka_bootstrap, "admin-policy-changelog")) \
        .get("cleanup.policy") == "compact"
    # Apache Kafka describes every config, its defaults included; tansu only those set
    assert run(topic_configs(kafka_bootstrap, "admin-policy-plain")).get(
        "cleanup.policy", "delete") == "delete"


def test_a_partition_count_mismatch_names_the_topic_and_both_counts(
        kafka_bootstrap: str) -> None:
    run(create_topic(kafka_bootstrap, "admin-mismatch", 3))
    specs = [TopicSpec("admin-mismatch-other", 2), TopicSpec("admin-mismatch", 4)]

    with pytest.raises(SamzaError) as info:
        run(ensure_topics(kafka_bootstrap, specs))

    message = str(info.value)
    assert "'admin-mismatch' has 3 partitions but the plan needs 4" in message
    assert "recreate" in message
    # the check comes before any creation: the other planned topic was not created
    assert run(describe_topics(kafka_bootstrap, ["admin-mismatch-other", "admin-mismatch"])) \
        == {"admin-mismatch-other": None, "admin-mismatch": 3}


def test_create_missing_false_names_the_missing_topics(kafka_bootstrap: str) -> None:
    run(create_topic(kafka_bootstrap, "admin-nocreate-present", 2))
    specs = [TopicSpec("admin-nocreate-present", 2), TopicSpec("admin-nocreate-absent", 5)]

    with pytest.raises(SamzaError, match=r"'admin-nocreate-absent' does not exist.*"
                                         r"admin-nocreate-absent: 5"):
        run(ensure_topics(kafka_bootstrap, specs, create_missing=False))

    assert run(describe_topics(kafka_bootstrap, ["admin-nocreate-absent"])) \
        == {"admin-nocreate-absent": None}


def test_describe_topics_never_creates_a_topic(kafka_bootstrap: str) -> None:
    """A metadata request naming a topic makes tansu (and Kafka with auto-create) create it."""
    for _ in range(2):
        assert run(describe_topics(kafka_bootstrap, ["admin-ghost"])) == {"admin-ghost": None}


def test_concurrent_creators_agree_or_report_the_mismatch(kafka_bootstrap: str) -> None:
    async def same() -> list[dict[str, int]]:
        spec = [TopicSpec("admin-race-same", 3)]
        return list(await asyncio.gather(*(ensure_topics(kafka_bootstrap, spec)
                                            for _ in range(4))))

    assert run(same()) == [{"admin-race-same": 3}] * 4

    async def different() -> list[object]:
        return list(await asyncio.gather(
            ensure_topics(kafka_bootstrap, [TopicSpec("admin-race-diff", 2)]),
            ensure_topics(kafka_bootstrap, [TopicSpec("admin-race-diff", 5)]),
            return_exceptions=True))

    results = run(different())
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], SamzaError), results
    [won] = [r for r in results if not isinstance(r, BaseException)]
    assert isinstance(won, dict)
    count = won["admin-race-diff"]
    assert f"'admin-race-diff' has {count} partitions but the plan needs {7 - count}" \
        in str(errors[0])


@pytest.mark.parametrize("call", ["ensure", "describe"])
def test_an_unreachable_broker_fails_within_the_timeout(call: str) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    with pytest.raises(SamzaError) as info:
        if call == "ensure":
            run(ensure_topics(bootstrap, [TopicSpec("t", 1)], timeout=2.0))
        else:
            run(describe_topics(bootstrap, ["t"], timeout=2.0))
    assert time.monotonic() - started < 2.0 + 5
    message = str(info.value)
    assert bootstrap in message and "bootstrap_servers" in message and "running" in message


def test_a_broker_that_never_answers_fails_within_the_timeout() -> None:
    """The kernel completes the TCP handshake with a listening socket nobody accepts from: the
    client connects and then waits for an answer that never comes."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        bootstrap = f"127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(SamzaError) as info:
            run(ensure_topics(bootstrap, [TopicSpec("t", 1)], timeout=1.5))
        assert time.monotonic() - started < 1.5 + 5
    assert bootstrap in str(info.value) and "bootstrap_servers" in str(info.value)


@pytest.mark.parametrize("bad", ["", " ", "localhost", "127.0.0.1:", ":9092", "host:port",
                                 "host:0", "host:70000", "a:1,,b:2", "PLAINTEXT://h:9092",
                                 "::1:9092", "bad host:9092"])
def test_a_malformed_bootstrap_is_named(bad: str) -> None:
    with pytest.raises(SamzaError, match="malformed bootstrap_servers") as info:
        check_bootstrap(bad)
    assert repr(bad) in str(info.value)
    with pytest.raises(SamzaError, match="malformed bootstrap_servers"):
        run(ensure_topics(bad, [TopicSpec("t", 1)], timeout=1.0))
    with pytest.raises(SamzaError, match="malformed bootstrap_servers"):
        run(describe_topics(bad, ["t"], timeout=1.0))


def test_check_bootstrap_accepts_host_port_lists() -> None:
    assert check_bootstrap(" 127.0.0.1:9092 ,kafka-1.example:19092,[::1]:9093") == [
        "127.0.0.1:9092", "kafka-1.example:19092", "[::1]:9093"]
    with pytest.raises(SamzaError, match="must be a string"):
        check_bootstrap(["127.0.0.1:9092"])  # type: ignore[arg-type]


@pytest.mark.parametrize(("args", "match"), [
    (("t", 0), "at least 1"), (("t", True), "at least 1"), (("", 1), "invalid Kafka topic"),
    (("a b", 1), "invalid Kafka topic"), (("..", 1), "invalid Kafka topic"),
])
def test_topic_specs_are_checked(args: tuple[str, int], match: str) -> None:
    with pytest.raises(SamzaError, match=match):
        TopicSpec(*args)


def test_conflicting_specs_and_settings_are_refused_before_connecting() -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    with pytest.raises(SamzaError, match="planned twice"):
        run(ensure_topics(nowhere, [TopicSpec("t", 1), TopicSpec("t", 2)]))
    with pytest.raises(SamzaError, match="replication_factor"):
        run(ensure_topics(nowhere, [TopicSpec("t", 1)], replication_factor=0))
    with pytest.raises(SamzaError, match="timeout"):
        run(describe_topics(nowhere, ["t"], timeout=0))
    with pytest.raises(SamzaError, match="client settings"):
        run(describe_topics(nowhere, ["t"], no_such_setting=1))
