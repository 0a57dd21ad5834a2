"""What every batch run (``runtime.engine.batch``, ``batch_sink``, ``batch_operator``) shares:
the run's type, its failure, and the per-message rules off a loop's common path, one function
each that every loop calls (a control record, a failure, a time behind the channel's progress,
the batch's timed first call and its counts), and a path's functions as one for a loop.
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable, Iterator
from itertools import compress, count
from operator import length_hint
from typing import Any, NoReturn

from operators.base import IDENTITY, Operator, stopped_at
from runtime.engine.codec import Skipped
from runtime.engine.dag import Emit, OneToOneChain, OperatorFailure
from runtime.engine.elastic import OTHER_BUCKET, OtherBucket
from runtime.engine.event_time import EventTimeFailure
from runtime.engine.records import EndOfStream, Watermark
from runtime.engine.wiring import OneToOnePath
from runtime.host.metrics import OpMeter

__all__ = ["BatchFailure", "BatchRun", "CONTROL_TYPES", "INF", "behind", "fail", "first_call",
           "meter_batch", "operator_failure", "path_fn", "progress", "send", "skipped",
           "times_in", "times_out", "up_to_control"]

#: a run takes (payloads, i, end, times=None) and returns where it stopped
BatchRun = Callable[..., int]
CONTROL_TYPES = frozenset({EndOfStream, Watermark, Skipped, OtherBucket})
INF = float("inf")


class BatchFailure(Exception):
    """The message at ``index`` of a run's payloads failed (an operator, or its event time)."""

    def __init__(self, index: int, failure: OperatorFailure | EventTimeFailure) -> None:
        self.index = index
        self.failure = failure


# The per-message rules every loop calls (and, for the index where a loop stops or fails,
# ``operators.base.stopped_at``, which a window's ``process_run`` calls too). A loop keeps its
# common path inline (a data message of the type of the one before); these are its rare
# branches: a control record, a failure, a time behind the channel's progress, and what it
# counts and times once per batch.

def skipped(m: Any, read: dict[str, int], stream_id: str) -> bool:
    """A control record in a loop: True for the marker of another virtual task's message
    (``OTHER_BUCKET``), which the loop skips and which is not this task's read; False for any
    other, where the loop stops, for the hand-out loop to take it."""
    if m is OTHER_BUCKET:
        read[stream_id] = read.get(stream_id, 0) - 1
        return True
    return False


def fail(index: int, exc: BaseException, op_id: str | None) -> NoReturn:
    """Raises the failure of the message at ``index`` of a run, in the loop's ``except``: an
    ``OperatorFailure`` as it is (a chain's names its operator), any other exception as the
    operator ``op_id``'s, or, with no ``op_id``, as the stream's event time's
    (``EventTimeFailure``); its cause the exception the user's function raised."""
    failure = EventTimeFailure(exc) if op_id is None else operator_failure(exc, op_id)
    raise BatchFailure(index, failure) from failure.cause


def operator_failure(exc: BaseException, op_id: str) -> OperatorFailure:
    """A loop's exception as the failure of its operator: an ``OperatorFailure`` as it is (a
    chain's names its operator), any other as ``op_id``'s."""
    return exc if isinstance(exc, OperatorFailure) else OperatorFailure(op_id, exc)


def send(sender: Emit, r: Any, it: Iterator[Any], end: int, track: Any = None) -> None:
    """The sender's own path, with its errors, for an output the loop does not append;
    ``track``: the cursor it reads the message's position from (``StreamSink.cursor``)."""
    if track is not None:
        track.index = end - length_hint(it)
    try:
        sender(r)
    except OperatorFailure as f:
        fail(stopped_at(it, end), f, f.op_id)


def times_in(times: list[Any]) -> tuple[Any, Any, float]:
    """(progress, bound, latest) of a batch's ``times``, the latest -inf for none."""
    top, bound, latest = times
    return top, bound, -INF if latest is None else latest


def progress(top: int, xmax: float, bound: int) -> int:
    """The channel's progress (ms): max(top, round(xmax) - bound), where ``top`` is its
    progress before the batch and ``xmax`` the largest time (ms) the batch saw (-inf: none)."""
    return top if xmax == -INF else max(top, round(xmax) - bound)


def behind(x: float, top: int, xmax: float, bound: int) -> bool:
    """Whether a time x (ms, a float) before the batch's largest (``xmax``) or the progress
    before the batch (``top``) is behind the channel's progress: the loop stops there, for the
    hand-out loop to take it. (round is monotonic, so a time at or after both is not behind:
    the loop's common path checks that inline.)"""
    return round(x) < progress(top, xmax, bound)


def times_out(times: list[Any], top: Any, bound: Any, xmax: float, lat: float) -> None:
    """The channel's progress and latest time back into ``times`` after a batch."""
    if top is not None:
        times[0] = progress(top, xmax, bound)
    if lat != -INF:
        times[2] = lat


def meter_batch(meter: OpMeter | None, fused: OneToOneChain | None, n_in: int, dropped: int) -> None:
    """A batch's messages in and dropped into the function's meter (a chain counts its own)."""
    if meter is not None:
        meter.n_in += n_in
        meter.n_out += n_in - dropped
    elif fused is not None:
        fused.flush()


def first_call(fn: Callable[[Any], Any], meter: OpMeter | None, fused: OneToOneChain | None,
                m: Any) -> Any:
    """The function on a batch's (or a run's) first message, its time sampled (once per
    batch)."""
    if fused is not None:
        return fused.call_timed(m)
    t0 = time.perf_counter_ns()
    r = fn(m)
    meter.ns += time.perf_counter_ns() - t0  # type: ignore[union-attr]
    meter.timed += 1  # type: ignore[union-attr]
    return r


def up_to_control(seg: list[Any]) -> list[Any]:
    """A run's messages up to its first control record (``seg`` itself where it has none)."""
    tys = list(map(type, seg))
    if CONTROL_TYPES.isdisjoint(tys):
        return seg
    return seg[:next(compress(count(), map(CONTROL_TYPES.__contains__, tys)))]



def path_fn(path: OneToOnePath, meter_of: Callable[[Operator], OpMeter | None]
             ) -> tuple[str, Callable[[Any], Any], OpMeter | None, OneToOneChain | None]:
    """The functions of ``path`` as one for a loop: (op id, function, the function's meter,
    counted per batch, its time sampled once per batch; or several functions in a row as one
    ``OneToOneChain``, counting each one's meter)."""
    fns = path.fns
    fn_op, fn = fns[0] if fns else (path.last.op_id, IDENTITY)
    meter = meter_of(path.ops[0]) if fns else None
    fused = OneToOneChain(fns, [meter_of(op) for op in path.ops]) if len(fns) > 1 else None
    if fused is not None:
        fn, meter = fused.call, None
    if not isinstance(fn, types.FunctionType | types.MethodType | types.BuiltinFunctionType):
        fn = type(fn).__call__.__get__(fn)  # a callable object: its bound method is cheaper
    return fn_op, fn, meter, fused

