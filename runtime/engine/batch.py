"""Batch runs: loops that take a whole batch of one input partition in one call, for the shapes
where that gives what handing its messages out one by one would (docs/architecture.md, "Batch
everywhere").

- ``stream_run``: a stream whose messages go through synchronous one-to-one functions (map,
  filter, a join's port, a ``partition_by``'s key; several in a row as one ``OneToOneChain``)
  and then to a keyed stream of a producer that takes them directly (``runtime.engine.systems.
  StreamSink``). Its declared event times, where they only count at the batch's end, are taken
  in the loop, which keeps the channel's progress and stops at a message behind it.
- ``sink_run``: a stream whose messages go through synchronous one-to-one functions to an output
  written by a sink that takes runs (``Sink.write_batch``): the run's messages, in order, in
  one call per run of one partition, with the input positions they come from (``Sources``).
- ``operator_run``: a stream feeding one operator that gives lists of outputs (a window, a
  flat_map...): the operator's ``process`` per message (or its ``process_run`` over a run, or
  ``process_columns`` over a run given as columns, ``RunColumns``), what it gives forwarded
  downstream. The streaming task and Spark's ``PassExecutor`` both run it.

A run is ``run(payloads, i, end, times=None) -> int``: it processes ``payloads[i:end]`` up to the
first control record (or, for ``operator_run``, a message whose outputs went async, which it
hands to ``hold``) and returns where it stopped; a failure raises ``BatchFailure`` with the index
of the failing message. The meters count per batch, the operator's time sampled once per batch.
Each loop keeps its common path (a data message of the type of the one before it) inline; each
rule off that path (a control record, a failure, a time behind the channel's progress, the
timed first call, the counts) is one function that every loop calls.
Nothing here knows the task: what a run reads and writes is given to it when it is built.
"""

from __future__ import annotations

import time
import types
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterator, Sequence
from itertools import compress, count, islice
from operator import gt, length_hint
from typing import Any, NamedTuple, NoReturn

import msgspec

from operators.base import IDENTITY, FailedAt, Operator, stopped_at
from runtime.engine.codec import Skipped
from runtime.engine.dag import (
    Emit,
    OneToOneChain,
    OperatorFailure,
    continue_outputs,
    counted,
    forward,
)
from runtime.engine.elastic import OTHER_BUCKET, OtherBucket
from runtime.engine.event_time import EventTimeFailure
from runtime.engine.handout import Cursor
from runtime.engine.origins import OFFSET_BITS, ORIGIN_HEADER
from runtime.engine.records import EndOfStream, Watermark
from runtime.engine.systems import StreamSink
from runtime.engine.watermarks import event_seconds
from runtime.engine.wiring import OneToOnePath, PartitionRule
from runtime.host.metrics import OpMeter
from samza_dsl.connectors import Sources
from samza_dsl.kv import KV

__all__ = ["BatchFailure", "BatchRun", "RunColumns", "stream_run", "sink_run", "operator_run",
           "CONTROL_TYPES", "SinkWrite", "run_operator"]

#: a run takes (payloads, i, end, times=None) and returns where it stopped
BatchRun = Callable[..., int]
#: a sink's run of messages: ``write(partition, messages, sources)``, an awaitable it returns
#: raising ``OperatorFailure``
SinkWrite = Callable[[int, list[Any], Sources], Awaitable[None] | None]
CONTROL_TYPES = frozenset({EndOfStream, Watermark, Skipped, OtherBucket})
_NUMBER_TYPES = frozenset({float, int})
#: a first-stage ``partition_by`` with declared times takes runs of this many messages at most
#: (``keyed_run``), and none shorter than _RUN_MIN; after _RUN_MISSES runs that stopped short
#: of half their length (times that are not numbers or go back, odd keys, a raising function),
#: the loop goes on alone
_RUN_MAX = 1024
_RUN_MIN = 64
_RUN_MISSES = 8
_INF = float("inf")
_enc_int = msgspec.msgpack.encode
#: the largest offset the compact form of an origin holds
_OFFSET_MAX = (1 << OFFSET_BITS) - 1


class BatchFailure(Exception):
    """The message at ``index`` of a run's payloads failed (an operator, or its event time)."""

    def __init__(self, index: int, failure: OperatorFailure | EventTimeFailure) -> None:
        self.index = index
        self.failure = failure


# The per-message rules every loop here calls (and, for the index where a loop stops or fails,
# ``operators.base.stopped_at``, which a window's ``process_run`` calls too). A loop keeps its
# common path inline (a data message of the type of the one before); these are its rare
# branches: a control record, a failure, a time behind the channel's progress, and what it
# counts and times once per batch.

def _skipped(m: Any, read: dict[str, int], stream_id: str) -> bool:
    """A control record in a loop: True for the marker of another virtual task's message
    (``OTHER_BUCKET``), which the loop skips and which is not this task's read; False for any
    other, where the loop stops, for the hand-out loop to take it."""
    if m is OTHER_BUCKET:
        read[stream_id] = read.get(stream_id, 0) - 1
        return True
    return False


def _fail(index: int, exc: BaseException, op_id: str | None) -> NoReturn:
    """Raises the failure of the message at ``index`` of a run, in the loop's ``except``: an
    ``OperatorFailure`` as it is (a chain's names its operator), any other exception as the
    operator ``op_id``'s, or, with no ``op_id``, as the stream's event time's
    (``EventTimeFailure``); its cause the exception the user's function raised."""
    failure = EventTimeFailure(exc) if op_id is None else _failure(exc, op_id)
    raise BatchFailure(index, failure) from failure.cause


def _failure(exc: BaseException, op_id: str) -> OperatorFailure:
    """A loop's exception as the failure of its operator: an ``OperatorFailure`` as it is (a
    chain's names its operator), any other as ``op_id``'s."""
    return exc if isinstance(exc, OperatorFailure) else OperatorFailure(op_id, exc)


def _send(sender: Emit, r: Any, it: Iterator[Any], end: int, track: Any = None) -> None:
    """The sender's own path, with its errors, for an output the loop does not append;
    ``track``: the cursor it reads the message's position from (``StreamSink.cursor``)."""
    if track is not None:
        track.index = end - length_hint(it)
    try:
        sender(r)
    except OperatorFailure as f:
        _fail(stopped_at(it, end), f, f.op_id)


def _times_in(times: list[Any]) -> tuple[Any, Any, float]:
    """(progress, bound, latest) of a batch's ``times``, the latest -inf for none."""
    top, bound, latest = times
    return top, bound, -_INF if latest is None else latest


def _progress(top: int, xmax: float, bound: int) -> int:
    """The channel's progress (ms): max(top, round(xmax) - bound), where ``top`` is its
    progress before the batch and ``xmax`` the largest time (ms) the batch saw (-inf: none)."""
    return top if xmax == -_INF else max(top, round(xmax) - bound)


def _behind(x: float, top: int, xmax: float, bound: int) -> bool:
    """Whether a time x (ms, a float) before the batch's largest (``xmax``) or the progress
    before the batch (``top``) is behind the channel's progress: the loop stops there, for the
    hand-out loop to take it. (round is monotonic, so a time at or after both is not behind:
    the loop's common path checks that inline.)"""
    return round(x) < _progress(top, xmax, bound)


def _times_out(times: list[Any], top: Any, bound: Any, xmax: float, lat: float) -> None:
    """The channel's progress and latest time back into ``times`` after a batch."""
    if top is not None:
        times[0] = _progress(top, xmax, bound)
    if lat != -_INF:
        times[2] = lat


def _count(meter: OpMeter | None, fused: OneToOneChain | None, n_in: int, dropped: int) -> None:
    """A batch's messages in and dropped into the function's meter (a chain counts its own)."""
    if meter is not None:
        meter.n_in += n_in
        meter.n_out += n_in - dropped
    elif fused is not None:
        fused.flush()


def _first_call(fn: Callable[[Any], Any], meter: OpMeter | None, fused: OneToOneChain | None,
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


def _up_to_control(seg: list[Any]) -> list[Any]:
    """A run's messages up to its first control record (``seg`` itself where it has none)."""
    tys = list(map(type, seg))
    if CONTROL_TYPES.isdisjoint(tys):
        return seg
    return seg[:next(compress(count(), map(CONTROL_TYPES.__contains__, tys)))]


def stream_run(path: OneToOnePath, sender: Emit, rule: PartitionRule, sink: StreamSink,
               broadcast: bool, meter_of: Callable[[Operator], OpMeter | None],
               read: dict[str, int], stream_id: str,
               event_time: Callable[[Any], Any] | None) -> BatchRun | None:
    """The run of ``stream_id`` along ``path`` into ``sink`` (``sender`` for what the loop
    does not append itself, ``rule`` its partition rule); ``event_time``: the stream's declared
    event time, where its times only count at the batch's end. None where the sink does not
    fit."""
    # a producer that keeps messages as they are (in memory) takes them with no records
    raw = sink.encode is None
    if not raw and (sink.key is None or sink.value is None):
        return None
    if (rule.n == 1 and not raw) or broadcast:
        return None
    fns = path.fns
    fn_op, fn, meter, fused = _path_fn(path, meter_of)
    # a partition_by keeping the message as its value: its key function called in the loop
    key_of = path.ops[0].keyed_by() if len(fns) == 1 else None
    # a partition_by of the message into partitions in memory: a loop of its own, and, with
    # declared times, runs of it with the functions mapped in C
    keyed = raw and key_of is not None
    runs_of = _keyed_runs(event_time, key_of, sink, rule) \
        if keyed and event_time is not None and rule.fixed is None else None
    rest = (_rest_of_messages if raw else _rest_of_records)(fn, fn_op, sink, rule, sender,
                                                            read, stream_id)
    return _StreamRun(fn, fn_op, meter, fused, key_of, keyed, raw, runs_of, rest, sink, rule,
                      sender, read, stream_id, event_time)


class _StreamRun:
    """``stream_run``'s loop; its configuration, in named slots, is taken into locals once per
    call. Records by key with no times to keep (``plain``) go to the loop of ``rest`` after
    the first message. Declared times: the channel's progress is max(top, round(xmax) -
    bound), where xmax is the largest time seen in the batch in ms (``_behind``)."""

    __slots__ = ("fn", "fn_op", "meter", "fused", "key_of", "keyed", "raw", "runs_of", "rest",
                 "bufs", "parts", "fixed", "kser", "vser", "sender", "read", "stream_id", "et",
                 "plain_kind", "track", "prefix", "plain", "origin_id")

    def __init__(self, fn: Callable[[Any], Any], fn_op: str, meter: OpMeter | None,
                 fused: OneToOneChain | None, key_of: Callable[[Any], Any] | None, keyed: bool,
                 raw: bool, runs_of: _KeyedRuns | None, rest: Callable[..., int],
                 sink: StreamSink, rule: PartitionRule, sender: Emit, read: dict[str, int],
                 stream_id: str, et: Callable[[Any], Any] | None) -> None:
        self.fn, self.fn_op, self.meter, self.fused = fn, fn_op, meter, fused
        self.key_of, self.keyed, self.raw = key_of, keyed, raw
        self.runs_of, self.rest = runs_of, rest
        self.bufs, self.parts, self.fixed = sink.append, rule.table, rule.fixed
        self.kser: Any = sink.key  # both set unless raw
        self.vser: Any = sink.value
        self.sender, self.read, self.stream_id, self.et = sender, read, stream_id, et
        #: records that carry their origins: the cursor the appends read, set per message, and
        #: where the loop writes each record's origin itself (``runtime.engine.origins``)
        self.track = sink.cursor
        self.prefix, self.plain, self.origin_id = sink.prefix, sink.plain, sink.origin_id
        #: records by key, or messages kept as they are, whose times are not kept: ``rest``
        #: takes the batch after its first
        self.plain_kind = key_of is None and (raw or rule.fixed is None) and self.track is None

    def _origins(self, end: int, it: Any
                 ) -> tuple[bytes | None, int, Any, int | None, Callable[[], int], bool]:
        """Where the loop writes each record's origin itself (``runtime.engine.origins``): the
        header's start, the offset after the batch's ``end``, less one, the appends that take
        records as they are, and, where the log keeps origins in their compact form, that
        form of the offset after ``end``, less one (then the header's start is None); else, or
        with no origins to write, (None, 0, the appends, None); then how many records ``it``,
        the loop's iterator, has left (a bound method: no lookup a record); last, whether the
        loop sets the cursor's index at each message (origins the appends write themselves),
        one test a message where it made three."""
        left = it.__length_hint__
        if self.track is None:
            return None, 0, self.bufs, None, left, False
        cur = self.track.batch
        last = cur.first + end - 1
        if self.plain is not None and self.origin_id is not None and last <= _OFFSET_MAX:
            ident = self.origin_id(cur.ssp)
            if ident is not None:
                return None, 0, self.plain, ident + last, left, False
        pfx = None if self.prefix is None else self.prefix(cur.ssp)
        if pfx is None or self.plain is None:
            return None, 0, self.bufs, None, left, True
        return pfx, last, self.plain, None, left, False

    def __call__(self, payloads: list[Any], i: int, end: int, times: Any = None) -> int:
        """Process payloads[i:end] up to the first control record (or, with ``times``, the
        channel's ``[progress, bound, latest time]``, up to a message behind its progress)."""
        fn, meter, fused, key_of, keyed, raw = (self.fn, self.meter, self.fused, self.key_of,
                                                self.keyed, self.raw)
        parts, fixed, kser, vser, sender = self.parts, self.fixed, self.kser, self.vser, self.sender
        runs_of, et, track = self.runs_of, self.et, self.track
        control_types = CONTROL_TYPES
        it = iter(payloads[i:end])  # the iterator tells the index when the loop stops
        pfx, base, bufs, obase, left, each = self._origins(end, it)  # bufs: as origins want
        n_in = dropped = 0
        counts = [0, 0]  # what the rest of the batch took in the loop after this one
        timed = meter is None and fused is None
        direct = timed and keyed  # once the batch's one timed call is made
        runs = runs_of is not None and times is not None and runs_of.misses < _RUN_MISSES
        plain = times is None and self.plain_kind
        data_type: type = KV  # the messages' type, once one was seen not to be a control's
        top, bound, lat = (None, 0, -_INF) if times is None else _times_in(times)
        t, xmax = None, -_INF
        try:
            for m in it:
                ty = type(m)
                if ty is not data_type:
                    if ty in control_types:
                        if _skipped(m, self.read, self.stream_id):
                            continue
                        return stopped_at(it, end)
                    data_type = ty
                if times is not None:
                    try:
                        t = et(m)  # type: ignore[misc]
                        if type(t) is not float and type(t) is not int and t is not None:
                            t = event_seconds(t)
                    except Exception as exc:
                        _fail(stopped_at(it, end), exc, None)
                    if top is not None and t is not None:
                        x = t * 1000.0
                        if x < xmax or x < top:
                            if _behind(x, top, xmax, bound):
                                return stopped_at(it, end)
                            if x > xmax:
                                xmax = x
                        else:
                            xmax = x
                n_in += 1
                if each:
                    track.index = end - left()
                if direct:  # a partition_by of the message, its partitions in memory
                    try:
                        k = key_of(m)  # type: ignore[misc]
                    except Exception as exc:
                        dropped += 1
                        _fail(stopped_at(it, end), exc, self.fn_op)
                    r = KV(k, m)
                    if k is None:
                        _send(sender, r, it, end, track)
                    else:
                        try:
                            bufs[parts[k] if fixed is None else fixed](r)
                        except Exception:
                            _send(sender, r, it, end, track)
                    if t is not None and t > lat:
                        lat = t
                    if runs:  # the rest in runs, while they qualify
                        more = runs_of(payloads, it, end, top, xmax, lat)  # type: ignore[misc]
                        took, xmax, lat, runs = more
                        n_in += took
                    continue
                try:
                    if timed:
                        r = fn(m) if key_of is None else KV(key_of(m), m)
                    else:  # the batch's one timed call
                        r = _first_call(fn, meter, fused, m)
                        timed = True
                        direct = keyed
                except Exception as exc:
                    dropped += 1
                    _fail(stopped_at(it, end), exc, self.fn_op)
                if r is None:
                    dropped += 1
                elif type(r) is KV and r.key is not None and (raw or r.value is not None):
                    k = r.key
                    try:
                        bufs[parts[k] if fixed is None else fixed](r if raw else (
                            kser(k), vser(r.value), obase - left() if obase is not None
                            else None if pfx is None else ((ORIGIN_HEADER, (
                                pfx + _enc_int(base - left()) + b"\x00")),)))
                    except Exception:
                        _send(sender, r, it, end, track)
                else:
                    _send(sender, r, it, end, track)
                if t is not None and t > lat:
                    lat = t
                if plain and timed:
                    return self.rest(it, end, data_type, counts)  # the rest of the batch
            return end
        finally:
            _count(meter, fused, n_in + counts[0], dropped + counts[1])
            if times is not None:
                _times_out(times, top, bound, xmax, lat)


def _rest_of_records(fn: Callable[[Any], Any], fn_op: str, sink: StreamSink,
                     rule: PartitionRule, sender: Emit, read: dict[str, int],
                     stream_id: str) -> Callable[..., int]:
    """A map's (or a chain's) messages into records by their keys, once the batch's timed call
    is made: the steps of the first loop without the ones that cannot apply. Adds how many it
    took and dropped to ``counts``."""
    bufs, parts = sink.append, rule.table
    kser: Any = sink.key
    vser: Any = sink.value
    control_types = CONTROL_TYPES

    def rest(it: Iterator[Any], end: int, data_type: type, counts: list[int]) -> int:
        n_in = dropped = 0
        try:
            for m in it:
                if type(m) is not data_type:
                    if type(m) in control_types:
                        if _skipped(m, read, stream_id):
                            continue
                        return stopped_at(it, end)
                    data_type = type(m)
                n_in += 1
                try:
                    r = fn(m)
                except Exception as exc:
                    dropped += 1
                    _fail(stopped_at(it, end), exc, fn_op)
                if type(r) is KV:
                    k = r.key
                    v = r.value
                    if k is not None and v is not None:
                        try:
                            bufs[parts[k]]((kser(k), vser(v), None))
                            continue
                        except Exception:
                            pass
                if r is None:
                    dropped += 1
                else:
                    _send(sender, r, it, end)
            return end
        finally:
            counts[0] += n_in
            counts[1] += dropped
    return rest


def _rest_of_messages(fn: Callable[[Any], Any], fn_op: str, sink: StreamSink,
                      rule: PartitionRule, sender: Emit, read: dict[str, int],
                      stream_id: str) -> Callable[..., int]:
    """``_rest_of_records`` for a sink that keeps messages as they are (in memory): a ``KV``
    with a key into its key's partition (or the stream's one partition), as the first loop
    puts it."""
    bufs, parts, fixed = sink.append, rule.table, rule.fixed
    one = None if fixed is None else bufs[fixed]
    control_types = CONTROL_TYPES

    def rest(it: Iterator[Any], end: int, data_type: type, counts: list[int]) -> int:
        left = length_hint(it)  # what it took is what the iterator gave, less control records
        controls = dropped = 0
        try:
            for m in it:
                if type(m) is not data_type:
                    if type(m) in control_types:
                        controls += 1
                        if _skipped(m, read, stream_id):
                            continue
                        return stopped_at(it, end)
                    data_type = type(m)
                try:
                    r = fn(m)
                except Exception as exc:
                    dropped += 1
                    _fail(stopped_at(it, end), exc, fn_op)
                if type(r) is KV:
                    k = r.key
                    if k is not None:
                        try:
                            (bufs[parts[k]] if one is None else one)(r)
                            continue
                        except Exception:
                            pass
                if r is None:
                    dropped += 1
                else:
                    _send(sender, r, it, end)
            return end
        finally:
            counts[0] += left - length_hint(it) - controls
            counts[1] += dropped
    return rest


class _KeyedRuns:
    """The rest of a batch of a ``partition_by`` of the message into partitions in memory, with
    declared times, in runs (``keyed_run``) while they qualify; ``misses``: runs that stopped
    short (after _RUN_MISSES, the loop goes on alone)."""

    def __init__(self, keyed_run: Callable[..., tuple[int, float, float]]) -> None:
        self.keyed_run = keyed_run
        self.misses = 0

    def __call__(self, payloads: list[Any], it: Iterator[Any], end: int, top: Any, xmax: float,
                 lat: float) -> tuple[int, float, float, bool]:
        """Takes runs from where ``it`` is: returns (how many, xmax, lat, whether runs go on
        after the message the loop takes next)."""
        n = 0
        pos = end - length_hint(it)
        while end - pos >= _RUN_MIN:
            seg = payloads[pos:min(end, pos + _RUN_MAX)]
            took, xmax, lat = self.keyed_run(seg, top, xmax, lat)
            if took:
                n += took
                next(islice(it, took - 1, took), None)  # past them
                pos += took
            if took < len(seg):
                # the loop takes the next message (a control record ends the batch); runs go
                # on after it unless this one stopped short
                if type(seg[took]) in CONTROL_TYPES:
                    return n, xmax, lat, False
                if 2 * took >= len(seg):
                    return n, xmax, lat, True
                self.misses += 1
                return n, xmax, lat, False
        return n, xmax, lat, False


def _path_fn(path: OneToOnePath, meter_of: Callable[[Operator], OpMeter | None]
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


def _keyed_runs(et: Any, key_of: Any, sink: StreamSink, rule: PartitionRule) -> _KeyedRuns:
    bufs, parts = sink.append, rule.table

    def keyed_run(seg: list[Any], top: Any, xmax: float, lat: float
                  ) -> tuple[int, float, float]:
        """The loop's work for a run of plain messages whose event times are numbers, none
        behind the channel's progress (in order from at or after it; any order without one),
        and whose keys are set: the event-time and key functions mapped over the run and the
        ``KV``s built in C, then one append per message. Returns (how many it took from the
        start, xmax, lat); where a message does not qualify it takes the ones before it, and the
        loop takes it with its own checks and errors. The functions are pure by contract: a run
        that raises or breaks off has them called again there by the loop."""
        seg = _up_to_control(seg)
        if not seg:
            return 0, xmax, lat
        try:
            xs = list(map(et, seg))
        except Exception:
            return 0, xmax, lat
        n = len(xs)
        if not set(map(type, xs)) <= _NUMBER_TYPES:
            return 0, xmax, lat
        if top is not None:
            x0 = xs[0] * 1000.0
            if x0 < xmax or x0 < top:
                return 0, xmax, lat
            # up to the first time that goes back
            n = next(compress(count(1), map(gt, xs, islice(xs, 1, None))), n)
        try:
            keys = list(map(key_of, seg[:n] if n < len(seg) else seg))
        except Exception:
            return 0, xmax, lat
        took = n
        for j, (k, r) in enumerate(zip(keys, map(KV, keys, seg), strict=False)):
            if k is None:
                took = j
                break
            try:
                bufs[parts[k]](r)
            except Exception:
                took = j
                break
        if took:
            if top is not None:
                xmax = xs[took - 1] * 1000.0
                last = xs[took - 1]
            else:
                last = max(xs[:took]) if took < len(xs) else max(xs)
            if last > lat:
                lat = last
        return took, xmax, lat
    return _KeyedRuns(keyed_run)


class RunColumns(NamedTuple):
    """A batch's records given as columns, for an operator's ``process_columns`` (Spark, where
    a window's key and event-time functions read fields the batch has as columns): record j's
    key ``keys[j]`` and event time in ms ``xs[j]``, what its fold gets (``messages``; None for
    a fold that never reads its message), and the indexes of the records without a time, in
    order (``process`` takes each of them, and says what is wrong with it)."""

    keys: list[Any]
    xs: list[float]
    messages: Sequence[Any] | None
    nulls: list[int]


def _columns_run(process_columns: Callable[..., int] | None, cols: RunColumns, i: int,
                 end: int) -> int:
    """``process_columns`` over records i..end-1, up to the first without a time."""
    assert process_columns is not None, "records as columns for an operator with no such loop"
    nulls = cols.nulls
    k = bisect_left(nulls, i)
    stop = nulls[k] if k < len(nulls) and nulls[k] < end else end
    return process_columns(cols.keys, cols.xs, cols.messages, i, stop)


def operator_run(op: Operator, downstream: list[Emit], meter: OpMeter | None,
                 read: dict[str, int], src: Cursor,
                 hold: Callable[[list[Awaitable[None]]], None], stream_id: str, *,
                 follow: Callable[[int], None] | None = None,
                 owner_fixed: bool = False, one_by_one: bool = False) -> BatchRun:
    """The run of ``stream_id`` into ``op`` (which gives lists of outputs, or awaitables of
    them), its outputs forwarded to ``downstream``; ``src.index`` follows the message being
    processed, and ``follow``, where given, is called with a message's index before
    ``process`` takes it. A message whose outputs go async stops the run: what it waits for
    goes to ``hold`` and its index is returned, for the hand-out loop to take it as in flight.
    ``owner_fixed``: the window's watermark stays with whoever owns it for the whole run (a
    Spark pass), so runs of messages apply with its own watermark too. ``one_by_one``: no runs
    (``src.index`` must name each message its outputs come from: records that carry their
    origins, ``runtime.engine.origins``).

    The run also takes ``cols`` (``RunColumns``), the batch's records as columns: its runs
    then go to ``op.process_columns``, and ``payloads[j]`` is made only where ``process``
    takes record j."""
    op_id = op.op_id
    clock = time.perf_counter_ns
    control_types = CONTROL_TYPES
    run = op.process_run
    columns = op.process_columns

    def batch(payloads: list[Any], i: int, end: int, times: Any = None,
              cols: RunColumns | None = None) -> int:
        start = i
        n_out = 0
        process: Callable[[Any], Any] = op.process
        timed = meter is None
        # runs of messages in one call, while the window's watermark is the runtime's (or
        # stays its own for the whole run)
        fast = run is not None and not one_by_one and (owner_fixed or not op.local_watermark)
        try:
            while i < end:
                if fast:
                    if timed:
                        j = (run(payloads, i, end, control_types)  # type: ignore[misc]
                             if cols is None else _columns_run(columns, cols, i, end))
                    else:  # the operator's time, over the whole run
                        t0 = clock()
                        j = (run(payloads, i, end, control_types)  # type: ignore[misc]
                             if cols is None else _columns_run(columns, cols, i, end))
                        meter.ns += clock() - t0  # type: ignore[union-attr]
                        meter.timed += j - i  # type: ignore[union-attr]
                        timed = j > i
                    if j > i:  # the message at j (if any) is for ``process``: it stopped there
                        i = src.index = j
                        if i == end:
                            break
                m = payloads[i]
                i += 1
                if type(m) is not KV and type(m) in control_types:
                    if _skipped(m, read, stream_id):
                        start += 1  # not counted in
                        continue
                    i -= 1  # not counted in either: the hand-out loop takes it
                    return i
                src.index = i
                if follow is not None:
                    follow(i - 1)
                if timed:
                    out = process(m)
                else:  # the operator's time, sampled on the batch's first message
                    out = _first_call(process, meter, None, m)
                    timed = True
                if out:
                    if type(out) is list:
                        n_out += len(out)
                        pend = forward(out, downstream)
                    else:  # an awaitable of outputs
                        pend = [continue_outputs(out if meter is None else counted(out, meter),
                                                 op_id, downstream)]
                    if pend:
                        hold(pend)
                        return i - 1
            return end
        except FailedAt as f:  # in a run (``process_run``, ``process_columns``)
            i = f.index + 1
            _fail(f.index, f.cause, op_id)
        except Exception as exc:
            _fail(i - 1, exc, op_id)
        finally:
            _count(meter, None, i - start, i - start - n_out)
    return batch


def run_operator(obj: Any) -> str | None:
    """The operator whose function a batch's loop (``stream_run``) calls, if ``obj`` is one."""
    return obj.fn_op if isinstance(obj, _StreamRun) else None
