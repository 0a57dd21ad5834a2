"""Late messages of event-time windows (docs/semantics.md rule 8): never silent.

A window hands every message that came too late for its pane (past the allowed lateness) to its
``LateTracker``, which

- counts it in the registry: ``<op id>.late-messages.<stream id>`` per input stream (the stream
  the message came into the task from; ``-`` where there is none, e.g. a pane emitted at a
  window tick), and in ``<op id>.late-messages-dropped`` or, with ``late_to``,
  ``<op id>.late-messages-sent``;
- logs a warning for the first late message of each window and input stream, naming the task,
  stream, partition, offset, how far behind the watermark it was, and how to keep such messages;
- with ``late_to``, returns a ``LateMessage`` for the runtime to write to that stream (the
  runtime tells it from the window's panes by its type).

>>> from operators.base import OperatorContext
>>> ctx = OperatorContext("t0", {}, lambda: 0, metrics={},
...                       source=lambda: ("views", 1, 42))
>>> t = LateTracker("app-1-window-w", 10_000, 0, late_to=None)
>>> t.init(ctx)
>>> t.late("m", "k", 0, 9_000, 25_000)
[]
>>> ctx.metrics
{'app-1-window-w.late-messages.views': 1, 'app-1-window-w.late-messages-dropped': 1}
"""

from __future__ import annotations

import logging
from typing import Any

from samza_dsl.late import LateMessage

from .base import OperatorContext, inc_counter

__all__ = ["LateTracker", "LATE_PREFIX", "NO_STREAM", "log"]

log = logging.getLogger("samza_dsl.window")

#: ``<op id>`` + this + ``<stream id>`` names a window's per-stream late counter
LATE_PREFIX = ".late-messages."
#: the stream of a late message that came from no input message (a pane of a window tick)
NO_STREAM = "-"


class LateTracker:
    """Counts, reports and (with ``late_to``) wraps the late messages of one window operator in
    one task."""

    def __init__(self, op_id: str, size_ms: int, lateness_ms: int, *, late_to: str | None,
                 session: bool = False) -> None:
        self.op_id = op_id
        self.size_ms = size_ms
        self.lateness_ms = lateness_ms
        self.late_to = late_to
        self.session = session
        self.total = 0
        self.by_stream: dict[str, int] = {}
        self._ctx: OperatorContext | None = None
        self._warned: set[str] = set()
        self._what = f"{op_id}.late-messages-sent" if late_to else \
            f"{op_id}.late-messages-dropped"

    def init(self, ctx: OperatorContext) -> None:
        self._ctx = ctx

    def late(self, message: Any, key: Any, start_ms: int, event_ms: int,
             watermark_ms: int) -> list[Any]:
        """Count a late message whose pane starts at ``start_ms``; the outputs to pass on."""
        ctx = self._ctx
        source = ctx.source() if ctx is not None and ctx.source is not None else None
        stream, partition, offset = source if source is not None else (None, None, None)
        sid = stream if stream is not None else NO_STREAM
        self.total += 1
        self.by_stream[sid] = self.by_stream.get(sid, 0) + 1
        metrics = ctx.metrics if ctx is not None else None
        inc_counter(metrics, self.op_id + LATE_PREFIX + sid)
        inc_counter(metrics, self._what)
        if self._first(metrics, sid):
            self._warn(ctx, stream, partition, offset, start_ms, event_ms, watermark_ms)
        if self.late_to is None:
            return []
        return [LateMessage(message, self.op_id, key, str(start_ms), event_ms, watermark_ms,
                            stream, partition, offset)]

    def _first(self, metrics: Any, sid: str) -> bool:
        """True for the first late message of this window from ``sid`` (in the container, when
        the registry can tell: every task has its own operator)."""
        once = getattr(metrics, "once", None)
        if callable(once):
            return bool(once(("late", self.op_id, sid)))
        if sid in self._warned:
            return False
        self._warned.add(sid)
        return True

    def _warn(self, ctx: OperatorContext | None, stream: str | None, partition: int | None,
              offset: int | None, start_ms: int, event_ms: int, watermark_ms: int) -> None:
        task = ctx.task_name if ctx is not None else "?"
        where = (f"stream {stream!r} partition {partition} offset {offset}" if stream is not None
                 else "a window tick (no input message)")
        end = event_ms + self.size_ms if self.session else start_ms + self.size_ms
        pane = (f"the session it would start [{start_ms}, {end}) ms" if self.session
                else f"its pane [{start_ms}, {end}) ms")
        fate = f"it was sent to {self.late_to!r}" if self.late_to else "it was dropped"
        log.warning(
            "window %r in task %r: a late message from %s: its event time %d ms is %d ms behind "
            "the watermark %d ms, past the end of %s plus the allowed lateness %d ms. %s; later "
            "late messages of this window from this stream are only counted (metric %r). To "
            "keep such messages: declare how out of order the input may be "
            "(max_out_of_orderness=timedelta(...) beside event_time, on the input or the "
            "window), let closed panes take them "
            "(Window.allowed_lateness(...) with a late_trigger), or send them to a stream "
            "(window(..., late_to=...))",
            self.op_id, task, where, event_ms, watermark_ms - event_ms, watermark_ms, pane,
            self.lateness_ms, fate.capitalize(),
            self.op_id + LATE_PREFIX + (stream if stream is not None else NO_STREAM))
