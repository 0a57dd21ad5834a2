"""The transaction requests in the versions that today's brokers accept, on aiokafka's protocol
types.

aiokafka speaks only version 0 of InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn
and TxnOffsetCommit, and some brokers refuse it (tansu answers InitProducerId v0 with
UNKNOWN_SERVER_ERROR; Apache Kafka 4 removed the oldest versions of many requests, KIP-896).
The flexible versions below are the ones Apache Kafka has accepted since 2.8, 4.x included:
compact strings and arrays (length + 1 as an unsigned varint, 0 for null) and a tagged-field
section closing every struct. Their fields are those of Kafka's message definitions
(``clients/src/main/resources/common/message/*.json``):

=====================  =======  ==========================================================
API (key)              version  why this one
=====================  =======  ==========================================================
InitProducerId (22)    4        flexible from 2; the newest without TRANSACTION_ABORTABLE
AddPartitionsToTxn     3        the newest a client sends: 4+ batch transactions, for
(24)                            brokers among themselves
AddOffsetsToTxn (25)   3        flexible from 3; 4 adds TRANSACTION_ABORTABLE
EndTxn (26)            3        flexible from 3; 4 adds TRANSACTION_ABORTABLE, 5 bumps the
                                epoch at every commit (KIP-890 part 2)
TxnOffsetCommit (28)   3        flexible from 3 (which adds the group generation and member)
=====================  =======  ==========================================================

Each of them may answer PRODUCER_FENCED (90) where older versions said INVALID_PRODUCER_EPOCH
(47); none answers TRANSACTION_ABORTABLE (120), which the producer's state machine does not know.

Every ``*Request`` builder here takes the same fields as aiokafka's builder of the same name and
adds ``from_v0``, which reads them off aiokafka's version-0 struct, so a producer can swap its
requests without knowing their fields.
"""

from __future__ import annotations

from typing import Any, TypeAlias, TypeVar

from aiokafka.errors import IncompatibleBrokerVersion

from runtime.kafka.aiokafka_compat import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Request,
    RequestStruct,
    Response,
    Schema,
    TaggedFields,
)
from runtime.kafka.aiokafka_compat import transaction_v0 as v0

__all__ = [
    "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "TRANSACTION_REQUESTS", "as_v0_response",
    "AddOffsetsToTxnRequest", "AddOffsetsToTxnRequest_v3", "AddOffsetsToTxnResponse_v3",
    "AddPartitionsToTxnRequest", "AddPartitionsToTxnRequest_v3", "AddPartitionsToTxnResponse_v3",
    "EndTxnRequest", "EndTxnRequest_v3", "EndTxnResponse_v3",
    "InitProducerIdRequest", "InitProducerIdRequest_v4", "InitProducerIdResponse_v4",
    "TxnOffsetCommitRequest", "TxnOffsetCommitRequest_v3", "TxnOffsetCommitResponse_v3",
]

#: error codes: the one these versions use for a fenced producer, and the one older versions used
PRODUCER_FENCED = 90
INVALID_PRODUCER_EPOCH = 47

_STR = CompactString("utf-8")
_NO_TAGS: dict[int, bytes] = {}


_S = TypeVar("_S", bound=RequestStruct)


class _NewerRequest(Request[_S]):
    """What the builders share: one version each, and a clear error when the broker has not
    got it (aiokafka's own says "not yet been added")."""

    API_KEY = -1  # each builder sets its own

    def prepare(self, versions: dict[int, tuple[int, int]]) -> _S:
        struct = self._CLASSES[0]
        low, high = versions.get(self.API_KEY, (-1, -1))
        if not low <= struct.API_VERSION <= high:
            raise IncompatibleBrokerVersion(
                f"the broker does not accept {type(self).__name__} v{struct.API_VERSION} "
                f"(it accepts versions {low}..{high}; -1 means not at all): transactions need "
                f"a broker with Kafka's flexible transaction requests (Apache Kafka 2.8 or later)")
        return self.build(struct)

    #: the request's fields in the schema's order, but for its tagged fields
    fields: tuple[Any, ...]

    def build(self, request_struct_class: type[_S]) -> _S:
        return request_struct_class(*self.fields, _NO_TAGS)


# InitProducerId (22) v4 ------------------------------------------------------------------------

class InitProducerIdResponse_v4(Response):
    API_KEY = 22
    API_VERSION = 4
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("tags", TaggedFields),
    )


class InitProducerIdRequest_v4(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 22
    API_VERSION = 4
    RESPONSE_TYPE = InitProducerIdResponse_v4
    SCHEMA = Schema(
        ("transactional_id", _STR),  # nullable: an idempotent producer sends null
        ("transaction_timeout_ms", Int32),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("tags", TaggedFields),
    )


class InitProducerIdRequest(_NewerRequest[InitProducerIdRequest_v4]):
    API_KEY = 22

    def __init__(self, transactional_id: str | None, transaction_timeout_ms: int,
                 producer_id: int = -1, producer_epoch: int = -1) -> None:
        self.fields = (transactional_id, transaction_timeout_ms, producer_id, producer_epoch)

    @classmethod
    def from_v0(cls, v0: Any) -> InitProducerIdRequest:
        return cls(v0.transactional_id, v0.transaction_timeout_ms)



# AddPartitionsToTxn (24) v3 --------------------------------------------------------------------

class AddPartitionsToTxnResponse_v3(Response):
    API_KEY = 24
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("results_by_topic", CompactArray(
            ("name", _STR),
            ("results_by_partition", CompactArray(
                ("partition_index", Int32),
                ("partition_error_code", Int16),
                ("tags", TaggedFields),
            )),
            ("tags", TaggedFields),
        )),
        ("tags", TaggedFields),
    )


class AddPartitionsToTxnRequest_v3(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 24
    API_VERSION = 3
    RESPONSE_TYPE = AddPartitionsToTxnResponse_v3
    SCHEMA = Schema(
        ("transactional_id", _STR),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("topics", CompactArray(
            ("name", _STR),
            ("partitions", CompactArray(Int32)),
            ("tags", TaggedFields),
        )),
        ("tags", TaggedFields),
    )


class AddPartitionsToTxnRequest(_NewerRequest[AddPartitionsToTxnRequest_v3]):
    API_KEY = 24

    def __init__(self, transactional_id: str, producer_id: int, producer_epoch: int,
                 topics: list[tuple[str, list[int]]]) -> None:
        self.fields = (transactional_id, producer_id, producer_epoch,
                       [(name, list(parts), _NO_TAGS) for name, parts in topics])

    @classmethod
    def from_v0(cls, v0: Any) -> AddPartitionsToTxnRequest:
        return cls(v0.transactional_id, v0.producer_id, v0.producer_epoch, v0.topics)



# AddOffsetsToTxn (25) v3 -----------------------------------------------------------------------

class AddOffsetsToTxnResponse_v3(Response):
    API_KEY = 25
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("tags", TaggedFields),
    )


class AddOffsetsToTxnRequest_v3(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 25
    API_VERSION = 3
    RESPONSE_TYPE = AddOffsetsToTxnResponse_v3
    SCHEMA = Schema(
        ("transactional_id", _STR),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("group_id", _STR),
        ("tags", TaggedFields),
    )


class AddOffsetsToTxnRequest(_NewerRequest[AddOffsetsToTxnRequest_v3]):
    API_KEY = 25

    def __init__(self, transactional_id: str, producer_id: int, producer_epoch: int,
                 group_id: str) -> None:
        self.fields = (transactional_id, producer_id, producer_epoch, group_id)

    @classmethod
    def from_v0(cls, v0: Any) -> AddOffsetsToTxnRequest:
        return cls(v0.transactional_id, v0.producer_id, v0.producer_epoch, v0.group_id)



# EndTxn (26) v3 --------------------------------------------------------------------------------

class EndTxnResponse_v3(Response):
    API_KEY = 26
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("tags", TaggedFields),
    )


class EndTxnRequest_v3(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 26
    API_VERSION = 3
    RESPONSE_TYPE = EndTxnResponse_v3
    SCHEMA = Schema(
        ("transactional_id", _STR),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("committed", Boolean),
        ("tags", TaggedFields),
    )


class EndTxnRequest(_NewerRequest[EndTxnRequest_v3]):
    API_KEY = 26

    def __init__(self, transactional_id: str, producer_id: int, producer_epoch: int,
                 committed: bool) -> None:
        self.fields = (transactional_id, producer_id, producer_epoch, bool(committed))

    @classmethod
    def from_v0(cls, v0: Any) -> EndTxnRequest:
        return cls(v0.transactional_id, v0.producer_id, v0.producer_epoch,
                   v0.transaction_result)



# TxnOffsetCommit (28) v3 -----------------------------------------------------------------------

class TxnOffsetCommitResponse_v3(Response):
    API_KEY = 28
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("topics", CompactArray(
            ("name", _STR),
            ("partitions", CompactArray(
                ("partition_index", Int32),
                ("error_code", Int16),
                ("tags", TaggedFields),
            )),
            ("tags", TaggedFields),
        )),
        ("tags", TaggedFields),
    )


class TxnOffsetCommitRequest_v3(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 28
    API_VERSION = 3
    RESPONSE_TYPE = TxnOffsetCommitResponse_v3
    SCHEMA = Schema(
        ("transactional_id", _STR),
        ("group_id", _STR),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("generation_id", Int32),
        ("member_id", _STR),
        ("group_instance_id", _STR),  # nullable
        ("topics", CompactArray(
            ("name", _STR),
            ("partitions", CompactArray(
                ("partition_index", Int32),
                ("committed_offset", Int64),
                ("committed_leader_epoch", Int32),
                ("committed_metadata", _STR),  # nullable
                ("tags", TaggedFields),
            )),
            ("tags", TaggedFields),
        )),
        ("tags", TaggedFields),
    )


#: ``(topic, [(partition, offset, metadata)])``, as aiokafka's version 0 carries them
OffsetsByTopic: TypeAlias = list[tuple[str, list[tuple[int, int, str | None]]]]


class TxnOffsetCommitRequest(_NewerRequest[TxnOffsetCommitRequest_v3]):
    """Offsets committed outside a consumer group's generation, as a job that assigns its
    partitions itself does: generation -1, no member id, no group instance id (Kafka's defaults
    for these fields), and no leader epoch (-1)."""

    API_KEY = 28

    def __init__(self, transactional_id: str, group_id: str, producer_id: int,
                 producer_epoch: int, topics: OffsetsByTopic, *, generation_id: int = -1,
                 member_id: str = "", group_instance_id: str | None = None) -> None:
        self.fields = (
            transactional_id, group_id, producer_id, producer_epoch, generation_id, member_id,
            group_instance_id,
            [(name, [(p, offset, -1, meta, _NO_TAGS) for p, offset, meta in parts], _NO_TAGS)
             for name, parts in topics])

    @classmethod
    def from_v0(cls, v0: Any) -> TxnOffsetCommitRequest:
        return cls(v0.transactional_id, v0.group_id, v0.producer_id, v0.producer_epoch,
                   v0.topics)



#: API key -> the newer builder of that request
TRANSACTION_REQUESTS: dict[int, Any] = {
    cls.API_KEY: cls for cls in (InitProducerIdRequest, AddPartitionsToTxnRequest,
                                 AddOffsetsToTxnRequest, EndTxnRequest, TxnOffsetCommitRequest)
}


def _fenced_as_v0(code: int) -> int:
    return INVALID_PRODUCER_EPOCH if code == PRODUCER_FENCED else code


def _errors_by_topic(topics: list[Any] | None) -> list[tuple[str, list[tuple[int, int]]]]:
    return [(name, [(p, _fenced_as_v0(code)) for p, code, _tags in parts])
            for name, parts, _tags in topics or []]


def as_v0_response(response: Any) -> Any:
    """``response`` as aiokafka's version-0 response of the same API, which is what its
    producer's handlers read: the same errors, with PRODUCER_FENCED as INVALID_PRODUCER_EPOCH
    (the code those handlers turn into ``ProducerFenced``; they would take 90 for an unknown
    error)."""
    key = response.API_KEY
    if key == InitProducerIdResponse_v4.API_KEY:
        return v0.InitProducerIdResponse_v0(
            response.throttle_time_ms, _fenced_as_v0(response.error_code),
            response.producer_id, response.producer_epoch)
    if key == AddPartitionsToTxnResponse_v3.API_KEY:
        return v0.AddPartitionsToTxnResponse_v0(response.throttle_time_ms,
                                                _errors_by_topic(response.results_by_topic))
    if key == TxnOffsetCommitResponse_v3.API_KEY:
        return v0.TxnOffsetCommitResponse_v0(response.throttle_time_ms,
                                             _errors_by_topic(response.topics))
    if key == AddOffsetsToTxnResponse_v3.API_KEY:
        return v0.AddOffsetsToTxnResponse_v0(response.throttle_time_ms,
                                              _fenced_as_v0(response.error_code))
    if key == EndTxnResponse_v3.API_KEY:
        return v0.EndTxnResponse_v0(response.throttle_time_ms, _fenced_as_v0(response.error_code))
    raise ValueError(f"API key {key} is not one of the transaction requests "
                     f"{sorted(TRANSACTION_REQUESTS)}")
