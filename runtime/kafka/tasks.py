"""The task lifecycle of a member of a Kafka job's consumer group (``job.coordinator=kafka``,
docs/several-machines.md): which tasks run in this container, as the group deals them.

``GroupTasks`` has the shape of Kafka Streams' ``TaskManager``: the container holds it
(``Container.lifecycle``, ``runtime.engine.systems.TaskLifecycle``) and runs its tasks as it hands
them in and out, through the container's ``build_task``, ``attach``, ``detach`` and ``read_on``.
On a revocation it stops handing out, lets the messages in flight complete (bounded by
``task.shutdown.ms``) and commits each task in Samza's order (``runtime.engine.commit``); on the
assignment that follows, the tasks it keeps go on with their stores open, the tasks it lost are
closed, and new tasks have their stores restored in a worker thread, their inputs unread until
their stores are ready, never inside the group's callback. It keeps the replicas of this member's
standby tasks (``runtime.kafka.standby``), drops every task when the member is fenced
(``runtime.kafka.fence``), and records the member's share where ``samza-dsl status`` reads it.

What it needs of the system is typed here and in ``runtime.engine.systems``: a consumer whose readers
come and go (``RebalancingConsumer``), the group's checkpoints (``GroupCheckpoints``: per-task
checkpoints, the stamp of each, the member records) and a state backend that closes one task's
stores (``TaskStores``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from runtime.engine.container import Container
from runtime.engine.elastic import fan_readers
from runtime.engine.job import JobModel, TaskModel
from runtime.engine.systems import CheckpointStore, RebalancingConsumer, StateBackend
from runtime.engine.task import TaskInstance
from runtime.kafka.assignor import MemberTasks
from runtime.kafka.exactly_once import KafkaTransactions
from runtime.kafka.fence import Fenced
from runtime.kafka.group import GroupMembership
from runtime.kafka.outage import KafkaDataLost, KafkaUnavailable
from runtime.kafka.standby import StandbyReplicas
from runtime.kafka.system import KafkaProducer
from samza_dsl.errors import ProducerFenced, SamzaError, TransactionUnanswered

__all__ = ["GroupCheckpoints", "GroupTasks", "TaskStores"]

_log = logging.getLogger("samza_dsl.group")


class GroupCheckpoints(CheckpointStore, Protocol):
    """The job's checkpoints as a member of its group reads and writes them
    (``runtime.kafka.system.KafkaCheckpoints``): each task's checkpoint, stamped with the
    member's group generation and name, and one record per member of what it runs."""

    #: what each checkpoint written from now on is stamped with (``runtime.engine.checkpoints``)
    stamp: dict[str, Any]

    async def write_member(self, name: str, info: Mapping[str, Any] | None) -> None:
        """Member ``name``'s share after a rebalance, for ``samza-dsl status`` (None: it left
        the group)."""
        ...


class TaskStores(StateBackend, Protocol):
    """A state backend whose tasks come and go (``runtime.state.backend.StoreBackend``)."""

    #: (task, store) -> what opening the store did: mode, entries replayed, from where
    restores: dict[tuple[str, str], dict[str, Any]]

    def close_task(self, task_name: str) -> None:
        """Close the stores of a task this container no longer runs."""
        ...


class GroupTasks:
    """The tasks a container runs as its consumer group deals them (module docstring)."""

    def __init__(self, container: Container, *,
                 membership: Callable[[GroupTasks], GroupMembership],
                 prepare: Callable[[list[TaskModel], bool], Awaitable[None]],
                 consumer: RebalancingConsumer, checkpoints: GroupCheckpoints,
                 state: TaskStores, transactions: KafkaTransactions | None = None,
                 standby: StandbyReplicas | None = None, job_dir: str | None = None) -> None:
        self.container = container
        self.job: JobModel = container.job
        self.consumer = consumer
        self.checkpoints = checkpoints
        self.state = state
        #: this member's job.dir (``samza-dsl status`` shows where its stores are)
        self.job_dir = None if job_dir is None else os.path.abspath(job_dir)
        #: exactly once: the tasks' transactional producers (also the committer's
        #: ``transactions``); a task's closes as the task leaves. None: at least once
        self.transactions = transactions
        #: the Kafka producer, whose sends stop at the member's lease (``runtime.kafka.fence``)
        self.leased: KafkaProducer | None = \
            container.producer if isinstance(container.producer, KafkaProducer) else None
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
        #: per task being restored, its checkpoint's changelog offsets
        self._changelogs: dict[str, dict[str, int]] = {}
        #: the active tasks of the group's last assignment
        self.wanted: set[str] = set()
        self.holding = False
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._error: BaseException | None = None
        self._first = True  # no task came to this container yet
        self.shutdown_s = container.config.task.shutdown_ms / 1000.0
        #: the generation of the last assignment, and when and how long the last rebalance took
        self.generation = -1
        self.assignment: MemberTasks | None = None
        self.rebalances = 0
        self.last_rebalance_s: float | None = None
        self.last_rebalance_at: float | None = None
        #: how many times this member was fenced out of its group
        self.fenced = 0
        #: the generation in which a task's producer was fenced and the member said so
        self._producer_fenced_in: int | None = None
        self._announcing: set[asyncio.Task[None]] = set()
        self._revoked_at: float | None = None

    @property
    def tasks(self) -> list[TaskInstance]:
        """The tasks running here now."""
        return self.container.tasks

    # -- what the container calls (``runtime.engine.systems.TaskLifecycle``) --------------------------

    def stop_requested(self) -> None:
        self._changed.set()

    def health_state(self) -> tuple[str, bool, int]:
        """Ready once the group dealt this member its tasks and their stores are restored."""
        c = self.container
        if c.closed:
            return "stopped", False, 0
        if c.env.stopping:
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

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Join the group: its membership on a thread of its own."""
        self.membership = self._membership_of(self)
        self._revoked_at = time.monotonic()  # its first rebalance: from when it joins
        if self.leased is not None:  # it sends nothing past the member's lease
            self.leased.lease = self.membership.lease
        self.membership.start(loop)

    async def serve(self) -> None:
        """Until stopped (every task committed) or failed."""
        while True:
            self._changed.clear()
            if self._error is not None:
                raise self._error
            for name, run in list(self._runs.items()):
                if not run.done() or run.cancelled():
                    continue
                exc = run.exception()
                # a task that learnt the member was fenced is dropped by on_fenced
                if exc is None or isinstance(exc, Fenced):
                    continue
                if isinstance(exc, ProducerFenced | TransactionUnanswered):
                    await self._producer_fenced(name, exc)
                    continue
                raise exc
            if self.container.env.stopping and all(r.done() for r in self._runs.values()):
                return
            await self._changed.wait()

    async def leave(self) -> list[asyncio.Task[None]]:
        """Out of the group, the standbys stopped, the restores under way settled; the runs of
        the tasks it had, for the container to close."""
        if self.membership is not None:
            await asyncio.to_thread(self.membership.stop, self.shutdown_s + 10.0)
        if self.standby is not None:
            await asyncio.to_thread(self.standby.stop)
        await self._settle_restores()
        self._leave_lease()
        if self.assignment is not None:  # it left the group
            await self._write_member(None)
        return list(self._runs.values())

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

    # -- the group's callbacks (on the container's loop; ``runtime.kafka.group``) -----------------

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
            names = sorted((t.name for t in self.tasks), key=_task_order)
            for t in list(self.tasks):
                await self._drop(t)
            for name, task in list(self._ready.items()):
                self._discard(task)
                del self._ready[name]
            dropped = self.leased.discard() if self.leased is not None else 0
            self.wanted = set()
            self.holding = True
            if not names and not dropped and self._producer_fenced_in == self.generation:
                # the same event, learned a second way: the producers' fencing already stopped
                # this generation's tasks and said so; one line per fencing
                _log.debug("container %s: the group's fencing at generation %d (%s) found no "
                           "task left to drop", self._label(), self.generation, reason)
                return
            self.fenced += 1
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
        (``TransactionUnanswered``: tansu answers a fenced EndTxn with nothing) goes the
        same way: the next producer of the id settles the transaction, so nothing is lost and
        nothing becomes visible twice."""
        async with self._lock:
            task = next((t for t in self.tasks if t.name == name), None)
            if task is None:
                return
            await self._drop(task)
            self.fenced += 1
            self._producer_fenced_in = self.generation
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
            if self.container.env.stopping or self.container.closed:
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
            self.container.env.task_share = len(self.wanted) / max(1, len(self.job.tasks))
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
            info = self.state.restores.get((m.name, store), {})
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
                "container": self.membership.assignor.container, "job_dir": self.job_dir,
                "generation": a.generation, "active": sorted(a.active, key=_task_order),
                "standby": sorted(a.standby, key=_task_order),
                "restoring": [m.name for m in restoring], "rebalance_at": time.time(),
                "rebalance_s": self.last_rebalance_s,
                "query": self.container.query.url if self.container.query is not None else None}
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
        gone = self.container.detach(t)
        self.consumer.remove(gone)
        self._discard(t)

    def _discard(self, t: TaskInstance) -> None:
        t.close()
        self.state.close_task(t.name)
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
                self.container.committer.seed(m.name, offsets)
                inputs = self.job.plan.app.inputs
                resumed = {ssp: o for ssp, o in offsets.items()
                           if ssp.stream_id not in inputs
                           or not inputs[ssp.stream_id].side_input_of}
                self._changelogs[m.name] = self.checkpoints.read_changelogs(m.name)
                self._opened[m.name] = await asyncio.to_thread(self._open_stores, m)
                self._restored(m)
                opened = self._opened.pop(m.name, {})
                self._ready[m.name] = self.container.build_task(
                    m, resumed, self._changelogs.pop(m.name), opened)
        except Fenced:  # the member was fenced meanwhile: none of them starts; it joins again
            for m in models:
                self._opened.pop(m.name, None)
                self._changelogs.pop(m.name, None)
                built = self._ready.pop(m.name, None)
                if built is not None:
                    self._discard(built)
                else:
                    self.state.close_task(m.name)
            return
        except Exception as exc:  # the container fails with it (``serve`` raises it)
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
                except (KafkaUnavailable, KafkaDataLost):  # the brokers', told as anywhere
                    raise
                except Exception as exc:  # those opened close with the container
                    raise SamzaError(
                        f"container {self._label()}: task {m.name!r} came to it and its store "
                        f"{name!r} could not be opened and restored: {type(exc).__name__}: "
                        f"{exc}; the container stopped (the group deals its tasks to the other "
                        f"members): fix the cause under job.dir and start it again") from exc
        return out

    async def _start_ready(self) -> None:
        """Start the restored tasks of the current assignment (not while the group
        rebalances): their inputs are read from their checkpoints."""
        if self.holding or self.container.env.stopping:
            return
        for name in sorted(self._ready, key=_task_order):
            task = self._ready.pop(name, None)
            if task is None:  # started meanwhile (another restore's start, at an await below)
                continue
            if name not in self.wanted or self.container.env.stopping:
                self._discard(task)
                continue
            resumed = self.container.restored.get(name, {})
            entries = fan_readers([task], self.job, {name: resumed})
            keys = [(reader, ssp) for reader, ssp, _ in entries]
            await self.consumer.add(
                [(k, k[1], None if s is None else s + 1)
                 for k, (_, _, s) in zip(keys, entries, strict=True)])
            await self.container.attach(task, keys)
            if self.container.env.stopping:
                # the stop came at an await above, and the runs to wait for may be collected
                # already (``leave``): a run started now would commit after its producer
                # closed. The task never ran; it closes with the container.
                continue
            run = asyncio.create_task(task.run(), name=name)
            run.add_done_callback(lambda _: self._changed.set())
            self._runs[name] = run
        self.container.read_on()

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
        """The container's status's ``group``: this member's share, its last rebalance."""
        a = self.assignment
        m = self.membership
        return {"group": {
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
        }}


def _task_order(name: str) -> tuple[int, str]:
    digits = "".join(c for c in name if c.isdigit())
    return (int(digits) if digits else -1, name)
