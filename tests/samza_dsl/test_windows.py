"""Windows, triggers, WindowPane and WindowKey specs."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import msgspec
import pytest

from samza_dsl import (
    AccumulationMode,
    FiringType,
    Trigger,
    Triggers,
    Window,
    WindowKey,
    WindowPane,
    Windows,
)
from samza_dsl.windows import (
    AnyTrigger,
    CountTrigger,
    RepeatTrigger,
    TimeSinceFirstMessageTrigger,
    TimeSinceLastMessageTrigger,
    to_ms,
)

S = timedelta(seconds=1)


def key(m):
    return m["user"]


def event_time(m):
    return m["ts"]


# -- factories -----------------------------------------------------------------------------------

def test_tumbling_defaults():
    w = Windows.tumbling(timedelta(minutes=1))
    assert isinstance(w, Window)
    assert (w.kind, w.size_ms, w.key_fn, w.init, w.fold, w.event_time) == (
        "tumbling", 60_000, None, None, None, None)
    assert (w.early, w.late, w.mode, w.allowed_lateness_ms) == (
        None, None, AccumulationMode.ACCUMULATING, 0)
    assert not w.keyed and not w.is_session


def test_keyed_tumbling_and_session_keep_their_key_and_fold():
    def init():
        return 0

    def fold(m, acc):
        return acc + 1

    kt = Windows.keyed_tumbling(key, 10 * S, init=init, fold=fold, event_time=event_time)
    assert (kt.kind, kt.size_ms, kt.key_fn, kt.init, kt.fold, kt.event_time) == (
        "keyed_tumbling", 10_000, key, init, fold, event_time)
    assert kt.keyed and not kt.is_session
    ks = Windows.keyed_session(key, timedelta(milliseconds=1500))
    assert (ks.kind, ks.size_ms) == ("keyed_session", 1500)
    assert ks.keyed and ks.is_session


@pytest.mark.parametrize("bad", [timedelta(0), timedelta(seconds=-3), timedelta(microseconds=400)])
@pytest.mark.parametrize("factory", [
    lambda size: Windows.tumbling(size),
    lambda size: Windows.keyed_tumbling(key, size),
    lambda size: Windows.keyed_session(key, size),
])
def test_non_positive_size_or_gap_raises(factory, bad):
    with pytest.raises(ValueError, match="Windows.(tumbling|keyed_tumbling|keyed_session) "
                                         "(size|gap)"):
        factory(bad)


@pytest.mark.parametrize("bad", ["10s", None, True])
def test_size_of_the_wrong_type_raises(bad):
    with pytest.raises(TypeError, match="Windows.tumbling size"):
        Windows.tumbling(bad)  # type: ignore[arg-type]


def test_infinite_or_nan_size_raises_value_error():
    with pytest.raises(ValueError, match="size"):
        Windows.tumbling(float("inf"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="size"):
        Windows.tumbling(float("nan"))  # type: ignore[arg-type]


def test_init_without_fold_or_fold_without_init_raises():
    with pytest.raises(ValueError, match="both init and fold"):
        Windows.tumbling(S, init=list)
    with pytest.raises(ValueError, match="both init and fold"):
        Windows.keyed_tumbling(key, S, fold=lambda m, acc: acc)
    with pytest.raises(ValueError, match="both init and fold"):
        Windows.keyed_session(key, S, init=list)


def test_non_callable_window_functions_raise():
    with pytest.raises(TypeError, match="init"):
        Windows.tumbling(S, init=0, fold=max)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="event_time"):
        Windows.tumbling(S, event_time=1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="keyed_tumbling needs a callable key_fn"):
        Windows.keyed_tumbling(None, S)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="keyed_session needs a callable key_fn"):
        Windows.keyed_session(42, S)  # type: ignore[arg-type]
    # a string names a field of the message
    assert Windows.keyed_session("user", S).key_fn({"user": "u1"}) == "u1"


# -- builder methods -----------------------------------------------------------------------------

def test_builder_methods_return_new_windows_and_leave_the_original():
    w = Windows.keyed_tumbling(key, 10 * S)
    early = Triggers.repeat(Triggers.count(2))
    w2 = w.early_trigger(early)
    w3 = w2.late_trigger(Triggers.count(1))
    w4 = w3.accumulation(AccumulationMode.DISCARDING)
    assert w.early is None and w.late is None and w.mode is AccumulationMode.ACCUMULATING
    assert w2.early is early and w2.late is None
    assert w3.late == Triggers.count(1)
    assert w4.mode is AccumulationMode.DISCARDING
    assert w4.key_fn is key and w4.size_ms == 10_000
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.size_ms = 5  # type: ignore[misc]


def test_builder_methods_type_check_their_argument():
    w = Windows.tumbling(S)
    with pytest.raises(TypeError, match="early_trigger"):
        w.early_trigger(2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="late_trigger"):
        w.late_trigger("count")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="accumulation"):
        w.accumulation("discarding")  # type: ignore[arg-type]


def test_allowed_lateness_needs_event_time():
    with pytest.raises(ValueError, match="event-time"):
        Windows.tumbling(S).allowed_lateness(timedelta(minutes=1))
    w = Windows.tumbling(S, event_time=event_time).allowed_lateness(timedelta(minutes=1))
    assert w.allowed_lateness_ms == 60_000
    assert Windows.tumbling(S, event_time=event_time).allowed_lateness(
        timedelta(0)).allowed_lateness_ms == 0


def test_negative_or_mistyped_allowed_lateness_raises():
    w = Windows.tumbling(S, event_time=event_time)
    with pytest.raises(ValueError, match="allowed_lateness"):
        w.allowed_lateness(timedelta(seconds=-1))
    with pytest.raises(TypeError, match="allowed_lateness"):
        w.allowed_lateness("1m")  # type: ignore[arg-type]


# -- triggers ------------------------------------------------------------------------------------

def test_trigger_factories():
    assert Triggers.count(3) == CountTrigger(3)
    first = Triggers.time_since_first_message(timedelta(seconds=2))
    last = Triggers.time_since_last_message(timedelta(milliseconds=250))
    assert isinstance(first, TimeSinceFirstMessageTrigger) and first.duration_ms == 2000
    assert isinstance(last, TimeSinceLastMessageTrigger) and last.duration_ms == 250
    anyt = Triggers.any(Triggers.count(5), first)
    assert isinstance(anyt, AnyTrigger) and anyt.triggers == (CountTrigger(5), first)
    rep = Triggers.repeat(anyt)
    assert isinstance(rep, RepeatTrigger) and rep.trigger == anyt
    for t in (first, last, anyt, rep):
        assert isinstance(t, Trigger)


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "2"])
def test_count_needs_a_positive_int(n):
    with pytest.raises(ValueError, match="Triggers.count"):
        Triggers.count(n)  # type: ignore[arg-type]


@pytest.mark.parametrize("factory, what", [
    (Triggers.time_since_first_message, "time_since_first_message"),
    (Triggers.time_since_last_message, "time_since_last_message"),
])
def test_time_triggers_need_a_positive_duration(factory, what):
    with pytest.raises(ValueError, match=what):
        factory(timedelta(0))
    with pytest.raises(ValueError, match=what):
        factory(timedelta(seconds=-5))
    with pytest.raises(TypeError, match=what):
        factory("5s")


def test_any_and_repeat_argument_errors():
    with pytest.raises(ValueError, match=r"Triggers.any\(\)"):
        Triggers.any()
    with pytest.raises(TypeError, match=r"Triggers.any\(\)"):
        Triggers.any(Triggers.count(1), 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Triggers.repeat\(\)"):
        Triggers.repeat(2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="redundant"):
        Triggers.repeat(Triggers.repeat(Triggers.count(1)))


def test_trigger_durations_collect_every_time_trigger():
    a = Triggers.time_since_first_message(timedelta(seconds=6))
    b = Triggers.time_since_last_message(timedelta(seconds=4))
    assert Triggers.count(3).durations_ms() == []
    assert a.durations_ms() == [6000]
    assert sorted(Triggers.repeat(Triggers.any(a, Triggers.count(2), b)).durations_ms()) == [
        4000, 6000]


def test_trigger_descriptions():
    t = Triggers.repeat(Triggers.any(Triggers.count(2),
                                     Triggers.time_since_first_message(timedelta(seconds=1))))
    assert t.describe() == "repeat(any(count(2), time_since_first_message(1000ms)))"
    assert Triggers.time_since_last_message(S).describe() == "time_since_last_message(1000ms)"


# -- window durations and description ------------------------------------------------------------

def test_processing_time_window_durations_include_its_size_and_time_triggers():
    w = (Windows.keyed_tumbling(key, 10 * S)
         .early_trigger(Triggers.time_since_first_message(4 * S))
         .late_trigger(Triggers.count(1)))
    assert sorted(w.durations_ms()) == [4000, 10_000]


def test_event_time_window_closes_on_the_watermark_not_on_a_timer():
    w = Windows.tumbling(10 * S, event_time=event_time)
    assert w.durations_ms() == []
    w = w.early_trigger(Triggers.time_since_last_message(3 * S))
    assert w.durations_ms() == [3000]


def test_window_describe():
    w = (Windows.keyed_session(key, 30 * S, event_time=event_time)
         .early_trigger(Triggers.count(2)).late_trigger(Triggers.count(1))
         .accumulation(AccumulationMode.DISCARDING).allowed_lateness(5 * S))
    assert w.describe() == {"kind": "keyed_session", "gap_ms": 30_000, "time": "event",
                            "mode": "discarding", "early_trigger": "count(2)",
                            "late_trigger": "count(1)", "allowed_lateness_ms": 5000}
    assert Windows.tumbling(S).describe() == {"kind": "tumbling", "size_ms": 1000,
                                              "time": "processing", "mode": "accumulating"}


def test_to_ms_accepts_timedeltas_and_rounds_to_whole_milliseconds():
    assert to_ms(timedelta(minutes=1, milliseconds=5), "x") == 60_005
    assert to_ms(timedelta(microseconds=1600), "x") == 2
    with pytest.raises(ValueError, match="at least 1 millisecond"):
        to_ms(timedelta(microseconds=100), "x")


# -- WindowPane and WindowKey --------------------------------------------------------------------

def test_window_key_and_pane_fields():
    wk = WindowKey("user-1", "60000")
    pane = WindowPane(wk, [1, 2], FiringType.EARLY, AccumulationMode.ACCUMULATING)
    assert (pane.key.key, pane.key.pane_id) == ("user-1", "60000")
    assert pane.message == [1, 2]
    assert pane.firing is FiringType.EARLY
    assert pane.mode is AccumulationMode.ACCUMULATING
    by_name = WindowPane(key=WindowKey(key="user-1", pane_id="60000"), message=[1, 2],
                         firing=FiringType.EARLY, mode=AccumulationMode.ACCUMULATING)
    assert by_name == pane and hash(by_name.key) == hash(wk)
    assert WindowKey(None, "0") != WindowKey(None, "1000")


def test_window_pane_is_frozen():
    pane = WindowPane(WindowKey(None, "0"), 3, FiringType.DEFAULT, AccumulationMode.DISCARDING)
    with pytest.raises(AttributeError):
        pane.message = 4  # type: ignore[misc]
    with pytest.raises(AttributeError):
        pane.key.pane_id = "1"  # type: ignore[misc]


def test_window_pane_round_trips_through_msgspec():
    pane = WindowPane(WindowKey("k", "1000"), {"n": 2}, FiringType.LATE,
                      AccumulationMode.ACCUMULATING)
    for enc, dec in ((msgspec.json.encode, msgspec.json.decode),
                     (msgspec.msgpack.encode, msgspec.msgpack.decode)):
        assert dec(enc(pane), type=WindowPane) == pane


def test_enums_have_samza_names():
    assert {f.name for f in FiringType} == {"EARLY", "DEFAULT", "LATE"}
    assert {m.name for m in AccumulationMode} == {"ACCUMULATING", "DISCARDING"}


def test_keyed_windows_take_the_key_as_key_fn_or_as_key() -> None:
    """``key_fn`` (positional or by keyword, as in the API) and its alias ``key=`` give the same
    window; both at once, or neither, is an error naming the window."""
    from samza_dsl import Aggregate

    size, hop = timedelta(seconds=10), timedelta(seconds=5)
    for kind, extra in (("keyed_tumbling", (size,)), ("keyed_session", (size,)),
                        ("keyed_hopping", (size, hop))):
        factory = getattr(Windows, kind)
        named = dict(zip(("gap",) if kind == "keyed_session" else ("size", "hop"), extra,
                         strict=False))
        by_position = factory("country", *extra, aggregate=Aggregate.count())
        by_key_fn = factory(key_fn="country", **named, aggregate=Aggregate.count())
        by_key = factory(key="country", **named, aggregate=Aggregate.count())
        assert by_position.kind == by_key_fn.kind == by_key.kind == kind
        assert by_position.size_ms == by_key_fn.size_ms == by_key.size_ms
        with pytest.raises(TypeError, match=f"Windows.{kind}: give the key as key_fn or as key="):
            factory("country", *extra, key="country", aggregate=Aggregate.count())
        with pytest.raises(TypeError, match=f"Windows.{kind} needs a callable key_fn"):
            factory(None, *extra, aggregate=Aggregate.count())
