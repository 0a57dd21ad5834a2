"""Keyed session windows (``Windows.keyed_session``): docs/semantics.md rule 7, and rule 8 for event
time. The shared machinery (triggers, firing, watermark, end-of-stream) is in ``operators.window``.

A session pane starts at its earliest message and closes ``gap`` after its last one. Its state is
stored under ``(start_ms, key)`` as ``(last_ms, value)``; a DISCARDING firing keeps the session
(start and last time, so the pane id stays) and clears only its value.

Processing time (as Samza): a message joins its key's open session whatever the time since the
last message, since a session only ends when a window tick (``on_timer``) finds ``now >= last + gap``.

Event time: a message joins its key's open session when the two overlap (``t < last + gap`` and
``start < t + gap``); a message before the session's start moves the start (and the pane id)
back. A message a gap or more after its key's open session closes that session and starts a new
one (one session per key is open at a time). When the runtime gives the watermark
(``ctx.external_watermarks``) and says messages may come out of event-time order
(``hold_ahead``: several producers or an async step feed the window, or a bound is declared on
the input or the window), a message ahead of it is held (in the store, so a restore keeps it)
and goes into its session when the watermark passes it, in event-time order with the other held
messages: a key whose messages come from several producers, complete out of order, or come out
of order within the bound, gets the sessions of its messages in event-time order, whatever their
speed, so a message that bridges two sessions merges them and one within the bound is not late. Early triggers count a held
message when it is released. Otherwise, with ``t + gap`` past the watermark, it is late: it joins an overlapping closed
session kept for lateness (whose pane id stays), or starts a closed session of its own when
``t + gap + allowed_lateness`` is still ahead of the watermark; else it is dropped and counted.
Two existing sessions are never merged: a fold has no way to combine two accumulators.

>>> from datetime import timedelta
>>> from samza_dsl.spec import WindowSpec
>>> from samza_dsl.windows import Windows
>>> from operators.base import OperatorContext
>>> from operators.state import InMemoryState
>>> w = Windows.keyed_session(lambda m: m[0], timedelta(seconds=5), event_time=lambda m: m[1])
>>> op = SessionWindowOperator(WindowSpec("s", "s", ("stream:in",), "", window=w))
>>> op.init(OperatorContext("t0", {}, lambda: 0, {"s": InMemoryState()}))
>>> op.process(("u", 1.0)), op.process(("u", 4.0))
([], [])
>>> [(p.key.pane_id, p.message) for p in op.on_watermark(9000)]
[('1000', [('u', 1.0), ('u', 4.0)])]
"""

from __future__ import annotations

from collections.abc import Iterator
from heapq import heappop, heappush
from typing import Any

from samza_dsl.spec import WindowSpec

from .base import held_failure
from .window import EARLY, LATE, WATERMARK_KEY, WindowOperator

#: the store key of a held message is ``(None, HELD, seq)``: None sorts before every session
HELD = "held"

__all__ = ["SessionWindowOperator"]


class _Session:
    """A session pane: the handle triggers are keyed by (hashed by identity, so it survives a
    move of its start)."""

    __slots__ = ("start", "last", "key", "closed")

    def __init__(self, start: int, last: int, key: Any) -> None:
        self.start = start
        self.last = last
        self.key = key
        self.closed = False

    def __repr__(self) -> str:
        return f"_Session({self.start}, {self.last}, {self.key!r})"


class SessionWindowOperator(WindowOperator):
    """``Windows.keyed_session``: one open session per key."""

    def __init__(self, spec: WindowSpec) -> None:
        super().__init__(spec)
        self._sessions: dict[Any, _Session] = {}  # key -> open session
        self._closing: list[tuple[int, int, _Session]] = []  # (end, seq, session); end may be stale
        self._retained: dict[Any, list[_Session]] = {}  # key -> closed sessions kept for lateness
        self._expiring: list[tuple[int, int, _Session]] = []
        #: messages ahead of the watermark, held while it is the runtime's (ms, seq, message):
        #: they go into sessions in event-time order as the watermark passes them, so a key fed
        #: by several producers gets the sessions of its messages in event-time order
        self._held: list[tuple[int, int, Any]] = []
        self._held_seq = 0
        #: seq -> (stream, partition, offset) of a message held in this run (``ctx.source``):
        #: a function failing on it as it is released names it, not the message in hand
        self._held_from: dict[int, Any] = {}
        #: set by the runtime where messages may come out of event-time order (several
        #: producers, async steps, a declared bound); otherwise they go in as they come
        self.hold_ahead = True

    # -- pane state --------------------------------------------------------------------------------

    def _pane_key(self, handle: Any) -> tuple[int, Any]:
        return handle.start, handle.key

    def _pane_end(self, handle: Any) -> int:
        # a gap past the session's end: a message is late once its own session would have
        # closed (t + gap <= watermark), so every message that could have joined this session
        # (t < last + gap) is late once the end of a bounded run has closed it
        return int(handle.last) + 2 * self.size_ms

    def _value(self, handle: Any) -> Any:
        entry = self._get((handle.start, handle.key))
        return None if entry is None else entry[1]

    def _clear_value(self, handle: Any) -> None:
        self._put((handle.start, handle.key), (handle.last, None))

    def _drop_value(self, handle: Any) -> None:
        self._store.delete((handle.start, handle.key))

    def _add(self, s: _Session, message: Any, value: Any) -> None:
        if value is None:
            value = self._new_value()
        if self._fold is not None:
            value = self._check_fold(self._fold(message, value))
        else:
            value.append(message)
        self._put((s.start, s.key), (s.last, value))

    def _restore(self) -> None:
        gap, wm = self.size_ms, self.watermark
        for pk, entry in list(self._store.all()):
            if pk == WATERMARK_KEY:
                continue
            if pk[0] is None and self._saved_trigger(pk, entry):
                continue
            if pk[0] is None:  # a held message
                heappush(self._held, (entry[0], pk[2], entry[1]))
                self._held_seq = max(self._held_seq, pk[2] + 1)
                continue
            start, key = pk
            s = _Session(start, entry[0], key)
            if self._event_time is None or s.last + gap > wm:
                self._sessions[key] = s
                heappush(self._closing, (s.last + gap, next(self._seq), s))
            elif self._retain and s.last + gap + self.lateness_ms > wm:
                self._keep(s)
            else:
                self._store.delete(pk)

    # -- messages ----------------------------------------------------------------------------------

    def process(self, message: Any) -> list[Any]:
        event_time = self._event_time
        if event_time is not None:
            if not self.local_watermark and self.hold_ahead:
                ms = round(event_time(message) * 1000.0)
                if ms > self.watermark:  # ahead of the watermark: held until it passes
                    seq = self._held_seq
                    self._held_seq += 1
                    heappush(self._held, (ms, seq, message))
                    self._put((None, HELD, seq), (ms, message))
                    ctx = self.ctx
                    if ctx is not None and ctx.source is not None:
                        self._held_from[seq] = ctx.source()
                    return []
            elif self._held:  # held before the runtime handed the watermark back to the window
                ms = round(event_time(message) * 1000.0)
                out = self._release(ms)
                return out + self._process(message)
        return self._process(message)

    def _release(self, limit: int) -> list[Any]:
        """Held messages up to ``limit`` into their sessions, in event-time order."""
        out: list[Any] = []
        held = self._held
        while held and held[0][0] <= limit:
            _, seq, message = heappop(held)
            self._store.delete((None, HELD, seq))
            source = self._held_from.pop(seq, None)
            try:
                out.extend(self._process(message))
            except Exception as exc:  # the held message's, not the one in hand
                held_failure(exc, source)
                raise
        return out

    def on_watermark(self, watermark_ms: int) -> list[Any]:
        if self._event_time is None or watermark_ms <= self.watermark:
            return []
        out = self._release(watermark_ms)
        return out + super().on_watermark(watermark_ms)

    def end_of_stream_chunks(self, size: int) -> Iterator[list[Any]]:
        out = self._release(1 << 62)  # held messages into their sessions first
        if out:
            yield out
        yield from super().end_of_stream_chunks(size)

    def _process(self, message: Any) -> list[Any]:
        out: list[Any] | None = None
        gap = self.size_ms
        event_time = self._event_time
        if event_time is not None:
            ms = round(event_time(message) * 1000.0)
            if ms > self.watermark and self.local_watermark:
                self.watermark = ms
                closing, expiring = self._closing, self._expiring
                if (closing and closing[0][0] <= ms) or (expiring and expiring[0][0] <= ms):
                    out = self._advance(ms)
            now = self._clock() if self._early_spec is not None else ms
        else:
            ms = now = self._clock()
        key = self._key_fn(message)  # type: ignore[misc]
        s = self._sessions.get(key)
        if s is not None and event_time is not None and ms >= s.last + gap:
            # after its key's open session, which the watermark has not closed yet: one session
            # per key is open at a time, so that one closes now (an in-order key gives the same
            # panes as if the watermark had closed it first)
            closed: list[Any] = []
            self._close_session(s, closed)
            if closed:
                out = out + closed if out else closed
            s = None
        if s is None:
            if event_time is not None and ms + gap <= self.watermark:
                late = self._late_message(message, key, ms)
                return out + late if out else late
            s = self._sessions[key] = _Session(ms, ms, key)
            heappush(self._closing, (ms + gap, next(self._seq), s))
            self._add(s, message, None)
        elif event_time is None or (ms < s.last + gap and s.start < ms + gap):
            entry = self._get((s.start, key))
            if ms < s.start and self._get((ms, key)) is None:
                self._store.delete((s.start, key))
                s.start = ms
            if ms > s.last:
                s.last = ms
            self._add(s, message, None if entry is None else entry[1])
        else:  # before its key's open session and more than a gap before the watermark
            late = self._late_message(message, key, ms)
            return out + late if out else late
        if self._early_spec is not None:
            pane = self._on_trigger_message(s, EARLY, now)
            if pane is not None:
                if out is None:
                    return [pane]
                out.append(pane)
        return out if out is not None else []

    def _late_message(self, message: Any, key: Any, ms: int) -> list[Any]:
        if not self._retain:
            return self._drop_late(message, key, ms, ms)
        gap = self.size_ms
        for r in self._retained.get(key, ()):
            if ms < r.last + gap and r.start < ms + gap:
                value = self._value(r)
                if ms > r.last:
                    r.last = ms
                break
        else:
            if ms + gap + self.lateness_ms <= self.watermark or self._get((ms, key)) is not None:
                return self._drop_late(message, key, ms, ms)
            r = _Session(ms, ms, key)
            self._keep(r)
            value = None
        self._add(r, message, value)
        pane = self._on_trigger_message(r, LATE, self._clock())
        return [pane] if pane is not None else []

    # -- closing -----------------------------------------------------------------------------------

    def _keep(self, s: _Session) -> None:
        s.closed = True
        self._retained.setdefault(s.key, []).append(s)
        heappush(self._expiring, (s.last + self.size_ms + self.lateness_ms, next(self._seq), s))

    def _next_close(self) -> int | None:
        closing = self._closing
        return closing[0][0] if closing else None

    def _close_next(self, threshold: int, out: list[Any]) -> None:
        _, _, s = heappop(self._closing)
        if s.closed:
            return
        end = s.last + self.size_ms
        if end > threshold:  # the session grew since this entry was queued
            heappush(self._closing, (end, next(self._seq), s))
            return
        self._close_session(s, out)

    def _close_session(self, s: _Session, out: list[Any]) -> None:
        s.closed = True
        if self._sessions.get(s.key) is s:
            del self._sessions[s.key]
        self._close_pane(s, out)
        if self._retain:
            self._keep(s)

    def _collect(self, watermark: int) -> None:
        expiring = self._expiring
        while expiring and expiring[0][0] <= watermark:
            _, _, r = heappop(expiring)
            horizon = r.last + self.size_ms + self.lateness_ms
            if horizon > watermark:
                heappush(expiring, (horizon, next(self._seq), r))
                continue
            kept = self._retained[r.key]
            kept.remove(r)
            if not kept:
                del self._retained[r.key]
            self._store.delete((r.start, r.key))
            self._late.pop(r, None)
            self._trigger_gone(LATE, r)

    def _open_handles(self) -> list[Any]:
        return list(self._sessions.values())

    def _trigger_handle(self, start: int, key: Any) -> Any:
        s = self._sessions.get(key)
        if s is not None and s.start == start:
            return s
        return next((r for r in self._retained.get(key, ()) if r.start == start), None)

    def _drop_all(self) -> None:
        delete = self._store.delete
        for s in self._sessions.values():
            delete((s.start, s.key))
        for kept in self._retained.values():
            for r in kept:
                delete((r.start, r.key))
        self._sessions.clear()
        self._retained.clear()
        self._closing.clear()
        self._expiring.clear()
