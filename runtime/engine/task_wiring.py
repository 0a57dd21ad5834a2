"""How one task's operators are wired (``runtime.engine.wiring``), from what the task gives: each
operator's meter and emit (on the thread pool for blocking user code where there is one, observed
by the task's clock where it feeds an event-time window), the terminals into the task's producer,
and for each input stream its entry, its way of counting event time (``runtime.engine.event_time``) and
its batch run (``runtime.engine.batch``), all built once when the task starts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

from operators.base import IDENTITY, Operator
from operators.join_event_time import EventTimeJoinOperator
from operators.window import WindowOperator
from runtime.engine.batch import stream_run
from runtime.engine.batch_operator import operator_run
from runtime.engine.batch_rules import BatchRun
from runtime.engine.batch_sink import sink_run
from runtime.engine.dag import Emit, OperatorFailure, chain, metered
from runtime.engine.event_time import DeclaredTime, InputTime, WindowMoves, input_time
from runtime.engine.handout import Cursor
from runtime.engine.job import SSP
from runtime.engine.sinks import SinkProducer
from runtime.engine.systems import Producer
from runtime.engine.watermarks import OBSERVED, TaskClock, observing
from runtime.engine.wiring import (
    OneToOnePath,
    PartitionRule,
    Wiring,
    bind_port,
    operator_emit,
    partition_of,
    record_sender,
)
from runtime.host.metrics import Metrics, OpMeter
from samza_dsl.spec import JoinSpec, JoinTableSpec, SendToSpec, WindowSpec

__all__ = ["TaskWiring", "THREADED_OPCODES"]

#: the opcodes whose operators run on the task's thread pool where it has one (but a join with
#: a remote table, which is async)
THREADED_OPCODES = frozenset({"map", "filter", "flat_map", "sink", "join_table"})


class TaskWiring:
    """The wiring of task ``name``'s ``operators``. ``batching``: batch runs where the shape
    allows; ``read``, ``src`` and ``hold`` are what the runs share with the hand-out loop (the
    messages read per stream, the batch and index being handed out, what the message where an
    operator's run stopped waits for)."""

    def __init__(self, name: str, plan: Any, stages: Sequence[Any], partition: int,
                 ssps: Sequence[SSP], partitions: Mapping[str, int],
                 operators: Mapping[str, Operator], metrics: Metrics,
                 executor: Executor | None, producer: Producer, clock: TaskClock,
                 batching: bool, read: dict[str, int], src: Cursor,
                 hold: Callable[[list[Awaitable[None]]], None], *, origins: bool = False,
                 traced: bool = False) -> None:
        self.name = name
        self.plan = plan
        #: the task's records into intermediate streams carry their origins
        #: (``runtime.engine.origins``): a run must name each message they come from
        self.origins = origins
        #: traced (``runtime.host.tracing``): records into outputs carry the traceparent of
        #: the message they come from, so a run names each message for them too
        self.traced = traced
        self.stages = stages
        self.partition = partition
        self.partitions = partitions
        self.metrics = metrics
        self.executor = executor
        self.producer = producer
        self.clock = clock
        self.batching = batching
        self.read = read
        self.src = src
        self.hold = hold
        #: each operator's meter (``runtime.host.metrics``), unless metrics.operators is off
        self.meters: dict[str, OpMeter] = {}
        #: the partition rule of each terminal a batch run may stand in for: one writing the
        #: stream as it is (not observed by the clock), by key (``send_one``, or
        #: ``record_sender`` with key and value serializers)
        self.rules: dict[tuple[str, str], PartitionRule] = {}
        self.wiring = Wiring(plan, operators, self._observed_sender, self._make_emit)
        self.nexts = self.wiring.nexts
        self.moves = WindowMoves(clock, operators, self.wiring.nexts, producer, partitions)
        self.entries: dict[str, Emit] = {}
        #: how each input stream counts for event time as it is handed out
        self.times: dict[str, InputTime] = {}
        self.batches: dict[str, BatchRun] = {}
        for ssp in ssps:
            sid = ssp.stream_id
            if sid not in self.entries:
                self.times[sid] = input_time(clock, self.moves, operators, sid)
                self.entries[sid] = self.wiring.entry(sid)
                batch = self._batch_run(sid, self.times[sid])
                if batch is not None:
                    self.batches[sid] = batch

    def _batch_run(self, stream_id: str, tm: InputTime) -> BatchRun | None:
        """The batch run of ``stream_id`` (``runtime.engine.batch``) where batching is on and the
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
                            self.src, self.hold, stream_id,
                            one_by_one=self._stamped(op.op_id))

    def _stamped(self, op_id: str) -> bool:
        """Whether records that ``op_id``'s outputs lead to carry the origins of the messages
        that make them (``runtime.engine.origins``)."""
        if not self.origins:
            return False
        after = self.plan.dag.descendants(op_id)
        streams = [*self.plan.intermediate_streams, *self.plan.output_streams] if self.traced \
            else self.plan.intermediate_streams
        return any(f"stream:{sid}" in after for sid in streams)

    def _stream_batch(self, stream_id: str) -> BatchRun | None:
        """``stream_run`` of ``stream_id``, where its steps are one-to-one into a stream."""
        path = self.wiring.one_to_one_path(stream_id)
        if path is None:
            return None
        sink = self.producer.record_sink(path.target)
        if sink is None:
            return self._sink_batch(stream_id, path)
        sender = self.wiring.sender(path.target, path.last.op_id)
        rule = self.rules.get((path.target, path.last.op_id))
        if rule is None:
            return None  # a sender observed by the clock, or writing records of its own
        return stream_run(path, sender, rule, sink,
                          self.plan.streams[path.target].kind == "broadcast", self.meter,
                          self.read, stream_id, self.clock.declared.get(stream_id, (None,))[0])

    def _sink_batch(self, stream_id: str, path: OneToOnePath) -> BatchRun | None:
        """``sink_run`` of ``stream_id`` into an output written by a sink that takes runs
        (``Sink.write_batch``), where the stream has no declared event time."""
        if not isinstance(self.producer, SinkProducer) or stream_id in self.clock.declared:
            return None
        write = self.producer.batch_sender(path.target)
        op_id = path.last.op_id
        self.wiring.sender(path.target, op_id)
        rule = self.rules.get((path.target, op_id))
        if write is None or rule is None:
            return None  # a sink taking messages one by one; a sender observed by the clock

        def write_run(partition: int, messages: list[Any], sources: Any
                      ) -> Awaitable[None] | None:
            pending = write(partition, messages, sources)
            return None if pending is None else _failing_as(op_id, pending)
        return sink_run(path, rule, write_run, self.meter, self.src, self.hold)

    def meter(self, op: Operator) -> OpMeter | None:
        """The meter of ``op`` in this task (one for both ports of a join)."""
        if not self.metrics.operators or op.one_to_one() is IDENTITY:
            return None  # an operator that passes every message on does nothing to meter
        meter = self.meters.get(op.op_id)
        if meter is None:
            meter = self.meters[op.op_id] = self.metrics.meter(op.op_id, self.name)
            if isinstance(op, WindowOperator):
                meter.window = op
            elif isinstance(op, EventTimeJoinOperator):
                meter.late = op.late_tracker
        return meter

    def _make_emit(self, op: Operator, port: int, nexts: list[Emit]) -> Emit:
        """An operator's emit: on the thread pool for blocking user code when there is one,
        and observed by the task's clock where it feeds an event-time window."""
        spec = op.spec
        executor = self.executor
        meter = self.meter(op)
        if executor is not None and spec.opcode in THREADED_OPCODES \
                and not (isinstance(spec, JoinTableSpec | SendToSpec)
                         and spec.table_id in self.plan.app.remote_tables):
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

    def _observed_sender(self, stream_id: str, op_id: str) -> Emit:
        """The terminal that hands a record to the producer, observed by the task's clock where
        the stream feeds an event-time window downstream."""
        sender = self._make_sender(stream_id, op_id)
        fn = self.clock.observe.get(stream_id)
        if fn is not None:
            self.rules.pop((stream_id, op_id), None)
            sender = observing(stream_id, fn, sender, f"stream {stream_id!r}", op_id,
                               self._ahead(stream_id, op_id))
        return sender

    def _ahead(self, stream_id: str, op_id: str) -> Callable[[int], None] | None:
        """Where one channel alone feeds the stage of ``op_id``: ``ahead(ms)`` sends the
        stage's watermark into its intermediate streams before a message whose event time (in
        ``stream_id``'s readers' time) is behind the channel's progress, so that readers see the
        order one task would (docs/semantics.md, "Per message")."""
        stage = next(s for s in self.stages if op_id in s.operators)
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
        (``runtime.engine.wiring``); a message the stream's serde cannot write fails that operator."""
        n = self.partitions[stream_id]
        rule = partition_of(self.plan, stream_id, n, self.partition,
                            self.wiring.operators.get(op_id))
        sink = self.producer.record_sink(stream_id) if rule.fixed is None else None
        if sink is not None and sink.encode is not None:  # a producer of records
            if sink.key is not None and sink.value is not None and not rule.chosen:
                self.rules[(stream_id, op_id)] = rule
            return record_sender(op_id, sink, rule)
        if not rule.chosen:  # a batch run places by key: not where the application chooses
            self.rules[(stream_id, op_id)] = rule
        send = self.producer.sender(stream_id)

        def send_one(m: Any) -> list[Awaitable[None]] | None:
            try:
                pending: Any = send(rule(m), m)
            except Exception as exc:
                raise OperatorFailure(op_id, exc) from exc
            # a sink's write may return an awaitable (runtime.engine.sinks): the message waits for it
            return None if pending is None else [_failing_as(op_id, pending)]
        return send_one


async def _failing_as(op_id: str, pending: Awaitable[None]) -> None:
    try:
        await pending
    except Exception as exc:
        raise OperatorFailure(op_id, exc) from exc


def _threaded(process: Callable[[Any], Any], executor: Any) -> Callable[[Any], Any]:
    def run(m: Any) -> Any:
        return asyncio.get_running_loop().run_in_executor(executor, process, m)
    return run
