"""Late-message counts of a run, by window and input stream (docs/semantics.md rule 8), as
``TestResult``, ``ReprocessResult`` and ``LocalRunner`` give them:

- ``result.late_counts``: ``{window op id: {input stream id: count}}``, only windows and streams
  with late messages (``-`` is the stream of a message that came from a window tick);
- ``result.late(window=None, *, stream=None)``: the count for one window (its op id, its name,
  or the stream ``.window(...)`` returned) and/or one input stream (its id or descriptor); the
  whole run's without arguments.

A late message is one that came after its pane closed, past the window's allowed lateness: it is
counted whether it was dropped or written to the window's ``late_to`` stream.
"""

from __future__ import annotations

from typing import Any

from runtime.host.metrics import late_counts, late_summary
from samza_dsl.config import did_you_mean
from samza_dsl.errors import SamzaError
from samza_dsl.spec import JoinSpec, WindowSpec, late_target
from samza_dsl.stream import MessageStream, OutputStream
from samza_dsl.systems import StreamDescriptor

__all__ = ["LateCounts", "window_ids", "late_to_streams"]


def window_ids(plan: Any) -> list[str]:
    """The op ids of the plan's windows and event-time joins (what counts late messages), in
    registration order."""
    return [op.op_id for op in plan.app.operators
            if op.opcode == "window" or (isinstance(op, JoinSpec) and op.event_time)]


def late_to_streams(plan: Any) -> dict[str, str | None]:
    """Window (event-time join) op id -> its ``late_to`` stream id (None: late messages are
    dropped)."""
    return {op.op_id: late_target(op) for op in plan.app.operators
            if isinstance(op, WindowSpec) or (isinstance(op, JoinSpec) and op.event_time)}


class LateCounts:
    """Mixin: ``late_counts`` and ``late()`` from ``self.plan`` and ``self._late_snapshot()``."""

    #: the plan, once the run has one (None: a runner that has not started)
    plan: Any = None

    def _late_snapshot(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def late_counts(self) -> dict[str, dict[str, int]]:
        """``{window op id: {input stream id: late messages}}`` (only those with some)."""
        if self.plan is None:  # a runner that has not started
            return {}
        return late_counts(self._late_snapshot(), window_ids(self.plan))

    def late(self, window: Any = None, *, stream: Any = None) -> int:
        """Late messages of ``window`` (op id, name, or the stream ``.window()`` returned; all
        windows when None) from input ``stream`` (id or descriptor; all when None)."""
        counts = self.late_counts
        if self.plan is None:
            return 0
        windows = list(counts) if window is None else [self._window_id(window)]
        sid = None if stream is None else (
            stream if isinstance(stream, str) else stream.stream_id
            if isinstance(stream, StreamDescriptor | OutputStream) else None)
        if stream is not None and (sid is None or (sid not in self.plan.streams and sid != "-")):
            raise SamzaError(f"late(stream={stream!r}): not a stream of "
                             f"{self.plan.job_name!r}"
                             f"{did_you_mean(str(sid), self.plan.streams) if sid else ''}; streams: "
                             f"{', '.join(sorted(self.plan.streams))}")
        return sum(n for w in windows for s, n in counts.get(w, {}).items()
                   if sid is None or s == sid)

    def late_summary(self) -> list[str]:
        """One line per window with late messages, for a run summary."""
        return late_summary(self.late_counts, late_to_streams(self.plan))

    def _window_id(self, window: Any) -> str:
        ids = window_ids(self.plan)
        wanted = window if isinstance(window, str) else \
            window.op_id if isinstance(window, MessageStream) else None
        for op in self.plan.app.operators:
            if op.opcode == "window" and wanted in (op.op_id, op.name):
                return str(op.op_id)
        raise SamzaError(f"late({window!r}): no window of {self.plan.job_name!r} has that id or "
                         f"name; windows: {', '.join(ids) or 'none'}")
