"""Every use of aiokafka's internals, in one module.

aiokafka's public API is its top-level names (``AIOKafkaConsumer``, ``AIOKafkaProducer``,
``AIOKafkaClient``, ``TopicPartition``, ...), ``aiokafka.errors``, ``aiokafka.structs``,
``aiokafka.abc``, ``aiokafka.helpers`` and ``aiokafka.admin`` (``AIOKafkaAdminClient``,
``NewTopic``). Everything else is internal and may change in any release: its protocol
(``aiokafka.protocol``), record (``aiokafka.record``), client, connection and coordinator
modules, the producer's and consumer's submodules, and any attribute whose name starts with
``_``. The job's Kafka layer goes past the public API in a few places, each for a reason that
its caller's docstring gives: reading committed records by the log's own markers
(``runtime.kafka.resolved``, ``runtime.kafka.committed``), writing raw records straight into a
batch's record builder (``runtime.kafka.system``), the newer transaction requests and a fenced
producer's failures (``runtime.kafka.txn_protocol``, ``runtime.kafka.txn_producer``), the
group coordinator's answers for a member's lease (``runtime.kafka.fence``), the group's
generation and aiokafka's assignor interface (``runtime.kafka.assignor``), a rejoin asked from
another thread (``runtime.kafka.group``), the broker an admin request goes to
(``runtime.kafka.admin``), a metadata probe and the connections a stopped client still holds
(``runtime.kafka.outage``) and a bare login to a broker (``runtime.kafka.security``).
Those modules reach aiokafka's internals only through the names here (re-exported classes and
functions), so one module says what the project depends on; ``tests/test_architecture.py``
holds that no other module of the runtime imports aiokafka's internal modules or reads a
private attribute of its objects, and ``tests/kafka/test_aiokafka_compat.py`` proves, for
each, that the installed aiokafka still has it in the shape used. Checked against aiokafka
0.14.0.

The installed version is checked when this module is imported: outside ``SUPPORTED`` the job
stops with one line naming the range (``pyproject.toml`` pins the same range).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiokafka

from samza_dsl.errors import SamzaError

__all__ = ["SUPPORTED", "PartitionRecords", "install_partition_records", "plain_partition_records",
           "fetched_batches", "record_maker", "set_record_maker", "is_abort_marker",
           "isolation_level", "set_isolation_level", "builder_append", "seal", "txn_manager",
           "unsent_batch_waiters", "route_sender_requests", "wrap_coordinator_send",
           "request_rejoin", "group_generation", "route_admin_requests", "held_connections",
           "check_version",
           # aiokafka's protocol and record classes, as they are
           "Request", "RequestStruct", "Response", "Schema", "Boolean", "CompactArray",
           "CompactString", "Int16", "Int32", "Int64", "TaggedFields", "transaction_v0",
           "FetchRequest", "MetadataRequest", "MemoryRecords",
           # its group protocol, its connection and its admin's config resources
           "AbstractPartitionAssignor", "ConsumerProtocolMemberAssignment",
           "ConsumerProtocolMemberMetadata", "create_conn", "ConfigResource",
           "ConfigResourceType"]

#: the aiokafka versions whose internals this module was written and tested against: [low, high)
SUPPORTED = ((0, 14), (0, 15))


def check_version(version: str) -> None:
    """Refuse an aiokafka outside ``SUPPORTED``, in one line."""
    m = re.match(r"(\d+)\.(\d+)", version)
    found = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    low, high = SUPPORTED
    if not low <= found < high:
        raise SamzaError(
            f"aiokafka {version} is installed; samza-dsl's Kafka layer supports aiokafka "
            f">={low[0]}.{low[1]},<{high[0]}.{high[1]} (it relies on internals that change "
            f"between versions): pip install 'aiokafka>={low[0]}.{low[1]},<{high[0]}.{high[1]}'")


check_version(aiokafka.__version__)

# aiokafka's internal modules, imported once the version is known to be one they were checked
# in (another version may lack one: the check above says so first). What each is for:
# - ``ConfigResource``: what ``AIOKafkaAdminClient.describe_configs`` takes, which
#   ``aiokafka.admin`` does not export (``admin``);
# - ``ConnectionGroup``: the group a sender's request goes out in (``route_sender_requests``);
# - ``create_conn``: one connection to a broker with a client's security settings, logged in or
#   refused (``security.refusal``);
# - the consumer's ``fetcher``: its ``PartitionRecords`` class, looked up at each Fetch answer;
# - the group protocol: the assignor interface a consumer's ``partition_assignment_strategy``
#   takes, and the member metadata and assignment it reads and returns (``assignor``);
# - the protocol's request and response classes and field types, on which ``txn_protocol``
#   builds the flexible transaction requests; ``transaction_v0``, aiokafka's version 0 of
#   those (what its producer's handlers build and read); ``FetchRequest`` and
#   ``MetadataRequest``, sent through a started ``AIOKafkaClient`` (``committed``, ``outage``);
# - ``MemoryRecords``: the record batches in a Fetch answer's bytes (``committed``).
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType  # noqa: E402
from aiokafka.client import ConnectionGroup as _ConnectionGroup  # noqa: E402
from aiokafka.conn import create_conn  # noqa: E402
from aiokafka.consumer import fetcher as _fetcher  # noqa: E402
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor  # noqa: E402
from aiokafka.coordinator.protocol import (  # noqa: E402
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.protocol import transaction as transaction_v0  # noqa: E402
from aiokafka.protocol.api import Request, RequestStruct, Response  # noqa: E402
from aiokafka.protocol.fetch import FetchRequest  # noqa: E402
from aiokafka.protocol.metadata import MetadataRequest  # noqa: E402
from aiokafka.protocol.types import (  # noqa: E402
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)
from aiokafka.record.memory_records import MemoryRecords  # noqa: E402

# -- the fetcher: one Fetch answer's records of one partition -----------------------------------

#: aiokafka's class for one partition's records of a Fetch answer (a subclass overrides
#: ``_unpack_records``, the generator aiokafka's ``__next__`` and ``getall`` draw records from)
PartitionRecords: type = _fetcher.PartitionRecords
_PLAIN: type = _fetcher.PartitionRecords


def plain_partition_records() -> type:
    """aiokafka's own ``PartitionRecords`` class, as it was before any factory took its place."""
    return _PLAIN


def install_partition_records(factory: Callable[..., Any]) -> None:
    """Have aiokafka's fetcher build each partition's records of a Fetch answer with
    ``factory(tp, records, aborted, fetch_offset, key_deserializer, value_deserializer,
    check_crcs, isolation_level)`` (aiokafka looks the name up in its module at each answer)."""
    _fetcher.PartitionRecords = factory


def fetched_batches(records: Any) -> Any:
    """The Fetch answer's record batches (``has_next``/``next_batch``) a ``PartitionRecords``
    reads."""
    return records._records


def record_maker(records: Any) -> Callable[[Any, Any], Any]:
    """``make(tp, record)``: what a ``PartitionRecords`` hands out for each record."""
    make: Callable[[Any, Any], Any] = records._consumer_record
    return make


def set_record_maker(records: Any, make: Callable[[Any, Any], Any]) -> None:
    records._consumer_record = make


def is_abort_marker(records: Any, batch: Any) -> bool:
    """Whether control batch ``batch`` is an ABORT marker."""
    return bool(records._contains_abort_marker(batch))


def isolation_level(consumer: Any) -> Any:
    """The isolation level the consumer's fetcher gives each ``PartitionRecords`` (None before
    the consumer started)."""
    fetcher = consumer._fetcher
    return fetcher._isolation_level if fetcher is not None else None


def set_isolation_level(consumer: Any, level: Any) -> None:
    """Set what a started consumer's fetcher passes on as the isolation level."""
    consumer._fetcher._isolation_level = level


# -- the producer's batches -------------------------------------------------------------------------

def builder_append(batch: Any) -> Callable[..., Any]:
    """``append(offset_in_batch, timestamp, key=, value=, headers=)`` of a batch's record
    builder: raw bytes in, no serializer step; None when the batch is full."""
    append: Callable[..., Any] = batch._builder.append
    return append


def seal(batch: Any, count: int) -> None:
    """A batch filled through ``builder_append``: its record count, and closed to more."""
    batch._relative_offset = count
    batch.close()


# -- the transactional producer ---------------------------------------------------------------------

def txn_manager(producer: Any) -> Any:
    """The producer's transaction manager (None without a transactional id): its
    ``is_fatal_error()`` and ``wait_for_transaction_end()``."""
    return producer._txn_manager


def unsent_batch_waiters(producer: Any) -> Iterator[Any]:
    """The drain waiters of the batches the producer has not sent."""
    accumulator = producer._message_accumulator
    for batches in accumulator._batches.values():
        for batch in batches:
            yield batch._drain_waiter
    for batch in accumulator._pending_batches:
        yield batch._drain_waiter


#: ``send(client, node_id, request, group)``: one request of a producer's sender, sent (or not)
#: through ``client.send(node_id, request, group=group)``
SenderSend = Callable[[Any, int, Any, Any], Awaitable[Any]]


class _RoutedClient:
    """The client as aiokafka's sender sees it: its requests go through ``send``; everything
    else (metadata, readiness, the client id) is the client's own."""

    def __init__(self, client: Any, send: SenderSend) -> None:
        self._client = client
        self._route = send

    def __getattr__(self, name: str) -> Any:
        if name in ("_client", "_route"):  # not set yet (a copy): no endless lookup of them
            raise AttributeError(name)
        return getattr(self._client, name)  # foreign: aiokafka's client

    async def send(self, node_id: int, request: Any, *,
                   group: Any = _ConnectionGroup.DEFAULT) -> Any:
        return await self._route(self._client, node_id, request, group)


def route_sender_requests(producer: Any, send: SenderSend) -> None:
    """Before ``start``: every request the producer's sender sends (the transaction requests
    among them) goes through ``send(client, node_id, request, group)``, which sends it with
    ``client.send(node_id, request, group=group)``; the sender reads everything else off the
    client as before."""
    sender = producer._sender
    sender.client = _RoutedClient(sender.client, send)


# -- the group coordinator ---------------------------------------------------------------------------

def wrap_coordinator_send(consumer: Any,
                          wrap: Callable[[Callable[[Any], Awaitable[Any]]],
                                         Callable[[Any], Awaitable[Any]]]) -> None:
    """A group consumer's coordinator sends its joins, syncs and heartbeats through
    ``wrap(send)``."""
    coordinator = consumer._coordinator
    coordinator._send_req = wrap(coordinator._send_req)


def request_rejoin(consumer: Any) -> Callable[[], None]:
    """The group consumer's ``request_rejoin`` (call it on the consumer's loop)."""
    rejoin: Callable[[], None] = consumer._coordinator.request_rejoin
    return rejoin


def group_generation(consumer: Any) -> int:
    """The consumer's group generation (-1 before it joined, without a group, or for an
    object that is no consumer). aiokafka passes its assignor neither the generation nor the
    consumer; its coordinator holds the JoinGroup response's generation from before the leader
    assigns."""
    coordinator = getattr(consumer, "_coordinator", None)  # foreign: aiokafka's consumer
    return int(getattr(coordinator, "generation", -1)  # foreign: aiokafka's coordinator
               ) if coordinator is not None else -1


# -- the admin client ---------------------------------------------------------------------------------

def route_admin_requests(admin: Any, any_node: Callable[[Any, Any], Awaitable[Any]],
                         controller: Callable[[Any, Any], Awaitable[Any]]) -> None:
    """The requests of an ``AIOKafkaAdminClient`` that any broker answers (metadata, configs),
    which aiokafka sends to a broker of its metadata drawn at random (a lost one too), go
    through ``any_node(client, request)``, and those for the controller (create and delete
    topics) through ``controller(client, request)``; ``client`` is the admin's
    ``AIOKafkaClient``. Requests for a given node go to that node, as aiokafka sends them."""
    client = admin._client

    async def send(request: Any, node_id: int | None = None) -> Any:
        if node_id is None:
            return await any_node(client, request)
        return await client.send(node_id, request)

    async def to_controller(request: Any) -> Any:
        return await controller(client, request)
    admin._send_request = send
    admin._send_to_controller = to_controller


# -- connections ------------------------------------------------------------------------------------

def held_connections(client: Any) -> dict[Any, Any] | None:
    """The connections an ``AIOKafkaClient`` holds, by node (the dict itself: clearing it
    forgets them), or those of the client of an aiokafka consumer or admin client (its
    ``_client``); None for anything without them (an aiokafka producer keeps its client as
    ``client``, not ``_client``, so for a producer this is None)."""
    conns: dict[Any, Any] | None = getattr(  # foreign: aiokafka's client or its owner
        getattr(client, "_client", client), "_conns", None)  # foreign: aiokafka's client
    return conns
