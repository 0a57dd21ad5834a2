"""SafeSerde: faithful round trips of the supported types, declared types only, and bytes that
are data, never code."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import math
import os
import pickle
import typing
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from samza_dsl import KV, StreamApplication
from samza_dsl.errors import PlanError, SerdeError
from samza_dsl.serdes import SafeSerde


class Point(msgspec.Struct, frozen=True):
    x: int
    y: float
    tags: tuple[str, ...] = ()


class Order(msgspec.Struct):
    id: str
    at: dt.datetime
    lines: list[tuple[str, int]]
    where: Point | None = None


@dataclasses.dataclass(frozen=True)
class Pixel:
    x: int
    color: str


class Pair(typing.NamedTuple):
    left: int
    right: str


SERDE = SafeSerde(types=[Point, Order, Pixel, Pair])


def same(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return len(a) == len(b) and all(k in b and same(v, b[k]) for k, v in a.items())
    if isinstance(a, KV):
        return same(a.key, b.key) and same(a.value, b.value)
    if isinstance(a, dt.datetime):
        return a == b and a.utcoffset() == b.utcoffset()
    return bool(a == b)


timezones = st.one_of(st.none(), st.just(dt.UTC),
                      st.integers(-14 * 60, 14 * 60).map(
                          lambda m: dt.timezone(dt.timedelta(minutes=m))))
datetimes = st.datetimes(min_value=dt.datetime(1900, 1, 1), timezones=timezones)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(), st.binary(), datetimes,
    st.dates(), st.times(), st.timedeltas(), st.uuids(),
    st.decimals(allow_nan=False, allow_infinity=False))
hashables = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(), st.binary(), datetimes),
    lambda inner: st.one_of(st.lists(inner, max_size=3).map(tuple),
                            st.builds(KV, inner, inner),
                            st.frozensets(st.integers(), max_size=3)),
    max_leaves=6)
structs = st.one_of(
    st.builds(Point, st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False),
              st.lists(st.text(), max_size=3).map(tuple)),
    st.builds(Order, st.text(), st.datetimes(timezones=st.just(dt.UTC)),
              st.lists(st.tuples(st.text(), st.integers(-2**63, 2**63 - 1)), max_size=3),
              st.none() | st.builds(Point, st.integers(0, 9), st.floats(0, 1))),
    st.builds(Pixel, st.integers(-2**63, 2**63 - 1), st.text()),
    st.builds(Pair, st.integers(-2**63, 2**63 - 1), st.text()))
values = st.recursive(
    st.one_of(scalars, structs),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(), inner, max_size=4),
        st.dictionaries(hashables, inner, max_size=3),
        st.builds(KV, hashables, inner),
        st.sets(st.integers(), max_size=3)),
    max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(values)
def test_every_supported_value_round_trips_with_its_types(value: Any) -> None:
    back = SERDE.deserialize(SERDE.serialize(value))
    assert same(back, value), (value, back)


def plain_lowering(value: Any) -> Any:
    """The walk the module docstring states, with no shortcuts: each tuple, KV, set and dict
    with other keys than scalars an extension of its items walked, every list and dict
    rebuilt; other values as the codec lowers them alone (declared types, datetimes...)."""
    enc = msgspec.msgpack.encode
    t = type(value)
    if t is tuple:
        return msgspec.msgpack.Ext(1, enc([plain_lowering(v) for v in value]))
    if t is KV:
        return msgspec.msgpack.Ext(2, enc([plain_lowering(value.key), plain_lowering(value.value)]))
    if t is set or t is frozenset:
        return msgspec.msgpack.Ext(5 if t is set else 6, enc([plain_lowering(v) for v in value]))
    if t is list:
        return [plain_lowering(v) for v in value]
    if t is dict:
        plain = (str, int, float, bool, type(None), bytes)
        if all(type(k) in plain and not (type(k) is int and not -2**63 <= k < 2**64)
               for k in value):
            return {k: plain_lowering(v) for k, v in value.items()}
        return msgspec.msgpack.Ext(13, enc([[plain_lowering(k), plain_lowering(v)]
                                            for k, v in value.items()]))
    return SERDE._codec._lower_big(value, 1)


def test_a_dicts_bytes_do_not_depend_on_a_big_int_elsewhere_in_the_value() -> None:
    """An int past 64 bits makes the codec walk the whole value again, looking at ints: a dict
    with int keys within MessagePack's range keeps its plain form in that walk too (it was
    written as a dict with keys of other types, which read back equal but as other bytes)."""
    for value in ([{-2**63 - 1}, {0: None}], {"big": 2**64, "by_id": {7: "a", 2**64 - 1: "b"}},
                  (2**70, {-2**63: 1})):
        assert SERDE.serialize(value) == msgspec.msgpack.encode(plain_lowering(value))
        assert SERDE.deserialize(SERDE.serialize(value)) == value
    big_key = {2**64: 1, 0: 2}  # a key past 64 bits: the dict is written as pairs
    assert SERDE.serialize(big_key) == msgspec.msgpack.encode(plain_lowering(big_key))


join_entries = st.tuples(st.integers(0, 2**63 - 1), st.builds(KV, hashables, st.one_of(
    st.dictionaries(st.text(), st.one_of(st.integers(), st.text(), st.floats()), max_size=4),
    values)))


@settings(max_examples=600, deadline=None)
@given(st.one_of(values, join_entries))
def test_the_bytes_are_those_of_the_plain_walk(value: Any) -> None:
    """The walk's shortcuts (scalars and flat dicts left as they are) change no byte: stores
    and changelogs written before read back, and write the same bytes again."""
    assert SERDE.serialize(value) == msgspec.msgpack.encode(plain_lowering(value))


def test_a_flat_dict_is_written_with_no_walk() -> None:
    """A message of scalars (an intermediate stream's value) goes to msgspec as it is, with no
    call of the walk; one that holds a container, or a key that is not a scalar, is walked."""
    serde = SafeSerde()
    codec = serde._codec
    walked: list[Any] = []
    walk = codec._lower

    def counted(value: Any, depth: int) -> Any:
        walked.append(value)
        return walk(value, depth)

    codec._lower = counted
    flat = {"user": "u1", "country": "c01", "ts": 1700000000.125, "n": None, "b": b"x"}
    assert serde.serialize(flat) == msgspec.msgpack.encode(flat)
    assert walked == []
    for nested in ({"at": (1, 2)}, {(1, 2): "a"}, {"v": {"w": 1}}):
        assert serde.deserialize(serde.serialize(nested)) == nested
    assert len(walked) == 3
    big = {"n": 2**70}  # past 64 bits: the walk that looks at ints
    assert serde.deserialize(serde.serialize(big)) == big


scalar_entries = st.tuples(st.one_of(st.integers(), st.text(), st.none()), st.builds(
    KV, st.one_of(st.integers(), st.text(), st.binary()),
    st.one_of(st.integers(), st.floats(), st.text(), st.booleans(), st.none())))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(join_entries, scalar_entries, values), max_size=6))
def test_a_batch_encodes_to_the_bytes_of_each_alone(batch: list[Any]) -> None:
    """A flush's ``encode_many`` writes join entries with no walk: the same bytes as
    ``serialize`` of each (ints past 64 bits included)."""
    assert SERDE._codec.encode_many(batch) == [SERDE.serialize(v) for v in batch]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.dictionaries(st.text(), st.one_of(st.text(), st.floats(), st.integers()),
                                max_size=5), max_size=5))
def test_panes_of_flat_messages_come_back_as_lists_of_dicts(pane: list[dict[str, Any]]) -> None:
    back = SERDE.deserialize(SERDE.serialize(pane))
    assert same(back, pane)
    back.append({"more": 1})  # a pane stays a list: the window appends to it


def test_an_undeclared_struct_is_an_error_naming_its_type_and_the_fix() -> None:
    class Secret(msgspec.Struct):
        a: int

    with pytest.raises(SerdeError) as err:
        SERDE.serialize({"x": [Secret(1)]})
    text = str(err.value)
    assert "Secret" in text and "declare" in text and "app.declare_types(Secret)" in text


def test_an_unsupported_object_is_an_error_naming_its_type() -> None:
    with pytest.raises(SerdeError) as err:
        SERDE.serialize(KV("k", object()))
    assert "builtins.object" in str(err.value) and "serde" in str(err.value)


def test_decoding_a_type_name_that_is_not_declared_fails_and_imports_nothing() -> None:
    data = SERDE.serialize(Point(1, 2.0))
    with pytest.raises(SerdeError) as err:
        SafeSerde(types=[Pixel]).deserialize(data)
    assert "Point" in str(err.value) and "not declared" in str(err.value)
    # a name of a real importable callable is only a name
    forged = data.replace(b"test_safe_serde.Point", b"os.system\x00\x00\x00\x00\x00\x00\x00\x00"
                          b"\x00\x00\x00\x00")
    with pytest.raises(SerdeError):
        SERDE.deserialize(forged)


class Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_payload_is_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Evil(marker))
    pickle.loads(payload)  # the payload does run code when unpickled
    assert marker.exists()
    marker.unlink()
    for data in (payload, b"\xfe" + payload, SERDE.serialize(("a", 1))[:-1] + payload):
        with pytest.raises(SerdeError):
            SERDE.deserialize(data)
    assert not marker.exists()


def test_declared_names_are_stable_and_may_be_given() -> None:
    named = SafeSerde(types={"shop.Point": Point})
    data = named.serialize(Point(1, 2.0))
    assert b"shop.Point" in data
    assert SafeSerde(types={"shop.Point": Point}).deserialize(data) == Point(1, 2.0)
    with pytest.raises(TypeError):
        SafeSerde(types=[dict])


def test_app_declare_types_refuses_one_name_for_two_types() -> None:
    app = StreamApplication("types")
    app.declare_types(Point, Pixel)
    app.declare_types(Point)  # again: the same
    other = type("Point", (msgspec.Struct,), {"__annotations__": {"a": int}})
    other.__module__ = Point.__module__
    with pytest.raises(PlanError):
        app.declare_types(other)
    assert set(app.spec().types.values()) == {Point, Pixel}


def test_safe_serde_pickles_for_spark_and_compares_by_types() -> None:
    copy = pickle.loads(pickle.dumps(SERDE))
    assert copy == SERDE and copy.deserialize(SERDE.serialize(Point(3, 1.5))) == Point(3, 1.5)
    assert SafeSerde() != SERDE and hash(SafeSerde()) == hash(SafeSerde())


def test_big_ints_and_odd_values_round_trip() -> None:
    for v in (2**64 - 1, -2**63, 2**200, -2**200, {2**70: (2**65,)}, decimal.Decimal("1.10"),
              uuid.UUID(int=7), frozenset({(1, 2)}), dt.date(2020, 2, 29), float("-inf")):
        assert same(SERDE.deserialize(SERDE.serialize(v)), v), v


def _nested(kind: str, levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"list": lambda v: [v], "tuple": lambda v: (v,), "dict": lambda v: {"k": v},
                 "kv": lambda v: KV("k", v)}[kind](value)
    return value


def _at_stack_depth(frames: int, call: Any) -> Any:
    return call() if frames == 0 else _at_stack_depth(frames - 1, call)


@pytest.mark.parametrize("kind", ["list", "tuple", "dict", "kv"])
def test_a_value_nested_past_the_limit_is_refused_naming_its_depth(kind: str) -> None:
    from samza_dsl.safe_serde import MAX_DEPTH

    serde = SafeSerde()
    for levels in (MAX_DEPTH + 1, 500, 900):
        with pytest.raises(SerdeError) as info:
            serde.serialize(_nested(kind, levels))
        msg = str(info.value)
        assert f"nested {levels} levels deep" in msg and f"at most {MAX_DEPTH} levels" in msg, msg
        assert "cannot write a value of type" not in msg, msg
    # up to the limit, what is written is read back, however deep the caller's stack already is
    value = _nested(kind, MAX_DEPTH)
    for frames in (0, 250):
        assert _at_stack_depth(frames, lambda: serde.deserialize(serde.serialize(value))) \
            == value


flush_scalars = st.one_of(st.integers(-2**63, 2**64 - 1), st.text(max_size=5), st.binary(max_size=3),
                         st.booleans(), st.none(), st.floats())
flush_values = st.one_of(flush_scalars, st.dictionaries(st.one_of(st.text(max_size=3), st.integers()),
                                                       flush_scalars, max_size=3),
                         st.dictionaries(st.text(max_size=2), st.tuples(st.integers()), max_size=2),
                         st.integers(2**64, 2**70))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**63 - 1) | st.sampled_from([2**63, -1, True]),
                          st.builds(KV, flush_scalars | st.tuples(st.integers()), flush_values)),
                min_size=1, max_size=8))
def test_a_flush_of_join_entries_encodes_to_the_bytes_of_each_alone(batch: list[Any]) -> None:
    """A flush of only join entries (``(arrival, KV)``), their keys and values scalars, dicts of
    scalars or not (a tuple, ints past 64 bits), their arrivals ints or not (a bool): the same
    bytes as ``serialize`` of each."""
    assert SERDE._codec.encode_many(batch) == [SERDE.serialize(v) for v in batch]


def test_a_batch_of_join_entries_shares_heads_only_where_their_bytes_are_the_same() -> None:
    """``encode_many`` makes what goes before an entry's ``[key, value]`` once per arrival and
    length: arrivals equal but not the same bytes (1, True, 1.0, -0.0 and 0.0), one arrival
    object again after another, and pairs of every length across the extension headers'
    sizes (fixext, 8 and 16 bit lengths) each get their own bytes."""
    arrivals: list[Any] = [1, True, 1.0, 1, 0.0, -0.0, 2**40, 2**40, "t", b"t", None, 2**63]
    batch = [(a, KV(7, value)) for n in (0, 1, 5, 12, 13, 240, 250, 300, 70000)
             for value in ("x" * n, {"s": "y" * n, "n": 1}) for a in arrivals]
    assert SERDE._codec.encode_many(batch) == [SERDE.serialize(v) for v in batch]
    assert SERDE._codec.encode_many(batch[::-1]) == [SERDE.serialize(v) for v in batch[::-1]]
