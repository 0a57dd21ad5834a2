"""Runs the operators of one Spark pass for one task partition, with no Spark in sight.

A pass is a group of plan stages that must see the same state (they share a table); the Spark
runner hands each Spark partition of a pass to a ``PassExecutor``. The executor builds the
stages' operators with ``operators.build_operator`` (the code the streaming runtime runs), is fed
the partition's records batch by batch in a deterministic order (``feed``, then ``finish`` at the
end of the stream), and returns what the stages write as it goes.

A record is ``(stream id, sort ms, source partition, source offset, clock ms, message)``:

- the sort time is the message's event time when its input declares ``event_time``, else its
  record timestamp; intermediate records keep the time of the input record that caused them.
  An event-time window whose inputs all declare ``event_time`` takes the latest event time it has
  seen as its watermark. One fed by an input that does not (event time on the window only)
  moves its watermark message by message where one source partition feeds it in offset order
  (a narrow pass, no async step before it: ``per_message_windows``), as the streaming runtime
  does: after each record, to the latest event time it saw less its own bound, so a message
  beyond the bound is late as in a streaming run. Elsewhere such a window closes its panes at
  the end of the pass, so, as in the streaming runtime for in-order input, none of its messages
  is late;
- the source partition and offset place it in its source (an input split, or the upstream
  partition and the order in which that partition wrote it);
- the clock is what ``ctx.clock()`` returns while the record is processed: the record's
  timestamp (the input's timestamp column, or the Kafka record timestamp), else its sort time.

Records are processed in (sort time, source partition, source offset) order when the pass keeps
state (windows, joins, tables), in offset order where a window moves its watermark per message, so each key sees its messages in event-time order and no message
is late. Window ticks (``task.window.ms``) fire as the clock passes each multiple of the tick.
``async_flat_map`` calls run concurrently on an asyncio loop, at most ``task.max.concurrency``
at once, and their outputs go downstream in input order, so a pass gives the same result on
every run. At the end, every operator gets ``on_end_of_stream`` (stage by stage, as a task does).

The task's tables and window and join state are the job's stores over bytes in memory
(``runtime.state.memory_store``: the job's write-back layer and codecs), committed as a task
commits (``_commit``: the operators' state into them, their dirty entries encoded) after each
batch fed, or with ``task.commit.ms=-1`` only at the end, and at the end of the pass: what the
job's store cannot encode fails the pass with the job's line.

Each operator is metered as in the streaming runtime (``runtime.host.metrics.OpMeter``, see
``runtime.spark.meter``): messages in and out and the time of its own calls, in ``meters``, and
its calls at ticks, watermarks and end-of-stream in ``control_ns``; the runner sums them over
tasks into ``ReprocessResult.operators``.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import msgspec

from operators.base import IDENTITY, Operator, OperatorContext, UserContext, resolve_fn
from operators.partition_by import BroadcastOperator, PartitionByOperator
from operators.simple import SendToStreamOperator
from runtime.engine.batch_operator import RunColumns, operator_run
from runtime.engine.batch_rules import BatchFailure
from runtime.engine.dag import (
    Emit,
    OperatorFailure,
    chain_one,
    continue_outputs,
    counted,
    forward,
    metered,
)
from runtime.engine.handout import Cursor
from runtime.engine.in_flight import coroutine_wait
from runtime.engine.systems import StreamSink
from runtime.engine.wiring import (
    PartitionRule,
    Wiring,
    build_operators,
    operator_emit,
    partition_of,
    record_sender,
)
from runtime.host.metrics import OpMeter
from runtime.spark.meter import LATE_SENT, add_run, meter_report, new_meter
from runtime.spark.shuffle import DistinctKeys, Encoded, Records, RowColumns, record_message
from runtime.state.memory_store import MemoryStores
from samza_dsl.errors import SamzaError
from samza_dsl.fields import field_path, ignores
from samza_dsl.jobconfig import JobConfig
from samza_dsl.kv import KV
from samza_dsl.spec import (
    AsyncFlatMapSpec,
    JoinSpec,
    WindowSpec,
    stream_node,
)

__all__ = ["PassExecutor", "Columns", "PassFailure", "ALL_PARTITIONS", "STATEFUL", "per_message_windows",
           "json_encoder"]

_NO_WATERMARK = -(1 << 62)
_DONE: Any = object()  # an operator's outputs are all given

#: the target partition of a broadcast record: every task partition reads it
ALL_PARTITIONS = -1
#: panes made and passed on at a time at end-of-stream (``PassExecutor.finish_chunks``)
EOS_CHUNK = 4096
#: operators whose results depend on the order of the messages they see
STATEFUL = (WindowSpec, JoinSpec)


class PassFailure(Exception):
    """A pass failed in a user function or an operator; the message names where."""

    MARK = "[samza-dsl reprocess] "

    def __init__(self, message: str) -> None:
        super().__init__(self.MARK + message)
        self.detail = message


class _AsyncQueue:
    """The in-flight calls of one async operator, released downstream in input order."""

    __slots__ = ("op_id", "nexts", "calls", "meter")

    def __init__(self, op_id: str, nexts: list[Emit], meter: OpMeter) -> None:
        self.op_id = op_id
        self.nexts = nexts
        self.meter = meter
        #: (task, sort ms, clock ms, source, started) per call, in input order
        self.calls: deque[tuple[asyncio.Task[list[Any]], int, int, tuple[str, int, int],
                                float]] = deque()


class PassExecutor:
    """The stages ``stage_ids`` of ``plan`` for task partition ``partition``.

    ``counts`` gives every stream's partition count; ``describe`` turns (stream id, source
    partition, source offset) into words for an error (e.g. the input file). ``narrow``: the
    partition's records come from one source partition, in offset order, with no shuffle (the
    windows of ``per_message_windows`` then move their watermarks per record). ``task_name``:
    the task's name where it is not ``Partition <partition>`` (a virtual task's)."""

    def __init__(self, plan: Any, stage_ids: Sequence[str], partition: int,
                 counts: Mapping[str, int], config: JobConfig, *,
                 describe: Callable[[str, int, int], str] | None = None,
                 narrow: bool = False, encoded: frozenset[str] = frozenset(),
                 task_name: str | None = None) -> None:
        self.plan = plan
        #: output streams whose messages are written as their JSON lines (``Encoded``)
        self.encoded = encoded
        self.partition = partition
        self.counts = counts
        self.task_name = task_name or f"Partition {partition}"
        self.describe = describe or (lambda sid, part, off: f"partition {part} offset {off}")
        self.stages = [s for s in plan.stages if s.stage_id in stage_ids]
        self.max_concurrency: int = max(1, config.task.max_concurrency)
        self.tick_ms: int = config.task.window_ms
        self.callback_timeout_ms: int = config.task.callback_timeout_ms
        self.metrics: dict[str, int] = {}

        # what is being processed: ctx.clock() and the time outputs inherit
        self.clock_ms = 0
        self.sort_ms = 0
        self.source: tuple[str, int, int] = ("", partition, -1)
        self.seq = 0
        self.out: list[tuple[int, tuple[Any, ...]]] = []
        self.written: dict[str, int] = {}
        self._queues: list[_AsyncQueue] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due = _ticks(self.tick_ms)  # window ticks, counted over every fed record

        #: the task's stores: the job's write-back layer and codecs over bytes in memory
        self.state = MemoryStores(plan, config)
        self.operators, stores, tables = build_operators(
            plan, self.stages, lambda name: self.state(self.task_name, name))
        self._state_flushers = [op.flush_state for op in self.operators.values()
                                if type(op).flush_state is not Operator.flush_state]
        #: commits after each batch fed; with ``task.commit.ms=-1`` (commit only at the end, as
        #: the job then does) a batch only writes out a full write batch (``maybe_flush``)
        self._batch_commits: bool = config.task.commit_ms != -1
        self._flushers = [s.maybe_flush for s in stores.values() if s.batched_writes]
        #: op id -> its meter (``runtime.spark.meter``): messages in and out, handle ns
        self.op_meters: dict[str, OpMeter] = {op_id: new_meter(op_id, self.task_name)
                                              for op_id in self.operators}
        #: op id -> the ns of its calls at ticks, watermarks and end-of-stream
        self.control_ns: dict[str, int] = {}
        self._windows = {op_id for op_id, op in self.operators.items()
                         if isinstance(op.spec, WindowSpec)}
        self.stateful = any(isinstance(op.spec, STATEFUL) for op in self.operators.values()) \
            or any(s.tables_read or s.tables_written for s in self.stages)
        user_ctx = UserContext(self.task_name, config, self.metrics, tables)
        # Where every input feeding a stage declares event_time, records come in event-time
        # order and a window's watermark is the latest event time it saw. Where one source
        # partition feeds a window in offset order, its watermark moves per record (_move).
        # Otherwise the order is the records' timestamps, not the window's event time: its panes
        # close at the end, so no message is late (as in the streaming runtime, for input in
        # event-time order).
        #: op id -> (window, its bound ms, its event time) for windows moved per record
        self._per_message: dict[str, tuple[Any, int, Callable[[Any], Any]]] = {}
        #: op id -> the latest event time (ms) the record being processed brought to the window
        self._seen: dict[str, int] = {}
        if narrow:
            for stage in self.stages:
                for op_id in per_message_windows(plan, stage):
                    window = plan.app.operator(op_id).window
                    self._per_message[op_id] = (self.operators[op_id],
                                                window.max_out_of_orderness_ms,
                                                resolve_fn(window.event_time))
        ctxs = {stage.stage_id: OperatorContext(
            self.task_name, config, self._clock, stores, self.metrics,
            external_watermarks=not _declared_upstream(plan, stage), source=self._source)
            for stage in self.stages}
        stage_of = {op_id: stage.stage_id for stage in self.stages for op_id in stage.operators}
        for op_id, op in self.operators.items():
            ctx = _behind_joins(op, ctxs[stage_of[op_id]])
            try:
                op.init(ctx, user_ctx)
            except Exception as exc:
                raise PassFailure(f"operator {op_id!r} failed in init in task "
                                  f"{self.task_name!r}: {type(exc).__name__}: {exc}") from exc
        for op, bound, _ in self._per_message.values():
            op.hold_ahead = bound > 0  # a session window holds messages only within a bound
        self._rules: dict[str, PartitionRule] = {}
        self.wiring = Wiring(plan, self.operators, self._sender, self._make_emit)
        self.entries: dict[str, Emit] = {}
        for stage in self.stages:
            for sid in stage.inputs:
                if sid not in self.entries:
                    self.entries[sid] = self.wiring.entry(sid)
        #: the batch being fed to the window's run (``_feed_runs``), and what its run held
        self._recs: Sequence[tuple[Any, ...]] = ()
        self._held: list[Awaitable[None]] | None = None
        window = self._run_window()
        self._run_into = None if window is None else operator_run(
            window, self._nexts(window.op_id), self.op_meters[window.op_id], {}, Cursor(),
            self._hold, next(iter(self.entries)), follow=self._follow, owner_fixed=True)
        self._columns = None if window is None else _column_window(window)

    @property
    def meters(self) -> dict[str, list[int]]:
        """What each operator did in this task so far, by op id: ``[messages in, messages
        out, handle ns, panes emitted]`` (``runtime.spark.meter``'s ``IN``, ``OUT``, ``NS``,
        ``PANES``; panes for a window only)."""
        return {op_id: meter_report(m, self.control_ns.get(op_id, 0),
                                    self.metrics.get(f"{op_id}.{LATE_SENT}", 0),
                                    op_id in self._windows)
                for op_id, m in self.op_meters.items()}

    def _clock(self) -> int:
        return self.clock_ms

    def _source(self) -> tuple[str, int, int] | None:
        """Where the record being processed came from (its source partition and offset)."""
        return self.source if self.source[2] >= 0 else None

    # -- construction -----------------------------------------------------------------------------

    def _make_emit(self, op: Operator, port: int, nexts: list[Emit]) -> Emit:
        if isinstance(op.spec, AsyncFlatMapSpec):
            return self._async_emit(op, nexts)
        meter = self.op_meters[op.op_id]
        if op.one_to_one_port(port) is IDENTITY:  # merge, send_to, broadcast: a run reports
            # every operator, these too
            emit = chain_one(op.op_id, metered(IDENTITY, meter, True), nexts)
        else:
            emit = operator_emit(op, port, nexts, meter)
        moved = self._per_message.get(op.op_id)
        if moved is None:
            return emit
        seconds = moved[2]
        seen = self._seen
        op_id = op.op_id

        def observed(m: Any) -> Any:
            """Records the event time the window sees; the window moves after the record."""
            try:
                ms = round(seconds(m) * 1000.0)
            except Exception:  # the window's own process fails on it, and says so
                return emit(m)
            if ms > seen.get(op_id, _NO_WATERMARK):
                seen[op_id] = ms
            return emit(m)
        return observed

    def _move(self) -> list[Awaitable[None]] | None:
        """After a record, as the streaming runtime after a message: each window it reached
        moves its watermark to the latest event time it saw, less its bound."""
        pend: list[Awaitable[None]] | None = None
        for op_id, ms in self._seen.items():
            op, bound, _ = self._per_message[op_id]
            if ms - bound <= op.watermark:
                continue
            t = time.perf_counter_ns()
            try:
                outs = op.on_watermark(ms - bound)
            except Exception as exc:
                raise OperatorFailure(op_id, exc) from exc
            self._control(op_id, time.perf_counter_ns() - t)
            if outs:
                self.op_meters[op_id].n_out += len(outs)
                p = forward(outs, self._nexts(op_id))
                if p is not None:
                    pend = p if pend is None else pend + p
        self._seen.clear()
        return pend

    def _nexts(self, op_id: str) -> list[Emit]:
        return self.wiring.nexts(op_id)

    def _control(self, op_id: str, ns: int) -> None:
        """Adds ``ns`` to the time of ``op_id``'s calls at ticks, watermarks, end-of-stream."""
        self.control_ns[op_id] = self.control_ns.get(op_id, 0) + ns

    def _sender(self, stream_id: str, op_id: str) -> Emit:
        """The terminal writing to ``stream_id``: the streaming runtime's
        (``runtime.engine.wiring.record_sender``), the partition as it picks it
        (``runtime.engine.wiring.partition_of``), into this task's output (``_Partition``); a
        broadcast stream's records go to every partition."""
        stream = self.plan.streams[stream_id]
        rule = partition_of(self.plan, stream_id, self.counts[stream_id], self.partition,
                            self.operators.get(op_id))
        broadcast = stream.kind == "broadcast"
        self.written.setdefault(stream_id, 0)
        bufs = [_Partition(self, stream_id, ALL_PARTITIONS if broadcast else p)
                for p in range(rule.n)]
        # a JSON Lines output gets each message as its line, made here, once
        line = json_encoder(stream_id) if stream_id in self.encoded else None
        encode = _as_is if line is None else (lambda m: Encoded(line(m)))
        return record_sender(op_id, StreamSink([b.append for b in bufs], encode=encode), rule)

    def line(self, op_ids: Sequence[str]) -> Callable[[list[Any], list[int]], Columns]:
        """A batch runner for a line of operators ``op_ids`` (each gives at most one output per
        message, or is a ``flat_map``; the last is a ``send_to`` of an output stream): messages
        and their tags -> the columns of the records written (``Columns``), each record tagged
        with the tag of the message it came from. The operators run one after the other over
        the whole batch: a record's place among its message's records is kept, and the meters
        count as message by message (their time is every call's)."""
        ops = [self.operators[o] for o in op_ids]
        last = ops[-1]
        sid = last.stream_id if isinstance(
            last, SendToStreamOperator | PartitionByOperator | BroadcastOperator) else None
        if sid is None or sid not in self.plan.streams:
            raise ValueError(f"a line of operators ends in {last.op_id!r}, not a send_to")
        steps = [(op.op_id, op.one_to_one(), op.process, self.op_meters[op.op_id])
                 for op in ops[:-1]]
        send_id, send_meter = last.op_id, self.op_meters[last.op_id]
        rule = partition_of(self.plan, sid, self.counts[sid], self.partition, last)
        fixed = rule.fixed if not rule.keyed else None
        encode = json_encoder(sid) if sid in self.encoded else None
        fast_encode = msgspec.json.Encoder().encode
        written = self.written
        written.setdefault(sid, 0)
        now = time.perf_counter_ns

        def run(msgs: list[Any], tags: list[int]) -> Columns:
            for op_id, one, process, meter in steps:
                t0 = now()
                outs: list[Any] = []
                try:
                    if one is not None:
                        keep = outs.append
                        for m in msgs:  # a failure's message is the len(outs)-th
                            keep(one(m))
                        out_tags = tags
                        if None in outs:  # what gave no output (a filter's drops)
                            out_tags = [t for t, r in zip(tags, outs, strict=True)
                                        if r is not None]
                            outs = [r for r in outs if r is not None]
                    else:
                        out_tags = []
                        for m in msgs:
                            rs = process(m)
                            if type(rs) is not list:
                                raise TypeError(f"{op_id}: an async result where a batch "
                                                f"needs outputs")
                            outs.append(rs)
                        out_tags = [t for t, rs in zip(tags, outs, strict=True) for _ in rs]
                        outs = [r for rs in outs for r in rs]
                except Exception as exc:
                    at = len(outs)
                    raise _line_failure(op_id, exc, tags[at] if at < len(tags) else -1) from exc
                add_run(meter, len(msgs), now() - t0)
                meter.n_out += len(outs)
                msgs, tags = outs, out_tags
            t0 = now()
            lines: list[bytes] | None = None
            done: list[Any] = []
            try:
                if fixed is not None:  # every record takes one partition
                    parts = [fixed] * len(msgs)
                elif rule.keyed or rule.chosen:  # each message placed by the rule
                    parts = done
                    for m in msgs:
                        done.append(rule(m))
                else:  # a message that is not a KV stays in the sender's partition
                    parts = [rule.own] * len(msgs)
                    if KV in set(map(type, msgs)):
                        for i, m in enumerate(msgs):
                            if type(m) is KV:
                                parts[i] = rule(m)
                if encode is not None:
                    try:
                        lines = list(map(fast_encode, msgs))
                    except Exception:  # the message, named by the encoder's own words
                        done = []
                        for m in msgs:
                            done.append(encode(m))
                        raise
            except PassFailure:
                raise
            except Exception as exc:
                at = len(done)
                raise _line_failure(send_id, exc, tags[at] if at < len(tags) else -1) from exc
            k = len(msgs)
            add_run(send_meter, k, now() - t0)
            send_meter.n_out += k
            written[sid] += k
            first = self.seq + 1
            self.seq += k
            return Columns(sid, parts, self.sort_ms, self.partition, range(first, first + k),
                           self.clock_ms, msgs, lines, tags)
        return run

    def _async_emit(self, op: Operator, nexts: list[Emit]) -> Emit:
        meter = self.op_meters[op.op_id]
        queue = _AsyncQueue(op.op_id, nexts, meter)
        self._queues.append(queue)
        process = op.process
        op_id = op.op_id
        now = time.perf_counter_ns

        def emit(m: Any) -> None:
            t = now()
            try:
                call = process(m)
            except Exception as exc:
                raise OperatorFailure(op_id, exc) from exc
            add_run(meter, 1, now() - t)  # starting the call; its wait is not the operator's
            if type(call) is list:
                meter.n_out += len(call)
                forward(call, nexts)
                return None
            assert self._loop is not None  # counted in flight and out as in a task
            task = self._loop.create_task(counted(_as_list(call), meter))
            queue.calls.append((task, self.sort_ms, self.clock_ms, self.source,
                                time.monotonic()))
            return None
        return emit

    # -- running ----------------------------------------------------------------------------------

    def run(self, records: Iterable[tuple[Any, ...]]) -> list[tuple[int, tuple[Any, ...]]]:
        """Process ``records`` (sorted by the caller when it matters), then end the stream.
        Returns ``(target partition, record)`` for everything written."""
        out = self.feed(records)
        out.extend(self.finish())
        return out

    def feed(self, records: Iterable[tuple[Any, ...]]) -> list[tuple[int, tuple[Any, ...]]]:
        """Process the next ``records`` of the partition (a batch; sorted by the caller when it
        matters); returns ``(target partition, record)`` for what they made the stages write.
        The executor keeps only its operators' state between batches (and an async operator's
        calls still in flight), so a partition goes through in bounded memory."""
        if self._queues:
            loop = self._event_loop()
            try:
                loop.run_until_complete(self._feed_async(records))
            except BaseException:
                self._close_loop()
                raise
        else:
            self._feed_sync(records)
        self._commit(batch=True)
        return self._take()

    def rekey(self, sid_in: str, source: int, cols: RowColumns
              ) -> tuple[list[int], list[int], range, list[int], list[Any]]:
        """A pass that is one ``partition_by`` with no value function (``runtime.spark.runner``
        carries its input's rows through) over a batch of stream ``sid_in``'s records from
        source partition ``source``, as columns (``sources.RowColumns``): what ``feed`` would
        write, ``KV(key, message)`` records, as columns without their messages: (target
        partitions, sort ms, offsets, clock ms, keys). One loop over the batch calls the key
        function and the partition rule, with no hand-out per record; the meter counts every
        record and times the batch."""
        op_id, op, rule = self._rekeying()
        sid = op.stream_id
        key_fn = op.key_fn
        msgs = cols.messages
        t = time.perf_counter_ns()
        try:
            keys = list(map(key_fn, msgs))
        except Exception:
            for off, m in enumerate(msgs, cols.first):  # the record that fails, named
                try:
                    key_fn(m)
                except Exception as exc:
                    raise self._failure(OperatorFailure(op_id, exc), sid_in, source,
                                        off) from exc
            raise
        if rule.fixed is not None:
            parts = [rule.fixed] * len(keys)
        else:
            table = rule.table
            try:
                parts = [table[k] for k in keys]
            except TypeError:  # an unhashable key
                partitioner = rule.partitioner
                parts = [partitioner(k) for k in keys]
        return parts, cols.sort_ms, self._rekeyed(op_id, sid, len(msgs), t), cols.clock, keys

    def rekey_column(self, column: Any, cols: RowColumns
                     ) -> tuple[Any, list[int], range, list[int], DistinctKeys] | None:
        """``rekey`` where the key function reads one field (``planner.fields``) and the batch
        has it as ``column`` (an Arrow array): the keys are the column's values, each distinct
        one placed and written once (``DistinctKeys``); ``cols`` has the batch's times. None
        where the column has a null, or values of another type than a string or an integer
        (the caller then calls ``rekey``)."""
        import numpy as np
        import pyarrow as pa

        t = time.perf_counter_ns()
        ty = column.type
        if column.null_count or not (pa.types.is_string(ty) or pa.types.is_large_string(ty)
                                     or pa.types.is_integer(ty)):
            return None
        op_id, op, rule = self._rekeying()
        encoded = column.dictionary_encode()
        values = encoded.dictionary.to_pylist()
        n = len(column)
        if rule.fixed is not None:
            parts = pa.array(np.full(n, rule.fixed, dtype=np.int32))
        else:
            table = rule.table
            parts = pa.array([table[k] for k in values], pa.int32()).take(encoded.indices)
        return (parts, cols.sort_ms, self._rekeyed(op_id, op.stream_id, n, t), cols.clock,
                DistinctKeys(values, encoded.indices))

    def _rekeying(self) -> tuple[str, PartitionByOperator, Any]:
        """The lone ``partition_by`` of a pass that only re-keys: (its id, it, its rule)."""
        (op_id, op), = self.operators.items()
        assert isinstance(op, PartitionByOperator) and op._value_fn is None, op_id
        sid = op.stream_id
        rule = self._rules.get(sid)
        if rule is None:
            rule = self._rules[sid] = partition_of(self.plan, sid, self.counts[sid],
                                                   self.partition)
        return op_id, op, rule

    def _rekeyed(self, op_id: str, sid: str, n: int, t: int) -> range:
        """Counts ``n`` records re-keyed into ``sid`` since ``t`` (ns); their offsets."""
        seq = self.seq
        self.seq = seq + n
        meter = self.op_meters[op_id]
        add_run(meter, n, time.perf_counter_ns() - t)
        meter.n_out += n
        self.written[sid] = self.written.get(sid, 0) + n
        return range(seq + 1, seq + n + 1)

    def finish(self) -> list[tuple[int, tuple[Any, ...]]]:
        """End the stream (``on_end_of_stream``, stage by stage); returns what that wrote."""
        if self._queues:
            try:
                self._event_loop().run_until_complete(self._end_async())
            finally:
                self._close_loop()
        else:
            self._end()
        self._commit(ended=True)
        return self._take()

    def finish_chunks(self, size: int = EOS_CHUNK) -> Iterator[list[tuple[int, tuple[Any, ...]]]]:
        """``finish``, what it writes given as it is written: each operator's end-of-stream
        outputs (a window's panes) are made and passed downstream about ``size`` at a time
        (``Operator.end_of_stream_chunks``), so a task never holds all its panes and what
        they write in one list. The records come in ``finish``'s order."""
        if self._queues:  # async calls drain between operators: as ``finish``
            out = self.finish()
            if out:
                yield out
            return
        for pend in self._controls("at end-of-stream", lambda op: op.end_of_stream_chunks(size)):
            if pend is not None:
                asyncio.run(_wait_all(pend, self))
            if self.out:
                yield self._take()
        self._commit(ended=True)
        if self.out:  # written before the end and not taken yet
            yield self._take()

    def _commit(self, ended: bool = False, batch: bool = False) -> None:
        """What a task's commit does to its stores, after each batch fed (``batch``) and at the
        end of the pass: the operators' state held in memory (a window's panes) into their
        stores, whose dirty entries are then encoded (``MemoryStore.flush``). An entry the
        job's store could not encode fails the pass with the job's line, and where it was
        written."""
        try:
            if batch and not self._batch_commits:
                for flush in self._flushers:
                    flush()
                return
            for flush in self._state_flushers:
                flush()
            self.state.flush(self.task_name)
        except SamzaError as exc:
            sid, part, off = self.source
            where = "the end of the stream" if ended or off < 0 else \
                f"stream {sid!r} ({self.describe(sid, part, off)})"
            raise PassFailure(f"{exc}; at the commit after {where}") from exc

    def _take(self) -> list[tuple[int, tuple[Any, ...]]]:
        taken = list(self.out)
        self.out.clear()  # the senders hold this list
        return taken

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """The loop the async operators' calls run on, across batches."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    def _close_loop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        for q in self._queues:
            for task, *_ in q.calls:
                task.cancel()
            q.calls.clear()
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    def _run_window(self) -> Operator | None:
        """Where the records of the pass's one input go to one window alone that takes a run
        of messages in one call (``Operator.process_run``), and nothing happens between
        records (no window ticks, no watermark moved per record, no async call): that window,
        which takes them through the streaming task's batch run (``runtime.engine.
        batch_operator.operator_run``). Else None."""
        if len(self.entries) != 1 or self._due is not None or self._per_message:
            return None
        if any(isinstance(op.spec, AsyncFlatMapSpec) for op in self.operators.values()):
            return None
        (sid,) = self.entries
        ops = [o for o in self.plan.next_ops(stream_node(sid)) if o in self.operators]
        if len(ops) != 1 or ops[0] not in self._windows:
            return None
        op = self.operators[ops[0]]
        return None if op.process_run is None else op

    def _feed_runs(self, records: Iterable[tuple[Any, ...]]) -> None:
        """``_feed_sync`` for ``_run_window``: the records' messages (or, where the window
        reads its keys and times from columns, those columns, ``RunColumns``) through the
        window's batch run; a failure names its record. The run stops only where a record's
        outputs wait on an async sink: it is waited for here, and the run goes on after it."""
        run = self._run_into
        assert run is not None
        recs: Sequence[tuple[Any, ...]] = records if isinstance(records, list | Records) \
            else list(records)
        msgs = recs.messages if isinstance(recs, Records) else list(map(record_message, recs))
        cols = self._columns_of(recs, msgs)
        if cols is None and not isinstance(msgs, list):
            msgs = list(msgs)  # (made once, not run by run)
        self._recs = recs
        n = len(recs)
        i = 0
        try:
            while i < n:
                try:
                    i = run(msgs, i, n, None, cols)
                except BatchFailure as b:
                    assert isinstance(b.failure, OperatorFailure)  # (no event time of its own)
                    sid, _sort, part, off, _clock, _m = recs[b.index]
                    raise self._failure(b.failure, sid, part, off) from b.failure.cause
                pend, self._held = self._held, None
                if i < n:
                    assert pend is not None, f"record {i} stopped the window's run"
                    asyncio.run(_wait_all(pend, self))  # (``_follow`` stamped its record)
                    i += 1
        finally:
            self._recs = ()
        if n:  # what comes next (the end of the stream) is stamped as after the last record
            self._follow(n - 1, recs)

    def _columns_of(self, recs: Sequence[tuple[Any, ...]], msgs: Sequence[Any]
                    ) -> RunColumns | None:
        """Records whose keys and event times the window reads from columns
        (``_column_window``): those columns, no message made but where the fold reads it, or
        ``process`` takes it. Else None."""
        if self._columns is None or not isinstance(recs, Records) or recs.keys is None:
            return None
        name, whole = self._columns
        times = recs.times_ms(name)
        if times is None:
            return None
        return RunColumns(recs.keys, times[0], list(msgs) if whole else None, times[1])

    def _follow(self, j: int, recs: Sequence[tuple[Any, ...]] | None = None) -> None:
        """Record ``j`` of the batch the window's run takes (or of ``recs``) is processed: what
        it writes takes its times, and ``ctx.clock()`` and ``ctx.source()`` give its."""
        sid, sort_ms, part, off, clock, _m = (self._recs if recs is None else recs)[j]
        self.sort_ms, self.clock_ms = sort_ms, clock
        self.source = (sid, part, off)

    def _hold(self, pend: list[Awaitable[None]]) -> None:
        """The record where the window's run stopped waits for ``pend`` (an async sink)."""
        self._held = pend

    def _feed_sync(self, records: Iterable[tuple[Any, ...]]) -> None:
        if self._run_into is not None:
            self._feed_runs(records)
            return
        seen = self._seen
        due = self._due
        for rec in records:
            if due is not None:
                _sid, _sort, _part, _off, clock, _m = rec
                if due(clock):
                    self._tick(clock)
            pend = self._enter(rec)
            if pend is not None:  # an async sink: wait for it here
                asyncio.run(_wait_all(pend, self))
            if seen:  # windows moved per record
                pend = self._moved()
                if pend is not None:
                    asyncio.run(_wait_all(pend, self))

    def _enter(self, rec: tuple[Any, ...]) -> list[Awaitable[None]] | None:
        """Hand record ``rec`` to its stream's first operators; what they left pending."""
        sid, sort_ms, part, off, clock, m = rec
        self.sort_ms = sort_ms
        self.clock_ms = clock
        self.source = (sid, part, off)
        try:
            return self.entries[sid](m)
        except OperatorFailure as f:
            raise self._failure(f, sid, part, off) from f.cause

    def _moved(self) -> list[Awaitable[None]] | None:
        """``_move`` after the record being processed, its failure named by that record."""
        try:
            return self._move()
        except OperatorFailure as f:
            raise self._failure(f, *self.source) from f.cause

    async def _feed_async(self, records: Iterable[tuple[Any, ...]]) -> None:
        due = self._due
        limit = self.max_concurrency
        queues = self._queues
        seen = self._seen
        for rec in records:
            if due is not None:
                _sid, _sort, _part, _off, clock, _m = rec
                if due(clock):
                    await self._tick_async(clock)
            pend = self._enter(rec)
            if pend is not None:
                await _wait_all(pend, self)
            if seen:
                pend = self._moved()
                if pend is not None:
                    await _wait_all(pend, self)
            if any(len(q.calls) >= limit for q in queues):
                await self._drain(limit - 1)

    async def _drain(self, keep: int) -> None:
        """Release completed calls in input order until each queue holds at most ``keep``."""
        queues = self._queues
        while True:
            busiest = None
            for q in queues:
                if len(q.calls) > keep:
                    busiest = q
                    break
            if busiest is None:
                return
            task, sort_ms, clock, source, started = busiest.calls.popleft()
            if not task.done():
                if self.callback_timeout_ms > 0:
                    left = started + self.callback_timeout_ms / 1000 - time.monotonic()
                    await asyncio.wait({task}, timeout=max(left, 0))
                    if not task.done():
                        raise self._timed_out(busiest.op_id, task, source)
                else:
                    await asyncio.wait({task})
            # its outputs go on as the streaming task's (``runtime.engine.dag.continue_outputs``),
            # stamped with the record that made the call
            saved = (self.sort_ms, self.clock_ms, self.source)
            self.sort_ms, self.clock_ms, self.source = sort_ms, clock, source
            try:
                await continue_outputs(task, busiest.op_id, busiest.nexts)
            except OperatorFailure as f:
                raise self._failure(f, *source) from f.cause
            finally:
                self.sort_ms, self.clock_ms, self.source = saved

    def _timed_out(self, op_id: str, task: asyncio.Task[Any],
                   source: tuple[str, int, int]) -> PassFailure:
        """The error of an async call past ``task.callback.timeout.ms``, naming the function
        it waits in; the call is cancelled."""
        sid, part, off = source
        where = coroutine_wait([task.get_coro()]).where
        task.cancel()
        waits = f", waiting in {where}" if where is not None else ""
        return PassFailure(
            f"operator {op_id!r}: an async call on stream {sid!r} "
            f"({self.describe(sid, part, off)}) did not complete within "
            f"task.callback.timeout.ms={self.callback_timeout_ms} in task "
            f"{self.task_name!r}{waits}; the function hangs, or needs a longer timeout")

    def _controls(self, when: str, call: Callable[[Operator], Iterable[list[Any]]]
                  ) -> Iterator[list[Awaitable[None]] | None]:
        """Call ``call`` on every operator, stage by stage in topological order, passing each
        list of outputs it gives downstream as it is made; yields after each list, so the async
        runner can release calls before the next operator (a window downstream of an async
        call) gets its turn, and ``finish_chunks`` can hand on what was written."""
        saved = self.source
        for stage in self.stages:
            for op_id in stage.operators:
                op = self.operators[op_id]
                meter = self.op_meters[op_id]
                nexts = self._nexts(op_id)
                try:
                    self.source = ("", self.partition, -1)  # no record causes these
                    chunks = iter(call(op))
                    while True:
                        t = time.perf_counter_ns()
                        outs = next(chunks, _DONE)
                        self._control(op_id, time.perf_counter_ns() - t)
                        if outs is _DONE:
                            break
                        if outs:
                            meter.n_out += len(outs)
                        pend = forward(outs, nexts) if outs else None
                        self.source = saved
                        yield pend
                        self.source = ("", self.partition, -1)
                except OperatorFailure as f:
                    if isinstance(f.cause, PassFailure):  # an output's own words
                        raise f.cause from f.cause.__cause__
                    raise PassFailure(f"operator {f.op_id!r} failed {when} in task "
                                      f"{self.task_name!r}: {type(f.cause).__name__}: "
                                      f"{f.cause}") from f.cause
                except PassFailure:
                    raise
                except Exception as exc:
                    raise PassFailure(f"operator {op_id!r} failed {when} in task "
                                      f"{self.task_name!r}: {type(exc).__name__}: {exc}") from exc
                finally:
                    self.source = saved

    def _tick(self, now: int) -> None:
        self.clock_ms = now
        for pend in self._controls("at a window tick", lambda op: (op.on_timer(now),)):
            if pend is not None:
                asyncio.run(_wait_all(pend, self))

    def _end(self) -> None:
        for pend in self._controls("at end-of-stream", lambda op: (op.on_end_of_stream(),)):
            if pend is not None:
                asyncio.run(_wait_all(pend, self))

    async def _tick_async(self, now: int) -> None:
        await self._drain(0)
        self.clock_ms = now
        for pend in self._controls("at a window tick", lambda op: (op.on_timer(now),)):
            if pend is not None:
                await _wait_all(pend, self)
            await self._drain(0)

    async def _end_async(self) -> None:
        await self._drain(0)
        for pend in self._controls("at end-of-stream", lambda op: (op.on_end_of_stream(),)):
            if pend is not None:
                await _wait_all(pend, self)
            await self._drain(0)

    def _failure(self, f: OperatorFailure, sid: str, part: int, off: int) -> PassFailure:
        if isinstance(f.cause, PassFailure):  # (an output's own words: a message not JSON)
            return PassFailure(f.cause.detail)
        return PassFailure(
            f"operator {f.op_id!r} failed on stream {sid!r} ({self.describe(sid, part, off)}) "
            f"in task {self.task_name!r}: {f.reason}; fix the function "
            f"or the input and run again: nothing was written")


class _Partition:
    """Where a task's sender writes the records of one target partition ``p`` of stream
    ``sid`` (a buffer of ``runtime.engine.wiring.record_sender``'s): ``append(m)`` adds message
    ``m``'s record to the executor's output, stamped with the record being processed."""

    __slots__ = ("ex", "sid", "p")

    def __init__(self, ex: PassExecutor, sid: str, p: int) -> None:
        self.ex = ex
        self.sid = sid
        self.p = p

    def append(self, m: Any) -> None:
        ex, sid = self.ex, self.sid
        ex.seq = seq = ex.seq + 1
        ex.written[sid] += 1
        ex.out.append((self.p, (sid, ex.sort_ms, ex.partition, seq, ex.clock_ms, m)))


def _as_is(m: Any) -> Any:
    return m


class Columns(NamedTuple):
    """Records a ``PassExecutor.line`` wrote into one stream, as columns: ``SCHEMA``'s but the
    message (``messages``, or their JSON lines where the stream is written as such), and the
    tag of the message each came from."""

    sid: str
    parts: list[int]
    sort_ms: int
    src: int
    offsets: range
    clock_ms: int
    messages: list[Any]
    lines: list[bytes] | None
    tags: list[int]


def _line_failure(op_id: str, exc: Exception, tag: int) -> OperatorFailure:
    f = OperatorFailure(op_id, exc)
    f.tag = tag
    return f


def json_encoder(sid: str) -> Callable[[Any], bytes]:
    """message -> its JSON line's bytes (as JSON Lines outputs hold it), or a ``PassFailure``
    naming output ``sid``."""
    encode = msgspec.json.Encoder().encode

    def encode_line(m: Any) -> bytes:
        try:
            return encode(m)
        except (TypeError, msgspec.EncodeError) as exc:
            raise PassFailure(f"output {sid!r}: a message cannot be written as JSON: {exc}: "
                              f"{m!r:.80}; map it to JSON-friendly values (dict, list, str, "
                              f"numbers) first") from exc
    return encode_line


def _column_window(op: Operator) -> tuple[str, bool] | None:
    """For a window that takes runs of records (``PassExecutor._run_window``) and has a loop
    over records given as columns (``process_columns``), whose key function reads the
    message's key and whose event-time function one field of its value (``kv.key``,
    ``kv.value["ts"]``, as ``planner.fields`` reads them): that field, and whether its fold
    reads the message it folds. Else None."""
    if op.process_columns is None or not isinstance(op.spec, WindowSpec):
        return None
    window = op.spec.window
    if field_path(window.key_fn) != (("attr", "key"),):
        return None
    path = field_path(window.event_time)
    if path is None or len(path) != 2 or path[0] != ("attr", "value") \
            or path[1][0] != "item" or type(path[1][1]) is not str:
        return None
    return path[1][1], not ignores(op.fold_fn, 0, 2)


def _behind_joins(op: Operator, ctx: OperatorContext) -> OperatorContext:
    """The context of ``op``: a window after an event-time join, whose outputs come up to the
    join's lag out of event-time order (which the latest time seen cannot tell), closes its
    panes at the end of the pass, a session window taking its messages in event-time order then
    (docs/spark.md); any other operator keeps its stage's."""
    spec = op.spec
    if isinstance(spec, WindowSpec) and spec.join_lag_ms and not ctx.external_watermarks:
        op.hold_ahead = True
        return replace(ctx, external_watermarks=True)
    return ctx


def per_message_windows(plan: Any, stage: Any) -> list[str]:
    """The event-time windows of ``stage`` whose watermark moves message by message when the
    pass is narrow (one source partition per task partition, in offset order): the stage reads
    one input, which declares no event time, and no async step comes before the window. As in
    the streaming runtime, which messages beyond the window's bound are late is then fixed by
    the input's order (docs/semantics.md, "Event time and watermarks")."""
    app = plan.app
    if len(stage.inputs) != 1:
        return []
    d = app.inputs.get(stage.inputs[0])
    if d is None or d.event_time is not None:
        return []
    graph = plan.dag
    node = stream_node(stage.inputs[0])
    asyncs = {op.op_id for op in app.operators if isinstance(op, AsyncFlatMapSpec)}
    out = []
    for op_id in stage.operators:
        spec = app.operator(op_id)
        if isinstance(spec, WindowSpec) and spec.window.event_time is not None \
                and node in graph.ancestors(op_id) \
                and not asyncs & graph.ancestors(op_id):
            out.append(op_id)
    return out


def _declared_upstream(plan: Any, stage: Any, seen: frozenset[str] = frozenset()) -> bool:
    """Every input that feeds ``stage``, through intermediate streams too, declares event_time."""
    app = plan.app
    for sid in stage.inputs:
        d = app.inputs.get(sid)
        if d is not None:
            if d.event_time is None:
                return False
            continue
        for producer in plan.stages:
            if sid in producer.outputs and producer.stage_id not in seen \
                    and not _declared_upstream(plan, producer, seen | {stage.stage_id}):
                return False
    return True


def _ticks(tick_ms: int) -> Callable[[int], bool] | None:
    """``due(clock)``: True when the clock passed the next multiple of ``tick_ms`` since the last
    tick (the first record starts the count); None without ticks."""
    if tick_ms <= 0:
        return None
    next_tick: list[int | None] = [None]

    def due(clock: int) -> bool:
        nt = next_tick[0]
        if nt is not None and clock < nt:
            return False
        next_tick[0] = clock - clock % tick_ms + tick_ms
        return nt is not None
    return due


async def _as_list(call: Any) -> list[Any]:
    out = await call
    return out if type(out) is list else list(out or ())


async def _wait_all(pend: list[Awaitable[None]], ex: PassExecutor) -> None:
    for p in pend:
        if inspect.isawaitable(p):
            try:
                await p
            except OperatorFailure as f:
                raise ex._failure(f, *ex.source) from f.cause
