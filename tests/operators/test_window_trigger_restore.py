"""A window's early and late triggers go on across a restore as if the run had not stopped
(operators/window_triggers.py; docs/semantics.md, "Triggers across a restore"): the panes a run
that stops after a commit and resumes from that commit's store emits are the panes of a run
that never stopped, for every window kind and trigger."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from operator_helpers import FakeClock

from operators import build_operator
from operators.base import OperatorContext
from operators.state import InMemoryState
from operators.window_triggers import TRIGGER
from samza_dsl.spec import WindowSpec
from samza_dsl.windows import AccumulationMode, Triggers, Window, Windows

SEC = timedelta(seconds=1)


def key_of(m: Any) -> Any:
    return m[0]


def time_of(m: Any) -> float:
    return m[1]


def start(window: Window[Any, Any], clock: FakeClock, store: InMemoryState) -> Any:
    """A window whose watermark the runtime gives (``on_watermark``), as in a streaming job."""
    op = build_operator(WindowSpec("w", "w", ("stream:in",), "test.py:1", window=window))
    op.init(OperatorContext("task-0", {}, clock, {"w": store}, None, external_watermarks=True))
    return op


def step(op: Any, event: tuple[str, float]) -> list[Any]:
    """A message (key, event time), or the watermark moving (key "wm")."""
    if event[0] == "wm":
        return list(op.on_watermark(round(event[1] * 1000)))
    return list(op.process(event))


def panes(outputs: list[Any]) -> list[tuple[Any, str, Any, str]]:
    return [(p.key.key, p.key.pane_id, p.message, p.firing.name) for p in outputs]


EARLY = [Triggers.count(2), Triggers.repeat(Triggers.count(2)),
         Triggers.repeat(Triggers.any(Triggers.count(3), Triggers.time_since_first_message(
             timedelta(hours=1))))]


def windows(early: Any, late: Any, discarding: bool) -> list[Window[Any, Any]]:
    mode = AccumulationMode.DISCARDING if discarding else AccumulationMode.ACCUMULATING
    made = [Windows.keyed_tumbling(key_of, 10 * SEC, event_time=time_of),
            Windows.keyed_hopping(key_of, 10 * SEC, 5 * SEC, event_time=time_of),
            Windows.keyed_session(key_of, 4 * SEC, event_time=time_of)]
    out = []
    for w in made:
        w = w.early_trigger(early).accumulation(mode)
        if late is not None:
            w = w.allowed_lateness(20 * SEC).late_trigger(late)
        out.append(w)
    return out


def in_order(events: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Watermarks only move forward; messages may be behind them (late)."""
    out, wm = [], -1.0
    for k, t in events:
        if k == "wm":
            if t <= wm:
                continue
            wm = t
        out.append((k, t))
    return out


messages = st.lists(st.tuples(st.sampled_from(["a", "b", "c", "wm"]),
                              st.integers(0, 60).map(float)),
                    min_size=1, max_size=40).map(in_order)


@settings(max_examples=60, deadline=None)
@given(msgs=messages, cut=st.integers(0, 40), early=st.sampled_from(EARLY),
       late=st.sampled_from([None, Triggers.count(1), Triggers.repeat(Triggers.count(2))]),
       discarding=st.booleans())
def test_a_restored_window_fires_as_one_that_never_stopped(
        msgs: list[tuple[str, float]], cut: int, early: Any, late: Any,
        discarding: bool) -> None:
    cut = min(cut, len(msgs))
    for window in windows(early, late, discarding):
        clock = FakeClock(1_000)
        whole = start(window, clock, InMemoryState())
        want = panes([p for m in msgs for p in step(whole, m)] + whole.on_end_of_stream())

        store = InMemoryState()
        first = start(window, clock, store)
        got = [p for m in msgs[:cut] for p in step(first, m)]
        wm = max([t for k, t in msgs[:cut] if k == "wm"], default=None)
        first.flush_state()  # the commit
        snapshot = InMemoryState()  # what the commit wrote (a copy: the host goes on)
        for k, v in store.all():
            snapshot.put(k, copy.deepcopy(v))
        for m in msgs[cut:]:  # processed after the commit, then lost with the host
            step(first, m)
        again = start(window, clock, snapshot)  # another host, from the commit's state
        if wm is not None:  # the runtime gives it the watermark its checkpoint had
            got += step(again, ("wm", wm))
        got += [p for m in msgs[cut:] for p in step(again, m)] + again.on_end_of_stream()
        assert panes(got) == want, type(again).__name__
        again.flush_state()  # the end's commit: no trigger progress is left behind
        assert not [k for k, _ in snapshot.all() if k[0] is None and k[1] == TRIGGER]


def test_a_restored_count_trigger_goes_on_counting() -> None:
    """The plain case: count(3) on a pane open across the restore fires at the pane's third
    message, not at the third after the restore."""
    clock = FakeClock(0)
    w = Windows.keyed_tumbling(key_of, 10 * SEC, event_time=time_of).early_trigger(
        Triggers.count(3))
    store = InMemoryState()
    op = start(w, clock, store)
    assert step(op, ("a", 1.0)) == [] and step(op, ("a", 2.0)) == []
    op.flush_state()
    again = start(w, clock, store)
    assert panes(again.process(("a", 3.0))) == [("a", "0", [("a", 1.0), ("a", 2.0), ("a", 3.0)],
                                                  "EARLY")]
    assert again.process(("a", 4.0)) == []  # count(3) does not repeat: once per pane


def test_a_restored_time_trigger_keeps_its_deadline() -> None:
    clock = FakeClock(0)
    w = Windows.keyed_tumbling(key_of, 10 * SEC, event_time=time_of).early_trigger(
        Triggers.time_since_first_message(SEC))
    store = InMemoryState()
    op = start(w, clock, store)
    op.process(("a", 1.0))
    op.flush_state()
    again = start(w, clock, store)
    assert again.on_timer(999) == []
    assert panes(again.on_timer(1_000)) == [("a", "0", [("a", 1.0)], "EARLY")]
