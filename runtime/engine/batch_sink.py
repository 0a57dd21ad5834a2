"""The batch run of a stream into an output written by a sink that takes runs
(``Sink.write_batch``): the run's messages, through the path's synchronous one-to-one
functions, in one call per run of one partition, with the input positions they come from
(``Sources``). The rules it shares with the other runs are ``runtime.engine.batch_rules``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from operators.base import Operator
from runtime.engine.batch_rules import BatchRun
from runtime.engine.batch_rules import fail as _fail
from runtime.engine.batch_rules import first_call as _first_call
from runtime.engine.batch_rules import meter_batch as _count
from runtime.engine.batch_rules import operator_failure as _failure
from runtime.engine.batch_rules import path_fn as _path_fn
from runtime.engine.batch_rules import up_to_control as _up_to_control
from runtime.engine.dag import OneToOneChain, OperatorFailure
from runtime.engine.handout import Cursor
from runtime.engine.wiring import OneToOnePath, PartitionRule
from runtime.host.metrics import OpMeter
from samza_dsl.connectors import Sources

__all__ = ["SinkWrite", "sink_run"]

#: a sink's run of messages: ``write(partition, messages, sources)``, an awaitable it returns
#: raising ``OperatorFailure``
SinkWrite = Callable[[int, list[Any], Sources], Awaitable[None] | None]


def sink_run(path: OneToOnePath, rule: PartitionRule, write: SinkWrite,
             meter_of: Callable[[Operator], OpMeter | None], src: Cursor,
             hold: Callable[[list[Awaitable[None]]], None]) -> BatchRun:
    """The run of a stream along ``path`` into a sink's ``write_batch`` (``write``), ``rule``
    its partition rule: the messages of the run up to the first control record, through the
    path's functions, in one call per run of messages in one partition, with the input
    positions they come from (``src.batch``: the batch being handed out, its SSP and first
    offset). ``src.index`` is set past each call's last message, so ``SinkContext.source()`` is
    that message's during the call. Where a write returns an awaitable, the run's last message
    waits for it: what it waits for goes to ``hold`` and its index is returned, for the
    hand-out loop to take it as in flight. A failing function or partition rule ends the run:
    the messages before it are written first, as one by one."""
    apply = _SinkFunctions(*_path_fn(path, meter_of)) if path.fns else None
    op_id = path.last.op_id
    by_rule = None if rule.fixed is not None else rule
    fixed = rule.fixed or 0

    def run(payloads: list[Any], i: int, end: int, times: Any = None) -> int:
        seg = _up_to_control(payloads[i:end])
        if not seg:
            return i
        stop = i + len(seg)
        cur = src.batch
        assert cur is not None  # (set before any run is called)
        ssp, first = cur.ssp, cur.first
        failed: tuple[int, OperatorFailure] | None = None
        offsets: Sequence[int]
        if apply is None:
            msgs, offsets = seg, range(first + i, first + stop)
        else:
            msgs, offsets, failed = apply(seg, first + i)
        pend: list[Awaitable[None]] = []
        if msgs:
            failed = _write_runs(write, by_rule, fixed, op_id, msgs,
                                 Sources(ssp.stream_id, ssp.partition, offsets), pend,
                                 src, first) or failed
        src.index = stop
        if failed is not None:
            for p in pend:  # the task stops: nothing waits for them
                close = getattr(p, "close", None)  # foreign: a coroutine, or a call
                if close is not None:
                    close()
            _fail(failed[0] - first, failed[1], op_id)
        if pend:
            hold(pend)
            return stop - 1
        return stop
    return run


def _write_runs(write: SinkWrite, rule: PartitionRule | None, fixed: int, op_id: str,
                msgs: list[Any], sources: Sources, pend: list[Awaitable[None]], src: Cursor,
                first: int) -> tuple[int, OperatorFailure] | None:
    """``msgs`` (from ``sources``) to ``write``, one call per run of one partition (all in
    ``fixed`` where there is no ``rule``), what the calls return to wait for added to ``pend``,
    ``src.index`` past each call's last message (of the batch at offset ``first``); the offset and
    failure of the first message whose partition or write failed, or None."""
    failed: tuple[int, OperatorFailure] | None = None
    if rule is None:
        runs = [(fixed, 0, len(msgs))]
    else:
        runs = []
        start = 0
        last = -1
        for j, m in enumerate(msgs):
            try:
                p = rule(m)
            except Exception as exc:
                failed = sources.offsets[j], OperatorFailure(op_id, exc)
                msgs, sources = msgs[:j], sources[:j]
                break
            if p != last:
                if j:
                    runs.append((last, start, j))
                start, last = j, p
        if msgs:
            runs.append((last, start, len(msgs)))
    whole = len(runs) == 1
    offsets = sources.offsets
    for p, a, b in runs:
        src.index = offsets[b - 1] - first + 1
        try:
            w = write(p, msgs if whole else msgs[a:b], sources if whole else sources[a:b])
        except Exception as exc:
            return offsets[a], OperatorFailure(op_id, exc)
        if w is not None:
            pend.append(w)
    return failed


class _SinkFunctions:
    """``sink_run``'s functions over a run's messages: what they gave, the input offsets of
    the messages that gave it, and the offset and failure that ended the run (or None)."""

    def __init__(self, fn_op: str, fn: Callable[[Any], Any], meter: OpMeter | None,
                 fused: OneToOneChain | None) -> None:
        self.fn_op, self.fn, self.meter, self.fused = fn_op, fn, meter, fused

    def __call__(self, seg: list[Any], at: int
                 ) -> tuple[list[Any], Sequence[int], tuple[int, OperatorFailure] | None]:
        """``seg``, whose first message has offset ``at``, through the functions."""
        fn, meter, fused = self.fn, self.meter, self.fused
        out: list[Any] = []
        offs: list[int] | None = None  # made at the first message dropped
        dropped = 0
        failed = None
        timed = meter is None and fused is None
        o = at - 1
        try:
            for o, m in enumerate(seg, at):
                if timed:
                    r = fn(m)
                else:
                    r = _first_call(fn, meter, fused, m)
                    timed = True
                if r is None:
                    dropped += 1
                    if offs is None:
                        offs = list(range(at, o))
                else:
                    out.append(r)
                    if offs is not None:
                        offs.append(o)
        except Exception as exc:
            dropped += 1
            failed = (o, _failure(exc, self.fn_op))
        _count(meter, fused, o - at + 1, dropped)
        return out, range(at, at + len(out)) if offs is None else offs, failed

