"""The metrics registry: counters, gauges and timers by name, per-operator meters, and
collectors that read the runtime's own numbers when a reporter asks (``samples``).

Names follow Samza's where Samza has them (docs/operations.md lists them all):

- container: ``process-envelopes``, ``commit-calls``, ``commit-ns``, ``window-calls``,
  ``event-loop-utilization``;
- task: ``messages-actually-processed``, ``messages-in-flight``, and per input partition
  ``checkpointed-offset``, ``next-offset``, ``end-offset`` and ``lag``;
- operator: ``messages-in``, ``messages-out``, ``messages-in-flight`` (its own calls that went
  async and have not completed), ``handle-ns``; windows also ``panes-emitted`` and
  ``late-messages-dropped`` (the task's own);
- store: ``gets``, ``puts``, ``deletes``, ``bytes``, ``restore-entries``, ``restore-ns``; a
  remote table: ``remote-calls``, ``remote-retries``, ``remote-failures``,
  ``remote-cache-hits``, ``remote-cache-misses``;
- producer: ``sends``, ``bytes``, ``flush-ns``.

Each sample is ``(group, name, labels, value)``; labels are among task, operator, store,
stream, partition and system. Most of them cost nothing while the job runs: a collector reads
the number where the runtime keeps it anyway. An operator's meter counts in and out per message
and times one message in ``HANDLE_SAMPLE`` (``handle-ns`` is the estimate for all of them).

Late messages of event-time windows (docs/semantics.md rule 8) are counters too:
``<window op id>.late-messages.<input stream id>`` (see ``operators.late``); ``late_counts``
reads them back by window and stream.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from operators.window import WindowOperator

__all__ = ["Metrics", "Counter", "Gauge", "Timer", "OpMeter", "Sample", "HANDLE_SAMPLE",
           "late_counts", "late_summary", "snapshot_record"]

#: (group, name, labels, value)
Sample = tuple[str, str, dict[str, str], Any]

#: an operator's meter times one message in this many (a power of two)
HANDLE_SAMPLE = 16


class Counter:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, n: int = 1) -> None:
        self.value += n

    def __repr__(self) -> str:
        return f"Counter({self.value})"


class Gauge:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: Any = None

    def set(self, value: Any) -> None:
        self.value = value


class Timer:
    """How many times something ran and the nanoseconds it took in all."""

    __slots__ = ("count", "total_ns")

    def __init__(self) -> None:
        self.count = 0
        self.total_ns = 0

    def update(self, ns: int) -> None:
        self.count += 1
        self.total_ns += ns

    @contextmanager
    def time(self) -> Iterator[None]:
        """Times the ``with`` block."""
        start = time.perf_counter_ns()
        try:
            yield
        finally:
            self.update(time.perf_counter_ns() - start)

    @property
    def value(self) -> int:
        return self.total_ns

    def __repr__(self) -> str:
        return f"Timer(count={self.count}, total_ns={self.total_ns})"


class OpMeter:
    """One operator's numbers in one task: messages in and out, and the time of the sampled
    calls of its own function (not of what runs downstream of it)."""

    __slots__ = ("op_id", "task", "n_in", "n_out", "ns", "timed", "window", "late",
                 "in_flight")

    def __init__(self, op_id: str, task: str) -> None:
        self.op_id = op_id
        self.task = task
        self.n_in = 0
        self.n_out = 0
        #: calls of this operator that went async and have not completed
        self.in_flight = 0
        self.ns = 0
        self.timed = 0
        #: the window operator, for its panes and late messages
        self.window: WindowOperator | None = None
        #: an event-time join's late messages (``operators.late.LateTracker``)
        self.late: Any = None

    @property
    def handle_ns(self) -> int:
        """The time of every call, estimated from the sampled ones."""
        return int(self.ns * self.n_in / self.timed) if self.timed else 0


def _collected(collect: Callable[[], Iterable[Sample]], tries: int = 5) -> list[Sample]:
    """A collector's samples. A scrape reads them from its own thread while the container's
    loop changes what they are read from, and a dict may change size under the read
    (RuntimeError): it is read again, up to ``tries`` times."""
    for attempt in range(tries):
        try:
            return list(collect())
        except RuntimeError:
            if attempt == tries - 1:
                raise
    return []


class Metrics:
    def __init__(self, scope: str = "") -> None:
        self.scope = scope
        self._counters: dict[str, Counter] = defaultdict(Counter)
        self._gauges: dict[str, Gauge] = defaultdict(Gauge)
        self._timers: dict[str, Timer] = defaultdict(Timer)
        self._once: set[Any] = set()
        self._every: dict[Any, float] = {}
        #: per-operator meters, in the order the tasks built them
        self.meters: list[OpMeter] = []
        #: functions that give samples of the runtime's own numbers when asked
        self.collectors: list[Callable[[], Iterable[Sample]]] = []
        #: False: operators run without meters (``metrics.operators=false``)
        self.operators = True

    def counter(self, name: str) -> Counter:
        return self._counters[name]

    def gauge(self, name: str) -> Gauge:
        return self._gauges[name]

    def timer(self, name: str) -> Timer:
        return self._timers[name]

    def snapshot_gauges(self) -> list[str]:
        """The names of the gauges made by name (as opposed to counters and timers)."""
        return list(self._gauges)

    def meter(self, op_id: str, task: str) -> OpMeter:
        """A new meter for operator ``op_id`` of ``task``."""
        m = OpMeter(op_id, task)
        self.meters.append(m)
        return m

    def samples(self) -> list[Sample]:
        """Every metric now: the runtime's (from its collectors), the operators', and the
        counters, gauges and timers by name (group ``user``; the runtime's own named counters,
        such as late messages per window and stream, are there too)."""
        out: list[Sample] = []
        for collect in list(self.collectors):
            out.extend(_collected(collect))
        for m in list(self.meters):
            labels = {"task": m.task, "operator": m.op_id}
            out.append(("operator", "messages-in", labels, m.n_in))
            if m.window is None:
                out.append(("operator", "messages-out", labels, m.n_out))
                if m.late is not None:  # an event-time join: its late messages not sent on
                    dropped = 0 if m.late.late_to else m.late.total
                    out.append(("operator", "late-messages-dropped", labels, dropped))
            else:  # a window's outputs are its panes, whenever they fire, and late messages
                # this task's own late messages (the registry's counters are the container's)
                tracker = m.window.late_tracker
                late = tracker.total
                sent = late if tracker.late_to else 0
                panes = m.window.panes_emitted
                out.append(("operator", "messages-out", labels, panes + sent))
                out.append(("operator", "panes-emitted", labels, panes))
                out.append(("operator", "late-messages-dropped", labels, late - sent))
            out.append(("operator", "messages-in-flight", labels, m.in_flight))
            out.append(("operator", "handle-ns", labels, m.handle_ns))
        for name, c in list(self._counters.items()):
            out.append(("user", name, {}, c.value))
        for name, g in list(self._gauges.items()):
            if isinstance(g.value, int | float) and not isinstance(g.value, bool):
                out.append(("user", name, {}, g.value))
        for name, t in list(self._timers.items()):
            out.append(("user", name + "-count", {}, t.count))
            out.append(("user", name + "-ns", {}, t.total_ns))
        return out

    def inc(self, name: str, n: int = 1) -> None:
        self._counters[name].value += n

    def once(self, key: Any) -> bool:
        """True the first time ``key`` is asked for (a warning given once per registry)."""
        if key in self._once:
            return False
        self._once.add(key)
        return True

    def every(self, key: Any, seconds: float) -> bool:
        """True the first time ``key`` is asked for, then again once ``seconds`` have passed
        since it last was (a warning given at most that often per registry)."""
        now = time.monotonic()
        last = self._every.get(key)
        if last is not None and now - last < seconds:
            return False
        self._every[key] = now
        return True

    def snapshot(self) -> dict[str, Any]:
        # list() copies under the GIL: another thread (LocalRunner.status) may read while the
        # loop adds counters
        out: dict[str, Any] = {k: c.value for k, c in list(self._counters.items())}
        out.update({k: g.value for k, g in list(self._gauges.items())})
        out.update({k: t.total_ns for k, t in list(self._timers.items())})
        return out

    def __getitem__(self, name: str) -> Any:
        if name in self._counters:
            return self._counters[name].value
        if name in self._timers:
            return self._timers[name].total_ns
        return self._gauges[name].value


def snapshot_record(samples: Iterable[Sample], header: Mapping[str, Any]) -> dict[str, Any]:
    """A metrics snapshot as the reporters write it (``<job>-metrics`` stream, JSON file):
    ``{"header": {...}, "metrics": [{"group", "name", "labels", "value"}, ...]}``, the header
    naming the job, its id, the container, and the time in ms."""
    return {"header": dict(header),
            "metrics": [{"group": g, "name": n, "labels": labels, "value": v}
                        for g, n, labels, v in samples]}


def late_counts(snapshot: Mapping[str, Any], windows: Iterable[str]) -> dict[str, dict[str, int]]:
    """``{window op id: {input stream id: late messages}}`` from a metrics snapshot, for the
    windows (op ids) given; windows and streams without late messages are left out."""
    from operators.late import LATE_PREFIX

    out: dict[str, dict[str, int]] = {}
    prefixes = [(w + LATE_PREFIX, w) for w in windows]
    for name, value in snapshot.items():
        if not value:
            continue
        for prefix, window in prefixes:
            if name.startswith(prefix):
                per = out.setdefault(window, {})
                sid = name[len(prefix):]
                per[sid] = per.get(sid, 0) + int(value)
    return {w: dict(sorted(per.items())) for w, per in sorted(out.items())}


def late_summary(counts: Mapping[str, Mapping[str, int]], late_to: Mapping[str, str | None],
                 kinds: Mapping[str, str] | None = None) -> list[str]:
    """Lines for a run summary: per window, its late messages by stream, and where they went.
    ``kinds``: op id -> what it is where it is no window ("join": an event-time join)."""
    lines = []
    for window, per in counts.items():
        total = sum(per.values())
        streams = ", ".join(f"{n:,} from {sid}" for sid, n in per.items())
        target = late_to.get(window)
        fate = f"sent to {target}" if target else "dropped"
        kind = (kinds or {}).get(window, "window")
        lines.append(f"late: {total:,} message(s) {fate} by {kind} {window} ({streams})")
    return lines
