"""CreateAcls (API key 30) version 2, on aiokafka's protocol types: aiokafka's admin client has
no call for it. Its fields are those of Kafka's message definition (``CreateAclsRequest.json``);
version 2 is flexible (compact strings and arrays, a tagged-field section closing every
struct)."""

from __future__ import annotations

from typing import Any

from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    CompactArray,
    CompactString,
    Int8,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

__all__ = ["CreateAclsRequest", "RESOURCE_TYPES", "OPERATIONS"]

_STR = CompactString("utf-8")

#: Kafka's resource types (``org.apache.kafka.common.resource.ResourceType``)
RESOURCE_TYPES = {"topic": 2, "group": 3, "cluster": 4, "transactional_id": 5}
#: Kafka's ACL operations (``org.apache.kafka.common.acl.AclOperation``)
OPERATIONS = {"all": 2, "read": 3, "write": 4, "create": 5, "delete": 6, "alter": 7,
              "describe": 8, "cluster_action": 9, "describe_configs": 10, "alter_configs": 11,
              "idempotent_write": 12}
_LITERAL = 3
_ALLOW = 3


class CreateAclsResponse_v2(Response):  # type: ignore[misc, unused-ignore]  # noqa: N801
    API_KEY = 30
    API_VERSION = 2
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("results", CompactArray(
            ("error_code", Int16),
            ("error_message", _STR),
            ("tags", TaggedFields),
        )),
        ("tags", TaggedFields),
    )


class CreateAclsRequest_v2(RequestStruct):  # type: ignore[misc, unused-ignore]  # noqa: N801
    FLEXIBLE_VERSION = True
    API_KEY = 30
    API_VERSION = 2
    RESPONSE_TYPE = CreateAclsResponse_v2
    SCHEMA = Schema(
        ("creations", CompactArray(
            ("resource_type", Int8),
            ("resource_name", _STR),
            ("resource_pattern_type", Int8),
            ("principal", _STR),
            ("host", _STR),
            ("operation", Int8),
            ("permission_type", Int8),
            ("tags", TaggedFields),
        )),
        ("tags", TaggedFields),
    )


class CreateAclsRequest(Request[CreateAclsRequest_v2]):  # type: ignore[misc, unused-ignore]
    """ALLOW ACLs of user ``user`` from any host: each ``(resource type, resource name,
    operation)`` of ``grants`` (names of ``RESOURCE_TYPES`` and ``OPERATIONS``; a name ``*``
    is every resource of the type)."""

    API_KEY = 30

    def __init__(self, user: str, grants: list[tuple[str, str, str]]) -> None:
        self.creations: list[tuple[Any, ...]] = [
            (RESOURCE_TYPES[kind], name, _LITERAL, f"User:{user}", "*", OPERATIONS[op], _ALLOW,
             {}) for kind, name, op in grants]

    def build(self, request_struct_class: type[CreateAclsRequest_v2]) -> CreateAclsRequest_v2:
        return request_struct_class(self.creations, {})
