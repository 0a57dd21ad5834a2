"""The window operator: tumbling and keyed tumbling windows here, keyed sessions in
``operators.window_session`` (docs/semantics.md rules 7 and 8).

A pane is identified by ``(start_ms, key)`` (key None for the global tumbling window); its state
lives in ``ctx.store(op_id)`` under that tuple: the fold result, or the list of messages without
``init``/``fold``. A tumbling window holds its panes' values in memory and writes the ones that
changed into the store at each commit (``flush_state``), so a message costs no store access and
a checkpoint's store holds exactly the panes as of its offsets. It holds about
``stores.<op id>.pane.cache.size`` panes (default 10,000: values and index keys) in memory at
most: past a commit the values beyond it are read back from the store when their pane gets its
next message, and when there are more, the starts holding the most panes are spilled
(``_spill``): the store holds their values and is their index from then on. Panes that close
leave memory. A pane
of a start none of whose panes was written at a commit (``_stored``: it opened and closed
between two commits, or the stream ended first) closes with no store delete, so it writes no
changelog tombstone either. The in-memory indexes (open panes and their closing order, panes
kept for lateness) are rebuilt from the store at ``init``; the watermark is stored under
``(None, "watermark")`` whenever panes close, which is all a restore needs to tell closed panes
from open ones. Each pane's early and late trigger progress is stored too, at each commit, and
put back by a restore (``operators.window_triggers``; Samza keeps it in memory only).

Time. Without ``event_time`` a message belongs to the pane of ``ctx.clock()`` and panes close at
window ticks (``on_timer(now_ms)``) once ``now >= end``. With ``event_time`` (seconds, rounded to
whole ms) the window's watermark is given to ``on_watermark``: the streaming runtime computes it
from every producer feeding the task (``runtime.engine.watermarks``, ``ctx.external_watermarks``);
without ``ctx.external_watermarks`` (an operator on its own, Spark passes over event-time-sorted
input), or where the runtime names the window in ``ctx.own_watermarks`` (one input partition
alone feeds it and each message reaches it inline), it is the max of the event times the window
has seen. A pane closes when the watermark reaches its end, in ``process`` or
``on_watermark``. Early and late triggers always count processing time (``ctx.clock()``) and their
time triggers fire at window ticks.

Firings. A DEFAULT firing emits the pane, clears its state and cancels its early trigger. An
early trigger is created on a pane's first message; a non-repeating one fires once per pane,
``repeat`` restarts after each firing. DISCARDING clears the state after every firing (the pane
stays open: its next message starts from ``init()`` again). A firing without state emits nothing.
A list pane emitted while the pane stays open is a copy; a fold value is emitted as is, so a fold
should return a new value rather than mutate its accumulator if it wants EARLY panes to stay put.
A fold result of None is an error (None reads as "no state").

Late data (event time only). A message whose pane already closed is late. It goes to the
window's ``LateTracker`` (``operators.late``: counted per input stream, the first one logged,
written to the ``late_to`` stream when the window has one; ``late_dropped`` counts them here),
unless the window has both ``allowed_lateness`` and a ``late_trigger`` and the watermark is still
below pane end + allowed lateness. Then the DEFAULT firing kept the pane's state
(ACCUMULATING), the late message is folded into it (a pane that never had on-time data starts
from ``init()``), and the pane's late trigger, created on its first late message, decides when
to emit LATE panes, with the same rules as early triggers (``count(1)`` once per pane,
``repeat(count(1))`` once per late message). When the watermark passes end + allowed lateness
the pane's state is dropped without a firing.

End of stream. Every open pane fires once as DEFAULT, ordered by pane start and then by
``encode_key`` of the key; then all state is dropped (closed panes kept for lateness too), and in
event time the watermark moves to the end of the last of them, stored as ``[watermark, ended]``
under the watermark's key: a later run's message for one of them is late (``ended`` tells the
summary why), never a second DEFAULT pane (docs/semantics.md, "The end of a bounded run"). The
streaming runtime takes them in chunks (``end_of_stream_chunks``), each made as it is taken and
written before the next, so a window ending with 10^6 open panes never holds them all as panes.

Ticks in one ``on_timer`` call run in time order: a pane's early timer due at 900 fires before its
close at 1000; at equal times the close comes first (and cancels the early trigger). Panes that
close together come out in ``order_key`` order of their keys, as at end-of-stream (their first
messages' order would depend on how the task's input partitions interleave).

>>> from datetime import timedelta
>>> from samza_dsl.spec import WindowSpec
>>> from samza_dsl.windows import Windows
>>> from operators.base import OperatorContext
>>> from operators.state import InMemoryState
>>> w = Windows.keyed_tumbling(lambda m: m[0], timedelta(seconds=10), init=int,
...                            fold=lambda m, n: n + 1, event_time=lambda m: m[1])
>>> op = TumblingWindowOperator(WindowSpec("w", "w", ("stream:in",), "", window=w))
>>> op.init(OperatorContext("t0", {}, lambda: 0, {"w": InMemoryState()}))
>>> op.process(("a", 1.0)), op.process(("a", 2.0)), op.process(("b", 3.0))
([], [], [])
>>> [(p.key.key, p.key.pane_id, p.message, p.firing.name) for p in op.process(("a", 12.0))]
[('a', '0', 2, 'DEFAULT'), ('b', '0', 1, 'DEFAULT')]
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from heapq import heappop, heappush
from itertools import islice
from typing import Any

from samza_dsl.config import STORE_PROPERTIES
from samza_dsl.jobconfig import JobConfig
from samza_dsl.kv import KV
from samza_dsl.spec import WindowSpec
from samza_dsl.windows import AccumulationMode, FiringType, WindowKey, WindowPane

from .base import FailedAt, Operator, OperatorContext, UserContext, resolve_fn, stopped_at
from .late import LateTracker
from .state import encode_key, in_key_order, order_key
from .triggers import TriggerImpl, make_trigger
from .window_triggers import TriggerProgress

__all__ = ["WindowOperator", "AlignedWindowOperator", "TumblingWindowOperator", "WATERMARK_KEY"]

EARLY = FiringType.EARLY
DEFAULT = FiringType.DEFAULT
LATE = FiringType.LATE
NO_WATERMARK = -(1 << 62)
#: where the window's watermark is stored (None sorts before every pane start)
WATERMARK_KEY = (None, "watermark")
_MISSING: Any = object()
_INF = float("inf")


class WindowOperator(TriggerProgress, Operator, ABC):
    """Shared machinery: firing panes, early/late triggers and their timers, watermark, ticks
    and end-of-stream. Subclasses keep the panes; a pane ``handle`` is whatever identifies a pane
    stably in the subclass (the ``(start, key)`` tuple, or a session object)."""

    opcode = "window"
    #: panes this operator has given (every firing), for the ``panes-emitted`` metric
    panes_emitted = 0

    def __init__(self, spec: WindowSpec) -> None:
        super().__init__(spec)
        w = spec.window
        self.window = w
        self.size_ms = w.size_ms
        self.user_fns = (w.key_fn, w.init, w.fold, w.event_time)
        self._key_fn = resolve_fn(w.key_fn) if w.key_fn is not None else None
        self._init = resolve_fn(w.init) if w.init is not None else None
        self._fold = resolve_fn(w.fold) if w.fold is not None else None
        self.fold_fn = self._fold
        self._event_time = resolve_fn(w.event_time) if w.event_time is not None else None
        #: a declared aggregate's finish: a pane's value from its accumulator
        self._finish = w.aggregate.finish if w.aggregate is not None else None
        self.mode = w.mode
        self._discarding = w.mode is AccumulationMode.DISCARDING
        self.lateness_ms = w.allowed_lateness_ms if self._event_time is not None else 0
        #: closed panes stay updatable only when something can still emit them
        self._retain = self.lateness_ms > 0 and w.late is not None
        self._early_spec = w.early
        self._late_spec = w.late if self._retain else None
        self.watermark = NO_WATERMARK
        #: where the end of a bounded run closed every open pane (stored with the watermark)
        self.ended = NO_WATERMARK
        self.late_to = spec.late_to
        self.late_tracker = LateTracker(self.op_id, self.size_ms,
                                        self.lateness_ms if self._retain else 0,
                                        late_to=spec.late_to, session=w.is_session)
        self._early: dict[Any, TriggerImpl | None] = {}  # None: retired (fired, not repeating)
        self._late: dict[Any, TriggerImpl | None] = {}
        self._init_trigger_progress()
        self._timers: list[tuple[int, int, FiringType, Any, TriggerImpl]] = []
        self._seq = itertools.count()
        self._pane_ids: dict[int, str] = {}

    def init(self, ctx: OperatorContext, user_ctx: UserContext | None = None) -> None:
        super().init(ctx, user_ctx)
        self.late_tracker.init(ctx)
        self._store = ctx.store(self.op_id)
        self._get = self._store.get
        self._put = self._store.put
        self._clock = ctx.clock
        #: without upstream watermarks, the latest event time seen is the watermark; so too
        #: where the runtime says the two are the same (``ctx.own_watermarks``). Fixed here
        self.local_watermark = not ctx.external_watermarks or self.op_id in ctx.own_watermarks
        stored = self._get(WATERMARK_KEY)
        if self._event_time is not None and stored is not None:
            if isinstance(stored, list | tuple):  # [watermark, where a run's end closed all]
                self.watermark, self.ended = int(stored[0]), int(stored[1])
                self.late_tracker.ended_ms = self.ended
            else:
                self.watermark = stored
        self._stored_watermark = self.watermark
        self._restore()
        for trig, handle, firing in self._restore_triggers():
            self._schedule(trig, handle, firing)

    # -- what subclasses provide ---------------------------------------------------------------

    @abstractmethod
    def _restore(self) -> None:
        """Rebuild the in-memory pane indexes from the store."""

    def _value(self, handle: Any) -> Any:
        return self._get(handle)

    def _clear_value(self, handle: Any) -> None:
        """After a DISCARDING firing: the pane stays, its value goes."""
        self._store.delete(handle)

    def _drop_value(self, handle: Any) -> None:
        """After a DEFAULT firing: the pane's state goes."""
        self._store.delete(handle)

    @abstractmethod
    def _next_close(self) -> int | None:
        """The earliest end of an open pane (a lower bound is fine), or None."""

    @abstractmethod
    def _close_next(self, threshold: int, out: list[Any]) -> None:
        """Close the panes at the head of the closing order whose end <= threshold (DEFAULT)."""

    def _collect(self, watermark: int) -> None:
        """Drop closed panes whose end + allowed lateness <= watermark."""

    @abstractmethod
    def _open_handles(self) -> list[Any]:
        """Every open pane's handle."""

    @abstractmethod
    def _drop_all(self) -> None:
        """Drop every pane's state."""

    def flush_state(self) -> None:
        """At a commit: the watermark and the triggers' progress into the store
        (``operators.window_triggers``)."""
        self._flush_watermark()
        self._flush_triggers()

    def _flush_watermark(self) -> None:
        """The watermark as of the commit, where it moved since it was last stored: a restore
        then knows which panes closed, also where none closed since (a late message kept in a
        hop of open panes is never put back in a closed one)."""
        wm = self.watermark
        if self._event_time is not None and wm != self._stored_watermark:
            self._put(WATERMARK_KEY, wm if self.ended == NO_WATERMARK else [wm, self.ended])
            self._stored_watermark = wm

    # -- firing ------------------------------------------------------------------------------------

    def _new_value(self) -> Any:
        init = self._init
        return init() if init is not None else []

    def _check_fold(self, value: Any) -> Any:
        if value is None:
            raise ValueError(f"window {self.op_id!r}: fold returned None; return the accumulator "
                             f"(None is how the window store says 'no state')")
        return value

    def _emit(self, handle: Any, firing: FiringType, drop: bool,
              value: Any = _MISSING) -> WindowPane | None:
        """The pane for a firing, or None without state. Clears the value under DISCARDING;
        ``drop`` says the caller drops the state right after (no copy needed). ``value``: the
        pane's value when the caller read it already."""
        if value is _MISSING:
            value = self._value(handle)
        if value is None:
            return None
        if self._discarding:
            self._clear_value(handle)
        elif not drop and self._fold is None:
            value = list(value)
        start, key = self._pane_key(handle)
        if self._finish is not None:
            value = self._finish(value)
        self.panes_emitted += 1
        return WindowPane(WindowKey(key, self._pane_id(start)), value, firing, self.mode)

    def _pane_id(self, start: int) -> str:
        """The pane id of ``start``: one string per start, shared by its panes."""
        pane_id = self._pane_ids.get(start)
        if pane_id is None:
            if len(self._pane_ids) >= 1024:
                self._pane_ids.clear()
            pane_id = self._pane_ids[start] = str(start)
        return pane_id

    def _close_pane(self, handle: Any, out: list[Any], value: Any = _MISSING) -> None:
        """The DEFAULT firing: emit, cancel the early trigger, and clear the state unless closed
        panes are retained for late data."""
        pane = self._emit(handle, DEFAULT, not self._retain, value)
        if pane is not None:
            out.append(pane)
        self._early.pop(handle, None)
        if self._trig_at:
            self._trigger_gone(EARLY, handle)
        if not self._retain:
            self._drop_value(handle)

    def _on_trigger_message(self, handle: Any, firing: FiringType, now: int) -> WindowPane | None:
        triggers, spec = (self._early, self._early_spec) if firing is EARLY \
            else (self._late, self._late_spec)
        trig = triggers.get(handle, _MISSING)
        if trig is _MISSING:
            trig = triggers[handle] = make_trigger(spec)
        elif trig is None:
            return None
        self._trigger_changed(firing, handle)
        if trig.on_message(now):
            return self._trigger_fired(triggers, handle, trig, firing)
        self._schedule(trig, handle, firing)
        return None

    def _trigger_fired(self, triggers: dict[Any, TriggerImpl | None], handle: Any,
                       trig: TriggerImpl, firing: FiringType) -> WindowPane | None:
        pane = self._emit(handle, firing, False)
        self._trigger_changed(firing, handle)
        if trig.repeating:
            trig.restart()  # type: ignore[attr-defined]
            self._schedule(trig, handle, firing)
        else:
            triggers[handle] = None
        return pane

    def _schedule(self, trig: TriggerImpl, handle: Any, firing: FiringType) -> None:
        # deadlines mostly move later (time_since_last), so an entry is pushed only when the
        # deadline moves earlier; a popped entry that is not due yet is pushed again
        d = trig.deadline()
        if d is not None and (trig.scheduled is None or d < trig.scheduled):
            trig.scheduled = d
            heappush(self._timers, (d, next(self._seq), firing, handle, trig))

    def _run_timer(self, now: int, out: list[Any]) -> None:
        d, _, firing, handle, trig = heappop(self._timers)
        triggers = self._early if firing is EARLY else self._late
        if triggers.get(handle) is not trig or trig.scheduled != d:
            return  # cancelled, retired, or rescheduled
        trig.scheduled = None
        if trig.on_time(now):
            pane = self._trigger_fired(triggers, handle, trig, firing)
            if pane is not None:
                out.append(pane)
        else:
            self._schedule(trig, handle, firing)

    @property
    def late_dropped(self) -> int:
        """How many late messages this operator counted (dropped, or sent to ``late_to``)."""
        return self.late_tracker.total

    def _drop_late(self, message: Any, key: Any, start: int, ms: int) -> list[Any]:
        return self.late_tracker.late(message, key, start, ms, self.watermark)

    # -- time --------------------------------------------------------------------------------------

    def _advance(self, watermark: int) -> list[Any]:
        """Move the event-time watermark: close panes it passed, drop those past lateness."""
        self.watermark = self._stored_watermark = watermark
        # before closing: a restore sees them closed
        self._put(WATERMARK_KEY, watermark if self.ended == NO_WATERMARK
                  else [watermark, self.ended])
        out: list[Any] = []
        while (end := self._next_close()) is not None and end <= watermark:
            self._close_next(watermark, out)
        if self._retain:
            self._collect(watermark)
        return out

    def on_watermark(self, watermark_ms: int) -> list[Any]:
        if self._event_time is None or watermark_ms <= self.watermark:
            return []
        end = self._next_close()
        if not self._retain and (end is None or end > watermark_ms):
            # nothing closes: the stored watermark may lag, a restore only needs it to tell
            # closed panes from open ones (the runtime advances it once per message)
            self.watermark = watermark_ms
            return []
        return self._advance(watermark_ms)

    def on_timer(self, now_ms: int) -> list[Any]:
        out: list[Any] = []
        timers = self._timers
        processing = self._event_time is None
        while True:
            t = timers[0][0] if timers else None
            if t is not None and t > now_ms:
                t = None
            c = self._next_close() if processing else None
            if c is not None and c > now_ms:
                c = None
            if c is not None and (t is None or c <= t):
                self._close_next(now_ms, out)
            elif t is not None:
                self._run_timer(now_ms, out)
            else:
                return out

    def _end_order(self) -> Iterator[Any]:
        """The open panes' handles in end-of-stream order: by start, then ``order_key`` of the
        key."""
        def order(handle: Any) -> tuple[int, bytes]:
            start, key = self._pane_key(handle)
            return start, order_key(key)

        return iter(sorted(self._open_handles(), key=order))

    def _end_panes(self) -> Iterator[tuple[Any, Any]]:
        """``(handle, value)`` of the open panes in end-of-stream order; the value is
        ``_MISSING`` where ``_emit`` is to read it."""
        for handle in self._end_order():
            yield handle, _MISSING

    def on_end_of_stream(self) -> list[Any]:
        return [pane for chunk in self.end_of_stream_chunks(1 << 62) for pane in chunk]

    def _pane_end(self, handle: Any) -> int:
        """When the pane of ``handle`` closes in event time: its end."""
        return self._pane_key(handle)[0] + self.size_ms

    def end_of_stream_chunks(self, size: int) -> Iterator[list[Any]]:
        """Every open pane fires once as DEFAULT, in ``_end_order``, in lists of ``size``
        panes made as they are taken; then all state is dropped. In event time the watermark
        moves to the end of the last of them and is stored: the panes are closed, so a message
        for one of them in a later run (more input after a bounded run ended) is late, counted
        and shown, and never opens the pane to emit it a second time."""
        chunk: list[Any] = []
        closed_to = self.watermark
        for handle, value in self._end_panes():
            closed_to = max(closed_to, self._pane_end(handle))
            pane = self._emit(handle, DEFAULT, True, value)
            if pane is not None:
                chunk.append(pane)
                if len(chunk) >= size:
                    yield chunk
                    chunk = []
        self._drop_all()
        self._early.clear()
        self._late.clear()
        self._triggers_all_gone()
        self._timers.clear()
        if self._event_time is not None and closed_to > self.watermark:
            self.watermark = self.ended = self.late_tracker.ended_ms = closed_to
            self._stored_watermark = closed_to
            self._put(WATERMARK_KEY, [closed_to, closed_to])
        if chunk:
            yield chunk


class AlignedWindowOperator(WindowOperator):
    """Windows whose panes are ``(start, key)`` and end at ``start + size`` (tumbling and
    hopping): the indexes of open panes and of closed panes kept for lateness, by start."""

    def __init__(self, spec: WindowSpec) -> None:
        super().__init__(spec)
        self._open: dict[int, dict[Any, None]] = {}  # start -> keys
        self._closing: list[int] = []  # starts of open panes
        self._retained: dict[int, dict[Any, None]] = {}  # closed, updatable until end + lateness
        self._expiring: list[int] = []  # starts of retained panes

    @staticmethod
    def _index(index: dict[int, dict[Any, None]], heap: list[int], start: int) -> dict[Any, None]:
        """The keys of the panes starting at ``start`` in ``index``; ``start`` goes into
        ``heap`` when new."""
        keys = index.get(start)
        if keys is None:
            keys = index[start] = {}
            heappush(heap, start)
        return keys

    def _next_close(self) -> int | None:
        closing = self._closing
        return closing[0] + self.size_ms if closing else None

    def _keys(self, start: int) -> Iterable[Any]:
        """The keys of the open panes of ``start``."""
        return self._open[start]

    def _take_keys(self, start: int) -> Iterable[Any]:
        """``_keys(start)``, the start leaving the index of open panes."""
        return self._open.pop(start)

    def _close_next(self, threshold: int, out: list[Any]) -> None:
        start = heappop(self._closing)
        keys = in_key_order(self._take_keys(start))
        for key in keys:
            self._close_pane((start, key), out)
        if self._retain:
            retained = self._index(self._retained, self._expiring, start)
            retained.update(dict.fromkeys(keys))

    def _collect(self, watermark: int) -> None:
        expiring = self._expiring
        horizon = self.size_ms + self.lateness_ms
        while expiring and expiring[0] + horizon <= watermark:
            start = heappop(expiring)
            for key in self._pop_retained(start):
                pk = (start, key)
                self._drop_value(pk)
                self._late.pop(pk, None)
                self._trigger_gone(LATE, pk)

    def _pop_retained(self, start: int) -> Iterable[Any]:
        """The keys of the retained panes of ``start``, the start leaving that index."""
        return self._retained.pop(start)

    def _open_handles(self) -> list[Any]:
        return [(start, key) for start in self._open for key in self._keys(start)]

    def _end_order(self) -> Iterator[Any]:
        # a start's keys sorted at a time: no list of every open pane
        for start in sorted(self._open):
            for key in in_key_order(self._keys(start)):
                yield start, key


#: how many pane values flush_state writes into the store between two of its ``maybe_flush``
_FLUSH_CHUNK = 4096


def _foreign(key: Any) -> bool:
    """Whether ``encode_key`` cannot encode ``key`` (the store then keeps it out of key
    order, so a spilled start keeps it in its index)."""
    if type(key) is str:
        return False
    try:
        encode_key(key)
    except TypeError:
        return True
    return False


class TumblingWindowOperator(AlignedWindowOperator):
    """Global (``Windows.tumbling``) and keyed tumbling windows: pane start = t - t % size.

    Pane values in memory, by start and then key: ``_dirty`` holds those changed since the last
    commit, ``_clean`` those written at a commit and kept (at most ``_cache_size`` of them). A
    key is in one of the two at most; a pane in neither has its value in the store (or none).

    The index of open panes (``_open``) holds the panes of each start that were open at the
    last commit; a pane opened since is in ``_dirty`` only, and joins ``_open`` at the next
    commit (``_keys`` gives both). So a pane opened and closed between two commits costs one
    dict entry. A spilled start (``_spilled``) has no keys in the indexes: its panes are the
    store's keys from ``(start,)`` to ``(start + 1,)``, with those changed since it last
    spilled in ``_dirty`` (``_check_memory`` spills it again when the panes in memory grow past
    ``_cache_size``)."""

    def __init__(self, spec: WindowSpec) -> None:
        super().__init__(spec)
        self._dirty: dict[int, dict[Any, Any]] = {}
        #: what ``process_columns`` folds where the fold never reads its message (Nones)
        self._nones: list[Any] = []
        self._clean: dict[int, dict[Any, Any]] = {}
        self._cached = 0  # values in _clean
        self._cache_size: int = STORE_PROPERTIES["pane.cache.size"].default
        self._deletes = 0
        self._store_flush: Callable[[], None] | None = None
        #: the starts whose panes may have values in the store (written by ``flush_state``,
        #: or found there at ``init``): a pane of another start has its value in memory
        #: only, and dropping it costs no store delete (nor a changelog tombstone)
        self._stored: set[int] = set()
        #: starts whose panes the store indexes (``_spill``): their keys are not in ``_open``
        #: or ``_retained`` (but for keys ``encode_key`` cannot encode), their values are read
        #: from the store, and they close in key order
        self._spilled: set[int] = set()
        self._taken = 0  # entries that joined ``_dirty`` since ``_check_memory`` last ran
        self._room = self._cache_size
        self._peek: Callable[[Any], Any] = lambda k: None

    def init(self, ctx: OperatorContext, user_ctx: UserContext | None = None) -> None:
        self._cache_size = JobConfig.validated(ctx.config).store(self.op_id).pane_cache_size
        self._room = self._cache_size
        store = ctx.store(self.op_id)
        #: a store read that caches nothing (the window keeps its panes' values itself)
        self._peek = store.peek
        super().init(ctx, user_ctx)
        #: a store that writes in batches (LMDB) flushes when enough of its keys are dirty
        self._store_flush = self._store.maybe_flush
        self._store.cache_writes = False  # the panes' values are cached here
        self.process = self._make_process()  # type: ignore[method-assign, assignment]

    # -- pane values in memory -----------------------------------------------------------------

    def _value(self, handle: Any) -> Any:
        start, key = handle
        panes = self._dirty.get(start)
        if panes is not None:
            v = panes.get(key, _MISSING)
            if v is not _MISSING:
                return v
        panes = self._clean.get(start)
        if panes is not None:
            v = panes.get(key, _MISSING)
            if v is not _MISSING:
                return v
        return self._peek(handle)

    def _take(self, start: int, key: Any) -> Any:
        """The value of a pane not in ``_dirty``, about to be changed: out of ``_clean``, or
        read from the store (None: no state). Only an indexed pane (open, or kept for late
        data) or a pane of a spilled start can have a value in the store: a new pane of
        another start costs no store read. The pane joins ``_dirty`` next: past ``_room`` such
        panes, ``_check_memory`` looks at the memory the panes hold."""
        self._taken += 1
        if self._taken > self._room:
            self._check_memory()
        clean = self._clean
        panes = clean.get(start)
        if panes is not None:
            v = panes.pop(key, _MISSING)
            if v is not _MISSING:
                self._cached -= 1
                if not panes:
                    del clean[start]
                return v
        if start in self._spilled:
            return self._peek((start, key))
        keys = self._open.get(start)
        if keys is None or key not in keys:
            keys = self._retained.get(start)
            if keys is None or key not in keys:
                return None
        return self._peek((start, key))

    # -- spilled starts: panes past the memory bound -------------------------------------------

    def _check_memory(self) -> None:
        """When the panes in memory (values changed since the last commit, values kept past
        it, and the indexes' keys) number more than ``_cache_size``, the starts holding the
        most are spilled (``_spill``) until they hold at most half of it."""
        held: dict[int, int] = {}
        for index in (self._dirty, self._clean, self._open, self._retained):
            for start, panes in index.items():
                held[start] = held.get(start, 0) + len(panes)
        total = sum(held.values())
        limit = self._cache_size
        if total > limit:
            for start in sorted(held, key=held.__getitem__, reverse=True):
                if total <= limit // 2:
                    break
                if start in self._open or start in self._retained:
                    self._spill(start)
                    total -= held[start]
        self._taken = 0
        self._room = max(limit - total, limit // 4, 1)

    def _spill(self, start: int) -> None:
        """Moves the panes of ``start`` to the store: the values in memory are written there
        (the ones changed since the last commit reach the changelog with the store's next
        flush, as any store write; a restore still gives the checkpoint's state) and leave
        memory, with the start's keys in the indexes. From then on the store is the start's
        index: its panes are read from there when they change, and close in key order (keys
        ``encode_key`` cannot encode stay in the index, and close after the others)."""
        put, flush = self._put, self._store_flush
        foreign: list[Any] = []
        panes = self._dirty.get(start)
        if panes:
            self._stored.add(start)
            for n, (key, value) in enumerate(panes.items(), 1):
                put((start, key), value)
                if _foreign(key):
                    foreign.append(key)
                if flush is not None and not n % _FLUSH_CHUNK:
                    flush()
            panes.clear()  # in place: ``process_run`` may hold it
        kept = self._clean.pop(start, None)
        if kept:
            self._cached -= len(kept)
        for index in (self._open, self._retained):
            keys = index.get(start)
            if keys is not None:
                if keys:
                    foreign.extend(k for k in keys if _foreign(k))
                    keys.clear()
                keys.update(dict.fromkeys(foreign))
                foreign = []
        self._spilled.add(start)

    def _spilled_panes(self, start: int) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` of every pane of a spilled start, in ``order_key`` order: the
        start is spilled again first, so that the store holds them all."""
        self._spill(start)
        for (_, key), value in self._store.range((start,), (start + 1,)):
            yield key, value
        index = self._open.get(start)
        if index is None:
            index = self._retained.get(start, {})
        for key in sorted([k for k in index if _foreign(k)],
                          key=order_key):  # keys encode_key cannot encode
            value = self._peek((start, key))
            if value is not None:
                yield key, value

    def _current(self, start: int, key: Any) -> Any:
        """A pane's value for an update (see ``_take``); the caller then ``_set``s it."""
        panes = self._dirty.get(start)
        if panes is not None:
            v = panes.get(key, _MISSING)
            if v is not _MISSING:
                return v
        return self._take(start, key)

    def _set(self, start: int, key: Any, value: Any) -> None:
        panes = self._dirty.get(start)
        if panes is None:
            panes = self._dirty[start] = {}
        panes[key] = value

    def _forget(self, start: int, key: Any) -> None:
        for index in (self._dirty, self._clean):
            panes = index.get(start)
            if panes is not None and panes.pop(key, _MISSING) is not _MISSING:
                if index is self._clean:
                    self._cached -= 1
                if not panes:
                    del index[start]

    def _clear_value(self, handle: Any) -> None:
        opened = self._open.get(handle[0])
        if opened is not None and handle[1] not in opened and handle[0] not in self._spilled:
            # an open pane (DISCARDING) that keeps no value: the panes of its start opened
            # since the last commit join the index first, in their order
            opened.update(dict.fromkeys(self._dirty.get(handle[0], ())))
        self._forget(*handle)
        if handle[0] not in self._stored:
            return
        self._store.delete(handle)
        self._deletes += 1
        if not self._deletes % _FLUSH_CHUNK and self._store_flush is not None:
            self._store_flush()  # panes closing by the million: the store writes in batches

    _drop_value = _clear_value

    def _keys(self, start: int) -> list[Any]:
        # the panes indexed at the last commit, then those opened since (in ``_dirty`` only)
        opened = self._open[start]
        keys = list(opened)
        fresh = self._dirty.get(start)
        if fresh:
            keys.extend([k for k in fresh if k not in opened] if opened else fresh)
        return keys

    def _take_keys(self, start: int) -> list[Any]:
        keys = self._keys(start)
        del self._open[start]
        return keys

    def _close_next(self, threshold: int, out: list[Any]) -> None:
        start = self._closing[0]
        if start in self._spilled:
            heappop(self._closing)
            for key, value in self._spilled_panes(start):
                self._close_pane((start, key), out, value)
            keys = self._open.pop(start)
            if self._retain:
                self._index(self._retained, self._expiring, start).update(keys)
                return
            self._spilled.discard(start)
        elif not self._retain and not self._discarding:
            self._close_start(start, out)
        else:
            super()._close_next(threshold, out)
        if not self._retain:
            self._stored.discard(start)

    def _close_start(self, start: int, out: list[Any]) -> None:
        """``_close_next`` of a start in memory whose panes go as they close (no allowed
        lateness, ACCUMULATING): every pane's ``_close_pane`` in one loop, in key order. The
        values of the panes that closed leave memory together; if one pane's ``finish``
        raises, the panes before it have closed and the others keep their values, as they
        would one ``_close_pane`` at a time."""
        heappop(self._closing)
        keys = in_key_order(self._take_keys(start))
        dirty = self._dirty.get(start) or {}
        clean = self._clean.get(start) or {}
        stored = start in self._stored
        finish, early, peek = self._finish, self._early, self._peek
        pane_id, mode = self._pane_id(start), self.mode
        closed = emitted = 0
        try:
            for key in keys:
                value = dirty.get(key, _MISSING)
                if value is _MISSING:
                    value = clean.get(key, _MISSING)
                    if value is _MISSING:
                        value = peek((start, key))
                if value is not None:
                    if finish is not None:
                        value = finish(value)
                    out.append(WindowPane(WindowKey(key, pane_id), value, DEFAULT, mode))
                    emitted += 1
                closed += 1
                if early:
                    early.pop((start, key), None)
                    self._trigger_gone(EARLY, (start, key))
                if stored:
                    self._store.delete((start, key))
                    self._deletes += 1
                    if not self._deletes % _FLUSH_CHUNK and self._store_flush is not None:
                        self._store_flush()
        finally:
            self.panes_emitted += emitted
            self._forget_closed(start, keys, closed)

    def _forget_closed(self, start: int, keys: list[Any], closed: int) -> None:
        """The values of ``start``'s first ``closed`` panes in ``keys`` leave memory (all of
        the start's, once every pane closed)."""
        for index in (self._dirty, self._clean):
            panes = index.get(start)
            if panes is None:
                continue
            before = len(panes)
            if closed < len(keys):
                for key in keys[:closed]:
                    panes.pop(key, None)
                after = len(panes)
            else:
                after = 0
            if not after:
                del index[start]
            if index is self._clean:
                self._cached -= before - after

    def _pop_retained(self, start: int) -> Iterable[Any]:
        if start not in self._spilled:
            return super()._pop_retained(start)
        return self._drain(start)

    def _drain(self, start: int) -> Iterator[Any]:
        """The keys of a spilled retained start, which then leaves the index."""
        for key, _ in self._spilled_panes(start):
            yield key
        del self._retained[start]
        self._spilled.discard(start)

    def _end_panes(self) -> Iterator[tuple[Any, Any]]:
        delete, flush = self._store.delete, self._store_flush
        n = 0
        for start in sorted(self._open):
            if start in self._spilled:  # each pane leaves the store as it is taken
                for key, value in self._spilled_panes(start):
                    yield (start, key), value
                    delete((start, key))
                    n += 1
                    if flush is not None and not n % _FLUSH_CHUNK:
                        flush()
            else:
                for key in in_key_order(self._keys(start)):
                    yield (start, key), _MISSING

    def _collect(self, watermark: int) -> None:
        super()._collect(watermark)
        stored = self._stored
        if stored:
            stored.intersection_update(self._open.keys() | self._retained.keys())

    def flush_state(self) -> None:
        """Write the panes changed since the last commit into the store; they stay in memory
        as clean values, down to half of ``_cache_size`` once it is exceeded; and the triggers'
        progress."""
        self._flush_watermark()
        if self._trig_dirty:
            self._flush_triggers()
        dirty = self._dirty
        if not dirty:
            return
        put = self._put
        flush = self._store_flush
        clean = self._clean
        n = 0
        stored, open_panes = self._stored, self._open
        for start, panes in dirty.items():
            if not panes:  # a fold that failed on a new pane's first message
                continue
            if start in self._spilled:  # into the store, out of memory
                self._spill(start)
                continue
            stored.add(start)
            opened = open_panes.get(start)
            if opened is not None:  # (else panes kept for lateness, indexed already)
                opened.update(dict.fromkeys(panes))  # new keys after the others, in order
            for key, value in panes.items():
                put((start, key), value)
                n += 1
                if flush is not None and not n % _FLUSH_CHUNK:
                    flush()
            kept = clean.get(start)
            if kept is None:
                clean[start] = panes
            else:
                kept.update(panes)
        self._cached += n
        dirty.clear()
        if self._cached > self._cache_size:
            self._evict()
        self._check_memory()  # the index grew by the panes opened since the last commit

    def _evict(self) -> None:
        """Drop clean values, oldest start and first-cached first, down to half the cache."""
        clean = self._clean
        excess = self._cached - self._cache_size // 2
        for start in list(clean):
            if excess <= 0:
                break
            panes = clean[start]
            if len(panes) <= excess:
                del clean[start]
                gone = len(panes)
            else:
                for key in list(islice(panes, excess)):
                    del panes[key]
                gone = excess
            excess -= gone
            self._cached -= gone

    def _restore(self) -> None:
        """The indexes from the store; a start with more than ``_cache_size`` panes is spilled
        (the store stays its index)."""
        size, wm, limit, spilled = self.size_ms, self.watermark, self._cache_size, self._spilled
        for pk, value in self._store.all():
            if pk[0] is None:  # the watermark, or a trigger's progress
                self._saved_trigger(pk, value)
                continue
            start, key = pk
            if self._event_time is None or start + size > wm:
                keys = self._index(self._open, self._closing, start)
            elif self._retain and start + size + self.lateness_ms > wm:
                keys = self._index(self._retained, self._expiring, start)
            else:
                self._store.delete(pk)
                continue
            self._stored.add(start)
            if start not in spilled:
                keys[key] = None
                if len(keys) > limit:
                    foreign = [k for k in keys if _foreign(k)]
                    keys.clear()
                    keys.update(dict.fromkeys(foreign))
                    spilled.add(start)
            elif _foreign(key):
                keys[key] = None

    def process(self, message: Any) -> list[Any]:
        raise RuntimeError(f"window {self.op_id!r}: init(ctx) must run before process")

    def _make_process(self) -> Callable[[Any], list[Any]]:
        """``process`` as a closure over its configuration: the hot path pays for no attribute
        lookups (the W3 benchmark folds a million messages through here)."""
        current, dirty, clock = self._current, self._dirty, self._clock
        key_fn, init, fold, event_time = self._key_fn, self._init, self._fold, self._event_time
        size, lateness = self.size_ms, self.lateness_ms
        open_panes, closing, expiring = self._open, self._closing, self._expiring
        early = self._early_spec is not None
        on_trigger_message, late_message, advance = \
            self._on_trigger_message, self._late_message, self._advance

        if event_time is not None and fold is not None and key_fn is not None and not early:
            return self._make_keyed_fold_process()

        def process(message: Any) -> list[Any]:
            out: list[Any] | None = None
            if event_time is not None:
                ms = round(event_time(message) * 1000.0)
                start = ms - ms % size
                if ms > self.watermark:  # the message's own pane is open
                    if self.local_watermark:
                        self.watermark = ms
                        if (closing and closing[0] + size <= ms) or \
                                (expiring and expiring[0] + size + lateness <= ms):
                            out = advance(ms)
                elif start + size <= self.watermark:
                    key = key_fn(message) if key_fn is not None else None
                    return late_message(message, (start, key), ms)
            else:
                ms = clock()
                start = ms - ms % size
            key = key_fn(message) if key_fn is not None else None
            value = current(start, key)
            if value is None:  # a new pane: indexed at the next commit (``_keys``)
                if start not in open_panes:
                    open_panes[start] = {}
                    heappush(closing, start)
                value = init() if init is not None else []
            if fold is not None:
                value = fold(message, value)
                if value is None:
                    self._check_fold(value)
            else:
                value.append(message)
            panes = dirty.get(start)
            if panes is None:
                panes = dirty[start] = {}
            panes[key] = value
            if early:
                pane = on_trigger_message((start, key), EARLY,
                                          ms if event_time is None else clock())
                if pane is not None:
                    if out is None:
                        return [pane]
                    out.append(pane)
            return out if out is not None else []

        return process

    def _make_keyed_fold_process(self) -> Callable[[Any], list[Any]]:
        """The general ``process`` less its branches, for the common keyed event-time fold
        without early triggers; ``process_run`` and ``process_columns`` are set to its loop
        over a run of messages (``_make_fold_run``)."""
        dirty, key_fn, fold, event_time = self._dirty, self._key_fn, self._fold, self._event_time
        size, lateness = self.size_ms, self.lateness_ms
        closing, expiring = self._closing, self._expiring
        late_message, advance, fold_new = self._late_message, self._advance, self._fold_new
        assert key_fn and fold and event_time

        def process(message: Any) -> list[Any]:
            ms = round(event_time(message) * 1000.0)
            start = ms - ms % size
            out = None
            if ms > self.watermark:
                if self.local_watermark:
                    self.watermark = ms
                    if (closing and closing[0] + size <= ms) or \
                            (expiring and expiring[0] + size + lateness <= ms):
                        out = advance(ms)
            elif start + size <= self.watermark:
                return late_message(message, (start, key_fn(message)), ms)
            key = key_fn(message)
            panes = dirty.get(start)
            if panes is not None:
                value = panes.get(key, _MISSING)
                if value is not _MISSING:  # the common case: a pane changed since the commit
                    value = fold(message, value)
                    if value is None:
                        self._check_fold(value)
                    panes[key] = value
                    return out if out is not None else []
            else:
                panes = dirty[start] = {}
            fold_new(message, start, key, panes)
            return out if out is not None else []

        fold_run = self._make_fold_run()

        def process_run(messages: list[Any], i: int, end: int, stop_types: Any) -> int:
            """``process`` over messages[i:end] while no message gives outputs: the watermark
            is the runtime's (it cannot move here), or the window's own and no message moves
            it to a pane's end. Stops at a control record, a late message, or a message that
            would close panes (see ``Operator.process_run``)."""
            return fold_run(messages[i:end], None, None, i, end, stop_types)

        def process_columns(keys: list[Any], xs: list[float], messages: Sequence[Any] | None,
                            i: int, end: int) -> int:
            """``process_run`` over records i..end-1 given as columns, for a window whose key
            and event-time functions read fields of the message: ``keys[j]`` is what
            ``key_fn`` gives for message j, ``xs[j]`` what ``event_time`` gives times 1000.0.
            ``messages[j]`` is what ``fold`` gets (None: a fold that never reads its message
            gets None). It stops where ``process_run`` stops, for ``process`` to take the
            record there."""
            if messages is None:
                messages = self._nones
                if len(messages) < end:
                    messages = self._nones = [None] * end
            return fold_run(range(i, end), keys, (xs, messages), i, end, ())

        self.process_run = process_run
        self.process_columns = process_columns
        return process

    def _make_fold_run(self) -> Callable[[Sequence[Any], Sequence[Any] | None,
                                          tuple[Sequence[float], Sequence[Any]] | None,
                                          int, int, Any], int]:
        """The one loop that folds a run of records into their panes, for ``process_run`` and
        ``process_columns``: ``fold_run(run, keys, cols, i, end, stop_types)`` folds records
        i..end-1 and returns the index of the first one it did not fold (``end``: all of
        them). ``keys`` None: ``run`` is the messages (the loop calls the key and event-time
        functions, and stops at one of ``stop_types``); else ``run`` is the records' indexes
        into the columns: ``keys``, and ``cols``, their times in ms (the event time times
        1000.0) and what the fold gets. The loop stops before a record that is late, or that
        would close panes with the window's own watermark, for ``process`` to take it; a
        failure raises ``FailedAt`` with the record's index."""
        dirty, fold, size, lateness = self._dirty, self._fold, self.size_ms, self.lateness_ms
        closing, expiring, fold_new = self._closing, self._expiring, self._fold_new
        key_fn, event_time = self._key_fn, self._event_time
        assert fold is not None and key_fn is not None and event_time is not None

        def fold_run(run: Sequence[Any], keys: Sequence[Any] | None,
                     cols: tuple[Sequence[float], Sequence[Any]] | None, i: int, end: int,
                     stop_types: Any) -> int:
            local = self.local_watermark
            wm = self.watermark
            limit = run_limit() if local else _INF
            xmax = -_INF  # the largest time seen (ms, a float): the window's own watermark
            it = iter(run)  # the iterator tells the index when the loop stops
            data_type: type = KV  # the messages' type, once one was seen not to be a control's
            xs, folded = cols if cols is not None else ((), ())
            # the last pane's start, its values in ``_dirty``, and the times in ms (floats)
            # inside it whose rounding cannot leave it nor reach ``limit`` (``pane_of``)
            start = 0
            panes: dict[Any, Any] = {}
            lo = hi = 0.0
            try:
                for m in it:
                    if keys is None:  # a message
                        ty = type(m)
                        if ty is not data_type:
                            if ty in stop_types:
                                return stopped_at(it, end)
                            data_type = ty
                        x = event_time(m) * 1000.0
                    else:  # a record's index in the columns
                        x = xs[m]
                    if not lo <= x < hi:
                        entered = pane_of(x, round(xmax) if local and xmax > wm else wm, limit)
                        if entered is None:  # ``process`` takes it
                            return stopped_at(it, end)
                        start, lo, hi, panes = entered
                    if x > xmax:
                        xmax = x
                    if keys is None:
                        key = key_fn(m)
                    else:
                        key = keys[m]
                        m = folded[m]
                    value = panes.get(key, _MISSING)
                    if value is not _MISSING:  # the common case: a pane changed since the commit
                        value = fold(m, value)
                        if value is None:
                            self._check_fold(value)
                        panes[key] = value
                    else:
                        fold_new(m, start, key, panes)
                        if local and start + size < limit:
                            limit = start + size
                return end
            except Exception as exc:
                raise FailedAt(stopped_at(it, end), exc) from exc
            finally:
                if local and xmax > wm:
                    self.watermark = round(xmax)

        def pane_of(x: float, w: float, limit: float
                    ) -> tuple[int, float, float, dict[Any, Any]] | None:
            """For a run, where a time x (ms, a float) leaves the pane the run was in: its pane's
            start, the times (floats) inside it whose rounding cannot leave it nor reach
            ``limit`` (round is monotonic: such a message takes that pane with no rounding,
            and is not late), and its values in ``_dirty``. None where ``process`` takes the
            message: it is late against watermark w, or at or past ``limit``."""
            ms = round(x)
            start = ms - ms % size
            if start + size <= w or ms >= limit:
                return None
            got = dirty.get(start)
            if got is None:
                got = dirty[start] = {}
            return start, start + 0.5, min(start + size, limit) - 1.0, got

        def run_limit() -> float:
            """A time (ms) at or past which a message closes panes, with the window's own
            watermark: the first open pane's end (or a kept pane's end of lateness)."""
            limit = _INF
            if closing:
                limit = closing[0] + size
            if expiring:
                limit = min(limit, expiring[0] + size + lateness)
            return limit

        return fold_run

    def _fold_new(self, message: Any, start: int, key: Any, panes: dict[Any, Any]) -> None:
        """Fold ``message`` into pane (start, key) that ``_dirty`` does not hold (``panes`` is
        its start's dict there): its value from ``_clean`` or the store, or a new pane."""
        value = self._take(start, key)
        if value is None:  # a new pane: indexed at the next commit (``_keys``)
            if start not in self._open:
                self._open[start] = {}
                heappush(self._closing, start)
            value = self._init()  # type: ignore[misc]
        value = self._fold(message, value)  # type: ignore[misc]
        if value is None:
            self._check_fold(value)
        panes[key] = value

    def _late_message(self, message: Any, pk: tuple[int, Any], ms: int) -> list[Any]:
        start = pk[0]
        if not self._retain or start + self.size_ms + self.lateness_ms <= self.watermark:
            return self._drop_late(message, pk[1], start, ms)
        value = self._current(start, pk[1])
        if value is None:
            self._index(self._retained, self._expiring, start)[pk[1]] = None
            value = self._new_value()
        if self._fold is not None:
            value = self._check_fold(self._fold(message, value))
        else:
            value.append(message)
        self._set(start, pk[1], value)
        pane = self._on_trigger_message(pk, LATE, self._clock())
        return [pane] if pane is not None else []

    def _drop_all(self) -> None:
        self._dirty.clear()
        self._clean.clear()
        self._cached = 0
        delete, flush, stored = self._store.delete, self._store_flush, self._stored
        n = 0
        for index in (self._open, self._retained):
            for start, keys in index.items():
                if start not in stored:  # none of its panes reached the store
                    continue
                gone: Iterable[Any] = keys
                if start in self._spilled:  # its keys in the store, then the index's
                    gone = itertools.chain(
                        (pk[1] for pk, _ in self._store.range((start,), (start + 1,))), keys)
                for key in gone:
                    delete((start, key))
                    n += 1
                    if flush is not None and not n % _FLUSH_CHUNK:
                        flush()
            index.clear()
        stored.clear()
        self._spilled.clear()
        self._closing.clear()
        self._expiring.clear()
