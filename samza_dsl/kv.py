"""``KV``: the key-value pair a keyed stream delivers."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

K = TypeVar("K")
V = TypeVar("V")


class KV(msgspec.Struct, Generic[K, V], frozen=True, gc=False):
    """A keyed message.

    >>> kv = KV("user-1", {"clicks": 3})
    >>> kv.key, kv.value["clicks"]
    ('user-1', 3)
    >>> key, value = kv
    >>> key
    'user-1'
    """

    key: K
    value: V

    def __iter__(self) -> Any:
        yield self.key
        yield self.value

    @classmethod
    def of(cls, key: K, value: V) -> KV[K, V]:
        return cls(key, value)
