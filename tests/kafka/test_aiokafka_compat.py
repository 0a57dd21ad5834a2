"""Each aiokafka internal the job's Kafka layer uses (``runtime/kafka/aiokafka_compat.py``) is
still there, in the shape used, in the installed aiokafka: one test per internal, on real
aiokafka objects (a broker where the object exists only once a client started). An aiokafka
outside the supported range is refused in one line."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from typing import Any

import aiokafka
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.consumer import fetcher
from aiokafka.record.memory_records import MemoryRecords

from runtime.kafka import aiokafka_compat as compat
from runtime.kafka import resolved, txn_producer
from runtime.kafka.admin import any_broker
from runtime.kafka.system import stop_client
from samza_dsl.errors import SamzaError


def test_the_installed_aiokafka_is_in_the_supported_range_and_others_are_refused() -> None:
    compat.check_version(aiokafka.__version__)
    low, high = compat.SUPPORTED
    for version in (f"{low[0]}.{low[1]}.0", f"{low[0]}.{low[1]}.9"):
        compat.check_version(version)
    for version in ("0.10.0", f"{high[0]}.{high[1]}.0", "1.0.0", "nonsense"):
        with pytest.raises(SamzaError) as e:
            compat.check_version(version)
        assert str(e.value).count("\n") == 0 and f"aiokafka {version} is installed" in str(e.value)
        assert f">={low[0]}.{low[1]},<{high[0]}.{high[1]}" in str(e.value)


def test_the_pin_in_pyproject_is_the_supported_range() -> None:
    from pathlib import Path
    low, high = compat.SUPPORTED
    text = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert f'"aiokafka>={low[0]}.{low[1]},<{high[0]}.{high[1]}"' in text


def sealed_batch(records: list[tuple[bytes, bytes]]) -> bytes:
    """Raw records through a batch's record builder, sealed, as the bytes a broker stores."""
    async def build() -> bytes:
        producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1")  # never started
        batch = producer.create_batch()
        append = compat.builder_append(batch)
        for i, (k, v) in enumerate(records):
            assert append(i, None, key=k, value=v, headers=[]) is not None
        compat.seal(batch, len(records))
        assert batch.record_count() == len(records)
        return bytes(batch._build())  # what send_batch sends (a test's look inside)
    return asyncio.run(build())


def test_a_batch_filled_through_its_record_builder_and_sealed_holds_the_records() -> None:
    data = sealed_batch([(b"k0", b"v0"), (b"k1", b"v1"), (b"k2", b"v2")])
    batch = MemoryRecords(data).next_batch()
    assert [(r.offset, r.key, r.value) for r in batch] == [
        (0, b"k0", b"v0"), (1, b"k1", b"v1"), (2, b"k2", b"v2")]
    assert batch.next_offset == 3


def test_the_fetcher_builds_partition_records_with_the_installed_factory() -> None:
    assert fetcher.PartitionRecords is resolved._partition_records
    plain_class: Any = compat.plain_partition_records()
    assert list(inspect.signature(plain_class.__init__).parameters) == [
        "self", "tp", "records", "aborted_transactions", "fetch_offset", "key_deserializer",
        "value_deserializer", "check_crcs", "isolation_level"]
    assert "_isolation_level" in inspect.getsource(fetcher.Fetcher.__init__)
    tp = TopicPartition("t", 0)
    data = sealed_batch([(b"a", b"1"), (b"b", b"2")])
    plain = resolved._partition_records(tp, MemoryRecords(data), None, 0, None, None, True, 0)
    assert [(r.offset, r.key, r.value) for r in plain] == [(0, b"a", b"1"), (1, b"b", b"2")]
    assert plain.next_fetch_offset == 2
    # the resolving reader's own records: the batches, the record maker, the abort check
    level = resolved.MarkerIsolation()
    mine = resolved._partition_records(tp, MemoryRecords(data), None, 0, resolved.AS_FETCHED,
                                       None, True, level)
    assert isinstance(mine, resolved.ResolvedRecords)
    assert compat.fetched_batches(mine) is not None and callable(compat.record_maker(mine))
    assert [(r.offset, r.key) for r in mine] == [(0, b"a"), (1, b"b")]
    assert callable(getattr(mine, "_contains_abort_marker", None))
    assert inspect.isgeneratorfunction(plain_class._unpack_records)


def test_a_producer_has_the_transaction_manager_sender_and_accumulator_used() -> None:
    async def check() -> None:
        plain = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1")
        assert compat.txn_manager(plain) is None
        assert list(compat.unsent_batch_waiters(plain)) == []
        assert compat.held_connections(plain) is None  # a producer's client is its ``client``
        assert compat.held_connections(aiokafka.AIOKafkaClient(
            bootstrap_servers="127.0.0.1:1")) == {}
        txn = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", transactional_id="t-1")
        manager = compat.txn_manager(txn)
        assert callable(manager.is_fatal_error) and callable(manager.wait_for_transaction_end)
        client = txn._sender.client  # a test's look inside
        compat.route_sender_requests(txn, lambda c, node, request, group: c.send(node, request))
        routed = txn._sender.client
        assert routed is not client and routed._client_id == client._client_id
        assert routed.cluster is client.cluster
    asyncio.run(check())


def test_a_started_transactional_producer_sends_its_requests_through_the_route(
        kafka_bootstrap: str) -> None:
    async def check() -> list[str]:
        seen: list[str] = []

        async def send(client: Any, node_id: int, request: Any, group: Any) -> Any:
            seen.append(type(request).__name__)
            # on as the job's producer sends them (tansu refuses InitProducerId v0)
            return await txn_producer._newer_transaction_requests(client, node_id, request, group)
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap,
                                    transactional_id=f"compat-{uuid.uuid4().hex[:8]}")
        compat.route_sender_requests(producer, send)
        await producer.start()  # InitProducerId, through the sender
        await stop_client(producer)
        return seen
    seen = asyncio.run(check())
    assert any(n.startswith("InitProducerIdRequest") for n in seen), seen


def test_a_started_group_consumer_has_the_coordinator_used(kafka_bootstrap: str) -> None:
    async def check() -> list[Any]:
        seen: list[Any] = []
        consumer = AIOKafkaConsumer(f"compat-{uuid.uuid4().hex[:8]}",
                                    bootstrap_servers=kafka_bootstrap,
                                    group_id=f"compat-{uuid.uuid4().hex[:8]}")
        await consumer.start()
        try:
            def wrap(send: Any) -> Any:
                async def send_req(request: Any) -> Any:
                    seen.append(type(request).__name__)
                    return await send(request)
                return send_req
            assert compat.held_connections(consumer)  # the started consumer's connections
            compat.wrap_coordinator_send(consumer, wrap)
            rejoin = compat.request_rejoin(consumer)
            rejoin()  # the next poll joins again, through the wrapped send
            deadline = asyncio.get_running_loop().time() + 30
            while not seen and asyncio.get_running_loop().time() < deadline:
                await consumer.getmany(timeout_ms=500)
            while compat.group_generation(consumer) < 0 \
                    and asyncio.get_running_loop().time() < deadline:
                await consumer.getmany(timeout_ms=500)
            assert compat.group_generation(consumer) >= 0
        finally:
            await stop_client(consumer)
        return seen
    seen = asyncio.run(check())
    assert any("Heartbeat" in n or "JoinGroup" in n or "SyncGroup" in n for n in seen), seen


def test_a_started_consumer_has_the_fetcher_isolation_level_used(kafka_bootstrap: str) -> None:
    async def check() -> None:
        consumer = resolved.ResolvingConsumer(bootstrap_servers=kafka_bootstrap)
        await consumer.start()
        try:
            assert isinstance(compat.isolation_level(consumer), resolved.MarkerIsolation)
        finally:
            await stop_client(consumer)
    asyncio.run(check())


def test_an_admin_client_sends_its_requests_through_the_routes_given(
        kafka_bootstrap: str) -> None:
    """Metadata and configs through ``any_node``, topic creation through ``controller``, each
    on a started admin client of the installed aiokafka, against a broker."""
    async def check() -> dict[str, list[str]]:
        seen: dict[str, list[str]] = {"any": [], "controller": []}

        def route(kind: str) -> Any:
            async def send(client: Any, request: Any) -> Any:
                seen[kind].append(type(request).__name__)
                return await any_broker(client, request)
            return send
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        compat.route_admin_requests(admin, route("any"), route("controller"))
        await admin.start()
        try:
            topic = f"compat-{uuid.uuid4().hex[:8]}"
            await admin.create_topics([NewTopic(topic, 1, 1)])
            await admin.describe_cluster()
            await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        finally:
            await admin.close()
        return seen
    seen = asyncio.run(check())
    assert [n[:len("CreateTopicsRequest")] for n in seen["controller"]] == ["CreateTopicsRequest"]
    assert any(n.startswith("MetadataRequest") for n in seen["any"]), seen
    assert any(n.startswith("DescribeConfigsRequest") for n in seen["any"]), seen
