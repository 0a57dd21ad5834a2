"""Terminals to intermediate streams: ``partition_by`` and ``broadcast``.

Both return their record for the runtime to produce; the runtime picks the partition (a None key
to partition 0, as in Samza, else murmur2 of the serialized key, see ``operators.hashing``; a
broadcast stream has one partition). A None value (or a None message without a value_fn) fails
the message, as Samza cannot serialize one into an intermediate stream.

>>> from samza_dsl.spec import PartitionBySpec
>>> op = PartitionByOperator(PartitionBySpec("p", "p", ("stream:in",), "",
...                                          key_fn=lambda m: m["country"]))
>>> op.process({"country": "NZ", "user": 7})
[KV(key='NZ', value={'country': 'NZ', 'user': 7})]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from samza_dsl.errors import TaskError
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
        key = self._key_fn(message)
        value = message if self._value_fn is None else self._value_fn(message)
        if value is None:
            raise TaskError(null_value(self.op_id, self.stream_id, message), op_id=self.op_id)
        return [KV(key, value)]

    def one_to_one(self) -> Callable[[Any], Any]:
        key_fn, value_fn = self._key_fn, self._value_fn
        op_id, stream_id = self.op_id, self.stream_id
        if value_fn is None:
            def keyed(message: Any) -> Any:
                if message is None:
                    raise TaskError(null_value(op_id, stream_id, message), op_id=op_id)
                return KV(key_fn(message), message)
            return keyed

        def keyed_value(message: Any) -> Any:
            key = key_fn(message)
            value = value_fn(message)
            if value is None:
                raise TaskError(null_value(op_id, stream_id, message), op_id=op_id)
            return KV(key, value)
        return keyed_value


def null_value(op_id: str, stream_id: str, message: Any) -> str:
    """The error of a None value written to an intermediate stream (Samza cannot serialize
    one: "can not serialize the message")."""
    text = repr(message)
    text = text if len(text) <= 80 else text[:77] + "..."
    return (f"partition_by {op_id!r}: the value for {text} is None, and an intermediate stream "
            f"{stream_id!r} carries no None value (as in Samza); filter such messages out before "
            f"the partition_by, or give them a value (a marker such as {{'deleted': True}} "
            f"carries a deletion)")


class BroadcastOperator(PassThrough):
    """``[m]``: every task reads the broadcast stream's single partition."""

    opcode = "broadcast"

    def __init__(self, spec: BroadcastSpec) -> None:
        super().__init__(spec)
        self.stream_id = spec.stream_id
