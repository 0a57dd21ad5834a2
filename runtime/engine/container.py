"""A container: one asyncio loop running a set of tasks, one consumer, one producer.

The consumer loop fetches batches for the partitions whose tasks have room (a task's inbox is
bounded: a full inbox pauses its partitions, which is the backpressure), timers request window
ticks and commits, and a watchdog enforces ``task.callback.timeout.ms``.

A task commits through the container's ``Committer`` (``runtime.engine.commit``, by
docs/semantics.md rule 16); tasks see the container only through their ``TaskEnv``
(``runtime.engine.task_env``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from runtime.engine.codec import keep_earlier_watermarks
from runtime.engine.collector import messages_die_young
from runtime.engine.commit import Committer
from runtime.engine.container_status import ContainerStatus, LoopMeter
from runtime.engine.elastic import fan_readers, tasks_of
from runtime.engine.job import SSP, JobModel, TaskModel
from runtime.engine.origins import OriginList, origin_of_headers, origin_source
from runtime.engine.query import QueryEndpoint
from runtime.engine.systems import (
    CheckpointStore,
    Consumer,
    Producer,
    StateBackend,
    TaskLifecycle,
)
from runtime.engine.task import TaskInstance
from runtime.engine.task_env import TaskEnv
from runtime.host.health import HealthServer, health_address
from runtime.host.metrics import Metrics
from runtime.host.tracing import job_tracing
from runtime.host.watchdog import DaemonPool
from runtime.state.remote import close_table_functions
from samza_dsl.errors import SamzaError
from samza_dsl.jobconfig import JobConfig

_log = logging.getLogger(__name__)


def _origin_positions(payloads: Any) -> Callable[[int], tuple[str, int, int] | None] | None:
    """(stream, partition, offset) of the origin of record i of a batch of an intermediate
    stream, for its trace; None where the batch's records carry no origins."""
    if type(payloads) is not OriginList:
        return None
    origins, names = payloads.origins, payloads.names

    def at(i: int) -> tuple[str, int, int] | None:
        o = origins[i]
        full = o if o.__class__ is not int else origin_of_headers(o, names)
        if full is None:
            return None
        stream, part, off = origin_source(full).rsplit("/", 2)
        return stream, int(part), int(off)
    return at

__all__ = ["Container", "CheckpointStore", "MemoryCheckpoints", "Consumer", "Producer",
           "TaskLifecycle", "messages_die_young"]

INBOX_LIMIT = 4096  # records a task's inbox holds before its inputs are read no more
#: a task's intermediate partitions are read on past INBOX_LIMIT, up to this many records in its
#: inbox, and a poll hands each up to DOWNSTREAM_FETCH: the task takes them before its inputs
#: (``runtime.engine.chooser``), so a stage keeps up with the stages that write to it
DOWNSTREAM_LIMIT = 4 * INBOX_LIMIT
DOWNSTREAM_FETCH = 8192


def wall_ms(_ns: Callable[[], int] = time.time_ns) -> int:
    """The wall clock in whole milliseconds: the processing time operators read (a join reads
    it once per message, so it takes one call and an integer division)."""
    return _ns() // 1_000_000



FETCH_BATCH = 1024



class FactoryState(StateBackend):
    """A state backend over a ``store_factory(task_name, store_name)``: stores without changelogs
    (the in-memory store of ``TestRunner``)."""

    def __init__(self, factory: Callable[[str, str], Any]) -> None:
        self.factory = factory

    def open(self, task: TaskModel, store_name: str, checkpointed: int | None) -> Any:
        return self.factory(task.name, store_name)

    def flush(self, task_name: str) -> None:
        return None

    def committed(self, task_name: str) -> dict[str, int]:
        return {}

    def close(self) -> None:
        return None


class MemoryCheckpoints(CheckpointStore):
    def __init__(self) -> None:
        self.checkpoints: dict[str, dict[SSP, int]] = {}
        self.changelogs: dict[str, dict[str, int]] = {}
        self.history: list[tuple[str, dict[SSP, int]]] = []
        #: per task, its sinks' record (``runtime.engine.sinks``): set before a write, kept by it
        self.sinks: dict[str, Any] = {}
        self.sinks_written: dict[str, Any] = {}
        #: per task, its event-time progress as of its last write (not read back: a run in
        #: memory never restarts from it)
        self.times: dict[str, Any] = {}
        #: per task, what it applied of its intermediate streams (none: a run in memory never
        #: replays)
        self.applied: dict[str, Any] = {}

    def read(self, task_name: str) -> dict[SSP, int]:
        return dict(self.checkpoints.get(task_name, {}))

    def read_changelogs(self, task_name: str) -> dict[str, int]:
        return dict(self.changelogs.get(task_name, {}))

    def read_sinks(self, task_name: str) -> dict[str, Any]:
        return dict(self.sinks_written.get(task_name, {}))

    def write(self, task_name: str, offsets: Mapping[SSP, int],
              changelogs: Mapping[str, int] | None = None) -> None:
        snapshot = dict(offsets)
        self.checkpoints.setdefault(task_name, {}).update(snapshot)
        if changelogs:
            self.changelogs.setdefault(task_name, {}).update(changelogs)
        if task_name in self.sinks:
            self.sinks_written[task_name] = self.sinks[task_name]
        self.history.append((task_name, snapshot))



class Container(ContainerStatus):
    def __init__(self, job: JobModel, tasks: list[TaskModel], *, consumer: Consumer,
                 producer: Producer,
                 checkpoints: CheckpointStore, store_factory: Callable[[str, str], Any] | None = None,
                 config: Mapping[str, Any], clock: Callable[[], int] | None = None,
                 metrics: Metrics | None = None, state: StateBackend | None = None,
                 bounded: bool = False) -> None:
        self.job = job
        #: the run ends where its inputs end (no --follow): it is watched for stalls
        self.bounded = bounded
        self.task_models = tasks
        self.consumer = consumer
        self.producer = producer
        self.checkpoints = checkpoints
        if state is None:
            if store_factory is None:
                raise TypeError("Container needs a state backend or a store_factory")
            state = FactoryState(store_factory)
        self.state = state
        self._changelogs: dict[str, dict[str, int]] = {}
        #: per task being built, its stores opened and restored ahead (``build_task``)
        self._opened: dict[str, dict[str, Any]] = {}
        #: (reader, ssp) per input partition read: a reader is a task, or the virtual tasks of
        #: one partition
        self._keys: list[tuple[Any, SSP]] = []
        #: the look at idle partitions, for tasks that came while the container ran (``attach``)
        self._idle: asyncio.Task[None] | None = None
        #: which tasks run here when they come and go while it runs (None: those it was built
        #: with, from start to end)
        self.lifecycle: TaskLifecycle | None = None
        self.config = JobConfig.validated(config)
        if self.config.job.exactly_once:
            keep_earlier_watermarks(consumer.codecs, job.producer_names())
        self.clock = clock or wall_ms
        self.metrics = metrics or Metrics()
        pool = self.config.job.thread_pool_size
        # daemon threads: a blocking call that never returns does not hold the process at exit
        self.executor = DaemonPool(pool, "samza-task") if pool else None
        self.tasks: list[TaskInstance] = []
        self._room = asyncio.Event()
        self.closed = False
        #: the asyncio task that runs the container, and the error ``abort`` ended it with
        self._running: asyncio.Task[Any] | None = None
        self._aborted: BaseException | None = None
        #: the error a clean stop ends the run with (``stop_with``)
        self._stop_error: BaseException | None = None
        #: loops that run beside the consumer while the container runs (a check of its
        #: streams' partition counts, ``runtime.engine.partition_counts``)
        self.beside: list[Callable[[], Coroutine[Any, Any, None]]] = []
        self.committer = Committer(producer, self.state, checkpoints)
        #: what each task gets: not the container, the few things a task uses of it
        self.env = TaskEnv(self.config, self.clock, self.metrics, self.executor, producer,
                           self.store, self.committer, self.on_consumed,
                           task_share=len(tasks) / max(1, len(job.tasks)),
                           clock_ns=time.time_ns if self.clock is wall_ms else None,
                           tracing=job_tracing(self.config, service=job.plan.job_name,
                                               origins=_origin_positions))
        if self.env.tracing is not None:  # records read with a traceparent continue its trace
            for codec in consumer.codecs.values():
                codec.note_traces = self.env.tracing.note
        self.started = time.monotonic()
        self.restored: dict[str, dict[SSP, int]] = {}
        self.loop_meter = LoopMeter()
        #: the metrics reporters (``runtime.host.reporters``), set by the job when it has any
        self.reporters: Any = None
        #: the health endpoint (``job.health.port``) and the phase it reports: starting,
        #: restoring, running (ready), stopped
        self.health: HealthServer | None = None
        #: the interactive query endpoint (``query.enabled``, ``runtime.engine.query``)
        self.query: QueryEndpoint | None = None
        self.phase = "starting"
        self.metrics.collectors.append(self.samples)
        self.metrics.operators = bool(self.config.metrics.operators)

    def store(self, task: TaskModel, store_name: str) -> Any:
        """A task's store, restored to the task's checkpoint (the one opened ahead by
        ``build_task``'s caller when there is one)."""
        opened = self._opened.get(task.name)
        if opened is not None and store_name in opened:
            return opened.pop(store_name)
        return self.state.open(task, store_name,
                               self._changelogs.get(task.name, {}).get(store_name))

    # -- lifecycle --------------------------------------------------------------------------------

    async def run(self) -> None:
        # The job's long-lived objects (the plan, operators, loaded modules, inputs given in
        # memory) need no scans by the cycle collector, and messages die young: fewer, cheaper
        # collections while running (the tasks are built after the freeze: building them
        # allocates enough to set off a full collection of everything there is otherwise).
        with messages_die_young():
            self._running = asyncio.current_task()
            try:
                await self._run()
                if self._stop_error is not None:
                    raise self._stop_error
            except asyncio.CancelledError:
                if self._aborted is None:
                    raise
                asyncio.current_task().uncancel()  # type: ignore[union-attr]  # abort's own
                raise self._aborted from None
            finally:
                self._running = None

    async def _run(self) -> None:
        if self.lifecycle is not None:
            await self._run_dealt(self.lifecycle)
            return
        runs: list[asyncio.Task[None]] = []
        helpers: list[asyncio.Task[None]] = []
        try:  # a failure while the tasks are built (a restore, an operator's init) closes too
            await self.start_health()
            self.phase = "restoring"
            await self._start_tasks()
            helpers = self._helpers()
            runs = [asyncio.create_task(t.run(), name=t.name) for t in self.tasks]
            self.phase = "running"
            self.loop_meter.install(asyncio.get_running_loop())
            if self.reporters is not None:
                self.reporters.start()
            if not runs:  # more containers than tasks: this one has none, and is done
                _log.info("this container has no task (the job has %d task(s)); it ends",
                          len(self.job.tasks))
                return
            done, _ = await asyncio.wait(runs, return_when=asyncio.FIRST_EXCEPTION)
            for fut in done:
                exc = fut.exception()
                if exc is not None:
                    raise exc
        finally:
            await self._close(runs, helpers)

    async def _run_dealt(self, lifecycle: TaskLifecycle) -> None:
        """The tasks ``lifecycle`` deals to this container as they come and go, until it is
        stopped (every task committed) or fails."""
        loop = asyncio.get_running_loop()
        await self.start_health()
        helpers = self._helpers()
        lifecycle.start(loop)
        self.loop_meter.install(loop)
        if self.reporters is not None:
            self.reporters.start()
        try:
            await lifecycle.serve()
        finally:
            self.loop_meter.uninstall()
            self.env.stopping = True  # a late assignment starts nothing now
            runs = await lifecycle.leave()
            await self._close(runs, helpers)

    # -- tasks that come and go (``TaskLifecycle``) -----------------------------------------------

    def build_task(self, model: TaskModel, offsets: Mapping[SSP, int],
                   changelogs: Mapping[str, int], opened: Mapping[str, Any] | None = None,
                   ) -> TaskInstance:
        """A task that comes while the container runs, resumed from its checkpoint: ``offsets``
        (its input positions, side inputs left out), its stores restored to ``changelogs``
        (those in ``opened`` were opened and restored already, in a worker thread) and its
        event time as the checkpoint store keeps it. It does not run until ``attach``."""
        self.restored[model.name] = dict(offsets)
        self._changelogs[model.name] = dict(changelogs)
        self._opened[model.name] = dict(opened or {})
        try:
            task = TaskInstance(model, self.job, self.env)
            restore_progress(task, self.checkpoints)
        finally:
            self._opened.pop(model.name, None)
        for ssp in task.ssps:
            start = offsets.get(ssp)
            if start is not None:
                task.checkpoint[ssp] = start
        return task

    async def attach(self, task: TaskInstance, keys: list[tuple[Any, SSP]]) -> None:
        """A task built by ``build_task`` runs here from now on (the caller starts its run),
        read by its readers ``keys`` (already given to the consumer): its clock learns which
        inputs have records still to read, and it where its bootstrap partitions end now."""
        wire_behind(self.consumer, keys)
        self.tasks.append(task)
        self._keys = [*self._keys, *keys]
        await self._bootstrap(keys)
        if task.clock.idle_ms and self._idle is None:
            self._idle = asyncio.create_task(self._idle_ticker(min(task.clock.idle_ms.values())))

    def detach(self, task: TaskInstance) -> list[tuple[Any, SSP]]:
        """A task runs here no more (the caller stopped its run and closes it): its readers,
        which the caller takes from the consumer, and its commits are forgotten."""
        gone = [k for k in self._keys if task in tasks_of(k[0])]
        self._keys = [k for k in self._keys if task not in tasks_of(k[0])]
        self.tasks.remove(task)
        self.committer.forget(task.name)
        return gone

    def read_on(self) -> None:
        """The tasks read changed (tasks came): the consumer looks at them again."""
        self._room.set()
        self.consumer.wakeup()

    async def _start_tasks(self) -> None:
        """The tasks, each resumed from its checkpoint, and their partitions registered with
        the consumer; the bootstrap partitions' ends as of now."""
        restored = {m.name: self.checkpoints.read(m.name) for m in self.task_models}
        for name, offsets in restored.items():
            self.committer.seed(name, offsets)
        inputs = self.job.plan.app.inputs
        for offsets in restored.values():  # side inputs refill their tables from the oldest
            for ssp in [ssp for ssp in offsets
                        if _side_input(inputs, ssp)]:
                del offsets[ssp]
        #: the checkpoint each task resumed from ({} for a task that starts afresh)
        self.restored = restored
        self._changelogs = {m.name: self.checkpoints.read_changelogs(m.name)
                            for m in self.task_models}
        for m in self.task_models:  # one by one: those built are closed if the next fails
            self.tasks.append(TaskInstance(m, self.job, self.env))
            restore_progress(self.tasks[-1], self.checkpoints)
        self._keys = []
        for t in self.tasks:
            for ssp in t.ssps:
                start = restored[t.name].get(ssp)
                if start is not None:
                    t.checkpoint[ssp] = start
        for reader, ssp, start in fan_readers(self.tasks, self.job, restored):
            key = (reader, ssp)  # a task, or the virtual tasks of one partition
            self._keys.append(key)
            # None: no checkpoint, the consumer starts where the input's offset_default says
            self.consumer.register(key, ssp, None if start is None else start + 1)
        wire_behind(self.consumer, self._keys)
        await self._bootstrap()

    def _helpers(self) -> list[asyncio.Task[None]]:
        """The consumer, the timers of window ticks and commits, the watchdog, the loops that
        run beside them."""
        return [asyncio.create_task(self._consume(), name="consumer"), *self._timers(),
                *(asyncio.create_task(run(), name="beside") for run in self.beside)]

    def _timers(self) -> list[asyncio.Task[None]]:
        """The helpers that wake the tasks: window ticks, commits, the callback watchdog, and
        the look at idle partitions."""
        helpers: list[asyncio.Task[None]] = []
        window_ms = self.config.task.window_ms
        commit_ms = self.config.task.commit_ms
        if window_ms > 0:
            helpers.append(asyncio.create_task(self._ticker(window_ms, "window_requested")))
        if commit_ms > 0:
            helpers.append(asyncio.create_task(self._ticker(commit_ms, "commit_requested")))
        if self.config.task.callback_timeout_ms > 0:
            helpers.append(asyncio.create_task(self._watchdog()))
        stall_ms = self.config.job.bounded_stall_ms
        if self.bounded and stall_ms > 0:
            helpers.append(asyncio.create_task(self._stall_watch(stall_ms / 1000.0)))
        idle = [t.clock for t in self.tasks if t.clock.idle_ms]
        if idle:  # idle partitions are noticed without data coming
            helpers.append(asyncio.create_task(self._idle_ticker(min(
                ms for c in idle for ms in c.idle_ms.values()))))
        return helpers

    async def start_health(self) -> None:
        """Serve ``/healthz`` and ``/ready`` (``runtime.host.health``) when ``job.health.port`` says,
        and interactive queries (``runtime.engine.query``) when ``query.enabled`` does."""
        where = health_address(self.config, self.config.job.container_id or 0)
        if where is not None and self.health is None:
            self.health = HealthServer(
                self.health_state, lambda: sum(t.processed for t in list(self.tasks)),
                self.config.health.liveness_ms / 1000.0)
            await self.health.start(*where)
        if self.config.query.enabled and self.query is None:
            self.query = QueryEndpoint(self)
            self.query.start()

    def health_state(self) -> tuple[str, bool, int]:
        """What the health endpoint says: the phase, whether ready, the tasks this runs."""
        if self.lifecycle is not None:
            return self.lifecycle.health_state()
        phase = "stopping" if self.env.stopping and not self.closed else self.phase
        return phase, phase == "running", len(self.tasks)

    async def _close(self, runs: list[asyncio.Task[None]],
                     helpers: list[asyncio.Task[None]] | None = None) -> None:
        """Everything the run opened, closed, on every path: the tasks, the remote tables'
        sessions, the reporters, the producer (after its last flush), stores and consumer."""
        self.phase = "stopped"
        if self.health is not None:
            await self.health.close()
        if self.query is not None:
            await asyncio.to_thread(self.query.close)
        self.loop_meter.uninstall()
        self.closed = True
        self._room.set()
        if self._idle is not None:
            helpers = [*(helpers or ()), self._idle]
        for fut in [*runs, *(helpers or ())]:
            fut.cancel()
        await asyncio.gather(*runs, *(helpers or ()), return_exceptions=True)
        try:
            for t in self.tasks:
                t.cancel_calls()  # a call left running would open a session after the close
                t.close()
                sinks = self.committer.sinks.get(t.name)
                if sinks is not None:  # aborted unless the task ended with its last commit
                    sinks.close(failed=not t.done)
        finally:
            try:
                if self.job.plan.app.remote_tables:  # their client sessions live on this loop
                    await close_table_functions(self.job.plan.app.remote_tables.values())
                if self.reporters is not None:  # the run's totals, before the last flush
                    await self.reporters.close()
                await self.producer.flush()
            finally:
                try:
                    self.state.close()
                    await self.consumer.close()
                finally:
                    await self.producer.close()
                if self.executor is not None:
                    self.executor.shutdown(wait=False, cancel_futures=True)
                if self.reporters is not None:
                    self.reporters.stop_server()
                if self.env.tracing is not None:
                    self.env.tracing.close()

    @property
    def stopping(self) -> bool:
        return self.env.stopping

    def request_stop(self) -> None:
        """A clean shutdown: stop handing out messages, drain, commit, close."""
        self.env.stopping = True
        for t in self.tasks:
            t.wake.set()
        if self.lifecycle is not None:
            self.lifecycle.stop_requested()

    def stop_with(self, exc: BaseException) -> None:
        """A clean stop (``request_stop``: drain, commit, close) after which ``run`` raises
        ``exc``: a fault that leaves what was processed valid (a topic's partition count
        changed), so the checkpoint covers it."""
        if self._stop_error is None:
            self._stop_error = exc
        self.request_stop()

    def abort(self, exc: BaseException) -> None:
        """Stop now, without waiting for the messages in flight (a stop that ran out of
        ``task.shutdown.ms``): the tasks' runs and their messages' coroutines are cancelled,
        nothing more is committed, and ``run`` raises ``exc`` once it has closed everything."""
        if self._aborted is not None or self._running is None or self.closed:
            return
        self._aborted = exc
        for t in self.tasks:
            t.cancel_in_flight()
        self._running.cancel()

    async def _consume(self) -> None:
        try:
            await self._consume_loop()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bad record under the fail policy, a broken log...
            for t in self.tasks:
                t.fail(exc)

    async def _consume_loop(self) -> None:
        consumer = self.consumer
        downstream = self.job.plan.intermediate_streams
        while not self.closed:
            keys = []
            limits = {}
            for k in self._keys:
                task = k[0]
                size = task.inbox_size
                if k[1].stream_id in downstream:
                    if size < DOWNSTREAM_LIMIT and task.reading(k[1]) and not task.done:
                        keys.append(k)
                        limits[k] = min(DOWNSTREAM_FETCH, DOWNSTREAM_LIMIT - size)
                    elif size >= DOWNSTREAM_LIMIT:
                        task.pause()
                elif size >= INBOX_LIMIT:
                    task.pause()
                elif task.reading(k[1]) and not task.done:
                    keys.append(k)
            if not keys:
                self._room.clear()
                await self._room.wait()
                continue
            batches = await consumer.poll(keys, FETCH_BATCH, timeout=0.2, limits=limits or None)
            for (task, ssp), first, payloads in batches:
                task.add_batch(ssp, first, payloads)

    def on_consumed(self, task: TaskInstance, reading: bool = False) -> None:
        """A task took records from its inbox: if it was full, its partitions are read again.
        ``reading``: the partitions the task reads changed (it finished bootstrapping)."""
        if (task.paused and task.inbox_size < INBOX_LIMIT) or reading:
            task.resume()
            self._room.set()
            self.consumer.wakeup()

    async def _bootstrap(self, keys: list[tuple[Any, SSP]] | None = None) -> None:
        """Tells each task where its bootstrap partitions end as of now (Samza's bootstrapping
        chooser: on every start, restarts included); ``keys``: of these readers only."""
        inputs = self.job.plan.app.inputs
        keys = [k for k in (self._keys if keys is None else keys)
                if _bootstrap(inputs, k[1])]
        if not keys:
            return
        for (reader, ssp), (start, end) in (await self.consumer.read_bounds(keys)).items():
            for task in tasks_of(reader):
                task.bootstrap(ssp, start, end)

    async def _ticker(self, interval_ms: int, flag: str) -> None:
        """Requests a window tick or a commit every interval. A commit is requested only once
        ``task.commit.ms`` has passed since the task's last one ended, so a commit slower than
        the interval cannot starve processing."""
        interval = interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for t in self.tasks:
                if flag == "commit_requested" and now - t.last_commit_end < interval:
                    continue
                setattr(t, flag, True)
                t.wake.set()

    async def _idle_ticker(self, idle_s: float) -> None:
        """Wakes the tasks that have inputs with ``idle_timeout`` to look at their watermarks."""
        while True:
            await asyncio.sleep(max(0.005, idle_s / 4))
            for t in [t for t in self.tasks if t.clock.idle_ms]:
                t.clock.touch()
                t.wake.set()

    async def _watchdog(self) -> None:
        timeout_ms = self.config.task.callback_timeout_ms
        interval = max(0.005, min(timeout_ms / 4000.0, 0.1))
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for t in self.tasks:
                t.check_timeout(now)

    async def _stall_watch(self, bound_s: float) -> None:
        """A bounded run never waits forever: with no progress (``progress_mark``) for half of
        ``bound_s`` it logs
        what it waits for, and for all of it stops with an error that names it."""
        last: Any = None
        since = time.monotonic()
        warned = False
        while True:
            await asyncio.sleep(min(1.0, bound_s / 8))
            now = time.monotonic()
            mark = self.progress_mark()
            if mark != last:
                last, since, warned = mark, now, False
                continue
            idle = now - since
            if idle >= bound_s:
                self.abort(SamzaError(
                    f"the run stopped: it made no progress for {idle:.1f} s "
                    f"(job.bounded.stall.ms={round(bound_s * 1000)}) while it waited for "
                    f"{self.waiting_for()}. Nothing past the last commit was committed: a "
                    f"rerun goes on from there. Raise job.bounded.stall.ms (-1: off) if the "
                    f"wait is meant; see 'A run that waits' in docs/operations.md"))
                return
            if not warned and idle >= bound_s / 2:
                warned = True
                _log.warning("the run has made no progress for %.1f s; it waits for %s",
                             idle, self.waiting_for())


def _side_input(inputs: Mapping[str, Any], ssp: SSP) -> bool:
    """Whether ``ssp`` is of a side input (an input stream that fills a table)."""
    d = inputs.get(ssp.stream_id)
    return d is not None and d.side_input_of is not None


def _bootstrap(inputs: Mapping[str, Any], ssp: SSP) -> bool:
    """Whether ``ssp`` is of a bootstrap input."""
    d = inputs.get(ssp.stream_id)
    return d is not None and bool(d.bootstrap)


def wire_behind(consumer: Any, keys: list[tuple[Any, SSP]]) -> None:
    """Tell the clocks of the tasks of readers ``keys`` (``(reader, ssp)``: a task, or the
    virtual tasks of one partition) which of their input partitions have records still to read
    (``Consumer.behind``): such a partition is never idle."""
    readers: dict[Any, dict[SSP, Any]] = {}
    tasks = {}
    for key in keys:
        reader, ssp = key
        for task in tasks_of(reader):
            readers.setdefault(task.name, {})[ssp] = key
            tasks[task.name] = task
    for name, task in tasks.items():
        task.clock.behind = _reader_behind(consumer, readers[name])


def _reader_behind(consumer: Any, keys: dict[SSP, Any]) -> Callable[[SSP], bool]:
    """``behind(ssp)`` of a task's input partitions (``Consumer.behind`` of their readers)."""
    def behind(ssp: SSP) -> bool:
        key = keys.get(ssp)
        return key is not None and bool(consumer.behind(key))
    return behind


def restore_progress(task: Any, checkpoints: Any) -> None:
    """The task's event-time progress, and what it applied of its intermediate streams, as of
    its checkpoint, where the store keeps them."""
    task.clock.restore(checkpoints.read_times(task.name))
    if task.applied is not None:
        task.applied.load(checkpoints.read_applied(task.name))
