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

from collections.abc import Callable, Iterator
from itertools import compress, count, islice
from operator import gt, length_hint
from typing import Any

import msgspec

from operators.base import Operator, stopped_at
from runtime.engine.batch_rules import CONTROL_TYPES, BatchRun
from runtime.engine.batch_rules import INF as _INF
from runtime.engine.batch_rules import behind as _behind
from runtime.engine.batch_rules import fail as _fail
from runtime.engine.batch_rules import first_call as _first_call
from runtime.engine.batch_rules import meter_batch as _count
from runtime.engine.batch_rules import path_fn as _path_fn
from runtime.engine.batch_rules import send as _send
from runtime.engine.batch_rules import skipped as _skipped
from runtime.engine.batch_rules import times_in as _times_in
from runtime.engine.batch_rules import times_out as _times_out
from runtime.engine.batch_rules import up_to_control as _up_to_control
from runtime.engine.dag import Emit, OneToOneChain
from runtime.engine.origins import OFFSET_BITS, ORIGIN_HEADER
from runtime.engine.systems import StreamSink
from runtime.engine.watermarks import event_seconds
from runtime.engine.wiring import OneToOnePath, PartitionRule
from runtime.host.metrics import OpMeter
from samza_dsl.kv import KV

__all__ = ["stream_run", "run_operator"]

_NUMBER_TYPES = frozenset({float, int})
#: a first-stage ``partition_by`` with declared times takes runs of this many messages at most
#: (``keyed_run``), and none shorter than _RUN_MIN; after _RUN_MISSES runs that stopped short
#: of half their length (times that are not numbers or go back, odd keys, a raising function),
#: the loop goes on alone
_RUN_MAX = 1024
_RUN_MIN = 64
_RUN_MISSES = 8
_enc_int = msgspec.msgpack.encode
#: the largest offset the compact form of an origin holds
_OFFSET_MAX = (1 << OFFSET_BITS) - 1


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



def run_operator(obj: Any) -> str | None:
    """The operator whose function a batch's loop (``stream_run``) calls, if ``obj`` is one."""
    return obj.fn_op if isinstance(obj, _StreamRun) else None
