"""Keyed session windows: processing time as Samza, event time with watermark and lateness."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from operator_helpers import FakeClock

from operators import build_operator
from operators.base import OperatorContext
from operators.state import InMemoryState
from operators.window import WATERMARK_KEY
from operators.window_session import SessionWindowOperator
from samza_dsl.spec import WindowSpec
from samza_dsl.windows import AccumulationMode, Triggers, Window, Windows

GAP = timedelta(seconds=5)


def start(window: Window[Any, Any], clock: FakeClock, store: InMemoryState | None = None) -> Any:
    op = build_operator(WindowSpec("s", "s", ("stream:in",), "", window=window))
    assert isinstance(op, SessionWindowOperator)
    op.init(OperatorContext("task-0", {}, clock, {"s": store if store is not None
                                                  else InMemoryState()}))
    return op


def panes(outputs: list[Any]) -> list[tuple[Any, str, Any, str]]:
    return [(p.key.key, p.key.pane_id, p.message, p.firing.name) for p in outputs]


def key(m: Any) -> Any:
    return m[0]


def seconds(m: Any) -> float:
    return m[1]


def count() -> dict[str, Any]:
    return {"init": lambda: 0, "fold": lambda m, n: n + 1}


def test_processing_time_session_closes_a_gap_after_its_last_message(clock: FakeClock) -> None:
    op = start(Windows.keyed_session(key, timedelta(milliseconds=500), **count()), clock)
    for now, m in [(0, ("u", 1)), (200, ("v", 1)), (300, ("u", 2)), (600, ("u", 3))]:
        clock.set(now)
        assert op.process(m) == []
    assert panes(op.on_timer(700)) == [("v", "200", 1, "DEFAULT")]
    assert op.on_timer(1099) == []  # u's last message moved its end to 1100
    assert panes(op.on_timer(1100)) == [("u", "0", 3, "DEFAULT")]
    clock.set(1200)
    op.process(("u", 4))  # a new session for u
    assert panes(op.on_timer(1700)) == [("u", "1200", 1, "DEFAULT")]


def test_processing_time_message_joins_a_session_no_tick_has_closed_yet(clock: FakeClock) -> None:
    # as Samza: the pane starts at the earliest stored message for the key, and only a tick
    # ends a session, so a message after the gap but before the tick still joins it
    op = start(Windows.keyed_session(key, timedelta(milliseconds=500)), clock)
    clock.set(0)
    op.process(("u", 1))
    clock.set(800)
    op.process(("u", 2))
    assert op.on_timer(1299) == []
    assert panes(op.on_timer(1300)) == [("u", "0", [("u", 1), ("u", 2)], "DEFAULT")]


def test_event_time_sessions_split_at_the_gap_and_close_on_the_watermark(clock: FakeClock) -> None:
    op = start(Windows.keyed_session(key, GAP, event_time=seconds, **count()), clock)
    assert op.process(("u", 1.0)) == [] and op.process(("u", 3.0)) == []
    assert op.process(("v", 7.9)) == []  # u ends at 8.0
    assert panes(op.process(("u", 8.0))) == [("u", "1000", 2, "DEFAULT")]
    assert panes(op.on_watermark(12_900)) == [("v", "7900", 1, "DEFAULT")]
    assert panes(op.on_end_of_stream()) == [("u", "8000", 1, "DEFAULT")]


def test_an_earlier_on_time_message_moves_the_session_start(clock: FakeClock) -> None:
    op = start(Windows.keyed_session(key, GAP, event_time=seconds, **count()), clock)
    op.process(("u", 10.0))
    op.process(("u", 6.0))  # on time (6 + 5 > 10) and within the gap before the start
    assert op._store.get((10_000, "u")) is None and op._store.get((6_000, "u")) == (10_000, 2)
    assert panes(op.on_watermark(15_000)) == [("u", "6000", 2, "DEFAULT")]


def test_late_messages_join_kept_sessions_or_start_closed_ones(clock: FakeClock) -> None:
    w = Windows.keyed_session(key, GAP, event_time=seconds).allowed_lateness(
        timedelta(seconds=30)).late_trigger(Triggers.repeat(Triggers.count(1)))
    op = start(w, clock)
    op.process(("u", 1.0))
    assert panes(op.process(("v", 20.0))) == [("u", "1000", [("u", 1.0)], "DEFAULT")]
    # late, overlapping the closed session: it joins it and the pane id stays
    assert panes(op.process(("u", 2.0))) == [("u", "1000", [("u", 1.0), ("u", 2.0)], "LATE")]
    # late, overlapping no session: a closed session of its own
    assert panes(op.process(("u", 12.0))) == [("u", "12000", [("u", 12.0)], "LATE")]
    assert op.late_dropped == 0
    # past end + lateness of u's first session: 2 + 5 + 30 <= 37
    assert panes(op.on_watermark(37_000)) == [("v", "20000", [("v", 20.0)], "DEFAULT")]
    assert op._store.get((1000, "u")) is None and op._store.get((12_000, "u")) is not None
    assert op.process(("u", 1.5)) == [] and op.late_dropped == 1


def test_late_messages_without_lateness_are_dropped(clock: FakeClock) -> None:
    op = start(Windows.keyed_session(key, GAP, event_time=seconds), clock)
    op.process(("u", 10.0))
    op.process(("v", 30.0))
    assert op.process(("u", 1.0)) == [] and op.late_dropped == 1
    # before u's open session by more than a gap, and a gap behind the watermark: late too
    op.process(("u", 31.0))
    assert op.process(("u", 20.0)) == [] and op.late_dropped == 2


def test_discarding_session_keeps_its_pane_id_across_firings(clock: FakeClock) -> None:
    w = (Windows.keyed_session(key, GAP, event_time=seconds)
         .early_trigger(Triggers.count(2))
         .accumulation(AccumulationMode.DISCARDING))
    op = start(w, clock)
    op.process(("u", 1.0))
    assert panes(op.process(("u", 2.0))) == [("u", "1000", [("u", 1.0), ("u", 2.0)], "EARLY")]
    assert op.process(("u", 3.0)) == []  # the early trigger fired once for this pane
    assert panes(op.on_watermark(8_000)) == [("u", "1000", [("u", 3.0)], "DEFAULT")]


def test_discarded_session_with_no_new_data_emits_nothing(clock: FakeClock) -> None:
    w = (Windows.keyed_session(key, GAP, event_time=seconds)
         .early_trigger(Triggers.count(1))
         .accumulation(AccumulationMode.DISCARDING))
    op = start(w, clock)
    assert len(op.process(("u", 1.0))) == 1
    assert op.on_watermark(10_000) == []
    assert list(op._store.all()) == [(WATERMARK_KEY, 10_000)]


def test_end_of_stream_orders_sessions_by_start_then_key(clock: FakeClock) -> None:
    op = start(Windows.keyed_session(key, GAP, event_time=seconds, **count()), clock)
    for m in [("b", 2.0), ("a", 2.0), (3, 1.0), ("c", 2.5)]:
        op.process(m)
    assert [(k, pid) for k, pid, _, _ in panes(op.on_end_of_stream())] == [
        (3, "1000"), ("a", "2000"), ("b", "2000"), ("c", "2500")]
    # every session's state goes; the watermark, a gap past the last session's end, stays
    assert list(op._store.all()) == [(WATERMARK_KEY, [12_500, 12_500])] and op._sessions == {}
    again = start(Windows.keyed_session(key, GAP, event_time=seconds, **count()), clock,
                  op._store)
    assert again.process(("c", 7.4)) == [] and again.late_dropped == 1  # could join c's session
    assert again.process(("c", 7.6)) == [] and again.late_dropped == 1  # a session of its own
    assert [pid for _, pid, _, _ in panes(again.on_end_of_stream())] == ["7600"]


def test_restore_rebuilds_open_and_kept_sessions(clock: FakeClock) -> None:
    store = InMemoryState()
    w = Windows.keyed_session(key, GAP, event_time=seconds, **count()).allowed_lateness(
        timedelta(seconds=30)).late_trigger(Triggers.count(1))
    op = start(w, clock, store)
    op.process(("u", 1.0))
    op.process(("v", 10.0))  # closes u's session (kept for lateness)
    again = start(w, clock, store)
    assert panes(again.process(("u", 2.0))) == [("u", "1000", 2, "LATE")]
    assert panes(again.on_watermark(15_000)) == [("v", "10000", 1, "DEFAULT")]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 40)), max_size=40),
       st.integers(1, 8))
def test_in_order_sessions_equal_a_reference_model(evs: list[tuple[str, int]], gap: int) -> None:
    """With event times in order, a key's session ends where the next message is >= gap later."""
    evs = sorted(evs, key=lambda e: e[1])
    w = Windows.keyed_session(key, timedelta(seconds=gap), event_time=seconds)
    op = start(w, FakeClock())
    out: list[Any] = []
    for e in evs:
        out += op.process(e)
    out += op.on_end_of_stream()
    model: dict[tuple[str, int], list[Any]] = {}
    current: dict[str, tuple[int, int]] = {}  # key -> (start, last)
    for k, t in evs:
        s = current.get(k)
        if s is None or t - s[1] >= gap:
            s = (t, t)
        current[k] = (s[0], t)
        model.setdefault((k, s[0] * 1000), []).append((k, t))
    got = {(p.key.key, int(p.key.pane_id)): p.message for p in out}
    assert len(got) == len(out)
    assert got == model
    assert op.late_dropped == 0
