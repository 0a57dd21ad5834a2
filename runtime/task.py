"""A task: one partition of each input (docs/semantics.md rules 5, 11-15).

Per task, messages are handed to the DAG in offset order; at most ``task.max.concurrency`` are in
flight. Every handed-out message is recorded in handout order; the checkpoint position of a
partition is the offset of the last message of the longest completed prefix (the low watermark),
so a message completing out of order never moves the checkpoint past one still in flight.
Window ticks and commits run only when nothing is in flight (commits may overlap with
``task.async.commit``), and nothing is handed out while they run. Priority: commit > window >
end-of-stream > process.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from operators.base import IDENTITY, Operator, OperatorContext, UserContext
from runtime import faults
from runtime.batch import CONTROL_TYPES, BatchFailure, BatchRun, operator_run, stream_run
from runtime.chooser import Chooser
from runtime.codec import Skipped
from runtime.dag import (
    Emit,
    OperatorFailure,
    chain,
    gather_pending,
    metered,
)
from runtime.elastic import OtherBucket
from runtime.event_time import (
    DeclaredTime,
    EventTimeFailure,
    InputTime,
    WindowMoves,
    input_time,
)
from runtime.in_flight import NO_KEY, cancel_messages, wait_of
from runtime.job import SSP, JobModel, TaskModel
from runtime.join_check import placement_checks
from runtime.metrics import OpMeter
from runtime.records import EndOfStream, Watermark
from runtime.state.remote import (
    CallTracker,
    RemoteCallFailure,
    RemoteTableClient,
    container_limiter,
)
from runtime.task_env import TaskEnv
from runtime.watermarks import (
    CURRENT,
    OBSERVED,
    TaskClock,
    observing,
)
from runtime.wiring import (
    Wiring,
    bind_port,
    build_operators,
    operator_emit,
    partition_of,
    record_sender,
)
from samza_dsl.config import config_value
from samza_dsl.errors import (
    CallbackTimeout,
    JoinPartitionError,
    SamzaError,
    SerdeError,
    TaskError,
)
from samza_dsl.spec import (
    JoinSpec,
    RemoteTableSpec,
    WindowSpec,
)

__all__ = ["TaskInstance"]

_THREADED_OPCODES = frozenset({"map", "filter", "flat_map", "sink", "join_table"})
BATCH_BUDGET = 2048
#: a failing message is suggested for ``--skip`` only after this many went through the task
#: (in this run, or before its checkpoint): then at most 1 in 10 failed. One that fails sooner
#: points at the function
SKIP_AFTER = 9
#: records of intermediate streams one call of ``_process_some`` may take on top of its budget:
#: a stage keeps up with the stages before it (whose outputs it reads) however unevenly their
#: keys fall into its partitions, so what waits between two stages stays about one round's worth
DOWNSTREAM_BUDGET = 8 * BATCH_BUDGET
#: about how long one call of ``_process_some`` from the task's loop may hand out for at most:
#: a task whose messages are slow gets a smaller budget (measured per call, never per message),
#: so its loop yields often enough for a stop, a rebalance or a timer to be seen while it works
#: (a batch of quick messages takes milliseconds, far below it: their budget never changes)
BATCH_SECONDS = 0.5
#: the budget of a task's first batch, which tells how long its messages take
PROBE_BUDGET = 8
#: outputs of one timer, watermark or end-of-stream call passed on between two producer writes
OUTPUT_CHUNK = 4096
#: the handout record ``[ssp, offset, ...]`` of the message an asyncio task of this module
#: completes (set by ``_finish``), or ``_CONTROL`` while outputs of a tick, a watermark or
#: end-of-stream run; unset while the run loop hands messages out synchronously
_SOURCE: contextvars.ContextVar[Any] = contextvars.ContextVar("samza_dsl_source", default=None)
_CONTROL: list[Any] = []


class TaskInstance:
    def __init__(self, model: TaskModel, job: JobModel, env: TaskEnv) -> None:
        self.model = model
        self.name = model.name
        self.index = model.index
        self.job = job
        self.plan = job.plan
        self.env = env
        config = env.config
        self.max_concurrency: int = config_value(config, "task.max.concurrency")
        self.async_commit: bool = config_value(config, "task.async.commit")
        self.callback_timeout_ms: int = config_value(config, "task.callback.timeout.ms")
        #: runs of a partition's messages handed out in one call where the shape allows
        #: (``runtime.batch``); off: one message at a time. Threaded operators and remote-table
        #: calls (tied to each message, rule 19) take their messages one at a time
        self.batching: bool = config_value(config, "task.batch.handout") \
            and env.executor is None and not job.plan.app.remote_tables
        self.ssps: list[SSP] = list(model.ssps)
        self.metrics = env.metrics

        # handout bookkeeping
        self.pending: deque[list[Any]] = deque()  # [ssp, offset, done, started, time, went]
        self.in_flight = 0
        #: the task's loop waits for work or completions (nothing else of it is under way), so
        #: a coroutine that completed a message may hand out the next one itself
        self._parked = False
        #: while such a coroutine hands out: the first message that goes async, for it to take
        self._adopting = False
        self._adopted: tuple[list[Any], list[Awaitable[None]]] | None = None
        self.checkpoint: dict[SSP, int] = {}  # last fully processed offset per partition
        self.processed = 0  # user messages (control records are not counted)
        self.records = 0  # every record handed out, control records too
        #: user messages handed out per stream this run (records less control records)
        self.read: dict[str, int] = {}

        # input: batches by input priority (runtime.chooser)
        # the intermediate streams go before the inputs of their rank
        self.inbox = Chooser({sid: d.rank for sid, d in self.plan.app.inputs.items()},
                             downstream=self.plan.intermediate_streams)
        self._downstream = frozenset(self.plan.intermediate_streams)
        #: bootstrap partitions not read to their end as of the start yet: ssp -> end offset
        self.bootstrapping: dict[SSP, int] = {}
        self.inbox_size = 0
        self._paused = False  # the consumer skips this task's partitions while its inbox is full
        self._cur: tuple[SSP, int, list[Any]] | None = None
        self._cur_i = 0
        self._src: list[Any] = [None, 0]  # the batch handed out, the index after its message
        #: what the message where an operator batch stopped waits for (``_operator_batch``)
        self._held: list[Awaitable[None]] | None = None
        self.ended: set[SSP] = set()
        self._eos_from: dict[SSP, set[str | None]] = {}
        self._flushed: set[str] = set()

        # event time: channel progress and the watermarks of the task's stages (rules 8, 15)
        self.clock = TaskClock(model, job, self.ended, self._busy)
        #: how each input stream counts for event time as it is handed out (built once)
        self.times: dict[str, InputTime] = {}

        # scheduling
        self.commit_requested = False
        self.window_requested = False
        self.last_commit_end = 0.0
        self.failure: BaseException | None = None
        self.wake = asyncio.Event()
        self.done = False
        #: the container holds the task while its group rebalances (``hold``): done once the
        #: task handed out nothing more, drained and committed
        self.held: asyncio.Future[None] | None = None

        #: remote-table calls user functions made and did not await (rule 19)
        self.calls = CallTracker(_SOURCE.get, _CONTROL)
        #: the task's remote tables (their calls, retries and cache hits are metrics)
        self.remote_clients: list[RemoteTableClient] = []
        self._call_slots: asyncio.Semaphore | None = None

        #: where the task's records go: the container's producer, or under exactly-once its own
        self.producer = env.producer if env.task_producer is None else env.task_producer(self)
        self.operators: dict[str, Operator] = {}
        self.entries: dict[str, Emit] = {}
        #: each operator's meter (``runtime.metrics``), unless metrics.operators is off
        self.meters: dict[str, OpMeter] = {}
        self.window_calls = 0
        self._build()
        for op_id, hold in self.clock.in_time_order.items():
            self.operators[op_id].hold_ahead = hold

    # -- construction -----------------------------------------------------------------------------

    def _build(self) -> None:
        env = self.env
        model = self.model
        self.operators, stores, tables = build_operators(
            self.plan, model.stages, lambda name: env.open_store(model, name),
            open_remote=self._open_remote)
        self.stores = stores
        self._flushers = [s.maybe_flush for s in stores.values() if hasattr(s, "maybe_flush")]
        self._state_flushers = [op.flush_state for op in self.operators.values()
                                if type(op).flush_state is not Operator.flush_state]
        user_ctx = UserContext(self.name, env.config, self.metrics, tables)
        placement = placement_checks(self.job, model, env.config, self.source,
                                     env.inputs_placed)
        for stage in model.stages:
            # event-time windows close on the task's watermarks only, never on what they saw
            ctx = OperatorContext(self.name, env.config, env.clock, stores,
                                  self.metrics, external_watermarks=True, source=self.source,
                                  placement=placement)
            for op_id in stage.operators:
                try:
                    self.operators[op_id].init(ctx, user_ctx)
                except SamzaError:
                    self.cancel_calls()
                    raise  # says what is wrong already
                except Exception as exc:
                    self.cancel_calls()  # made by an init before: they start no session now
                    raise TaskError(
                        f"operator {op_id!r} failed to start in task {self.name!r}: "
                        f"{type(exc).__name__}: {exc}. Fix its function's init(ctx), or what "
                        f"that needs", op_id=op_id, task=self.name) from exc

        self.wiring = Wiring(self.plan, self.operators, self._observed_sender, self._make_emit)
        self.moves = WindowMoves(self.clock, self.operators, self.wiring.nexts, self.producer,
                                 self.job.partitions)
        self._batches: dict[str, BatchRun] = {}
        for ssp in self.ssps:
            sid = ssp.stream_id
            if sid not in self.entries:
                self.times[sid] = input_time(self.clock, self.moves, self.operators, sid)
                self.entries[sid] = self.wiring.entry(sid)
                batch = self._batch_run(sid, self.times[sid])
                if batch is not None:
                    self._batches[sid] = batch

    def _open_remote(self, spec: RemoteTableSpec) -> RemoteTableClient:
        env = self.env
        if self._call_slots is None:
            self._call_slots = asyncio.Semaphore(max(1, self.max_concurrency))
        client = RemoteTableClient(spec, task_name=self.name,
                                   limiter=container_limiter(env.shared, spec, env.task_share),
                                   track=self.calls.track, slots=self._call_slots,
                                   concurrency=self.max_concurrency)
        self.remote_clients.append(client)
        return client

    def _batch_run(self, stream_id: str, tm: InputTime) -> BatchRun | None:
        """The batch run of ``stream_id`` (``runtime.batch``) where batching is on and the
        stream's shape and event time allow one: times that move windows message by message,
        or that outputs record (``ObservedTime``), take the messages one by one."""
        if not self.batching or self.clock.handout(stream_id) == OBSERVED:
            return None
        declared = self.clock.declared.get(stream_id)
        if declared is None or (isinstance(tm, DeclaredTime) and tm.stage is None
                                and tm.single is None):
            run = self._stream_batch(stream_id)
            if run is not None:
                return run
        if declared is not None:
            return None  # times the hand-out loop takes message by message
        op = self.wiring.lone_reader(stream_id)
        if op is None or op.one_to_one() is not None or isinstance(op.spec, JoinSpec) \
                or self.clock.observe.get(op.op_id) is not None:
            return None  # fused chains; joins; windows whose outputs' event times are observed
        return operator_run(op, self.wiring.nexts(op.op_id), self.meter(op), self.read,
                            self._src, self._hold, stream_id)

    def _stream_batch(self, stream_id: str) -> BatchRun | None:
        """``stream_run`` of ``stream_id``, where its steps are one-to-one into a stream."""
        path = self.wiring.one_to_one_path(stream_id)
        if path is None:
            return None
        sink = self.producer.record_sink(path.target)
        if sink is None:
            return None
        sender = self.wiring.sender(path.target, path.last.op_id)
        rule = getattr(sender, "rule", None)
        if rule is None:
            return None  # a sender observed by the clock, or writing records of its own
        return stream_run(path, sender, rule, sink,
                          self.plan.streams[path.target].kind == "broadcast", self.meter,
                          self.read, stream_id, self.clock.declared.get(stream_id, (None,))[0])

    def _hold(self, pend: list[Awaitable[None]]) -> None:
        """The message where an operator's batch run stopped waits for ``pend``."""
        self._held = pend

    def meter(self, op: Operator) -> OpMeter | None:
        """The meter of ``op`` in this task (one for both ports of a join)."""
        if not self.metrics.operators or op.one_to_one() is IDENTITY:
            return None  # an operator that passes every message on does nothing to meter
        meter = self.meters.get(op.op_id)
        if meter is None:
            meter = self.meters[op.op_id] = self.metrics.meter(op.op_id, self.name)
            if isinstance(op.spec, WindowSpec):
                meter.window = op
        return meter

    def _make_emit(self, op: Operator, port: int, nexts: list[Emit]) -> Emit:
        """An operator's emit: on the thread pool for blocking user code when there is one,
        and observed by the task's clock where it feeds an event-time window."""
        spec = op.spec
        executor = self.env.executor
        meter = self.meter(op)
        if executor is not None and spec.opcode in _THREADED_OPCODES \
                and getattr(spec, "table_id", None) not in self.plan.app.remote_tables:
            process = bind_port(op, port) if isinstance(spec, JoinSpec) else op.process
            process = _threaded(process, executor)
            if meter is not None:
                process = metered(process, meter, False)
            emit = chain(op.op_id, process, nexts)
        else:
            emit = operator_emit(op, port, nexts, meter)
        fn = self.clock.observe.get(op.op_id) if isinstance(spec, WindowSpec) else None
        if fn is not None:
            emit = observing(op.op_id, fn, emit, f"window {op.op_id!r}", op.op_id)
        return emit

    def _nexts(self, op_id: str) -> list[Emit]:
        """What an operator's outputs go to: downstream operators, or a producer."""
        return self.wiring.nexts(op_id)

    def _observed_sender(self, stream_id: str, op_id: str) -> Emit:
        """The terminal that hands a record to the producer, observed by the task's clock where
        the stream feeds an event-time window downstream."""
        sender = self._make_sender(stream_id, op_id)
        fn = self.clock.observe.get(stream_id)
        if fn is not None:
            sender = observing(stream_id, fn, sender, f"stream {stream_id!r}", op_id,
                               self._ahead(stream_id, op_id))
        return sender

    def _ahead(self, stream_id: str, op_id: str) -> Callable[[int], None] | None:
        """Where one channel alone feeds the stage of ``op_id``: ``ahead(ms)`` sends the
        stage's watermark into its intermediate streams before a message whose event time (in
        ``stream_id``'s readers' time) is behind the channel's progress, so that readers see the
        order one task would (docs/semantics.md, "Per message")."""
        stage = next(s for s in self.model.stages if op_id in s.operators)
        ssp = self.clock.lone.get(stage.stage_id)
        if ssp is None:
            return None
        observed = self.clock.observed

        def ahead(ms: int) -> None:
            mine = observed.get(ssp)
            if mine is not None:
                v = mine.get(stream_id)
                if v is not None and ms < v:
                    self.moves.send_marks(stage)
        return ahead

    def _make_sender(self, stream_id: str, op_id: str) -> Emit:
        """The terminal of ``op_id`` writing to ``stream_id``, in the partition its rule picks
        (``runtime.wiring``); a message the stream's serde cannot write fails that operator."""
        n = self.job.partitions[stream_id]
        rule = partition_of(self.plan, stream_id, n, self.model.partition)
        sink = self.producer.record_sink(stream_id) if rule.fixed is None else None
        if sink is not None and sink.encode is not None:  # a producer of records
            return record_sender(op_id, sink, rule)
        send = self.producer.sender(stream_id)

        def send_one(m: Any) -> None:
            try:
                send(rule(m), m)
            except Exception as exc:
                raise OperatorFailure(op_id, exc) from exc
        send_one.rule = rule  # type: ignore[attr-defined]
        return send_one

    # -- processing -------------------------------------------------------------------------------

    def add_batch(self, ssp: SSP, first_offset: int, payloads: list[Any]) -> None:
        self.clock.arrived(ssp)
        self.inbox.append((ssp, first_offset, payloads))
        self.inbox_size += len(payloads)
        self.wake.set()

    def _process_some(self, budget: int) -> int:
        """Hand out up to ``budget`` messages; returns how many records were consumed.

        Nothing else runs on the loop while this synchronous loop does, so the commit, window and
        stop flags are checked once, and ``in_flight`` only after a message went async."""
        if self.commit_requested or self.window_requested or self.env.stopping \
                or self.held is not None:
            return 0
        n = 0
        calls = self.calls
        calls.handing_out = True
        max_c = self.max_concurrency
        inbox = self.inbox
        boot = self.bootstrapping
        read = self.read
        cur = self._cur
        if cur is not None and inbox.ranked and inbox.outranks(cur[0]):
            # a batch of a higher priority came: it goes first, the rest of this one waits
            inbox.push_front((cur[0], cur[1] + self._cur_i, cur[2][self._cur_i:]))
            self._cur = None
        # intermediate records do not count against the budget, up to DOWNSTREAM_BUDGET of them
        extra = DOWNSTREAM_BUDGET if budget >= BATCH_BUDGET else 8 * budget
        downstream = self._downstream
        while n < budget and self.in_flight < max_c and self._adopted is None:
            cur = self._cur
            if cur is None:
                cur = self._cur = inbox.popleft()
                if cur is None:
                    break
                self._cur_i = 0
            ssp, first, payloads = cur
            bonus = extra if ssp.stream_id in downstream else 0
            budget += bonus
            self._src[0] = cur
            start = self._cur_i
            i = self._hand_out(cur, min(len(payloads), start + budget - n), n)
            if bonus:  # what this batch took of the bonus counts no more
                took = min(i - start, bonus)
                budget -= bonus - took
                extra -= took
            n += i - start
            read[ssp.stream_id] = read.get(ssp.stream_id, 0) + i - start
            self._cur_i = i
            if i >= len(payloads):
                self._cur = None
            if boot and ssp in boot and (first + i >= boot[ssp] or ssp in self.ended):
                del boot[ssp]  # read to its end as of the start
        self.inbox_size -= n
        self.processed += n
        self.records += n
        calls.handing_out = False
        return n

    def _hand_out(self, cur: tuple[SSP, int, list[Any]], end: int, n: int) -> int:
        """Hand out the messages of batch ``cur`` from ``_cur_i`` up to ``end`` (fewer once
        ``task.max.concurrency`` are in flight); returns the index after the last one handed out.
        ``n``: how many this round handed out before. A message completing inline is done at
        once; one that goes async is in flight, completed by ``_finish``."""
        ssp, first, payloads = cur
        pending = self.pending
        checkpoint = self.checkpoint
        max_c = self.max_concurrency
        finish = self._finish
        control_types = CONTROL_TYPES
        calls = self.calls
        src = self._src
        entry = self.entries[ssp.stream_id]
        tm = self.times[ssp.stream_id]
        tm.begin(ssp, not pending)
        timed, before, after = tm.timed, tm.before, tm.after
        batch = self._batches.get(ssp.stream_id)
        declared = tm if isinstance(tm, DeclaredTime) else None
        i = self._cur_i
        last_done = -1  # the last offset completed inline while nothing was pending
        try:
            while i < end:
                held = None
                if batch is not None and not pending:
                    times = declared.times() if declared is not None else None
                    try:
                        j = batch(payloads, i, end, times)
                    except BatchFailure as b:
                        i = b.index + 1
                        raise b.failure from b.failure.cause
                    finally:
                        if times is not None:
                            declared.took(times)  # type: ignore[union-attr]
                    held = self._held
                    if held is not None:  # the message at j went async: in flight below
                        self._held = None
                        if j > i:
                            last_done = j
                        i = j
                    elif j > i:
                        i = last_done = j
                        continue
                m = payloads[i]
                i += 1
                t: Any = None
                if type(m) in control_types:
                    got = self._control_at(ssp, first, i, m, tm)
                    if got is None:
                        continue
                    pend, t = got
                else:
                    if timed:
                        t = before(m)
                    src[1] = i
                    pend = entry(m) if held is None else held  # held: handed out by the batch
                    if calls.made:
                        pend = calls.take(pend)
                if pend is None:
                    if pending:
                        pending.append([ssp, first + i - 1, True, 0, t])
                        continue
                    if t is not None:
                        pend = after(t, pend)
                        t = None
                    if pend is None:
                        last_done = i
                        continue
                if last_done >= 0:
                    checkpoint[ssp] = first + last_done - 1
                    last_done = -1
                tm.in_flight()
                # the last: how many went through the task before it, for its error
                rec = [ssp, first + i - 1, False, time.monotonic(), t,
                       self.processed + n + i - 1 - self._cur_i]
                pending.append(rec)
                self.in_flight += 1
                if self._adopting:  # the coroutine that asked takes it on
                    self._adopted = (rec, pend)
                    break
                asyncio.get_running_loop().create_task(finish(rec, pend))
                if self.in_flight >= max_c:
                    break
        except OperatorFailure as f:
            done = self.processed + n + i - 1 - self._cur_i  # went through before it
            self._cur_i = i
            raise self._task_error(f, ssp, first + i - 1, done) from f.cause
        except EventTimeFailure as f:
            self._cur_i = i
            raise self._event_time_error(f.cause, ssp, first + i - 1,
                                         payloads[i - 1]) from f.cause
        finally:
            tm.end()
        if last_done >= 0:
            checkpoint[ssp] = first + last_done - 1
        return i

    def _control_at(self, ssp: SSP, first: int, i: int, m: Any, tm: InputTime
                    ) -> tuple[list[Awaitable[None]] | None, Any] | None:
        """A control record handed out (``i - 1`` of the batch at ``first``): None when it needs
        no more (it is done, or waits in the handout order), else what it waits for and its
        event time, as a message's."""
        if type(m) is OtherBucket:
            # another virtual task's message: done, its time counts as if this task had
            # completed it (rule 18)
            read = self.read
            read[ssp.stream_id] = read.get(ssp.stream_id, 0) - 1
            self._src[1] = i
            return tm.neighbour(m.time)
        if not self._control(ssp, m):
            return None
        # a record with an offset of its own: done. A producer's watermark or end counts once
        # what came before it has
        mark = m if type(m) is Watermark or type(m) is EndOfStream else None
        if self.pending:
            self.pending.append([ssp, first + i - 1, True, 0, mark])
            return None
        # the windows take it before the next message, and it goes on into the stage's
        # intermediate streams in order; else the panes it closed are on their way: in flight
        return (tm.control(mark) if mark is not None else None), None

    def source(self) -> tuple[str, int, int] | None:
        """(stream id, partition, offset) of the message being processed, for reports of late
        messages: the one this asyncio task completes, else the one being handed out."""
        rec = _SOURCE.get()
        if rec is not None:
            if rec is _CONTROL:
                return None
            return rec[0].stream_id, rec[0].partition, rec[1]
        cur, i = self._src
        if cur is None:
            return None
        return cur[0].stream_id, cur[0].partition, cur[1] + i - 1

    async def _finish(self, rec: list[Any], pend: list[Awaitable[None]]) -> None:
        """Completes ``rec``: awaits what it still waits for, then marks it done. While the
        task's loop is parked, it then hands out the next messages itself and takes on the first
        that goes async: a long-lived worker, with no asyncio Task and no round of the loop
        between one async message's end and the next one's start."""
        while True:
            _SOURCE.set(rec)  # this asyncio task's own context: its outputs come from rec
            t = rec[4]
            if type(t) is list:  # the outputs' event times are recorded in its box
                CURRENT.set(t)
            try:
                await gather_pending(pend)
                if self.calls.by_record:
                    await self.calls.settle_record(rec)
            except OperatorFailure as f:
                self.fail(self._task_error(f, rec[0], rec[1], rec[5]))
                return
            except asyncio.CancelledError:
                return
            except RemoteCallFailure as f:
                self.fail(self._call_error(f, rec[0], rec[1]))
                return
            except Exception as exc:  # a failure outside any operator
                self.fail(TaskError(f"task {self.name!r} failed on {rec[0]} offset {rec[1]}: "
                                    f"{exc!r}", task=self.name, stream=rec[0].stream_id,
                                    partition=rec[0].partition, offset=rec[1]))
                return
            rec[2] = True
            self.in_flight -= 1
            pending = self.pending
            checkpoint = self.checkpoint
            apply = self.clock.apply
            while pending and pending[0][2]:
                r = pending.popleft()
                checkpoint[r[0]] = r[1]
                t = r[4]
                if t is not None:  # event time counts once everything before it has completed
                    apply(r[0], t)
            self.wake.set()
            if not self._parked or self.failure is not None \
                    or (self._cur is None and not self.inbox.ready()):
                return
            nxt = self._adopt()
            if nxt is None:
                return
            rec, pend = nxt

    def _adopt(self) -> tuple[list[Any], list[Awaitable[None]]] | None:
        """Hand out messages from a completing coroutine (``_finish``); the first that goes
        async is returned for it to take on."""
        _SOURCE.set(None)  # what is handed out is the message being processed
        CURRENT.set(None)
        self._adopting = True
        try:
            self._process_some(BATCH_BUDGET)
        except BaseException as exc:  # as the task's loop would: the task fails with it
            self._adopted = None
            self.fail(exc)
            return None
        finally:
            self._adopting = False
        for flush in self._flushers:
            flush()
        self.producer.signal()
        self.env.on_consumed(self)
        got, self._adopted = self._adopted, None
        return got

    def _call_error(self, f: RemoteCallFailure, ssp: SSP, offset: int) -> TaskError:
        """A remote-table call a function made for a message and did not await failed."""
        err = TaskError(
            f"task {self.name!r}: a call to remote table {f.table!r} made for the message at "
            f"stream {ssp.stream_id!r} partition {ssp.partition} offset {offset} failed and was "
            f"not awaited: {type(f.cause).__name__}: {f.cause}. The checkpoint stays before "
            f"this offset, so a restart reprocesses it", task=self.name, stream=ssp.stream_id,
            partition=ssp.partition, offset=offset)
        err.__cause__ = f.cause
        return err

    def _task_error(self, f: OperatorFailure, ssp: SSP, offset: int,
                    done: int | None = None) -> TaskError:
        """The error for operator ``f.op_id`` failing on the message at ``ssp`` ``offset``,
        after ``done`` messages of this run went through the task (default: those counted):
        where in the application's code, and ``--skip`` only for a record that fails alone
        (``SKIP_AFTER`` went through the task before it, in this run or before its checkpoint)."""
        cause = f.cause
        placed = isinstance(cause, JoinPartitionError)  # it says what to do itself
        where = f.where
        at = f" in {where}" if where and not placed else ""
        done = self.processed if done is None else done
        went = max(done, sum(o + 1 for o in self.checkpoint.values()))
        alone = went >= SKIP_AFTER or isinstance(cause, SerdeError)
        if isinstance(cause, SerdeError) or placed:
            advice = ""
        elif not alone:
            first = ("on the first message" if went == 0 else
                     f"after only {went} message(s) went through")
            advice = (f" It failed {first}, so it may fail on many: fix the function or guard "
                      f"against such messages.")
        else:
            advice = " Fix the function or guard against this message."
        skip = (f" (`samza-dsl run APP --skip {ssp.stream_id}:{ssp.partition}:{offset}` passes "
                f"over it once)" if alone and not placed
                and self.plan.streams[ssp.stream_id].kind == "input" else "")
        err = TaskError(
            f"operator {f.op_id!r} failed in task {self.name!r} on stream {ssp.stream_id!r} "
            f"partition {ssp.partition} offset {offset}: "
            f"{cause if placed else f.reason}{at}.{advice} "
            f"The checkpoint stays before this offset, so a restart reprocesses it{skip}",
            op_id=f.op_id, task=self.name, stream=ssp.stream_id,
            partition=ssp.partition, offset=offset)
        err.__cause__ = cause
        return err

    def _event_time_error(self, cause: BaseException, ssp: SSP, offset: int,
                          message: Any) -> TaskError:
        """An input's ``event_time`` failed on a message: the message cannot be placed in event
        time, so the task stops there, as on an operator's failure."""
        text = repr(message)
        if len(text) > 80:
            text = text[:77] + "..."
        err = TaskError(
            f"the event_time of input {ssp.stream_id!r} failed in task {self.name!r} on stream "
            f"{ssp.stream_id!r} partition {ssp.partition} offset {offset}: "
            f"{type(cause).__name__}: {cause} (message {text}). Fix the record, or skip it "
            f"(`samza-dsl run APP --skip {ssp.stream_id}:{ssp.partition}:{offset}` passes over "
            f"it once), or make event_time handle such records. The checkpoint stays before "
            f"this offset, so a restart reprocesses it",
            task=self.name, stream=ssp.stream_id, partition=ssp.partition, offset=offset)
        err.__cause__ = cause
        return err

    def fail(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
        self.wake.set()

    def check_timeout(self, now: float) -> None:
        """Fail the task if its oldest in-flight message is older than the callback timeout."""
        if self.callback_timeout_ms <= 0 or not self.in_flight:
            return
        for rec in self.pending:
            if not rec[2]:
                if (now - rec[3]) * 1000 > self.callback_timeout_ms:
                    self.fail(self._timeout_error(rec))
                return

    def _timeout_error(self, rec: list[Any]) -> CallbackTimeout:
        """The error of the message of ``rec`` that ran past the callback timeout, naming what
        it waits for: the operator, and the remote table and key, or the function."""
        ssp = rec[0]
        wait = wait_of(self, rec)
        if wait.table is not None:
            advice = (f"check the service of remote table {wait.table!r}, give its functions a "
                      f"timeout (a RetryPolicy can retry it), or raise task.callback.timeout.ms")
        else:
            advice = "add a timeout to the call it waits for, or raise task.callback.timeout.ms"
        return CallbackTimeout(
            f"task {self.name!r}: the message at {ssp.stream_id!r} partition {ssp.partition} "
            f"offset {rec[1]} did not complete within task.callback.timeout.ms="
            f"{self.callback_timeout_ms}: {wait.text()}. {advice[0].upper()}{advice[1:]}. The "
            f"checkpoint stays before this offset, so a restart reprocesses it",
            op_id=wait.op_id, task=self.name, stream=ssp.stream_id, partition=ssp.partition,
            offset=rec[1], table=wait.table, key=None if wait.key is NO_KEY else wait.key)

    def cancel_in_flight(self) -> None:
        """Cancel what completes the messages in flight (a stop that ran out of time)."""
        cancel_messages(self)
        self.cancel_calls()

    def cancel_calls(self) -> None:
        """Cancel the remote-table calls user functions made that have not completed (the
        task stops without them: a failure, a stop that ran out of time)."""
        self.calls.cancel()

    # -- control: end-of-stream and watermarks ---------------------------------------------------

    def _control(self, ssp: SSP, m: Any) -> bool:
        """Take a control record; True when it counts as processed at its offset (every record
        but the end of a bounded input, which a resumed run must see again)."""
        read = self.read  # a control record is no user message: neither read nor processed
        read[ssp.stream_id] = read.get(ssp.stream_id, 0) - 1
        self.processed -= 1
        if type(m) is Skipped:
            return True
        if type(m) is EndOfStream:
            self.clock.touch()
            producers = self.job.producers.get(ssp.stream_id)
            if producers is None or m.producer is None:
                self.ended.add(ssp)
                return m.producer is not None
            else:
                seen = self._eos_from.setdefault(ssp, set())
                seen.add(m.producer)
                if len(seen) >= producers:
                    self.ended.add(ssp)
        # a Watermark from an upstream task counts where it stands in the handout order
        return True

    @property
    def paused(self) -> bool:
        """The consumer skips this task's partitions (its inbox is full)."""
        return self._paused

    def pause(self) -> None:
        """Its inbox is full: the consumer skips its partitions until ``resume``."""
        self._paused = True

    def resume(self) -> None:
        """Its inbox has room again: the consumer reads its partitions."""
        self._paused = False

    def _busy(self, ssp: SSP) -> bool:
        """The task still has records of ``ssp`` queued, being handed out or in flight."""
        cur = self._cur
        if cur is not None and cur[0] == ssp:
            return True
        return any(r[0] == ssp for r in self.pending) or any(b[0] == ssp for b in self.inbox)

    def reading(self, ssp: SSP) -> bool:
        """Whether the consumer reads ``ssp`` for this task: not once it ended, nor while the
        task bootstraps other partitions."""
        if ssp in self.ended:
            return False
        only = self.inbox.only
        return only is None or ssp in only

    def bootstrap(self, ssp: SSP, start: int, end: int) -> None:
        """``ssp`` is a bootstrap partition that this task reads from ``start`` (its next
        offset) and whose end is ``end`` now: unless it is there already, the task hands out
        nothing of its other partitions until it has handed out ``ssp`` to ``end`` and
        completed it (Samza's bootstrapping chooser)."""
        start = max(start, self.checkpoint.get(ssp, -1) + 1)
        if start < end:
            self.bootstrapping[ssp] = end
            self.inbox.only = set(self.bootstrapping)

    def _bootstrapped(self) -> None:
        """Every bootstrap partition is read to its end and completed: the others go on."""
        self.inbox.only = None
        self.env.on_consumed(self, reading=True)

    async def _advance_watermarks(self) -> None:
        """Give each event-time window its watermark, then send the stage's watermark into the
        intermediate streams it writes, after the panes it closed (rules 8 and 15)."""
        clock = self.clock
        clock.settle()
        if not clock.stages:
            return
        producer = self.producer
        for stage in clock.stages:
            moved, marks = clock.compute(stage)
            for op_id, wm in moved:
                op = self.operators[op_id]
                try:
                    outs = op.on_watermark(wm)
                except Exception as exc:
                    raise TaskError(f"operator {op_id!r} failed at watermark {wm} in task "
                                    f"{self.name!r}: {type(exc).__name__}: {exc}", op_id=op_id,
                                    task=self.name) from exc
                await self._run_outputs(op_id, outs)
            self.moves.send(marks)
            if marks:
                producer.signal()

    def _send_control(self, stage: Any, record: Any) -> None:
        """A control record to every partition of the intermediate streams a stage writes."""
        producer = self.producer
        for sid in stage.outputs:
            if sid in self.plan.intermediate_streams:
                for p in range(self.job.partitions[sid]):
                    producer.send(sid, p, record)
        producer.signal()

    async def _run_outputs(self, op_id: str, outs: list[Any]) -> None:
        """Pass outputs of a timer, watermark or end-of-stream call downstream and await them.
        Many outputs (a window closing 10^6 panes) go in chunks of ``OUTPUT_CHUNK``: between two,
        the producer writes what it buffered, so the records waiting for a write stay bounded."""
        if not outs:
            return
        nexts = self._nexts(op_id)
        pend: list[Awaitable[None]] = []
        token = _SOURCE.set(_CONTROL)
        try:
            for i, o in enumerate(outs):
                for nxt in nexts:
                    p = nxt(o)
                    if p:
                        pend.extend(p)
                if i % OUTPUT_CHUNK == OUTPUT_CHUNK - 1:
                    self.producer.signal()
                    await asyncio.sleep(0)  # the producer's write runs
            if pend:
                await gather_pending(pend)
        except OperatorFailure as f:
            raise TaskError(f"operator {f.op_id!r} failed in task {self.name!r} on output of "
                            f"{op_id!r}: {type(f.cause).__name__}: {f.cause}", op_id=f.op_id,
                            task=self.name) from f.cause
        finally:
            _SOURCE.reset(token)

    async def _on_timer(self) -> None:
        self.window_calls += 1
        now = self.env.clock()
        for stage in self.model.stages:
            for op_id in stage.operators:
                op = self.operators[op_id]
                try:
                    outs = op.on_timer(now)
                except Exception as exc:
                    raise TaskError(f"operator {op_id!r} failed at a window tick in task "
                                    f"{self.name!r}: {type(exc).__name__}: {exc}", op_id=op_id,
                                    task=self.name) from exc
                await self._run_outputs(op_id, outs)

    async def _end_stages(self) -> bool:
        """Flush every stage whose inputs have all ended; True when all stages are flushed."""
        for stage in self.model.stages:
            if stage.stage_id in self._flushed:
                continue
            mine = [ssp for ssp in self.ssps if ssp.stream_id in stage.inputs]
            if not all(ssp in self.ended for ssp in mine):
                continue
            for op_id in stage.operators:
                op = self.operators[op_id]
                # in chunks, each passed downstream (and written) before the next is made
                chunks = op.end_of_stream_chunks(OUTPUT_CHUNK)
                while True:
                    try:
                        outs = next(chunks, None)
                    except Exception as exc:
                        raise TaskError(f"operator {op_id!r} failed at end-of-stream in task "
                                        f"{self.name!r}: {type(exc).__name__}: {exc}",
                                        op_id=op_id, task=self.name) from exc
                    if outs is None:
                        break
                    await self._run_outputs(op_id, outs)
            self._send_control(stage, EndOfStream(self.name))
            self._flushed.add(stage.stage_id)
        return len(self._flushed) == len(self.model.stages)

    # -- the loop ---------------------------------------------------------------------------------

    async def commit(self) -> None:
        """Commit what this task has fully processed (``runtime.commit``): its offsets are
        taken now, before the flushes, so a message completing meanwhile is not covered."""
        try:  # remote writes made outside any message complete first
            await self.calls.settle_loose()
        except RemoteCallFailure as f:
            raise TaskError(f"task {self.name!r}: a call to remote table {f.table!r} made "
                            f"outside any message failed: {type(f.cause).__name__}: "
                            f"{f.cause}", task=self.name) from f.cause
        for flush in self._state_flushers:  # operators' in-memory state into their stores
            flush()
        self.last_commit_end = await self.env.committer.commit(
            self.name, self.checkpoint, has_stores=bool(self.stores))

    async def run(self) -> None:
        wake = self.wake
        perf = time.perf_counter
        budget = PROBE_BUDGET  # how slow the task's messages are is not known yet
        while True:
            if self.failure is not None:
                raise self.failure
            wake.clear()
            if self.inbox.only is not None and not self.bootstrapping and self.in_flight == 0:
                self._bootstrapped()
            if self.env.stopping:
                if self.in_flight == 0:
                    await self.commit()
                    self.done = True
                    return
                await wake.wait()  # draining: wait for completions, hand out nothing
                continue
            if self.held is not None:  # the same drain, then a commit, then a wait
                if self.in_flight == 0 and not self.held.done():
                    await self._commit_held(self.held)
                await wake.wait()
                continue
            if self.commit_requested:
                if self.in_flight == 0 or self.async_commit:
                    self.commit_requested = False
                    await self.commit()
                    continue
                await wake.wait()
                continue
            if self.window_requested:
                if self.in_flight == 0:
                    self.window_requested = False
                    await self._on_timer()
                    continue
                await wake.wait()
                continue
            if self._cur is None and not self.inbox and self.in_flight == 0 \
                    and len(self.ended) == len(self.ssps):
                if await self._end_stages():
                    await self.commit()
                    self.done = True
                    return
                continue
            if (self._cur is not None or self.inbox.ready()) \
                    and self.in_flight < self.max_concurrency:
                began = perf()
                self._process_some(budget)
                budget = _next_budget(budget, perf() - began)
                if faults.ARMED:
                    faults.reached("batch")
                if self.clock.dirty:
                    await self._advance_watermarks()
                if self.ended and self.in_flight == 0:
                    await self._end_stages()
                for flush in self._flushers:
                    flush()
                self.producer.signal()
                self.env.on_consumed(self)
                await asyncio.sleep(0)
                continue
            if self.ended and self.in_flight == 0 and self._cur is None and not self.inbox:
                # some inputs ended: flush the stages that are complete
                before = len(self._flushed)
                await self._end_stages()
                if len(self._flushed) != before:
                    continue
            if self.clock.dirty:  # completions may have moved the watermark
                await self._advance_watermarks()
            self._parked = True
            try:
                await wake.wait()
            finally:
                self._parked = False

    def hold(self) -> asyncio.Future[None]:
        """Stop handing out, let the messages in flight complete, commit, then wait until
        ``release`` (the task's group rebalances: the task may move to another container). The
        future is done once committed."""
        if self.held is None:
            self.held = asyncio.get_running_loop().create_future()
            self.wake.set()
        return self.held

    def release(self) -> None:
        """Go on after ``hold``: the task stays with this container."""
        self.held = None
        self.wake.set()

    async def _commit_held(self, held: asyncio.Future[None]) -> None:
        try:
            await self.commit()
        except BaseException as exc:
            if not held.done():
                held.set_exception(exc)
                held.exception()  # the task's own run raises it; retrieved here
            raise
        if not held.done():
            held.set_result(None)

    def close(self) -> None:
        for op in self.operators.values():
            op.close()


def _next_budget(budget: int, took: float) -> int:
    """The budget of a task's next batch, after one of ``budget`` took ``took`` seconds: about
    ``BATCH_SECONDS`` of work at that pace, at most ``BATCH_BUDGET`` (quick messages: always)."""
    if took > 0 and budget * BATCH_SECONDS < took * BATCH_BUDGET:
        # at this pace a full batch would take longer than BATCH_SECONDS
        return max(1, min(BATCH_BUDGET, int(budget * BATCH_SECONDS / took)))
    return BATCH_BUDGET


def _threaded(process: Callable[[Any], Any], executor: Any) -> Callable[[Any], Any]:
    def run(m: Any) -> Any:
        return asyncio.get_running_loop().run_in_executor(executor, process, m)
    return run
