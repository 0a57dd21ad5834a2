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
