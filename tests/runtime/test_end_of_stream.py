"""End-of-stream and watermarks across intermediate streams (docs/semantics.md rules 7, 8, 15), and
window triggers as a user meets them through ``TestRunner``: count, any and repeat, DISCARDING vs
ACCUMULATING, firings without state, late panes, time triggers on real time.

Panes here mostly run on event time (``event_time=``), so which pane a message falls in does not
depend on the machine's clock; a window that stays open until the end is flushed there once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from samza_dsl import (
    KV,
    AccumulationMode,
    FiringType,
    StreamApplication,
    Triggers,
    Windows,
)
from samza_dsl.errors import TaskError
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner

RUN_TIMEOUT = 5.0
DAY = timedelta(days=1)
EARLY, DEFAULT, LATE = FiringType.EARLY, FiringType.DEFAULT, FiringType.LATE


def firings(panes: list[Any]) -> list[tuple[Any, str, str, Any]]:
    return [(p.key.key, p.key.pane_id, p.firing.name, p.message) for p in panes]


# --- end-of-stream across intermediate streams ---------------------------------------------------

def test_end_of_stream_waits_for_every_producing_task_and_flushes_each_pane_once() -> None:
    """3 input partitions -> partition_by into 2 -> a window that stays open to the end: each
    (key, pane) fires once, after every producer's end-of-stream; partition 2 is much longer and
    slower, so the other producers end first."""
    mem = MemorySystem()
    app = StreamApplication("eos", config={"job.intermediate.stream.partitions": 2,
                                           "task.max.concurrency": 4})
    inp = mem.input("in", partitions=3)
    out = mem.output("counts")

    async def slow(m: tuple[int, str]) -> list[tuple[int, str]]:
        if m[0] == 2:
            await asyncio.sleep(0.001)
        return [m]

    w = Windows.keyed_tumbling(lambda kv: kv.key, DAY, init=int, fold=lambda kv, n: n + 1)
    (app.input(inp).async_flat_map(slow, name="slow")
     .partition_by(lambda m: m[1], name="by-key").window(w, name="w").send_to(app.output(out)))
    parts = {0: [(0, k) for k in "abcab"], 1: [(1, k) for k in "ccd"],
             2: [(2, k) for k in "abcdefg" * 8]}
    result = TestRunner(app).add_input(inp, parts).run(timeout=RUN_TIMEOUT)
    panes = result.messages(out)
    per_pane = Counter((p.key.key, p.key.pane_id) for p in panes)
    assert all(n == 1 for n in per_pane.values()), f"a pane fired more than once: {per_pane}"
    assert all(p.firing is DEFAULT for p in panes)
    totals: Counter[str] = Counter()
    for p in panes:
        totals[p.key.key] += p.message
    assert totals == Counter(k for msgs in parts.values() for _, k in msgs)
    # the panes of one key come from one consumer task: they land in one output partition
    where = {p.key.key: part for part, ps in result.partitions(out).items() for p in ps}
    assert set(where.values()) <= {0, 1}


def test_a_broadcast_stream_reaches_every_task_and_ends_once_all_producers_end() -> None:
    seen: Counter[int] = Counter()
    mem = MemorySystem()
    app = StreamApplication("bcast")
    inp = mem.input("in", partitions=3)

    async def slow(m: int) -> list[int]:  # partition 2's messages come after the others' ends
        await asyncio.sleep(0.005 if m > 3 else 0)
        return [m]

    (app.input(inp).async_flat_map(slow, name="slow").broadcast(name="all")
     .sink(lambda m: seen.update([m]), name="record"))
    parts = {0: [1, 2], 1: [3], 2: [4, 5, 6]}
    result = TestRunner(app).add_input(inp, parts).run(timeout=RUN_TIMEOUT)
    assert seen == {m: 3 for m in range(1, 7)}  # once per task
    assert result.status["done"] is True


def test_a_job_whose_inputs_are_all_empty_ends() -> None:
    mem = MemorySystem()
    app = StreamApplication("empty", config={"job.intermediate.stream.partitions": 3})
    inp = mem.input("in", partitions=2)
    out = mem.output("out")
    w = Windows.keyed_tumbling(lambda kv: kv.key, DAY)
    app.input(inp).partition_by(lambda m: m, name="p").window(w, name="w").send_to(
        app.output(out))
    result = TestRunner(app).add_input(inp, {0: [], 1: []}).run(timeout=RUN_TIMEOUT)
    assert result.messages(out) == []
    assert result.status["done"] is True


def test_watermarks_through_an_intermediate_stream_close_panes_before_the_end() -> None:
    """Input event time -> partition_by -> event-time window: panes close on the intermediate
    watermark (the minimum over its producers) while the input is still flowing, so the early
    panes come out before the last one, each once, as DEFAULT."""
    mem = MemorySystem()
    app = StreamApplication("wm", config={"job.intermediate.stream.partitions": 1})
    inp = mem.input("in", partitions=2, event_time=lambda m: m[1])
    out = mem.output("panes")
    w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                               fold=lambda kv, n: n + 1, event_time=lambda kv: kv.value[1])
    app.input(inp).partition_by(lambda m: m[0], name="p").window(w, name="w").send_to(
        app.output(out))
    parts = {p: [("k", float(t)) for t in range(0, 100, 2)] for p in range(2)}
    panes = TestRunner(app).add_input(inp, parts).run(timeout=RUN_TIMEOUT).messages(out)
    assert [(p.key.pane_id, p.message, p.firing) for p in panes] == \
        [(str(s), 10, DEFAULT) for s in range(0, 100_000, 10_000)]


@pytest.mark.parametrize("concurrency", [1, 8])
def test_event_time_panes_after_an_async_call_keeping_key_order_do_not_depend_on_concurrency(
        concurrency: int) -> None:
    """With ordering="key" the window receives each key's messages in input (event-time) order,
    so no message is late, whatever the concurrency: the task's watermark must not run ahead of
    messages still in flight."""
    mem = MemorySystem()
    app = StreamApplication("wm-async", config={"task.max.concurrency": concurrency})
    inp = mem.input("in", partitions=1, event_time=lambda m: m[1])
    out = mem.output("panes")

    async def call(m: tuple[str, float]) -> list[tuple[str, float]]:
        await asyncio.sleep(0.02 if m[1] == 0.0 else 0.0)
        return [m]

    w = Windows.keyed_tumbling(lambda m: m[0], timedelta(seconds=10), init=int,
                               fold=lambda m, n: n + 1, event_time=lambda m: m[1])
    (app.input(inp).async_flat_map(call, name="call", ordering="key", key=lambda m: m[0])
     .window(w, name="w").send_to(app.output(out)))
    messages = [("a", float(t)) for t in range(0, 40, 2)]
    result = TestRunner(app).add_input(inp, messages).run(timeout=RUN_TIMEOUT)
    assert firings(result.messages(out)) == [("a", str(s), "DEFAULT", 5)
                                             for s in range(0, 40_000, 10_000)]
    assert result.metrics.snapshot().get("wm-async-1-window-w.late-messages-dropped", 0) == 0


# --- triggers ---------------------------------------------------------------------------------------

def run_window(window: Any, messages: list[Any], config: dict[str, Any] | None = None) -> list[Any]:
    mem = MemorySystem()
    app = StreamApplication("trig", config=config)
    inp = mem.input("in", partitions=1)
    out = mem.output("panes")
    app.input(inp).window(window, name="w").send_to(app.output(out))
    return TestRunner(app).add_input(inp, messages).run(timeout=RUN_TIMEOUT).messages(out)


def keyed(**kw: Any) -> Any:
    """Keyed tumbling panes of 10 s on event time (seconds in ``m.value``); list values."""
    return Windows.keyed_tumbling(lambda m: m.key, timedelta(seconds=10),
                                  event_time=lambda m: m.value, **kw)


A5 = [KV("a", float(t)) for t in (1, 2, 3, 4, 5)]


def values(pane_message: list[KV[str, float]]) -> list[float]:
    return [m.value for m in pane_message]


def test_a_non_repeating_count_trigger_fires_once_per_pane() -> None:
    panes = run_window(keyed().early_trigger(Triggers.count(2)), [*A5, KV("b", 1.0)])
    assert [(k, f, values(v)) for k, _, f, v in firings(panes)] == [
        ("a", "EARLY", [1, 2]),
        ("a", "DEFAULT", [1, 2, 3, 4, 5]),
        ("b", "DEFAULT", [1]),
    ]


def test_repeat_count_accumulating_fires_every_n_with_everything_so_far() -> None:
    panes = run_window(keyed().early_trigger(Triggers.repeat(Triggers.count(2))), A5)
    assert [(f, values(v)) for _, _, f, v in firings(panes)] == [
        ("EARLY", [1, 2]), ("EARLY", [1, 2, 3, 4]), ("DEFAULT", [1, 2, 3, 4, 5])]


def test_repeat_count_discarding_fires_disjoint_chunks() -> None:
    w = keyed().early_trigger(Triggers.repeat(Triggers.count(2))).accumulation(
        AccumulationMode.DISCARDING)
    panes = run_window(w, A5)
    assert [(f, values(v)) for _, _, f, v in firings(panes)] == [
        ("EARLY", [1, 2]), ("EARLY", [3, 4]), ("DEFAULT", [5])]
    assert all(p.mode is AccumulationMode.DISCARDING for p in panes)


def test_a_firing_with_no_state_emits_nothing() -> None:
    """DISCARDING after 4 messages in twos: the pane is empty when it closes."""
    w = keyed().early_trigger(Triggers.repeat(Triggers.count(2))).accumulation(
        AccumulationMode.DISCARDING)
    panes = run_window(w, A5[:4])
    assert [(f, values(v)) for _, _, f, v in firings(panes)] == [
        ("EARLY", [1, 2]), ("EARLY", [3, 4])]


def test_a_default_firing_cancels_the_early_trigger_and_the_next_pane_starts_afresh() -> None:
    # pane [0, 10): 3 messages, the count(4) never fires; pane [10, 20): 4 messages, it fires
    messages = [KV("a", t) for t in (1.0, 2.0, 3.0, 11.0, 12.0, 13.0, 14.0)]
    panes = run_window(keyed().early_trigger(Triggers.count(4)), messages)
    assert [(pid, f, values(v)) for _, pid, f, v in firings(panes)] == [
        ("0", "DEFAULT", [1, 2, 3]),
        ("10000", "EARLY", [11, 12, 13, 14]),
        ("10000", "DEFAULT", [11, 12, 13, 14]),
    ]


def test_any_fires_on_its_first_child_and_once_per_pane() -> None:
    trigger = Triggers.any(Triggers.count(3), Triggers.time_since_first_message(timedelta(hours=1)))
    panes = run_window(keyed().early_trigger(trigger), [*A5, KV("a", 6.0), KV("a", 7.0)])
    assert [(f, values(v)) for _, _, f, v in firings(panes)] == [
        ("EARLY", [1, 2, 3]), ("DEFAULT", [1, 2, 3, 4, 5, 6, 7])]


def test_repeat_any_restarts_after_each_firing() -> None:
    trigger = Triggers.repeat(Triggers.any(
        Triggers.count(3), Triggers.time_since_first_message(timedelta(hours=1))))
    w = keyed().early_trigger(trigger).accumulation(AccumulationMode.DISCARDING)
    panes = run_window(w, [KV("a", float(t)) for t in range(1, 9)])
    assert [(f, values(v)) for _, _, f, v in firings(panes)] == [
        ("EARLY", [1, 2, 3]), ("EARLY", [4, 5, 6]), ("DEFAULT", [7, 8])]


def test_a_fold_window_emits_fold_values_per_firing() -> None:
    w = Windows.tumbling(timedelta(seconds=10), init=int, fold=lambda m, n: n + m,
                         event_time=lambda m: m)
    w = w.early_trigger(Triggers.repeat(Triggers.count(2)))
    panes = run_window(w, [1, 2, 3, 4, 5, 11])
    assert firings(panes) == [(None, "0", "EARLY", 3), (None, "0", "EARLY", 10),
                              (None, "0", "DEFAULT", 15), (None, "10000", "DEFAULT", 11)]


# --- late data ---------------------------------------------------------------------------------------

LATE_INPUT = [KV("a", 1.0), KV("a", 12.0), KV("a", 2.0), KV("a", 3.0), KV("a", 4.0)]


@pytest.mark.parametrize("late", ["count", "repeat"])
def test_late_trigger_fires_late_panes_within_the_allowed_lateness(late: str) -> None:
    trigger = Triggers.count(1) if late == "count" else Triggers.repeat(Triggers.count(1))
    w = keyed().allowed_lateness(timedelta(seconds=5)).late_trigger(trigger)
    panes = run_window(w, LATE_INPUT)
    expected = [("0", "DEFAULT", [1]), ("0", "LATE", [1, 2])]
    if late == "repeat":
        expected += [("0", "LATE", [1, 2, 3]), ("0", "LATE", [1, 2, 3, 4])]
    expected += [("10000", "DEFAULT", [12])]
    assert [(pid, f, values(v)) for _, pid, f, v in firings(panes)] == expected


def test_late_messages_past_the_lateness_or_without_a_late_trigger_are_dropped_and_counted() -> None:
    for w in (keyed(), keyed().allowed_lateness(timedelta(seconds=5)),
              keyed().allowed_lateness(timedelta(seconds=1)).late_trigger(Triggers.count(1))):
        mem = MemorySystem()
        app = StreamApplication("drop")
        inp = mem.input("in", partitions=1)
        out = mem.output("panes")
        app.input(inp).window(w, name="w").send_to(app.output(out))
        result = TestRunner(app).add_input(inp, LATE_INPUT).run(timeout=RUN_TIMEOUT)
        assert [(pid, f, values(v)) for _, pid, f, v in firings(result.messages(out))] == [
            ("0", "DEFAULT", [1]), ("10000", "DEFAULT", [12])]
        assert result.metrics["drop-1-window-w.late-messages-dropped"] == 3


# --- time triggers on real (processing) time ----------------------------------------------------------

def test_a_time_since_first_message_trigger_fires_once_at_a_window_tick() -> None:
    mem = MemorySystem()
    app = StreamApplication("timed")
    inp = mem.input("in", partitions=1)
    out = mem.output("panes")

    async def slow(m: int) -> list[int]:
        await asyncio.sleep(0.004)
        return [m]

    w = Windows.tumbling(DAY).early_trigger(
        Triggers.time_since_first_message(timedelta(milliseconds=20)))
    (app.input(inp).async_flat_map(slow, name="slow").window(w, name="w")
     .send_to(app.output(out)))
    result = TestRunner(app).add_input(inp, list(range(40))).run(timeout=RUN_TIMEOUT)
    assert result.plan.config["task.window.ms"] == 20
    panes = result.messages(out)
    early = [p for p in panes if p.firing is EARLY]
    final = [p for p in panes if p.firing is DEFAULT]
    assert sum(len(p.message) for p in final) == 40
    assert len({p.key.pane_id for p in panes}) <= 2  # unless the run crossed midnight UTC
    assert len(early) == len({p.key.pane_id for p in early}) == 1
    # fired ~20 ms after the first message, long before the 160 ms input ended
    assert 0 < len(early[0].message) < 40
    assert early[0].message == list(range(len(early[0].message)))


# --- many panes at end-of-stream -------------------------------------------------------------------

def many_keys_app(finish_fails_on: str | None = None) -> tuple[StreamApplication, Any, Any]:
    mem = MemorySystem()
    app = StreamApplication("eos-many")
    inp = mem.input("in", partitions=2)
    out = mem.output("panes")

    def count(kv: Any, n: int) -> int:
        return n + 1

    def row(pane: Any) -> tuple[str, int]:
        if pane.key.key == finish_fails_on:
            raise ValueError(f"no row for {pane.key.key}")
        return (pane.key.key, pane.message)

    w = Windows.keyed_tumbling(lambda kv: kv.key, DAY, init=int, fold=count)
    (app.input(inp).partition_by(lambda m: m, name="by-key").window(w, name="w")
     .map(row, name="row").send_to(app.output(out)))
    return app, inp, out


def test_more_panes_than_a_chunk_end_in_order_each_once() -> None:
    """10,000 panes open at the end (more than the runtime's chunk of 4,096 outputs): each
    fires once, in each task partition by key (rule 8), with its count."""
    app, inp, out = many_keys_app()
    keys = [f"k{i:05d}" for i in range(10_000)]
    parts = {0: keys + keys[:100], 1: keys[::-1]}
    result = TestRunner(app).add_input(inp, parts).run(timeout=60)
    rows = result.messages(out)
    assert sorted(rows) == sorted((k, 3 if k < "k00100" else 2) for k in keys)
    for part, got in result.partitions(out).items():
        assert [k for k, _ in got] == sorted(k for k, _ in got), f"partition {part} out of order"


def test_an_operator_failing_in_the_middle_of_end_of_stream_names_itself() -> None:
    """A map after the window fails on a pane past the first chunk: the run stops with a
    TaskError naming that operator and its cause, as it would on any message."""
    app, inp, out = many_keys_app(finish_fails_on="k08000")
    keys = [f"k{i:05d}" for i in range(10_000)]
    with pytest.raises(TaskError) as info:
        TestRunner(app).add_input(inp, {0: keys, 1: []}).run(timeout=60)
    text = str(info.value)
    assert "map-row' failed" in text and "window-w" in text and "no row for k08000" in text
