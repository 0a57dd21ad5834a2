"""Tumbling windows and the shared window machinery: triggers, accumulation, event time,
lateness, end of stream and restore (docs/semantics.md rules 7 and 8)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from operator_helpers import FakeClock, Metrics

from operators import build_operator
from operators.base import FailedAt, OperatorContext
from operators.state import InMemoryState
from operators.window import WATERMARK_KEY, TumblingWindowOperator
from samza_dsl.spec import WindowSpec
from samza_dsl.windows import AccumulationMode, FiringType, Triggers, Window, Windows

SEC = timedelta(seconds=1)
EARLY, DEFAULT, LATE = FiringType.EARLY, FiringType.DEFAULT, FiringType.LATE


def start_window(window: Window[Any, Any], clock: FakeClock, *, store: InMemoryState | None = None,
                 metrics: Any = None) -> Any:
    op = build_operator(WindowSpec("w", "w", ("stream:in",), "test.py:1", window=window))
    op.init(OperatorContext("task-0", {}, clock, {"w": store if store is not None
                                                  else InMemoryState()}, metrics))
    return op


def panes(outputs: list[Any]) -> list[tuple[Any, str, Any, str]]:
    return [(p.key.key, p.key.pane_id, p.message, p.firing.name) for p in outputs]


def feed(op: Any, clock: FakeClock, timed: list[tuple[int, Any]]) -> list[Any]:
    """Process messages at the given processing times; all outputs."""
    out: list[Any] = []
    for now, m in timed:
        clock.set(now)
        out += op.process(m)
    return out


def by_key(m: Any) -> Any:
    return m[0]


def at(m: Any) -> float:
    return m[1]


# -- processing time ----------------------------------------------------------------------------

def test_tumbling_pane_start_and_close_at_tick(clock: FakeClock) -> None:
    op = start_window(Windows.tumbling(SEC), clock)
    assert feed(op, clock, [(1500, "a"), (1999, "b")]) == []
    assert op.on_timer(1999) == []
    assert panes(op.on_timer(2000)) == [(None, "1000", ["a", "b"], "DEFAULT")]
    assert op.on_timer(5000) == []  # a DEFAULT firing clears the pane
    assert feed(op, clock, [(2000, "c")]) == []
    assert panes(op.on_timer(3000)) == [(None, "2000", ["c"], "DEFAULT")]
    assert op.spec.window.mode is AccumulationMode.ACCUMULATING
    assert op.on_timer(3000) == []


def test_keyed_fold_closes_panes_in_key_order(clock: FakeClock) -> None:
    """Panes that close together come out in key order, whatever order their first messages
    came in (which across input partitions depends on speed)."""
    w = Windows.keyed_tumbling(by_key, 10 * SEC, init=lambda: 0, fold=lambda m, n: n + m[1])
    op = start_window(w, clock)
    feed(op, clock, [(10, ("b", 1)), (20, ("a", 2)), (30, ("b", 3)), (10_500, ("a", 4))])
    assert panes(op.on_timer(10_000)) == [("a", "0", 2, "DEFAULT"), ("b", "0", 4, "DEFAULT")]
    assert panes(op.on_timer(20_000)) == [("a", "10000", 4, "DEFAULT")]


def test_non_repeating_early_count_fires_once_per_pane(clock: FakeClock) -> None:
    op = start_window(Windows.tumbling(SEC).early_trigger(Triggers.count(2)), clock)
    out = feed(op, clock, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)])
    assert panes(out) == [(None, "0", [1, 2], "EARLY")]
    assert panes(op.on_timer(1000)) == [(None, "0", [1, 2, 3, 4, 5], "DEFAULT")]
    out = feed(op, clock, [(1000, 6), (1001, 7)])  # a new pane has a new early trigger
    assert panes(out) == [(None, "1000", [6, 7], "EARLY")]


def test_repeating_early_count_accumulating(clock: FakeClock) -> None:
    w = Windows.tumbling(SEC).early_trigger(Triggers.repeat(Triggers.count(2)))
    op = start_window(w, clock)
    out = feed(op, clock, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)])
    assert panes(out) == [(None, "0", [1, 2], "EARLY"), (None, "0", [1, 2, 3, 4], "EARLY")]
    assert out[0].message == [1, 2]  # an emitted list pane does not grow with the window
    assert panes(op.on_timer(1000)) == [(None, "0", [1, 2, 3, 4, 5], "DEFAULT")]


def test_discarding_clears_after_every_firing_and_empty_firings_emit_nothing(
        clock: FakeClock) -> None:
    w = (Windows.keyed_tumbling(by_key, SEC, init=list, fold=lambda m, acc: [*acc, m[1]])
         .early_trigger(Triggers.repeat(Triggers.count(2)))
         .accumulation(AccumulationMode.DISCARDING))
    op = start_window(w, clock)
    out = feed(op, clock, [(0, ("k", 1)), (1, ("k", 2)), (2, ("k", 3)), (3, ("k", 4)),
                           (4, ("j", 5))])
    assert panes(out) == [("k", "0", [1, 2], "EARLY"), ("k", "0", [3, 4], "EARLY")]
    assert all(p.mode is AccumulationMode.DISCARDING for p in out)
    # k has no state left: its DEFAULT firing emits nothing; j's does
    assert panes(op.on_timer(1000)) == [("j", "0", [5], "DEFAULT")]
    assert list(op._store.all()) == []


def test_time_since_first_message_fires_at_a_tick_once(clock: FakeClock) -> None:
    w = Windows.tumbling(10 * SEC).early_trigger(Triggers.time_since_first_message(SEC))
    op = start_window(w, clock)
    feed(op, clock, [(100, "a"), (900, "b")])
    assert op.on_timer(1099) == []
    assert panes(op.on_timer(1100)) == [(None, "0", ["a", "b"], "EARLY")]
    feed(op, clock, [(1200, "c")])
    assert op.on_timer(5000) == []  # not repeating: once per pane
    assert panes(op.on_timer(10_000)) == [(None, "0", ["a", "b", "c"], "DEFAULT")]


def test_time_since_last_message_waits_for_quiet(clock: FakeClock) -> None:
    w = Windows.tumbling(10 * SEC).early_trigger(
        Triggers.repeat(Triggers.time_since_last_message(SEC)))
    op = start_window(w, clock)
    feed(op, clock, [(0, "a"), (800, "b")])
    assert op.on_timer(1000) == []  # b moved the deadline to 1800
    assert panes(op.on_timer(1800)) == [(None, "0", ["a", "b"], "EARLY")]
    assert op.on_timer(5000) == []  # repeat restarted: it waits for a message
    feed(op, clock, [(6000, "c")])
    assert panes(op.on_timer(7000)) == [(None, "0", ["a", "b", "c"], "EARLY")]


def test_any_fires_on_its_first_child_and_cancels_the_others(clock: FakeClock) -> None:
    trig = Triggers.any(Triggers.count(3), Triggers.time_since_first_message(SEC))
    w = Windows.keyed_tumbling(by_key, 10 * SEC).early_trigger(trig)
    op = start_window(w, clock)
    # pane a: the time child fires first; the count child is cancelled with it
    feed(op, clock, [(0, ("a", 1))])
    assert panes(op.on_timer(1000)) == [("a", "0", [("a", 1)], "EARLY")]
    assert feed(op, clock, [(1100, ("a", 2)), (1200, ("a", 3)), (1300, ("a", 4))]) == []
    # pane b: the count child fires first; the time child is cancelled with it
    out = feed(op, clock, [(2000, ("b", 1)), (2001, ("b", 2)), (2002, ("b", 3))])
    assert panes(out) == [("b", "0", [("b", 1), ("b", 2), ("b", 3)], "EARLY")]
    assert op.on_timer(3000) == []


def test_repeat_of_any_restarts_the_whole_any(clock: FakeClock) -> None:
    trig = Triggers.repeat(Triggers.any(Triggers.count(2), Triggers.time_since_first_message(SEC)))
    op = start_window(Windows.tumbling(10 * SEC).early_trigger(trig), clock)
    assert panes(feed(op, clock, [(0, 1), (10, 2)])) == [(None, "0", [1, 2], "EARLY")]
    feed(op, clock, [(100, 3)])
    assert op.on_timer(1000) == []  # the first timer belonged to the fired any
    assert panes(op.on_timer(1100)) == [(None, "0", [1, 2, 3], "EARLY")]
    assert panes(feed(op, clock, [(1200, 4), (1300, 5)])) == [(None, "0", [1, 2, 3, 4, 5], "EARLY")]


def test_default_firing_cancels_the_early_trigger(clock: FakeClock) -> None:
    w = Windows.tumbling(SEC).early_trigger(Triggers.time_since_first_message(5 * SEC))
    op = start_window(w, clock)
    feed(op, clock, [(0, "a")])
    assert panes(op.on_timer(1000)) == [(None, "0", ["a"], "DEFAULT")]
    assert op.on_timer(5000) == []
    assert op._early == {} and op._timers == []


def test_a_tick_runs_timers_in_time_order_and_a_close_goes_first_on_ties(
        clock: FakeClock) -> None:
    w = Windows.keyed_tumbling(by_key, SEC).early_trigger(
        Triggers.time_since_first_message(timedelta(milliseconds=900)))
    op = start_window(w, clock)
    feed(op, clock, [(0, ("early", 1)), (100, ("tie", 2))])  # timers at 900 and 1000
    assert panes(op.on_timer(1000)) == [
        ("early", "0", [("early", 1)], "EARLY"),
        ("early", "0", [("early", 1)], "DEFAULT"),
        ("tie", "0", [("tie", 2)], "DEFAULT"),
    ]


# -- event time ---------------------------------------------------------------------------------

def event_window(**kw: Any) -> Window[Any, Any]:
    return Windows.keyed_tumbling(by_key, 10 * SEC, event_time=at, **kw)


def test_event_time_panes_close_on_the_watermark(clock: FakeClock) -> None:
    op = start_window(event_window(init=lambda: 0, fold=lambda m, n: n + 1), clock)
    assert op.process(("a", 1.0)) == [] and op.process(("b", 9.999)) == []
    assert op.on_timer(10**9) == []  # processing time does not close event-time panes
    assert op.process(("a", 3.0)) == []  # out of order but on time: pane 0 is still open
    assert op.watermark == 9_999
    assert op.on_watermark(9_999) == []
    assert panes(op.on_watermark(10_000)) == [("a", "0", 2, "DEFAULT"), ("b", "0", 1, "DEFAULT")]
    assert op.on_watermark(5_000) == [] and op.watermark == 10_000  # it never goes back
    assert op.process(("a", 19.0)) == [] and op.process(("b", 11.0)) == []
    # a message's event time moves the watermark: pane 10000 closes before c joins pane 30000
    assert panes(op.process(("c", 31.5))) == [("a", "10000", 1, "DEFAULT"),
                                               ("b", "10000", 1, "DEFAULT")]
    assert op._store.get(WATERMARK_KEY) == 31_500
    assert panes(op.on_end_of_stream()) == [("c", "30000", 1, "DEFAULT")]


def test_late_messages_are_dropped_and_counted(clock: FakeClock) -> None:
    metrics = Metrics()
    op = start_window(event_window(), clock, metrics=metrics)
    op.process(("a", 1.0))
    op.process(("a", 25.0))
    assert op.process(("a", 2.0)) == []
    assert op.late_dropped == 1
    assert metrics.counters["w.late-messages-dropped"].value == 1
    # without a metrics registry (unit tests) the count still works
    op2 = start_window(event_window(), clock, metrics=None)
    op2.process(("a", 25.0))
    op2.process(("a", 2.0))
    assert op2.late_dropped == 1
    # allowed lateness without a late trigger keeps nothing: still dropped
    op3 = start_window(event_window().allowed_lateness(60 * SEC), clock, metrics=metrics)
    op3.process(("a", 25.0))
    assert op3.process(("a", 2.0)) == [] and op3.late_dropped == 1
    assert op3._store.get((0, "a")) is None
    assert metrics.counters["w.late-messages-dropped"].value == 2


def test_with_late_to_a_late_message_is_an_output_naming_where_it_came_from(
        clock: FakeClock) -> None:
    from samza_dsl.late import LateMessage

    metrics = Metrics()
    op = build_operator(WindowSpec("w", "w", ("stream:in",), "test.py:1", window=event_window(),
                                   late_to="late"))
    source: list[Any] = [("in", 3, 17)]
    op.init(OperatorContext("task-0", {}, clock, {"w": InMemoryState()}, metrics,
                            source=lambda: source[0]))
    op.process(("a", 25.0))
    assert op.process(("a", 2.5)) == [
        LateMessage(("a", 2.5), "w", "a", "0", 2500, 25000, "in", 3, 17)]
    source[0] = None  # a message that no input message caused
    [late] = op.process(("b", 3.0))
    assert (late.stream, late.partition, late.offset) == (None, None, None)
    assert op.late_dropped == 2
    assert metrics.counters["w.late-messages.in"].value == 1
    assert metrics.counters["w.late-messages.-"].value == 1
    assert metrics.counters["w.late-messages-sent"].value == 2


def test_allowed_lateness_keeps_panes_updatable_and_late_trigger_emits_late_panes(
        clock: FakeClock) -> None:
    w = event_window().allowed_lateness(20 * SEC).late_trigger(Triggers.count(1))
    op = start_window(w, clock)
    op.process(("a", 1.0))
    assert panes(op.process(("a", 12.0))) == [("a", "0", [("a", 1.0)], "DEFAULT")]
    # late but within lateness: folded into the kept state; count(1) fires once per pane
    assert panes(op.process(("a", 2.0))) == [("a", "0", [("a", 1.0), ("a", 2.0)], "LATE")]
    assert op.process(("a", 3.0)) == []
    op.flush_state()  # pane values reach the store at a commit
    assert op._store.get((0, "a")) == [("a", 1.0), ("a", 2.0), ("a", 3.0)]
    # a pane that had no on-time data still takes late data
    assert panes(op.process(("b", 4.0))) == [("b", "0", [("b", 4.0)], "LATE")]
    assert op.late_dropped == 0
    # watermark 30s = pane end + lateness: the state is dropped without a firing
    assert panes(op.on_watermark(30_000)) == [("a", "10000", [("a", 12.0)], "DEFAULT")]
    assert op._store.get((0, "a")) is None and op._store.get((0, "b")) is None
    assert op.process(("a", 5.0)) == [] and op.late_dropped == 1


def test_repeating_late_trigger_emits_per_late_message_and_discarding_keeps_only_late_data(
        clock: FakeClock) -> None:
    w = (event_window(init=lambda: 0, fold=lambda m, n: n + 1)
         .allowed_lateness(60 * SEC)
         .late_trigger(Triggers.repeat(Triggers.count(1)))
         .accumulation(AccumulationMode.DISCARDING))
    op = start_window(w, clock)
    op.process(("a", 1.0))
    op.process(("a", 2.0))
    assert panes(op.process(("a", 15.0))) == [("a", "0", 2, "DEFAULT")]
    assert panes(op.process(("a", 3.0))) == [("a", "0", 1, "LATE")]
    assert panes(op.process(("a", 4.0))) == [("a", "0", 1, "LATE")]


def test_messages_beyond_allowed_lateness_are_dropped(clock: FakeClock) -> None:
    w = event_window().allowed_lateness(5 * SEC).late_trigger(Triggers.count(1))
    op = start_window(w, clock)
    op.process(("a", 14.0))
    assert panes(op.process(("a", 2.0))) == [("a", "0", [("a", 2.0)], "LATE")]  # 14 < 10 + 5
    op.process(("a", 15.0))
    assert op.process(("a", 3.0)) == [] and op.late_dropped == 1  # 15 >= 10 + 5


def test_late_trigger_time_based_fires_at_a_tick(clock: FakeClock) -> None:
    w = event_window().allowed_lateness(60 * SEC).late_trigger(
        Triggers.time_since_first_message(SEC))
    op = start_window(w, clock)
    op.process(("a", 20.0))
    clock.set(500)
    assert op.process(("a", 2.0)) == []
    assert op.on_timer(1499) == []
    assert panes(op.on_timer(1500)) == [("a", "0", [("a", 2.0)], "LATE")]


def test_early_triggers_count_processing_time_in_event_time_windows(clock: FakeClock) -> None:
    w = event_window().early_trigger(Triggers.time_since_first_message(SEC))
    op = start_window(w, clock)
    clock.set(5000)
    op.process(("a", 1.0))
    assert op.on_timer(5999) == []
    assert panes(op.on_timer(6000)) == [("a", "0", [("a", 1.0)], "EARLY")]


# -- end of stream ------------------------------------------------------------------------------

def test_end_of_stream_fires_open_panes_by_start_then_encoded_key(clock: FakeClock) -> None:
    w = Windows.keyed_tumbling(by_key, SEC, init=lambda: 0, fold=lambda m, n: n + 1)
    op = start_window(w, clock)
    feed(op, clock, [(2500, ("b", 0)), (2500, (10, 0)), (1500, ("a", 0)), (1500, (2, 0)),
                     (1500, (None, 0)), (2500, ("a", 0))])
    assert [(k, pid) for k, pid, _, f in panes(op.on_end_of_stream())] == [
        (None, "1000"), (2, "1000"), ("a", "1000"), (10, "2000"), ("a", "2000"), ("b", "2000")]
    assert list(op._store.all()) == [] and op.on_timer(10**6) == []


@pytest.mark.parametrize("size", [1, 2, 4, 100])
def test_end_of_stream_in_chunks_makes_each_chunk_as_it_is_taken(clock: FakeClock,
                                                                 size: int) -> None:
    """``end_of_stream_chunks(size)``: the panes of ``on_end_of_stream``, in the same order,
    in lists of ``size`` (the last one shorter); each made when it is taken, and the state
    dropped after the last."""
    w = Windows.keyed_tumbling(by_key, SEC, init=lambda: 0, fold=lambda m, n: n + 1)
    timed = [(1500 + 1000 * (i % 3), (f"k{i % 7}", 0)) for i in range(30)]
    whole, chunked = start_window(w, clock), start_window(w, clock)
    feed(whole, clock, timed)
    feed(chunked, clock, timed)
    want = panes(whole.on_end_of_stream())
    chunks = chunked.end_of_stream_chunks(size)
    first = next(chunks)
    assert len(first) == min(size, len(want)) and chunked.panes_emitted == len(first)
    rest = list(chunks)
    assert all(len(c) == size for c in [first, *rest][:-1]) and len([first, *rest][-1]) > 0
    assert panes([p for c in [first, *rest] for p in c]) == want
    assert list(chunked._store.all()) == [] and chunked.on_timer(10**6) == []


def test_end_of_stream_drops_panes_kept_for_lateness(clock: FakeClock) -> None:
    w = event_window().allowed_lateness(60 * SEC).late_trigger(Triggers.count(1))
    op = start_window(w, clock)
    op.process(("a", 1.0))
    op.process(("a", 11.0))  # closes pane 0 (kept for lateness)
    assert panes(op.on_end_of_stream()) == [("a", "10000", [("a", 11.0)], "DEFAULT")]
    assert [k for k, _ in op._store.all()] == [WATERMARK_KEY]


# -- state, restore, user functions ------------------------------------------------------------

def test_restore_from_the_store(clock: FakeClock) -> None:
    store = InMemoryState()
    w = event_window(init=lambda: 0, fold=lambda m, n: n + 1).allowed_lateness(
        30 * SEC).late_trigger(Triggers.count(1))
    op = start_window(w, clock, store=store)
    for m in [("a", 1.0), ("b", 2.0), ("a", 11.0), ("b", 12.0)]:
        op.process(m)
    op.flush_state()  # the commit before the restart writes the pane values and watermark
    # a restart over the same store; the watermark is stored when panes close (at 11.0 here)
    # and as of each commit (12.0), which is all a restore needs to tell closed panes from
    # open ones
    again = start_window(w, clock, store=store)
    assert again.watermark == 12_000
    assert panes(again.process(("a", 3.0))) == [("a", "0", 2, "LATE")]
    assert panes(again.on_end_of_stream()) == [("a", "10000", 1, "DEFAULT"),
                                                ("b", "10000", 1, "DEFAULT")]


def test_restore_processing_time_panes_fire_at_the_next_tick(clock: FakeClock) -> None:
    store = InMemoryState()
    op = start_window(Windows.tumbling(SEC), clock, store=store)
    feed(op, clock, [(100, "a"), (200, "b")])
    op.flush_state()  # the commit before the restart
    again = start_window(Windows.tumbling(SEC), clock, store=store)
    assert panes(again.on_timer(1000)) == [(None, "0", ["a", "b"], "DEFAULT")]


@pytest.mark.parametrize("window", [
    Windows.tumbling(SEC, init=lambda: 0, fold=lambda m, n: None),
    Windows.keyed_tumbling(by_key, SEC, init=lambda: 0, fold=lambda m, n: None, event_time=at),
])
def test_fold_returning_none_is_an_error(window: Window[Any, Any], clock: FakeClock) -> None:
    op = start_window(window, clock)
    with pytest.raises(ValueError, match="fold returned None"):
        op.process(("k", 1.0))


def test_user_function_objects_get_init_and_close(clock: FakeClock) -> None:
    calls: list[str] = []

    class KeyOf:
        def init(self, ctx: Any) -> None:
            calls.append(f"init {ctx.task_name}")

        def __call__(self, m: Any) -> Any:  # a Window's functions must be callable
            return m[0]

        def close(self) -> None:
            calls.append("close")

    op = start_window(Windows.keyed_tumbling(KeyOf(), SEC), clock)
    feed(op, clock, [(0, ("k", 1))])
    assert panes(op.on_timer(1000)) == [("k", "0", [("k", 1)], "DEFAULT")]
    op.close()
    assert calls == ["init task-0", "close"]


def test_process_before_init_raises() -> None:
    op = TumblingWindowOperator(WindowSpec("w", "w", ("stream:in",), "", window=Windows.tumbling(SEC)))
    with pytest.raises(RuntimeError, match="init"):
        op.process("x")


# -- a reference model ----------------------------------------------------------------------------

events = st.lists(st.tuples(st.sampled_from(["a", "b", "c", 1, 2]),
                            st.integers(min_value=0, max_value=60_000)), max_size=60)


@settings(max_examples=200, deadline=None)
@given(events, st.sampled_from([1000, 5000, 10_000]))
def test_event_time_fold_equals_a_reference_model(evs: list[tuple[Any, int]], size: int) -> None:
    """Sums per (key, pane) equal a plain-Python model of rule 8: the watermark is the max event
    time seen; a message whose pane end <= watermark is late and dropped."""
    w = Windows.keyed_tumbling(by_key, timedelta(milliseconds=size), init=lambda: 0,
                               fold=lambda m, n: n + m[1], event_time=lambda m: m[1] / 1000)
    op = start_window(w, FakeClock())
    out: list[Any] = []
    for e in evs:
        out += op.process(e)
    out += op.on_end_of_stream()
    model: dict[tuple[Any, int], int] = {}
    wm, dropped = -1, 0
    for key, t in evs:
        wm = max(wm, t)
        start = t - t % size
        if start + size <= wm:
            dropped += 1
            continue
        model[(key, start)] = model.get((key, start), 0) + t
    got = {(p.key.key, int(p.key.pane_id)): p.message for p in out}
    assert len(got) == len(out)  # each pane fires once
    assert all(p.firing is DEFAULT for p in out)
    assert got == model
    assert op.late_dropped == dropped
    # panes come out in closing order: by start
    starts = [int(p.key.pane_id) for p in out]
    assert starts == sorted(starts)


# -- pane values in memory, written at commit -----------------------------------------------------

class CountingState(InMemoryState):
    """An in-memory store that counts the reads and writes of pane values."""

    __slots__ = ("reads", "writes", "deletes")

    def __init__(self) -> None:
        super().__init__()
        self.reads = self.writes = self.deletes = 0
        data_get, data_put = self.get, self.put

        def get(k: Any) -> Any:
            self.reads += 1
            return data_get(k)

        def put(k: Any, v: Any) -> None:
            self.writes += 1
            data_put(k, v)
        self.get = self.peek = get
        self.put = put

    def delete(self, key: Any) -> None:
        self.deletes += 1
        super().delete(key)


def test_pane_values_reach_the_store_only_at_flush_state(clock: FakeClock) -> None:
    store = CountingState()
    op = start_window(event_window(init=lambda: 0, fold=lambda m, n: n + 1), clock, store=store)
    for i in range(100):
        op.process(("ab"[i % 2], 1.0 + i / 100))
    assert store.get((0, "a")) is None and store.writes == 0
    op.flush_state()  # the two panes, and the watermark as of the commit
    assert (store.get((0, "a")), store.get((0, "b")), store.writes) == (50, 50, 3)
    op.flush_state()  # nothing changed since: nothing written
    assert store.writes == 3
    op.process(("a", 2.0))
    op.flush_state()
    assert (store.get((0, "a")), store.writes) == (51, 5)
    # a closed pane leaves memory and the store
    assert panes(op.on_watermark(10_000)) == [("a", "0", 51, "DEFAULT"), ("b", "0", 50, "DEFAULT")]
    assert op._dirty == {} and op._clean == {} and store.get((0, "a")) is None


def _held(op: Any) -> int:
    """The panes a tumbling window holds in memory: values and index entries."""
    return sum(len(p) for index in (op._dirty, op._clean, op._open, op._retained)
               for p in index.values())


def test_pane_cache_bounds_the_panes_a_commit_keeps(clock: FakeClock) -> None:
    """A commit that leaves more panes in memory (values, and keys in the index) than
    ``pane.cache.size`` spills them to the store, from where they are read back."""
    store = CountingState()
    op = build_operator(WindowSpec("w", "w", ("stream:in",), "test.py:1",
                                   window=event_window(init=lambda: 0, fold=lambda m, n: n + 1)))
    op.init(OperatorContext("task-0", {"stores.w.pane.cache.size": 40}, clock, {"w": store}))
    keys = [f"k{i}" for i in range(30)]
    for k in keys:
        op.process((k, 1.0))
    op.flush_state()  # 30 values stay, with the 30 keys of the index: 60 panes held
    assert op._spilled == {0} and _held(op) == 0  # all in the store
    reads = store.reads
    for k in keys:  # read back from the store
        op.process((k, 2.0))
    assert store.reads - reads == 30 and _held(op) == 30
    out = op.on_end_of_stream()
    assert [(p.key.key, p.message) for p in out] == sorted((k, 2) for k in keys)


@pytest.mark.parametrize("commits", [False, True])
def test_a_window_past_its_pane_cache_keeps_its_panes_in_the_store(
        clock: FakeClock, commits: bool) -> None:
    """More open panes than ``pane.cache.size``: the start holding them is spilled. Its values
    and keys leave memory for the store, its panes are read back from there when they change,
    and they close in key order, with their latest values, at the watermark and at the end."""
    store = CountingState()
    op = build_operator(WindowSpec("w", "w", ("stream:in",), "test.py:1",
                                   window=event_window(init=lambda: 0, fold=lambda m, n: n + 1)))
    op.init(OperatorContext("task-0", {"stores.w.pane.cache.size": 100}, clock, {"w": store}))
    keys = [f"k{i:04d}" for i in range(1000)]
    shuffled = keys[::-1][500:] + keys[::-1][:500]
    most = 0
    for rnd in range(3):
        for i, k in enumerate(shuffled):
            op.process((k, 1.0 + rnd))
            most = max(most, _held(op))
            if commits and i % 97 == 0:
                op.flush_state()
    assert op._spilled == {0} and most <= 126  # the bound, and a quarter of it between looks
    out = op.process(("late-comer", 12.0))  # the window's watermark closes start 0
    assert [(p.key.key, p.message) for p in out] == [(k, 3) for k in keys]
    assert op._spilled == set() and [pk for pk, _ in store.all()] == [WATERMARK_KEY]
    for k in shuffled:  # start 10000, then the end of the stream
        op.process((k, 13.0))
    out = op.on_end_of_stream()
    assert [(p.key.key, p.message) for p in out] == [(k, 1) for k in sorted(keys + ["late-comer"])]
    assert [pk for pk, _ in store.all()] == [WATERMARK_KEY] and _held(op) == 0


def test_a_pane_that_never_reached_the_store_closes_with_no_store_delete(
        clock: FakeClock) -> None:
    """Panes opened and closed between two commits live in memory only: closing them, at the
    watermark or at end-of-stream, deletes nothing from the store (and so writes no changelog
    tombstone). A start with panes written at a commit deletes all its panes, those opened
    after the commit too, and a start that closed forgets it was written."""
    store = CountingState()
    op = start_window(event_window(init=lambda: 0, fold=lambda m, n: n + 1), clock, store=store)
    for k in "abc":
        op.process((k, 1.0))
    assert [p.key.key for p in op.on_watermark(10_000)] == ["a", "b", "c"]
    assert store.deletes == 0
    op.process(("a", 11.0))
    op.flush_state()  # a commit: pane (10000, "a") reaches the store
    op.process(("b", 12.0))  # a pane of the same start, after the commit
    assert store.get((10_000, "a")) == 1 and store.deletes == 0
    out = op.process(("c", 21.0))  # a pane of a later start, never written; the window's
    # own watermark (the latest event time) closes start 10000
    assert [(p.key.pane_id, p.key.key) for p in out] == [("10000", "a"), ("10000", "b")]
    assert store.deletes == 2 and store.get((10_000, "a")) is None
    assert op._stored == set()
    assert [(p.key.pane_id, p.key.key) for p in op.on_end_of_stream()] == [("20000", "c")]
    assert store.deletes == 2 and len(store) == 1  # the watermark's entry only
    op.flush_state()
    op.process(("d", 31.0))
    op.flush_state()
    assert [p.key.key for p in op.on_end_of_stream()] == ["d"]
    assert store.deletes == 3 and store.get((30_000, "d")) is None


def test_restored_panes_are_deleted_from_the_store_when_they_close(clock: FakeClock) -> None:
    store = CountingState()
    w = event_window(init=lambda: 0, fold=lambda m, n: n + 1)
    op = start_window(w, clock, store=store)
    op.process(("a", 1.0))
    op.process(("b", 2.0))
    op.flush_state()
    again = start_window(w, clock, store=store)
    again.process(("c", 3.0))
    assert [(p.key.key, p.message) for p in again.on_watermark(10_000)] == \
        [("a", 1), ("b", 1), ("c", 1)]
    assert store.get((0, "a")) is None and store.get((0, "b")) is None


def test_a_restart_sees_the_panes_of_the_last_flush_state_only(clock: FakeClock) -> None:
    store = InMemoryState()
    w = event_window(init=lambda: 0, fold=lambda m, n: n + 1)
    op = start_window(w, clock, store=store)
    op.process(("a", 1.0))
    op.flush_state()  # a commit
    op.process(("a", 2.0))  # not committed: a crash loses it, the input is read again
    again = start_window(w, clock, store=store)
    assert panes(again.on_end_of_stream()) == [("a", "0", 1, "DEFAULT")]


# -- a run of messages in one call, with the window's own watermark ---------------------------------

def feed_runs(op: Any, msgs: list[Any], run: Any = None) -> list[Any]:
    """``msgs`` as the Spark passes hand them to a window: runs through ``process_run`` (or
    ``run(i, n)``), and each message it stops at through ``process``."""
    out: list[Any] = []
    i, n = 0, len(msgs)
    while i < n:
        j = op.process_run(msgs, i, n, ()) if run is None else run(i, n)
        assert i <= j <= n
        if j < n:
            out += op.process(msgs[j])
            j += 1
        i = j
    return out


# times in ms with fractions that rounding ties and pane edges reach (x.4999, x.5, x.5001)
run_times = st.tuples(st.integers(min_value=0, max_value=40_000),
                      st.sampled_from([0.0, 0.4999, 0.5, 0.5001, -0.5, -0.4999]))
run_events = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), run_times), max_size=80)


@settings(max_examples=200, deadline=None)
@given(run_events, st.sampled_from([1000, 5000]), st.sampled_from([0, 3000]),
       st.booleans())
def test_a_run_in_one_call_equals_message_by_message_with_its_own_watermark(
        evs: list[tuple[str, tuple[int, float]]], size: int, lateness: int,
        mostly_in_order: bool) -> None:
    """With the window's own watermark (a Spark pass), ``process_run`` stops before a message
    that would close panes or is late: the panes, their order, the late counts and the
    watermark are those of ``process`` message by message."""
    msgs = [(k, (ms + frac) / 1000) for k, (ms, frac) in evs]
    if mostly_in_order:
        msgs.sort(key=lambda m: m[1])
        msgs[::7] = reversed(msgs[::7])  # some disorder
    w = Windows.keyed_tumbling(by_key, timedelta(milliseconds=size), init=lambda: 0,
                               fold=lambda m, n: n + 1, event_time=at)
    if lateness:
        w = w.allowed_lateness(timedelta(milliseconds=lateness)).late_trigger(Triggers.count(1))
    one, runs = start_window(w, FakeClock()), start_window(w, FakeClock())
    assert one.local_watermark and runs.local_watermark
    out_one = [o for m in msgs for o in one.process(m)]
    out_runs = feed_runs(runs, msgs)
    assert panes(out_runs) == panes(out_one)
    assert runs.watermark == one.watermark
    assert runs.late_dropped == one.late_dropped
    assert panes(runs.on_end_of_stream()) == panes(one.on_end_of_stream())


def feed_columns(op: Any, msgs: list[Any], keys: list[Any], xs: list[float],
                 folded: list[Any] | None) -> list[Any]:
    """``feed_runs`` with the runs given as columns (``process_columns``)."""
    return feed_runs(op, msgs, lambda i, n: op.process_columns(keys, xs, folded, i, n))


@settings(max_examples=200, deadline=None)
@given(run_events, st.sampled_from([1000, 5000]), st.sampled_from([0, 3000]),
       st.booleans(), st.booleans())
def test_a_run_given_as_columns_equals_a_run_of_messages(
        evs: list[tuple[str, tuple[int, float]]], size: int, lateness: int,
        mostly_in_order: bool, reads_message: bool) -> None:
    """``process_columns`` (the keys and the times in ms given as columns, the fold given the
    messages or, where it never reads them, None) makes the panes, late counts and watermark
    that ``process_run`` makes over the messages."""
    msgs = [(k, (ms + frac) / 1000) for k, (ms, frac) in evs]
    if mostly_in_order:
        msgs.sort(key=lambda m: m[1])
        msgs[::7] = reversed(msgs[::7])
    fold = (lambda m, acc: acc + [m[1]]) if reads_message else (lambda _m, n: n + 1)
    w = Windows.keyed_tumbling(by_key, timedelta(milliseconds=size),
                               init=list if reads_message else (lambda: 0), fold=fold,
                               event_time=at)
    if lateness:
        w = w.allowed_lateness(timedelta(milliseconds=lateness)).late_trigger(Triggers.count(1))
    runs, cols = start_window(w, FakeClock()), start_window(w, FakeClock())
    out_runs = feed_runs(runs, msgs)
    out_cols = feed_columns(cols, msgs, [m[0] for m in msgs], [m[1] * 1000.0 for m in msgs],
                            msgs if reads_message else None)
    assert panes(out_cols) == panes(out_runs)
    assert cols.watermark == runs.watermark
    assert cols.late_dropped == runs.late_dropped
    assert panes(cols.on_end_of_stream()) == panes(runs.on_end_of_stream())


def test_a_run_of_columns_names_the_record_its_fold_fails_on() -> None:
    def fold(_m: Any, n: int) -> int:
        if n == 2:
            raise ValueError("three is too many")
        return n + 1
    w = Windows.keyed_tumbling(by_key, timedelta(seconds=1), init=lambda: 0, fold=fold,
                               event_time=at)
    op = start_window(w, FakeClock())
    keys = ["a", "b", "a", "a", "b"]
    with pytest.raises(FailedAt) as failed:
        op.process_columns(keys, [100.0, 200.0, 300.0, 400.0, 500.0], None, 0, len(keys))
    assert failed.value.index == 3 and "three is too many" in str(failed.value.cause)


def test_a_run_stops_before_the_message_that_closes_a_pane() -> None:
    w = Windows.keyed_tumbling(by_key, timedelta(seconds=1), init=lambda: 0,
                               fold=lambda m, n: n + 1, event_time=at)
    op = start_window(w, FakeClock())
    msgs = [("a", 0.1), ("b", 0.2), ("a", 0.9995), ("a", 1.0), ("b", 0.3), ("a", 1.5)]
    # 0.9995 s rounds to 1000 ms: the next pane, whose first message closes pane 0
    assert op.process_run(msgs, 0, len(msgs), ()) == 2
    assert op.watermark == 200
    assert panes(op.process(msgs[2])) == [("a", "0", 1, "DEFAULT"), ("b", "0", 1, "DEFAULT")]
    # ("b", 0.3) is late now: the run stops before it
    assert op.process_run(msgs, 3, len(msgs), ()) == 4
    assert op.process(msgs[4]) == [] and op.late_dropped == 1
    assert op.process_run(msgs, 5, len(msgs), ()) == len(msgs)
    assert op.watermark == 1500


# -- commits never change what a window emits --------------------------------------------------

commit_steps = st.lists(st.one_of(
    st.tuples(st.just("msg"), st.sampled_from(["a", "b", "c", "d", 1]),
              st.integers(min_value=0, max_value=40)),
    st.tuples(st.just("commit"), st.none(), st.none()),
    st.tuples(st.just("watermark"), st.none(), st.integers(min_value=0, max_value=50))),
    max_size=70)
window_kinds = st.sampled_from(["plain", "early-discarding", "late", "processing"])


def _window_of(kind: str) -> Window[Any, Any]:
    fold: dict[str, Any] = {"init": lambda: 0, "fold": lambda m, n: n * 31 + m[1] + 1}
    size = timedelta(seconds=10)
    if kind == "processing":
        return Windows.keyed_tumbling(by_key, size, **fold)
    if kind == "early-discarding":
        return (Windows.keyed_tumbling(by_key, size, event_time=at, **fold)
                .early_trigger(Triggers.repeat(Triggers.count(2)))
                .accumulation(AccumulationMode.DISCARDING))
    if kind == "late":
        return (Windows.keyed_tumbling(by_key, size, event_time=at, **fold)
                .allowed_lateness(timedelta(seconds=20))
                .late_trigger(Triggers.repeat(Triggers.count(1))))
    return Windows.keyed_tumbling(by_key, size, event_time=at, **fold)


@settings(max_examples=300, deadline=None)
@given(commit_steps, window_kinds, st.sampled_from([1, 2, 100_000]))
def test_commits_never_change_what_a_window_emits_nor_its_order(
        steps: list[tuple[str, Any, Any]], kind: str, cache: int) -> None:
    """The same messages, watermarks (window ticks without event time) and end-of-stream
    through a window that never commits and one that commits (``flush_state``) between
    them, keeping ``cache`` values in memory: the same panes, in the same order. Panes that
    close together come out in the order of their first messages, whether those came before
    or after a commit."""
    def run(commits: bool) -> list[tuple[Any, ...]]:
        clock = FakeClock()
        op = build_operator(WindowSpec("w", "w", ("stream:in",), "test.py:1",
                                       window=_window_of(kind)))
        op.init(OperatorContext("task-0", {"stores.w.pane.cache.size": cache}, clock,
                                {"w": InMemoryState()}))
        out: list[Any] = []
        for what, key, t in steps:
            if what == "msg":
                clock.set(t * 1000)
                out += op.process((key, float(t)))
            elif what == "commit":
                if commits:
                    op.flush_state()
            elif kind == "processing":
                out += op.on_timer(t * 1000)
            else:
                out += op.on_watermark(t * 1000)
        out += op.on_end_of_stream()
        return [(p.key.key, p.key.pane_id, p.message, p.firing.name) for p in out]
    assert run(True) == run(False)


@pytest.mark.parametrize("commit_first", [False, True])
def test_a_discarding_pane_stays_open_after_an_early_firing(
        clock: FakeClock, commit_first: bool) -> None:
    """DISCARDING with an early trigger: a pane whose early firing cleared its value stays
    open, its next message starts from ``init()``, and it closes with the others in key
    order, whether or not a commit came first."""
    w = (event_window(init=lambda: 0, fold=lambda m, n: n + 1)
         .early_trigger(Triggers.repeat(Triggers.count(2)))
         .accumulation(AccumulationMode.DISCARDING))
    op = start_window(w, clock)
    if commit_first:
        op.process(("z", 1.0))
        op.flush_state()
    out = [*op.process(("c", 2.0)), *op.process(("a", 2.0))]
    out += op.process(("a", 3.0))  # a's early firing: its value is cleared
    out += op.process(("b", 4.0))
    out += op.process(("a", 5.0))
    out += op.on_watermark(10_000)
    assert panes(out) == [("a", "0", 2, "EARLY"), ("a", "0", 1, "DEFAULT"),
                          ("b", "0", 1, "DEFAULT"), ("c", "0", 1, "DEFAULT"),
                          *([("z", "0", 1, "DEFAULT")] * commit_first)]
    assert op._early == {}


class _OnePaneAtATime(TumblingWindowOperator):
    """A tumbling window closing each start one ``_close_pane`` at a time, as every window did
    before whole starts closed in one loop (``_close_start``)."""

    def _close_start(self, start: int, out: list[Any]) -> None:
        super(TumblingWindowOperator, self)._close_next(start, out)


_steps = st.lists(st.one_of(
    st.tuples(st.just("m"), st.sampled_from("abcdef"), st.floats(0, 59, allow_nan=False)),
    st.tuples(st.just("commit")),
    st.tuples(st.just("wm"), st.integers(0, 70_000))), max_size=60)


@settings(max_examples=150, deadline=None)
@given(_steps, st.sampled_from([3, 1000]), st.booleans(), st.booleans())
def test_a_start_closing_in_one_loop_is_its_panes_closing_one_at_a_time(
        steps: list[tuple[Any, ...]], cache: int, mean: bool, early: bool) -> None:
    """Closing a start's panes in one loop gives the panes, the store and the memory that
    closing them one at a time gives: with values changed since the commit, kept at it, in the
    store, and spilled there past ``pane.cache.size``, and with early triggers."""
    from samza_dsl.windows import Aggregate

    window = (Windows.keyed_tumbling(key="k", size=10 * SEC, event_time="t",
                                     aggregate=Aggregate.mean("t")) if mean
              else Windows.keyed_tumbling(lambda m: m["k"], 10 * SEC, event_time="t",
                                          init=lambda: 0, fold=lambda m, n: n + 1))
    if early:
        window = window.early_trigger(Triggers.count(2))
    ops, stores = [], []
    for cls in (TumblingWindowOperator, _OnePaneAtATime):
        store = CountingState()
        op = cls(WindowSpec("w", "w", ("stream:in",), "test.py:1", window=window))
        op.init(OperatorContext("task-0", {"stores.w.pane.cache.size": cache}, FakeClock(),
                                {"w": store}))
        ops.append(op)
        stores.append(store)

    def same() -> None:
        assert dict(stores[0].all()) == dict(stores[1].all())
        assert stores[0].deletes == stores[1].deletes
        assert ops[0].panes_emitted == ops[1].panes_emitted
        for attr in ("_dirty", "_clean", "_open", "_cached", "_stored", "_spilled", "_closing",
                     "_early"):
            a, b = getattr(ops[0], attr), getattr(ops[1], attr)
            assert (a.keys() == b.keys() if attr == "_early" else a == b), attr

    for step in [*steps, ("end",)]:
        outs = []
        for op in ops:
            if step[0] == "m":
                out = op.process({"k": step[1], "t": step[2]})
            elif step[0] == "commit":
                op.flush_state()
                out = []
            elif step[0] == "wm":
                out = op.on_watermark(step[1])
            else:
                out = op.on_end_of_stream()
            outs.append(panes(out))
        assert outs[0] == outs[1]
        same()
