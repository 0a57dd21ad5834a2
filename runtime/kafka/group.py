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
- ``GroupContainer``: a container whose tasks come and go. On a revocation it stops handing
  out, lets the messages in flight complete (bounded by ``task.shutdown.ms``) and commits each
  task in Samza's order (``runtime.engine.commit``); on the assignment that follows, the tasks it keeps
  go on with their stores open, the tasks it lost are closed, and new tasks have their stores
  restored in a worker thread, their inputs unread until their stores are ready, never inside
  the group's callback.
- Fencing (``runtime.kafka.fence``): the container's producer sends nothing past the member's
  lease; a member that learns it was dropped from the group drops its tasks and what it had not
  sent, says so in one line and joins again; each task taken over is claimed in its checkpoint.
  Exactly once, a task whose transactional producer the broker fenced (``ProducerFenced``)
  stops the same way, alone, and the member joins the group again.

The consumer settings of the group (``session_timeout_ms``, ``heartbeat_interval_ms``, ...) come
from ``systems.<name>.consumer.*``, as the rest of the job's consumer settings.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from runtime.engine.container import Container, restore_times, wire_behind
from runtime.engine.elastic import BucketFan, fan_readers
from runtime.engine.job import JobModel, TaskModel
from runtime.engine.task import TaskInstance
from runtime.kafka.aiokafka_compat import request_rejoin
from runtime.kafka.assignor import AssignmentRefused, MemberTasks, TaskAssignor
from runtime.kafka.exactly_once import KafkaTransactions
from runtime.kafka.fence import Fenced, Lease, watch_coordinator
from runtime.kafka.standby import StandbyReplicas
from runtime.kafka.system import KafkaCheckpoints, KafkaProducer, stop_client
from samza_dsl.config import config_value
from samza_dsl.errors import ConfigError, ProducerFenced, SamzaError, TransactionUnanswered

__all__ = ["GroupContainer", "GroupMembership", "job_coordinator"]

_log = logging.getLogger("samza_dsl.group")


def job_coordinator(config: Mapping[str, Any], *, follow: bool, job_name: str) -> str:
    """``kafka`` or ``static`` for a Kafka job (``job.coordinator``): by default ``kafka`` for a
    run that follows its inputs, ``static`` for a bounded run or ``job.container.count`` > 1.
    ``kafka`` with either of those is an error saying what to do."""
    chosen = config_value(config, "job.coordinator")
    count = int(config_value(config, "job.container.count"))
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


def _as_setting(value: Any) -> Any:
    """A consumer setting from the config (a string from ``-c``) as aiokafka takes it."""
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
    return value


def client_settings(system_settings: Mapping[str, Any], config: Mapping[str, Any],
                    system: str, kind: str) -> dict[str, Any]:
    """aiokafka settings of ``kind`` (``consumer`` or ``producer``): the system's own, then the
    config's ``systems.<system>.<kind>.<key>`` over them. A key may be written with dots as in
    Samza and Kafka (``session.timeout.ms``) or as aiokafka names it (``session_timeout_ms``)."""
    out = {k[len(kind) + 1:].replace(".", "_"): v for k, v in system_settings.items()
           if k.startswith(f"{kind}.")}
    prefix = f"systems.{system}.{kind}."
    out.update({k[len(prefix):].replace(".", "_"): _as_setting(v) for k, v in config.items()
                if isinstance(k, str) and k.startswith(prefix)})
    return out


class _Listener(ConsumerRebalanceListener):
    """The group's callbacks, on the membership's loop: handed to the container's."""

    def __init__(self, membership: GroupMembership) -> None:
        self.m = membership

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.m.rebalancing = True  # not ready from now until on_assigned has run (``/ready``)
        await self.m.check_fenced()
        if self.m.assigned_once:
            await self.m.call(self.m.container.on_revoked(), self.m.shutdown_s + 5.0)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        consumer = self.m.consumer
        if consumer is not None and assigned:
            consumer.pause(*assigned)  # the container's consumer reads them
        self.m.assigned_once = True
        try:
            tasks = self.m.assignor.tasks()
        except AssignmentRefused as exc:
            self.m.post(self.m.container.on_failed(exc))
            return
        if tasks is not None:
            self.m.post(self.m.container.on_assigned(tasks))


class GroupMembership:
    """This container's membership of its job's consumer group, on a thread of its own."""

    def __init__(self, container: GroupContainer, servers: str, group: str,
                 assignor: TaskAssignor, settings: Mapping[str, Any], *,
                 instance_id: str | None, shutdown_s: float) -> None:
        self.container = container
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

    def post(self, coro: Awaitable[Any]) -> concurrent.futures.Future[Any]:
        assert self._main is not None
        return asyncio.run_coroutine_threadsafe(coro, self._main)  # type: ignore[arg-type]

    async def call(self, coro: Awaitable[Any], timeout: float) -> None:
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
                    self.post(self.container.on_failed(self._error(exc)))

    async def check_fenced(self) -> None:
        """Once per fencing: the container drops its tasks (on its loop, waited for)."""
        if self.lease.fences != self._fences:
            self._fences = self.lease.fences
            await self.call(self.container.on_fenced(self.lease.reason), self.shutdown_s + 5.0)

    def _error(self, exc: BaseException) -> BaseException:
        if isinstance(exc, SamzaError):
            return exc
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
            bootstrap_servers=self.servers, group_id=self.group,
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


class GroupContainer(Container):
    """A container whose tasks are dealt by its consumer group (module docstring)."""

    #: the job's checkpoints on Kafka, where a member also records its share and stamps each
    #: checkpoint with its generation
    checkpoints: KafkaCheckpoints

    def __init__(self, job: JobModel, *,
                 membership: Callable[[GroupContainer], GroupMembership],
                 prepare: Callable[[list[TaskModel], bool], Awaitable[None]],
                 checkpoints: KafkaCheckpoints,
                 transactions: KafkaTransactions | None = None,
                 standby: StandbyReplicas | None = None, **kwargs: Any) -> None:
        super().__init__(job, [], checkpoints=checkpoints, **kwargs)
        #: exactly once: the tasks' transactional producers (also the committer's
        #: ``transactions``); a task's closes as the task leaves. None: at least once
        self.transactions = transactions
        #: the Kafka producer, whose sends stop at the member's lease (``runtime.kafka.fence``)
        self.leased: KafkaProducer | None = \
            self.producer if isinstance(self.producer, KafkaProducer) else None
        self._membership_of = membership
        self._prepare = prepare
        #: replicas of the stores of this member's standby tasks (``runtime.kafka.standby``)
        self.standby = standby
        self.membership: GroupMembership | None = None
        self._runs: dict[str, asyncio.Task[None]] = {}
        #: tasks whose stores are being restored, and those ready to start
        self._restoring: dict[str, asyncio.Task[None]] = {}
        self._ready: dict[str, TaskInstance] = {}
        #: stores restored in the background, taken by their task as it is built
        self._opened: dict[str, dict[str, Any]] = {}
        #: the active tasks of the group's last assignment
        self.wanted: set[str] = set()
        self.holding = False
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._error: BaseException | None = None
        self._idle: asyncio.Task[None] | None = None
        self._first = True  # no task came to this container yet
        self.shutdown_s = config_value(self.config, "task.shutdown.ms") / 1000.0
        #: the generation of the last assignment, and when and how long the last rebalance took
        self.generation = -1
        self.assignment: MemberTasks | None = None
        self.rebalances = 0
        self.last_rebalance_s: float | None = None
        self.last_rebalance_at: float | None = None
        #: how many times this member was fenced out of its group
        self.fenced = 0
        self._announcing: set[asyncio.Task[None]] = set()
        self._revoked_at: float | None = None

    def request_stop(self) -> None:
        super().request_stop()
        self._changed.set()

    def health_state(self) -> tuple[str, bool, int]:
        """Ready once the group dealt this member its tasks and their stores are restored."""
        if self.closed:
            return "stopped", False, 0
        if self.env.stopping:
            return "stopping", False, len(self.tasks)
        if self.assignment is None:
            return "starting", False, 0
        m = self.membership
        if m is not None and not m.lease.valid():  # fenced, or not sure it is in the group
            return "fenced", False, len(self.tasks)
        if self.holding or m is not None and m.rebalancing:
            return "rebalancing", False, len(self.tasks)
        if self._restoring:
            return "restoring", False, len(self.tasks)
        return "running", True, len(self.tasks)

    # -- the run ----------------------------------------------------------------------------------

    async def _run(self) -> None:
        self.restored = {}
        self._changelogs = {}
        self.tasks = []
        self._keys = []
        loop = asyncio.get_running_loop()
        await self.start_health()
        helpers = [asyncio.create_task(self._consume(), name="consumer"), *self._timers()]
        self.membership = self._membership_of(self)
        self._revoked_at = time.monotonic()  # its first rebalance: from when it joins
        if self.leased is not None:  # it sends nothing past the member's lease
            self.leased.lease = self.membership.lease
        self.membership.start(loop)
        self.loop_meter.install(loop)
        if self.reporters is not None:
            self.reporters.start()
        try:
            await self._serve()
        finally:
            self.loop_meter.uninstall()
            self.env.stopping = True  # a late assignment starts nothing now
            await asyncio.to_thread(self.membership.stop, self.shutdown_s + 10.0)
            if self.standby is not None:
                await asyncio.to_thread(self.standby.stop)
            await self._settle_restores()
            self._leave_lease()
            if self.assignment is not None:  # it left the group
                await self._write_member(None)
            if self._idle is not None:
                helpers.append(self._idle)
            await self._close(list(self._runs.values()) + helpers)

    async def _serve(self) -> None:
        """Until stopped (every task committed) or failed."""
        while True:
            self._changed.clear()
            if self._error is not None:
                raise self._error
            for name, run in list(self._runs.items()):
                # a task that learnt the member was fenced is dropped by on_fenced
                if run.done() and not run.cancelled() and run.exception() is not None \
                        and not isinstance(run.exception(), Fenced):
                    if isinstance(run.exception(), ProducerFenced | TransactionUnanswered):
                        await self._producer_fenced(name, run.exception())  # type: ignore[arg-type]
                        continue
                    raise run.exception()  # type: ignore[misc]
            if self.env.stopping and all(r.done() for r in self._runs.values()):
                return
            await self._changed.wait()

    def _leave_lease(self) -> None:
        """Out of the group now: the tasks committed what they could while it was a member;
        records still unsent without a valid lease are dropped (their tasks' next owner
        processes their messages again), and what the container writes as it closes (its
        last metrics) is no task's."""
        leased = self.leased
        lease = leased.lease if leased is not None else None
        if leased is None or lease is None:
            return
        if not lease.valid():
            lease.end()  # a send waiting for it gives up
            dropped = leased.discard()
            if dropped:
                _log.warning("container %s: stopped out of its group (%s): %d records not "
                             "sent were dropped", self._label(), lease.reason or "no lease",
                             dropped)
        leased.lease = None

    async def _settle_restores(self) -> None:
        """Wait for restores under way (a thread cannot be stopped) and close what they built."""
        if self._restoring:
            await asyncio.gather(*self._restoring.values(), return_exceptions=True)
        for name, task in list(self._ready.items()):
            self._discard(task)
            del self._ready[name]

    # -- the group's callbacks (on this loop) -----------------------------------------------------

    async def on_failed(self, exc: BaseException) -> None:
        self.fail(exc)

    def fail(self, exc: BaseException) -> None:
        """The container stops with ``exc`` (on its loop), whatever tasks it has now."""
        self._error = exc
        self._changed.set()

    async def on_fenced(self, reason: str) -> None:
        """The group went on without this member: its tasks run elsewhere. Drop them without a
        commit, with every record not sent yet; the member joins the group again."""
        async with self._lock:
            self.fenced += 1
            names = sorted((t.name for t in self.tasks), key=_task_order)
            for t in list(self.tasks):
                await self._drop(t)
            for name, task in list(self._ready.items()):
                self._discard(task)
                del self._ready[name]
            dropped = self.leased.discard() if self.leased is not None else 0
            self.wanted = set()
            self.holding = True
            _log.warning("container %s: fenced out of the group at generation %d (%s): it "
                         "dropped tasks %s and %d records not sent, without a commit; it "
                         "joins the group again", self._label(), self.generation, reason,
                         ", ".join(names) or "none", dropped)

    async def _producer_fenced(self, name: str,
                               exc: ProducerFenced | TransactionUnanswered) -> None:
        """Exactly once: a newer producer took the transactional id of task ``name`` (the
        group gave the task to another member, and this one has not heard yet): the task stops
        without a commit (its open transaction was aborted by the broker) and the member joins
        the group again, to learn what it runs now. A transaction step that got no answer
        (``TransactionUnanswered``: some brokers answer a fenced EndTxn with nothing) goes the
        same way: the next producer of the id settles the transaction, so nothing is lost and
        nothing becomes visible twice."""
        async with self._lock:
            task = next((t for t in self.tasks if t.name == name), None)
            if task is None:
                return
            await self._drop(task)
            self.fenced += 1
            if isinstance(exc, ProducerFenced):
                _log.warning("container %s: task %s stopped: its producer was fenced by the "
                             "broker (transactional id %r taken by a newer producer); nothing "
                             "it wrote since its last commit becomes visible; the container "
                             "joins the group again", self._label(), name, exc.transactional_id)
            else:
                _log.warning("container %s: task %s stopped: %s. Its producer may have been "
                             "fenced by the broker, or the broker is unreachable; the next "
                             "producer of transactional id %r settles the open transaction, so "
                             "nothing is lost or made visible twice; the container joins the "
                             "group again", self._label(), name, exc, exc.transactional_id)
        if self.membership is not None:
            self.membership.rejoin()

    async def on_revoked(self) -> None:
        """Stop handing out, drain (at most ``task.shutdown.ms``) and commit every task; they
        wait for the next assignment."""
        async with self._lock:
            self._revoked_at = time.monotonic()
            self.holding = True
            if self.env.stopping or self.closed:
                return
            _log.warning("container %s: the group is rebalancing (generation %d ends): its "
                         "tasks stop, drain and commit, and wait for the new assignment",
                         self._label(), self.generation)
            live = [t for t in self.tasks if not self._runs[t.name].done()]
            holds = [t.hold() for t in live]
            if not holds:
                return
            _, late = await asyncio.wait(holds, timeout=self.shutdown_s)
            if late:
                names = ", ".join(t.name for t, h in zip(live, holds, strict=True) if h in late)
                _log.warning("container %s: the group rebalances, and tasks %s did not drain "
                             "and commit within task.shutdown.ms=%d; their messages in flight "
                             "may be processed again by the tasks' next container",
                             self._label(), names, int(self.shutdown_s * 1000))

    async def on_assigned(self, tasks: MemberTasks) -> None:
        """The tasks kept go on; the tasks lost close; new tasks restore in the background."""
        async with self._lock:
            self.assignment = tasks
            self.generation = tasks.generation
            # each checkpoint names its generation and writer
            self.checkpoints.stamp.update(group_generation=tasks.generation, member=self._label())
            self.wanted = set(tasks.active)
            self.holding = False
            self.env.task_share = len(self.wanted) / max(1, len(self.job.tasks))
            kept = [t for t in self.tasks if t.name in self.wanted]
            for t in [t for t in self.tasks if t.name not in self.wanted]:
                await self._drop(t)
            for t in kept:
                t.release()
            for name, task in list(self._ready.items()):
                if name not in self.wanted:
                    self._discard(task)
                    del self._ready[name]
            await self._assign_standbys(tasks)
            have = {t.name for t in self.tasks} | set(self._restoring) | set(self._ready)
            new = [self.job.task(n) for n in sorted(self.wanted - have,
                                                    key=lambda n: self.job.task(n).index)]
            if new:
                run = asyncio.create_task(self._restore(new), name="restore")
                for m in new:
                    self._restoring[m.name] = run
            await self._start_ready()
            if self._revoked_at is not None:
                self.last_rebalance_s = time.monotonic() - self._revoked_at
            self.last_rebalance_at = time.time()
            self.rebalances += 1
            self._announce(new)
            if self.membership is not None:
                self.membership.rebalancing = False
            _log.warning("container %s: group generation %d: runs %s%s", self._label(),
                         tasks.generation, ", ".join(sorted(self.wanted, key=_task_order))
                         or "no task", f" (restoring {', '.join(m.name for m in new)})"
                         if new else "")

    async def _assign_standbys(self, tasks: MemberTasks) -> None:
        """Replicas of this member's standby tasks; those of tasks that become active here
        are closed first (the task's restore opens the same directories)."""
        if self.standby is None:
            return
        standby = set(tasks.standby) - self.wanted
        await asyncio.to_thread(self.standby.assign, standby)
        if standby:
            _log.warning("container %s: group generation %d: standby for %s", self._label(),
                         tasks.generation, ", ".join(sorted(standby, key=_task_order)))

    def _restored(self, m: TaskModel) -> None:
        """Says what opening a new task's stores replayed of their changelogs (at a takeover
        by a standby, only the tail past the standby's position)."""
        for store in self._opened.get(m.name, {}):
            info = self.state.restores.get((m.name, store), {})  # type: ignore[attr-defined]
            cp = self._changelogs[m.name].get(store, 0)
            start = cp if info.get("mode") == "host-affinity" else int(info.get("from", 0))
            _log.warning("container %s: task %s: store %r restored (%s): replayed %d changelog "
                         "entries, offsets [%d, %d) of the checkpoint's %d", self._label(),
                         m.name, store, info.get("mode", "?"),
                         int(info.get("entries_replayed", 0)), start, cp, cp)
    def _announce(self, restoring: list[TaskModel]) -> None:
        """Write this member's share and its last rebalance where ``samza-dsl status`` reads it
        (in the background: the rebalance does not wait for it)."""
        a = self.assignment
        if a is None or self.membership is None:
            return
        info = {"host": self.membership.assignor.host, "pid": os.getpid(),
                "container": self.membership.assignor.container,
                "generation": a.generation, "active": sorted(a.active, key=_task_order),
                "standby": sorted(a.standby, key=_task_order),
                "restoring": [m.name for m in restoring], "rebalance_at": time.time(),
                "rebalance_s": self.last_rebalance_s}
        task = asyncio.create_task(self._write_member(info))
        self._announcing.add(task)
        task.add_done_callback(self._announcing.discard)

    async def _write_member(self, info: dict[str, Any] | None) -> None:
        try:
            await self.checkpoints.write_member(self._member_name(), info)
        except (SamzaError, OSError) as exc:  # status only: the job goes on
            _log.info("container %s: could not record its share for status: %s",
                      self._label(), exc)

    def _member_name(self) -> str:
        m = self.membership
        return f"{m.assignor.container}@{m.assignor.host}" if m is not None else str(os.getpid())

    def _label(self) -> str:
        m = self.membership
        if m is None:
            return f"pid {os.getpid()}"
        return f"{m.assignor.container} on {m.assignor.host}"

    # -- tasks that come and go -------------------------------------------------------------------

    async def _drop(self, t: TaskInstance) -> None:
        """A task that moved to another container: it committed when revoked; stop it and close
        its operators and stores."""
        run = self._runs.pop(t.name)
        run.cancel()
        with contextlib.suppress(BaseException):
            await run
        gone = [k for k in self._keys if _readers_task(k[0]) is t]
        self._keys = [k for k in self._keys if _readers_task(k[0]) is not t]
        self.consumer.remove(gone)  # type: ignore[attr-defined]
        self.tasks.remove(t)
        self._discard(t)
        self.committer.committed.pop(t.name, None)
        self.committer.written.pop(t.name, None)

    def _discard(self, t: TaskInstance) -> None:
        t.close()
        self.state.close_task(t.name)  # type: ignore[attr-defined]
        if self.transactions is not None:  # exactly once: the task's producer closes
            self.transactions.release(t.name)

    async def _restore(self, models: list[TaskModel]) -> None:
        """New tasks: their checkpoints (another container wrote them) and their stores restored
        from their changelogs in a worker thread; then they start, unless they left meanwhile."""
        try:
            first, self._first = self._first, False
            await self._prepare(models, first)
            for m in models:
                offsets = self.checkpoints.read(m.name)
                self.committer.seed(m.name, offsets)
                inputs = self.job.plan.app.inputs
                self.restored[m.name] = {ssp: o for ssp, o in offsets.items()
                                         if ssp.stream_id not in inputs
                                         or not inputs[ssp.stream_id].side_input_of}
                self._changelogs[m.name] = self.checkpoints.read_changelogs(m.name)
                self._opened[m.name] = await asyncio.to_thread(self._open_stores, m)
                self._restored(m)
                task = TaskInstance(m, self.job, self.env)
                restore_times(task, self.checkpoints)
                self._opened.pop(m.name, None)
                for ssp in task.ssps:
                    start = self.restored[m.name].get(ssp)
                    if start is not None:
                        task.checkpoint[ssp] = start
                self._ready[m.name] = task
        except Fenced:  # the member was fenced meanwhile: none of them starts; it joins again
            for m in models:
                self._opened.pop(m.name, None)
                built = self._ready.pop(m.name, None)
                if built is not None:
                    self._discard(built)
                else:
                    self.state.close_task(m.name)  # type: ignore[attr-defined]
            return
        except Exception as exc:  # the container fails with it (``_serve`` raises it)
            await self.on_failed(exc)
            return
        finally:
            for m in models:
                self._restoring.pop(m.name, None)
        async with self._lock:
            await self._start_ready()
            if not self.holding:  # its share again, restored
                self._announce([self.job.task(n) for n in self._restoring])

    def _open_stores(self, m: TaskModel) -> dict[str, Any]:
        """The task's stores with changelogs, each restored to the task's checkpoint (in a
        worker thread: a restore reads its changelog, which may take long)."""
        ops = {op for stage in m.stages for op in stage.operators}
        out = {}
        for name, spec in self.job.plan.stores.items():
            if spec.kind == "table" or spec.op_id in ops:
                try:
                    out[name] = self.state.open(m, name, self._changelogs[m.name].get(name))
                except Exception as exc:  # those opened close with the container
                    raise SamzaError(
                        f"container {self._label()}: task {m.name!r} came to it and its store "
                        f"{name!r} could not be opened and restored: {type(exc).__name__}: "
                        f"{exc}; the container stopped (the group deals its tasks to the other "
                        f"members): fix the cause under job.dir and start it again") from exc
        return out

    def store(self, task: TaskModel, store_name: str) -> Any:
        """A task's store: the one restored in the background when there is one."""
        opened = self._opened.get(task.name)
        if opened is not None and store_name in opened:
            return opened.pop(store_name)
        return super().store(task, store_name)

    async def _start_ready(self) -> None:
        """Start the restored tasks of the current assignment (not while the group
        rebalances): their inputs are read from their checkpoints."""
        if self.holding or self.env.stopping:
            return
        for name in sorted(self._ready, key=_task_order):
            task = self._ready.pop(name, None)
            if task is None:  # started meanwhile (another restore's start, at an await below)
                continue
            if name not in self.wanted:
                self._discard(task)
                continue
            entries = fan_readers([task], self.job, {name: self.restored.get(name, {})})
            keys = [(reader, ssp) for reader, ssp, _ in entries]
            await self.consumer.add(  # type: ignore[attr-defined]
                [(k, k[1], None if s is None else s + 1)
                 for k, (_, _, s) in zip(keys, entries, strict=True)])
            wire_behind(self.consumer, keys)
            self.tasks.append(task)
            self._keys = [*self._keys, *keys]
            await self._bootstrap(keys)
            run = asyncio.create_task(task.run(), name=name)
            run.add_done_callback(lambda _: self._changed.set())
            self._runs[name] = run
            if task.clock.idle_ms and self._idle is None:
                self._idle = asyncio.create_task(self._idle_ticker(
                    min(task.clock.idle_ms.values())))
        self._room.set()
        self.consumer.wakeup()

    def store_positions(self) -> dict[str, int]:
        """Per task this container runs, the sum of its last checkpoint's changelog offsets;
        per standby task, the sum of its replicas' (the assignor prefers a member whose stores
        are at a task's checkpoint)."""
        out: dict[str, int] = {}
        for name in list(self._runs):
            out[name] = sum(self.checkpoints.read_changelogs(name).values())
        if self.standby is not None:
            for name, position in self.standby.positions().items():
                out.setdefault(name, position)
        return out

    def status(self) -> dict[str, Any]:
        out = super().status()
        a = self.assignment
        m = self.membership
        out["group"] = {
            "group": m.group if m is not None else None,
            "member": self._member_name(), "host": m.assignor.host if m is not None else None,
            "generation": self.generation,
            "active": sorted((t.name for t in self.tasks), key=_task_order),
            "standby": sorted(a.standby, key=_task_order) if a is not None else [],
            "restoring": sorted(self._restoring, key=_task_order),
            "owners": dict(a.owners) if a is not None else {},
            "rebalances": self.rebalances,
            "last_rebalance_at": self.last_rebalance_at,
            "last_rebalance_s": self.last_rebalance_s,
            "fenced": self.fenced,
            "task_partitions": {t.name: sorted([s.stream_id, s.partition] for s in t.ssps)
                                for t in self.job.tasks},
        }
        return out


def _readers_task(reader: Any) -> Any:
    """The task a reader key belongs to. A container of a group reads for each of its tasks
    apart (``_start_ready``), so a virtual task reads through a ``BucketFan`` of its own (it
    keeps its key bucket of the partition), and the fan belongs to that one task."""
    if isinstance(reader, BucketFan):
        return reader.tasks[0]
    return reader


def _task_order(name: str) -> tuple[int, str]:
    digits = "".join(c for c in name if c.isdigit())
    return (int(digits) if digits else -1, name)


def member_ids(container_id: int | None) -> tuple[str, str | None]:
    """This member's container label for the group, and its ``group_instance_id`` (static
    membership) when it has a container id."""
    if container_id is None:
        return f"pid-{os.getpid()}", None
    return str(container_id), f"container-{container_id}"


def host_name() -> str:
    return socket.gethostname()

