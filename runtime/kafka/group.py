"""Containers of a Kafka job that find each other through Kafka's consumer group protocol
(``job.coordinator=kafka``, docs/several-machines.md).

Each ``samza-dsl run APP --follow`` of the job is a container and a member of the consumer group
``<job.name>-<job.id>``; the broker's group coordinator decides who is in the group, and its
leader deals out the job's tasks with ``runtime.kafka.assignor.TaskAssignor``. With a container
id (``job.container.id``) the member is a static one (``group_instance_id``): a restart within
the session timeout moves no task.

- ``GroupMembership``: the member's aiokafka consumer, on an event loop of its own in a thread,
  so that its heartbeats go on whatever the tasks do (a map that takes 200 ms per message keeps
  the membership). It reads no records (its partitions stay paused; the container's own
  consumer reads them); it hands the group's revocations and assignments to the container.
- The container's tasks come and go with the group's assignments: its task lifecycle is an
  object it holds, ``runtime.kafka.tasks.GroupTasks``, to which the membership hands the
  group's callbacks (``GroupCallbacks``) on the container's loop. On a revocation it stops
  handing out, lets the messages in flight complete (bounded by ``task.shutdown.ms``) and
  commits each task in Samza's order (``runtime.engine.commit``); on the assignment that follows, the
  tasks it keeps go on with their stores open, the tasks it lost are closed, and new tasks have
  their stores restored in a worker thread, their inputs unread until their stores are ready,
  never inside the group's callback.
- Fencing (``runtime.kafka.fence``): the container's producer sends nothing past the member's
  lease; a member that learns it was dropped from the group drops its tasks and what it had not
  sent, says so in one line and joins again; each task taken over is claimed in its checkpoint.
  Exactly once, a task whose transactional producer the broker fenced (``ProducerFenced``)
  stops the same way, alone, and the member joins the group again.

The consumer settings of the group (``session_timeout_ms``, ``heartbeat_interval_ms``, ...) come
from ``systems.<name>.consumer.*``, as the rest of the job's consumer settings
(``runtime.kafka.settings``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Coroutine, Mapping
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from runtime.kafka.admin import live_first
from runtime.kafka.aiokafka_compat import request_rejoin
from runtime.kafka.assignor import AssignmentRefused, MemberTasks, TaskAssignor
from runtime.kafka.fence import Lease, watch_coordinator
from runtime.kafka.security import not_authorized
from runtime.kafka.system import stop_client
from samza_dsl.errors import ConfigError, SamzaError
from samza_dsl.jobconfig import JobSettings

__all__ = ["GroupCallbacks", "GroupMembership", "job_coordinator"]

_log = logging.getLogger("samza_dsl.group")


def job_coordinator(job: JobSettings, *, follow: bool, job_name: str) -> str:
    """``kafka`` or ``static`` for a Kafka job (``job.coordinator``): by default ``kafka`` for a
    run that follows its inputs, ``static`` for a bounded run or ``job.container.count`` > 1.
    ``kafka`` with either of those is an error saying what to do."""
    chosen = job.coordinator
    count = job.container_count
    if chosen is None:
        return "kafka" if follow and count == 1 else "static"
    if chosen == "kafka":
        if count > 1:
            raise ConfigError(
                f"job {job_name!r}: job.coordinator=kafka with job.container.count={count}: the "
                f"containers of a group are separate `samza-dsl run APP --follow` processes "
                f"(start one per container, on any hosts); leave out --containers, or set "
                f"job.coordinator=static")
        if not follow:
            raise ConfigError(
                f"job {job_name!r}: job.coordinator=kafka runs containers that follow their "
                f"inputs while the group deals out the tasks; a bounded run reads every task "
                f"to its end in one process: add --follow, or set job.coordinator=static")
    return str(chosen)


class GroupCallbacks(Protocol):
    """What the membership hands the group's rebalances to, on the container's loop: the
    container's task lifecycle (``runtime.kafka.tasks.GroupTasks``)."""

    async def on_revoked(self) -> None:
        """A rebalance began: the tasks drain and commit, and wait for the assignment."""

    async def on_assigned(self, tasks: MemberTasks) -> None:
        """This member's share of the new generation."""

    async def on_fenced(self, reason: str) -> None:
        """The group went on without this member."""

    async def on_failed(self, exc: BaseException) -> None:
        """The membership cannot go on: the container stops with ``exc``."""


class _Listener(ConsumerRebalanceListener):
    """The group's callbacks, on the membership's loop: handed to the container's."""

    def __init__(self, membership: GroupMembership) -> None:
        self.m = membership

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.m.rebalancing = True  # not ready from now until on_assigned has run (``/ready``)
        await self.m.check_fenced()
        if self.m.assigned_once:
            await self.m.call(self.m.tasks.on_revoked(), self.m.shutdown_s + 5.0)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        consumer = self.m.consumer
        if consumer is not None and assigned:
            consumer.pause(*assigned)  # the container's consumer reads them
        self.m.assigned_once = True
        try:
            tasks = self.m.assignor.tasks()
        except AssignmentRefused as exc:
            self.m.post(self.m.tasks.on_failed(exc))
            return
        if tasks is not None:
            self.m.post(self.m.tasks.on_assigned(tasks))


class GroupMembership:
    """This container's membership of its job's consumer group, on a thread of its own."""

    def __init__(self, tasks: GroupCallbacks, servers: str, group: str,
                 assignor: TaskAssignor, settings: Mapping[str, Any], *,
                 instance_id: str | None, shutdown_s: float) -> None:
        #: the container's task lifecycle, which takes the group's callbacks
        self.tasks = tasks
        self.servers = servers
        self.group = group
        self.assignor = assignor
        self.settings = dict(settings)
        self.instance_id = instance_id
        self.shutdown_s = shutdown_s
        self.settings = {"session_timeout_ms": 10_000, "heartbeat_interval_ms": 3_000,
                         **self.settings}
        session = int(self.settings["session_timeout_ms"])
        self.settings.setdefault("rebalance_timeout_ms",
                                 max(session, int(shutdown_s * 1000) + 5_000))
        #: until when this member is surely in the group (``runtime.kafka.fence``)
        self.lease = Lease(session / 1000.0, int(self.settings["rebalance_timeout_ms"]) / 1000.0)
        self._fences = 0
        #: a rebalance began (the revocation) and the container has not taken its assignment
        self.rebalancing = False
        self.consumer: AIOKafkaConsumer | None = None
        self.assigned_once = False
        self._main: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: the membership's loop, and its side of ``_stop``
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None

    def start(self, main: asyncio.AbstractEventLoop) -> None:
        self._main = main
        self._thread = threading.Thread(target=self._serve, name=f"group-{self.group}",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Leave the group (a static member only stops: the broker waits a session timeout
        for it to come back before its tasks move)."""
        self._stop.set()
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None:
            with contextlib.suppress(RuntimeError):  # its loop has ended already
                loop.call_soon_threadsafe(stopped.set)
        if self._thread is not None:
            self._thread.join(timeout)

    def post(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        assert self._main is not None
        return asyncio.run_coroutine_threadsafe(coro, self._main)

    async def call(self, coro: Coroutine[Any, Any, Any], timeout: float) -> None:
        """Run ``coro`` on the container's loop and wait for it, at most ``timeout`` seconds."""
        fut = self.post(coro)
        with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.wrap_future(fut), timeout)

    def rejoin(self) -> None:
        """Join the group again (from the container's loop): the next poll rejoins, with a
        revocation and an assignment as in any rebalance."""
        loop, consumer = self._loop, self.consumer
        if loop is None or consumer is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(request_rejoin(consumer))

    def _serve(self) -> None:
        try:
            asyncio.run(self._member())
        except BaseException as exc:  # the container fails with it
            if self._main is not None and not self._main.is_closed():
                with contextlib.suppress(RuntimeError):
                    self.post(self.tasks.on_failed(self._error(exc)))

    async def check_fenced(self) -> None:
        """Once per fencing: the container drops its tasks (on its loop, waited for)."""
        if self.lease.fences != self._fences:
            self._fences = self.lease.fences
            await self.call(self.tasks.on_fenced(self.lease.reason), self.shutdown_s + 5.0)

    def _error(self, exc: BaseException) -> BaseException:
        if isinstance(exc, SamzaError):
            return exc
        refused = not_authorized(f"taking part in consumer group {self.group!r}", self.servers,
                                 exc, self.settings.get("sasl_plain_username"))
        if refused is not None:
            return refused
        name = type(exc).__name__
        if "FencedInstanceId" in name:
            return SamzaError(
                f"consumer group {self.group!r}: another process joined with this container's "
                f"id {self.instance_id!r} and took its place (a static member's id is one "
                f"process at a time): stop one of them, or give each its own --container-id")
        if "InvalidSessionTimeout" in name:
            return ConfigError(
                f"consumer group {self.group!r}: Kafka at {self.servers} refused the session "
                f"timeout of {self.settings['session_timeout_ms']} ms: a broker accepts those "
                f"between its group.min.session.timeout.ms and group.max.session.timeout.ms (6 s "
                f"and 30 min by default); set systems.<system>.consumer.session.timeout.ms "
                f"within them")
        if "UnsupportedVersion" in name or "InconsistentGroupProtocol" in name:
            return SamzaError(
                f"consumer group {self.group!r} on Kafka at {self.servers}: {name}: {exc}; the "
                f"members speak the classic group protocol: enable it on the brokers "
                f"(group.coordinator.rebalance.protocols), and keep consumers of the new "
                f"protocol out of this group id")
        return SamzaError(f"consumer group {self.group!r} on Kafka at {self.servers}: "
                          f"{name}: {exc}; the container stopped: start it again")

    async def _take_part(self, consumer: AIOKafkaConsumer) -> None:
        """Poll (nothing to read: every partition is paused) to take part in the group, until
        stopped. A poll waits while the group rebalances, and a rebalance waits for every
        member, a frozen one too: a stop does not wait for it."""
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        stopped = asyncio.ensure_future(self._stopped.wait())
        try:
            while not self._stop.is_set():
                poll = asyncio.ensure_future(consumer.getmany(timeout_ms=200))
                await asyncio.wait({poll, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not poll.done():
                    poll.cancel()
                    with contextlib.suppress(asyncio.CancelledError, KafkaError):
                        await poll
                    return
                poll.result()
                await self.check_fenced()
        finally:
            stopped.cancel()

    async def _member(self) -> None:
        settings = dict(self.settings)
        session = int(settings["session_timeout_ms"])
        settings.setdefault("max_poll_interval_ms", 300_000)
        settings.setdefault("request_timeout_ms", max(40_000, session + 5_000))
        settings.pop("auto_offset_reset", None)
        settings.pop("group_instance_id", None)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=live_first(self.servers), group_id=self.group,
            group_instance_id=self.instance_id, enable_auto_commit=False,
            auto_offset_reset="latest", partition_assignment_strategy=(self.assignor,),
            **settings)
        self.assignor.attach(consumer)
        self.consumer = consumer
        self._loop = asyncio.get_running_loop()
        try:
            await consumer.start()
            watch_coordinator(consumer, self.lease)
            consumer.subscribe(self.assignor.topics(), listener=_Listener(self))
            await self._take_part(consumer)
        finally:
            # a join under way waits for every member, a frozen one too (until its session
            # times out): the member leaves without it (the broker drops it at that join's end)
            await stop_client(consumer, min(1.0, self.shutdown_s / 4))


def member_ids(container_id: int | None) -> tuple[str, str | None]:
    """This member's container label for the group, and its ``group_instance_id`` (static
    membership) when it has a container id."""
    if container_id is None:
        return f"pid-{os.getpid()}", None
    return str(container_id), f"container-{container_id}"


def host_name() -> str:
    return socket.gethostname()

