"""Test helpers for operator tests: a controllable clock and a metrics registry.

(Not named conftest: ``from conftest import ...`` breaks once another test directory has one.)
"""

from __future__ import annotations

from typing import Any

from runtime.host.metrics import Metrics as RuntimeMetrics


class FakeClock:
    """A clock in ms that moves only when a test says so."""

    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def set(self, now: int) -> int:
        self.now = now
        return now


class Metrics:
    """The runtime's registry shape: ``counter(name).inc(n)``."""

    class Counter:
        def __init__(self) -> None:
            self.value = 0

        def inc(self, n: int = 1) -> None:
            self.value += n

    def __init__(self) -> None:
        self.counters: dict[str, Metrics.Counter] = {}
        self._every: dict[Any, float] = {}

    def counter(self, name: str) -> Metrics.Counter:
        return self.counters.setdefault(name, Metrics.Counter())

    #: the runtime registry's: True the first time ``key`` is asked for, then once ``seconds``
    #: have passed
    every = RuntimeMetrics.every
