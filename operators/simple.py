"""Stateless and terminal operators: map, filter, flat_map, merge, sink and send_to.

User functions may be plain callables or objects with ``__call__`` or ``apply`` and optional
``init(ctx)``/``close()``, which the operator calls at its own ``init``/``close``.

>>> from samza_dsl.spec import MapSpec
>>> op = MapOperator(MapSpec("m", None, ("stream:in",), "", fn=lambda m: m * 2 if m else None))
>>> op.process(21), op.process(0)
([42], [])
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, cast

from samza_dsl.errors import TaskError
from samza_dsl.kv import KV
from samza_dsl.spec import FilterSpec, FlatMapSpec, MapSpec, MergeSpec, SendToSpec, SinkSpec

from .base import (
    Operator,
    OperatorContext,
    PassThrough,
    RemoteState,
    Result,
    UserContext,
    as_outputs,
    resolve_fn,
)

__all__ = ["MapOperator", "FilterOperator", "FlatMapOperator", "MergeOperator", "SinkOperator",
           "SendToStreamOperator", "SendToTableOperator", "send_to_operator"]


class MapOperator(Operator):
    """``fn(m)``; a None result drops the message."""

    opcode = "map"

    def __init__(self, spec: MapSpec) -> None:
        super().__init__(spec)
        self.user_fns = (spec.fn,)
        self._fn = resolve_fn(spec.fn)

    def process(self, message: Any) -> list[Any]:
        result = self._fn(message)
        return [] if result is None else [result]

    def one_to_one(self) -> Callable[[Any], Any]:
        return self._fn


class FilterOperator(Operator):
    """Keeps the messages for which ``fn(m)`` is true."""

    opcode = "filter"

    def __init__(self, spec: FilterSpec) -> None:
        super().__init__(spec)
        self.user_fns = (spec.fn,)
        self._fn = resolve_fn(spec.fn)

    def process(self, message: Any) -> list[Any]:
        return [message] if self._fn(message) else []

    def one_to_one(self) -> Callable[[Any], Any]:
        fn = self._fn

        def keep(message: Any) -> Any:
            return message if fn(message) else None
        return keep


class FlatMapOperator(Operator):
    """``fn(m)`` returns an iterable of outputs (None counts as none)."""

    opcode = "flat_map"

    def __init__(self, spec: FlatMapSpec) -> None:
        super().__init__(spec)
        self.user_fns = (spec.fn,)
        self._fn = resolve_fn(spec.fn)

    def process(self, message: Any) -> list[Any]:
        result = self._fn(message)
        if type(result) is list:
            return result
        return as_outputs(result, "flat_map", self.op_id)


class MergeOperator(PassThrough):
    """The union of its inputs: passes every message on."""

    opcode = "merge"

    def __init__(self, spec: MergeSpec) -> None:
        super().__init__(spec)


async def _settle(awaitable: Awaitable[Any]) -> list[Any]:
    await awaitable
    return []


class SinkOperator(Operator):
    """Terminal: calls ``fn(m)``; an awaitable result makes ``process`` an awaitable of []."""

    opcode = "sink"

    def __init__(self, spec: SinkSpec) -> None:
        super().__init__(spec)
        self.user_fns = (spec.fn,)
        self._fn = resolve_fn(spec.fn)

    def process(self, message: Any) -> Result:
        result = self._fn(message)
        if result is not None and inspect.isawaitable(result):
            return _settle(result)
        return []


class SendToStreamOperator(PassThrough):
    """Terminal to an output stream: returns ``[message]`` for the runtime to produce (a ``KV``
    goes out as key and value). ``partition_fn``/``partition_key_fn``: the application's
    choice of partition, which the runtime's partition rule applies (``runtime.engine.wiring``)."""

    opcode = "send_to"

    def __init__(self, spec: SendToSpec) -> None:
        super().__init__(spec)
        self.stream_id = spec.stream_id
        self.user_fns = (spec.partition_fn, spec.partition_key_fn)
        self.partition_fn = None if spec.partition_fn is None else resolve_fn(spec.partition_fn)
        self.partition_key_fn = (None if spec.partition_key_fn is None
                                 else resolve_fn(spec.partition_key_fn))


class SendToTableOperator(Operator):
    """Terminal into a table (``ctx.store(table_id)``): ``KV(k, v)`` puts, ``KV(k, None)`` deletes."""

    opcode = "send_to"

    def __init__(self, spec: SendToSpec) -> None:
        super().__init__(spec)
        self.table_id = spec.table_id or ""

    def init(self, ctx: OperatorContext, user_ctx: UserContext | None = None) -> None:
        super().init(ctx, user_ctx)
        store = ctx.store(self.table_id)
        self._put = store.put
        self._delete = store.delete
        #: a remote table (``runtime.state.remote``): its write, awaited as the message's
        self._write = cast(RemoteState, store).write if store.remote else None
        #: the table's check of a key its serde cannot serialize (``operators.state``)
        self._check = store.check_key

    def process(self, message: Any) -> Result:
        if not isinstance(message, KV):
            raise TypeError(f"send_to table {self.table_id!r} ({self.op_id}) takes KV(key, value) "
                            f"messages, got {type(message).__name__}; map messages to KV first")
        key = message.key
        if key is None:
            raise TaskError(null_key(self.table_id, self.op_id, message), op_id=self.op_id)
        if self._write is not None:
            return _settle(self._write(key, message.value))
        check = self._check
        if check is not None:
            check(key)
        if message.value is None:
            self._delete(key)
        else:
            self._put(key, message.value)
        return []


def null_key(table_id: str, op_id: str, message: Any) -> str:
    """The error of a None key written to a table: no store holds one (Samza's stores say
    "Null is not a valid key")."""
    text = repr(message)
    text = text if len(text) <= 80 else text[:77] + "..."
    return (f"send_to table {table_id!r} ({op_id}): the key of {text} is None, and a table "
            f"holds no None key (as in Samza); filter such messages out or give them a key "
            f"before the send_to (for a side input, in its processor)")


def send_to_operator(spec: SendToSpec) -> Operator:
    """The send_to operator for a stream or a table target."""
    if spec.stream_id is not None:
        return SendToStreamOperator(spec)
    return SendToTableOperator(spec)
