"""KV: the key-value pair a keyed stream delivers."""

from __future__ import annotations

import msgspec
import pytest

from samza_dsl import KV


def test_fields_and_unpacking():
    kv = KV("user-1", {"clicks": 3})
    assert kv.key == "user-1" and kv.value == {"clicks": 3}
    key, value = kv
    assert (key, value) == ("user-1", {"clicks": 3})
    assert list(KV(1, 2)) == [1, 2]


def test_of_keywords_and_repr():
    assert KV.of("a", 1) == KV("a", 1) == KV(key="a", value=1)
    assert repr(KV("a", 1)) == "KV(key='a', value=1)"


def test_equality_and_hashing():
    assert KV("a", 1) != KV("a", 2) and KV("a", 1) != KV("b", 1)
    assert KV("a", 1) != ("a", 1)
    assert len({KV("a", 1), KV("a", 1), KV("a", 2)}) == 2


def test_frozen():
    kv = KV("a", 1)
    with pytest.raises(AttributeError):
        kv.key = "b"  # type: ignore[misc]


def test_none_key_and_value():
    assert KV(None, None).key is None and KV("k", None).value is None


@pytest.mark.parametrize("codec", [msgspec.json, msgspec.msgpack])
def test_round_trip_through_msgspec(codec):
    kv = KV("a", [1, 2])
    assert codec.decode(codec.encode(kv), type=KV) == kv
