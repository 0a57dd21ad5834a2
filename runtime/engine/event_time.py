"""How each input partition of a task counts for event time while the task hands it out
(docs/semantics.md rules 8, 13 and 15; ``runtime.engine.watermarks`` keeps the progress and computes
the watermarks).

The way is chosen once per input stream when the task is built (``input_time``), as one of:

- ``InputTime``: the stream's messages carry no event time of their own here (an intermediate
  stream, a stage without event time): only a producer's watermark or end counts, at its offset;
- ``ObservedTime``: an input without declared event time feeding event-time windows or
  intermediate streams: each message gets a box (``CURRENT``) in which its outputs record the
  event times they had where they were measured. Where the partition alone feeds windows with no
  bound that each of its messages reaches inline (``TaskClock.local``), the windows keep their
  own watermark, as they were told when built, and its messages need no box; where it alone
  feeds windows with a bound, those it reaches inline take the time each message traced to in
  them as it is handed out (``early``), whatever is in flight after them;
- ``DeclaredTime``: an input with ``event_time=``: each message's time is computed before it is
  handed out. Where the partition alone feeds its stage's windows, their watermark follows it
  message by message: those that every message reaches inline take its time as it is handed out
  (``early``), whatever is in flight after them or on the task's other inputs, and the others
  once it completed with nothing before it in flight; where other channels feed them, the
  windows move once the clock says so; with no window, the batch's latest time counts at its end.
  Where the partition alone feeds a stage writing intermediate streams, the stage's watermark
  goes ahead of a message behind the partition's progress.

The hand-out loop calls, per batch of one partition: ``begin``; per message ``before`` (its time,
kept in its handout record) and, once it completed inline with nothing before it in flight,
``after`` (``meanwhile`` where the task has messages in flight: ``after`` if none is of the
partition, else ``early`` where it is set); ``control`` for a producer's watermark or end
(``handed_out_mark`` where messages of the partition before it are still in flight),
``neighbour`` for another virtual task's message (rule 18); and ``end`` at the batch's end.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from operators.base import Operator
from runtime.engine.dag import Emit, OperatorFailure, forward
from runtime.engine.records import Watermark
from runtime.engine.watermarks import (
    CURRENT,
    NO_WATERMARK,
    OBSERVED,
    TaskClock,
    event_seconds,
)

if TYPE_CHECKING:
    from planner import Stage
    from runtime.engine.job import SSP
    from runtime.engine.systems import Producer

__all__ = ["WindowMoves", "InputTime", "ObservedTime", "DeclaredTime", "input_time",
           "EventTimeFailure"]

Pending = list[Awaitable[None]] | None


class EventTimeFailure(Exception):
    """An input's ``event_time`` failed on a message (``cause``)."""

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause


class WindowMoves:
    """What a moved watermark does between two messages: a window takes it and passes on the
    panes it closed, or a stage's watermark goes into the intermediate streams it writes."""

    def __init__(self, clock: TaskClock, operators: Mapping[str, Operator],
                 nexts: Callable[[str], list[Emit]], producer: Producer,
                 partitions: Mapping[str, int]) -> None:
        self.clock = clock
        self.operators = operators
        self.nexts = nexts
        self.producer = producer
        self.partitions = partitions

    def move(self, op: Operator, wm: int, pend: Pending) -> Pending:
        """Give one window its new watermark; what its panes still wait for is added to
        ``pend``."""
        try:
            outs = op.on_watermark(wm)
        except Exception as exc:
            raise OperatorFailure(op.op_id, exc) from exc
        if outs:
            p = forward(outs, self.nexts(op.op_id))
            if p:
                if pend is None:
                    return p
                pend.extend(p)
        return pend

    def advance(self, stage: Stage) -> Pending:
        """After a message completed inline: the windows of its stage take the watermark it
        moved, before the next message, so a late message is late whatever the batch size.
        Returns what the panes are still waiting for downstream."""
        pend: Pending = None
        operators = self.operators
        for op_id, wm in self.clock.sync_windows(stage):
            try:
                outs = operators[op_id].on_watermark(wm)
            except OperatorFailure:
                raise
            except Exception as exc:
                raise OperatorFailure(op_id, exc) from exc
            if outs:
                p = forward(outs, self.nexts(op_id))
                if p:
                    if pend is None:
                        pend = p
                    else:
                        pend.extend(p)
        return pend

    def send_marks(self, stage: Stage) -> bool:
        """Send ``stage``'s watermark into its intermediate streams where it moved; True when
        it did."""
        marks = self.clock.stream_marks(stage)
        self.send(marks)
        return bool(marks)

    def send(self, marks: list[tuple[str, Any]]) -> None:
        producer = self.producer
        partitions = self.partitions
        for sid, mark in marks:
            for p in range(partitions[sid]):
                producer.send(sid, p, mark)


class InputTime:
    """A stream whose messages carry no event time here: a producer's watermark or end moves
    the windows of its stage, and goes on into the stage's intermediate streams in order."""

    #: the loop calls ``before``/``after`` per message (False: they do nothing)
    timed = False
    #: ``early(t, pend)``, where windows take a message's time as it is handed out: the loop
    #: calls it for a timed message that did not complete inline with nothing in flight
    early: Callable[[Any, Pending], Pending] | None = None

    def __init__(self, clock: TaskClock, moves: WindowMoves, stream_id: str) -> None:
        self.clock = clock
        self.moves = moves
        self.stream_id = stream_id
        #: the stage it feeds, where that has event-time windows
        self.stage = clock.window_stage.get(stream_id)
        #: the stage it feeds, where that writes intermediate streams
        self.hop = clock.hop_stage.get(stream_id)
        self.ssp: Any = None  # SSP of the batch

    def begin(self, ssp: SSP) -> None:
        """A batch of ``ssp`` begins."""
        self.ssp = ssp

    def before(self, m: Any) -> Any:
        """What the message counts for once it completed (kept in its handout record)."""
        return None

    def after(self, t: Any, pend: Pending) -> Pending:
        """The message of time ``t`` (not None) completed inline with nothing in flight before
        it; returns what the windows it moved still wait for."""
        return pend

    def control(self, mark: Any) -> Pending:
        """A producer's watermark or end completed inline with nothing in flight before it:
        the windows take it before the next message, and it goes on into the stage's
        intermediate streams in order."""
        self.clock.apply(self.ssp, mark)
        pend = None
        if self.stage is not None:
            pend = self.moves.advance(self.stage)
        if pend is None and self.hop is not None:
            self.moves.send_marks(self.hop)
        return pend

    def meanwhile(self, t: Any, pend: Pending, flying: int) -> tuple[Pending, Any]:
        """The message of time ``t`` (not None) was handed out while the task has messages
        in flight (``flying`` of them of this partition): with none of its partition, it
        counts now, as one completed inline (rule 8: its partition's completed prefix);
        else windows it reached inline take it now (``early``). What it waits for, and the
        time still to count once what came before it completed (None: counted)."""
        if pend is None and not flying:
            return self.after(t, None), None
        if self.early is not None:
            return self.early(t, pend), t
        return pend, t

    def handed_out_mark(self, mark: Any) -> Pending:
        """A producer's watermark (or end, or None) handed out while messages read before it
        are in flight: the windows every message of the stream reaches inline take a
        watermark now (``TaskClock.handed_out_mark``); what they still wait for, or None."""
        if self.stage is None or type(mark) is not Watermark:
            return None
        pend: Pending = None
        for op_id, wm in self.clock.handed_out_mark(self.ssp, mark, self.stage):
            pend = self.moves.move(self.moves.operators[op_id], wm, pend)
        return pend

    def neighbour(self, t: Any) -> tuple[Pending, Any]:
        """Another virtual task's message of time ``t``: what the windows it moved wait for,
        and what it still counts for as a completed message."""
        return None, t

    def end(self) -> None:
        """The batch ends (also on a failure)."""


class ObservedTime(InputTime):
    """An input without declared event time: its outputs record their event times in the
    message's box; windows it alone feeds and reaches inline keep their own watermark."""

    timed = True

    def __init__(self, clock: TaskClock, moves: WindowMoves, stream_id: str,
                 windows: list[Operator] | None,
                 inline: list[tuple[Any, int]] | None = None) -> None:
        super().__init__(clock, moves, stream_id)
        #: windows that keep their own watermark (``TaskClock.local``), None where it feeds none
        self.windows = windows
        self.local = windows is not None
        #: windows with a bound that the partition alone feeds and each of its messages
        #: reaches inline (``TaskClock.inline_observed``), with their bound
        self.inline = inline
        if inline is not None:
            self.early = self.handed_out

    def before(self, m: Any) -> Any:
        if self.local:
            return None
        t = [None]
        CURRENT.set(t)
        return t

    def after(self, t: Any, pend: Pending) -> Pending:
        if t[0] is not None and self.clock.apply_box(self.ssp, t) \
                and self.stage is not None:  # windows move message by message
            return self.moves.advance(self.stage)
        return pend

    def handed_out(self, t: Any, pend: Pending) -> Pending:
        """The message with box ``t`` was handed out with something in flight (before it, or
        its own outputs after the windows): the windows it reached inline take the time it
        traced to in them now, so which messages are late does not depend on how fast what is
        in flight completes (docs/semantics.md, "Per message")."""
        obs = t[0]
        if obs:
            clock = self.clock
            for op, wb in self.inline:  # type: ignore[union-attr]  # set where it is
                ms = obs.get(op.op_id)
                if ms is not None and ms - wb > op.watermark:
                    pend = self.moves.move(op, ms - wb, pend)
                    clock.delivered_at_least(op.op_id, ms - wb)
        return pend

    def neighbour(self, t: Any) -> tuple[Pending, Any]:
        if not self.local:
            return None, t
        pend = None
        for op in self.windows:  # type: ignore[union-attr]  # they keep their own: move it
            ms = t[0].get(op.op_id)
            if ms is not None and ms > op.watermark:
                pend = self.moves.move(op, ms, pend)
        return pend, None

    def end(self) -> None:
        if not self.local:
            CURRENT.set(None)


class DeclaredTime(InputTime):
    """An input with ``event_time=``: each message's time, computed before it is handed out."""

    timed = True

    def __init__(self, clock: TaskClock, moves: WindowMoves, stream_id: str,
                 single: list[tuple[Any, int]] | None, lone: Stage | None,
                 inline: list[tuple[Any, int]] | None = None) -> None:
        super().__init__(clock, moves, stream_id)
        self.event_time, self.bound = clock.declared[stream_id]
        #: the windows this partition alone feeds, with their bound: they follow its progress
        self.single = single
        #: those of them that each message reaches inline: they have taken a message once it is
        #: handed out, so only what is in flight before them could hold them back, and nothing
        #: is: they follow the times handed out, whatever is in flight (``early``)
        self.inline = inline
        if inline is not None:
            self.early = self.handed_out
        #: the stage this partition alone feeds, which writes intermediate streams
        self.lone = lone
        self.progress = self.top = NO_WATERMARK
        #: the latest time completed inline, counted at the batch's end (seconds)
        self.latest: float | None = None

    def begin(self, ssp: SSP) -> None:
        self.ssp = ssp
        self.latest = None
        if self.single is not None:
            self.progress = self.clock.progress_of(ssp)
        if self.lone is not None:
            self.top = self.clock.progress_of(ssp)

    def times(self) -> list[Any]:
        """What a batch run takes and gives back (``runtime.engine.batch``): ``[progress, bound,
        latest]``, the progress None where no stage needs the watermark ahead of a message."""
        if self.lone is None:
            return [None, None, self.latest]
        return [self.top, self.bound, self.latest]

    def took(self, times: list[Any]) -> None:
        """What a batch run gave back."""
        if self.lone is not None:
            self.top = times[0]
        self.latest = times[2]

    def before(self, m: Any) -> Any:
        try:
            t = self.event_time(m)
            if type(t) is not float and type(t) is not int and t is not None:
                t = event_seconds(t)
        except Exception as exc:
            raise EventTimeFailure(exc) from exc
        if self.lone is not None and t is not None:
            tm = round(t * 1000.0)
            if tm < self.top:  # behind the progress: the watermark goes first
                clock = self.clock
                ssp: Any = self.ssp
                if self.latest is not None:
                    clock.apply(ssp, self.latest)
                    self.latest = None
                if self.single is not None:
                    clock.raise_progress(ssp, self.progress)
                self.moves.send_marks(self.lone)
            elif tm - self.bound > self.top:
                self.top = tm - self.bound
        return t

    def after(self, t: Any, pend: Pending) -> Pending:
        single = self.single
        if single is not None:
            ms = round(t * 1000.0) - self.bound
            if ms > self.progress:
                self.progress = ms
                for op, wb in single:
                    if ms - wb > op.watermark:
                        pend = self.moves.move(op, ms - wb, pend)
        elif self.stage is None:  # the batch's latest counts at its end
            latest = self.latest
            if latest is None or t > latest:
                self.latest = t
        elif self.clock.apply_declared(self.ssp, t, self.stage):
            pend = self.moves.advance(self.stage)
        return pend

    def handed_out(self, t: Any, pend: Pending) -> Pending:
        """The message of time ``t`` was handed out with something in flight (before it, or
        its own outputs after the windows): the windows it reached inline take its time now,
        so which messages are late does not depend on how fast what is in flight completes."""
        ms = round(t * 1000.0) - self.bound
        clock = self.clock
        for op, wb in self.inline:  # type: ignore[union-attr]  # set where it is
            if ms - wb > op.watermark:
                pend = self.moves.move(op, ms - wb, pend)
                clock.delivered_at_least(op.op_id, ms - wb)
        return pend

    def end(self) -> None:
        clock = self.clock
        ssp: Any = self.ssp
        if self.single is not None and clock.raise_progress(ssp, self.progress):
            clock.touch()
            for op, _ in self.single:
                clock.delivered_at_least(op.op_id, op.watermark)
        if self.latest is not None:
            clock.apply(ssp, self.latest)
            self.latest = None


def input_time(clock: TaskClock, moves: WindowMoves, operators: Mapping[str, Operator],
               stream_id: str) -> InputTime:
    """How the partitions of ``stream_id`` count for event time in the task of ``clock``."""
    if clock.handout(stream_id) == OBSERVED:
        ops = clock.local.get(stream_id)
        reached = clock.inline_observed.get(stream_id)
        return ObservedTime(clock, moves, stream_id,
                            [operators[op] for op in ops] if ops is not None else None,
                            [(operators[op], b) for op, b in reached]
                            if reached is not None else None)
    if stream_id in clock.declared:
        windows = clock.single_declared.get(stream_id)
        single = [(operators[op], b) for op, b in windows] if windows is not None else None
        lone = None
        for stage in clock.stages:
            ssp = clock.lone.get(stage.stage_id)
            if ssp is not None and ssp.stream_id == stream_id:
                lone = stage
        reached = clock.inline_declared.get(stream_id)
        inline = [(operators[op], b) for op, b in reached] if reached is not None else None
        return DeclaredTime(clock, moves, stream_id, single, lone, inline)
    return InputTime(clock, moves, stream_id)
