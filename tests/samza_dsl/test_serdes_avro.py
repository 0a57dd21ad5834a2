"""AvroSerde: drawn records of a schema round-trip, plain and in the Confluent wire format, with
the bytes fastavro itself writes; a record that does not fit is a one-line error naming the
field; bytes that are not Avro of the schema, another magic byte or another schema id are a
SerdeError; older schemas of known ids are resolved into the serde's."""

from __future__ import annotations

import io
import pickle
import struct
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from samza_dsl import KV, SerdeError
from samza_dsl.serdes import AvroSerde, KVSerde, StringSerde

ADDRESS = {"type": "record", "name": "Address", "fields": [
    {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"], "default": None}]}

VIEW = {
    "type": "record", "name": "PageView", "namespace": "shop",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "n", "type": "int"},
        {"name": "ms", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "score", "type": "double"},
        {"name": "ok", "type": "boolean"},
        {"name": "raw", "type": "bytes"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["VIEW", "CLICK"]}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {"name": "referrer", "type": ["null", "string"], "default": None},
        {"name": "home", "type": ADDRESS},
        {"name": "work", "type": ["null", "Address"], "default": None},
    ],
}

USER = {"type": "record", "name": "User", "fields": [
    {"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}


def values(schema: Any, named: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values that fit an Avro schema, as the reader gives them back."""
    if isinstance(schema, list):
        return st.one_of([values(s, named) for s in schema])
    if isinstance(schema, str) and schema in named:
        return values(named[schema], named)
    t = schema["type"] if isinstance(schema, dict) else schema
    if t == "record":
        named[schema["name"]] = schema
        if "namespace" in schema:
            named[f"{schema['namespace']}.{schema['name']}"] = schema
        return st.fixed_dictionaries({f["name"]: values(f["type"], named)
                                      for f in schema["fields"]})
    simple: dict[str, st.SearchStrategy[Any]] = {
        "null": st.none(), "boolean": st.booleans(), "string": st.text(max_size=20),
        "bytes": st.binary(max_size=20), "int": st.integers(-(2**31), 2**31 - 1),
        "long": st.integers(-(2**63), 2**63 - 1),
        "float": st.floats(width=32, allow_nan=False),
        "double": st.floats(allow_nan=False)}
    if t in simple:
        return simple[t]
    if t == "enum":
        named[schema["name"]] = schema
        return st.sampled_from(schema["symbols"])
    if t == "fixed":
        named[schema["name"]] = schema
        return st.binary(min_size=schema["size"], max_size=schema["size"])
    if t == "array":
        return st.lists(values(schema["items"], named), max_size=4)
    if t == "map":
        return st.dictionaries(st.text(max_size=5), values(schema["values"], named), max_size=4)
    raise AssertionError(f"no strategy for {schema!r}")


views = values(VIEW, {})


def fastavro_bytes(schema: Any, record: Any) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


# -- round trips -------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(views)
def test_drawn_records_round_trip_and_are_the_bytes_fastavro_writes(view):
    serde = AvroSerde(VIEW)
    data = serde.serialize(view)
    assert data == serde.serialize(view)  # deterministic
    assert data == fastavro_bytes(VIEW, view)
    assert serde.deserialize(data) == view


@settings(max_examples=100, deadline=None)
@given(views, st.integers(0, 2**31 - 1))
def test_confluent_framing_round_trips_and_reads_fastavro_bytes_framed(view, schema_id):
    serde = AvroSerde(VIEW, wire_format="confluent", schema_id=schema_id)
    data = serde.serialize(view)
    framed = b"\x00" + struct.pack(">I", schema_id) + fastavro_bytes(VIEW, view)
    assert data == framed
    assert serde.deserialize(framed) == view


def test_hand_computed_bytes():
    record = {"name": "ann", "age": 3}
    # "ann": length 3 as a zigzag varint (6), the UTF-8 bytes; 3 as a zigzag varint (6)
    assert AvroSerde(USER).serialize(record) == b"\x06ann\x06"
    assert AvroSerde(USER, wire_format="confluent", schema_id=7).serialize(record) == \
        b"\x00\x00\x00\x00\x07\x06ann\x06"
    assert AvroSerde(USER, wire_format="confluent", schema_id=258).serialize(
        {"name": "", "age": -1}) == b"\x00\x00\x00\x01\x02\x00\x01"
    assert AvroSerde(USER, wire_format="confluent", schema_id=258).deserialize(
        b"\x00\x00\x00\x01\x02\x00\x01") == {"name": "", "age": -1}


def test_a_schema_that_is_not_a_record_and_json_text():
    assert AvroSerde("string").deserialize(AvroSerde('"string"').serialize("hé")) == "hé"
    longs = AvroSerde({"type": "array", "items": "long"})
    assert longs.deserialize(longs.serialize([1, -2, 2**40])) == [1, -2, 2**40]
    text = '{"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"},' \
           ' {"name": "age", "type": "int"}]}'
    assert AvroSerde(text) == AvroSerde(USER)
    assert AvroSerde(text).serialize({"name": "ann", "age": 3}) == b"\x06ann\x06"


def test_a_field_with_a_default_may_be_left_out():
    serde = AvroSerde(ADDRESS)
    assert serde.deserialize(serde.serialize({"city": "Oslo"})) == {"city": "Oslo", "zip": None}


def test_keys_and_values_compose_in_a_kvserde():
    serde = KVSerde(StringSerde(), AvroSerde(USER))
    assert serde.to_bytes(KV("u1", {"name": "ann", "age": 3})) == (b"u1", b"\x06ann\x06")
    assert serde.from_bytes(b"u1", b"\x06ann\x06") == KV("u1", {"name": "ann", "age": 3})
    assert serde.describe() == "KVSerde(StringSerde(), AvroSerde('User'))"


# -- records that do not fit: one line naming the field ----------------------------------------

GOOD = {"user": "u1", "n": 1, "ms": 2, "ratio": 0.5, "score": 1.5, "ok": True, "raw": b"",
        "kind": "VIEW", "digest": b"abcd", "tags": [], "counts": {}, "home": {"city": "Oslo"}}


@pytest.mark.parametrize("change, expected", [
    ({"n": "1"}, "field 'n' is '1' (str), expected int"),
    ({"n": 2**31}, "field 'n' is 2147483648, out of the range of an Avro int"),
    ({"ms": 1.5}, "field 'ms' is 1.5 (float), expected long"),
    ({"ok": 1}, "field 'ok' is 1 (int), expected boolean"),
    ({"kind": "BUY"}, "field 'kind' is 'BUY' (str), not one of the symbols of enum shop.Kind: "
                      "VIEW, CLICK"),
    ({"digest": b"abc"}, "field 'digest' is 3 bytes, expected fixed shop.Digest of 4 bytes"),
    ({"tags": ["a", 2]}, "field 'tags[1]' is 2 (int), expected string"),
    ({"tags": "a"}, "field 'tags' is 'a' (str), expected array of string (a list)"),
    ({"counts": {"a": "x"}}, "field \"counts['a']\" is 'x' (str), expected long"),
    ({"referrer": 5}, "field 'referrer' is 5 (int), expected string"),
    ({"home": {"city": "Oslo", "zip": "0150"}}, "field 'home.zip' is '0150' (str), expected int"),
    ({"home": {"zip": 1}}, "field 'home.city' is missing and the schema gives it no default"),
    ({"work": {"city": 3}}, "field 'work.city' is 3 (int), expected string"),
    ({"color": "red"}, "field 'color' is not in the schema of shop.PageView"),
    ({"user": None}, "field 'user' is None (NoneType), expected string"),
])
def test_a_record_that_does_not_fit_is_one_line_naming_the_field(change, expected):
    record = {**GOOD, **change}
    assert AvroSerde(VIEW).serialize(GOOD)
    with pytest.raises(SerdeError) as err:
        AvroSerde(VIEW).serialize(record)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("AvroSerde('shop.PageView') cannot encode dict: ")
    assert expected in text


def test_a_missing_field_and_a_message_that_is_not_a_record():
    record = dict(GOOD)
    del record["user"]
    with pytest.raises(SerdeError, match="field 'user' is missing and the schema gives it no "
                                         "default"):
        AvroSerde(VIEW).serialize(record)
    with pytest.raises(SerdeError, match=r"the message is \[1, 2\] \(list\), expected record "
                                         r"shop.PageView \(a dict\)"):
        AvroSerde(VIEW).serialize([1, 2])


# -- bytes that are not Avro of the schema -----------------------------------------------------

@pytest.mark.parametrize("data, expected", [
    (b"", "the bytes end inside the record"),
    (b"\x06an", "the bytes end inside the record"),
    (b"\x06ann\x06\x00", "1 bytes are left after the record"),
    (b"\x06\xff\xfe\xfd\x06", "a string is not UTF-8"),
    (b"\x00\x00\x00\x00\x07\x06ann\x06", "is it wire_format='confluent'?"),
])
def test_bytes_that_are_not_avro_of_the_schema_are_a_serde_error(data, expected):
    with pytest.raises(SerdeError) as err:
        AvroSerde(USER).deserialize(data)
    assert expected in err.value.reason and "\n" not in err.value.reason
    assert err.value.data == data
    assert err.value.reason.startswith("AvroSerde('User') cannot decode message: ")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_garbage_either_decodes_to_a_record_of_the_schema_or_is_a_serde_error(data):
    serde = AvroSerde(VIEW)
    try:
        record = serde.deserialize(data)
    except SerdeError as e:
        assert e.data == data and "\n" not in e.reason
    else:  # all of it was read, as a record of the schema
        assert isinstance(record, dict) and serde.serialize(record)


@pytest.mark.parametrize("data, expected", [
    (b"\x00\x00\x07", "3 bytes are shorter than the Confluent header"),
    (b"\x06ann\x06", "the first byte is 0x06, not the Confluent magic byte 0x00"),
    (b"\x00\x00\x00\x00\x08\x06ann\x06", "the bytes have schema id 8, not this serde's schema "
                                         "id 7"),
])
def test_confluent_bytes_are_checked(data, expected):
    with pytest.raises(SerdeError) as err:
        AvroSerde(USER, wire_format="confluent", schema_id=7).deserialize(data)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_known_ids_are_read_with_their_schemas_resolved_into_the_serdes():
    old = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
    new = {"type": "record", "name": "User", "fields": [
        {"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": -1}]}
    serde = AvroSerde(new, wire_format="confluent", schema_id=8, known_schemas={5: old})
    from_old = b"\x00\x00\x00\x00\x05" + fastavro_bytes(old, {"name": "ann"})
    assert serde.deserialize(from_old) == {"name": "ann", "age": -1}
    assert serde.deserialize(serde.serialize({"name": "bob", "age": 4})) == \
        {"name": "bob", "age": 4}
    with pytest.raises(SerdeError, match=r"schema id 6, not this serde's schema id 8 nor a "
                                         r"known id \(5\)"):
        serde.deserialize(b"\x00\x00\x00\x00\x06\x06ann")
    assert serde.describe() == "AvroSerde('User', wire_format='confluent', schema_id=8, " \
                               "known_ids=[5])"


# -- settings ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, match", [
    ({"wire_format": "confluent"}, ValueError, "needs schema_id="),
    ({"schema_id": 3}, ValueError, "only with wire_format='confluent'"),
    ({"known_schemas": {3: USER}}, ValueError, "only with wire_format='confluent'"),
    ({"wire_format": "avro"}, ValueError, "must be 'plain' or 'confluent'"),
    ({"wire_format": "confluent", "schema_id": 2**31}, ValueError, "0 to 2147483647"),
    ({"wire_format": "confluent", "schema_id": "7"}, TypeError, "must be an int"),
])
def test_wire_format_settings_are_checked(kwargs, error, match):
    with pytest.raises(error, match=match):
        AvroSerde(USER, **kwargs)


@pytest.mark.parametrize("schema, match", [
    ({"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]}, "invalid"),
    ("{not json", "not valid JSON"),
    (42, "must be a dict"),
])
def test_a_bad_schema_is_named(schema, match):
    with pytest.raises((ValueError, TypeError), match=match):
        AvroSerde(schema)


def test_equality_describe_and_pickle():
    a = AvroSerde(USER, wire_format="confluent", schema_id=7)
    assert a == AvroSerde(dict(USER), wire_format="confluent", schema_id=7)
    assert hash(a) == hash(AvroSerde(USER, wire_format="confluent", schema_id=7))
    assert a != AvroSerde(USER, wire_format="confluent", schema_id=8)
    assert a != AvroSerde(USER)
    assert AvroSerde(USER) != AvroSerde(ADDRESS)
    assert a.describe() == repr(a) == "AvroSerde('User', wire_format='confluent', schema_id=7)"
    back = pickle.loads(pickle.dumps(a))
    assert back == a and back.serialize({"name": "ann", "age": 3}) == \
        a.serialize({"name": "ann", "age": 3})
