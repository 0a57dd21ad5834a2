"""Hopping windows (``Windows.hopping``, ``Windows.keyed_hopping``): a message in size / hop
panes, state per hop shared by the panes, triggers and accumulation per pane, lateness, end of
stream and restore (docs/semantics.md rules 7 and 8)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from operator_helpers import FakeClock
from test_window import at, by_key, feed, panes, start_window

from operators.state import InMemoryState
from operators.window import WATERMARK_KEY
from operators.window_hopping import CLOSED_KEY, HoppingWindowOperator
from samza_dsl.windows import AccumulationMode, Triggers, Windows

SEC = timedelta(seconds=1)
DISCARDING = AccumulationMode.DISCARDING


def count_fold(m: Any, n: int) -> int:
    return n + 1


def add(a: int, b: int) -> int:
    return a + b


def hops_in(store: InMemoryState) -> list[Any]:
    """The store keys of per-hop state (not the watermark, close marks or since epochs)."""
    return sorted(k for k, _ in store.all() if k[0] is not None)


# -- panes -------------------------------------------------------------------------------------

def test_a_message_is_in_size_over_hop_panes_closed_at_ticks(clock: FakeClock) -> None:
    op = start_window(Windows.hopping(3 * SEC, SEC), clock)
    assert isinstance(op, HoppingWindowOperator)
    feed(op, clock, [(1500, "a"), (2500, "b")])
    # a@1.5 s is in [-1, 2), [0, 3), [1, 4); b@2.5 s in [0, 3), [1, 4), [2, 5)
    assert panes(op.on_timer(2000)) == [(None, "-1000", ["a"], "DEFAULT")]
    assert panes(op.on_timer(4000)) == [(None, "0", ["a", "b"], "DEFAULT"),
                                        (None, "1000", ["a", "b"], "DEFAULT")]
    assert panes(op.on_timer(9000)) == [(None, "2000", ["b"], "DEFAULT")]
    assert op.on_timer(9000) == []


def test_state_is_kept_per_hop_not_per_pane(clock: FakeClock) -> None:
    """Six panes overlap each time, yet the store holds one entry per hop and key, each with one
    accumulator; a firing merges them with combine."""
    store = InMemoryState()
    folds: list[int] = []

    def fold(m: Any, n: int) -> int:
        folds.append(1)
        return n + m[1]

    w = Windows.keyed_hopping(by_key, 6 * SEC, SEC, init=lambda: 0, fold=fold, combine=add,
                              event_time=at)
    op = start_window(w, clock, store=store)
    for t in range(12):
        op.process(("k", float(t)))
    assert len(folds) == 12  # once per message, not once per pane
    assert hops_in(store) == [(t * 1000, "k") for t in range(6, 12)]  # closed hops are gone
    assert all(len(store.get(hk)) == 1 for hk in hops_in(store))  # one segment, accumulating
    out = panes(op.on_end_of_stream())  # [0, 6) .. [5, 11) closed as 11 s came
    assert out == [("k", str(s * 1000), sum(range(s, 12)), "DEFAULT") for s in range(6, 12)]
    assert len(folds) == 12  # firings combine, they do not fold again
    assert hops_in(store) == []


def test_without_combine_a_firing_folds_the_panes_messages_in_arrival_order(
        clock: FakeClock) -> None:
    w = Windows.keyed_hopping(by_key, 2 * SEC, SEC, init=list,
                              fold=lambda m, acc: [*acc, m[1]], event_time=at)
    op = start_window(w, clock)
    for m in [("k", 1.5), ("k", 1.2), ("k", 0.5)]:
        op.process(m)
    # at 0.5 s the watermark is 1.5 s: [-1, 1) has closed, [0, 2) takes it
    assert panes(op.on_end_of_stream()) == [("k", "0", [1.5, 1.2, 0.5], "DEFAULT"),
                                            ("k", "1000", [1.5, 1.2], "DEFAULT")]
    assert op.late_dropped == 0


def test_hop_equal_to_size_is_a_tumbling_window(clock: FakeClock) -> None:
    evs = [("a", 0.5), ("b", 1.2), ("a", 2.7), ("a", 1.9), ("b", 4.0), ("a", 6.1)]
    hop = start_window(Windows.keyed_hopping(by_key, 2 * SEC, 2 * SEC, event_time=at), clock)
    tum = start_window(Windows.keyed_tumbling(by_key, 2 * SEC, event_time=at), clock)
    out_h = [p for m in evs for p in panes(hop.process(m))] + panes(hop.on_end_of_stream())
    out_t = [p for m in evs for p in panes(tum.process(m))] + panes(tum.on_end_of_stream())
    assert out_h == out_t


# -- triggers and accumulation, per pane ----------------------------------------------------------

def test_early_triggers_count_each_panes_own_messages(clock: FakeClock) -> None:
    w = Windows.keyed_hopping(by_key, 2 * SEC, SEC, event_time=at).early_trigger(
        Triggers.count(2))
    op = start_window(w, clock)
    assert op.process(("k", 0.1)) == []
    # 1.1 s closes [-1, 1); it is the second message of [0, 2) and the first of [1, 3)
    assert panes(op.process(("k", 1.1))) == [("k", "-1000", [("k", 0.1)], "DEFAULT"),
                                             ("k", "0", [("k", 0.1), ("k", 1.1)], "EARLY")]
    assert panes(op.process(("k", 1.2))) == [
        ("k", "1000", [("k", 1.1), ("k", 1.2)], "EARLY")]


def test_discarding_clears_a_pane_without_taking_anything_from_the_others(
        clock: FakeClock) -> None:
    store = InMemoryState()
    w = (Windows.keyed_hopping(by_key, 2 * SEC, SEC, init=lambda: 0, fold=count_fold,
                               combine=add, event_time=at)
         .early_trigger(Triggers.repeat(Triggers.count(2))).accumulation(DISCARDING))
    op = start_window(w, clock, store=store)
    assert op.process(("k", 0.2)) == []  # [-1, 1): 1, [0, 2): 1
    assert panes(op.process(("k", 0.4))) == [("k", "-1000", 2, "EARLY"), ("k", "0", 2, "EARLY")]
    assert op.process(("k", 1.1)) == []  # [0, 2): 1 since its firing, [1, 3): 1
    assert panes(op.process(("k", 1.3))) == [("k", "0", 2, "EARLY"), ("k", "1000", 2, "EARLY")]
    assert op.process(("k", 1.5)) == []
    assert panes(op.on_end_of_stream()) == [("k", "0", 1, "DEFAULT"),
                                            ("k", "1000", 1, "DEFAULT")]
    assert hops_in(store) == []


def test_a_restore_keeps_what_discarding_panes_already_gave(clock: FakeClock) -> None:
    store = InMemoryState()
    w = (Windows.keyed_hopping(by_key, 2 * SEC, SEC, event_time=at)
         .early_trigger(Triggers.repeat(Triggers.count(2))).accumulation(DISCARDING))
    op = start_window(w, clock, store=store)
    for m in [("k", 1.1), ("k", 1.2), ("k", 0.5)]:
        op.process(m)
    # [0, 2) fired a@1.1, 1.2 and holds 0.5; [1, 3) fired 1.1, 1.2; [-1, 1) holds 0.5
    again = start_window(w, clock, store=store)
    assert panes(again.on_end_of_stream()) == [("k", "-1000", [("k", 0.5)], "DEFAULT"),
                                               ("k", "0", [("k", 0.5)], "DEFAULT")]


# -- event time: lateness ---------------------------------------------------------------------------

def test_a_message_is_late_only_when_all_its_panes_are_closed(clock: FakeClock) -> None:
    op = start_window(Windows.keyed_hopping(by_key, 4 * SEC, SEC, event_time=at), clock)
    op.process(("k", 0.5))
    closed = panes(op.process(("k", 5.5)))  # closes [-3, 1) .. [0, 4), the panes of 0.5 s
    assert [p[1] for p in closed] == ["-3000", "-2000", "-1000", "0"]
    assert panes(op.process(("k", 2.5))) == []  # [2, 6) is still open: it takes it
    assert op.late_dropped == 0
    assert op.process(("k", 0.9)) == [] and op.late_dropped == 1  # [-3, 1) .. [0, 4) closed
    assert panes(op.on_end_of_stream()) == [("k", "2000", [("k", 5.5), ("k", 2.5)], "DEFAULT"),
                                            ("k", "3000", [("k", 5.5)], "DEFAULT"),
                                            ("k", "4000", [("k", 5.5)], "DEFAULT"),
                                            ("k", "5000", [("k", 5.5)], "DEFAULT")]


def test_allowed_lateness_gives_late_panes_to_the_closed_panes_that_keep_it(
        clock: FakeClock) -> None:
    w = (Windows.keyed_hopping(by_key, 2 * SEC, SEC, init=lambda: 0, fold=count_fold,
                               combine=add, event_time=at)
         .allowed_lateness(2 * SEC).late_trigger(Triggers.repeat(Triggers.count(1))))
    op = start_window(w, clock)
    op.process(("k", 0.5))
    assert panes(op.process(("k", 3.5))) == [("k", "-1000", 1, "DEFAULT"),
                                             ("k", "0", 1, "DEFAULT")]
    # 0.7: [-1, 1) ended at 1 s, kept to 3 s: gone at 3.5; [0, 2) kept to 4 s: LATE
    assert panes(op.process(("k", 0.7))) == [("k", "0", 2, "LATE")]
    # 1.5: [0, 2) late again, [1, 3) closed at 3 s, kept: LATE too
    assert panes(op.process(("k", 1.5))) == [("k", "0", 3, "LATE"), ("k", "1000", 1, "LATE")]
    assert op.late_dropped == 0
    op.process(("k", 6.0))
    assert op.process(("k", 1.5)) == [] and op.late_dropped == 1


def test_restore_event_time_and_processing_time(clock: FakeClock) -> None:
    store = InMemoryState()
    w = Windows.keyed_hopping(by_key, 2 * SEC, SEC, init=lambda: 0, fold=count_fold, combine=add,
                              event_time=at)
    op = start_window(w, clock, store=store)
    for m in [("a", 0.5), ("a", 1.5), ("a", 2.5)]:
        op.process(m)
    again = start_window(w, clock, store=store)
    assert store.get(WATERMARK_KEY) == 2500
    assert panes(again.on_end_of_stream()) == [("a", "1000", 2, "DEFAULT"),
                                               ("a", "2000", 1, "DEFAULT")]
    # processing time: panes closed before the restart do not fire again
    store = InMemoryState()
    op = start_window(Windows.hopping(2 * SEC, SEC), clock, store=store)
    feed(op, clock, [(500, "a"), (1500, "b")])
    assert panes(op.on_timer(2000)) == [(None, "-1000", ["a"], "DEFAULT"),
                                        (None, "0", ["a", "b"], "DEFAULT")]
    assert store.get(CLOSED_KEY) == 2000
    again = start_window(Windows.hopping(2 * SEC, SEC), clock, store=store)
    assert panes(again.on_timer(3000)) == [(None, "1000", ["b"], "DEFAULT")]


# -- specs and errors ---------------------------------------------------------------------------------

def test_size_must_be_a_multiple_of_the_hop_and_combine_needs_a_fold() -> None:
    with pytest.raises(ValueError, match=r"size \(5000 ms\) must be a whole multiple of the "
                                         r"hop \(2000 ms\)"):
        Windows.hopping(5 * SEC, 2 * SEC)
    with pytest.raises(ValueError, match="give the window init and fold too"):
        Windows.hopping(4 * SEC, 2 * SEC, combine=add)
    with pytest.raises(TypeError, match="combine must be callable"):
        Windows.hopping(4 * SEC, 2 * SEC, init=int, fold=count_fold, combine=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="hop must be positive"):
        Windows.hopping(4 * SEC, timedelta(0))
    w = Windows.hopping(4 * SEC, 2 * SEC, init=int, fold=count_fold, combine=add)
    assert w.describe() == {"kind": "hopping", "size_ms": 4000, "hop_ms": 2000,
                            "time": "processing", "mode": "accumulating", "combine": True}
    assert w.durations_ms() == [4000, 2000] and not w.keyed and w.panes_per_message == 2


def test_combine_returning_none_is_an_error(clock: FakeClock) -> None:
    w = Windows.hopping(2 * SEC, SEC, init=int, fold=count_fold, combine=lambda a, b: None,
                        event_time=at)
    op = start_window(w, clock)
    op.process(("k", 0.5))
    with pytest.raises(ValueError, match="combine returned None"):
        op.on_end_of_stream()


@settings(max_examples=60, deadline=None)
@given(evs=st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 40)), max_size=30),
       parts=st.sampled_from([1, 2, 3, 6]), mode=st.sampled_from(list(AccumulationMode)),
       early=st.sampled_from([None, 1, 2]))
def test_combine_and_no_combine_and_lists_agree(evs: list[tuple[str, int]], parts: int,
                                                mode: AccumulationMode,
                                                early: int | None) -> None:
    """The three ways of keeping a hop (accumulators merged by combine, messages folded at a
    firing, lists) give the same panes for an order-insensitive fold."""
    size = timedelta(milliseconds=6000)
    hop = size / parts

    def run(**agg: Any) -> list[Any]:
        w = Windows.keyed_hopping(by_key, size, hop, event_time=lambda m: m[1] / 4, **agg)
        if early:
            w = w.early_trigger(Triggers.repeat(Triggers.count(early)))
        op = start_window(w.accumulation(mode), FakeClock())
        out = [p for m in evs for p in op.process(m)] + op.on_end_of_stream()
        return [(p.key, p.firing, sorted(p.message) if isinstance(p.message, list)
                 else p.message) for p in out]

    listed = [(k, f, sorted(m[1] for m in msgs)) for k, f, msgs in run()]
    folded = run(init=list, fold=lambda m, acc: [*acc, m[1]])
    combined = run(init=list, fold=lambda m, acc: [*acc, m[1]], combine=lambda a, b: a + b)
    assert listed == folded == combined
