"""A small metrics registry: counters and gauges by name.

Late messages of event-time windows (docs/semantics.md rule 8) are counters too:
``<window op id>.late-messages.<input stream id>`` (see ``operators.late``); ``late_counts``
reads them back by window and stream.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["Metrics", "Counter", "late_counts", "late_summary"]


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


class Metrics:
    def __init__(self, scope: str = "") -> None:
        self.scope = scope
        self._counters: dict[str, Counter] = defaultdict(Counter)
        self._gauges: dict[str, Gauge] = defaultdict(Gauge)
        self._once: set[Any] = set()

    def counter(self, name: str) -> Counter:
        return self._counters[name]

    def gauge(self, name: str) -> Gauge:
        return self._gauges[name]

    def inc(self, name: str, n: int = 1) -> None:
        self._counters[name].value += n

    def once(self, key: Any) -> bool:
        """True the first time ``key`` is asked for (a warning given once per registry)."""
        if key in self._once:
            return False
        self._once.add(key)
        return True

    def snapshot(self) -> dict[str, Any]:
        # list() copies under the GIL: another thread (LocalRunner.status) may read while the
        # loop adds counters
        out: dict[str, Any] = {k: c.value for k, c in list(self._counters.items())}
        out.update({k: g.value for k, g in list(self._gauges.items())})
        return out

    def __getitem__(self, name: str) -> Any:
        if name in self._counters:
            return self._counters[name].value
        return self._gauges[name].value


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


def late_summary(counts: Mapping[str, Mapping[str, int]], late_to: Mapping[str, str | None]
                 ) -> list[str]:
    """Lines for a run summary: per window, its late messages by stream, and where they went."""
    lines = []
    for window, per in counts.items():
        total = sum(per.values())
        streams = ", ".join(f"{n:,} from {sid}" for sid, n in per.items())
        target = late_to.get(window)
        fate = f"sent to {target}" if target else "dropped"
        lines.append(f"late: {total:,} message(s) {fate} by window {window} ({streams})")
    return lines
