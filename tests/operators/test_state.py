"""InMemoryState and the order-preserving key encoding."""

from __future__ import annotations

import math
from collections import namedtuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.state import (
    InMemoryState,
    decode_key,
    encode_key,
    encode_keys,
    in_key_order,
    order_key,
)

numbers = st.one_of(st.integers(min_value=-(1 << 200), max_value=1 << 200),
                    st.floats(allow_nan=False))
scalars = st.one_of(st.none(), numbers, st.text(), st.binary())
keys = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4).map(tuple), max_leaves=8)


def natural(key: object) -> tuple:
    """The order encode_key promises, as a Python sort key."""
    if key is None:
        return (0,)
    if isinstance(key, int | float):
        return (1, key)
    if isinstance(key, str):
        return (2, key)
    if isinstance(key, bytes):
        return (3, key)
    assert isinstance(key, tuple)
    return (4, tuple(natural(k) for k in key))


@given(numbers, numbers)
def test_numbers_order_naturally_across_int_and_float(a: float, b: float) -> None:
    ea, eb = encode_key(a), encode_key(b)
    assert (ea < eb) == (a < b)
    assert (ea == eb) == (a == b)


@given(st.text(), st.text())
def test_strings_order_by_code_point(a: str, b: str) -> None:
    assert (encode_key(a) < encode_key(b)) == (a < b)


@given(keys, keys)
def test_encoding_order_matches_natural_order(a: object, b: object) -> None:
    ea, eb = encode_key(a), encode_key(b)
    assert (ea < eb) == (natural(a) < natural(b))
    assert (ea == eb) == (natural(a) == natural(b))


@given(keys)
def test_decode_inverts_encode(key: object) -> None:
    decoded = decode_key(encode_key(key))
    assert decoded == key
    assert encode_key(decoded) == encode_key(key)


def test_special_values() -> None:
    order = [None, -math.inf, -(1 << 70), -1.5, -1, -0.0, 0.25, 1, 2**53 + 1, math.inf, math.nan,
             "", "a", "a\x00", "ab", b"", b"\x00", (), (1,), (1, "a"), (1.5,), ("a",)]
    encoded = [encode_key(k) for k in order]
    assert encoded[5] == encode_key(0)  # -0.0 == 0
    assert sorted(encoded) == encoded
    assert len(set(encoded)) == len(encoded)
    assert math.isnan(decode_key(encode_key(math.nan)))
    assert decode_key(encode_key(2.0)) == 2 and type(decode_key(encode_key(2.0))) is int
    assert encode_key(True) == encode_key(1)
    Point = namedtuple("Point", "x y")
    assert encode_key(Point(1, "a")) == encode_key((1, "a"))


def test_unsupported_keys_raise_but_still_sort() -> None:
    with pytest.raises(TypeError, match="cannot encode a key of type list"):
        encode_key([1, 2])
    with pytest.raises(TypeError, match="frozenset"):
        encode_key(("ok", frozenset()))
    assert order_key(frozenset()) > encode_key(("z", 9))
    with pytest.raises(ValueError, match="not an encoded key"):
        decode_key(b"\x99")
    with pytest.raises(ValueError, match="trailing"):
        decode_key(encode_key(1) + b"\x01")


def test_get_put_delete() -> None:
    s = InMemoryState()
    assert s.get("a") is None
    s.put("a", 1)
    s.put("a", 2)
    assert s.get("a") == 2 and len(s) == 1 and "a" in s
    s.delete("a")
    s.delete("never-there")
    assert s.get("a") is None and len(s) == 0


@given(st.lists(st.tuples(st.sampled_from(["put", "delete", "range"]), keys, keys), max_size=40))
def test_matches_a_reference_model(ops: list[tuple[str, object, object]]) -> None:
    s = InMemoryState()
    model: dict[bytes, object] = {}
    for i, (op, k, end) in enumerate(ops):
        if op == "put":
            s.put(k, i)
            model[encode_key(k)] = i
        elif op == "delete":
            s.delete(k)
            model.pop(encode_key(k), None)
        else:
            lo, hi = encode_key(k), encode_key(end)
            want = [model[e] for e in sorted(model) if lo <= e < hi]
            assert [v for _, v in s.range(k, end)] == want
        assert [encode_key(key) for key, _ in s.all()] == sorted(model)
        assert [v for _, v in s.all()] == [model[e] for e in sorted(model)]


def test_iteration_survives_deletes_and_puts() -> None:
    s = InMemoryState()
    for i in range(10):
        s.put(i, i)
    seen = []
    for k, _ in s.all():
        seen.append(k)
        s.delete(k + 1)  # deleted entries are skipped
        s.put(100 + k, k)  # new ones are not in this iteration
    assert seen == [0, 2, 4, 6, 8]
    assert [k for k, _ in s.all()] == [0, 2, 4, 6, 8, 100, 102, 104, 106, 108]
    # a delete then an insert keeps the size: the order must still be recomputed
    s.delete(0)
    s.put(-1, 0)
    assert next(iter(s.all())) == (-1, 0)


def test_range_is_half_open_over_tuple_prefixes() -> None:
    s = InMemoryState()
    for start in (0, 1000, 2000):
        for key in ("b", "a", None):
            s.put((start, key), 1)
    assert [k for k, _ in s.range((1000,), (2000,))] == [(1000, None), (1000, "a"), (1000, "b")]
    assert [k for k, _ in s.range((0, "a"), (1000, "a"))] == [(0, "a"), (0, "b"), (1000, None)]
    assert list(s.range((3000,), (4000,))) == []


@given(st.one_of(st.sets(st.text(), max_size=30),
                 st.sets(st.integers(min_value=-(1 << 200), max_value=1 << 200), max_size=30),
                 st.sets(st.one_of(st.text(max_size=3), st.integers(), st.booleans(),
                                   st.floats(allow_nan=False)), max_size=30),
                 st.sets(keys, max_size=10)))
def test_in_key_order_is_order_key_order(distinct: set[object]) -> None:
    """Strings alone and ints alone sort as themselves, which is ``order_key``'s order; any
    other mix sorts by ``order_key``."""
    assert in_key_order(distinct) == sorted(distinct, key=order_key)


def test_in_key_order_of_surrogates_and_bools() -> None:
    # a lone surrogate sorts by code point between U+D7FF and U+E000, as its bytes do
    assert in_key_order(["\ue000", "\ud800", "\ud7ff"]) == ["\ud7ff", "\ud800", "\ue000"]
    assert in_key_order([True, 0, -1]) == sorted([True, 0, -1], key=order_key)


@given(st.one_of(st.integers(-2**70, 2**70), st.text(), st.text("a\x00"),
                 st.tuples(st.integers(), st.text())))
def test_the_short_way_for_ints_writes_the_general_bytes(key: object) -> None:
    """encode_key's short way for an int in [0, 2**63) changes no byte."""
    from operators.state import _encode

    out = bytearray()
    _encode(key, out)
    assert encode_key(key) == bytes(out)


@given(st.one_of(st.lists(st.integers(0, 2**63 - 1)),
                 st.lists(st.one_of(st.integers(-2**64, 2**64), st.booleans(), st.text()))))
def test_a_batch_of_keys_encodes_to_the_bytes_of_each_alone(keys: list[object]) -> None:
    """encode_keys's way for a batch of ints in [0, 2**63) changes no byte (bools, ints out of
    that range and other keys in the batch take each key's own way)."""
    assert encode_keys(keys) == [encode_key(k) for k in keys]


def test_a_batch_of_ints_at_every_size_boundary_encodes_as_each_alone() -> None:
    """Each byte count of encode_keys's ints, at both of its ends, and unsorted."""
    keys = [0, 2**63 - 1] + [k for b in range(1, 63) for k in (2**b - 1, 2**b)]
    assert encode_keys(keys) == [encode_key(k) for k in keys]
    assert encode_keys(keys[::-1]) == [encode_key(k) for k in keys[::-1]]
