"""Standby copies of a Kafka job's stateful tasks (``job.standbytasks.replication.factor`` R,
under ``job.coordinator=kafka``; docs/several-machines.md).

The group's assignor gives each stateful task R-1 standbys, each on a member other than its
active one. A member's ``StandbyReplicas`` keeps, for each of its standby tasks, a replica of
each of the task's stores with a changelog: an LMDB store in the directory of ``job.dir`` the
task's own store would use (``LmdbStore.open_replica``), fed from the changelog topic by one
``read_committed`` consumer (no group) on a thread of its own, so that the tasks this member runs
never wait for it.

A replica is never ahead of the task's checkpoint: the consumer also tails the job's checkpoint
topic, and a changelog entry is applied only once a checkpoint of the task holds a changelog
offset past it (entries written after the active's last checkpoint may be compensated by the
next one to run the task). So when the task moves here, its store is at a changelog offset at or
below the checkpoint's, and ``LmdbStore.open`` replays only the tail between the two. Each
replica's offset goes to the group with the member's subscription, so the assignor hands a lost
task to the member whose replica is closest.

An interactive query with ``standby=true`` reads a replica from the container's loop (``read``:
its own LMDB read transactions, beside this thread's writes; a lock keeps the replica open
meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from runtime.engine import checkpoints
from runtime.engine.job import JobModel, TaskModel
from runtime.host.metrics import Metrics
from runtime.kafka.system import new_consumer
from runtime.state.lmdb_store import LmdbStore

__all__ = ["StandbyReplicas", "task_stores"]

_log = logging.getLogger("samza_dsl.standby")
_T = TypeVar("_T")

#: records a replica may hold fetched past its task's checkpoint before its partition pauses
_AHEAD_MAX = 50_000


def task_stores(job: JobModel, task: TaskModel, logged: Mapping[str, str]) -> list[str]:
    """The stores with a changelog (``logged``: store -> changelog topic) a task opens: a
    table's in every task, a window's or a join's where the task runs its operator."""
    ops = {op for stage in task.stages for op in stage.operators}
    return [name for name, spec in job.plan.stores.items()
            if name in logged and (spec.kind == "table" or spec.op_id in ops)]


@dataclass
class _Replica:
    """One store of a standby task: its changelog partition, the entries fetched past the
    task's checkpoint, and the checkpoint's changelog offset (the bound)."""

    task: str
    store: str
    tp: TopicPartition
    lmdb: LmdbStore
    bound: int = 0
    ahead: list[tuple[int, bytes, bytes | None]] = field(default_factory=list)
    #: the offset after the last record fetched (markers of transactions are never seen)
    fetched: int = 0


class StandbyReplicas:
    """This member's standby tasks, on a thread of their own: ``assign`` the tasks (it returns
    once the stores of tasks left out are closed), ``positions`` for the group, ``stop``."""

    def __init__(self, job: JobModel, servers: str, settings: Mapping[str, Any], *,
                 changelog_topics: Mapping[str, str], checkpoint_topic: str,
                 open_replica: Callable[[TaskModel, str], LmdbStore], metrics: Metrics,
                 label: Callable[[], str] = lambda: "") -> None:
        self.job = job
        self.servers = servers
        self.settings = {**settings, "isolation_level": "read_committed"}
        self.logged = dict(changelog_topics)
        self.checkpoint_tp = TopicPartition(checkpoint_topic, 0)
        self.open_replica = open_replica
        self.metrics = metrics
        self.label = label
        self._replicas: dict[tuple[str, str], _Replica] = {}
        #: held while a replica is read from another thread (``read``) and while the thread
        #: closes one: a reader never sees its LMDB environment close under it
        self._reading = threading.Lock()
        #: task -> store -> the changelog offset of the task's last checkpoint
        self._bounds: dict[str, dict[str, int]] = {}
        self._checkpoint_next = 0
        self._want: set[str] = set()
        self._asked = 0  # assign() calls, and the last one the thread carried out
        self._done = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: the thread's loop and the event that cuts its wait for records short (``assign``)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self.error: BaseException | None = None

    # -- the container's side -------------------------------------------------------------------

    def assign(self, tasks: set[str], timeout: float = 30.0) -> None:
        """Keep replicas of ``tasks`` (only those with stores) and close the others' before
        returning (a task that becomes active here opens the same directories)."""
        tasks = {t for t in tasks if task_stores(self.job, self.job.task(t), self.logged)}
        with self._cond:
            self._want = tasks
            self._asked += 1
            asked = self._asked
            if self._thread is None and tasks:
                self._thread = threading.Thread(target=self._serve, name="standby-replicas",
                                                daemon=True)
                self._thread.start()
            if self._thread is None or not self._thread.is_alive():
                self._done = asked  # nothing runs: nothing is open
                return
            self._interrupt()  # a takeover waits for this: not for the thread's fetch to end
            self._cond.wait_for(lambda: self._done >= asked or self._stop.is_set(), timeout)

    def tasks(self) -> list[str]:
        return sorted({task for task, _ in list(self._replicas)})

    def holding(self, store: str) -> list[str]:
        """The standby tasks of which this member holds an open replica of ``store``."""
        return sorted(task for task, name in list(self._replicas) if name == store)

    def read(self, task: str, store: str, fn: Callable[[LmdbStore], _T]
             ) -> tuple[_T, int | None] | None:
        """``fn(replica)`` for the replica of ``store`` of standby task ``task``, from any
        thread (``fn`` reads it in LMDB read transactions of its own, beside the thread's
        writes), and the changelog offset of the task's last checkpoint the thread has seen
        (None: none yet); None when this member holds no such replica now."""
        with self._reading:
            r = self._replicas.get((task, store))
            if r is None or r.lmdb.lmdb.env is None:
                return None
            bound = self._bounds.get(task, {}).get(store)
            return fn(r.lmdb), (None if bound is None else max(int(bound), r.bound))

    def positions(self) -> dict[str, int]:
        """Per standby task: the sum of its replicas' changelog offsets."""
        out: dict[str, int] = {}
        for (task, _), r in list(self._replicas.items()):
            out[task] = out.get(task, 0) + r.lmdb.position
        return out

    def _interrupt(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # its loop has just closed
                loop.call_soon_threadsafe(wake.set)

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._interrupt()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the thread -----------------------------------------------------------------------------

    def _serve(self) -> None:
        try:
            asyncio.run(self._tail())
        except BaseException as exc:  # standbys stop; the tasks this member runs go on
            self.error = exc
            _log.warning("container %s: standby replicas stopped: %s: %s (a task that moves "
                         "here restores from its changelog)", self.label(), type(exc).__name__,
                         exc)
        finally:
            self._close_all()
            with self._cond:
                self._done = self._asked
                self._cond.notify_all()

    async def _tail(self) -> None:
        consumer = new_consumer(self.servers, self.settings)
        self._wake = wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        try:
            await consumer.start()
            assigned: set[TopicPartition] = set()
            while not self._stop.is_set():
                wake.clear()
                assigned = self._reassign(consumer, assigned)
                try:
                    batch = await _unless(wake, consumer.getmany(timeout_ms=200,
                                                                 max_records=10_000))
                except KafkaError as exc:  # brokers away: try again, as the job's consumer does
                    _log.info("standby replicas: %s", exc)
                    await asyncio.sleep(0.5)
                    continue
                by_tp = {r.tp: r for r in self._replicas.values()}
                for tp, records in batch.items():
                    if tp == self.checkpoint_tp:
                        self._checkpoints(records)
                    elif tp in by_tp:
                        by_tp[tp].ahead.extend((r.offset, r.key, r.value) for r in records
                                               if r.key is not None)
                        by_tp[tp].fetched = records[-1].offset + 1
                for r in list(self._replicas.values()):
                    await self._advance(consumer, r)
        finally:
            self._loop = None
            with contextlib.suppress(KafkaError, OSError, asyncio.CancelledError):
                await consumer.stop()

    def _reassign(self, consumer: Any, assigned: set[TopicPartition]) -> set[TopicPartition]:
        """Close the replicas of tasks no longer wanted and open those of new ones; the
        consumer reads the checkpoint topic and their changelog partitions."""
        with self._cond:
            want, asked = set(self._want), self._asked
        for key, r in list(self._replicas.items()):
            if r.task not in want:
                with self._reading:
                    del self._replicas[key]
                    r.lmdb.close()
        for task in sorted(want - {t for t, _ in self._replicas}):
            self._open(task)
        tps = {self.checkpoint_tp, *(r.tp for r in self._replicas.values())}
        if tps != assigned:
            consumer.assign(sorted(tps))
            consumer.seek(self.checkpoint_tp, self._checkpoint_next)
            for r in self._replicas.values():
                consumer.seek(r.tp, r.fetched)
        with self._cond:
            self._done = max(self._done, asked)
            self._cond.notify_all()
        return tps

    def _open(self, task: str) -> None:
        model = self.job.task(task)
        opened: list[_Replica] = []
        try:
            for store in task_stores(self.job, model, self.logged):
                lmdb = self.open_replica(model, store)
                opened.append(_Replica(task, store, TopicPartition(self.logged[store],
                                                                   model.index),
                                       lmdb, fetched=lmdb.position))
        except Exception as exc:  # still open elsewhere here (a restore that is ending)
            for r in opened:
                r.lmdb.close()
            _log.info("container %s: standby of task %s waits: %s", self.label(), task, exc)
            return
        for r in opened:
            r.bound = self._bounds.get(task, {}).get(r.store, 0)
            with self._reading:
                self._replicas[(task, r.store)] = r
        _log.info("container %s: standby of task %s from changelog offsets %s", self.label(),
                  task, {r.store: r.lmdb.position for r in opened})

    def _checkpoints(self, records: list[Any]) -> None:
        for rec in records:
            self._checkpoint_next = rec.offset + 1
            if rec.key is None or rec.value is None or rec.key.startswith(b"__"):
                continue
            try:
                data = checkpoints.decode(rec.value)
            except msgspec.DecodeError:
                continue
            task = rec.key.decode(errors="replace")
            logs = checkpoints.changelogs_of(data)
            if logs:
                self._bounds.setdefault(task, {}).update(logs)
                for store, offset in logs.items():
                    r = self._replicas.get((task, store))
                    if r is not None:
                        r.bound = max(r.bound, int(offset))

    async def _advance(self, consumer: Any, r: _Replica) -> None:
        """Apply the fetched entries below the task's checkpoint; pause a partition that ran
        far ahead of it."""
        n = 0
        while n < len(r.ahead) and r.ahead[n][0] < r.bound:
            n += 1
        upto = r.bound if r.fetched >= r.bound and n == len(r.ahead) else \
            (r.ahead[n - 1][0] + 1 if n else r.lmdb.position)
        if n or upto > r.lmdb.position:
            take, r.ahead = r.ahead[:n], r.ahead[n:]
            r.lmdb.replicate([o for o, _, _ in take], [(k, v) for _, k, v in take],
                             max(upto, r.lmdb.position))
            self.metrics.inc("standby-entries", len(take))
        if len(r.ahead) > _AHEAD_MAX:
            consumer.pause(r.tp)
        elif r.tp in consumer.paused():
            consumer.resume(r.tp)

    def _close_all(self) -> None:
        with self._reading:
            for r in self._replicas.values():
                with contextlib.suppress(Exception):
                    r.lmdb.close()
            self._replicas.clear()


async def _unless(wake: asyncio.Event, fetch: Awaitable[dict[Any, list[Any]]]
                  ) -> dict[Any, list[Any]]:
    """What ``fetch`` gets, or nothing if ``wake`` is set first (the fetch is cancelled: the
    consumer's records stay in its fetcher for the next one)."""
    got = asyncio.ensure_future(fetch)
    woken = asyncio.ensure_future(wake.wait())
    try:
        await asyncio.wait((got, woken), return_when=asyncio.FIRST_COMPLETED)
    finally:
        woken.cancel()
    if got.done():
        return got.result()
    got.cancel()
    await asyncio.gather(got, return_exceptions=True)
    return {}
