"""The reference model (``samza_dsl.testing.model``) on small cases worked out by hand from the
rules (docs/semantics.md rules 7-10)."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest

from samza_dsl import KV, AccumulationMode, Triggers, Windows
from samza_dsl.testing.model import (
    Advance,
    Arrive,
    event_time_ms,
    interleave,
    interval_join,
    run_window,
    stream_join,
    table_join,
)

SEC = timedelta(seconds=1)


def et(kv: KV[str, float]) -> float:
    return kv.value


def key(kv: KV[str, float]) -> str:
    return kv.key


def in_order(msgs: list[KV[str, float]]) -> list[Any]:
    """One channel, each message moving the watermark to its own time."""
    return interleave({0: [([m], m.value * 1000) for m in msgs]})


def panes(window: Any, steps: list[Any]) -> list[tuple[Any, str, str, list[float]]]:
    return [(p.key, p.pane_id, p.firing.name, [m.value for m in p.value])
            for p in run_window(window, steps).panes]


def tumbling(**kw: Any) -> Any:
    return Windows.keyed_tumbling(key, 10 * SEC, event_time=et, **kw)


MSGS = [KV("a", 1.0), KV("a", 2.0), KV("a", 3.0), KV("a", 4.0), KV("a", 5.0)]


def test_count_fires_once_and_repeat_restarts() -> None:
    assert panes(tumbling().early_trigger(Triggers.count(2)), in_order(MSGS)) == [
        ("a", "0", "EARLY", [1.0, 2.0]), ("a", "0", "DEFAULT", [1.0, 2.0, 3.0, 4.0, 5.0])]
    w = tumbling().early_trigger(Triggers.repeat(Triggers.count(2)))
    assert panes(w.accumulation(AccumulationMode.DISCARDING), in_order(MSGS)) == [
        ("a", "0", "EARLY", [1.0, 2.0]), ("a", "0", "EARLY", [3.0, 4.0]),
        ("a", "0", "DEFAULT", [5.0])]
    # a firing with no state emits nothing
    assert panes(w.accumulation(AccumulationMode.DISCARDING), in_order(MSGS[:4])) == [
        ("a", "0", "EARLY", [1.0, 2.0]), ("a", "0", "EARLY", [3.0, 4.0])]


def test_any_fires_with_its_first_child_and_time_triggers_never_fire() -> None:
    w = tumbling().early_trigger(Triggers.any(Triggers.count(3), Triggers.count(2),
                                              Triggers.time_since_first_message(SEC)))
    assert [p[2] for p in panes(w, in_order(MSGS))] == ["EARLY", "DEFAULT"]
    w = tumbling().early_trigger(Triggers.repeat(Triggers.any(
        Triggers.count(2), Triggers.time_since_last_message(SEC))))
    assert [len(p[3]) for p in panes(w, in_order(MSGS))] == [2, 4, 5]
    w = tumbling().early_trigger(Triggers.time_since_first_message(SEC))
    assert panes(w, in_order(MSGS)) == [("a", "0", "DEFAULT", [1.0, 2.0, 3.0, 4.0, 5.0])]


def test_a_pane_closes_when_the_watermark_reaches_its_end() -> None:
    steps = [Arrive(KV("a", 9.0)), Advance(9_999), Arrive(KV("a", 9.5)), Advance(10_000),
             Arrive(KV("a", 9.9), "s")]
    result = run_window(tumbling(), steps)
    assert [(p.pane_id, [m.value for m in p.value]) for p in result.panes] == [("0", [9.0, 9.5])]
    assert result.late_counts == {"s": 1}
    # the window's own bound lowers its watermark
    bounded = Windows.keyed_tumbling(key, 10 * SEC, event_time=et, max_out_of_orderness=SEC)
    assert run_window(bounded, steps).late_counts == {}


def test_allowed_lateness_gives_late_panes_then_drops() -> None:
    w = tumbling().allowed_lateness(5 * SEC).late_trigger(Triggers.count(1))
    steps = [Arrive(KV("a", 1.0)), Advance(12_000), Arrive(KV("a", 2.0)), Advance(15_000),
             Arrive(KV("a", 3.0))]
    result = run_window(w, steps)
    assert [(p.firing.name, [m.value for m in p.value]) for p in result.panes] == [
        ("DEFAULT", [1.0]), ("LATE", [1.0, 2.0])]
    assert result.late_counts == {"-": 1}
    discarding = run_window(w.accumulation(AccumulationMode.DISCARDING), steps)
    assert [[m.value for m in p.value] for p in discarding.panes] == [[1.0], [2.0]]
    # without a late trigger, allowed lateness keeps nothing
    assert run_window(tumbling().allowed_lateness(5 * SEC), steps).late_counts == {"-": 2}


@pytest.mark.parametrize("order", list(itertools.permutations([0.0, 1.5, 3.0, 10.0])))
def test_sessions_merge_whatever_the_order(order: tuple[float, ...]) -> None:
    w = Windows.keyed_session(key, 2 * SEC, event_time=et)
    got = panes(w, [Arrive(KV("a", t)) for t in order])
    assert [(p[1], sorted(p[3])) for p in got] == [("0", [0.0, 1.5, 3.0]), ("10000", [10.0])]


def test_the_watermark_is_the_minimum_over_live_channels() -> None:
    steps = interleave({0: [([KV("a", 1.0)], 1000), ([KV("a", 30.0)], 30_000)],
                        1: [([KV("b", 2.0)], 2000)], 2: []}, [0, 1, 0])
    assert [s.watermark_ms for s in steps if isinstance(s, Advance)] == [
        -float("inf"), 1000, float("inf")]


def test_stream_join_keeps_the_latest_per_key_within_the_ttl() -> None:
    arrivals = [("left", KV("a", "l1"), 0), ("left", KV("a", "l2"), 1), ("right", KV("a", "r1"), 5),
                ("right", KV("b", "r2"), 6), ("left", KV("a", "l3"), 15)]
    out = stream_join(arrivals, key=key, other_key=key, ttl_ms=10,
                      combine=lambda left, right: (left.value, right.value))
    assert out == [("l2", "r1")]  # l3 came 10 ms after r1: not younger than the ttl


def ij(steps: list[Any], within_ms: float = 10, how: str = "inner") -> Any:
    """An interval join of ``(key, t)`` messages, each emitting ``(left t, right t)``."""
    return interval_join(steps, key=lambda m: m[0], other_key=lambda m: m[0],
                         combine=lambda left, right: (left and left[1], right and right[1]),
                         within_ms=within_ms, how=how)


def side_steps(*msgs: tuple[str, str, int]) -> list[Any]:
    return [(side, (k, t), t) for side, k, t in msgs]


def test_interval_join_pairs_within_the_bound_in_either_order() -> None:
    steps = side_steps(("left", "a", 100), ("right", "a", 110), ("right", "a", 111),
                       ("right", "a", 90), ("right", "a", 89), ("left", "a", 95),
                       ("right", "b", 100))
    # inclusive: 10 ms apart meet, 11 do not; the left at 95 meets the rights kept within 10
    # of it, in the order they came; b has no left
    assert ij(steps).outputs == [(100, 110), (100, 90), (95, 90), (95, 89)]


def test_interval_join_is_every_pair_within_the_bound_when_nothing_is_late() -> None:
    msgs = [("left" if i % 3 else "right", "ab"[i % 2], (i * 7919) % 97) for i in range(40)]
    steps = [(side, (k, t), t) for side, k, t in msgs]
    expected = sorted((lt, rt) for ls, lk, lt in msgs for rs, rk, rt in msgs
                      if ls == "left" and rs == "right" and lk == rk and abs(lt - rt) <= 10)
    assert sorted(ij(steps).outputs) == expected
    assert expected  # the draw has pairs


def test_interval_join_late_messages_are_not_joined() -> None:
    steps = [*side_steps(("left", "a", 100)), Advance(105), *side_steps(
        ("right", "a", 104), ("right", "a", 105))]
    result = ij(steps)
    assert result.outputs == [(100, 105)]
    assert result.late == [("right", ("a", 104))] and result.late_counts == {"right": 1}


def test_interval_join_left_emits_the_unmatched_when_the_watermark_passes() -> None:
    steps = [*side_steps(("left", "a", 0), ("left", "b", 5), ("right", "b", 14)), Advance(10),
             *side_steps(("left", "c", 20)), Advance(11), *side_steps(("left", "d", 30))]
    # a at 0 is kept while the watermark is at most 0 + 10, and goes unmatched at 11; b met
    assert ij(steps, how="left").outputs == [(5, 14), (0, None), (20, None), (30, None)]
    assert ij(steps, how="inner").outputs == [(5, 14)]
    # outer: the unmatched right side too, at the end of the stream
    outer = [*steps, *side_steps(("right", "e", 31))]
    assert ij(outer, how="outer").outputs == [(5, 14), (0, None), (20, None), (30, None),
                                             (None, 31)]


def test_interval_join_drops_none_and_refuses_none_keys() -> None:
    steps = side_steps(("left", "a", 0), ("right", "a", 1))
    none = interval_join(steps, key=lambda m: m[0], other_key=lambda m: m[0],
                         combine=lambda left, right: None, within_ms=10)
    assert none.outputs == []
    with pytest.raises(ValueError, match="right key of"):
        ij([("right", (None, 0), 0)])
    with pytest.raises(ValueError, match="how is"):
        ij([], how="right")


def test_table_join_looks_up_and_drops_none() -> None:
    arrivals = [("message", KV("a", 1)), ("put", KV("a", "x")), ("message", KV("a", 2)),
                ("put", KV("a", None)), ("message", KV("a", 3)), ("message", KV(None, 4))]
    out = table_join(arrivals, combine=lambda m, r: (m.value, r.value if r else None))
    assert out == [(1, None), (2, "x"), (3, None), (4, None)]
    inner = table_join(arrivals, combine=lambda m, r: (m.value, r.value) if r else None)
    assert inner == [(2, "x")]


def test_the_models_table_holds_no_none_key() -> None:
    """As ``send_to(table)`` on every runner (tests/runtime/test_null_keys.py)."""
    with pytest.raises(ValueError, match="a table holds no None key"):
        table_join([("put", KV(None, "x"))], combine=lambda m, r: m)


def test_event_time_is_rounded_to_the_millisecond() -> None:
    w = tumbling()
    assert [event_time_ms(w, KV("a", t)) for t in (1.001, 0.0029999, 2.0)] == [1001, 3, 2000]
