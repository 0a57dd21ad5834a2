"""Messages whose event time is far ahead of the wall clock: ``max_event_time_ahead=`` on an
input (docs/windows.md, "Event times far ahead").

One message dated in the year 9999 would move its partition's progress, and so the watermark of
every window it feeds, there: every later message would be late. An input that declares
``event_time`` and ``max_event_time_ahead`` has each message checked as it is read, before any
operator sees it: one whose event time is more than the bound ahead of the wall clock at that
moment follows the stream's ``streams.<id>.samza.serde.error`` policy, as a record that fails
to deserialize:

- ``fail`` (the default): the job stops before it, with an ``EventTimeAheadError`` naming the
  stream, partition, offset, the event time and the wall clock, and what to do;
- ``skip``: it is passed over (a ``Skipped`` marker takes its place, so it counts as
  processed and the checkpoint moves past it), logged once per stream (the first one, in full)
  and counted in ``event-time-ahead-skipped`` and ``<stream>.event-time-ahead-skipped``;
- ``dead-letter``: as ``skip``, and it is also written to the job's dead-letter stream with the
  reason.

A message whose ``event_time`` fails (raises, gives None or no number) is not judged here: the
task calls ``event_time`` again and reports it as it always does. The wall clock is read once
per batch: every message of a batch is judged against the moment the batch was read.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from runtime.engine.codec import Skipped
from runtime.engine.records import EndOfStream, Watermark
from samza_dsl.errors import EventTimeAheadError
from samza_dsl.systems import InputDescriptor

__all__ = ["AheadRule", "ahead_rule", "AHEAD_SKIPPED"]

log = logging.getLogger("samza_dsl.event_time")

#: the counter of messages passed over (skip or dead-letter), job-wide; per stream it is
#: ``<stream>.event-time-ahead-skipped``
AHEAD_SKIPPED = "event-time-ahead-skipped"

_NOT_MESSAGES = (EndOfStream, Watermark, Skipped)


def _when(ms: float) -> str:
    """A time in ms since the epoch, as an ISO date where it is one."""
    try:
        return datetime.fromtimestamp(ms / 1000.0, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, ValueError, OSError):
        return f"{ms:.0f} ms since the epoch" if math.isfinite(ms) else f"{ms} ms"


def _span(ms: float) -> str:
    if not math.isfinite(ms):
        return str(ms)
    for unit, size in (("days", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms >= size:
            n = ms / size
            return f"{n:,.0f} {unit}" if n == int(n) or n >= 10 else f"{n:.1f} {unit}"
    return f"{ms:.0f} ms"


class AheadRule:
    """The check of one input stream: its ``event_time``, its bound in ms, its serde error
    policy, and where skipped messages are counted (``metrics``, with ``inc``).

    Example:
        >>> rule = AheadRule("views", lambda m: m["ts"], 3_600_000, "skip",
        ...                  clock=lambda: 1_700_000_000_000)
        >>> rule.scan([{"ts": 1_700_000_000}, {"ts": 253402300799}, EndOfStream(None)],
        ...           rule.limit())
        [1]
    """

    def __init__(self, stream_id: str, event_time: Callable[[Any], Any], ahead_ms: int,
                 policy: str, *, metrics: Any = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.stream_id = stream_id
        self.event_time = event_time
        self.ahead_ms = ahead_ms
        self.policy = policy
        self.metrics = metrics
        self.clock = clock if clock is not None else (lambda: time.time() * 1000.0)
        self._logged = False
        #: the wall clock (ms) of the last ``limit``
        self.now_ms = 0.0

    def limit(self) -> float:
        """The latest event time (seconds) a message read now may have."""
        self.now_ms = now = float(self.clock())
        return (now + self.ahead_ms) / 1000.0

    def scan(self, messages: Sequence[Any], limit: float) -> list[int]:
        """The indexes of the messages whose event time is past ``limit`` (seconds)."""
        fn = self.event_time
        out: list[int] = []
        for i, m in enumerate(messages):
            if type(m) in _NOT_MESSAGES:
                continue
            try:
                if fn(m) > limit:
                    out.append(i)
            except Exception:  # noqa: S112 - the task calls event_time again and names it
                continue
        return out

    def seconds(self, message: Any) -> float:
        return float(self.event_time(message))

    def reason(self, t: float) -> str:
        """Why a message at event time ``t`` (seconds) is passed over."""
        ms, now = t * 1000.0, self.now_ms
        return (f"event time {_when(ms)} is {_span(ms - now)} ahead of the wall clock as it was "
                f"read ({_when(now)}), more than the max_event_time_ahead of input "
                f"{self.stream_id!r} ({_span(self.ahead_ms)})")

    def failure(self, partition: int, offset: int, t: float, where: str = "") -> \
            EventTimeAheadError:
        """The error of the ``fail`` policy."""
        sid = self.stream_id
        skip = (f"samza-dsl run APP --skip {sid}:{partition}:{offset} passes over this one"
                if not where else "")
        return EventTimeAheadError(
            f"{self.reason(t)}{where}: it would move the watermark there and make every later "
            f"message late. The job stopped before this message; its checkpoint stays before "
            f"it. Fix the producer's clock or the record, raise the input's "
            f"max_event_time_ahead, or set streams.{sid}.samza.serde.error to skip or "
            f"dead-letter" + (f" ({skip})" if skip else ""),
            stream=sid, partition=partition, offset=offset, event_time=t)

    def passed_over(self, partition: int, offset: int, t: float) -> str:
        """Count a message passed over (``skip``, ``dead-letter``) and log the first of the
        stream; returns the reason."""
        reason = self.reason(t)
        if self.metrics is not None:
            self.metrics.inc(AHEAD_SKIPPED)
            self.metrics.inc(f"{self.stream_id}.{AHEAD_SKIPPED}")
        if not self._logged:
            self._logged = True
            where = ("sent to the dead-letter stream" if self.policy == "dead-letter"
                     else "passed over")
            log.warning("%s partition %d offset %d: %s; %s (streams.%s.samza.serde.error=%s). "
                        "Later ones of %s are not logged: they are counted in %s.%s",
                        self.stream_id, partition, offset, reason, where, self.stream_id,
                        self.policy, self.stream_id, self.stream_id, AHEAD_SKIPPED)
        return reason


def ahead_rule(stream_id: str, descriptor: Any, policy: str, *, metrics: Any = None,
               clock: Callable[[], float] | None = None) -> AheadRule | None:
    """The rule of an input whose descriptor declares ``max_event_time_ahead``, else None."""
    if not isinstance(descriptor, InputDescriptor):
        return None
    ms, fn = descriptor.max_event_time_ahead_ms, descriptor.event_time
    if not ms or fn is None:
        return None
    return AheadRule(stream_id, fn, ms, policy, metrics=metrics, clock=clock)
