"""Who moves an event-time window's watermark is decided once, when the task is built
(docs/semantics.md, "Progress counts the completed prefix" and "Per message"): a window that
one input partition alone feeds, which every message reaches inline, moves its own watermark to
the latest event time it saw, so which messages are late is fixed by the input whatever is in
flight after the window or on the task's other inputs; a window that a message may reach after
an async step (or a thread pool) takes the task's watermark of completed messages, so a message
that completes early never makes one still in flight before it late."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from samza_dsl import StreamApplication, Windows
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner

RUN_TIMEOUT = 30.0
#: a tumbling 10 s window; the input says which messages are late: 15.0 comes after 25.0 has
#: closed the pane [10 s, 20 s) of the window's one partition
TIMES = [5.0, 12.0, 25.0, 15.0, 31.0]
LATE = 1
PANES = Counter({0: 1, 10_000: 1, 20_000: 1, 30_000: 1})
#: how long the async step after the window holds the pane it gets: far longer than the
#: whole input takes to reach the window
SLOW = 0.5


def seconds(m: Any) -> float:
    return float(m)


def _window_app(async_after: bool, other_input: bool) -> tuple[Any, Any, Any, Any]:
    """clicks -> a tumbling window counting -> panes; ``async_after``: the panes go through a
    slow async step; ``other_input``: the task also reads ``views`` into a slow async sink."""
    mem = MemorySystem()
    app = StreamApplication("own", config={"task.max.concurrency": 8})
    clicks = mem.input("clicks")
    views = mem.input("views", priority=1)  # its message goes first
    out = mem.output("panes")
    panes = app.input(clicks).window(
        Windows.tumbling(timedelta(seconds=10), init=lambda: 0, fold=lambda m, n: n + 1,
                         event_time=seconds), name="w")

    async def hold(pane: Any) -> list[Any]:
        await asyncio.sleep(SLOW)
        return [pane]

    if async_after:
        panes = panes.async_flat_map(hold, name="hold")
    panes.map(lambda p: (int(p.key.pane_id), p.message), name="record").send_to(app.output(out))
    if other_input:
        async def slow_sink(m: Any) -> None:
            await asyncio.sleep(SLOW)

        app.input(views).sink(slow_sink, name="slow")
    return app, clicks, views, out


@pytest.mark.parametrize(("async_after", "other_input"), [(False, False), (True, False),
                                                          (False, True)],
                         ids=["nothing-in-flight", "async-after-the-window",
                              "async-on-another-input"])
def test_with_no_async_step_before_the_window_the_input_fixes_which_messages_are_late(
        async_after: bool, other_input: bool) -> None:
    """A message in flight after the window, or on another input of the task, does not hold
    back the watermark of a window that the input reaches inline: 15.0 is late after 25.0 in
    every run, as with nothing in flight."""
    app, clicks, views, out = _window_app(async_after, other_input)
    runner = TestRunner(app)
    if other_input:  # in flight when the clicks come
        runner.add_input(views, {0: [1.0]})
    runner.add_input(clicks, {0: TIMES})
    result = runner.run(timeout=RUN_TIMEOUT)
    assert result.late("w") == LATE
    assert Counter(dict(result.messages(out))) == PANES


def test_a_window_behind_an_async_step_takes_the_watermark_of_completed_messages() -> None:
    """Messages in event-time order whose async step completes in the reverse order reach the
    window out of order: none is late, as none passed the window's watermark at its input, and
    each pane holds every message of its time."""
    mem = MemorySystem()
    app = StreamApplication("behind", config={"task.max.concurrency": 16})
    clicks = mem.input("clicks")
    out = mem.output("panes")
    times = [float(t) for t in range(0, 40, 2)]
    reached: list[float] = []

    async def reverse(m: Any) -> list[Any]:
        await asyncio.sleep(0.01 * (len(times) - times.index(float(m))))  # the first: slowest
        reached.append(float(m))
        return [m]

    (app.input(clicks).async_flat_map(reverse, name="reverse")
     .window(Windows.tumbling(timedelta(seconds=10), init=lambda: 0, fold=lambda m, n: n + 1,
                              event_time=seconds), name="w")
     .map(lambda p: (int(p.key.pane_id), p.message), name="record").send_to(app.output(out)))
    result = TestRunner(app).add_input(clicks, {0: times}).run(timeout=RUN_TIMEOUT)
    assert reached != sorted(reached)  # they did reach the window out of order
    assert result.late("w") == 0
    assert Counter(dict(result.messages(out))) == Counter({0: 5, 10_000: 5, 20_000: 5,
                                                          30_000: 5})


def test_a_window_behind_a_thread_pool_takes_the_watermark_of_completed_messages() -> None:
    """As behind an async step: a map run on the task's thread pool hands its messages on
    later, so the window takes the watermark of completed messages; messages in event-time
    order are never late."""
    mem = MemorySystem()
    app = StreamApplication("pool", config={"task.max.concurrency": 16,
                                            "job.container.thread.pool.size": 4})
    clicks = mem.input("clicks")
    out = mem.output("panes")
    times = [float(t) for t in range(0, 40, 2)]

    def slow_first(m: Any) -> Any:
        time.sleep(0.003 * (len(times) - times.index(float(m))))
        return m

    (app.input(clicks).map(slow_first, name="slow")
     .window(Windows.tumbling(timedelta(seconds=10), init=lambda: 0, fold=lambda m, n: n + 1,
                              event_time=seconds), name="w")
     .map(lambda p: (int(p.key.pane_id), p.message), name="record").send_to(app.output(out)))
    result = TestRunner(app).add_input(clicks, {0: times}).run(timeout=RUN_TIMEOUT)
    assert result.late("w") == 0
    assert Counter(dict(result.messages(out))) == Counter({0: 5, 10_000: 5, 20_000: 5,
                                                          30_000: 5})


@pytest.mark.parametrize("behind_async", [False, True], ids=["inline", "behind-an-async-step"])
def test_a_flat_map_s_outputs_of_one_message_against_each_other(behind_async: bool) -> None:
    """Where the two owners differ with nothing in flight: a flat_map gives 25.0 and then 15.0
    for one message. A window the input reaches inline keeps its own watermark, so 25.0 closes
    [10 s, 20 s) before 15.0 comes and 15.0 is late (as on Spark, whose pass moves the window's
    watermark per message); behind an async step the window takes the watermark of completed
    messages, which 25.0 moves only once its message completed, so 15.0 goes into its pane."""
    mem = MemorySystem()
    app = StreamApplication("fan")
    clicks = mem.input("clicks")
    out = mem.output("panes")
    stream = app.input(clicks)
    if behind_async:
        async def same(m: Any) -> list[Any]:
            return [m]

        stream = stream.async_flat_map(same, name="same")
    (stream.flat_map(lambda m: [m, m - 10.0] if m == 25.0 else [m], name="fan")
     .window(Windows.tumbling(timedelta(seconds=10), init=lambda: 0, fold=lambda m, n: n + 1,
                              event_time=seconds), name="w")
     .map(lambda p: (int(p.key.pane_id), p.message), name="record").send_to(app.output(out)))
    result = TestRunner(app).add_input(clicks, {0: [5.0, 12.0, 25.0, 31.0]}).run(
        timeout=RUN_TIMEOUT)
    assert result.late("w") == (0 if behind_async else 1)
    assert Counter(dict(result.messages(out))) == Counter(
        {0: 1, 10_000: 2 if behind_async else 1, 20_000: 1, 30_000: 1})


def _declared_app(async_after: bool, other_input: bool) -> tuple[Any, Any, Any, Any]:
    """``_window_app`` with the event time declared on the input (``event_time=`` there): the
    window's watermark follows the partition's progress message by message. ``async_after``:
    the panes go through an async step whose calls complete in the reverse order (the first
    pane is the slowest)."""
    mem = MemorySystem()
    app = StreamApplication("declared", config={"task.max.concurrency": 8})
    clicks = mem.input("clicks", event_time=seconds)
    views = mem.input("views", priority=1)  # its message goes first
    out = mem.output("panes")
    panes = app.input(clicks).window(
        Windows.tumbling(timedelta(seconds=10), init=lambda: 0, fold=lambda m, n: n + 1,
                         event_time=seconds), name="w")

    async def reverse(pane: Any) -> list[Any]:
        await asyncio.sleep(SLOW * (1.0 - int(pane.key.pane_id) / 40_000))
        return [pane]

    if async_after:
        panes = panes.async_flat_map(reverse, name="reverse")
    panes.map(lambda p: (int(p.key.pane_id), p.message), name="record").send_to(app.output(out))
    if other_input:
        async def slow_sink(m: Any) -> None:
            await asyncio.sleep(SLOW)

        app.input(views).sink(slow_sink, name="slow")
    return app, clicks, views, out


@pytest.mark.parametrize(("async_after", "other_input"), [(False, False), (True, False),
                                                          (False, True)],
                         ids=["nothing-in-flight", "async-after-the-window",
                              "async-on-another-input"])
def test_with_declared_event_time_the_input_fixes_which_messages_are_late(
        async_after: bool, other_input: bool) -> None:
    """With the event time declared on the input, a message in flight after the window (its
    panes' async calls completing in the reverse order) or on another input of the task does
    not hold back the window's watermark: 15.0 is late after 25.0 in every run, and the panes
    and their counts are those of the run with nothing in flight."""
    app, clicks, views, out = _declared_app(async_after, other_input)
    runner = TestRunner(app)
    if other_input:  # in flight when the clicks come
        runner.add_input(views, {0: [1.0]})
    runner.add_input(clicks, {0: TIMES})
    result = runner.run(timeout=RUN_TIMEOUT)
    assert result.late("w") == LATE
    assert Counter(dict(result.messages(out))) == PANES


def test_with_declared_event_time_a_window_behind_an_async_step_is_held_back() -> None:
    """Only what is in flight before a window holds it back: with the event time declared on
    the input, messages in event-time order whose async step before the window completes in
    the reverse order are never late, and each pane holds every message of its time."""
    mem = MemorySystem()
    app = StreamApplication("declared-behind", config={"task.max.concurrency": 16})
    clicks = mem.input("clicks", event_time=seconds)
    out = mem.output("panes")
    times = [float(t) for t in range(0, 40, 2)]
    reached: list[float] = []

    async def reverse(m: Any) -> list[Any]:
        await asyncio.sleep(0.01 * (len(times) - times.index(float(m))))  # the first: slowest
        reached.append(float(m))
        return [m]

    (app.input(clicks).async_flat_map(reverse, name="reverse")
     .window(Windows.tumbling(timedelta(seconds=10), init=lambda: 0, fold=lambda m, n: n + 1,
                              event_time=seconds), name="w")
     .map(lambda p: (int(p.key.pane_id), p.message), name="record").send_to(app.output(out)))
    result = TestRunner(app).add_input(clicks, {0: times}).run(timeout=RUN_TIMEOUT)
    assert reached != sorted(reached)  # they did reach the window out of order
    assert result.late("w") == 0
    assert Counter(dict(result.messages(out))) == Counter({0: 5, 10_000: 5, 20_000: 5,
                                                          30_000: 5})
