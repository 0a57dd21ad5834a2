"""What a task's operators give outside any message: at a window tick (``on_timer``), when a
watermark moves (``on_watermark``) and at end-of-stream, passed downstream in chunks and awaited;
then a stage's watermark, or its end, goes into every partition of the intermediate streams it
writes (docs/semantics.md rules 8, 11 and 15)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence, Set
from typing import Any

from operators.base import Operator, held_source
from runtime.engine.dag import Emit, OperatorFailure, gather_pending
from runtime.engine.event_time import WindowMoves
from runtime.engine.job import SSP
from runtime.engine.records import EndOfStream
from runtime.engine.systems import Producer
from runtime.engine.watermarks import TaskClock
from samza_dsl.errors import TaskError

__all__ = ["StageOutputs", "SOURCE", "CONTROL", "OUTPUT_CHUNK"]

#: outputs of one timer, watermark or end-of-stream call passed on between two producer writes
OUTPUT_CHUNK = 4096
#: the handout record (``runtime.engine.handout.Handout``) of the message an asyncio task of the task
#: completes, or ``CONTROL`` while outputs of a tick, a watermark or end-of-stream run; unset
#: while the run loop hands messages out synchronously
SOURCE: contextvars.ContextVar[Any] = contextvars.ContextVar("samza_dsl_source", default=None)
CONTROL: list[Any] = []


class StageOutputs:
    """The outputs of one task's stages that no message caused."""

    def __init__(self, name: str, stages: Sequence[Any], ssps: Sequence[SSP], ended: Set[SSP],
                 operators: Mapping[str, Operator], nexts: Callable[[str], list[Emit]],
                 producer: Producer, clock: TaskClock, moves: WindowMoves,
                 intermediate: Collection[str], partitions: Mapping[str, int],
                 now: Callable[[], int]) -> None:
        self.name = name
        self.stages = stages
        self.ssps = ssps
        self.ended = ended
        self.operators = operators
        self.nexts = nexts
        self.producer = producer
        self.clock = clock
        self.moves = moves
        self.intermediate = intermediate
        self.partitions = partitions
        self.now = now
        #: the stages flushed at end-of-stream
        self.flushed: set[str] = set()
        self.window_calls = 0

    async def advance_watermarks(self) -> None:
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
                    raise self.failed(op_id, f"at watermark {wm}", exc) from exc
                await self.run_outputs(op_id, outs)
            self.moves.send(marks)
            if marks:
                producer.signal()

    def send_control(self, stage: Any, record: Any) -> None:
        """A control record to every partition of the intermediate streams a stage writes."""
        producer = self.producer
        for sid in stage.outputs:
            if sid in self.intermediate:
                for p in range(self.partitions[sid]):
                    producer.send(sid, p, record)
        producer.signal()

    async def run_outputs(self, op_id: str, outs: list[Any]) -> None:
        """Pass outputs of a timer, watermark or end-of-stream call downstream and await them.
        Many outputs (a window closing 10^6 panes) go in chunks of ``OUTPUT_CHUNK``: between two,
        the producer writes what it buffered, so the records waiting for a write stay bounded."""
        if not outs:
            return
        nexts = self.nexts(op_id)
        pend: list[Awaitable[None]] = []
        token = SOURCE.set(CONTROL)
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
            SOURCE.reset(token)

    def failed(self, op_id: str, when: str, exc: Exception) -> TaskError:
        """The error of operator ``op_id`` raising ``exc`` ``when`` (no message in hand caused
        it; a message the operator held may have, which it then names)."""
        held = held_source(exc)
        if held:
            stream, partition, offset = held
            return TaskError(
                f"operator {op_id!r} failed {when} in task {self.name!r} on the message it held "
                f"from stream {stream!r} partition {partition} offset {offset}: "
                f"{type(exc).__name__}: {exc}. Fix the function or guard against this message; "
                f"where the task's checkpoint is before it, `samza-dsl run APP --skip "
                f"{stream}:{partition}:{offset}` passes over it once (and the copies of it that "
                f"a replay writes again), else it is kept in the operator's store and only "
                f"`samza-dsl reset APP` and a rerun get past it", op_id=op_id, task=self.name,
                stream=stream, partition=partition, offset=offset)
        if held is not None:
            return TaskError(
                f"operator {op_id!r} failed {when} in task {self.name!r} on a message it held "
                f"since before the job's last restore (where it was read is not kept): "
                f"{type(exc).__name__}: {exc}. Fix the function or guard against such messages; "
                f"it is kept in the operator's store, so only `samza-dsl reset APP` and a rerun "
                f"get past it", op_id=op_id, task=self.name)
        return TaskError(f"operator {op_id!r} failed {when} in task {self.name!r}: "
                         f"{type(exc).__name__}: {exc}", op_id=op_id, task=self.name)

    async def on_timer(self) -> None:
        self.window_calls += 1
        now = self.now()
        for stage in self.stages:
            for op_id in stage.operators:
                op = self.operators[op_id]
                try:
                    outs = op.on_timer(now)
                except Exception as exc:
                    raise self.failed(op_id, "at a window tick", exc) from exc
                await self.run_outputs(op_id, outs)

    async def end_stages(self) -> bool:
        """Flush every stage whose inputs have all ended; True when all stages are flushed."""
        for stage in self.stages:
            if stage.stage_id in self.flushed:
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
                        raise self.failed(op_id, "at end-of-stream", exc) from exc
                    if outs is None:
                        break
                    await self.run_outputs(op_id, outs)
            self.send_control(stage, EndOfStream(self.name))
            self.flushed.add(stage.stage_id)
        return len(self.flushed) == len(self.stages)
