"""AlterUserScramCredentials (API key 51) version 0, on aiokafka's protocol types: aiokafka's
admin client has no call for it. Its fields are those of Kafka's message definition
(``AlterUserScramCredentialsRequest.json``); version 0 is flexible (compact strings, bytes and
arrays, a tagged-field section closing every struct)."""

from __future__ import annotations

from typing import Any

from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    CompactArray,
    CompactBytes,
    CompactString,
    Int8,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

__all__ = ["AlterUserScramCredentialsRequest"]

_STR = CompactString("utf-8")


class AlterUserScramCredentialsResponse_v0(Response):  # type: ignore[misc, unused-ignore]  # noqa: N801
    API_KEY = 51
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("results", CompactArray(
            ("user", _STR),
            ("error_code", Int16),
            ("error_message", _STR),
            ("tags", TaggedFields),
        )),
        ("tags", TaggedFields),
    )


class AlterUserScramCredentialsRequest_v0(RequestStruct):  # type: ignore[misc, unused-ignore]  # noqa: N801
    FLEXIBLE_VERSION = True
    API_KEY = 51
    API_VERSION = 0
    RESPONSE_TYPE = AlterUserScramCredentialsResponse_v0
    SCHEMA = Schema(
        ("deletions", CompactArray(
            ("name", _STR),
            ("mechanism", Int8),
            ("tags", TaggedFields),
        )),
        ("upsertions", CompactArray(
            ("name", _STR),
            ("mechanism", Int8),
            ("iterations", Int32),
            ("salt", CompactBytes),
            ("salted_password", CompactBytes),
            ("tags", TaggedFields),
        )),
        ("tags", TaggedFields),
    )


class AlterUserScramCredentialsRequest(
        Request[AlterUserScramCredentialsRequest_v0]):  # type: ignore[misc, unused-ignore]
    """One upsertion: user ``name``'s credential for ``mechanism`` (1: SCRAM-SHA-256, 2:
    SCRAM-SHA-512), ``salted_password`` being Hi(password, salt, iterations) of RFC 5802."""

    API_KEY = 51

    def __init__(self, name: str, mechanism: int, iterations: int, salt: bytes,
                 salted_password: bytes) -> None:
        self.upsertion: tuple[Any, ...] = (name, mechanism, iterations, salt, salted_password, {})

    def build(self, request_struct_class: type[AlterUserScramCredentialsRequest_v0]
              ) -> AlterUserScramCredentialsRequest_v0:
        return request_struct_class([], [self.upsertion], {})
