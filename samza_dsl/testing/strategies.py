"""Hypothesis strategies for property-testing pipelines.

>>> from hypothesis import given, settings
>>> @settings(max_examples=5)
... @given(partitioned_messages(st.integers(), partitions=3))
... def check(parts):
...     assert set(parts) == {0, 1, 2}
>>> check()
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypeVar

from hypothesis import strategies as st

from samza_dsl.kv import KV

T = TypeVar("T")

__all__ = ["partitioned_messages", "keyed_messages", "arrival_orders", "event_times",
           "disordered_event_times", "async_delays", "DelayScheduler", "st"]


def keyed_messages(keys: st.SearchStrategy[Any] = st.integers(0, 9),
                   values: st.SearchStrategy[Any] = st.integers()) -> st.SearchStrategy[KV[Any, Any]]:
    """``KV(key, value)`` messages with few distinct keys, so keys repeat."""
    return st.builds(KV, keys, values)


@st.composite
def partitioned_messages(draw: st.DrawFn, messages: st.SearchStrategy[T], *,
                         partitions: int | st.SearchStrategy[int] = st.integers(1, 4),
                         max_size: int = 30) -> dict[int, list[T]]:
    """``{partition: [messages]}`` for a stream of a drawn (or given) partition count."""
    n = partitions if isinstance(partitions, int) else draw(partitions)
    return {p: draw(st.lists(messages, max_size=max_size)) for p in range(n)}


@st.composite
def arrival_orders(draw: st.DrawFn, partitions: Mapping[Hashable, Sequence[T]]
                   ) -> list[tuple[Hashable, T]]:
    """An interleaving of the partitions that keeps each partition's own order."""
    cursors = {p: 0 for p in partitions}
    out: list[tuple[Hashable, T]] = []
    live = [p for p in partitions if partitions[p]]
    while live:
        p = draw(st.sampled_from(sorted(live, key=repr)))
        out.append((p, partitions[p][cursors[p]]))
        cursors[p] += 1
        if cursors[p] >= len(partitions[p]):
            live.remove(p)
    return out


@st.composite
def event_times(draw: st.DrawFn, n: int, *, start: float = 1_700_000_000.0,
                max_step: float = 5.0, max_disorder: float = 0.0) -> list[float]:
    """``n`` event times (seconds) moving forward by up to ``max_step``, each at most
    ``max_disorder`` seconds before the latest one drawn so far (bounded disorder)."""
    out: list[float] = []
    latest = start
    for _ in range(n):
        latest += draw(st.integers(0, int(max_step * 1000))) / 1000.0
        back = draw(st.integers(0, int(max_disorder * 1000))) / 1000.0 if max_disorder else 0.0
        out.append(round(latest - back, 3))
    return out


def disordered_event_times(n: int, *, max_disorder: float = 2.0,
                           max_step: float = 5.0) -> st.SearchStrategy[list[float]]:
    return event_times(n, max_step=max_step, max_disorder=max_disorder)


def async_delays(max_delay: float = 0.01) -> st.SearchStrategy[float]:
    """Delays for async calls, in (virtual) seconds; use with ``DelayScheduler``."""
    return st.integers(0, int(max_delay * 10_000)).map(lambda x: x / 10_000)


class DelayScheduler:
    """Deterministic async completion order for tests.

    ``await sched.sleep(d)`` completes in order of virtual wake-up time (then of call order), not
    in wall-clock time: whatever the machine's load, the same delays give the same completion
    order. The scheduler wakes the earliest sleeper once every runnable coroutine has had
    ``settle`` turns of the loop to reach its next await.
    """

    def __init__(self, settle: int = 20) -> None:
        self.now = 0.0
        self.settle = settle
        self.completions: list[Any] = []
        self._heap: list[tuple[float, int, asyncio.Future[None], Any]] = []
        self._seq = 0
        self._driver: asyncio.Task[None] | None = None

    async def sleep(self, delay: float, tag: Any = None) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        heapq.heappush(self._heap, (self.now + max(0.0, delay), self._seq, fut, tag))
        self._seq += 1
        if self._driver is None or self._driver.done():
            self._driver = loop.create_task(self._drive())
        await fut

    async def _drive(self) -> None:
        while True:
            for _ in range(self.settle):
                await asyncio.sleep(0)
            if not self._heap:
                return
            wake, _, fut, tag = heapq.heappop(self._heap)
            self.now = max(self.now, wake)
            if not fut.done():
                self.completions.append(tag)
                fut.set_result(None)
