"""The transaction requests of ``runtime.kafka.txn_protocol`` byte for byte against Kafka's
message definitions (``clients/src/main/resources/common/message/*.json``).

Each expected byte string is written field by field from the JSON: in a flexible version a string
is an unsigned varint of its length + 1 (0 for null) and its bytes, an array the varint of its
length + 1 and its items, and every struct ends with its tagged fields (0x00: none). No broker
here: these run without one.
"""

from __future__ import annotations

import pytest
from aiokafka.errors import IncompatibleBrokerVersion
from aiokafka.protocol import transaction as v0

from runtime.kafka import txn_protocol as t


def hx(*fields: str) -> bytes:
    """Bytes from hex fields, one per protocol field (spaces inside are ignored)."""
    return bytes.fromhex("".join(fields))


def ascii_hex(text: str) -> str:
    return text.encode().hex()


NO_TAGS = "00"
PID_5 = "0000000000000005"  # int64 ProducerId 5
EPOCH_2 = "0002"  # int16 ProducerEpoch 2
TX = "03" + ascii_hex("tx")  # compact string "tx": length 2 + 1
NO_THROTTLE = "00000000"


# requests -------------------------------------------------------------------------------------

def test_init_producer_id_v4_request_fields_in_order_with_compact_nullable_id() -> None:
    req = t.InitProducerIdRequest("job-1-t0", 60_000).prepare({22: (0, 5)})
    assert req.API_VERSION == 4
    assert req.encode() == hx(
        "09" + ascii_hex("job-1-t0"),  # TransactionalId: compact, 8 + 1
        "0000ea60",                    # TransactionTimeoutMs 60000
        "ffffffffffffffff",            # ProducerId -1 (versions 3+, default)
        "ffff",                        # ProducerEpoch -1 (versions 3+, default)
        NO_TAGS)
    resuming = t.InitProducerIdRequest("tx", 1000, 5, 2).prepare({22: (0, 5)})
    assert resuming.encode() == hx(TX, "000003e8", PID_5, EPOCH_2, NO_TAGS)
    idempotent = t.InitProducerIdRequest(None, 1).prepare({22: (0, 5)})
    assert idempotent.encode() == hx("00", "00000001", "ff" * 8, "ffff", NO_TAGS)  # null id


def test_a_flexible_request_goes_out_with_the_v2_header_and_its_tagged_fields() -> None:
    req = t.EndTxnRequest("tx", 5, 2, True).prepare({26: (0, 4)})
    header = req.build_request_header(correlation_id=7, client_id="c")
    assert header.encode() == hx(
        "001a",       # request_api_key 26
        "0003",       # request_api_version 3
        "00000007",   # correlation_id
        "0001" + ascii_hex("c"),  # client_id: a non-compact nullable string even here
        NO_TAGS)


def test_add_partitions_to_txn_v3_request_nests_compact_arrays_each_with_tags() -> None:
    req = t.AddPartitionsToTxnRequest("tx", 5, 2, [("out", [0, 3]), ("ck", [1])])
    assert req.prepare({24: (0, 5)}).encode() == hx(
        TX, PID_5, EPOCH_2,
        "03",                                   # V3AndBelowTopics: 2 + 1
        "04" + ascii_hex("out"),                # Name
        "03", "00000000", "00000003",           # Partitions []int32: 2 + 1
        NO_TAGS,                                # end of topic "out"
        "03" + ascii_hex("ck"), "02", "00000001", NO_TAGS,
        NO_TAGS)


def test_add_offsets_to_txn_v3_request() -> None:
    req = t.AddOffsetsToTxnRequest("tx", 5, 2, "grp").prepare({25: (0, 4)})
    assert req.encode() == hx(TX, PID_5, EPOCH_2, "04" + ascii_hex("grp"), NO_TAGS)


@pytest.mark.parametrize(("committed", "byte"), [(True, "01"), (False, "00")])
def test_end_txn_v3_request(committed: bool, byte: str) -> None:
    req = t.EndTxnRequest("tx", 5, 2, committed).prepare({26: (0, 4)})
    assert req.encode() == hx(TX, PID_5, EPOCH_2, byte, NO_TAGS)


def test_txn_offset_commit_v3_request_has_the_group_fields_and_the_leader_epoch() -> None:
    req = t.TxnOffsetCommitRequest("tx", "grp", 5, 2, [("in", [(1, 42, None), (2, 7, "m")])])
    assert req.prepare({28: (0, 4)}).encode() == hx(
        TX,
        "04" + ascii_hex("grp"),  # GroupId
        PID_5, EPOCH_2,
        "ffffffff",               # GenerationId -1 (default)
        "01",                     # MemberId "" (default): 0 + 1
        "00",                     # GroupInstanceId null (default)
        "02",                     # Topics: 1 + 1
        "03" + ascii_hex("in"),
        "03",                     # Partitions: 2 + 1
        "00000001", "000000000000002a", "ffffffff", "00", NO_TAGS,  # metadata null
        "00000002", "0000000000000007", "ffffffff", "02" + ascii_hex("m"), NO_TAGS,
        NO_TAGS,                  # end of topic "in"
        NO_TAGS)


def test_each_builder_reads_its_fields_off_aiokafkas_version_0_request() -> None:
    cases = [
        (v0.InitProducerIdRequest("tx", 60_000), t.InitProducerIdRequest("tx", 60_000)),
        (v0.AddPartitionsToTxnRequest("tx", 5, 2, [("out", [0, 3])]),
         t.AddPartitionsToTxnRequest("tx", 5, 2, [("out", [0, 3])])),
        (v0.AddOffsetsToTxnRequest("tx", 5, 2, "grp"), t.AddOffsetsToTxnRequest("tx", 5, 2, "grp")),
        (v0.EndTxnRequest("tx", 5, 2, False), t.EndTxnRequest("tx", 5, 2, False)),
        (v0.TxnOffsetCommitRequest("tx", "grp", 5, 2, [("in", [(1, 42, "")])]),
         t.TxnOffsetCommitRequest("tx", "grp", 5, 2, [("in", [(1, 42, "")])])),
    ]
    everything = {key: (0, 5) for key in t.TRANSACTION_REQUESTS}
    for old, new in cases:
        struct = old.prepare({old.API_KEY: (0, 0)})
        translated = t.TRANSACTION_REQUESTS[old.API_KEY].from_v0(struct)
        assert translated.prepare(everything).encode() == new.prepare(everything).encode()


def test_a_broker_without_the_version_gets_a_clear_error_naming_it() -> None:
    with pytest.raises(IncompatibleBrokerVersion, match=r"EndTxnRequest v3 .* versions 0\.\.2"):
        t.EndTxnRequest("tx", 5, 2, True).prepare({26: (0, 2)})
    with pytest.raises(IncompatibleBrokerVersion, match="not at all"):
        t.InitProducerIdRequest("tx", 1).prepare({})


# responses ------------------------------------------------------------------------------------

def test_init_producer_id_v4_response() -> None:
    resp = t.InitProducerIdResponse_v4.decode(hx(
        NO_THROTTLE, "0000", "0000000000000007", "0003", NO_TAGS))
    assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (0, 7, 3)


def test_add_partitions_to_txn_v3_response_skips_a_tagged_field_and_reads_on() -> None:
    data = hx(
        NO_THROTTLE,
        "02",                                  # ResultsByTopicV3AndBelow: 1 + 1
        "04" + ascii_hex("out"),
        "03",                                  # ResultsByPartition: 2 + 1
        "00000000", "0000", NO_TAGS,
        "00000003", "005a", "01" "00" "01" "ff",  # error 90; one tagged field: tag 0, 1 byte
        NO_TAGS,
        NO_TAGS)
    resp = t.AddPartitionsToTxnResponse_v3.decode(data)
    assert resp.results_by_topic == [("out", [(0, 0, {}), (3, 90, {0: b"\xff"})], {})]
    old = t.as_v0_response(resp)
    assert isinstance(old, v0.AddPartitionsToTxnResponse_v0)
    # PRODUCER_FENCED reaches aiokafka's handlers as the code they turn into ProducerFenced
    assert old.errors == [("out", [(0, 0), (3, t.INVALID_PRODUCER_EPOCH)])]


@pytest.mark.parametrize("cls", [t.AddOffsetsToTxnResponse_v3, t.EndTxnResponse_v3])
def test_error_only_responses(cls: type) -> None:
    resp = cls.decode(hx("00000064", "0033", NO_TAGS))  # throttled 100 ms, CONCURRENT_TRANSACTIONS
    assert (resp.throttle_time_ms, resp.error_code) == (100, 51)
    assert t.as_v0_response(resp).error_code == 51
    fenced = cls.decode(hx(NO_THROTTLE, "005a", NO_TAGS))
    assert t.as_v0_response(fenced).error_code == t.INVALID_PRODUCER_EPOCH


def test_txn_offset_commit_v3_response() -> None:
    resp = t.TxnOffsetCommitResponse_v3.decode(hx(
        NO_THROTTLE, "02", "03" + ascii_hex("in"), "02", "00000001", "0000", NO_TAGS,
        NO_TAGS, NO_TAGS))
    assert resp.topics == [("in", [(1, 0, {})], {})]
    old = t.as_v0_response(resp)
    assert isinstance(old, v0.TxnOffsetCommitResponse_v0)
    assert old.errors == [("in", [(1, 0)])]


def test_init_producer_id_response_as_v0_keeps_the_id_and_epoch() -> None:
    resp = t.InitProducerIdResponse_v4(0, 0, 7, 3, {})
    old = t.as_v0_response(resp)
    assert isinstance(old, v0.InitProducerIdResponse_v0)
    assert (old.error_code, old.producer_id, old.producer_epoch) == (0, 7, 3)
