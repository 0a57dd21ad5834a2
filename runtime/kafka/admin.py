"""Kafka topic administration: check that the topics a plan needs exist with the planned partition
counts, and create the missing ones.

A job's partition layout is fixed by its plan: every input, intermediate (``partition_by``),
changelog and checkpoint topic has a planned partition count, and a task reads the same partition
number of each of its inputs. An existing topic with another count would silently route keys to
other tasks, so :func:`ensure_topics` refuses it instead of "fixing" it; adding partitions is left
to the operator (and is not reversible on Kafka).

Changelog and checkpoint topics are created with ``cleanup.policy=compact`` so that the broker
keeps the latest value of every key. Nothing here relies on compaction having happened: a
restore reads every version of a key and keeps the last. Other topic configs a spec carries
(``retention.ms`` and ``retention.bytes`` from ``streams.<id>.retention.*``, see
:func:`retention_configs`) go into the create request; a topic that exists keeps its own.

Every call is bounded by its ``timeout``: an unreachable broker, a wrong address or a broker that
accepts connections and never answers gives a :class:`~samza_dsl.errors.SamzaError` after about
``timeout`` seconds that names the servers, never a hang. Topic metadata is read with an
all-topics metadata request, because a metadata request naming a missing topic makes a broker
with ``auto.create.topics.enable`` create it with its default partition count.

A cluster that lost a broker is asked through the brokers that are up (:func:`any_broker`, as
Kafka's own admin client moves a call to another node): a request any broker answers goes to
the one that answered last, and past a broker that does not take the connection to the next;
a request for the controller is sent again once the metadata names one that takes it; a
server of ``bootstrap_servers`` that refused a connection lately is tried last.

>>> check_bootstrap("127.0.0.1:9092, broker-2:9093")
['127.0.0.1:9092', 'broker-2:9093']
>>> TopicSpec("orders-changelog", 4, compacted=True)
TopicSpec(name='orders-changelog', partitions=4, compacted=True, configs=())
>>> TopicSpec("orders", 4, configs=(("retention.ms", "86400000"),)).configs
(('retention.ms', '86400000'),)
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import re
import time
import weakref
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaClient
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    NodeNotReadyError,
    RequestTimedOutError,
    for_code,
)

from runtime.kafka.aiokafka_compat import ConfigResource, ConfigResourceType, route_admin_requests
from runtime.kafka.security import LoginRefused, not_authorized, refusal
from samza_dsl.errors import SamzaError
from samza_dsl.jobconfig import StreamConfig

__all__ = ["BrokersUnreachable", "LostLeader", "TopicSpec", "any_broker", "check_bootstrap",
           "delete_topics", "describe_topics", "ensure_topics", "live_first", "lost_leaders",
           "retention_configs", "taking_connections", "changelog_configs"]

_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
_HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9._-]*[A-Za-z0-9_])?")
_IPV6 = re.compile(r"\[[0-9A-Fa-f:.%A-Za-z]+\]")

# Kafka protocol error codes this module treats specially.
_UNKNOWN_TOPIC = 3
_TOPIC_AUTHORIZATION_FAILED = 29
_TOPIC_ALREADY_EXISTS = 36
_INVALID_REPLICATION_FACTOR = 38

_RETRY_INTERVAL = 0.1  # seconds between metadata reads while a topic is still being set up
_CLOSE_TIMEOUT = 5.0
#: a broker's address that refused a connection this many seconds ago or less is tried last
_REFUSED_FOR = 60.0
#: the errors of a broker that does not take a request: it is lost, or going
_NOT_TAKEN = (NodeNotReadyError, KafkaConnectionError, RequestTimedOutError)
#: ``host:port`` -> when it last refused a connection (monotonic seconds)
_refusals: dict[str, float] = {}
#: the node of each client that answered it last: asked first next time
_answered: weakref.WeakKeyDictionary[AIOKafkaClient, int] = weakref.WeakKeyDictionary()


class BrokersUnreachable(SamzaError):
    """No broker answered the admin client's first request."""


@dataclass(frozen=True)
class TopicSpec:
    """A topic a plan needs: its name, its planned partition count, whether it is compacted
    (changelog and checkpoint topics: ``cleanup.policy=compact``), and other topic configs to
    create it with, as ``(name, value)`` pairs of strings (Kafka's names: ``retention.ms``)."""

    name: str
    partitions: int
    compacted: bool = False
    configs: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _TOPIC_NAME.fullmatch(self.name) \
                or self.name in (".", ".."):
            raise SamzaError(
                f"invalid Kafka topic name {self.name!r}: use 1 to 249 of the characters "
                f"A-Z a-z 0-9 . _ - (and not '.' or '..')"
            )
        if isinstance(self.partitions, bool) or not isinstance(self.partitions, int) \
                or self.partitions < 1:
            raise SamzaError(
                f"topic {self.name!r} needs a partition count of at least 1, "
                f"got {self.partitions!r}"
            )
        if not isinstance(self.compacted, bool):
            raise SamzaError(
                f"topic {self.name!r}: compacted must be True or False, got {self.compacted!r}"
            )
        if not isinstance(self.configs, tuple) or not all(
                isinstance(c, tuple) and len(c) == 2 and all(isinstance(x, str) for x in c)
                for c in self.configs):
            raise SamzaError(
                f"topic {self.name!r}: configs must be a tuple of (name, value) string pairs, "
                f"got {self.configs!r}"
            )


def retention_configs(stream: StreamConfig) -> tuple[tuple[str, str], ...]:
    """The topic configs ``retention.ms`` and ``retention.bytes`` of a stream whose config
    (``JobConfig.stream(id)``) gives ``streams.<id>.retention.ms``/``.retention.bytes`` (-1 keeps
    forever, as on Kafka); a key the config does not give is left to the broker's default.

    >>> from samza_dsl.jobconfig import JobConfig
    >>> config = JobConfig.validated({"streams.orders.retention.ms": "86400000",
    ...                               "streams.audit.retention.bytes": -1})
    >>> retention_configs(config.stream("orders")), retention_configs(config.stream("audit"))
    ((('retention.ms', '86400000'),), (('retention.bytes', '-1'),))
    >>> retention_configs(config.stream("clicks"))
    ()
    """
    topic_configs = (("retention.ms", "retention_ms", stream.retention_ms),
                     ("retention.bytes", "retention_bytes", stream.retention_bytes))
    return tuple((name, str(int(value))) for name, field, value in topic_configs
                 if stream.given(field))


#: added to a table's ttl for its changelog topic's ``retention.ms``: the clocks of the hosts
#: that write it, of the brokers and of a host that restores from it may differ by that much
TTL_RETENTION_MARGIN_MS = 60_000


def changelog_configs(ttl_ms: int | None) -> tuple[tuple[str, str], ...]:
    """The topic configs of a store's changelog beyond ``cleanup.policy=compact``: for a table
    with a ttl on processing time (``runtime.state.ttl.processing_ttl_ms``), records older than
    the ttl go whatever their keys (``compact,delete``, ``retention.ms`` the ttl and a margin),
    as the embedded log's compaction does; else none.

    >>> changelog_configs(3_600_000)
    (('cleanup.policy', 'compact,delete'), ('retention.ms', '3660000'))
    >>> changelog_configs(None)
    ()
    """
    if ttl_ms is None:
        return ()
    return (("cleanup.policy", "compact,delete"),
            ("retention.ms", str(ttl_ms + TTL_RETENTION_MARGIN_MS)))


def check_bootstrap(bootstrap: str) -> list[str]:
    """The servers of a ``bootstrap_servers`` value ``"host:port,host:port"``, stripped.

    An IPv6 address is written in brackets, ``"[::1]:9092"``. A malformed value (empty, an entry
    without a port, a port out of range, a URL) raises :class:`SamzaError` naming it.

    >>> check_bootstrap("127.0.0.1:9092")
    ['127.0.0.1:9092']
    >>> check_bootstrap("localhost")
    Traceback (most recent call last):
    ...
    samza_dsl.errors.SamzaError: malformed bootstrap_servers 'localhost': entry 'localhost' has no port; ...
    """
    if not isinstance(bootstrap, str):
        raise SamzaError(
            f"bootstrap_servers must be a string like '127.0.0.1:9092' or "
            f"'broker1:9092,broker2:9092', got {type(bootstrap).__name__} {bootstrap!r}"
        )
    servers = []
    for raw in bootstrap.split(","):
        entry = raw.strip()
        problem = _server_problem(entry)
        if problem is not None:
            raise SamzaError(
                f"malformed bootstrap_servers {bootstrap!r}: {problem}; write host:port entries "
                f"separated by commas, like '127.0.0.1:9092' or 'broker1:9092,broker2:9092'"
            )
        servers.append(entry)
    return servers


def _server_problem(entry: str) -> str | None:
    """Why one ``host:port`` entry is malformed, or None."""
    if not entry:
        return "it has an empty entry"
    if "://" in entry:
        return f"entry {entry!r} is a URL; give host:port without a scheme"
    host, sep, port = entry.rpartition(":")
    if not sep:
        return f"entry {entry!r} has no port"
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        return f"entry {entry!r} has port {port!r}, not a number from 1 to 65535"
    if not host:
        return f"entry {entry!r} has no host"
    if ":" in host and not _IPV6.fullmatch(host):
        return f"entry {entry!r}: write an IPv6 address in brackets, like '[::1]:9092'"
    if ":" not in host and not _HOST.fullmatch(host):
        return f"entry {entry!r} has an invalid host {host!r}"
    return None


async def describe_topics(bootstrap: str, names: Iterable[str], *, timeout: float = 10.0,
                          **client_settings: Any) -> dict[str, int | None]:
    """The partition count of each named topic, None for a topic that does not exist.

    ``client_settings`` go to :class:`aiokafka.admin.AIOKafkaAdminClient` (security protocol,
    SSL context, SASL...). Raises :class:`SamzaError` when the brokers cannot be reached or do
    not answer within ``timeout`` seconds. Never creates a topic."""
    servers = check_bootstrap(bootstrap)
    wanted = _topic_names(names)
    async with _admin(servers, timeout, client_settings, "describing topics") as (admin, _):
        return await _partition_counts(admin, wanted)


async def topic_names(bootstrap: str, *, timeout: float = 10.0,
                      **client_settings: Any) -> list[str]:
    """The names of the topics on the brokers at ``bootstrap``, for an error's did-you-mean."""
    async with _admin(check_bootstrap(bootstrap), timeout, client_settings,
                      "listing topics") as (admin, _):
        return sorted(await admin.list_topics())


async def ensure_topics(bootstrap: str, specs: Iterable[TopicSpec], *,
                        create_missing: bool = True, timeout: float = 10.0,
                        replication_factor: int | None = 1, min_insync: int | None = None,
                        **client_settings: Any) -> dict[str, int]:
    """Make sure every topic in ``specs`` exists with its planned partition count; returns the
    partition count of each.

    Missing topics are created (compacted ones with ``cleanup.policy=compact``, each with its
    spec's ``configs``) with ``replication_factor`` replicas (None: ``min(3, brokers)``, as
    the cluster says) and ``min.insync.replicas`` ``min_insync`` (None: ``min(2, replicas)``
    where there are several), or, with ``create_missing=False``,
    reported in a :class:`SamzaError`. An existing topic with another partition count raises a
    :class:`SamzaError` naming the topic and both counts, before anything is created. A topic
    that another client creates meanwhile is accepted if its count is the planned one. Raises
    :class:`SamzaError` when the brokers cannot be reached or do not answer within ``timeout``
    seconds in all."""
    servers = check_bootstrap(bootstrap)
    plan = _unique_specs(specs)
    if replication_factor is not None and (
            isinstance(replication_factor, bool) or not isinstance(replication_factor, int)
            or replication_factor < 1):
        raise SamzaError(
            f"replication_factor must be an integer of at least 1, got {replication_factor!r}"
        )
    where = ", ".join(servers)
    async with _admin(servers, timeout, client_settings, "checking topics") as (admin, step):
        counts = await _partition_counts(admin, list(plan))
        _check_counts(plan, counts)
        missing = [spec for spec in plan.values() if counts[spec.name] is None]
        if missing and not create_missing:
            names = ", ".join(repr(spec.name) for spec in missing)
            raise SamzaError(
                f"topic{'s' if len(missing) > 1 else ''} {names} "
                f"{'do' if len(missing) > 1 else 'does'} not exist on the Kafka brokers at "
                f"{where}, and creating topics is turned off; create "
                f"{'them' if len(missing) > 1 else 'it'} with the planned partition counts "
                f"({', '.join(f'{s.name}: {s.partitions}' for s in missing)}) or allow creation"
            )
        if missing:
            step[0] = "counting the brokers"
            replicas = replication_factor or min(3, await _brokers(admin))
            insync = min_insync or (min(2, replicas) if replicas > 1 else None)
            if insync is not None:
                missing = [TopicSpec(s.name, s.partitions, s.compacted,
                                     (*s.configs, ("min.insync.replicas", str(insync))))
                           for s in missing]
            step[0] = f"creating topics {[spec.name for spec in missing]}"
            await _create(admin, missing, replicas, where,
                          client_settings.get("sasl_plain_username"))
            step[0] = "waiting for the created topics to appear in the metadata"
            created = await _partition_counts(admin, [spec.name for spec in missing],
                                              wait_for_all=True)
            counts.update(created)
            _check_counts(plan, counts)
    return {name: _known(counts[name]) for name in plan}


async def delete_topics(bootstrap: str, names: Iterable[str], *, timeout: float = 10.0,
                        **client_settings: Any) -> list[str]:
    """Deletes the named topics that exist and waits until the metadata no longer lists them
    (a topic created again at once would otherwise meet the one being deleted); returns the
    names of those deleted. Raises :class:`SamzaError` naming the topic when the brokers refuse,
    or when they cannot be reached or do not finish within ``timeout`` seconds."""
    servers = check_bootstrap(bootstrap)
    wanted = _topic_names(names)
    async with _admin(servers, timeout, client_settings, "deleting topics") as (admin, step):
        counts = await _partition_counts(admin, wanted)
        there = [name for name in wanted if counts[name] is not None]
        if not there:
            return []
        response = await admin.delete_topics(there)
        for result in response.to_object()["topic_error_codes"]:
            code = result["error_code"]
            if code not in (0, _UNKNOWN_TOPIC):
                raise SamzaError(
                    f"cannot delete topic {result['topic']!r} on the Kafka brokers at "
                    f"{', '.join(servers)} ({for_code(code).__name__}); check that the brokers "
                    f"allow deleting topics (delete.topic.enable) and the principal's permissions")
        step[0] = "waiting for the deleted topics to leave the metadata"
        while any(n is not None for n in (await _partition_counts(admin, there)).values()):
            await asyncio.sleep(_RETRY_INTERVAL)
    return there


def _known(count: int | None) -> int:
    assert count is not None
    return count


def _topic_names(names: Iterable[str]) -> list[str]:
    if isinstance(names, str):
        raise SamzaError(f"give a list of topic names, not the string {names!r}")
    wanted: list[str] = []
    for name in names:
        if not isinstance(name, str) or not name:
            raise SamzaError(f"a topic name must be a non-empty string, got {name!r}")
        if name not in wanted:
            wanted.append(name)
    return wanted


def _unique_specs(specs: Iterable[TopicSpec]) -> dict[str, TopicSpec]:
    plan: dict[str, TopicSpec] = {}
    for spec in specs:
        if not isinstance(spec, TopicSpec):
            raise SamzaError(f"ensure_topics needs TopicSpec values, got {spec!r}")
        other = plan.setdefault(spec.name, spec)
        if other != spec:
            raise SamzaError(
                f"topic {spec.name!r} is planned twice with different settings: {other} and "
                f"{spec}; give each topic one partition count and cleanup policy"
            )
    return plan


def _check_counts(plan: dict[str, TopicSpec], counts: dict[str, int | None]) -> None:
    for name, spec in plan.items():
        count = counts.get(name)
        if count is not None and count != spec.partitions:
            raise SamzaError(
                f"topic {name!r} has {count} partition{'s' if count != 1 else ''} but the plan "
                f"needs {spec.partitions}: keys would reach the wrong tasks; delete and recreate "
                f"the topic with {spec.partitions} partitions (its data is lost), or change the "
                f"job's partition count for it to {count}"
            )


async def _partition_counts(admin: AIOKafkaAdminClient, names: list[str], *,
                            wait_for_all: bool = False) -> dict[str, int | None]:
    """Partition counts from an all-topics metadata request (see the module docstring).

    A topic still being set up (an error other than "unknown topic" and no partitions yet) is
    read again until it settles; with ``wait_for_all`` a missing topic is waited for too, as a
    freshly created topic may take a moment to reach every broker's metadata, and so is every
    partition's leader, which Apache Kafka elects after it answered the CreateTopics. The caller's
    timeout bounds the waiting."""
    while True:
        topics = await admin.describe_topics()
        by_name = {t["topic"]: t for t in topics}
        counts: dict[str, int | None] = {}
        pending = False
        for name in names:
            entry = by_name.get(name)
            if entry is None or (entry["error_code"] == _UNKNOWN_TOPIC
                                 and not entry["partitions"]):
                counts[name] = None
                pending = pending or wait_for_all
            elif entry["error_code"] == _TOPIC_AUTHORIZATION_FAILED:
                raise SamzaError(
                    f"not authorized to describe topic {name!r}; grant the job's Kafka principal "
                    f"Describe (and Create) on it"
                )
            elif wait_for_all and not _led(entry):
                # created, but not every partition has a leader yet: a read or write now
                # would be refused (NotLeaderForPartition, UnknownTopicOrPartition)
                counts[name] = len(entry["partitions"]) or None
                pending = True
            elif entry["partitions"] or entry["error_code"] == 0:
                counts[name] = len(entry["partitions"])
            else:
                counts[name] = None
                pending = True
        if not pending:
            return counts
        await asyncio.sleep(_RETRY_INTERVAL)


async def _brokers(admin: AIOKafkaAdminClient) -> int:
    """How many brokers the cluster has."""
    cluster = await admin.describe_cluster()
    return max(1, len(cluster.get("brokers") or ()))


def _led(entry: Mapping[str, Any]) -> bool:
    """Whether every partition of a topic's metadata has a leader (Apache Kafka answers a
    CreateTopics before it has elected them)."""
    parts = entry["partitions"]
    return bool(parts) and all(p.get("error_code", 0) == 0 and p.get("leader", -1) >= 0
                               for p in parts)


async def _create(admin: AIOKafkaAdminClient, specs: list[TopicSpec], replication_factor: int,
                  where: str, user: str | None = None) -> None:
    new = [
        NewTopic(spec.name, spec.partitions, replication_factor,
                 topic_configs={**({"cleanup.policy": "compact"} if spec.compacted else {}),
                                **dict(spec.configs)}
                 or None)
        for spec in specs
    ]
    response = await admin.create_topics(new)
    order = {spec.name: i for i, spec in enumerate(specs)}  # the broker answers in any order
    for result in sorted(response.to_object()["topic_errors"],
                         key=lambda r: order.get(r["topic"], len(order))):
        code = result["error_code"]
        if code in (0, _TOPIC_ALREADY_EXISTS):
            continue  # already there: created by another client meanwhile; its count is checked
        name = result["topic"]
        reason = f"{for_code(code).__name__}"
        if result.get("error_message"):
            reason += f": {result['error_message']}"
        refused = not_authorized(f"creating topic {name!r}", where, for_code(code)(name), user)
        if refused is not None:
            raise refused
        if code == _INVALID_REPLICATION_FACTOR:
            todo = (f"lower replication_factor (now {replication_factor}) to at most the number "
                    f"of brokers")
        else:
            todo = "check the broker's log, its topic settings and the job's permissions"
        raise SamzaError(
            f"cannot create topic {name!r} on the Kafka brokers at {where} ({reason}); {todo}"
        )


def live_first(servers: str | list[str]) -> list[str]:
    """``servers`` (a list, or ``host:port`` entries separated by commas) with those that
    refused a connection lately last, in their order: a new client bootstraps from the first
    that answers, one after the other, so a lost broker first in ``bootstrap_servers`` costs
    no connection attempt, nor a wait where its host does not answer."""
    if isinstance(servers, str):
        servers = [s.strip() for s in servers.split(",")]
    now = time.monotonic()
    late = {s for s in servers if now - _refusals.get(s, -math.inf) <= _REFUSED_FOR}
    return [s for s in servers if s not in late] + [s for s in servers if s in late]


async def taking_connections(addresses: Iterable[str], timeout: float = 0.5) -> set[str]:
    """Those of the ``host:port`` addresses that take a TCP connection within ``timeout``
    seconds (each refusal is remembered for ``live_first``)."""
    async def takes(address: str) -> bool:
        host, _, port = address.rpartition(":")
        try:
            async with asyncio.timeout(timeout):
                _, writer = await asyncio.open_connection(host.strip("[]"), int(port))
            writer.close()
            _refusals.pop(address, None)
            return True
        except (OSError, TimeoutError):
            _refusals[address] = time.monotonic()
            return False
    wanted = list(dict.fromkeys(addresses))
    up = await asyncio.gather(*(takes(a) for a in wanted))
    return {a for a, ok in zip(wanted, up, strict=True) if ok}


async def any_broker(client: AIOKafkaClient, request: Any) -> Any:
    """The answer to ``request`` (one any broker answers) from a broker of the client's
    metadata that takes it: the one that answered last first, then the others in a random
    order, those that refused a connection lately last. A broker that does not take it (lost:
    not ready, a connection error, a request timeout) passes it on to the next; the last error
    is raised when none does."""
    now = time.monotonic()
    brokers = list(client.cluster.brokers())
    random.shuffle(brokers)
    last = _answered.get(client)
    brokers.sort(key=lambda b: (b.nodeId != last,
                                now - _refusals.get(f"{b.host}:{b.port}", -math.inf)
                                <= _REFUSED_FOR))
    error: Exception = KafkaConnectionError("the metadata names no broker")
    for broker in brokers:
        try:
            answer = await client.send(broker.nodeId, request)
        except _NOT_TAKEN as exc:
            _refusals[f"{broker.host}:{broker.port}"] = time.monotonic()
            error = exc
            continue
        _answered[client] = broker.nodeId
        return answer
    raise error


async def _to_controller(client: AIOKafkaClient, request: Any) -> Any:
    """``request``'s answer from the controller the metadata names; where it does not take it
    (lost, the metadata not updated yet), the metadata is read again and the request sent again
    (the caller's timeout bounds the tries). A topic created by a request whose answer was lost
    is there when it is sent again: TOPIC_ALREADY_EXISTS, which ``ensure_topics`` accepts."""
    while True:
        controller = client.cluster.controller
        if controller is not None:
            try:
                return await client.send(controller.nodeId, request)
            except (NodeNotReadyError, KafkaConnectionError):
                _refusals[f"{controller.host}:{controller.port}"] = time.monotonic()
        await client.force_metadata_update()
        await asyncio.sleep(_RETRY_INTERVAL)


@dataclass(frozen=True)
class LostLeader:
    """A partition whose leader, as the metadata says, does not take connections (or which has
    none): how many of its in-sync replicas are on brokers that take them, and the
    ``min.insync.replicas`` of its topic."""

    topic: str
    partition: int
    leader: int
    live_in_sync: int
    min_in_sync: int

    @property
    def electable(self) -> bool:
        """The brokers that are up can elect it a leader that takes writes (unclean elections
        aside): an election is under way, or about to be once the controllers fence the lost
        broker."""
        return self.live_in_sync >= max(1, self.min_in_sync)


async def lost_leaders(bootstrap: str, names: Iterable[str], *, timeout: float = 10.0,
                       **client_settings: Any) -> list[LostLeader]:
    """The partitions of the named topics (those that exist) whose leader does not take a
    connection, as the metadata of a broker that is up says. Raises :class:`SamzaError` when
    the brokers cannot be reached or do not answer within ``timeout`` seconds."""
    servers = check_bootstrap(bootstrap)
    wanted = set(_topic_names(names))
    async with _admin(servers, timeout, client_settings, "reading partition leaders") as (
            admin, step):
        brokers = {b["node_id"]: f"{b['host']}:{b['port']}"
                   for b in (await admin.describe_cluster())["brokers"]}
        up = await taking_connections(brokers.values())
        live = {node for node, address in brokers.items() if address in up}
        lost = [(t["topic"], p) for t in await admin.describe_topics()
                if t["topic"] in wanted for p in t["partitions"] if p["leader"] not in live]
        if not lost:
            return []
        step[0] = "reading min.insync.replicas"
        topics = sorted({topic for topic, _ in lost})
        min_in_sync = dict.fromkeys(topics, 1)
        for answer in await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics]):
            for resource in answer.to_object()["resources"]:
                for entry in resource["config_entries"]:
                    if entry["config_names"] == "min.insync.replicas" and entry["config_value"]:
                        min_in_sync[resource["resource_name"]] = int(entry["config_value"])
    return [LostLeader(topic, p["partition"], p["leader"],
                       sum(1 for node in p["isr"] if node in live), min_in_sync[topic])
            for topic, p in lost]


@contextlib.asynccontextmanager
async def _admin(servers: list[str], timeout: float, client_settings: dict[str, Any],
                 what: str) -> AsyncIterator[tuple[AIOKafkaAdminClient, list[str]]]:
    """A started admin client; everything inside is bounded by ``timeout`` seconds in all, and
    Kafka errors and timeouts become SamzaErrors naming the servers. The yielded one-item list
    holds the current step, for the messages."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) \
            or not math.isfinite(timeout) or timeout <= 0:
        raise SamzaError(f"timeout must be a positive number of seconds, got {timeout!r}")
    where = ", ".join(servers)
    settings = dict(client_settings)
    settings.setdefault("request_timeout_ms", max(1, int(timeout * 1000)))
    try:
        admin = AIOKafkaAdminClient(bootstrap_servers=live_first(servers), **settings)
    except (TypeError, ValueError) as e:
        raise SamzaError(
            f"invalid Kafka admin client settings {sorted(client_settings)} for the brokers at "
            f"{where}: {e}; use the keyword arguments of aiokafka's AIOKafkaAdminClient"
        ) from e
    route_admin_requests(admin, any_broker, _to_controller)
    step = ["connecting"]
    try:
        async with asyncio.timeout(timeout):
            await admin.start()
            step[0] = what
            yield admin, step
    except TimeoutError as e:
        if step[0] == "connecting":
            raise _unreachable(where, f"no answer within {timeout:g} s") from e
        raise SamzaError(
            f"the Kafka brokers at {where} did not finish {step[0]} within {timeout:g} s; "
            f"check that the brokers are healthy, or raise the timeout"
        ) from e
    except KafkaError as e:
        if step[0] == "connecting":
            await _refused(where, client_settings)
            raise _unreachable(where, f"{type(e).__name__}: {e}") from e
        refused = not_authorized(step[0], where, e, client_settings.get("sasl_plain_username"))
        if refused is not None:
            raise refused from None
        raise SamzaError(
            f"the Kafka brokers at {where} failed while {step[0]} ({type(e).__name__}: {e}); "
            f"check bootstrap_servers, the brokers' logs and the job's permissions"
        ) from e
    finally:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(_CLOSE_TIMEOUT):
                await admin.close()


async def _refused(where: str, settings: Mapping[str, Any]) -> None:
    """A connection the brokers refused (a login, TLS) is said as such, not as brokers away."""
    line = await refusal(where.replace(" ", ""), settings, timeout=3.0)
    if line is not None:
        raise LoginRefused(line) from None


def _unreachable(where: str, reason: str) -> SamzaError:
    return BrokersUnreachable(
        f"cannot reach the Kafka brokers at {where} ({reason}); check bootstrap_servers and that "
        f"the broker is running and reachable from here"
    )
