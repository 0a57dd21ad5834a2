"""Event-time stream-stream join, ``join(..., within=...)`` (docs/semantics.md rule 9, "Beyond
Samza"): pairs at most ``within`` apart in event time, state expired by the watermark, late
messages counted, unmatched ones of a left/outer join emitted, state that survives a restore."""

from __future__ import annotations

import itertools
import random
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from operator_helpers import Metrics

from operators import build_operator
from operators.base import OperatorContext
from operators.join_event_time import EventTimeJoinOperator
from operators.state import InMemoryState
from planner.render import plan_to_text
from samza_dsl import KV, LateMessage, StreamApplication
from samza_dsl.errors import PlanError, TaskError
from samza_dsl.spec import JoinSpec, SideTime
from samza_dsl.systems import MemorySystem

LEFT, RIGHT = 0, 1
OP = "app-1-join-j"
SIDE = SideTime("in", lambda m: m["ts"])


def spec(within_ms: int = 10_000, how: str = "inner", late_to: str | None = None,
         bound_ms: int = 0) -> JoinSpec:
    side = SideTime("in", lambda m: m["ts"], 0, bound_ms)
    return JoinSpec(OP, "j", ("stream:a", "stream:b"), "test.py:1", key_fn=lambda m: m["id"],
                    other_key_fn=lambda m: m["id"], combine=lambda a, b: (
                        a and a["v"], b and b["v"]),
                    within_ms=within_ms, how=how, late_to=late_to, sides=(side, side))


def start(js: JoinSpec, stores: dict[str, InMemoryState] | None = None,
          external: bool = True, metrics: Any = None,
          source: Any = None) -> EventTimeJoinOperator:
    op = build_operator(js)
    assert isinstance(op, EventTimeJoinOperator)
    stores = stores if stores is not None else {f"{OP}-L": InMemoryState(),
                                                f"{OP}-R": InMemoryState()}
    op.init(OperatorContext("t0", {}, lambda: 0, stores, metrics=metrics,
                            external_watermarks=external, source=source))
    return op


def m(id_: Any, ts: float, v: Any) -> dict[str, Any]:
    return {"id": id_, "ts": ts, "v": v}


def test_pairs_at_most_within_apart_join_inclusive_in_either_order() -> None:
    op = start(spec(within_ms=10_000))
    assert op.process_port(LEFT, m(1, 100.0, "l1")) == []
    assert op.process_port(RIGHT, m(1, 110.0, "r-at-edge")) == [("l1", "r-at-edge")]
    assert op.process_port(RIGHT, m(1, 110.001, "r-past")) == []
    assert op.process_port(RIGHT, m(1, 91.0, "r-before")) == [("l1", "r-before")]
    assert op.process_port(RIGHT, m(2, 100.0, "other-key")) == []
    # a later left meets every stored right within reach, in event-time order
    assert op.process_port(LEFT, m(1, 100.001, "l2")) == [
        ("l2", "r-before"), ("l2", "r-at-edge"), ("l2", "r-past")]


def test_every_message_of_a_key_is_kept_not_only_the_latest() -> None:
    op = start(spec())
    op.process_port(LEFT, m("k", 5.0, "a"))
    op.process_port(LEFT, m("k", 1.0, "b"))
    op.process_port(LEFT, m("k", 5.0, "c"))  # a tie with "a": arrival order
    assert op.process_port(RIGHT, m("k", 3.0, "r")) == [("b", "r"), ("a", "r"), ("c", "r")]
    assert op.state_size() == (3, 1)


def test_the_watermark_expires_state_once_it_passes_t_plus_within() -> None:
    op = start(spec(within_ms=10_000))
    op.process_port(LEFT, m(1, 100.0, "l"))
    assert op.on_watermark(110_000) == []
    assert op.state_size() == (1, 0)  # at t + within: still joinable by a message at 110 s
    assert op.process_port(RIGHT, m(1, 110.0, "r")) == [("l", "r")]
    op.on_watermark(110_001)
    assert op.state_size() == (0, 1)
    assert op.on_timer(10**15) == []  # ticks purge nothing
    assert op.state_size() == (0, 1)


def test_a_message_below_the_watermark_is_late_counted_and_sent_to_late_to() -> None:
    metrics = Metrics()
    op = start(spec(late_to="late"), metrics=metrics, source=lambda: ("acc", 2, 17))
    op.process_port(LEFT, m(1, 100.0, "l"))
    op.on_watermark(105_000)
    out = op.process_port(RIGHT, m(1, 104.999, "r-late"))
    assert out == [LateMessage(m(1, 104.999, "r-late"), OP, 1, "right", 104_999, 105_000,
                               "acc", 2, 17)]
    assert op.late_dropped == 1
    assert metrics.counters[f"{OP}.late-messages.acc"].value == 1
    assert metrics.counters[f"{OP}.late-messages-sent"].value == 1
    assert op.process_port(RIGHT, m(1, 105.0, "r")) == [("l", "r")]  # at the watermark: on time


def test_left_join_emits_the_unmatched_when_the_watermark_passes_and_at_the_end() -> None:
    op = start(spec(how="left"))
    op.process_port(LEFT, m(1, 100.0, "met"))
    op.process_port(LEFT, m(2, 101.0, "alone"))
    op.process_port(LEFT, m(3, 200.0, "alone-late-in-run"))
    op.process_port(LEFT, m(4, 150.0, "alone-at-end"))
    op.process_port(RIGHT, m(1, 95.0, "r"))
    op.process_port(RIGHT, m(9, 96.0, "right-alone"))  # a left join drops it
    assert op.on_watermark(111_000) == []  # 101 + 10 is not passed yet
    assert op.on_watermark(111_001) == [("alone", None)]
    assert op.on_end_of_stream() == [("alone-at-end", None), ("alone-late-in-run", None)]
    assert op.state_size() == (0, 0)
    # the end moved the watermark past what it held: a message that could have met one is late
    assert op.process_port(RIGHT, m(3, 205.0, "after-end")) == []
    assert op.late_dropped == 1


def test_outer_join_emits_both_sides_unmatched_in_event_time_order() -> None:
    op = start(spec(how="outer"))
    op.process_port(RIGHT, m(1, 50.0, "r1"))
    op.process_port(LEFT, m(2, 40.0, "l2"))
    op.process_port(LEFT, m(1, 55.0, "l1"))
    assert op.on_end_of_stream() == [("l2", None)]
    op2 = start(spec(how="outer"))
    op2.process_port(RIGHT, m(1, 50.0, "r1"))
    op2.process_port(LEFT, m(2, 40.0, "l2"))
    assert op2.on_watermark(10**9) == [("l2", None), (None, "r1")]


def test_inner_join_drops_a_none_combine_and_a_none_key_fails() -> None:
    js = JoinSpec(OP, "j", ("stream:a", "stream:b"), "", key_fn=lambda m: m["id"],
                  other_key_fn=lambda m: m["id"], combine=lambda a, b: None, within_ms=1000,
                  sides=(SIDE, SIDE))
    op = start(js)
    op.process_port(LEFT, m(1, 1.0, "l"))
    assert op.process_port(RIGHT, m(1, 1.0, "r")) == []
    with pytest.raises(TaskError, match=f"join '{OP}': the right key of .* is None"):
        op.process_port(RIGHT, m(None, 1.0, "r"))


def test_an_event_time_that_does_not_fit_the_message_names_the_join_side_and_input() -> None:
    op = start(spec())
    with pytest.raises(TaskError, match=(f"join '{OP}': the event_time declared on input 'in' "
                                         f"failed on the left message .*KeyError")):
        op.process_port(LEFT, {"id": 1, "v": "no ts"})


def test_without_runtime_watermarks_the_join_moves_its_own_less_the_declared_bound() -> None:
    op = start(spec(bound_ms=5_000, how="left"), external=False)
    op.process_port(LEFT, m(1, 100.0, "l"))
    assert op.watermark == 95_000
    assert op.process_port(RIGHT, m(1, 96.0, "r-disordered")) == [("l", "r-disordered")]
    assert op.process_port(RIGHT, m(2, 94.0, "too-late")) == []
    assert op.late_dropped == 1
    assert op.process_port(LEFT, m(5, 101.0, "alone")) == []
    # a message far ahead moves the watermark: the unmatched left message comes out
    assert op.process_port(LEFT, m(3, 300.0, "l3")) == [("alone", None)]
    assert op.state_size() == (1, 0)


def test_restore_from_the_stores_gives_the_same_answer() -> None:
    rng = random.Random(7)
    msgs = [(rng.randrange(2), m(rng.randrange(4), rng.randrange(0, 200_000) / 1000.0, i))
            for i in range(300)]
    marks = {i: i * 500 for i in range(0, 300, 37)}

    def run(cut: int | None) -> list[Any]:
        stores = {f"{OP}-L": InMemoryState(), f"{OP}-R": InMemoryState()}
        op = start(spec(how="outer"), stores)
        out: list[Any] = []
        for i, (port, msg) in enumerate(msgs):
            if i == cut:
                op.flush_state()
                op = start(spec(how="outer"), stores)
            if i in marks:
                out += op.on_watermark(marks[i])
            out += op.process_port(port, msg)
        return out + op.on_end_of_stream()

    whole = run(None)
    assert len(whole) > 100
    for cut in (1, 50, 151, 299):
        assert run(cut) == whole


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2), st.integers(0, 40)),
                max_size=40),
       st.integers(1, 10), st.sampled_from(["inner", "left", "outer"]))
def test_equals_every_pair_within_reach_when_nothing_is_late(
        msgs: list[tuple[int, int, int]], within: int, how: str) -> None:
    op = start(spec(within_ms=within * 1000, how=how))
    out: list[Any] = []
    for i, (port, key, t) in enumerate(msgs):
        out += op.process_port(port, m(key, float(t), i))
    out += op.on_end_of_stream()
    left = [(i, k, t) for i, (p, k, t) in enumerate(msgs) if p == 0]
    right = [(i, k, t) for i, (p, k, t) in enumerate(msgs) if p == 1]
    pairs = [(li, ri) for (li, lk, lt), (ri, rk, rt) in itertools.product(left, right)
             if lk == rk and abs(lt - rt) <= within]
    expected = list(pairs)
    if how in ("left", "outer"):
        expected += [(li, None) for li, _, _ in left if all(p[0] != li for p in pairs)]
    if how == "outer":
        expected += [(None, ri) for ri, _, _ in right if all(p[1] != ri for p in pairs)]
    assert sorted(out, key=repr) == sorted(expected, key=repr)


def test_the_api_takes_exactly_one_clock_and_how_only_in_event_time() -> None:
    mem = MemorySystem()
    app = StreamApplication("api")
    a = app.input(mem.input("a", event_time=lambda m: m["ts"]))
    b = app.input(mem.input("b", event_time=lambda m: m["ts"]))
    kw: dict[str, Any] = {"key": lambda m: m, "other_key": lambda m: m,
                          "combine": lambda a, b: a}
    with pytest.raises(TypeError, match="join 'x': give exactly one of ttl= .* and within= .* "
                                        "got both"):
        a.join(b, name="x", ttl=timedelta(seconds=1), within=timedelta(seconds=1), **kw)
    with pytest.raises(TypeError, match="got neither"):
        a.join(b, name="x", **kw)
    with pytest.raises(TypeError, match="how= and late_to= go with within="):
        a.join(b, name="x", ttl=timedelta(seconds=1), how="left", **kw)
    with pytest.raises(ValueError, match="how must be one of 'inner', 'left', 'outer'"):
        a.join(b, name="x", within=timedelta(seconds=1), how="full", **kw)
    with pytest.raises(ValueError, match="within"):
        a.join(b, name="x", within=timedelta(0), **kw)
    j = a.join(b, name="x", within=timedelta(seconds=60), how="left", **kw)
    js = app.spec().operator(j.op_id or "")
    assert isinstance(js, JoinSpec)
    assert (js.within_ms, js.how, js.ttl_ms, js.late_to) == (60_000, "left", 0, None)


def test_a_side_without_declared_event_time_fails_the_plan_naming_join_side_and_input() -> None:
    mem = MemorySystem()
    app = StreamApplication("api")
    a = app.input(mem.input("a", event_time=lambda m: m["ts"]))
    b = app.input(mem.input("b"))
    with pytest.raises(PlanError, match=r"join 'x': its right side reads from input\(s\) 'b' "
                                        r"without declared event time.*event_time="):
        a.join(b.map(lambda m: m), name="x", within=timedelta(seconds=1),
               key=lambda m: m, other_key=lambda m: m, combine=lambda x, y: x)


def test_a_side_through_partition_by_reads_the_kv_value_and_task_window_ms_ignores_it() -> None:
    mem = MemorySystem()
    app = StreamApplication("api")
    a = app.input(mem.input("a", event_time=lambda m: m["ts"]))
    b = app.input(mem.input("b", event_time=lambda m: m["at"],
                            max_out_of_orderness=timedelta(seconds=4)))
    j = a.join(b.partition_by(lambda m: m["id"], name="by-id").filter(lambda kv: True),
               name="x", within=timedelta(seconds=7), key=lambda m: m["id"],
               other_key=lambda kv: kv.key, combine=lambda x, y: x)
    j.send_to(app.output(mem.output("out")))
    js = app.spec().operator(j.op_id or "")
    assert isinstance(js, JoinSpec)
    assert [(s.input_id, s.unwrap, s.bound_ms) for s in js.sides] == [("a", 0, 0), ("b", 1, 4000)]
    assert js.sides[1].event_time(KV(1, {"at": 2.5}).value) == 2.5
    plan = app.plan(partitions={"a": 1, "b": 1})
    assert "task.window.ms" not in plan.config
    assert "[join x within=7000ms inner event-time]" in plan_to_text(plan)
