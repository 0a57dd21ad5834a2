"""Per-operator counts and times of a Spark pass: what ``ReprocessResult.operators`` reports.

Each operator of a pass gets a meter (a list: the cheapest thing to bump per message), and an
emit that bumps it around the operator's own call. The metered emits here do what
``runtime.dag.chain`` / ``chain_one`` do (which the streaming runtime shares, and which stay as
they are), with the meter inline.

Counts are exact. Time is read with ``time.perf_counter_ns``, which costs about 200 ns a read on
a virtual machine, twice the cost of a simple operator: so the per-message calls of an operator
are timed for its first message and every ``SAMPLE``-th one after, and ``handle-ns`` scales
their time to all its calls (an estimate of the total, off by the spread of the call times).
Calls at window ticks, watermarks and end-of-stream are few and timed every one.

What is counted, by the names the streaming runtime uses (Samza's):

- ``messages-in``: messages handed to the operator (both sides of a join);
- ``messages-out``: what it gave downstream: outputs of ``process``, and of window ticks,
  watermarks and end-of-stream (a window's panes, and its late messages when it has ``late_to``);
- ``handle-ns``: nanoseconds spent in the operator's own function, not in the operators after it
  (per-message calls sampled, see above).
  An operator that writes a stream (``partition_by``, ``broadcast``, ``send_to``) counts the write
  too: the write is its work. An async call counts the time to start it, not the wait. A
  ``merge`` has no function of its own: its time is 0;
- ``panes-emitted`` (windows): the panes it emitted;
- ``late-messages-dropped`` (windows): taken from the window's own late counter
  (``operators.late``), as ``late_counts`` is; ``late-messages-sent`` with ``late_to``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from operators.base import IDENTITY, Operator
from runtime.dag import Emit, OperatorFailure, fan_out, forward, gather_pending
from runtime.wiring import bind_port
from samza_dsl.late import LateMessage
from samza_dsl.spec import BroadcastSpec, JoinSpec, PartitionBySpec, SendToSpec

__all__ = ["IN", "OUT", "NS", "PANES", "SAMPLE", "MESSAGES_IN", "MESSAGES_OUT", "HANDLE_NS",
           "PANES_EMITTED", "LATE_DROPPED", "LATE_SENT", "Meter", "new_meter", "metered_emit",
           "count_outputs", "meter_names", "handle_ns", "timed"]

MESSAGES_IN = "messages-in"
MESSAGES_OUT = "messages-out"
HANDLE_NS = "handle-ns"
PANES_EMITTED = "panes-emitted"
LATE_DROPPED = "late-messages-dropped"
LATE_SENT = "late-messages-sent"

#: ``[messages in, messages out, ns timed every call, panes emitted, ns of the sampled
#: per-message calls]`` of one operator in one task
Meter = list[int]
IN, OUT, NS, PANES, SAMPLED = 0, 1, 2, 3, 4
#: a per-message call is timed when the messages before it are a multiple of this (a power of 2)
SAMPLE = 16
_MASK = SAMPLE - 1

_now = time.perf_counter_ns


def new_meter() -> Meter:
    return [0, 0, 0, 0, 0]


def handle_ns(meter: Meter) -> int:
    """The operator's time: its calls timed every one, and its per-message calls' sampled time
    scaled to all of them."""
    calls = meter[IN]
    timed = (calls + _MASK) // SAMPLE  # calls 0, SAMPLE, 2 * SAMPLE, ...
    return meter[NS] + (meter[SAMPLED] * calls // timed if timed else 0)


def meter_names(meter: Meter, window: bool) -> dict[str, int]:
    """A meter by metric name (``panes-emitted`` only for a window)."""
    out = {MESSAGES_IN: meter[IN], MESSAGES_OUT: meter[OUT], HANDLE_NS: handle_ns(meter)}
    if window:
        out[PANES_EMITTED] = meter[PANES]
    return out


def count_outputs(meter: Meter, outs: list[Any], window: bool) -> None:
    """Counts ``outs`` as the operator's outputs (panes: what is not a late message)."""
    meter[OUT] += len(outs)
    if window:
        meter[PANES] += sum(1 for o in outs if type(o) is not LateMessage)


def metered_emit(op: Operator, port: int, nexts: list[Emit], meter: Meter, *,
                 window: bool) -> Emit:
    """``runtime.wiring.operator_emit`` with ``meter`` bumped around the operator's own call:
    fused when the operator gives at most one output, else through its ``process``."""
    op_id = op.op_id
    writes = isinstance(op.spec, PartitionBySpec | BroadcastSpec | SendToSpec)
    one = op.one_to_one() if port == 0 else None
    if one is not None and not window:
        return _metered_one(op_id, one, nexts, meter, writes)
    process = bind_port(op, port) if isinstance(op.spec, JoinSpec) else op.process
    return _metered_chain(op_id, process, nexts, meter, window)


def timed(fn: Callable[[Any], Any], m: Any, meter: Meter) -> Any:
    """``fn(m)``, its time added to the meter's sampled time."""
    t = _now()
    r = fn(m)
    meter[SAMPLED] += _now() - t
    return r


def _metered_one(op_id: str, fn: Callable[[Any], Any], nexts: list[Emit], meter: Meter,
                 writes: bool) -> Emit:
    """As ``runtime.dag.chain_one``, metered."""
    nxt = fan_out(nexts) if nexts else None
    if fn is IDENTITY and nxt is not None:
        if writes:  # send_to, broadcast: the write is the operator's work
            def send(m: Any) -> list[Awaitable[None]] | None:
                n = meter[IN]
                meter[IN] = n + 1
                meter[OUT] += 1
                return nxt(m) if n & _MASK else timed(nxt, m, meter)
            return send

        def passing(m: Any) -> list[Awaitable[None]] | None:  # merge: no function of its own
            meter[IN] += 1
            meter[OUT] += 1
            return nxt(m)
        return passing

    if writes and nxt is not None:  # partition_by: its key function and the write
        def emit_write(m: Any) -> list[Awaitable[None]] | None:
            n = meter[IN]
            meter[IN] = n + 1
            try:
                if n & _MASK:
                    r = fn(m)
                else:
                    t = _now()
                    r = fn(m)
                    if r is not None:
                        meter[OUT] += 1
                        p = nxt(r)
                        meter[SAMPLED] += _now() - t
                        return p
                    meter[SAMPLED] += _now() - t
            except OperatorFailure:
                raise
            except Exception as exc:
                raise OperatorFailure(op_id, exc) from exc
            if r is None:
                return None
            meter[OUT] += 1
            return nxt(r)
        return emit_write

    def emit(m: Any) -> list[Awaitable[None]] | None:
        n = meter[IN]
        meter[IN] = n + 1
        try:
            r = fn(m) if n & _MASK else timed(fn, m, meter)
        except Exception as exc:
            raise OperatorFailure(op_id, exc) from exc
        if r is None or nxt is None:
            if r is not None:
                meter[OUT] += 1
            return None
        meter[OUT] += 1
        return nxt(r)
    return emit


def _metered_chain(op_id: str, process: Callable[[Any], Any], nexts: list[Emit], meter: Meter,
                   window: bool) -> Emit:
    """As ``runtime.dag.chain``, metered; an awaitable result's outputs are counted when it
    completes."""
    def emit(m: Any) -> list[Awaitable[None]] | None:
        n = meter[IN]
        meter[IN] = n + 1
        try:
            out = process(m) if n & _MASK else timed(process, m, meter)
        except OperatorFailure:
            raise
        except Exception as exc:
            raise OperatorFailure(op_id, exc) from exc
        if type(out) is list:
            if not out:
                return None
            meter[OUT] += len(out)
            if window:
                meter[PANES] += sum(1 for o in out if type(o) is not LateMessage)
            if len(out) == 1 and len(nexts) == 1:
                return nexts[0](out[0])
            return forward(out, nexts) if nexts else None
        return [_continue(out, op_id, nexts, meter, window)]
    return emit


async def _continue(awaitable: Awaitable[Any], op_id: str, nexts: list[Emit], meter: Meter,
                    window: bool) -> None:
    """An operator's awaitable result: its outputs counted and passed on when it completes."""
    try:
        outs = await awaitable
    except OperatorFailure:
        raise
    except Exception as exc:
        raise OperatorFailure(op_id, exc) from exc
    if outs:
        outs = list(outs)
        count_outputs(meter, outs, window)
        pend = forward(outs, nexts)
        if pend is not None:
            await gather_pending(pend)
