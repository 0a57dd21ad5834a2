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
import time
from collections import deque
from collections.abc import Awaitable
from typing import Any

from operators.base import Operator, OperatorContext, UserContext
from runtime.engine import faults, handout
from runtime.engine.batch_rules import CONTROL_TYPES, BatchFailure
from runtime.engine.chooser import Chooser
from runtime.engine.codec import Skipped
from runtime.engine.dag import OperatorFailure, gather_pending
from runtime.engine.elastic import OtherBucket
from runtime.engine.event_time import DeclaredTime, EventTimeFailure, InputTime
from runtime.engine.handout import Batch, Cursor, Handout
from runtime.engine.in_flight import cancel_messages
from runtime.engine.job import SSP, JobModel, TaskModel
from runtime.engine.join_check import placement_checks
from runtime.engine.origins import Applied, OriginList, Stamps, take_batch
from runtime.engine.rebalance_hold import RebalanceHold
from runtime.engine.records import EndOfStream, Watermark
from runtime.engine.sinks import task_producer, with_origins
from runtime.engine.stage_outputs import CONTROL, SOURCE, StageOutputs
from runtime.engine.task_env import TaskEnv
from runtime.engine.task_errors import call_error, event_time_error, operator_error, timeout_error
from runtime.engine.task_wiring import THREADED_OPCODES, TaskWiring
from runtime.engine.watermarks import CURRENT, TaskClock
from runtime.engine.wiring import build_operators
from runtime.state.remote import (
    CallTracker,
    RemoteCallFailure,
    RemoteTableClient,
    container_limiter,
)
from samza_dsl.errors import SamzaError, TaskError
from samza_dsl.spec import RemoteTableSpec

__all__ = ["TaskInstance"]



class TaskInstance(RebalanceHold):
    def __init__(self, model: TaskModel, job: JobModel, env: TaskEnv) -> None:
        self.model = model
        self.name = model.name
        self.index = model.index
        self.job = job
        self.plan = job.plan
        self.env = env
        config = env.config
        self.max_concurrency: int = config.task.max_concurrency
        self.async_commit: bool = config.task.async_commit
        self.callback_timeout_ms: int = config.task.callback_timeout_ms
        #: runs of a partition's messages handed out in one call where the shape allows
        #: (``runtime.engine.batch``); off: one message at a time. Threaded operators and remote-table
        #: calls (tied to each message, rule 19) take their messages one at a time
        self.batching: bool = config.task.batch_handout \
            and env.executor is None and not job.plan.app.remote_tables
        self.ssps: list[SSP] = list(model.ssps)
        self.metrics = env.metrics

        # handout bookkeeping
        self.pending: deque[Handout] = deque()  # in handout order
        self.in_flight = 0
        self.flying: dict[SSP, int] = {}  # in flight per partition: its event time waits
        #: the task's loop waits for work or completions (nothing else of it is under way), so
        #: a coroutine that completed a message may hand out the next one itself
        self._parked = False
        #: while such a coroutine hands out: the first message that goes async, for it to take
        self._adopting = False
        self._adopted: tuple[Handout, list[Awaitable[None]]] | None = None
        self.checkpoint: dict[SSP, int] = {}  # last fully processed offset per partition
        self.processed = 0  # user messages (control records are not counted)
        self.records = 0  # every record handed out, control records too
        #: user messages handed out per stream this run (records less control records)
        self.read: dict[str, int] = {}

        # input: batches by input priority (runtime.engine.chooser)
        # the intermediate streams go before the inputs of their rank
        self.inbox = Chooser({sid: d.rank for sid, d in self.plan.app.inputs.items()},
                             downstream=self.plan.intermediate_streams)
        self._downstream = frozenset(self.plan.intermediate_streams)
        #: bootstrap partitions not read to their end as of the start yet: ssp -> end offset
        self.bootstrapping: dict[SSP, int] = {}
        self.inbox_size = 0
        self.paused = False  # the consumer skips this task's partitions while its inbox is full
        self._cur: Batch | None = None
        self._cur_i = 0
        self._src = Cursor()  # the batch handed out, the index after its message
        #: what the message where an operator batch stopped waits for (``_operator_batch``)
        self._held: list[Awaitable[None]] | None = None
        self.ended: set[SSP] = set()
        self._eos_from: dict[SSP, set[str | None]] = {}

        # event time: channel progress and the watermarks of the task's stages (rules 8, 15)
        self.clock = TaskClock(model, job, self.ended, self._busy,
                               THREADED_OPCODES if env.executor is not None else frozenset())

        # scheduling
        self.commit_requested = False
        self.window_requested = False
        self.last_commit_end = 0.0
        self.failure: BaseException | None = None
        self.wake = asyncio.Event()
        self.done = False
        #: how many inputs had ended at the last commit an end made (exactly once)
        self._ended_committed = 0
        #: the container holds the task while its group rebalances (``hold``): done once the
        #: task handed out nothing more, drained and committed
        self.held: asyncio.Future[None] | None = None

        #: remote-table calls user functions made and did not await (rule 19)
        self.calls = CallTracker(SOURCE.get, CONTROL)
        #: the task's remote tables (their calls, retries and cache hits are metrics)
        self.remote_clients: list[RemoteTableClient] = []
        self._call_slots: asyncio.Semaphore | None = None

        #: where the task's records go: the container's producer, or under exactly-once its own
        self.producer = task_producer(self, env)
        #: its records' origins, what it applied of its inputs' (``runtime.engine.origins``)
        self.stamps: Stamps | None = None
        self.applied: Applied | None = None
        self.operators: dict[str, Operator] = {}
        self._build()
        for op_id, hold in self.clock.in_time_order.items():
            self.operators[op_id].hold_ahead = hold
        if env.tracing is not None:  # decided here: off, batches come in untouched
            self.add_batch = env.tracing.traced(  # type: ignore[method-assign]
                self.name, self.add_batch, CONTROL_TYPES)

    # -- construction -----------------------------------------------------------------------------

    def _build(self) -> None:
        env = self.env
        model = self.model
        self.operators, stores, tables = build_operators(
            self.plan, model.stages, lambda name: env.open_store(model, name),
            open_remote=self._open_remote)
        self.stores = stores
        self.producer, self.stamps, self.applied = with_origins(
            self, self.producer, env.config.job.processing_guarantee,
            source=SOURCE.get, control=CONTROL, controls=CONTROL_TYPES)
        if self.stamps is not None and env.tracing is not None:  # sampled messages' records
            env.tracing.wire(self.stamps, self.operators)  # and async calls carry their trace
        self._flushers = [s.maybe_flush for s in stores.values() if s.batched_writes]
        self._state_flushers = [op.flush_state for op in self.operators.values()
                                if type(op).flush_state is not Operator.flush_state]
        user_ctx = UserContext(self.name, env.config, self.metrics, tables)
        placement = placement_checks(self.job, model, env.config, self.source)
        own = self.clock.own_watermarks()
        for stage in model.stages:
            # event-time windows close on the task's watermarks, but for those the clock
            # leaves their own (every message reaches them inline): decided here, once
            ctx = OperatorContext(self.name, env.config, env.clock, stores,
                                  self.metrics, external_watermarks=True, source=self.source,
                                  placement=placement, own_watermarks=own,
                                  clock_ns=env.clock_ns)
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

        wired = self.wired = TaskWiring(
            self.name, self.plan, model.stages, model.partition, self.ssps, self.job.partitions,
            self.operators, self.metrics, env.executor, self.producer, self.clock,
            self.batching, self.read, self._src, self._hold, origins=self.stamps is not None,
            traced=env.tracing is not None)
        self.entries, self.times, self._batches = wired.entries, wired.times, wired.batches
        self.outputs = StageOutputs(self.name, model.stages, self.ssps, self.ended, self.operators,
                                    wired.nexts, self.producer, self.clock, wired.moves,
                                    self.plan.intermediate_streams, self.job.partitions,
                                    env.clock)

    def _hold(self, pend: list[Awaitable[None]]) -> None:
        """The message where an operator's batch run stopped waits for ``pend``."""
        self._held = pend

    def _open_remote(self, spec: RemoteTableSpec) -> RemoteTableClient:
        env = self.env
        if self._call_slots is None:
            self._call_slots = asyncio.Semaphore(max(1, self.max_concurrency))
        client = RemoteTableClient(spec, task_name=self.name,
                                   limiter=container_limiter(env.shared, spec, env.task_share),
                                   track=self.calls.track if env.tracing is None else
                                   env.tracing.traced_track(self.calls.track, self._position),
                                   slots=self._call_slots,
                                   concurrency=self.max_concurrency)
        self.remote_clients.append(client)
        return client

    def _position(self) -> tuple[SSP, int] | None:
        """Traced: the message being processed (``Stamps.position``)."""
        return None if self.stamps is None else self.stamps.position()

    # -- processing -------------------------------------------------------------------------------

    def add_batch(self, ssp: SSP, first_offset: int, payloads: list[Any]) -> None:
        self.clock.arrived(ssp)
        self.inbox.append(Batch(ssp, first_offset, payloads))
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
        stamps = self.stamps
        if stamps is not None:
            stamps.live = True
        max_c = self.max_concurrency
        inbox = self.inbox
        boot = self.bootstrapping
        read = self.read
        cur = self._cur
        if cur is not None and inbox.ranked and inbox.outranks(cur.ssp):
            # a batch of a higher priority came: it goes first, the rest of this one waits
            inbox.push_front(Batch(cur.ssp, cur.first + self._cur_i, cur.payloads[self._cur_i:]))
            self._cur = None
        # intermediate records do not count against the budget, up to DOWNSTREAM_BUDGET of them
        extra = handout.DOWNSTREAM_BUDGET if budget >= handout.BATCH_BUDGET else 8 * budget
        downstream = self._downstream
        while n < budget and self.in_flight < max_c and self._adopted is None:
            cur = self._cur
            if cur is None:
                cur = self._cur = inbox.popleft()
                if cur is None:
                    break
                self._cur_i = 0
                if type(cur.payloads) is OriginList:
                    take_batch(self.applied, cur)
            ssp, first, payloads = cur.ssp, cur.first, cur.payloads
            bonus = extra if ssp.stream_id in downstream else 0
            budget += bonus
            self._src.batch = cur
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
        if stamps is not None:
            stamps.live = False
        return n

    def _hand_out(self, cur: Batch, end: int, n: int) -> int:
        """Hand out the messages of batch ``cur`` from ``_cur_i`` up to ``end`` (fewer once
        ``task.max.concurrency`` are in flight); returns the index after the last one handed out.
        ``n``: how many this round handed out before. A message completing inline is done at
        once; one that goes async is in flight, completed by ``_finish``."""
        ssp, first, payloads = cur.ssp, cur.first, cur.payloads
        pending = self.pending
        checkpoint = self.checkpoint
        max_c = self.max_concurrency
        finish = self._finish
        control_types = CONTROL_TYPES
        calls = self.calls
        src = self._src
        entry = self.entries[ssp.stream_id]
        tm = self.times[ssp.stream_id]
        tm.begin(ssp)
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
                    src.index = i
                    pend = entry(m) if held is None else held  # held: handed out by the batch
                    if calls.made:
                        pend = calls.take(pend)
                if pend is None and not pending:
                    if t is not None:
                        pend = after(t, pend)
                        t = None
                    if pend is None:
                        last_done = i
                        continue
                else:
                    if t is not None:  # counts now if none of its partition is in flight
                        pend, t = tm.meanwhile(t, pend, self.flying.get(ssp, 0))
                    if pend is None:
                        pending.append(Handout(ssp, first + i - 1, True, 0, t))
                        continue
                if last_done >= 0:
                    checkpoint[ssp] = first + last_done - 1
                    last_done = -1
                rec = Handout(ssp, first + i - 1, False, time.monotonic(), t,
                              self.processed + n + i - 1 - self._cur_i)  # went before it
                pending.append(rec)
                if self.stamps is not None:
                    self.stamps.went_async(rec)
                self.in_flight += 1
                self.flying[ssp] = self.flying.get(ssp, 0) + 1
                if self._adopting:  # the coroutine that asked takes it on
                    self._adopted = (rec, pend)
                    break
                asyncio.get_running_loop().create_task(finish(rec, pend))
                if self.in_flight >= max_c:
                    break
        except OperatorFailure as f:
            done = self.processed + n + i - 1 - self._cur_i  # went through before it
            self._cur_i = i
            raise operator_error(self, f, ssp, first + i - 1, done) from f.cause
        except EventTimeFailure as f:
            self._cur_i = i
            raise event_time_error(self, f.cause, ssp, first + i - 1,
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
        self._src.index = i  # what it causes comes from no message (``Stamps.header``)
        if type(m) is OtherBucket:
            # another virtual task's message: done, its time counts as if this task had
            # completed it (rule 18)
            read = self.read
            read[ssp.stream_id] = read.get(ssp.stream_id, 0) - 1
            return tm.neighbour(m.time)
        if not self._control(ssp, m):
            return None
        # a record with an offset of its own: done. A producer's watermark or end counts once
        # what came before it has
        mark = m if type(m) is Watermark or type(m) is EndOfStream else None
        if self.flying.get(ssp):  # windows it reaches inline may take a watermark now
            pend = tm.handed_out_mark(mark)
            if pend is not None:
                return pend, mark
            self.pending.append(Handout(ssp, first + i - 1, True, 0, mark))
            return None
        # the windows take it before the next message, and it goes on into the stage's
        # intermediate streams in order; else the panes it closed are on their way: in flight
        return (tm.control(mark) if mark is not None else None), None

    def source(self) -> tuple[str, int, int] | None:
        """(stream id, partition, offset) of the message being processed, for reports of late
        messages: the one this asyncio task completes, else the one being handed out."""
        rec = SOURCE.get()
        if rec is not None:
            return None if rec is CONTROL else (rec.ssp.stream_id, rec.ssp.partition, rec.offset)
        cur = self._src.batch
        if cur is None:
            return None
        return cur.ssp.stream_id, cur.ssp.partition, cur.first + self._src.index - 1

    async def _finish(self, rec: Handout, pend: list[Awaitable[None]]) -> None:
        """Completes ``rec``: awaits what it still waits for, then marks it done. While the
        task's loop is parked, it then hands out the next messages itself and takes on the first
        that goes async: a long-lived worker, with no asyncio Task and no round of the loop
        between one async message's end and the next one's start."""
        while True:
            SOURCE.set(rec)  # this asyncio task's own context: its outputs come from rec
            t = rec.time
            if type(t) is list:  # the outputs' event times are recorded in its box
                CURRENT.set(t)
            try:
                await gather_pending(pend)
                if self.calls.by_record:
                    await self.calls.settle_record(rec)
            except OperatorFailure as f:
                self.fail(operator_error(self, f, rec.ssp, rec.offset, rec.went))
                return
            except asyncio.CancelledError:
                return
            except RemoteCallFailure as f:
                self.fail(call_error(self, f, rec.ssp, rec.offset))
                return
            except Exception as exc:  # a failure outside any operator
                self.fail(TaskError(f"task {self.name!r} failed on {rec.ssp} offset "
                                    f"{rec.offset}: {exc!r}", task=self.name, offset=rec.offset,
                                    stream=rec.ssp.stream_id, partition=rec.ssp.partition))
                return
            rec.done = True
            self.in_flight -= 1
            self.flying[rec.ssp] -= 1
            pending = self.pending
            checkpoint = self.checkpoint
            apply = self.clock.apply
            while pending and pending[0].done:
                r = pending.popleft()
                checkpoint[r.ssp] = r.offset
                t = r.time
                if t is not None:  # event time counts once everything before it has completed
                    apply(r.ssp, t)
            self.wake.set()
            if not self._parked or self.failure is not None \
                    or (self._cur is None and not self.inbox.ready()):
                return
            nxt = self._adopt()
            if nxt is None:
                return
            rec, pend = nxt

    def _adopt(self) -> tuple[Handout, list[Awaitable[None]]] | None:
        """Hand out messages from a completing coroutine (``_finish``); the first that goes
        async is returned for it to take on."""
        SOURCE.set(None)  # what is handed out is the message being processed
        CURRENT.set(None)
        self._adopting = True
        try:
            self._process_some(handout.BATCH_BUDGET)
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

    def fail(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
        self.wake.set()

    def check_timeout(self, now: float) -> None:
        """Fail the task if its oldest in-flight message is older than the callback timeout."""
        if self.callback_timeout_ms <= 0 or not self.in_flight:
            return
        for rec in self.pending:
            if not rec.done:
                if (now - rec.started) * 1000 > self.callback_timeout_ms:
                    self.fail(timeout_error(self, rec))
                return

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

    def end_waited(self, ssp: SSP) -> str | None:
        """What the end of ``ssp`` waits for, where it is an intermediate stream: the ends of
        stream of its upstream tasks; None where ``ssp`` ended or ends at an offset."""
        producers = self.job.producers.get(ssp.stream_id)
        if ssp in self.ended or producers is None:
            return None
        seen = sorted(str(p) for p in self._eos_from.get(ssp, ()))
        return (f"the end of stream of {producers - len(seen)} more of its {producers} upstream "
                f"task(s)" + (f" (it has those of {', '.join(seen)})" if seen else ""))

    def pause(self) -> None:
        """Its inbox is full: the consumer skips its partitions until ``resume``."""
        self.paused = True

    def resume(self) -> None:
        """Its inbox has room again: the consumer reads its partitions."""
        self.paused = False

    def _busy(self, ssp: SSP) -> bool:
        """The task still has records of ``ssp`` queued, being handed out or in flight."""
        cur = self._cur
        if cur is not None and cur.ssp == ssp:
            return True
        return any(r.ssp == ssp for r in self.pending) or any(b.ssp == ssp for b in self.inbox)

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

    # -- the loop ---------------------------------------------------------------------------------

    async def commit(self) -> None:
        """Commit what this task has fully processed (``runtime.engine.commit``): its offsets are
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
            self.name, self.checkpoint, has_stores=bool(self.stores),
            times=self.clock.snapshot(),
            applied=self.applied.snapshot(self.checkpoint) if self.applied else None)

    async def run(self) -> None:
        wake = self.wake
        perf = time.perf_counter
        budget = handout.PROBE_BUDGET  # how slow the task's messages are is not known yet
        steady = self.env.steady_batches
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
                    await self.commit_held(self.held)
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
                    await self.outputs.on_timer()
                    continue
                await wake.wait()
                continue
            if self._cur is None and not self.inbox and self.in_flight == 0 \
                    and len(self.ended) == len(self.ssps):
                if await self.outputs.end_stages():
                    await self.commit()
                    self.done = True
                    return
                continue
            if (self._cur is not None or self.inbox.ready()) \
                    and self.in_flight < self.max_concurrency:
                began = perf()
                self._process_some(budget)
                budget = handout.next_budget(budget, perf() - began, steady)
                if faults.ARMED:
                    faults.reached("batch")
                if self.clock.dirty:
                    await self.outputs.advance_watermarks()
                if self.ended and self.in_flight == 0:
                    await self.outputs.end_stages()
                for flush in self._flushers:
                    flush()
                self.producer.signal()
                self.env.on_consumed(self)
                await asyncio.sleep(0)
                continue
            if self.ended and self.in_flight == 0 and self._cur is None and not self.inbox:
                # some inputs ended: flush the stages that are complete
                before = len(self.outputs.flushed)
                await self.outputs.end_stages()
                if len(self.outputs.flushed) != before:
                    continue
                if self._ended_committed != len(self.ended) and self.env.config.job.exactly_once:
                    # idle with an input ended: what it wrote (an intermediate stream's records,
                    # their end) becomes visible to the tasks waiting for it now, not at the
                    # next commit interval
                    self._ended_committed = len(self.ended)
                    await self.commit()
                    continue
            if self.clock.dirty:  # completions may have moved the watermark
                await self.outputs.advance_watermarks()
            self._parked = True
            try:
                await wake.wait()
            finally:
                self._parked = False

    def close(self) -> None:
        for op in self.operators.values():
            op.close()
