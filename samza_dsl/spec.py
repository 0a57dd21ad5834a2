"""The spec graph: immutable descriptions of operators, streams and tables.

Building a pipeline only adds spec nodes; nothing runs. The planner (``planner/``) reads an
``ApplicationSpec`` snapshot; the runtimes build operator instances (``operators/``) from it.

Node keys in the graph: an operator by its id, a stream as ``"stream:<id>"``, a table as
``"table:<id>"``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from .remote import CacheSpec, RetryPolicy
from .serdes import KVSerde, Serde
from .systems import InputDescriptor, OutputDescriptor
from .windows import Window

__all__ = ["OpSpec", "MapSpec", "FilterSpec", "FlatMapSpec", "AsyncFlatMapSpec", "MergeSpec",
           "PartitionBySpec", "BroadcastSpec", "WindowSpec", "JoinSpec", "SideTime", "JoinTableSpec",
           "SendToSpec", "SinkSpec", "TableSpec", "RemoteTableSpec", "IntermediateStreamSpec", "ApplicationSpec",
           "stream_node", "table_node", "node_stream_id", "late_target", "OPCODES", "TERMINAL_OPCODES"]

OPCODES = ("map", "filter", "flat_map", "async_flat_map", "merge", "partition_by", "broadcast",
           "window", "join", "join_table", "send_to", "sink")
TERMINAL_OPCODES = frozenset({"partition_by", "broadcast", "send_to", "sink"})


def stream_node(stream_id: str) -> str:
    return f"stream:{stream_id}"


def table_node(table_id: str) -> str:
    return f"table:{table_id}"


def node_stream_id(node: str) -> str | None:
    return node[len("stream:"):] if node.startswith("stream:") else None


def late_target(op: OpSpec) -> str | None:
    """The stream an operator writes its late messages to (a window's or an event-time join's
    ``late_to``); None for every other operator, or where late messages are only counted."""
    return getattr(op, "late_to", None) if op.opcode in ("window", "join") else None


@dataclass(frozen=True)
class TableSpec:
    """A local table: one LMDB store per task, optionally backed by a changelog, or filled from
    its side inputs (their stream ids). With ``ttl_ms`` an entry expires that long after its
    write time: the event time ``ttl_event_time(value)`` gives (seconds), or the processing
    time of its write where that is None (``runtime.state.ttl``)."""

    table_id: str
    serde: KVSerde
    changelog: bool = True
    side_inputs: tuple[str, ...] = ()
    ttl_ms: int | None = None
    ttl_event_time: Callable[[Any], float] | None = field(default=None, repr=False)


@dataclass(frozen=True)
class RemoteTableSpec:
    """A table in a remote service, called asynchronously (``app.remote_table``): ``read(key)``
    and ``write(key, value)`` (value None: delete), optionally ``read_all(keys)`` and
    ``write_all(entries)`` for batches; ``rate_limit`` calls (keys) per second for the job,
    shared by each container's tasks; a retry policy and a cache."""

    table_id: str
    read: Callable[[Any], Any] | None = field(default=None, repr=False)
    write: Callable[[Any, Any], Any] | None = field(default=None, repr=False)
    read_all: Callable[[list[Any]], Any] | None = field(default=None, repr=False)
    write_all: Callable[[list[Any]], Any] | None = field(default=None, repr=False)
    rate_limit: float | None = None
    retry: RetryPolicy | None = None
    cache: CacheSpec | None = None
    batch_size: int = 100

    def describe(self) -> dict[str, Any]:
        """What plans show of the table."""
        return {"remote": True, "read": self.read is not None or self.read_all is not None,
                "write": self.write is not None or self.write_all is not None,
                "batched": self.read_all is not None or self.write_all is not None,
                "rate_limit": self.rate_limit,
                "retry": self.retry.describe() if self.retry is not None else None,
                "cache": self.cache.describe() if self.cache is not None else None}


@dataclass(frozen=True)
class OpSpec:
    """Fields every operator spec has. ``inputs`` are upstream node keys, in port order."""

    op_id: str
    name: str | None
    inputs: tuple[str, ...]
    call_site: str

    opcode = "op"

    def details(self) -> dict[str, Any]:
        """Extra facts shown in plans (TTL, window size, target stream...)."""
        return {}


@dataclass(frozen=True)
class MapSpec(OpSpec):
    fn: Callable[[Any], Any] = field(default=None, repr=False)  # type: ignore[assignment]
    opcode = "map"


@dataclass(frozen=True)
class FilterSpec(OpSpec):
    fn: Callable[[Any], bool] = field(default=None, repr=False)  # type: ignore[assignment]
    opcode = "filter"


@dataclass(frozen=True)
class FlatMapSpec(OpSpec):
    fn: Callable[[Any], Any] = field(default=None, repr=False)  # type: ignore[assignment]
    opcode = "flat_map"


@dataclass(frozen=True)
class AsyncFlatMapSpec(OpSpec):
    fn: Callable[[Any], Any] = field(default=None, repr=False)  # type: ignore[assignment]
    ordering: str = "none"
    key_fn: Callable[[Any], Any] | None = field(default=None, repr=False)
    #: ``async_map``: ``fn`` gives one output (None for none), not an iterable of them
    one: bool = False
    opcode = "async_flat_map"

    def details(self) -> dict[str, Any]:
        return {"ordering": self.ordering, "one_to_one": True} if self.one \
            else {"ordering": self.ordering}


@dataclass(frozen=True)
class MergeSpec(OpSpec):
    opcode = "merge"


@dataclass(frozen=True)
class PartitionBySpec(OpSpec):
    key_fn: Callable[[Any], Any] = field(default=None, repr=False)  # type: ignore[assignment]
    value_fn: Callable[[Any], Any] | None = field(default=None, repr=False)
    serde: Serde[Any] | None = None
    opcode = "partition_by"

    @property
    def stream_id(self) -> str:
        return self.op_id

    def details(self) -> dict[str, Any]:
        return {"stream": self.stream_id}


@dataclass(frozen=True)
class BroadcastSpec(OpSpec):
    serde: Serde[Any] | None = None
    opcode = "broadcast"

    @property
    def stream_id(self) -> str:
        return self.op_id

    def details(self) -> dict[str, Any]:
        return {"stream": self.stream_id}


@dataclass(frozen=True)
class WindowSpec(OpSpec):
    """``late_to``: the stream (output or intermediate) late messages are written to, as
    ``LateMessage``; None drops them (always counted). ``join_lag_ms``: how far behind its
    inputs' event times the messages of an event-time window may come from event-time joins
    before it (``samza_dsl.join_time.join_lag``): its watermark stays that much further back
    than its own ``max_out_of_orderness`` says."""

    window: Window[Any, Any] = field(default=cast("Window[Any, Any]", None), repr=False)
    late_to: str | None = None
    join_lag_ms: int = 0
    opcode = "window"

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {"window": self.window.describe()}
        if self.late_to is not None:
            out["late_to"] = self.late_to
        if self.join_lag_ms:
            out["join_lag_ms"] = self.join_lag_ms
        return out


@dataclass(frozen=True)
class SideTime:
    """How an event-time join reads the event time of one side's messages: ``event_time``, the
    one declared on the input ``input_id`` the side reads from (seconds), applied to the message
    as it reaches the join, or to its ``KV`` value ``unwrap`` times over (a ``partition_by``
    between wraps the message in a ``KV``); ``bound_ms``: the largest ``max_out_of_orderness``
    of the inputs the side reads from; ``lag_ms``: how far behind those inputs' event times the
    side's messages may be, from event-time joins before it (``samza_dsl.join_time.join_lag``)."""

    input_id: str
    event_time: Callable[[Any], float] = field(repr=False)
    unwrap: int = 0
    bound_ms: int = 0
    lag_ms: int = 0


@dataclass(frozen=True)
class JoinSpec(OpSpec):
    """inputs = (left, right). A processing-time join has ``ttl_ms``; an event-time one
    ``within_ms`` (> 0), ``how`` ("inner", "left", "outer"), ``late_to`` as a window has it, and
    each side's event time (``sides``: left, right)."""

    key_fn: Callable[[Any], Any] = field(default=None, repr=False)  # type: ignore[assignment]
    other_key_fn: Callable[[Any], Any] = field(default=None, repr=False)  # type: ignore[assignment]
    combine: Callable[[Any, Any], Any] = field(default=None, repr=False)  # type: ignore[assignment]
    ttl_ms: int = 0
    within_ms: int = 0
    how: str = "inner"
    late_to: str | None = None
    sides: tuple[SideTime, ...] = ()
    opcode = "join"

    @property
    def event_time(self) -> bool:
        """Whether the join runs on event time (``within``)."""
        return self.within_ms > 0

    def details(self) -> dict[str, Any]:
        if not self.event_time:
            return {"ttl_ms": self.ttl_ms}
        out: dict[str, Any] = {"within_ms": self.within_ms, "how": self.how}
        if self.late_to is not None:
            out["late_to"] = self.late_to
        return out


@dataclass(frozen=True)
class JoinTableSpec(OpSpec):
    table_id: str = ""
    combine: Callable[[Any, Any], Any] = field(default=None, repr=False)  # type: ignore[assignment]
    key_fn: Callable[[Any], Any] | None = field(default=None, repr=False)
    opcode = "join_table"

    def details(self) -> dict[str, Any]:
        return {"table": self.table_id}


@dataclass(frozen=True)
class SendToSpec(OpSpec):
    """Writes to an output stream (``stream_id``) or into a table (``table_id``). To a stream,
    the application may choose each message's partition: ``partition_fn(m)`` gives it, or
    ``partition_key_fn(m)`` gives the key it is hashed from (as Samza's partition key)."""

    stream_id: str | None = None
    table_id: str | None = None
    partition_fn: Callable[[Any], int] | None = field(default=None, repr=False)
    partition_key_fn: Callable[[Any], Any] | None = field(default=None, repr=False)
    opcode = "send_to"

    @property
    def target_node(self) -> str:
        return stream_node(self.stream_id) if self.stream_id else table_node(self.table_id or "")

    @property
    def placement(self) -> str | None:
        """How the application places messages: "partition", "partition_key", or None (the
        stream's rule: by the message's key)."""
        if self.partition_fn is not None:
            return "partition"
        return "partition_key" if self.partition_key_fn is not None else None

    def details(self) -> dict[str, Any]:
        if not self.stream_id:
            return {"table": self.table_id}
        placement = self.placement
        return {"stream": self.stream_id} if placement is None else \
            {"stream": self.stream_id, "placement": placement}


@dataclass(frozen=True)
class SinkSpec(OpSpec):
    fn: Callable[[Any], Any] = field(default=None, repr=False)  # type: ignore[assignment]
    opcode = "sink"


@dataclass(frozen=True)
class IntermediateStreamSpec:
    """An intermediate stream written by a partition_by or broadcast operator, or by a window's
    ``late_to=<name>`` (``late``: its ``LateMessage``s stay in the writing task's partition)."""

    stream_id: str
    producer: str  # the partition_by/broadcast op id (equal to stream_id), or the window's
    serde: Serde[Any] | None
    broadcast: bool = False
    late: bool = False

    @property
    def keyed(self) -> bool:
        return not (self.broadcast or self.late) or isinstance(self.serde, KVSerde)


@dataclass(frozen=True)
class ApplicationSpec:
    """An immutable snapshot of an application's spec graph."""

    name: str
    app_id: str
    config: Mapping[str, Any]
    inputs: Mapping[str, InputDescriptor]
    outputs: Mapping[str, OutputDescriptor]
    intermediates: Mapping[str, IntermediateStreamSpec]
    tables: Mapping[str, TableSpec]
    operators: tuple[OpSpec, ...]
    #: name -> type: the types ``app.declare_types`` declared for the default serde
    types: Mapping[str, type] = field(default_factory=dict)
    #: tables in remote services (``app.remote_table``), by table id
    remote_tables: Mapping[str, RemoteTableSpec] = field(default_factory=dict)

    @property
    def job_name(self) -> str:
        return f"{self.name}-{self.app_id}"

    def operator(self, op_id: str) -> OpSpec:
        for op in self.operators:
            if op.op_id == op_id:
                return op
        raise KeyError(op_id)
