"""Default key bytes for partitioning when a stream has no key serde."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["default_key_bytes"]

_json = msgspec.json.Encoder()


def default_key_bytes(key: Any) -> bytes:
    """str as UTF-8 and bytes as they are (as Kafka's String and ByteArray serializers write
    them, so Java producers pick the same partition); anything else as JSON."""
    if type(key) is str:
        return key.encode()
    if isinstance(key, bytes | bytearray):
        return bytes(key)
    return _json.encode(key)
