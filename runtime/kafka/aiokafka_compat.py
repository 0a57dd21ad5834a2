"""Every use of aiokafka's internals, in one module.

The job's Kafka layer goes past aiokafka's public API in a few places, each for a reason that
its caller's docstring gives: reading committed records by the log's own markers
(``runtime.kafka.resolved``), writing raw records straight into a batch's record builder
(``runtime.kafka.system``), the newer transaction requests and a fenced producer's failures
(``runtime.kafka.txn_producer``), the group coordinator's answers for a member's lease
(``runtime.kafka.fence``), a rejoin asked from another thread (``runtime.kafka.group``) and
the broker an admin request goes to (``runtime.kafka.admin``).
Those modules reach aiokafka's internals only through the functions here, so one module says
what the project depends on, and ``tests/kafka/test_aiokafka_compat.py`` proves, for each, that
the installed aiokafka still has it in the shape used.

The installed version is checked when this module is imported: outside ``SUPPORTED`` the job
stops with one line naming the range (``pyproject.toml`` pins the same range).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiokafka
from aiokafka.consumer import fetcher as _fetcher

from samza_dsl.errors import SamzaError

__all__ = ["SUPPORTED", "PartitionRecords", "install_partition_records", "plain_partition_records",
           "fetched_batches", "record_maker", "set_record_maker", "is_abort_marker",
           "isolation_level", "set_isolation_level", "builder_append", "seal", "txn_manager",
           "unsent_batch_waiters", "wrap_sender_client", "wrap_coordinator_send",
           "request_rejoin", "route_admin_requests", "check_version"]

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


def wrap_sender_client(producer: Any, wrap: Callable[[Any], Any]) -> None:
    """Before ``start``: the client the producer's sender sends its requests through (the
    transaction requests among them) becomes ``wrap(client)``."""
    sender = producer._sender
    sender.client = wrap(sender.client)


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
