"""``samza_dsl.testing.strategies.keyed_inputs`` keeps its promises: event times within the
declared disorder bound, keys from one small shared pool (so joins meet), table updates of
those keys with deletes, every stream placed by the job's partitioner when fed to a
``TestRunner``; and it finds real bugs, shrunk to a minimal case."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner
from samza_dsl.testing.strategies import Event, KeyedInputs, keyed_inputs

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SERDE = KVSerde(StringSerde(), JsonSerde())
START = 1_700_000_000.0


def ms(t: float) -> int:
    """An event time in whole ms, as the job reads it."""
    return round(t * 1000)


def in_order(drawn: KeyedInputs) -> list[Event]:
    """Every message, in the one order the event times were drawn along."""
    cursors = dict.fromkeys(drawn.events, 0)
    out = []
    for sid in drawn.order:
        out.append(drawn.events[sid][cursors[sid]])
        cursors[sid] += 1
    assert cursors == {s: len(es) for s, es in drawn.events.items()}
    return out


# --- the promises of a draw ----------------------------------------------------------------------

@PROPS
@given(data=st.data(), max_step=st.sampled_from([0.0, 0.5, 5.0]),
       max_disorder=st.sampled_from([0.0, 0.001, 2.0, 4.0]))
def test_event_times_never_exceed_the_declared_disorder(
        data: st.DataObject, max_step: float, max_disorder: float) -> None:
    drawn = data.draw(keyed_inputs(["a", "b", "c"], max_size=15, max_step=max_step,
                                   max_disorder=max_disorder))
    assert drawn.max_disorder == max_disorder
    events = in_order(drawn)
    bound, step = ms(max_disorder), ms(max_step)
    for i, e in enumerate(events):
        assert round(e.time, 3) == e.time
        assert ms(e.time) >= max([ms(START), *(ms(f.time) for f in events[:i])]) - bound, i
        assert ms(START) - bound <= ms(e.time) <= ms(START) + (i + 1) * step
    for sid, es in drawn.events.items():  # each stream alone, hence each of its partitions
        for i, e in enumerate(es):
            assert ms(e.time) >= max(ms(f.time) for f in es[:i + 1]) - bound, (sid, i)
        assert drawn.streams[sid] == tuple(KV(e.key, {"time": e.time, "value": e.value})
                                           for e in es)
    if max_disorder == 0.0:
        assert [e.time for e in events] == sorted(e.time for e in events)


def test_the_draws_do_reach_their_disorder_bound() -> None:
    worst: list[int] = []

    @settings(max_examples=60, deadline=None, database=None)
    @given(keyed_inputs(["a", "b"], min_size=5, max_disorder=2.0))
    def collect(drawn: KeyedInputs) -> None:
        times = [ms(e.time) for e in in_order(drawn)]
        worst.append(max(max(times[:i + 1]) - t for i, t in enumerate(times)))

    collect()
    assert max(worst) > 1000 and min(worst) < max(worst)


@PROPS
@given(keyed_inputs({"requests": st.integers(), "trips": st.text(max_size=3)},
                    unique_keys=["requests"], max_keys=5, max_size=12,
                    tables={"drivers": st.integers(0, 3), "cars": st.booleans()},
                    max_updates=6))
def test_every_key_comes_from_one_small_pool(drawn: KeyedInputs) -> None:
    used = ({e.key for es in drawn.events.values() for e in es}
            | {kv.key for us in drawn.updates.values() for kv in us})
    assert len(drawn.keys) == len(set(drawn.keys)) <= 5 and set(drawn.keys) == used
    assert all(k.startswith("k") for k in drawn.keys)
    requests = [e.key for e in drawn.events["requests"]]
    assert len(requests) == len(set(requests)) <= 5           # each request key once
    assert set(drawn.updates) == {"drivers", "cars"}
    for sid, updates in drawn.updates.items():
        assert len(updates) <= 6
        final: dict[Any, Any] = {}
        for kv in updates:
            if kv.value is None:
                final.pop(kv.key, None)
            else:
                final[kv.key] = kv.value
        assert drawn.table(sid) == final
    assert all(isinstance(e.value, int) for e in drawn.events["requests"])
    assert drawn.shared_keys("requests", "trips") == (
        {e.key for e in drawn.events["requests"]} & {e.key for e in drawn.events["trips"]})


@settings(max_examples=30, deadline=None)
@given(keyed_inputs({"views": st.sampled_from(["/", "/a"])}, max_disorder=1.0,
                    message=lambda key, time, value: {"user": key, "at": time, "page": value}))
def test_message_builds_each_message_from_its_event(drawn: KeyedInputs) -> None:
    assert drawn.streams["views"] == tuple({"user": e.key, "at": e.time, "page": e.value}
                                           for e in drawn.events["views"])
    assert {e.value for e in drawn.events["views"]} <= {"/", "/a"}


def test_joins_meet_and_updates_delete() -> None:
    met, deleted = [], []

    @settings(max_examples=100, deadline=None, database=None, derandomize=True)
    @given(keyed_inputs(["left", "right"], min_size=1, tables={"t": st.integers()}))
    def collect(drawn: KeyedInputs) -> None:
        met.append(bool(drawn.shared_keys("left", "right")))
        deleted.append(any(kv.value is None for kv in drawn.updates["t"]))

    collect()
    assert sum(met) >= 50, f"only {sum(met)} of 100 draws share a key between the streams"
    assert any(deleted)

    @settings(max_examples=50, deadline=None, database=None)
    @given(keyed_inputs(["s"], tables={"t": st.integers()}, deletes=False))
    def no_deletes(drawn: KeyedInputs) -> None:
        assert all(kv.value is not None for kv in drawn.updates["t"])

    no_deletes()


def placement_app() -> StreamApplication:
    """Three inputs of 3 partitions and a side input, passed through."""
    mem = MemorySystem()
    app = StreamApplication("placement")
    table = app.table("t", serde=SERDE, processor=lambda kv: [kv],
                      side_inputs=[mem.input("updates", serde=SERDE, partitions=3)])
    for sid in ("a", "b", "c"):
        (app.input(mem.input(sid, serde=SERDE, partitions=3))
         .join_table(table, combine=lambda m, r: m, name=f"look-{sid}")
         .send_to(app.output(mem.output(f"{sid}-out", serde=SERDE, partitions=3))))
    return app


PLACEMENT = placement_app()


@settings(max_examples=30, deadline=None)
@given(keyed_inputs(["a", "b", "c"], max_disorder=1.0, tables={"updates": st.integers()}))
def test_fed_streams_are_placed_by_key_alike_in_every_stream(drawn: KeyedInputs) -> None:
    result = drawn.feed(TestRunner(PLACEMENT)).run()
    home: dict[Any, int] = {}
    for sid in ("a", "b", "c", "updates"):
        parts = result.partitions(sid)
        assert sorted(parts) == [0, 1, 2]
        given = drawn.streams[sid] if sid in drawn.streams else drawn.updates[sid]
        assert sorted(map(repr, (m for ms_ in parts.values() for m in ms_))) == sorted(
            map(repr, given))
        for p, messages in parts.items():
            for m in messages:  # a key has one partition, the same in every stream
                assert home.setdefault(m.key, p) == p, (sid, m.key)
            # each partition holds its keys' messages in the order drawn, so the bound holds
            assert messages == [m for m in given if home.get(m.key) == p]
            if sid != "updates":
                times = [ms(m.value["time"]) for m in messages]
                assert all(t >= max(times[:i + 1]) - 1000 for i, t in enumerate(times))
        if sid != "updates":
            assert Counter(map(repr, result.messages(f"{sid}-out"))) == Counter(map(repr, given))


# --- arguments -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "kw", "error"), [
    ((), {"streams": []}, "give at least one stream id"),
    ((), {"streams": "clicks"}, "got the string 'clicks'"),
    ((["a", "b"],), {"tables": {"a": st.integers()}}, "stream ids ['a'] are given twice"),
    ((["a"],), {"unique_keys": ["b"]}, "unique_keys names ['b']"),
    ((["a"],), {"min_size": 3, "max_size": 2}, "0 <= min_size <= max_size"),
    ((["a"],), {"unique_keys": True, "min_size": 5, "max_keys": 4}, "raise max_keys to at least 5"),
    ((["a"],), {"max_disorder": -1.0}, "max_disorder=-1.0"),
])
def test_bad_arguments_are_refused_in_one_line(args: tuple[Any, ...], kw: dict[str, Any],
                                               error: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        keyed_inputs(*args, **kw)
    assert error in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith("keyed_inputs: ")


# --- finding real bugs, shrunk -------------------------------------------------------------------

FIND = settings(max_examples=300, deadline=None, database=None)


def enrichment(processor: Any) -> StreamApplication:
    """Trips looked up in a table of drivers' cars that a side input fills."""
    mem = MemorySystem()
    app = StreamApplication("trip-cars")
    cars = app.table("cars", serde=SERDE, processor=processor,
                     side_inputs=[mem.input("car-updates", serde=SERDE, partitions=2)])
    (app.input(mem.input("trips", serde=SERDE, partitions=2))
     .join_table(cars, combine=lambda trip, car: KV(trip.key, car and car.value), name="car")
     .send_to(app.output(mem.output("trip-cars", serde=SERDE, partitions=2))))
    return app


def enrichment_is_wrong(app: StreamApplication, drawn: KeyedInputs) -> bool:
    result = drawn.feed(TestRunner(app)).run()
    cars = drawn.table("car-updates")
    want = Counter((e.key, cars.get(e.key)) for e in drawn.events["trips"])
    return Counter((kv.key, kv.value) for kv in result.messages("trip-cars")) != want


def test_a_correct_enrichment_passes() -> None:
    app = enrichment(lambda kv: [kv])

    @settings(max_examples=40, deadline=None, database=None)
    @given(keyed_inputs(["trips"], tables={"car-updates": st.integers()}))
    def check(drawn: KeyedInputs) -> None:
        assert not enrichment_is_wrong(app, drawn)

    check()


def test_an_enrichment_that_ignores_deletes_is_found_and_shrunk_to_put_then_delete() -> None:
    # the bug: a processor that drops the side input's deletes, so a deleted car stays
    app = enrichment(lambda kv: [kv] if kv.value is not None else [])
    drawn = find(keyed_inputs(["trips"], tables={"car-updates": st.integers()}),
                 lambda d: enrichment_is_wrong(app, d), settings=FIND)
    assert drawn.keys == ("k0",)
    assert drawn.events["trips"] == (Event("k0", START, 0),)
    assert drawn.updates["car-updates"] == (KV("k0", 0), KV("k0", None))


def test_a_pipeline_that_assumes_order_is_found_and_shrunk_to_one_ms_of_disorder() -> None:
    # the bug: a stage that drops a message older than the last one of its key, as if
    # the input were in order, under an input that declares 2 s of disorder
    def build() -> StreamApplication:
        mem = MemorySystem()
        app = StreamApplication("assumes-order")
        latest: dict[Any, float] = {}

        def newer(kv: KV[str, Any]) -> bool:
            ok = kv.value["time"] >= latest.get(kv.key, float("-inf"))
            latest[kv.key] = max(kv.value["time"], latest.get(kv.key, float("-inf")))
            return ok

        (app.input(mem.input("rides", serde=SERDE, partitions=2,
                             event_time=lambda kv: kv.value["time"],
                             max_out_of_orderness=timedelta(seconds=2)))
         .filter(newer).send_to(app.output(mem.output("kept", serde=SERDE, partitions=2))))
        app.input(mem.input("other", serde=SERDE, partitions=2)).send_to(
            app.output(mem.output("others", serde=SERDE, partitions=2)))
        return app

    def loses_messages(drawn: KeyedInputs) -> bool:
        result = drawn.feed(TestRunner(build())).run()
        return len(result.messages("kept")) != len(drawn.streams["rides"])

    drawn = find(keyed_inputs(["rides", "other"], max_disorder=2.0), loses_messages,
                 settings=FIND)
    assert drawn.keys == ("k0",)
    assert drawn.events["rides"] == (Event("k0", START, 0), Event("k0", START - 0.001, 0))
    assert drawn.events["other"] == ()


def test_the_strategy_imports_from_samza_dsl_testing_in_a_fresh_interpreter() -> None:
    """``samza_dsl.testing`` resolves ``keyed_inputs`` lazily (hypothesis is a test
    dependency): check the spelling where nothing has imported it yet."""
    import subprocess
    import sys

    code = ("from samza_dsl.testing import KeyedInputs, keyed_inputs; "
            "from samza_dsl.testing import strategies; "
            "print(keyed_inputs is strategies.keyed_inputs, KeyedInputs.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-300:]
    assert proc.stdout.split() == ["True", "KeyedInputs"]
