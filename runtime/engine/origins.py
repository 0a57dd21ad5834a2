"""Replays applied once: where a record of an intermediate stream comes from, and the replays a
task reading it skips (docs/semantics.md, "Replays applied once").

At least once, a task that restarts or moves reprocesses its inputs from its checkpoint, and so
writes again into its intermediate streams what it had written after that checkpoint. So each
record a task writes into an intermediate stream carries its origin, in the ``samza.origin``
header: the origin's key (the input partition of the message that produced it, and its virtual
task where there are several), that message's offset, and the record's index among the records
that message wrote into intermediate streams. A task whose stage has asynchronous operators,
whose records may leave out of their messages' order, adds its floor: the offset up to which
every message of that partition had completed when the record was written (so every record of
those messages came before it).

A task reading an intermediate stream keeps, per partition it reads and per origin key, what it
applied: the last (offset, index) of an origin whose records come in order, or a floor and the
(offset, index) pairs above it. A record at or below what was applied is a replay: it becomes a
``Skipped`` marker before any operator sees it (so it is neither counted again nor late). What a
task applied is written with its checkpoint, in the same write as its input offsets and its
stores' changelog positions, which a restore returns to: so the state, the offsets and what was
applied always agree.

``Stamps`` is the writer's side (one per task, through ``StampingProducer``); ``Applied`` the
reader's (one per task); ``StreamCodec`` gives the origins of a batch it decodes as the
``origins`` of an ``OriginList``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import compress
from operator import itemgetter, lt, ne
from typing import Any

import msgspec

from runtime.engine.handout import Batch, Cursor, Handout
from runtime.engine.job import SSP
from runtime.engine.records import Skipped
from runtime.engine.trace_out import tag_last, traced_sender, traced_sink

__all__ = ["ORIGIN_HEADER", "ORIGIN_IDS", "OFFSET_BITS", "OriginNames", "origin_header",
           "origin_key", "origin_text", "origin_source", "origin_of_headers",
           "Stamps", "StampingProducer", "OriginList", "take_batch", "settle_held",
           "decode_origins", "origins_of_records", "Applied"]

ORIGIN_HEADER = "samza.origin"
#: a log that stores records' origins in its compact form (the embedded log) keeps the ids of
#: origin keys in its metadata under this prefix (``LocalLog.assign_ids``)
ORIGIN_IDS = "origin-id/"
#: an origin in that compact form is one int in the record's place of headers: the origin key's
#: id above ``OFFSET_BITS``, the offset below, index 0 (the one record of a message, in order)
OFFSET_BITS = 40
_MASK = (1 << OFFSET_BITS) - 1

#: a record a task had applied before, written again by a task that replays its inputs
REPLAYED = Skipped("a replay of a record already applied")
_enc = msgspec.msgpack.encode
_decode_batch = msgspec.msgpack.Decoder(list[list[str | int] | None]).decode
_NIL = b"\xc0"  # msgpack's nil: a record without an origin
#: above every index: a floor covers every record of its message
_ALL = 1 << 62


def origin_key(ssp: SSP, bucket: int = 0, factor: int = 1) -> str:
    """The key of an input partition (and virtual task) as records' origins name it."""
    base = f"{ssp.stream_id}/{ssp.partition}"
    return base if factor <= 1 else f"{base}/{bucket}of{factor}"


def _parts(origin: Any) -> tuple[str, str, str, Any]:
    """(stream, partition, virtual task ``BofN`` or "", offset) of an origin."""
    stream, _, part = str(origin[0]).rpartition("/")
    bucket = ""
    if "of" in part:  # "stream/partition/BofN": a virtual task's
        bucket = part
        stream, _, part = stream.rpartition("/")
    return stream, part, bucket, origin[1]


def origin_text(origin: Any) -> str:
    """An origin as errors name it: ``stream 'events' partition 0 offset 40`` (with the virtual
    task, ``... partition 0 (virtual task 1 of 2) offset 40``)."""
    stream, part, bucket, offset = _parts(origin)
    b, _, n = bucket.partition("of")
    virtual = f" (virtual task {b} of {n})" if bucket else ""
    return f"stream {stream!r} partition {part}{virtual} offset {offset}"


def origin_source(origin: Any) -> str:
    """An origin as dead letters' ``source`` is written: ``events/0/40``."""
    stream, part, _, offset = _parts(origin)
    return f"{stream}/{part}/{offset}"


def origin_of_headers(headers: Sequence[tuple[str, bytes]] | int | None,
                      names: OriginNames | None = None) -> Any:
    """The origin a record's headers carry (``ORIGIN_HEADER``, or the compact form with the
    ``names`` of its log), or None."""
    if headers.__class__ is int:
        return None if names is None else _full(headers, names)
    got = decode_origins([headers]) if headers else None
    return None if got is None else _full(got[0], names)


def origin_header(origin: Any) -> tuple[tuple[str, bytes], ...]:
    """The headers that carry ``origin`` (``[key, offset, index]``)."""
    return ((ORIGIN_HEADER, _enc(list(origin))),)


class OriginNames:
    """The origin keys of a log's compact origins, by id: read from the log (``load``) again
    when an id is not known yet (a task that came since wrote it)."""

    def __init__(self, load: Callable[[], Mapping[int, str]]) -> None:
        self._load = load
        self._names: dict[int, str] = {}

    def __getitem__(self, ident: int) -> str:
        name = self._names.get(ident)
        if name is None:
            self._names = dict(self._load())
            name = self._names.get(ident)
            if name is None:
                name = self._names[ident] = f"unknown-origin-{ident}"
        return name


def _full(o: Any, names: OriginNames | None) -> Any:
    """An origin in the list form (``[key, offset, index[, floor]]``): a compact one expanded."""
    if o.__class__ is not int:
        return o
    if names is None:
        return None
    return [names[o >> OFFSET_BITS], o & _MASK, 0]


class OriginList(list[Any]):
    """A decoded batch whose records carry origins: ``origins[i]`` is record i's
    ``(key, offset, index[, floor])``, its compact form (an int: ``names`` has its key), or
    None (a control record, a record without one).
    ``held``: the records that did not decode, as ``(offset, act)``: the task reading the batch
    decides on them once it knows which records are replays (``settle_held``)."""

    __slots__ = ("origins", "held", "names")

    def __init__(self, payloads: Iterable[Any], origins: list[Any],
                 held: list[tuple[int, Callable[[], Any]]] | None = None,
                 names: OriginNames | None = None) -> None:
        super().__init__(payloads)
        self.origins = origins
        self.held = held
        #: the keys of origins in the compact form (ints), where the log writes them
        self.names = names


def take_batch(applied: Applied | None, batch: Batch) -> None:
    """A task starts handing out ``batch``, an ``OriginList``: its replays are marked skipped
    (``applied``: None when the task keeps none), then the records that did not decode are
    decided on (``settle_held``)."""
    if applied is not None:
        payloads: Any = batch.payloads
        applied.decide(batch, payloads.origins, payloads.names)
    if batch.payloads.held:  # type: ignore[attr-defined]
        settle_held(batch)


def settle_held(batch: Batch) -> None:
    """The records of ``batch`` (an ``OriginList`` whose replays were marked) that did not
    decode: each that is no replay follows its stream's ``samza.serde.error`` policy now (``act``
    raises under ``fail``, else logs, counts, dead-letters and gives the ``Skipped`` marker);
    a replay of one the task applied (skipped, dead-lettered or passed over by ``--skip``) is
    skipped as a replay, once more nowhere."""
    payloads = batch.payloads
    held = payloads.held  # type: ignore[attr-defined]
    payloads.held = None  # type: ignore[attr-defined]
    for offset, act in held:
        i = offset - batch.first
        if payloads[i] is not REPLAYED:
            payloads[i] = act()


def decode_origins(heads: Sequence[Any]) -> list[Any] | None:
    """The origins of a batch's records from their headers (``Record[2]``), a compact one as it
    is (an int); None when no record has one. A header that does not decode counts as none."""
    ints = [h.__class__ is int for h in heads]
    n = ints.count(True)
    if n == len(heads):
        return list(heads)
    if n * 2 >= len(heads):  # mostly compact (the embedded log's): the others found in C
        mixed = list(heads)
        i = -1
        for _ in range(len(heads) - n):
            i = ints.index(False, i + 1)
            mixed[i] = _one_origin(mixed[i])
        return mixed
    if n:
        return [h if i else _one_origin(h) for h, i in zip(heads, ints, strict=True)]
    raws = [h[0][1] if h is not None and h[0][0] == ORIGIN_HEADER else _NIL for h in heads]
    if raws.count(_NIL) == len(raws):
        return None
    try:
        return _decode_batch(b"\xdd" + len(raws).to_bytes(4, "big") + b"".join(raws))
    except (msgspec.DecodeError, msgspec.ValidationError):
        out: list[Any] = []
        for raw in raws:
            try:
                out.append(_decode_batch(b"\x91" + raw)[0])
            except (msgspec.DecodeError, msgspec.ValidationError):
                out.append(None)
        return out


_HEADS = itemgetter(2)


def origins_of_records(records: Sequence[Any]) -> list[Any] | None:
    """``decode_origins`` of the headers of ``records`` (``(key, value, headers)``)."""
    return decode_origins(list(map(_HEADS, records)))


def _one_origin(h: Any) -> Any:
    got = decode_origins([h]) if h is not None else None
    return None if got is None else got[0]


class Stamps:
    """The origins of a task's records into intermediate streams: ``header()`` is the headers
    of a record written now (None: the record is written for no message of the task, as a
    window's firing at a watermark or a timer, and carries no origin).

    The message being processed is the one the asyncio task completing it names (``source``:
    ``SOURCE`` of ``runtime.engine.stage_outputs``; ``control`` when it is no message), else,
    while the task hands out (``live``), the one at the cursor. ``ordered``: the task's records
    leave in their messages' order (no asynchronous operator), so they need no floor."""

    __slots__ = ("keys", "source", "control", "src", "checkpoint", "ordered", "live", "last",
                 "n", "_prefix", "controls", "ids", "trace")

    def __init__(self, keys: Mapping[SSP, str], source: Callable[[], Any], control: Any,
                 src: Cursor, checkpoint: Mapping[SSP, int], ordered: bool,
                 controls: frozenset[type] = frozenset()) -> None:
        self.keys = dict(keys)
        self.source = source
        self.control = control
        self.src = src
        self.checkpoint = checkpoint
        self.ordered = ordered
        self.live = False
        #: the message whose records were written last in hand-out, and how many
        self.last: tuple[SSP, int] | None = None
        self.n = 0
        self._prefix: dict[SSP, bytes] = {}
        #: the records a task hands out that are no message (``batch.CONTROL_TYPES``): what the
        #: cursor is at one of them causes comes from no message
        self.controls = controls
        #: the ids of the origin keys where the log stores origins in the compact form
        self.ids: Mapping[str, int] | None = None
        #: traced (``runtime.host.tracing``): the ``traceparent`` header of the message at a
        #: position, or None (not sampled); its records are then written one by one
        self.trace: Callable[[str, int, int], tuple[str, bytes] | None] | None = None

    def prefix(self, ssp: SSP) -> bytes:
        p = self._prefix.get(ssp)
        if p is None:
            key = self.keys.get(ssp) or origin_key(ssp)
            p = self._prefix[ssp] = (b"\x93" if self.ordered else b"\x94") + _enc(key)
        return p

    def fast_prefix(self, ssp: SSP) -> bytes | None:
        """The origin header of a record of a message of ``ssp`` is ``prefix + encode(offset) +
        b"\\x00"`` where the message writes one record (a loop of one-to-one steps); None where
        records need a floor."""
        return self.prefix(ssp) if self.ordered and self.trace is None else None

    def fast_id(self, ssp: SSP) -> int | None:
        """As ``fast_prefix``, where the log stores origins in the compact form: a record's
        origin is this plus its offset (``OFFSET_BITS``); None where it does not, or records
        need a floor."""
        ids = self.ids
        if ids is None or not self.ordered or self.trace is not None:
            return None
        key = self.keys.get(ssp) or origin_key(ssp)
        ident = ids.get(key)
        return None if ident is None else ident << OFFSET_BITS

    def header(self) -> tuple[tuple[str, bytes], ...] | None:
        rec = self.source()
        if rec is not None:
            if rec is self.control:
                return None
            ssp, off = rec.ssp, rec.offset
            n = rec.emitted
            rec.emitted = n + 1
        elif self.live:
            cur, i = self.src.batch, self.src.index
            if cur is None or type(cur.payloads[i - 1]) in self.controls:  # caused by no message
                return None
            ssp, off = cur.ssp, cur.first + i - 1
            key = (ssp, off)
            if key == self.last:
                n = self.n = self.n + 1
            else:
                self.last, n = key, 0
                self.n = 0
        else:
            return None
        head = self.prefix(ssp) + _enc(off) + _enc(n)
        if not self.ordered:
            head += _enc(self.checkpoint.get(ssp, -1))
        if self.trace is not None:
            tp = self.trace(ssp.stream_id, ssp.partition, off)
            if tp is not None:
                return ((ORIGIN_HEADER, head), tp)
        return ((ORIGIN_HEADER, head),)

    def position(self) -> tuple[SSP, int] | None:
        """(partition, offset) of the message being processed, or None (no message)."""
        rec = self.source()
        if rec is not None:
            return None if rec is self.control else (rec.ssp, rec.offset)
        cur = self.src.batch
        return (cur.ssp, cur.first + self.src.index - 1) if self.live and cur is not None \
            else None

    def trace_header(self) -> tuple[tuple[str, bytes], ...] | None:
        """Traced: the headers of a record written now into an output, the ``traceparent`` of
        the message being processed where it is sampled; else None."""
        rec = self.source()  # as ``position``, in line: a call for each record written
        if rec is not None:
            if rec is self.control:
                return None
            ssp, off = rec.ssp, rec.offset
        else:
            cur = self.src.batch
            if not self.live or cur is None:
                return None
            ssp, off = cur.ssp, cur.first + self.src.index - 1
        tp = self.trace(ssp.stream_id, ssp.partition, off)  # type: ignore[misc]
        return None if tp is None else (tp,)

    def went_async(self, rec: Handout) -> None:
        """``rec``'s message goes on asynchronously: its next records follow those it wrote
        while it was handed out."""
        if self.last == (rec.ssp, rec.offset):
            rec.emitted = self.n + 1


class StampingProducer:
    """A task's view of ``base``, its container's producer of records: records into the
    intermediate streams ``streams`` carry the origins ``stamps`` gives; everything else is
    ``base``'s."""

    def __init__(self, base: Any, stamps: Stamps, streams: Iterable[str],
                 traced: Iterable[str] = ()) -> None:
        self.base = base
        self.stamps = stamps
        self.streams = frozenset(streams)
        #: traced, the outputs whose records carry the traceparent of a sampled message
        self.traced = frozenset(traced) - self.streams

    def counts(self) -> Any:
        return self.base.counts()

    def signal(self) -> None:
        self.base.signal()

    async def flush(self) -> None:
        await self.base.flush()

    async def close(self) -> None:
        await self.base.close()

    def record_sink(self, stream_id: str) -> Any:
        sink = self.base.record_sink(stream_id)
        if sink is not None and stream_id in self.traced and sink.encode is not None:
            return traced_sink(sink, self.stamps.trace_header, self.stamps.src)
        if sink is None or stream_id not in self.streams or sink.encode is None:
            return sink
        header = self.stamps.header

        def stamping(append: Callable[[Any], None]) -> Callable[[Any], None]:
            def add(r: Any) -> None:
                append((r[0], r[1], header()))
            return add
        return type(sink)([stamping(a) for a in sink.append], sink.key, sink.value, sink.encode,
                          self.stamps.src, self.stamps.fast_prefix, list(sink.append),
                          self.stamps.fast_id)

    def sender(self, stream_id: str) -> Callable[[int, Any], None]:
        send: Callable[[int, Any], None] = self.base.sender(stream_id)
        if stream_id in self.traced:
            return traced_sender(self.base, stream_id, send, self.stamps.trace_header)
        if stream_id not in self.streams:
            return send
        base, header = self.base, self.stamps.header

        def stamped(partition: int, m: Any) -> None:
            send(partition, m)
            buf = base.buffer(stream_id, partition)
            r = buf[-1]
            buf[-1] = (r[0], r[1], header())
        return stamped

    def send(self, stream_id: str, partition: int, payload: Any) -> None:
        self.base.send(stream_id, partition, payload)
        if stream_id in self.traced:
            tag_last(self.base, stream_id, partition, self.stamps.trace_header())
        if stream_id in self.streams:
            buf = self.base.buffer(stream_id, partition)
            r = buf[-1]
            if r[2] is None:  # a message's record, not a control record
                buf[-1] = (r[0], r[1], self.stamps.header())


#: operators whose outputs may leave after those of later messages
ASYNC_OPCODES = frozenset({"async_flat_map", "sink"})


def wire(task: Any, guarantee: str, source: Callable[[], Any], control: Any,
         controls: frozenset[type], traced: bool = False
         ) -> tuple[Stamps | None, Applied | None]:
    """The origins of ``task``'s records into intermediate streams, and what it applied of those
    it reads: at least once (on a system that stores streams: the caller's to know; the task's
    operators built); else None and None. ``source``, ``control`` and ``controls``: as
    ``Stamps`` takes them."""

    plan = task.plan
    inter = plan.intermediate_streams
    if not inter or guarantee == "exactly-once":
        if not traced:
            return None, None
        inter = frozenset()  # stamps that say which message is processed, for traces only
    model = task.model
    keys = {ssp: origin_key(ssp, model.bucket, model.buckets) for ssp in task.ssps}
    ordered = task.env.executor is None and not plan.app.remote_tables and not any(
        op.opcode in ASYNC_OPCODES for op in task.operators.values())
    stamps = Stamps(keys, source, control, task._src, task.checkpoint, ordered, controls)
    applied = None
    if any(ssp.stream_id in inter for ssp in task.ssps):
        metrics = task.metrics
        applied = Applied(REPLAYED, task.checkpoint, None if metrics is None else
                          (lambda n: metrics.inc("replays-skipped", n)))
    return stamps, applied


class Applied:
    """What a task applied of each origin, per intermediate partition it reads; the replays it
    skips. ``decide`` takes a batch as the task starts handing it out; ``snapshot`` is what the
    checkpoint of given offsets holds (batches decided but not all handed out by then are
    counted up to those offsets only)."""

    def __init__(self, skipped: Any, checkpoint: Mapping[SSP, int],
                 count: Callable[[int], None] | None = None) -> None:
        #: ssp -> origin key -> [floor offset, floor index, set of (offset, index) above it]
        self.state: dict[SSP, dict[str, list[Any]]] = {}
        self.skipped = skipped
        #: the task's completed offsets: batches decided up to them need no more keeping
        self.checkpoint = checkpoint
        self.count = count
        #: ssp -> the batches decided and not yet completed: (first, origins, state before,
        #: names of compact origins)
        self._decided: dict[SSP, deque[tuple[int, list[Any], dict[str, list[Any]],
                                             OriginNames | None]]] = {}
        #: replays skipped since the start
        self.replays = 0

    def load(self, data: Mapping[str, Any] | None) -> None:
        """What a checkpoint holds (``snapshot``'s form)."""
        self.state.clear()
        self._decided.clear()
        for name, origins in (data or {}).items():
            stream, _, part = name.rpartition("/")
            self.state[SSP(stream, int(part))] = {
                k: [v[0], v[1], {(a, b) for a, b in v[2]} if len(v) > 2 and v[2] else None]
                for k, v in origins.items()}

    def decide(self, batch: Batch, origins: list[Any], names: OriginNames | None = None
               ) -> None:
        """Marks the replays of ``batch`` (whose records' origins are ``origins``, those in the
        compact form named by ``names``) skipped and counts the rest as applied."""
        ssp = batch.ssp
        st = self.state.get(ssp)
        if st is None:
            st = self.state[ssp] = {}
        decided = self._decided.get(ssp)
        if decided is None:
            decided = self._decided[ssp] = deque()
        done = self.checkpoint.get(ssp, -1)
        while decided and decided[0][0] + len(decided[0][1]) - 1 <= done:
            decided.popleft()
        decided.append((batch.first, origins, _copy(st), names))
        n = _apply(st, origins, batch.payloads, self.skipped, names)
        if n:
            self.replays += n
            if self.count is not None:
                self.count(n)

    def origin_of(self, ssp: SSP, offset: int) -> Any:
        """The origin of the record at ``offset`` of ``ssp``, from a batch decided and not yet
        completed (a record the task is processing); None when it has none."""
        for first, origins, _, names in self._decided.get(ssp, ()):
            if first <= offset < first + len(origins):
                return _full(origins[offset - first], names)
        return None

    def snapshot(self, offsets: Mapping[SSP, int]) -> dict[str, Any]:
        """What was applied as of ``offsets`` (the checkpoint's): for checkpoint records."""
        out: dict[str, Any] = {}
        for ssp, st in self.state.items():
            # none of the partition completed yet: none of what was decided of it counts
            upto = offsets.get(ssp, -1)
            decided = self._decided.get(ssp)
            if decided:
                while decided and decided[0][0] + len(decided[0][1]) - 1 <= upto:
                    decided.popleft()
                if decided:  # decided beyond the checkpoint: count only what it covers
                    first, origins, before, names = decided[0]
                    st = _copy(before)
                    _apply(st, origins[:max(0, upto - first + 1)], None, None, names)
            out[f"{ssp.stream_id}/{ssp.partition}"] = {
                k: [v[0], v[1], sorted(v[2])] if v[2] else [v[0], v[1]] for k, v in st.items()}
        return out


def _copy(st: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {k: [v[0], v[1], set(v[2]) if v[2] else None] for k, v in st.items()}


def _apply(st: dict[str, list[Any]], origins: Sequence[Any], payloads: list[Any] | None,
           skipped: Any, names: OriginNames | None = None) -> int:
    """Applies ``origins`` in order to ``st``; a replay's payload becomes ``skipped``. Returns
    how many were replays. The spans between records without an origin (control records) go
    by runs where they can (``_apply_runs``)."""
    origins = origins if type(origins) is list else list(origins)
    n = len(origins)
    replays = start = 0
    while start < n:
        try:
            stop = origins.index(None, start)
        except ValueError:
            stop = n
        if stop - start >= _RUN_MIN:
            replays += _apply_runs(st, origins, start, stop, payloads, skipped, names)
        elif stop > start:
            replays += _apply_each(st, origins, start, stop, payloads, skipped, names)
        start = stop + 1
    return replays


#: a span shorter than this goes record by record
_RUN_MIN = 8


def _apply_runs(st: dict[str, list[Any]], origins: list[Any], start: int, stop: int,
                payloads: list[Any] | None, skipped: Any, names: OriginNames | None) -> int:
    """``_apply`` of ``origins[start:stop]`` (none None), a run of one origin key at a time:
    a run of in-order origins, one record a message, each offset above the last and the first
    above what was applied of an in-order origin, has no replay, and moves what was applied to
    its last; the comparisons are made in C. Any other run goes record by record."""
    span = origins[start:stop]
    first, last = span[0], span[-1]
    if first.__class__ is int and last.__class__ is int and names is not None \
            and first >> OFFSET_BITS == last >> OFFSET_BITS:
        # the compact form: in order, the ends of one key, so every record between is of it
        try:
            ordered = all(map(lt, span, span[1:]))
        except TypeError:  # (some not in the compact form)
            ordered = False
        if ordered:
            key = names[first >> OFFSET_BITS]
            s = st.get(key)
            if s is None:
                st[key] = [last & _MASK, 0, None]
                return 0
            if s[2] is None and first & _MASK > s[0]:
                s[0], s[1] = last & _MASK, 0
                return 0
    keys: Sequence[Any]
    offs: Sequence[int]
    mask = -1  # offsets are ``offs``' items as they are, or (the compact form) under ``_MASK``
    try:  # the compact form, in order, one record a message: one key's ints order as offsets
        keys = [o >> OFFSET_BITS for o in span]
        offs, mask = span, _MASK
        if names is None:
            raise TypeError
    except TypeError:
        try:
            if max(map(len, span)) != 3:  # records with floors: one by one
                raise TypeError
            keys, offs, idxs = zip(*span, strict=True)
            if idxs.count(0) != len(idxs):  # messages with several records: one by one
                raise TypeError
        except TypeError:  # (or some in the compact form, some not)
            return _apply_each(st, origins, start, stop, payloads, skipped, names)
        names, mask = None, -1
    cuts = list(compress(range(1, len(keys)), map(ne, keys, keys[1:])))
    cuts.append(len(keys))
    replays = lo = 0
    for hi in cuts:
        key = keys[lo] if names is None else names[keys[lo]]
        s = st.get(key)
        run = offs[lo:hi]
        if (s is None or (s[2] is None and run[0] & mask > s[0])) \
                and all(map(lt, run, run[1:])):
            if s is None:
                st[key] = [run[-1] & mask, 0, None]
            else:
                s[0], s[1] = run[-1] & mask, 0
        else:
            replays += _apply_each(st, origins, start + lo, start + hi, payloads, skipped,
                                   names)
        lo = hi
    return replays


def _apply_each(st: dict[str, list[Any]], origins: Sequence[Any], start: int, stop: int,
                payloads: list[Any] | None, skipped: Any, names: OriginNames | None = None
                ) -> int:
    """``_apply`` of ``origins[start:stop]``, record by record."""
    replays = 0
    for i in range(start, stop):
        o = origins[i]
        if o is None:
            continue
        if o.__class__ is int:
            o = _full(o, names)
            if o is None:  # (no names: a compact origin read where none can be named)
                continue
        key, off, idx = o[0], o[1], o[2]
        s = st.get(key)
        if s is None:
            s = st[key] = [-1, -1, None]
        fo = s[0]
        if off < fo or (off == fo and idx <= s[1]) or (s[2] is not None and (off, idx) in s[2]):
            replays += 1
            if payloads is not None:
                payloads[i] = skipped
            continue
        if len(o) == 3:  # in order: everything of this origin up to it is applied
            s[0], s[1] = off, idx
            continue
        loose = s[2]
        if loose is None:
            loose = s[2] = set()
        loose.add((off, idx))
        floor = o[3]
        if floor > fo:
            s[0], s[1] = floor, _ALL
            if len(loose) > 64:
                s[2] = {p for p in loose if p[0] > floor} or None
    return replays
