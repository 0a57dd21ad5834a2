"""A small metrics registry: counters and gauges by name."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

__all__ = ["Metrics", "Counter"]


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

    def counter(self, name: str) -> Counter:
        return self._counters[name]

    def gauge(self, name: str) -> Gauge:
        return self._gauges[name]

    def inc(self, name: str, n: int = 1) -> None:
        self._counters[name].value += n

    def snapshot(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: c.value for k, c in self._counters.items()}
        out.update({k: g.value for k, g in self._gauges.items()})
        return out

    def __getitem__(self, name: str) -> Any:
        if name in self._counters:
            return self._counters[name].value
        return self._gauges[name].value
