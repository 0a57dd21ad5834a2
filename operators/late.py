"""Late messages of event-time windows (docs/semantics.md rule 8): never silent.

A window hands every message that came too late for its pane (past the allowed lateness) to its
``LateTracker``, which

- counts it in the registry: ``<op id>.late-messages.<stream id>`` per input stream (the stream
  the message came into the task from; ``-`` where there is none, e.g. a pane emitted at a
  window tick), and in ``<op id>.late-messages-dropped`` or, with ``late_to``,
  ``<op id>.late-messages-sent``;
- logs one line for the first late message of each window and input stream, and then at most
  one every ``LOG_EVERY_S`` seconds (per container, when the registry can tell): the window, how
  many late messages of that stream it has had so far, the partition, offset and lag behind the
  watermark of the latest, and where to read how to keep them (``READ_MORE``);
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
import time
from collections.abc import Mapping
from typing import Any

from samza_dsl.late import LateMessage

from .base import OperatorContext, inc_counter

__all__ = ["LateTracker", "LATE_PREFIX", "AFTER_END", "NO_STREAM", "LOG_EVERY_S", "READ_MORE",
           "log"]

log = logging.getLogger("samza_dsl.window")

#: ``<op id>`` + this + ``<stream id>`` names a window's per-stream late counter
LATE_PREFIX = ".late-messages."
#: the stream of a late message that came from no input message (a pane of a window tick)
NO_STREAM = "-"
#: counter suffix: late messages for panes the end of an earlier bounded run closed
AFTER_END = ".late-after-end"
#: no bounded run's end has closed the window's panes
NO_END = -(1 << 62)
#: seconds between two lines about the late messages of one window and input stream
LOG_EVERY_S = 10.0
#: where a late-message line sends its reader
READ_MORE = "docs/windows.md#late-messages"
#: where a late-message line of an event-time join sends its reader
JOIN_READ_MORE = "docs/joins-and-tables.md#event-time-joins"


class LateTracker:
    """Counts, reports and (with ``late_to``) wraps the late messages of one window operator in
    one task."""

    def __init__(self, op_id: str, size_ms: int, lateness_ms: int, *, late_to: str | None,
                 session: bool = False, kind: str = "window") -> None:
        self.op_id = op_id
        #: what the operator is, in log lines: "window", or "join" (an event-time join)
        self.kind = kind
        #: where a log line sends its reader
        self.read_more = READ_MORE if kind == "window" else JOIN_READ_MORE
        self.size_ms = size_ms
        self.lateness_ms = lateness_ms
        self.late_to = late_to
        self.session = session
        self.total = 0
        self.by_stream: dict[str, int] = {}
        #: where the end of an earlier bounded run closed every open pane of the window: a
        #: message before it is counted as such too (``<op id>.late-after-end``)
        self.ended_ms = NO_END
        self._ctx: OperatorContext | None = None
        #: input stream -> when its late messages were last logged (a registry without ``every``)
        self._logged: dict[str, float] = {}
        self._what = f"{op_id}.late-messages-sent" if late_to else \
            f"{op_id}.late-messages-dropped"

    def init(self, ctx: OperatorContext) -> None:
        self._ctx = ctx

    def late(self, message: Any, key: Any, start_ms: int | str, event_ms: int,
             watermark_ms: int) -> list[Any]:
        """Count a late message whose pane starts at ``start_ms`` (for a join: the side it
        came to, "left" or "right"); the outputs to pass on."""
        ctx = self._ctx
        source = ctx.source() if ctx is not None and ctx.source is not None else None
        stream, partition, offset = source if source is not None else (None, None, None)
        sid = stream if stream is not None else NO_STREAM
        self.total += 1
        self.by_stream[sid] = self.by_stream.get(sid, 0) + 1
        metrics = ctx.metrics if ctx is not None else None
        inc_counter(metrics, self.op_id + LATE_PREFIX + sid)
        inc_counter(metrics, self._what)
        if event_ms < self.ended_ms:
            inc_counter(metrics, self.op_id + AFTER_END)
        if self._due(metrics, sid):
            self._warn(stream, partition, offset, event_ms, watermark_ms,
                       self._count(metrics, sid))
        if self.late_to is None:
            return []
        return [LateMessage(message, self.op_id, key, str(start_ms), event_ms, watermark_ms,
                            stream, partition, offset)]

    def _due(self, metrics: Any, sid: str) -> bool:
        """True for the first late message of this window from ``sid``, then at most once every
        ``LOG_EVERY_S`` (in the container, when the registry can tell: every task has its own
        operator)."""
        if metrics is not None and not isinstance(metrics, Mapping):  # the registry
            return bool(metrics.every(("late", self.op_id, sid), LOG_EVERY_S))
        now = time.monotonic()
        last = self._logged.get(sid)
        if last is not None and now - last < LOG_EVERY_S:
            return False
        self._logged[sid] = now
        return True

    def _count(self, metrics: Any, sid: str) -> int:
        """The late messages of this window from ``sid`` so far: the registry's (the
        container's) count where it keeps one, else this task's."""
        name = self.op_id + LATE_PREFIX + sid
        if metrics is None:
            return self.by_stream[sid]
        if isinstance(metrics, Mapping):
            return int(metrics.get(name, 0))
        return int(metrics.counter(name).value)

    def _warn(self, stream: str | None, partition: int | None, offset: int | None,
              event_ms: int, watermark_ms: int, count: int) -> None:
        source = (f"from stream {stream!r}" if stream is not None
                  else "from window ticks (no input message)" if self.kind == "window"
                  else "from no known input")
        latest = (f"partition {partition} offset {offset}, " if stream is not None else "")
        fate = f"sent to {self.late_to!r}" if self.late_to else "dropped"
        log.warning("%s %r: %d late message(s) %s %s so far (latest: %s%d ms behind the "
                    "watermark); to keep them see %s", self.kind, self.op_id, count, source,
                    fate, latest,
                    watermark_ms - event_ms, self.read_more)
