"""Terminals to intermediate streams: ``partition_by`` and ``broadcast``.

Both return their record for the runtime to produce; the runtime picks the partition (a None key
to partition 0, else murmur2 of the serialized key, see ``operators.hashing``; a broadcast stream
has one partition).

>>> from samza_dsl.spec import PartitionBySpec
>>> op = PartitionByOperator(PartitionBySpec("p", "p", ("stream:in",), "",
...                                          key_fn=lambda m: m["country"]))
>>> op.process({"country": "NZ", "user": 7})
[KV(key='NZ', value={'country': 'NZ', 'user': 7})]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from samza_dsl.kv import KV
from samza_dsl.spec import BroadcastSpec, PartitionBySpec

from .base import Operator, PassThrough, resolve_fn

__all__ = ["PartitionByOperator", "BroadcastOperator"]


class PartitionByOperator(Operator):
    """``[KV(key_fn(m), value_fn(m))]``, or ``[KV(key_fn(m), m)]`` without a value_fn."""

    opcode = "partition_by"

    def __init__(self, spec: PartitionBySpec) -> None:
        super().__init__(spec)
        self.stream_id = spec.stream_id
        self.user_fns = (spec.key_fn, spec.value_fn)
        self._key_fn = resolve_fn(spec.key_fn)
        self._value_fn = resolve_fn(spec.value_fn) if spec.value_fn is not None else None

    @property
    def key_fn(self) -> Callable[[Any], Any]:
        """The key function, resolved (an object's ``__call__``)."""
        return self._key_fn

    def keyed_by(self) -> Callable[[Any], Any] | None:
        return self._key_fn if self._value_fn is None else None

    def process(self, message: Any) -> list[Any]:
        value_fn = self._value_fn
        return [KV(self._key_fn(message), message if value_fn is None else value_fn(message))]

    def one_to_one(self) -> Callable[[Any], Any]:
        key_fn, value_fn = self._key_fn, self._value_fn
        if value_fn is None:
            def keyed(message: Any) -> Any:
                return KV(key_fn(message), message)
            return keyed

        def keyed_value(message: Any) -> Any:
            return KV(key_fn(message), value_fn(message))
        return keyed_value


class BroadcastOperator(PassThrough):
    """``[m]``: every task reads the broadcast stream's single partition."""

    opcode = "broadcast"

    def __init__(self, spec: BroadcastSpec) -> None:
        super().__init__(spec)
        self.stream_id = spec.stream_id
