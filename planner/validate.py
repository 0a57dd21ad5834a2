"""Validation of the spec graph (docs/semantics.md rule 3). Errors name the streams and operators."""

from __future__ import annotations

from samza_dsl.errors import PlanError
from samza_dsl.spec import (
    ApplicationSpec,
    BroadcastSpec,
    JoinSpec,
    JoinTableSpec,
    PartitionBySpec,
    SendToSpec,
    WindowSpec,
    late_target,
    node_stream_id,
)

__all__ = ["validate", "refuse_remote_tables", "refuse_processing_time_joins"]


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
        if isinstance(op, JoinTableSpec) and op.table_id not in spec.tables \
                and op.table_id not in spec.remote_tables:
            raise PlanError(f"operator {op.op_id!r} joins unknown table {op.table_id!r}")
        remote = spec.remote_tables.get(getattr(op, "table_id", None) or "")
        if remote is not None:
            if isinstance(op, JoinTableSpec) and remote.read is None and remote.read_all is None:
                raise PlanError(f"operator {op.op_id!r} joins remote table {op.table_id!r}, "
                                f"which has no read function: give app.remote_table(..., "
                                f"read=...) or read_all=...")
            if isinstance(op, SendToSpec) and remote.write is None and remote.write_all is None:
                raise PlanError(f"operator {op.op_id!r} sends to remote table {op.table_id!r}, "
                                f"which has no write function: give app.remote_table(..., "
                                f"write=...) or write_all=...")
        if isinstance(op, SendToSpec):
            if op.stream_id is not None and op.stream_id not in spec.outputs:
                raise PlanError(f"operator {op.op_id!r} sends to {op.stream_id!r}, which is not an "
                                f"output stream; register it with app.output(...)")
            if op.table_id is not None and op.table_id not in spec.tables \
                    and op.table_id not in spec.remote_tables:
                raise PlanError(f"operator {op.op_id!r} sends to unknown table {op.table_id!r}")
        if isinstance(op, WindowSpec) and op.late_to is not None:
            if op.window.event_time is None:
                raise PlanError(f"window {op.op_id!r} has late_to={op.late_to!r} but runs on "
                                f"processing time, where no message is late: give the window "
                                f"event_time=fn(message) -> seconds, or drop late_to")
            if op.late_to not in spec.outputs and op.late_to not in spec.intermediates:
                raise PlanError(f"window {op.op_id!r} sends late messages to {op.late_to!r}, "
                                f"which is not an output stream; register it with "
                                f"app.output(...)")
        if isinstance(op, JoinSpec) and op.late_to is not None \
                and op.late_to not in spec.outputs and op.late_to not in spec.intermediates:
            raise PlanError(f"join {op.op_id!r} sends late messages to {op.late_to!r}, which is "
                            f"not an output stream; register it with app.output(...)")
        if isinstance(op, PartitionBySpec | BroadcastSpec) and op.stream_id not in spec.intermediates:
            raise PlanError(f"operator {op.op_id!r} has no intermediate stream")

    for sid in spec.inputs:
        if sid not in consumed:
            raise PlanError(f"input stream {sid!r} has no consumer: add an operator on "
                            f"app.input(...) for it, or do not register it")
    for sid, inter in spec.intermediates.items():
        if sid not in consumed:
            what = ("late_stream() of the window or join" if inter.producer != sid
                    else "what partition_by/broadcast returns")
            raise PlanError(f"intermediate stream {sid!r} written by operator {inter.producer!r} "
                            f"has no consumer: chain an operator on {what}")
    produced = {op.stream_id for op in spec.operators
                if isinstance(op, SendToSpec) and op.stream_id is not None}
    produced |= {t for op in spec.operators if (t := late_target(op)) is not None}
    for sid in spec.outputs:
        if sid not in produced:
            raise PlanError(f"output stream {sid!r} has no producer: send_to it from a stream, "
                            f"or do not register it")
    if not spec.operators:
        raise PlanError(f"application {spec.job_name!r} has no operators")


def refuse_remote_tables(spec: ApplicationSpec, runner: str) -> None:
    """Raise PlanError if ``spec`` uses remote tables, which ``runner`` cannot call."""
    if spec.remote_tables:
        users = [op.op_id for op in spec.operators
                 if getattr(op, "table_id", None) in spec.remote_tables]
        raise PlanError(
            f"{runner} cannot run application {spec.job_name!r}: it uses remote table(s) "
            f"{', '.join(sorted(spec.remote_tables))} (operators: {', '.join(users) or 'none'}; "
            f"and ctx.table from user functions), whose calls need the streaming runtime's "
            f"async machinery (rate limit, retries, in-flight accounting). Run it with "
            f"LocalRunner, or reprocess with a local table filled from a dump of the service")


def refuse_processing_time_joins(spec: ApplicationSpec, runner: str) -> None:
    """Raise PlanError if ``spec`` has a stream-stream join on processing time (``ttl=``):
    ``runner`` reprocesses history, where no processing time passes, so it would give other
    pairs than the streaming run. The event-time form (``within=``) runs everywhere alike."""
    for op in spec.operators:
        if isinstance(op, JoinSpec) and not op.event_time:
            raise PlanError(
                f"{runner} cannot run join {op.name or op.op_id!r} ({op.op_id}, at "
                f"{op.call_site}) of application {spec.job_name!r}: its ttl= keeps entries for "
                f"a span of processing time, which a reprocessing does not have, so it would "
                f"pair other messages than the streaming run; declare the join in event time "
                f"with within=timedelta(...) in place of ttl= (its inputs declaring event_time)")
