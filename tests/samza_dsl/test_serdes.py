"""Serdes: JSON and MessagePack (with and without a msgspec Struct type), String, Bytes, KVSerde;
decode failures raise SerdeError showing the offending bytes, truncated."""

from __future__ import annotations

import pickle

import msgspec
import pytest

from samza_dsl import KV, SamzaError, SerdeError
from samza_dsl.serdes import (
    BytesSerde,
    JsonSerde,
    KVSerde,
    MsgpackSerde,
    NoOpSerde,
    Serde,
    StringSerde,
)


class PageView(msgspec.Struct, frozen=True):
    user: str
    page: str
    ms: int = 0


class Other(msgspec.Struct):
    x: int


# -- JSON and MessagePack ------------------------------------------------------------------------

@pytest.mark.parametrize("serde_type", [JsonSerde, MsgpackSerde])
def test_untyped_round_trip(serde_type):
    serde = serde_type()
    msg = {"user": "u1", "pages": ["a", "b"], "n": 3, "ok": True, "none": None, "f": 1.5}
    data = serde.serialize(msg)
    assert isinstance(data, bytes)
    assert serde.deserialize(data) == msg


def test_json_is_json_and_msgpack_is_msgpack():
    assert JsonSerde().serialize({"a": 1}) == b'{"a":1}'
    assert msgspec.msgpack.decode(MsgpackSerde().serialize({"a": 1})) == {"a": 1}


@pytest.mark.parametrize("serde_type", [JsonSerde, MsgpackSerde])
def test_struct_round_trip(serde_type):
    serde = serde_type(PageView)
    view = PageView("u1", "/home", 5)
    back = serde.deserialize(serde.serialize(view))
    assert type(back) is PageView and back == view


@pytest.mark.parametrize("serde_type, encode", [(JsonSerde, msgspec.json.encode),
                                                (MsgpackSerde, msgspec.msgpack.encode)])
def test_struct_type_validates_on_decode(serde_type, encode):
    serde = serde_type(PageView)
    bad = encode({"user": "u1", "page": 7})
    with pytest.raises(SerdeError) as info:
        serde.deserialize(bad)
    err = info.value
    assert err.data == bad
    assert repr(bad) in str(err)
    assert "PageView" in str(err)  # names the serde
    # an untyped serde accepts the same bytes
    assert serde_type().deserialize(bad) == {"user": "u1", "page": 7}


@pytest.mark.parametrize("serde", [JsonSerde(), JsonSerde(PageView), MsgpackSerde(),
                                   MsgpackSerde(PageView)])
def test_garbage_raises_serde_error_with_the_bytes(serde):
    garbage = b"\xc1{not valid"
    with pytest.raises(SerdeError) as info:
        serde.deserialize(garbage)
    assert info.value.data == garbage
    assert repr(garbage) in str(info.value)
    assert isinstance(info.value, SamzaError)


@pytest.mark.parametrize("serde", [JsonSerde(), MsgpackSerde(), StringSerde("ascii")])
def test_long_bad_payload_is_truncated_in_the_message(serde):
    payload = b"\xff" * 10 + b"Z" * 990
    with pytest.raises(SerdeError) as info:
        serde.deserialize(payload)
    text = str(info.value)
    assert info.value.data == payload  # the full bytes stay on the error
    assert repr(payload[:64]) in text
    assert "1000 bytes" in text
    assert repr(payload[:65]) not in text
    assert len(text) < 600


@pytest.mark.parametrize("serde", [JsonSerde(), MsgpackSerde()])
def test_unencodable_object_raises_serde_error(serde):
    with pytest.raises(SerdeError, match="cannot encode object"):
        serde.serialize(object())


def test_typed_serdes_differ_from_untyped_and_from_each_other():
    assert JsonSerde() == JsonSerde()
    assert JsonSerde(PageView) == JsonSerde(PageView)
    assert JsonSerde(PageView) != JsonSerde()
    assert JsonSerde(PageView) != JsonSerde(Other)
    assert JsonSerde() != MsgpackSerde()
    assert hash(JsonSerde(PageView)) == hash(JsonSerde(PageView))
    assert repr(JsonSerde(PageView)) == "JsonSerde(PageView)"
    assert repr(MsgpackSerde()) == "MsgpackSerde()"


@pytest.mark.parametrize("serde", [JsonSerde(PageView), MsgpackSerde(PageView), JsonSerde()])
def test_msgspec_serdes_pickle_with_their_type(serde):
    back = pickle.loads(pickle.dumps(serde))
    assert back == serde
    view = PageView("u", "/")
    assert back.deserialize(serde.serialize(view)) == serde.deserialize(serde.serialize(view))


# -- String and Bytes ----------------------------------------------------------------------------

def test_string_serde():
    assert StringSerde().serialize("héllo") == "héllo".encode()
    assert StringSerde().deserialize("héllo".encode()) == "héllo"
    latin = StringSerde("latin-1")
    assert latin.serialize("é") == b"\xe9" and latin.deserialize(b"\xe9") == "é"
    assert latin != StringSerde() and StringSerde() == StringSerde("utf-8")
    assert repr(latin) == "StringSerde('latin-1')"


def test_string_serde_errors():
    with pytest.raises(SerdeError, match="expected str"):
        StringSerde().serialize(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(SerdeError) as info:
        StringSerde().deserialize(b"\xff\xfe")
    assert info.value.data == b"\xff\xfe" and repr(b"\xff\xfe") in str(info.value)


def test_bytes_serde():
    assert BytesSerde().serialize(b"\x00\x01") == b"\x00\x01"
    assert BytesSerde().serialize(bytearray(b"ab")) == b"ab"
    assert BytesSerde().serialize(memoryview(b"ab")) == b"ab"
    assert BytesSerde().deserialize(b"\x00") == b"\x00"
    with pytest.raises(SerdeError, match="expected bytes"):
        BytesSerde().serialize("text")  # type: ignore[arg-type]


def test_noop_serde_passes_objects_through():
    obj = {"a": [1]}
    assert NoOpSerde().serialize(obj) is obj and NoOpSerde().deserialize(obj) is obj


# -- KVSerde -------------------------------------------------------------------------------------

def test_kvserde_round_trip():
    serde = KVSerde(StringSerde(), JsonSerde(PageView))
    kv = KV("u1", PageView("u1", "/a"))
    k, v = serde.to_bytes(kv)
    assert k == b"u1" and v == b'{"user":"u1","page":"/a","ms":0}'
    assert serde.from_bytes(k, v) == kv


def test_kvserde_keeps_none_key_and_value():
    serde = KVSerde(StringSerde(), JsonSerde())
    assert serde.to_bytes(KV(None, {"a": 1})) == (None, b'{"a":1}')
    assert serde.to_bytes(KV("k", None)) == (b"k", None)  # a tombstone
    assert serde.from_bytes(None, None) == KV(None, None)


def test_kvserde_decode_errors_carry_the_bytes():
    serde = KVSerde(StringSerde(), JsonSerde())
    with pytest.raises(SerdeError) as info:
        serde.from_bytes(b"k", b"{oops")
    assert info.value.data == b"{oops"
    with pytest.raises(SerdeError) as info:
        serde.from_bytes(b"\xff", b"{}")
    assert info.value.data == b"\xff"


def test_kvserde_refuses_single_value_serialization():
    serde = KVSerde(StringSerde(), JsonSerde())
    with pytest.raises(SerdeError, match="to_bytes"):
        serde.serialize(KV("a", 1))
    with pytest.raises(SerdeError, match="from_bytes"):
        serde.deserialize(b"a")


def test_kvserde_needs_two_serdes():
    with pytest.raises(TypeError, match="KVSerde"):
        KVSerde(StringSerde, JsonSerde())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="KVSerde"):
        KVSerde(StringSerde(), None)  # type: ignore[arg-type]


def test_kvserde_equality_follows_its_parts():
    a = KVSerde(StringSerde(), JsonSerde())
    assert a == KVSerde(StringSerde(), JsonSerde())
    assert hash(a) == hash(KVSerde(StringSerde(), JsonSerde()))
    assert a != KVSerde(StringSerde(), MsgpackSerde())
    assert a != KVSerde(BytesSerde(), JsonSerde())
    assert repr(a) == "KVSerde(StringSerde(), JsonSerde())"


def test_base_serde_must_be_overridden():
    with pytest.raises(NotImplementedError, match="Serde.serialize"):
        Serde().serialize(1)
    with pytest.raises(NotImplementedError, match="Serde.deserialize"):
        Serde().deserialize(b"")


# -- SerdeError ----------------------------------------------------------------------------------

def test_serde_error_located_at_stream_partition_and_offset():
    with pytest.raises(SerdeError) as info:
        JsonSerde().deserialize(b"{")
    located = info.value.at(stream="page-views", partition=3, offset=42)
    text = str(located)
    assert "stream 'page-views'" in text and "partition 3" in text and "offset 42" in text
    assert repr(b"{") in text
    assert (located.stream, located.partition, located.offset, located.data) == (
        "page-views", 3, 42, b"{")
    assert located.reason == info.value.reason
