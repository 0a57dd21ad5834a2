"""The hypothesis strategies of ``samza_dsl.testing.strategies`` keep their promises: interleavings
keep each partition's order, event times respect their disorder bound, and ``DelayScheduler``
completes sleeps in virtual-time order, deterministically."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Hashable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from samza_dsl import KV
from samza_dsl.testing import strategies

PROPS = settings(max_examples=50, deadline=None)


def test_the_documented_import_works_in_a_fresh_interpreter() -> None:
    """``samza_dsl.testing`` resolves its names lazily: check the spelling in an interpreter
    where nothing has imported the submodule yet (in this one, anything may have)."""
    code = ("from samza_dsl.testing import TestRunner, strategies; "
            "print(strategies.__name__, TestRunner.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-300:]
    assert proc.stdout.split() == ["samza_dsl.testing.strategies", "TestRunner"]


# --- arrival orders ----------------------------------------------------------------------------------

@PROPS
@given(data=st.data(),
       parts=strategies.partitioned_messages(st.integers(), partitions=st.integers(1, 4)))
def test_arrival_orders_interleave_partitions_keeping_each_partitions_order(
        data: st.DataObject, parts: dict[int, list[int]]) -> None:
    order = data.draw(strategies.arrival_orders(parts))
    assert len(order) == sum(map(len, parts.values()))
    per: dict[Hashable, list[int]] = {p: [] for p in parts}
    for p, m in order:
        per[p].append(m)
    assert per == parts


def test_arrival_orders_do_interleave() -> None:
    parts = {"a": list(range(5)), "b": list(range(5))}
    seen: set[tuple[Hashable, ...]] = set()

    @settings(max_examples=50, deadline=None)
    @given(strategies.arrival_orders(parts))
    def collect(order: list[tuple[Hashable, int]]) -> None:
        seen.add(tuple(p for p, _ in order))

    collect()
    assert len(seen) > 5


# --- event times ---------------------------------------------------------------------------------------

@PROPS
@given(data=st.data(), n=st.integers(0, 60), max_step=st.sampled_from([0.5, 1.0, 5.0]),
       max_disorder=st.sampled_from([0.0, 0.25, 2.0, 10.0]))
def test_event_times_respect_their_step_and_disorder_bounds(
        data: st.DataObject, n: int, max_step: float, max_disorder: float) -> None:
    start = 1_700_000_000.0
    times = data.draw(strategies.event_times(n, start=start, max_step=max_step,
                                             max_disorder=max_disorder))
    assert len(times) == n
    eps = 1e-6
    for i, t in enumerate(times):
        assert t >= start - max_disorder - eps
        # each at most max_disorder before the latest so far
        assert t >= max([start, *times[:i]]) - max_disorder - eps, (i, times)
        # time moves forward by at most max_step per message
        assert t <= start + (i + 1) * max_step + eps
        assert round(t, 3) == t
    if max_disorder == 0.0:
        assert times == sorted(times)
        assert all(b - a <= max_step + eps for a, b in zip(times, times[1:], strict=False))


@PROPS
@given(data=st.data())
def test_disordered_event_times_are_event_times_with_disorder(data: st.DataObject) -> None:
    times = data.draw(strategies.disordered_event_times(30, max_disorder=1.5, max_step=2.0))
    assert len(times) == 30
    for i, t in enumerate(times[1:], 1):
        assert t >= max(times[:i]) - 1.5 - 1e-6


def test_event_times_can_be_disordered() -> None:
    found = []

    @settings(max_examples=50, deadline=None)
    @given(strategies.event_times(20, max_disorder=3.0))
    def collect(times: list[float]) -> None:
        found.append(times != sorted(times))

    collect()
    assert any(found)


# --- other generators ---------------------------------------------------------------------------------

@PROPS
@given(m=strategies.keyed_messages(), d=strategies.async_delays(0.02),
       parts=strategies.partitioned_messages(st.integers(), partitions=3, max_size=7))
def test_keyed_messages_async_delays_and_partitioned_messages(
        m: KV[Any, Any], d: float, parts: dict[int, list[int]]) -> None:
    assert isinstance(m, KV) and 0 <= m.key <= 9
    assert 0.0 <= d <= 0.02
    assert set(parts) == {0, 1, 2}
    assert all(len(v) <= 7 for v in parts.values())


# --- DelayScheduler ----------------------------------------------------------------------------------

def run_sleepers(delays: list[float], jitter: list[int]) -> tuple[list[Any], float]:
    """Each sleeper yields ``jitter[i]`` times (fewer than ``settle``) and then sleeps."""

    async def main() -> tuple[list[Any], float]:
        sched = strategies.DelayScheduler()

        async def sleeper(i: int) -> None:
            for _ in range(jitter[i]):
                await asyncio.sleep(0)
            await sched.sleep(delays[i], tag=i)

        await asyncio.gather(*(sleeper(i) for i in range(len(delays))))
        return sched.completions, sched.now

    return asyncio.run(main())


@PROPS
@given(data=st.data(), delays=st.lists(strategies.async_delays(0.01), min_size=1, max_size=20))
def test_delay_scheduler_completes_in_virtual_time_then_call_order(
        data: st.DataObject, delays: list[float]) -> None:
    jitter = data.draw(st.lists(st.integers(0, 5), min_size=len(delays), max_size=len(delays)))
    completions, now = run_sleepers(delays, jitter)
    calls = sorted(range(len(delays)), key=lambda i: (jitter[i], i))  # the order sleep() is called
    assert completions == sorted(calls, key=lambda i: (delays[i], calls.index(i)))
    assert now == max(delays)
    # deterministic: the same delays give the same completion order again
    assert run_sleepers(delays, jitter)[0] == completions


def test_delay_scheduler_counts_later_sleeps_from_the_virtual_now() -> None:
    async def main() -> list[Any]:
        sched = strategies.DelayScheduler()

        async def a() -> None:
            await sched.sleep(1.0, tag="a1")
            await sched.sleep(0.5, tag="a2")  # wakes at 1.5

        async def b() -> None:
            await sched.sleep(1.2, tag="b")

        async def c() -> None:
            await sched.sleep(2.0, tag="c")

        await asyncio.gather(a(), b(), c())
        assert sched.now == 2.0
        return sched.completions

    assert asyncio.run(main()) == ["a1", "b", "a2", "c"]


def test_delay_scheduler_does_not_wait_for_real_time() -> None:
    import time

    started = time.monotonic()
    completions, now = run_sleepers([100.0, 50.0, 75.0], [0, 0, 0])
    assert completions == [1, 2, 0]
    assert now == 100.0
    assert time.monotonic() - started < 5.0
