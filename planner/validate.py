"""Validation of the spec graph (SEMANTICS.md rule 3). Errors name the streams and operators."""

from __future__ import annotations

from samza_dsl.errors import PlanError
from samza_dsl.spec import (
    ApplicationSpec,
    BroadcastSpec,
    JoinTableSpec,
    PartitionBySpec,
    SendToSpec,
    node_stream_id,
)

__all__ = ["validate"]


def validate(spec: ApplicationSpec) -> None:
    """Raise PlanError for an invalid graph."""
    op_ids = {op.op_id for op in spec.operators}
    consumed: set[str] = set()
    for op in spec.operators:
        for node in op.inputs:
            sid = node_stream_id(node)
            if sid is not None:
                if sid not in spec.inputs and sid not in spec.intermediates:
                    raise PlanError(f"operator {op.op_id!r} reads stream {sid!r}, which is not an "
                                    f"input of application {spec.job_name!r}")
                consumed.add(sid)
            elif node not in op_ids:
                raise PlanError(f"operator {op.op_id!r} reads from unknown operator {node!r}")
        if isinstance(op, JoinTableSpec) and op.table_id not in spec.tables:
            raise PlanError(f"operator {op.op_id!r} joins unknown table {op.table_id!r}")
        if isinstance(op, SendToSpec):
            if op.stream_id is not None and op.stream_id not in spec.outputs:
                raise PlanError(f"operator {op.op_id!r} sends to {op.stream_id!r}, which is not an "
                                f"output stream; register it with app.output(...)")
            if op.table_id is not None and op.table_id not in spec.tables:
                raise PlanError(f"operator {op.op_id!r} sends to unknown table {op.table_id!r}")
        if isinstance(op, PartitionBySpec | BroadcastSpec) and op.stream_id not in spec.intermediates:
            raise PlanError(f"operator {op.op_id!r} has no intermediate stream")

    for sid in spec.inputs:
        if sid not in consumed:
            raise PlanError(f"input stream {sid!r} has no consumer: add an operator on "
                            f"app.input(...) for it, or do not register it")
    for sid in spec.intermediates:
        if sid not in consumed:
            raise PlanError(f"intermediate stream {sid!r} written by operator {sid!r} has no "
                            f"consumer: chain an operator on what partition_by/broadcast returns")
    produced = {op.stream_id for op in spec.operators
                if isinstance(op, SendToSpec) and op.stream_id is not None}
    for sid in spec.outputs:
        if sid not in produced:
            raise PlanError(f"output stream {sid!r} has no producer: send_to it from a stream, "
                            f"or do not register it")
    if not spec.operators:
        raise PlanError(f"application {spec.job_name!r} has no operators")
