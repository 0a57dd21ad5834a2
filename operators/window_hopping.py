"""Hopping (sliding) windows (``Windows.hopping``, ``Windows.keyed_hopping``): panes of ``size``
that start every ``hop``, so a message at ``t`` belongs to the ``size / hop`` panes
``[s, s + size)`` with ``s`` a multiple of ``hop`` and ``s <= t < s + size``. Triggers, firing,
watermark, lateness and end-of-stream are those of ``operators.window`` (docs/semantics.md
rules 7 and 8), per pane.

State is shared by the overlapping panes, never copied per pane: it is kept per *hop*
``[h, h + hop)`` and key, under ``(h, key)``, as a list of segments ``[epoch, value]``. The value
is the hop's partial accumulator (``fold`` from ``init()``) when the window has ``combine``, else
the hop's messages as ``[arrival seq, message]``. A pane's value is made on each firing from the
hops it covers: ``combine`` over their accumulators from ``init()``, earlier hops first; or its
messages in arrival order (the list), folded from ``init()`` when the window has ``fold`` but no
``combine``.

Segments carry DISCARDING: a pane's firing leaves it a ``since`` epoch (stored under
``(None, "since", start, key)``) and starts a new epoch, so each hop starts a new segment with
its next message; a pane's value takes the segments of its hops from its ``since`` on, and
segments no pane covering the hop still needs are dropped. Under ACCUMULATING each hop has one
segment.

A hop's state lives as long as the last pane covering it, the pane that starts at ``h``: it goes
when that pane closes (or, kept for lateness, expires). Every pane covering a hop with state
exists (open, or closed and kept for lateness), since each message of the hop belongs to each of
them. A restore rebuilds the panes from the hops and the watermark (event time) or, on
processing time, the latest time panes were closed at (``(None, "closed")``).

Late data (event time). A message is given to each of its panes that is still open (early
trigger), or closed but kept for lateness (late trigger); only when none of its panes takes it
is it late (counted, ``late_to``), reported against its latest pane ``[h, h + size)``.

>>> from datetime import timedelta
>>> from samza_dsl.spec import WindowSpec
>>> from samza_dsl.windows import Windows
>>> from operators.base import OperatorContext
>>> from operators.state import InMemoryState
>>> w = Windows.keyed_hopping(lambda m: m[0], timedelta(seconds=10), timedelta(seconds=5),
...                           init=int, fold=lambda m, n: n + 1, combine=lambda a, b: a + b,
...                           event_time=lambda m: m[1])
>>> op = HoppingWindowOperator(WindowSpec("w", "w", ("stream:in",), "", window=w))
>>> op.init(OperatorContext("t0", {}, lambda: 0, {"w": InMemoryState()}))
>>> op.process(("a", 1.0))
[]
>>> [(p.key.pane_id, p.message) for p in op.process(("a", 6.0))]  # the watermark passes 5 s
[('-5000', 1)]
>>> [(p.key.pane_id, p.message) for p in op.process(("a", 11.0))]
[('0', 2)]
>>> [(p.key.pane_id, p.message) for p in op.on_end_of_stream()]
[('5000', 2), ('10000', 1)]
"""

from __future__ import annotations

from heapq import merge
from typing import Any

from samza_dsl.spec import WindowSpec

from .base import resolve_fn
from .window import EARLY, LATE, NO_WATERMARK, WATERMARK_KEY, AlignedWindowOperator

__all__ = ["HoppingWindowOperator", "CLOSED_KEY", "SINCE"]

#: processing time: the latest time panes were closed at (panes ending by then have fired)
CLOSED_KEY = (None, "closed")
#: a pane's ``since`` epoch is stored under ``(None, SINCE, start, key)``
SINCE = "since"


class HoppingWindowOperator(AlignedWindowOperator):
    """Global and keyed hopping windows; a pane's handle is ``(start, key)``."""

    def __init__(self, spec: WindowSpec) -> None:
        super().__init__(spec)
        w = spec.window
        self.hop_ms = w.hop_ms
        self.user_fns = (*self.user_fns, w.combine)
        self._combine = resolve_fn(w.combine) if w.combine is not None else None
        #: offsets of a message's pane starts from its hop's start: 0, -hop, ..., -(size - hop)
        self._back = [-i * w.hop_ms for i in range(w.size_ms // w.hop_ms)]
        self._since: dict[tuple[int, Any], int] = {}  # pane -> the first epoch it still takes
        self._epoch = 0
        self._arrival = 0  # the next message's arrival seq (hops that keep messages)
        self._closed = NO_WATERMARK  # processing time: panes that end by then have fired

    # -- restore -----------------------------------------------------------------------------------

    def _restore(self) -> None:
        size, wm = self.size_ms, self.watermark
        processing = self._event_time is None
        hops: list[tuple[int, Any]] = []
        for pk, value in list(self._store.all()):
            if pk[0] is None:
                if pk == CLOSED_KEY:
                    self._closed = value
                elif len(pk) == 4 and pk[1] == SINCE:
                    self._since[(pk[2], pk[3])] = value
                    self._epoch = max(self._epoch, value)
                else:
                    self._saved_trigger(pk, value)
                continue
            hops.append(pk)
            for epoch, part in value:
                self._epoch = max(self._epoch, epoch)
                if self._combine is None:
                    self._arrival = max([self._arrival] + [seq + 1 for seq, _ in part])
        horizon = self._closed if processing else wm
        for h, key in hops:
            for back in self._back:
                start = h + back
                if start + size > horizon:
                    self._index(self._open, self._closing, start)[key] = None
                elif self._retain and start + size + self.lateness_ms > wm:
                    self._index(self._retained, self._expiring, start)[key] = None
                elif back == 0:  # its last pane is gone: so is the hop
                    self._store.delete((h, key))
        for pane in list(self._since):
            start, key = pane
            if key not in self._open.get(start, ()) and key not in self._retained.get(start, ()):
                self._forget(pane)

    # -- messages ----------------------------------------------------------------------------------

    def process(self, message: Any) -> list[Any]:
        event_time = self._event_time
        out: list[Any] = []
        size, hop = self.size_ms, self.hop_ms
        if event_time is not None:
            ms = round(event_time(message) * 1000.0)
            if ms > self.watermark and self.local_watermark:
                self.watermark = ms
                if (self._closing and self._closing[0] + size <= ms) or \
                        (self._expiring and self._expiring[0] + size + self.lateness_ms <= ms):
                    out = self._advance(ms)
        else:
            ms = self._clock()
        h = ms - ms % hop
        key = self._key_fn(message) if self._key_fn is not None else None
        if self._early_spec is None and h + hop > (self.watermark if event_time is not None
                                                   else self._closed):
            # every pane of the hop is open: if the hop has state, they all exist already
            segments = self._get((h, key))
            if segments is not None:
                self._add((h, key), message, segments)
                return out
        wm = self.watermark if event_time is not None else NO_WATERMARK
        panes: list[tuple[tuple[int, Any], Any]] = []  # (pane, firing), latest start first
        for back in self._back:
            start = h + back
            end = start + size
            if end > wm:
                self._index(self._open, self._closing, start)[key] = None
                panes.append(((start, key), EARLY))
            elif self._retain and end + self.lateness_ms > wm:
                self._index(self._retained, self._expiring, start)[key] = None
                panes.append(((start, key), LATE))
        if not panes:
            return out + self._drop_late(message, key, h, ms)
        self._add((h, key), message)
        now = self._clock() if event_time is not None else ms
        early = self._early_spec is not None
        for pane, firing in reversed(panes):  # in order of pane start
            if firing is LATE or early:
                fired = self._on_trigger_message(pane, firing, now)
                if fired is not None:
                    out.append(fired)
        return out

    def _add(self, hk: tuple[int, Any], message: Any, segments: Any = None) -> None:
        """Fold ``message`` into its hop's current segment (``segments``: the hop's state, when
        the caller has it)."""
        if segments is None:
            segments = self._get(hk) or []
        epoch = self._epoch
        if segments and segments[-1][0] == epoch:
            seg = segments[-1]
        else:
            seg = [epoch, self._init() if self._combine is not None and self._init is not None
                   else []]
            segments.append(seg)
        if self._combine is not None and self._fold is not None:
            seg[1] = self._check_fold(self._fold(message, seg[1]))
        else:
            seg[1].append([self._arrival, message])
            self._arrival += 1
        self._put(hk, segments)

    # -- pane values -------------------------------------------------------------------------------

    def _hops(self, pane: tuple[int, Any]) -> list[tuple[int, Any]]:
        start, key = pane
        return [(start - back, key) for back in reversed(self._back)]

    def _value(self, handle: Any) -> Any:
        since = self._since.get(handle, 0)
        parts = [seg[1] for hk in self._hops(handle) for seg in (self._get(hk) or ())
                 if seg[0] >= since]
        if not parts:
            return None
        combine = self._combine
        if combine is not None and self._init is not None:
            acc = self._init()
            for part in parts:
                acc = combine(acc, part)
                if acc is None:
                    raise ValueError(f"window {self.op_id!r}: combine returned None; return "
                                     f"the merged accumulator")
            return acc
        messages = [m for _, m in merge(*parts, key=lambda e: e[0])]
        if not messages:
            return None
        fold, init = self._fold, self._init
        if fold is None or init is None:
            return messages
        acc = init()
        for m in messages:
            acc = self._check_fold(fold(m, acc))
        return acc

    def _clear_value(self, handle: Any) -> None:
        """A DISCARDING firing: the pane takes only what comes from now on."""
        self._epoch += 1
        self._since[handle] = self._epoch
        self._store.put((None, SINCE, handle[0], handle[1]), self._epoch)
        for hk in self._hops(handle):
            self._trim(hk)

    def _trim(self, hk: tuple[int, Any]) -> None:
        """Drop the segments of a hop that no pane covering it takes any more."""
        segments = self._get(hk)
        if not segments:
            return
        h, key = hk
        live = [self._since.get((h + back, key), 0) for back in self._back
                if key in self._open.get(h + back, ()) or key in self._retained.get(h + back, ())]
        floor = min(live) if live else self._epoch + 1
        kept = [seg for seg in segments if seg[0] >= floor]
        if len(kept) != len(segments):
            if kept:
                self._put(hk, kept)
            else:
                self._store.delete(hk)

    def _drop_value(self, handle: Any) -> None:
        """A pane's state goes: its ``since``, and the hop it is the last pane of."""
        self._forget(handle)
        self._store.delete(handle)

    def _forget(self, pane: tuple[int, Any]) -> None:
        if self._since.pop(pane, None) is not None:
            self._store.delete((None, SINCE, pane[0], pane[1]))

    # -- closing -----------------------------------------------------------------------------------

    def _close_next(self, threshold: int, out: list[Any]) -> None:
        if self._event_time is None and threshold > self._closed:
            self._closed = threshold
            self._put(CLOSED_KEY, threshold)  # before closing: a restore sees them closed
        super()._close_next(threshold, out)

    def _drop_all(self) -> None:
        for pk, _ in list(self._store.all()):
            if pk != WATERMARK_KEY:
                self._store.delete(pk)
        for index in (self._open, self._retained):
            index.clear()
        self._closing.clear()
        self._expiring.clear()
        self._since.clear()
