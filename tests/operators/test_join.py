"""Stream-stream join (docs/semantics.md rule 9)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from operator_helpers import FakeClock

from operators import build_operator
from operators.base import OperatorContext
from operators.join import JoinOperator
from operators.state import InMemoryState, encode_key
from runtime.state.codec import state_codec
from runtime.state.memory_store import MemoryStore
from samza_dsl.errors import TaskError
from samza_dsl.spec import JoinSpec

LEFT, RIGHT = 0, 1


def join_spec(ttl_ms: int = 1000, combine: Callable[[Any, Any], Any] | None = None) -> JoinSpec:
    return JoinSpec("app-1-join-j", "j", ("stream:views", "stream:clicks"), "test.py:1",
                    key_fn=lambda m: m["id"], other_key_fn=lambda m: m["id"],
                    combine=combine or (lambda left, right: (left["v"], right["v"])),
                    ttl_ms=ttl_ms)


def start(make_ctx: Callable[..., OperatorContext], spec: JoinSpec | None = None,
          **stores: InMemoryState) -> JoinOperator:
    op = build_operator(spec or join_spec())
    assert isinstance(op, JoinOperator)
    op.init(make_ctx("app-1-join-j-L", "app-1-join-j-R",
                     stores={f"app-1-join-j-{k}": v for k, v in stores.items()}))
    return op


def m(id_: Any, v: Any) -> dict[str, Any]:
    return {"id": id_, "v": v}


def test_emits_left_first_whichever_side_arrives_second(clock: FakeClock, make_ctx: Any) -> None:
    op = start(make_ctx)
    assert op.process_port(LEFT, m(1, "view")) == []
    assert op.process_port(RIGHT, m(1, "click")) == [("view", "click")]
    assert op.process_port(RIGHT, m(2, "click2")) == []
    assert op.process_port(LEFT, m(2, "view2")) == [("view2", "click2")]
    assert op.process(m(2, "view3")) == [("view3", "click2")]  # process is the left port


def test_ttl_is_strict(clock: FakeClock, make_ctx: Any) -> None:
    op = start(make_ctx, join_spec(ttl_ms=1000))
    clock.set(5000)
    op.process_port(LEFT, m(1, "a"))
    clock.set(5999)
    assert op.process_port(RIGHT, m(1, "b")) == [("a", "b")]  # 999 ms old: younger than the TTL
    clock.set(6000)
    assert op.process_port(RIGHT, m(1, "c")) == []  # exactly the TTL: too old
    # the right side was stored first: a later left sees the newest right (1000 - 1 ms younger)
    clock.set(6999)
    assert op.process_port(LEFT, m(1, "d")) == [("d", "c")]


def test_each_side_keeps_only_its_latest_message_per_key(clock: FakeClock, make_ctx: Any) -> None:
    op = start(make_ctx)
    op.process_port(LEFT, m(1, "old"))
    op.process_port(LEFT, m(1, "new"))
    assert op.process_port(RIGHT, m(1, "r")) == [("new", "r")]
    assert op._stores[LEFT].get(1) == (0, m(1, "new"))
    assert op.state_size() == (1, 1)


def test_store_first_then_look_up(clock: FakeClock, make_ctx: Any) -> None:
    seen: list[Any] = []

    def combine(left: Any, right: Any) -> Any:
        seen.append(op._stores[RIGHT].get(1))
        return left["v"] + right["v"]

    op = start(make_ctx, join_spec(combine=combine))
    op.process_port(LEFT, m(1, "l"))
    assert op.process_port(RIGHT, m(1, "r")) == ["lr"]
    assert seen == [(0, m(1, "r"))]  # the message was stored before combine ran


def test_none_result_is_dropped(clock: FakeClock, make_ctx: Any) -> None:
    op = start(make_ctx, join_spec(combine=lambda left, right: None))
    op.process_port(LEFT, m(1, "l"))
    assert op.process_port(RIGHT, m(1, "r")) == []


def test_none_key_fails_like_samza(clock: FakeClock, make_ctx: Any) -> None:
    op = start(make_ctx)
    with pytest.raises(TaskError, match="right key .* is None") as err:
        op.process_port(RIGHT, m(None, "r"))
    assert err.value.op_id == "app-1-join-j"
    assert op.state_size() == (0, 0)


def test_timer_purges_expired_entries_from_both_sides(clock: FakeClock, make_ctx: Any) -> None:
    op = start(make_ctx, join_spec(ttl_ms=1000))
    op.process_port(LEFT, m(1, "l1"))
    op.process_port(RIGHT, m(2, "r2"))
    clock.set(500)
    op.process_port(LEFT, m(3, "l3"))
    op.process_port(LEFT, m(1, "l1b"))  # replaces key 1: now 500 ms old, not 0
    assert op.on_timer(999) == [] and op.state_size() == (2, 1)
    assert op.on_timer(1000) == []
    assert op.state_size() == (2, 0) and op._stores[RIGHT].get(2) is None
    op.on_timer(1500)
    assert op.state_size() == (0, 0)
    assert list(op._stores[LEFT].all()) == [] and list(op._stores[RIGHT].all()) == []


def test_restore_rebuilds_the_purge_index(clock: FakeClock, make_ctx: Any) -> None:
    left, right = InMemoryState(), InMemoryState()
    op = start(make_ctx, L=left, R=right)
    op.process_port(LEFT, m(1, "l"))
    clock.set(700)
    op.process_port(RIGHT, m(2, "r"))
    again = start(make_ctx, L=left, R=right)
    assert again.state_size() == (1, 1)
    again.on_timer(1000)
    assert again.state_size() == (0, 1)
    clock.set(1500)
    assert again.process_port(LEFT, m(2, "l2")) == [("l2", "r")]


def test_user_function_objects_get_init_and_close(clock: FakeClock, make_ctx: Any) -> None:
    calls: list[str] = []

    class Combine:
        def init(self, ctx: Any) -> None:
            calls.append("init")

        def apply(self, left: Any, right: Any) -> Any:
            return left["v"] + right["v"]

        def close(self) -> None:
            calls.append("close")

    spec = JoinSpec("app-1-join-j", "j", ("stream:a", "stream:b"), "", key_fn=lambda x: x["id"],
                    other_key_fn=lambda x: x["id"], combine=Combine(), ttl_ms=10)
    op = start(make_ctx, spec)
    op.process_port(LEFT, m(1, "a"))
    assert op.process_port(RIGHT, m(1, "b")) == ["ab"]
    op.close()
    assert calls == ["init", "close"]


def model_step(sides: list[dict[int, tuple[int, Any]]], port: int, k: int, now: int,
               msg: dict[str, Any]) -> list[Any]:
    """Rule 9 on a dict per side (TTL 250 ms): ``msg`` stored at ``now``; what it emits."""
    sides[port][k] = (now, msg)
    other = sides[1 - port].get(k)
    if other is None or now - other[0] >= 250:
        return []
    return [(msg["v"], other[1]["v"])] if port == LEFT else [(other[1]["v"], msg["v"])]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([LEFT, RIGHT]), st.integers(0, 3), st.integers(0, 300),
                          st.booleans()), max_size=50))
def test_matches_a_reference_model(steps: list[tuple[int, int, int, bool]]) -> None:
    """Random messages, clock steps and purges against a dict model of rule 9."""
    clock = FakeClock()
    op = JoinOperator(join_spec(ttl_ms=250))
    op.init(OperatorContext("t", {}, clock, {"app-1-join-j-L": InMemoryState(),
                                            "app-1-join-j-R": InMemoryState()}))
    sides: list[dict[int, tuple[int, Any]]] = [{}, {}]
    for i, (port, k, dt, purge) in enumerate(steps):
        now = clock.set(clock.now + dt)
        if purge:
            op.on_timer(now)
            for side in sides:
                for key in [key for key, (ts, _) in side.items() if now - ts >= 250]:
                    del side[key]
        msg = m(k, i)
        assert op.process_port(port, msg) == model_step(sides, port, k, now, msg)
    assert op.state_size() == (len(sides[0]), len(sides[1]))


class NsClock:
    """A wall clock as the runtime gives it: ms when called, ``ns`` for operators that read it
    per message; ``at`` is the time in ns."""

    def __init__(self) -> None:
        self.at = 0

    def __call__(self) -> int:
        return self.at // 1_000_000

    def ns(self) -> int:
        return self.at


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([LEFT, RIGHT]), st.integers(0, 3),
                          st.integers(-400_000_000, 400_000_000)), max_size=60))
def test_a_wall_clock_read_in_ns_gives_the_ms_it_reads_and_never_goes_back(
        steps: list[tuple[int, int, int]]) -> None:
    """A clock given in ns too (``clock_ns``, the runtime's wall clock) read per message: each arrival is the
    whole ms of the clock, except that a clock stepped back reads as the latest ms read
    until it passes it; the outputs follow rule 9 on those times."""
    clock = NsClock()
    clock.at = 1_700_000_000_000_000_000
    op = JoinOperator(join_spec(ttl_ms=250))
    op.init(OperatorContext("t", {}, clock, {"app-1-join-j-L": InMemoryState(),
                                            "app-1-join-j-R": InMemoryState()},
                            clock_ns=clock.ns))
    sides: list[dict[int, tuple[int, Any]]] = [{}, {}]
    latest = 0
    for i, (port, k, dt) in enumerate(steps):
        clock.at += dt
        latest = now = max(latest, clock.at // 1_000_000)
        msg = m(k, i)
        assert op.process_port(port, msg) == model_step(sides, port, k, now, msg)
        assert op._stores[port].get(k) == (now, msg)


def memory_stores() -> dict[str, MemoryStore]:
    """The join's two stores as TestRunner has them: bytes in memory, the job's codecs."""
    stores = {}
    for side in "LR":
        ke, kd, ve, vd = state_codec({}, f"join state of side {side}")
        stores[f"app-1-join-j-{side}"] = MemoryStore(
            name=f"app-1-join-j-{side}", task="t", key_encode=ke, key_decode=kd,
            value_encode=ve, value_decode=vd)
    return stores


@pytest.mark.parametrize("keys", [range(1, 51), [f"k{i}" for i in range(50)]])
def test_a_key_the_other_side_never_stored_is_not_read_from_its_store(keys: Any) -> None:
    """An int or str key absent from the other side's index of arrivals is absent from its
    store: the join does not encode it to look there (W4's misses)."""
    clock = FakeClock()
    stores = memory_stores()
    op = JoinOperator(join_spec())
    op.init(OperatorContext("t", {}, clock, dict(stores)))
    for k in keys:
        assert op.process_port(LEFT, m(k, "l")) == []
    right = stores["app-1-join-j-R"]
    assert right.reads == 0
    assert op.process_port(RIGHT, m(next(iter(keys)), "r")) == [("l", "r")]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([LEFT, RIGHT]),
                          st.sampled_from([0, 1, 1.0, True, 2.5, "a", "1", (1, "a"), -0.0]),
                          st.integers(0, 300), st.sampled_from(["", "purge", "flush",
                                                                "restore"])), max_size=50))
def test_on_stores_of_bytes_matches_the_model_by_encoded_keys(
        steps: list[tuple[int, Any, int, str]]) -> None:
    """Keys equal as the store encodes them (1, 1.0 and True; 0 and -0.0) are one key, whichever
    side stored which and whether the stores were flushed or the join restored meanwhile."""
    clock = FakeClock()
    stores = memory_stores()
    op = JoinOperator(join_spec(ttl_ms=250))
    op.init(OperatorContext("t", {}, clock, dict(stores)))
    sides: list[dict[Any, tuple[int, Any]]] = [{}, {}]
    for i, (port, k, dt, act) in enumerate(steps):
        now = clock.set(clock.now + dt)
        if act == "purge":
            op.on_timer(now)
            for side in sides:
                for key in [key for key, (ts, _) in side.items() if now - ts >= 250]:
                    del side[key]
        elif act == "flush":
            for store in stores.values():
                store.flush()
        elif act == "restore":
            op = JoinOperator(join_spec(ttl_ms=250))
            op.init(OperatorContext("t", {}, clock, dict(stores)))
        msg = m(k, i)
        assert op.process_port(port, msg) == model_step(sides, port, encode_key(k), now, msg)
