"""Operator implementations: one module per operator kind, free of asyncio loops, Kafka and Spark.

``build_operator(spec)`` makes the operator for any spec in ``samza_dsl.spec.OPCODES``. What the
runtime gives them (``OperatorContext``):

- stores: a window needs ``<op id>``; a join ``<op id>-L`` and ``<op id>-R``; ``join_table`` and
  ``send_to`` into a table need the table's store named by its table id;
- ``on_timer(now_ms)`` at every window tick (windows and joins use it), ``on_watermark(ms)`` when
  the task's event-time watermark advances (event-time windows), ``on_end_of_stream()`` once.

>>> from samza_dsl.spec import MergeSpec
>>> build_operator(MergeSpec("app-1-merge-1", None, ("stream:a", "stream:b"), ""))
MergeOperator('app-1-merge-1')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from samza_dsl.spec import OPCODES, JoinSpec, OpSpec, WindowSpec

from .async_flat_map import AsyncFlatMapOperator
from .base import Operator
from .join import JoinOperator
from .join_event_time import EventTimeJoinOperator
from .join_table import JoinTableOperator
from .partition_by import BroadcastOperator, PartitionByOperator
from .simple import (
    FilterOperator,
    FlatMapOperator,
    MapOperator,
    MergeOperator,
    SinkOperator,
    send_to_operator,
)
from .window import TumblingWindowOperator, WindowOperator
from .window_hopping import HoppingWindowOperator
from .window_session import SessionWindowOperator

__all__ = ["build_operator", "OPERATORS", "Operator"]

def join_operator(spec: JoinSpec) -> Operator:
    """A processing-time join (``ttl``) or an event-time one (``within``)."""
    return EventTimeJoinOperator(spec) if spec.event_time else JoinOperator(spec)


def window_operator(spec: WindowSpec) -> WindowOperator:
    """The window operator for a window spec's kind."""
    if spec.window.is_session:
        return SessionWindowOperator(spec)
    if spec.window.is_hopping:
        return HoppingWindowOperator(spec)
    return TumblingWindowOperator(spec)


#: opcode -> what builds its operator from a spec (a class, or a function choosing one)
OPERATORS: dict[str, Callable[[Any], Operator]] = {
    "map": MapOperator,
    "filter": FilterOperator,
    "flat_map": FlatMapOperator,
    "async_flat_map": AsyncFlatMapOperator,
    "merge": MergeOperator,
    "partition_by": PartitionByOperator,
    "broadcast": BroadcastOperator,
    "window": window_operator,
    "join": join_operator,
    "join_table": JoinTableOperator,
    "send_to": send_to_operator,
    "sink": SinkOperator,
}

assert set(OPERATORS) == set(OPCODES), "every opcode needs an operator"


def build_operator(spec: OpSpec) -> Operator:
    """A fresh operator instance for ``spec`` (one per task)."""
    try:
        make = OPERATORS[spec.opcode]
    except KeyError:
        raise ValueError(f"no operator for opcode {spec.opcode!r} of {spec.op_id!r}; known: "
                         f"{', '.join(OPERATORS)}") from None
    return make(spec)
