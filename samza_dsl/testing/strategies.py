"""Hypothesis strategies for property-testing pipelines: one stream at a time, or a whole
application's inputs at once (``keyed_inputs``: several keyed streams over shared keys, with
bounded disorder and table updates, from ``samza_dsl.testing.app_inputs``).

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
from samza_dsl.testing.app_inputs import Event, KeyedInputs, keyed_inputs, timed_kv

T = TypeVar("T")

__all__ = ["partitioned_messages", "keyed_messages", "arrival_orders", "event_times",
           "disordered_event_times", "async_delays", "DelayScheduler", "keyed_inputs",
           "KeyedInputs", "Event", "timed_kv", "st"]


def keyed_messages(keys: st.SearchStrategy[Any] = st.integers(0, 9),
                   values: st.SearchStrategy[Any] = st.integers()) -> st.SearchStrategy[KV[Any, Any]]:
    """``KV(key, value)`` messages with few distinct keys, so keys repeat.

    Args:
        keys: The strategy of keys; by default ints 0 to 9.
        values: The strategy of values; by default any int.

    Returns:
        A strategy of ``KV``.

    Example:
        >>> from hypothesis import given, settings
        >>> @settings(max_examples=5)
        ... @given(keyed_messages(keys=st.sampled_from(["a", "b"])))
        ... def check(kv):
        ...     assert kv.key in ("a", "b") and isinstance(kv.value, int)
        >>> check()
    """
    return st.builds(KV, keys, values)


@st.composite
def partitioned_messages(draw: st.DrawFn, messages: st.SearchStrategy[T], *,
                         partitions: int | st.SearchStrategy[int] = st.integers(1, 4),
                         max_size: int = 30) -> dict[int, list[T]]:
    """``{partition: [messages]}`` for a stream of a drawn (or given) partition count.

    Args:
        messages: The strategy of messages.
        partitions: The partition count, or a strategy of it; by default 1 to 4.
        max_size: The most messages per partition.

    Returns:
        A strategy of ``{partition: list of messages}`` with every partition present, as
        ``TestRunner.add_input`` takes it.

    Example:
        >>> from hypothesis import given, settings
        >>> @settings(max_examples=10)
        ... @given(partitioned_messages(keyed_messages(), partitions=3, max_size=5))
        ... def check(parts):
        ...     assert sorted(parts) == [0, 1, 2] and all(len(m) <= 5 for m in parts.values())
        >>> check()
    """
    n = partitions if isinstance(partitions, int) else draw(partitions)
    return {p: draw(st.lists(messages, max_size=max_size)) for p in range(n)}


@st.composite
def arrival_orders(draw: st.DrawFn, partitions: Mapping[Hashable, Sequence[T]]
                   ) -> list[tuple[Hashable, T]]:
    """An interleaving of the partitions that keeps each partition's own order.

    Args:
        partitions: ``{partition: messages}``, e.g. drawn from ``partitioned_messages``.

    Returns:
        A strategy of ``[(partition, message), ...]``: every message once, each partition's
        in order.

    Example:
        >>> from hypothesis import given, settings
        >>> @settings(max_examples=10)
        ... @given(arrival_orders({0: ["a", "b"], 1: ["c"]}))
        ... def check(order):
        ...     assert [m for p, m in order if p == 0] == ["a", "b"] and (1, "c") in order
        >>> check()
    """
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
    ``max_disorder`` seconds before the latest one drawn so far (bounded disorder).

    Args:
        n: How many event times.
        start: The event time the first step starts from, in seconds.
        max_step: The most the latest event time moves forward per message, in seconds.
        max_disorder: The most an event time lies before the latest one, in seconds (0: in
            order).

    Returns:
        A strategy of lists of ``n`` event times in seconds, rounded to ms.

    Example:
        >>> from hypothesis import given, settings
        >>> @settings(max_examples=10)
        ... @given(event_times(5))
        ... def check(times):
        ...     assert len(times) == 5 and times == sorted(times)
        >>> check()
    """
    out: list[float] = []
    latest = start
    for _ in range(n):
        latest += draw(st.integers(0, int(max_step * 1000))) / 1000.0
        back = draw(st.integers(0, int(max_disorder * 1000))) / 1000.0 if max_disorder else 0.0
        out.append(round(latest - back, 3))
    return out


def disordered_event_times(n: int, *, max_disorder: float = 2.0,
                           max_step: float = 5.0) -> st.SearchStrategy[list[float]]:
    """``event_times`` with disorder: each at most ``max_disorder`` seconds before the latest.

    Args:
        n: How many event times.
        max_disorder: The most an event time lies before the latest one, in seconds.
        max_step: The most the latest event time moves forward per message, in seconds.

    Returns:
        A strategy of lists of ``n`` event times in seconds.

    Example:
        >>> from hypothesis import given, settings
        >>> @settings(max_examples=10)
        ... @given(disordered_event_times(20, max_disorder=2.0))
        ... def check(times):
        ...     assert all(t >= max(times[:i + 1]) - 2.0 for i, t in enumerate(times))
        >>> check()
    """
    return event_times(n, max_step=max_step, max_disorder=max_disorder)


def async_delays(max_delay: float = 0.01) -> st.SearchStrategy[float]:
    """Delays for async calls, in (virtual) seconds; use with ``DelayScheduler``.

    Args:
        max_delay: The longest delay, in seconds.

    Returns:
        A strategy of delays from 0 to ``max_delay``, in steps of 0.1 ms.

    Example:
        >>> from hypothesis import given, settings
        >>> @settings(max_examples=10)
        ... @given(st.lists(async_delays(0.005), min_size=1))
        ... def check(delays):
        ...     assert all(0 <= d <= 0.005 for d in delays)
        >>> check()
    """
    return st.integers(0, int(max_delay * 10_000)).map(lambda x: x / 10_000)


class DelayScheduler:
    """Deterministic async completion order for tests.

    ``await sched.sleep(d)`` completes in order of virtual wake-up time (then of call order), not
    in wall-clock time: whatever the machine's load, the same delays give the same completion
    order. The scheduler wakes the earliest sleeper once every runnable coroutine has had
    ``settle`` turns of the loop to reach its next await.

    Args:
        settle: Turns of the event loop given to runnable coroutines before each wake-up.

    Attributes:
        now: The virtual time, in seconds.
        completions: The ``tag`` of each completed sleep, in completion order.

    Example:
        >>> sched = DelayScheduler()
        >>> async def main():
        ...     await asyncio.gather(sched.sleep(0.02, "slow"), sched.sleep(0.01, "fast"))
        >>> asyncio.run(main())
        >>> sched.completions, sched.now
        (['fast', 'slow'], 0.02)
    """

    def __init__(self, settle: int = 20) -> None:
        self.now = 0.0
        self.settle = settle
        self.completions: list[Any] = []
        self._heap: list[tuple[float, int, asyncio.Future[None], Any]] = []
        self._seq = 0
        self._driver: asyncio.Task[None] | None = None

    async def sleep(self, delay: float, tag: Any = None) -> None:
        """Sleep ``delay`` virtual seconds: complete after every sleeper due earlier.

        Must be awaited on a running event loop.

        Args:
            delay: Virtual seconds (a negative delay counts as 0).
            tag: Recorded in ``completions`` when this sleep completes.
        """
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
