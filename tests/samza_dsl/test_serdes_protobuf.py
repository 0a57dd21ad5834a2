"""ProtobufSerde: messages of a class built from descriptors in code (no protoc) round-trip as
messages and as dicts, plain and in the Confluent wire format (magic byte, schema id, message
indexes); a dict that does not fit or a message of another class is a one-line error naming
what is wrong; bytes that do not parse, another magic byte, schema id or message indexes are
a SerdeError."""

from __future__ import annotations

import pickle
import struct
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.source_context_pb2 import SourceContext
from hypothesis import given, settings
from hypothesis import strategies as st

from samza_dsl import KV, SerdeError
from samza_dsl.serdes import KVSerde, ProtobufSerde, StringSerde

F = descriptor_pb2.FieldDescriptorProto


def _field(msg: Any, name: str, number: int, ftype: int, *, repeated: bool = False,
           type_name: str = "") -> None:
    field = msg.field.add(name=name, number=number, type=ftype,
                          label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
    if type_name:
        field.type_name = type_name


def _classes() -> dict[str, Any]:
    """shop/views.proto, built in code: Other (index 0), PageView (index 1) with a nested
    Address ([1, 0]), an enum and a map; and shop/legacy.proto, proto2 with a required field."""
    views = descriptor_pb2.FileDescriptorProto(name="shop/views.proto", package="shop",
                                               syntax="proto3")
    other = views.message_type.add(name="Other")
    _field(other, "x", 1, F.TYPE_INT32)
    view = views.message_type.add(name="PageView")
    address = view.nested_type.add(name="Address")
    _field(address, "city", 1, F.TYPE_STRING)
    _field(address, "zip", 2, F.TYPE_INT32)
    entry = view.nested_type.add(name="CountsEntry")
    entry.options.map_entry = True
    _field(entry, "key", 1, F.TYPE_STRING)
    _field(entry, "value", 2, F.TYPE_INT64)
    kind = view.enum_type.add(name="Kind")
    kind.value.add(name="VIEW", number=0)
    kind.value.add(name="CLICK", number=1)
    for name, number, ftype in [("user", 1, F.TYPE_STRING), ("ms", 2, F.TYPE_INT64),
                                ("n", 3, F.TYPE_INT32), ("ok", 4, F.TYPE_BOOL),
                                ("score", 5, F.TYPE_DOUBLE), ("raw", 6, F.TYPE_BYTES)]:
        _field(view, name, number, ftype)
    _field(view, "tags", 7, F.TYPE_STRING, repeated=True)
    _field(view, "kind", 8, F.TYPE_ENUM, type_name=".shop.PageView.Kind")
    _field(view, "home", 9, F.TYPE_MESSAGE, type_name=".shop.PageView.Address")
    _field(view, "counts", 10, F.TYPE_MESSAGE, repeated=True,
           type_name=".shop.PageView.CountsEntry")
    legacy = descriptor_pb2.FileDescriptorProto(name="shop/legacy.proto", package="shop",
                                                syntax="proto2")
    req = legacy.message_type.add(name="Legacy")
    req.field.add(name="id", number=1, type=F.TYPE_STRING, label=F.LABEL_REQUIRED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(views)
    pool.Add(legacy)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"shop.{name}"))
            for name in ("Other", "PageView", "PageView.Address", "Legacy")}


CLASSES = _classes()
Other, PageView = CLASSES["Other"], CLASSES["PageView"]
Address, Legacy = CLASSES["PageView.Address"], CLASSES["Legacy"]

page_views = st.builds(
    lambda user, ms, n, ok, score, raw, tags, kind, home, counts: PageView(
        user=user, ms=ms, n=n, ok=ok, score=score, raw=raw, tags=tags, kind=kind,
        home=home, counts=counts),
    st.text(max_size=20), st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1),
    st.booleans(), st.floats(allow_nan=False), st.binary(max_size=20),
    st.lists(st.text(max_size=5), max_size=4), st.sampled_from([0, 1]),
    st.builds(lambda c, z: Address(city=c, zip=z), st.text(max_size=8),
              st.integers(-(2**31), 2**31 - 1)),
    st.dictionaries(st.text(max_size=5), st.integers(-(2**63), 2**63 - 1), max_size=4))


# -- round trips -------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(page_views)
def test_drawn_messages_round_trip_deterministically(view):
    serde = ProtobufSerde(PageView)
    data = serde.serialize(view)
    assert data == serde.serialize(view) == view.SerializeToString(deterministic=True)
    back = serde.deserialize(data)
    assert type(back) is PageView and back == view


@settings(max_examples=100, deadline=None)
@given(page_views)
def test_as_dict_round_trips_through_dicts(view):
    serde = ProtobufSerde(PageView, as_dict=True)
    data = serde.serialize(view)
    as_dict = serde.deserialize(data)
    assert isinstance(as_dict, dict) and set(as_dict) >= {"user", "ms", "tags", "home"}
    assert serde.serialize(as_dict) == data


@settings(max_examples=100, deadline=None)
@given(page_views, st.integers(0, 2**31 - 1))
def test_confluent_framing_round_trips_and_reads_framed_bytes(view, schema_id):
    serde = ProtobufSerde(PageView, wire_format="confluent", schema_id=schema_id)
    framed = b"\x00" + struct.pack(">I", schema_id) + b"\x02\x02" + \
        view.SerializeToString(deterministic=True)
    assert serde.serialize(view) == framed
    assert serde.deserialize(framed) == view


def test_hand_computed_bytes():
    view = PageView(user="ann", ms=5)
    payload = b"\x0a\x03ann\x10\x05"  # field 1 (length-delimited) "ann", field 2 (varint) 5
    assert ProtobufSerde(PageView).serialize(view) == payload
    # PageView is the file's second message: indexes [1], as count 1 and index 1 zigzagged
    assert ProtobufSerde(PageView, wire_format="confluent", schema_id=7).serialize(view) == \
        b"\x00\x00\x00\x00\x07\x02\x02" + payload
    # the file's first message: the single byte 0
    assert ProtobufSerde(Other, wire_format="confluent", schema_id=258).serialize(
        Other(x=1)) == b"\x00\x00\x00\x01\x02\x00\x08\x01"
    # a nested message: its top-level message's index, then its own among the nested ones
    address = ProtobufSerde(Address, wire_format="confluent", schema_id=7)
    assert address.message_indexes == (1, 0)
    assert address.serialize(Address(city="x")) == b"\x00\x00\x00\x00\x07\x04\x02\x00\x0a\x01x"
    assert address.deserialize(b"\x00\x00\x00\x00\x07\x04\x02\x00\x0a\x01x") == \
        Address(city="x")


def test_dicts_in_the_json_mapping_and_kvserde():
    serde = ProtobufSerde(PageView)
    assert serde.serialize({"user": "ann", "ms": 5}) == b"\x0a\x03ann\x10\x05"
    assert serde.serialize({"user": "ann", "ms": "5", "kind": "CLICK"}) == \
        PageView(user="ann", ms=5, kind=1).SerializeToString()
    kv = KVSerde(StringSerde(), ProtobufSerde(PageView, as_dict=True))
    key, value = kv.to_bytes(KV("u1", {"user": "ann"}))
    assert key == b"u1" and kv.from_bytes(key, value).value["user"] == "ann"


# -- messages that do not fit ------------------------------------------------------------------

@pytest.mark.parametrize("obj, expected", [
    ({"usr": "ann"}, 'has no field named "usr"'),
    ({"n": "x"}, "Failed to parse n field"),
    ({"n": 2**40}, "Failed to parse n field"),
    ({"tags": "a"}, "repeated field tags must be in []"),
    ({"kind": "BUY"}, "BUY"),
    ({"home": {"zip": "z"}}, "Failed to parse home field"),
    (Other(x=1), "it is shop.Other, expected a shop.PageView or a dict of its fields"),
    (5, "it is int, expected a shop.PageView"),
])
def test_a_message_that_does_not_fit_is_one_line_naming_what(obj, expected):
    with pytest.raises(SerdeError) as err:
        ProtobufSerde(PageView).serialize(obj)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"ProtobufSerde(shop.PageView) cannot encode {type(obj).__name__}: ")
    assert expected in text


def test_a_missing_required_field_is_named():
    with pytest.raises(SerdeError, match="id") as err:
        ProtobufSerde(Legacy).serialize(Legacy())
    assert "\n" not in str(err.value)
    with pytest.raises(SerdeError, match="cannot decode message: not a shop.Legacy: it lacks "
                                         "the required field"):
        ProtobufSerde(Legacy).deserialize(b"")  # parses, but lacks the required field
    assert ProtobufSerde(Legacy).deserialize(b"\x0a\x01x") == Legacy(id="x")


# -- bytes that do not parse -------------------------------------------------------------------

@pytest.mark.parametrize("data", [b"\xff\xff", b"{not json", b"\x0a\x05ab", b"\x08"])
def test_bytes_that_do_not_parse_are_a_serde_error(data):
    with pytest.raises(SerdeError) as err:
        ProtobufSerde(PageView).deserialize(data)
    assert err.value.data == data and "\n" not in err.value.reason
    assert "cannot decode message: not a shop.PageView" in err.value.reason


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_garbage_either_parses_or_is_a_serde_error(data):
    try:
        message = ProtobufSerde(PageView).deserialize(data)
    except SerdeError as e:
        assert e.data == data and "\n" not in e.reason
    else:
        assert type(message) is PageView


@pytest.mark.parametrize("data, expected", [
    (b"\x00\x00", "2 bytes are shorter than the Confluent header"),
    (b"\x0a\x03ann", "the first byte is 0x0a, not the Confluent magic byte 0x00"),
    (b"\x00\x00\x00\x00\x08\x02\x02", "the bytes have schema id 8, not this serde's schema id 7"),
    (b"\x00\x00\x00\x00\x07\x00\x08\x01", "the message indexes are [0], not this serde's [1]"),
    (b"\x00\x00\x00\x00\x07", "the message indexes end before their last byte"),
    (b"\x00\x00\x00\x00\x07\x01", "the message indexes' count is -1"),
])
def test_confluent_bytes_are_checked(data, expected):
    with pytest.raises(SerdeError) as err:
        ProtobufSerde(PageView, wire_format="confluent", schema_id=7).deserialize(data)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_known_ids_are_read():
    serde = ProtobufSerde(PageView, wire_format="confluent", schema_id=8, known_ids=[5, 6])
    assert serde.deserialize(b"\x00\x00\x00\x00\x05\x02\x02\x0a\x03ann") == PageView(user="ann")
    with pytest.raises(SerdeError, match=r"schema id 4, not this serde's schema id 8 nor a "
                                         r"known id \(5, 6\)"):
        serde.deserialize(b"\x00\x00\x00\x00\x04\x02\x02")


# -- settings ----------------------------------------------------------------------------------

@pytest.mark.parametrize("message_class, kwargs, error, match", [
    (PageView(), {}, TypeError, "an instance of PageView"),
    (dict, {}, TypeError, "the class dict"),
    (PageView, {"wire_format": "confluent"}, ValueError, "needs schema_id="),
    (PageView, {"schema_id": 3}, ValueError, "only with wire_format='confluent'"),
    (PageView, {"message_indexes": [1]}, ValueError, "only with wire_format='confluent'"),
    (PageView, {"wire_format": "confluent", "schema_id": 1, "message_indexes": []},
     ValueError, "at least one index"),
])
def test_settings_are_checked(message_class, kwargs, error, match):
    with pytest.raises(error, match=match):
        ProtobufSerde(message_class, **kwargs)


def test_equality_describe_and_pickle():
    a = ProtobufSerde(PageView, wire_format="confluent", schema_id=7)
    assert a == ProtobufSerde(PageView, wire_format="confluent", schema_id=7,
                              message_indexes=[1])
    assert hash(a) == hash(ProtobufSerde(PageView, wire_format="confluent", schema_id=7))
    assert a != ProtobufSerde(PageView, wire_format="confluent", schema_id=8)
    assert ProtobufSerde(PageView) != ProtobufSerde(Other)
    assert ProtobufSerde(PageView) != ProtobufSerde(PageView, as_dict=True)
    assert repr(a) == "ProtobufSerde(shop.PageView, wire_format='confluent', schema_id=7, " \
                      "message_indexes=[1])"
    generated = ProtobufSerde(SourceContext, wire_format="confluent", schema_id=3)
    assert pickle.loads(pickle.dumps(generated)) == generated
