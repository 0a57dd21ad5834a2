"""Hostile bytes cost a serde little: each is refused at once with one SerdeError, in a fraction
of a second and a few MB, whatever counts, lengths and nesting the bytes claim.

Each hostile record is decoded in a child process with its data segment capped at 1 GiB, so a
serde that trusts a count fails the test (slow, and its memory up to the cap) instead of taking
the machine's memory; a crash of the child fails it too."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from samza_dsl.errors import SerdeError
from samza_dsl.serdes import AvroSerde, ProtobufSerde

#: what decoding one hostile record may take, in CPU seconds of the process decoding it (a
#: loaded machine makes its wall time longer, not its work)
MAX_SECONDS = 1.0
MAX_PEAK_BYTES = 4 * 1024 * 1024

_CHILD = r"""
import json, resource, sys, time, tracemalloc
resource.setrlimit(resource.RLIMIT_DATA, (1 << 30, 1 << 30))
from samza_dsl.errors import SerdeError
{setup}
tracemalloc.start()
start = time.process_time()  # its own CPU: what it costs, not how busy the machine is
try:
    serde.deserialize(data)
    out = {{"error": None}}
except SerdeError as exc:
    out = {{"error": "SerdeError", "reason": exc.reason}}
except BaseException as exc:
    out = {{"error": type(exc).__name__, "reason": str(exc)[:300]}}
out["seconds"] = time.process_time() - start
out["peak"] = tracemalloc.get_traced_memory()[1]
print(json.dumps(out))
"""


def _zigzag(n: int) -> bytes:
    """An Avro long: zigzag, then a varint."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _decode_hostile(setup: str) -> dict[str, object]:
    """Decode ``data`` with ``serde`` (both made by ``setup``) in a child process: what it
    raised, how long it took and its peak of memory."""
    code = _CHILD.format(setup=textwrap.dedent(setup))
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("decoding one hostile record did not end within 120 s")
    assert done.returncode == 0, f"the child died ({done.returncode}): {done.stderr[-2000:]}"
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _assert_refused_fast(result: dict[str, object], *expected: str) -> str:
    assert result["error"] == "SerdeError", result
    reason = str(result["reason"])
    assert float(str(result["seconds"])) < MAX_SECONDS, result
    assert int(str(result["peak"])) < MAX_PEAK_BYTES, result
    assert "\n" not in reason and "BytesIO" not in reason
    for text in expected:
        assert text in reason, reason
    return reason


# -- Avro ------------------------------------------------------------------------------------------

NULLS = {"type": "record", "name": "R", "fields": [
    {"name": "xs", "type": {"type": "array", "items": "null"}}]}
#: a block of one null, then a block claiming 2**62 nulls: 12 bytes
HOSTILE = b"\x02" + _zigzag(2**62) + b"\x00"


def test_the_12_byte_array_of_null_is_refused_at_once_naming_the_field_and_the_limit():
    assert len(HOSTILE) == 12
    result = _decode_hostile(f"""
        from samza_dsl.serdes import AvroSerde
        serde = AvroSerde({NULLS!r})
        data = {HOSTILE!r}
    """)
    _assert_refused_fast(result, "field 'xs' (array of null)", "4611686018427387904 items",
                         "1000000 items", "max_items=")


def test_a_huge_count_of_empty_records_is_refused_at_once():
    schema = {"type": "array", "items": {"type": "record", "name": "E", "fields": []}}
    data = _zigzag(2**40) + bytes(1)
    result = _decode_hostile(f"""
        from samza_dsl.serdes import AvroSerde
        serde = AvroSerde({schema!r})
        data = {data!r}
    """)
    _assert_refused_fast(result, "array of record E", "max_items=")


def test_a_recursive_record_nested_without_end_is_refused_not_crashed():
    schema = {"type": "record", "name": "Node", "fields": [
        {"name": "next", "type": ["null", "Node"]}]}
    result = _decode_hostile(f"""
        from samza_dsl.serdes import AvroSerde
        serde = AvroSerde({schema!r})
        data = b"\\x02" * 200_000 + b"\\x00"
    """)
    _assert_refused_fast(result, "field 'next.next.next", "more than 100 levels deep",
                         "max_depth=")


def test_lengths_and_counts_beyond_the_bytes_left_are_refused_at_once():
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "name", "type": "string"},
        {"name": "tags", "type": {"type": "map", "values": "long"}}]}
    for data, expected in [(_zigzag(2**62), "field 'name' (string) has a length of"),
                           (b"\x00" + _zigzag(2**62), "field 'tags' (map of long): a block "
                                                      "claims 4611686018427387904 entries"),
                           (b"\x00" + _zigzag(-5) + _zigzag(2**60), "claims 1152921504606846976 "
                                                                     "bytes")]:
        result = _decode_hostile(f"""
            from samza_dsl.serdes import AvroSerde
            serde = AvroSerde({schema!r})
            data = {data!r}
        """)
        _assert_refused_fast(result, expected, "the bytes end inside the record")


def test_the_schema_of_a_known_id_is_checked_as_the_serdes_own():
    old = {"type": "record", "name": "R", "fields": [
        {"name": "xs", "type": {"type": "array", "items": "null"}},
        {"name": "n", "type": "int", "default": 0}]}
    result = _decode_hostile(f"""
        from samza_dsl.serdes import AvroSerde
        serde = AvroSerde({old!r}, wire_format="confluent", schema_id=2,
                          known_schemas={{1: {NULLS!r}}})
        data = b"\\x00\\x00\\x00\\x00\\x01" + {HOSTILE!r}
    """)
    _assert_refused_fast(result, "field 'xs' (array of null)", "max_items=")


def test_the_limits_are_the_serdes_arguments():
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "xs", "type": {"type": "array", "items": "int"}},
        {"name": "inner", "type": {"type": "array", "items": {"type": "array",
                                                              "items": "int"}}}]}
    serde = AvroSerde(schema, max_bytes=64, max_items=3, max_depth=2)
    assert serde.describe() == "AvroSerde('R', max_bytes=64, max_items=3, max_depth=2)"
    assert serde != AvroSerde(schema)
    assert serde.deserialize(serde.serialize({"xs": [1, 2], "inner": []})) == {
        "xs": [1, 2], "inner": []}
    for record, expected in [({"xs": [1, 2, 3, 4], "inner": []}, "more than the 3 items"),
                             ({"xs": [], "inner": [[1]]}, "field 'inner[0]' nests more than "
                                                          "2 levels deep"),
                             ({"xs": list(range(100)), "inner": []}, "more than the 64 bytes")]:
        data = AvroSerde(schema).serialize(record)
        with pytest.raises(SerdeError) as err:
            serde.deserialize(data)
        assert expected in err.value.reason, err.value.reason
        assert "Check the producer, or give the serde a larger max_" in err.value.reason
    with pytest.raises(ValueError, match="AvroSerde max_items must be a positive int"):
        AvroSerde(schema, max_items=0)


@pytest.mark.parametrize("field_type, data, expected", [
    ("float", b"\x01", "field 'inner.y' (float) is cut short: it takes 4 bytes, 1 left"),
    ("boolean", b"", "field 'inner.y' (boolean) is cut short"),
    (["null", "int"], b"\x08", "field 'inner.y' (union [null, int]) has the branch index 4, "
                               "but there are 2"),
    ({"type": "enum", "name": "E", "symbols": ["a"]}, b"\x08",
     "field 'inner.y' (enum E) has the symbol index 4"),
    ({"type": "map", "values": "string"}, b"\x02\x02k\x02\xff\x00",
     "field \"inner.y['k']\" (string): a string is not UTF-8"),
])
def test_bytes_that_are_not_avro_name_the_field_at_fault(field_type, data, expected):
    serde = AvroSerde({"type": "record", "name": "R", "fields": [{"name": "inner", "type": {
        "type": "record", "name": "In", "fields": [{"name": "y", "type": field_type}]}}]})
    with pytest.raises(SerdeError) as err:
        serde.deserialize(data)
    reason = err.value.reason
    assert expected in reason and "not Avro of this schema" in reason, reason
    assert "BytesIO" not in reason and " at 0x" not in reason


# -- Protobuf --------------------------------------------------------------------------------------


def test_a_protobuf_length_beyond_the_bytes_is_refused_at_once():
    result = _decode_hostile(f"""
        from google.protobuf.source_context_pb2 import SourceContext
        from samza_dsl.serdes import ProtobufSerde
        serde = ProtobufSerde(SourceContext)
        data = b"\\x0a" + {_zigzag(2**61)!r}
    """)
    _assert_refused_fast(result, "not a google.protobuf.SourceContext")


def test_a_protobuf_message_nested_without_end_is_refused_at_once():
    result = _decode_hostile("""
        from google.protobuf.struct_pb2 import Value
        from samza_dsl.serdes import ProtobufSerde
        def varint(n):
            out = bytearray()
            while n > 0x7F:
                out.append((n & 0x7F) | 0x80)
                n >>= 7
            out.append(n)
            return bytes(out)
        data = b""
        for _ in range(5000):  # Value.list_value (6) holding ListValue.values (1) holding it
            inner = b"\\x0a" + varint(len(data)) + data
            data = b"\\x32" + varint(len(inner)) + inner
        serde = ProtobufSerde(Value)
    """)
    _assert_refused_fast(result, "not a google.protobuf.Value")


def test_a_protobuf_record_longer_than_max_bytes_is_refused():
    from google.protobuf.source_context_pb2 import SourceContext

    serde = ProtobufSerde(SourceContext, max_bytes=8)
    assert serde.describe() == "ProtobufSerde(google.protobuf.SourceContext, max_bytes=8)"
    assert serde.deserialize(b"\x0a\x02ab") == SourceContext(file_name="ab")
    with pytest.raises(SerdeError) as err:
        serde.deserialize(b"\x0a\x07a.proto")
    assert "it is 9 bytes long, more than the 8 bytes a record may take" in err.value.reason
    assert "a larger max_bytes=" in err.value.reason
    with pytest.raises(ValueError, match="ProtobufSerde max_bytes must be a positive int"):
        ProtobufSerde(SourceContext, max_bytes=-1)


# -- msgspec (JSON, MessagePack, SafeSerde) and text -------------------------------------------------


@pytest.mark.parametrize("serde, data, expected", [
    ("JsonSerde()", "b'[' * 200_000", "nested 200000 levels deep"),
    ("JsonSerde()", "b'{\"a\":' * 30_000", "nested 30000 levels deep"),
    ("MsgpackSerde()", "b'\\x91' * 200_000", "nests too deeply"),
    ("MsgpackSerde()", "b'\\xdd\\xff\\xff\\xff\\xff'", "truncated"),
    ("MsgpackSerde()", "b'\\xdf\\xff\\xff\\xff\\xff\\xc0'", "truncated"),
    ("MsgpackSerde()", "b'\\xc6\\xff\\xff\\xff\\xff'", "truncated"),
    ("SafeSerde()", "b'\\xdd\\xff\\xff\\xff\\xff'", "truncated"),
    ("StringSerde()", "b'\\xff' * 100_000", "can't decode byte 0xff"),
])
def test_hostile_bytes_cost_the_msgspec_and_text_serdes_little(serde, data, expected):
    result = _decode_hostile(f"""
        from samza_dsl.serdes import JsonSerde, MsgpackSerde, SafeSerde, StringSerde
        serde = {serde}
        data = {data}
    """)
    _assert_refused_fast(result, expected)


@pytest.mark.parametrize("serde_class", ["JsonSerde", "MsgpackSerde"])
def test_json_and_msgpack_refuse_a_message_longer_than_max_bytes(serde_class):
    from samza_dsl import serdes

    cls = getattr(serdes, serde_class)
    serde, default = cls(max_bytes=16), cls()
    assert serde.describe() == f"{serde_class}(max_bytes=16)" and serde != default
    assert default.max_bytes == 16 * 1024 * 1024
    short, long = default.serialize([1, 2]), default.serialize(list(range(20)))
    assert serde.deserialize(short) == [1, 2]
    for decode in (serde.deserialize, lambda data: serde.deserialize_batch([short, data])):
        with pytest.raises(SerdeError) as err:
            decode(long)
        assert f"it is {len(long)} bytes long, more than the 16 bytes" in err.value.reason
        assert "a larger max_bytes=" in err.value.reason
    with pytest.raises(ValueError, match=f"{serde_class} max_bytes must be a positive int"):
        cls(max_bytes=0)
