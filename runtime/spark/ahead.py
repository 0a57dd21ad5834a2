"""``max_event_time_ahead=`` of an input on Spark: a row whose event time is more than the
bound ahead of the wall clock as its source partition is read follows the stream's
``streams.<id>.samza.serde.error`` policy, as in the streaming runtime
(``runtime.engine.event_time_ahead``; docs/windows.md, "Event times far ahead"):

- ``fail``: the pass stops, naming the stream, the file (or partition) and the row, its event
  time and what to do;
- ``skip``: the row is left out of the run, counted in the run's ``metrics``
  (``event-time-ahead-skipped`` and ``<stream>.event-time-ahead-skipped``) and logged once per
  Spark task;
- ``dead-letter``: as ``skip``, and ``ReprocessResult.dead_letters`` holds it, as
  ``samza-dsl dump`` shows a dead letter (``{"source", "error", "key", "value"}``), ``source``
  being ``stream/source partition/row``.

The check is made where a row's event time is computed anyway (``sources._rows_to_records``),
so it costs one comparison per row; an input with the bound is read row by row (not through the
column paths, which compute no per-row event time in Python).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from runtime.engine.event_time_ahead import AHEAD_SKIPPED, AheadRule

__all__ = ["AheadCheck", "ahead_check", "dead_letter_accumulator"]

if TYPE_CHECKING:
    from samza_dsl.systems import StreamDescriptor

log = logging.getLogger("samza_dsl.event_time")


class AheadCheck:
    """The check of one input, made on the driver with its source; ``arm`` gives it the run's
    policy and accumulators before the run, and it travels to the executors with the source."""

    def __init__(self, stream_id: str, event_time: Any, ahead_ms: int) -> None:
        self.stream_id = stream_id
        self.event_time = event_time
        self.ahead_ms = ahead_ms
        self.policy = "fail"
        self.counts: Any = None
        self.dead: Any = None
        self._logged = False

    def arm(self, policy: str, counts: Any, dead: Any) -> None:
        """The run's serde error policy of the stream, its ``{name: count}`` accumulator and
        its dead-letter accumulator."""
        self.policy, self.counts, self.dead = policy, counts, dead

    def limit_ms(self) -> tuple[float, float]:
        """(now, the latest event time in ms a row read now may have)."""
        now = time.time() * 1000.0
        return now, now + self.ahead_ms

    def take(self, where: str, partition: int, row: int, message: Any, event_ms: int,
             now: float) -> None:
        """A row past the bound: raises under ``fail``, else counts it (and keeps it as a dead
        letter) and the caller leaves it out."""
        from runtime.spark.executor import PassFailure

        rule = AheadRule(self.stream_id, self.event_time, self.ahead_ms, self.policy)
        rule.now_ms = now
        reason = rule.reason(event_ms / 1000.0)
        sid = self.stream_id
        if self.policy == "fail":
            raise PassFailure(
                f"input {sid!r}: {where}: {reason}: it would move the watermark there and make "
                f"every later message late. The run stopped. Fix the producer's clock or the "
                f"record, raise the input's max_event_time_ahead, or set "
                f"streams.{sid}.samza.serde.error to skip or dead-letter")
        if self.counts is not None:
            self.counts.add({f"metric:{AHEAD_SKIPPED}": 1, f"metric:{sid}.{AHEAD_SKIPPED}": 1})
        if self.policy == "dead-letter" and self.dead is not None:
            kv = hasattr(message, "key") and hasattr(message, "value")  # foreign: a user's message
            k, v = (message.key, message.value) if kv else (None, message)
            self.dead.add([{"source": f"{sid}/{partition}/{row}", "error": reason, "key": k,
                            "value": v}])
        if not self._logged:
            self._logged = True
            log.warning("input %s: %s: %s; left out (streams.%s.samza.serde.error=%s); later "
                        "ones are counted in %s.%s", sid, where, reason, sid, self.policy, sid,
                        AHEAD_SKIPPED)


def ahead_check(stream_id: str, descriptor: StreamDescriptor) -> AheadCheck | None:
    """The check of an input whose descriptor declares ``max_event_time_ahead``, else None."""
    ms = descriptor.max_event_time_ahead_ms
    fn = descriptor.event_time
    return AheadCheck(stream_id, fn, ms) if ms and fn is not None else None


def dead_letter_accumulator(sc: Any) -> Any:
    """A Spark accumulator of dead letters (a list)."""
    from pyspark.accumulators import AccumulatorParam

    class ListSum(AccumulatorParam):
        def zero(self, value: list[Any]) -> list[Any]:
            return []

        def addInPlace(self, a: list[Any], b: list[Any]) -> list[Any]:  # noqa: N802
            a.extend(b)
            return a

    return sc.accumulator([], ListSum())
