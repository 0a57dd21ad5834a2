"""``MessageStream``: the fluent front. Each method adds one spec node and returns a new stream;
nothing runs while a pipeline is being built.

>>> from samza_dsl import StreamApplication
>>> from samza_dsl.systems import MemorySystem
>>> app = StreamApplication("demo")
>>> mem = MemorySystem()
>>> words = app.input(mem.input("words"))
>>> upper = words.filter(lambda w: w).map(str.upper, name="upper")
>>> upper.op_id
'demo-1-map-upper'
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .errors import PlanError
from .kv import KV
from .serdes import KVSerde, Serde
from .spec import (
    AsyncFlatMapSpec,
    BroadcastSpec,
    FilterSpec,
    FlatMapSpec,
    JoinSpec,
    JoinTableSpec,
    MapSpec,
    MergeSpec,
    PartitionBySpec,
    SendToSpec,
    SinkSpec,
    TableSpec,
    WindowSpec,
    node_stream_id,
)
from .systems import OutputDescriptor
from .windows import Window, WindowPane, to_ms

if TYPE_CHECKING:
    from .application import StreamApplication

M = TypeVar("M")
OM = TypeVar("OM")
K = TypeVar("K")
V = TypeVar("V")
R = TypeVar("R")

__all__ = ["MessageStream", "OutputStream", "Table"]

NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
ORDERINGS = ("none", "key")


def _check_fn(what: str, fn: Any) -> None:
    if fn is None or not (callable(fn) or callable(getattr(fn, "apply", None))):
        raise TypeError(f"{what} takes a function (or an object with __call__ or apply), "
                        f"got {type(fn).__name__} {fn!r}")


class OutputStream(Generic[M]):
    """An output stream registered with ``app.output``; pass it to ``send_to``."""

    def __init__(self, app: StreamApplication, stream_id: str) -> None:
        self._app = app
        self.stream_id = stream_id

    @property
    def descriptor(self) -> Any:
        return self._app._outputs[self.stream_id]

    def __repr__(self) -> str:
        return f"OutputStream({self.stream_id!r})"


class Table(Generic[K, V]):
    """A local table registered with ``app.table``: ``send_to`` it, ``join_table`` it, or use it
    from user functions as ``ctx.table(name)``."""

    def __init__(self, app: StreamApplication, spec: TableSpec) -> None:
        self._app = app
        self.spec = spec

    @property
    def table_id(self) -> str:
        return self.spec.table_id

    def __repr__(self) -> str:
        return f"Table({self.table_id!r})"


class MessageStream(Generic[M]):
    """A stream of messages of type ``M`` inside an application."""

    def __init__(self, app: StreamApplication, node: str, *, keyed: bool = False,
                 op_id: str | None = None) -> None:
        self._app = app
        self._node = node
        self._keyed = keyed
        self.op_id = op_id
        self._late: MessageStream[Any] | None = None

    @property
    def node(self) -> str:
        """The graph node this stream comes from (an op id or ``stream:<id>``)."""
        return self._node

    @property
    def stream_id(self) -> str | None:
        """The stream id, for an input or intermediate stream; None for an operator's output."""
        return node_stream_id(self._node)

    def __repr__(self) -> str:
        return f"MessageStream({self._node!r})"

    # -- one-to-one and one-to-many ------------------------------------------------------------

    def map(self, fn: Callable[[M], OM | None], *, name: str | None = None) -> MessageStream[OM]:
        """1:1; a ``None`` result is dropped."""
        _check_fn("map", fn)
        return self._then(MapSpec, "map", name, fn=fn)

    def filter(self, fn: Callable[[M], bool], *, name: str | None = None) -> MessageStream[M]:
        """Keep the messages for which ``fn`` is true."""
        _check_fn("filter", fn)
        return self._then(FilterSpec, "filter", name, fn=fn, keyed=self._keyed)

    def flat_map(self, fn: Callable[[M], Iterable[OM]], *,
                 name: str | None = None) -> MessageStream[OM]:
        """``fn(m)`` returns zero or more messages."""
        _check_fn("flat_map", fn)
        return self._then(FlatMapSpec, "flat_map", name, fn=fn)

    def async_flat_map(self, fn: Callable[[M], Awaitable[Iterable[OM]] | AsyncIterable[OM]], *,
                       name: str | None = None, ordering: str = "none",
                       key: Callable[[M], Any] | None = None) -> MessageStream[OM]:
        """``async def fn(m) -> Iterable[OM]``. Up to ``task.max.concurrency`` calls are in flight
        per task. ``ordering="key"`` keeps completion order per key (``KV.key``, or ``key(m)``);
        ``"none"`` lets completions overtake each other."""
        _check_fn("async_flat_map", fn)
        if ordering not in ORDERINGS:
            raise ValueError(f"async_flat_map ordering must be one of {ORDERINGS}, got {ordering!r}")
        if key is not None:
            _check_fn("async_flat_map key", key)
            if ordering != "key":
                raise ValueError("async_flat_map(key=...) goes with ordering='key'")
        return self._then(AsyncFlatMapSpec, "async_flat_map", name, fn=fn, ordering=ordering,
                          key_fn=key)

    # -- combining -------------------------------------------------------------------------------

    def merge(self, *others: MessageStream[M], name: str | None = None) -> MessageStream[M]:
        """The union of this stream and ``others``."""
        return MessageStream.merge_all([self, *others], name=name)

    @staticmethod
    def merge_all(streams: Sequence[MessageStream[Any]], *,
                  name: str | None = None) -> MessageStream[Any]:
        """The union of ``streams``; an empty list raises."""
        streams = list(streams)
        if not streams:
            raise PlanError("merge_all([]) has nothing to merge: pass at least one MessageStream")
        for s in streams:
            if not isinstance(s, MessageStream):
                raise TypeError(f"merge takes MessageStreams, got {type(s).__name__}")
        app = streams[0]._app
        for s in streams[1:]:
            if s._app is not app:
                raise PlanError(f"cannot merge {s!r} of application {s._app.name!r} into "
                                f"application {app.name!r}: streams belong to one application")
        nodes = tuple(dict.fromkeys(s._node for s in streams))  # merging a stream twice is a no-op
        keyed = all(s._keyed for s in streams)
        return app._add(MergeSpec, "merge", name, inputs=nodes, keyed=keyed)

    def partition_by(self, key_fn: Callable[[M], K], value_fn: Callable[[M], V] | None = None, *,
                     serde: KVSerde | None = None, name: str) -> MessageStream[KV[K, V]]:
        """Repartition by ``key_fn``: writes ``KV(key_fn(m), value_fn(m))`` to an intermediate
        stream and returns that stream. A None key goes to partition 0; any other key to
        murmur2(serialized key) % partitions."""
        _check_fn("partition_by key_fn", key_fn)
        if value_fn is not None:
            _check_fn("partition_by value_fn", value_fn)
        if serde is not None and not isinstance(serde, KVSerde):
            raise TypeError(f"partition_by {name!r}: serde must be a KVSerde, got "
                            f"{type(serde).__name__}")
        stream = self._then(PartitionBySpec, "partition_by", name, required=True, key_fn=key_fn,
                            value_fn=value_fn, serde=serde)
        return self._app._intermediate(stream.op_id or "", serde, broadcast=False)

    def broadcast(self, *, serde: Serde[Any] | None = None, name: str) -> MessageStream[M]:
        """Write to an intermediate stream of one partition that every task reads."""
        if serde is not None and not isinstance(serde, Serde):
            raise TypeError(f"broadcast {name!r}: serde must be a Serde, got {type(serde).__name__}")
        stream = self._then(BroadcastSpec, "broadcast", name, required=True, serde=serde)
        return self._app._intermediate(stream.op_id or "", serde, broadcast=True,
                                       keyed=self._keyed)

    def window(self, window: Window[M, Any], *, name: str,
               late_to: OutputStream[Any] | OutputDescriptor | str | None = None,
               ) -> MessageStream[WindowPane]:
        """Group into panes; see ``Windows`` and ``Triggers``.

        A message that comes after its pane closed (event time, past ``allowed_lateness``) is
        late: it is always counted (``TestResult.late``, the run summary) and the first one is
        logged. ``late_to`` also writes each as a ``LateMessage`` (the message, the pane it
        missed, the watermark, where it came from), as Flink's side output does: to an
        ``OutputStream`` from ``app.output(...)`` (or an output descriptor, which this
        registers), or, given a name, to an intermediate stream of the job that
        ``late_stream()`` on the returned stream reads."""
        if not isinstance(window, Window):
            raise TypeError(f"window {name!r} takes a Window from Windows.*, got "
                            f"{type(window).__name__}")
        app = self._app
        late_sid: str | None = None
        target: str | None = None
        if isinstance(late_to, OutputDescriptor):
            late_to = app.output(late_to)
        if isinstance(late_to, OutputStream):
            if late_to._app is not app:
                raise PlanError(f"window {name!r}: late_to output {late_to.stream_id!r} belongs "
                                f"to another application")
            target = late_to.stream_id
        elif isinstance(late_to, str):
            if not NAME_RE.match(late_to):
                raise PlanError(f"window {name!r}: late_to name {late_to!r} is malformed: it "
                                f"must match [A-Za-z0-9_-]+")
            target = late_sid = f"{app.name}-{app.app_id}-late-{late_to}"
            if late_sid in app._inputs or late_sid in app._outputs \
                    or late_sid in app._intermediates:
                raise PlanError(f"window {name!r}: late_to stream {late_sid!r} already exists; "
                                f"give late_to another name")
        elif late_to is not None:
            raise TypeError(f"window {name!r}: late_to takes an OutputStream from app.output() "
                            f"or the name of an intermediate stream, got {type(late_to).__name__}")
        panes = self._then(WindowSpec, "window", name, required=True, window=window,
                           late_to=target)
        if late_sid is not None:
            panes._late = app._late_intermediate(late_sid, panes.op_id or "")
        return panes

    def late_stream(self) -> MessageStream[Any]:
        """The late messages (``LateMessage``) of the window that returned this stream, from its
        ``late_to=<name>`` intermediate stream."""
        late = getattr(self, "_late", None)
        if late is None:
            raise PlanError(f"{self._node!r} has no late stream: late_stream() reads the "
                            f"intermediate stream of a window(..., late_to='<name>')")
        return late

    def join(self, other: MessageStream[OM], *, key: Callable[[M], Any],
             other_key: Callable[[OM], Any], combine: Callable[[M, OM], R],
             ttl: timedelta, name: str) -> MessageStream[R]:
        """Stream-stream join. Each side keeps its latest message per key; a message emits
        ``combine(left, right)`` when the other side's entry is younger than ``ttl``."""
        if not isinstance(other, MessageStream):
            raise TypeError(f"join {name!r}: other must be a MessageStream, got {type(other).__name__}")
        if other._app is not self._app:
            raise PlanError(f"join {name!r}: cannot join streams of two applications")
        if other._node == self._node:
            raise PlanError(f"join {name!r}: cannot join stream {self._node!r} with itself; join "
                            f"two different streams (map one side first if you mean a self-join)")
        for what, fn in (("key", key), ("other_key", other_key), ("combine", combine)):
            _check_fn(f"join {what}", fn)
        ttl_ms = to_ms(ttl, f"join {name!r} ttl")
        return self._app._add(JoinSpec, "join", name, inputs=(self._node, other._node),
                              required=True, key_fn=key, other_key_fn=other_key, combine=combine,
                              ttl_ms=ttl_ms)

    def join_table(self, table: Table[K, V], *, combine: Callable[[M, KV[K, V] | None], R | None],
                   key: Callable[[M], K] | None = None,
                   name: str | None = None) -> MessageStream[R]:
        """Stream-table join on ``key(m)`` (default: the message's ``KV.key``). ``combine(m, None)``
        is called on a miss; a None result is dropped."""
        if not isinstance(table, Table):
            raise TypeError(f"join_table takes a Table from app.table(), got {type(table).__name__}")
        if table._app is not self._app:
            raise PlanError(f"join_table: table {table.table_id!r} belongs to another application")
        _check_fn("join_table combine", combine)
        if key is not None:
            _check_fn("join_table key", key)
        return self._then(JoinTableSpec, "join_table", name, table_id=table.table_id,
                          combine=combine, key_fn=key)

    # -- terminals -------------------------------------------------------------------------------

    def send_to(self, target: OutputStream[Any] | Table[Any, Any]) -> None:
        """Send to an output stream (a KV goes as key/value) or into a table (``KV(k, None)``
        deletes ``k``)."""
        if isinstance(target, OutputStream):
            if target._app is not self._app:
                raise PlanError(f"send_to: output {target.stream_id!r} belongs to another application")
            self._then(SendToSpec, "send_to", None, stream_id=target.stream_id)
        elif isinstance(target, Table):
            if target._app is not self._app:
                raise PlanError(f"send_to: table {target.table_id!r} belongs to another application")
            self._then(SendToSpec, "send_to", None, table_id=target.table_id)
        else:
            raise TypeError(f"send_to takes an OutputStream from app.output() or a Table from "
                            f"app.table(), got {type(target).__name__}")

    def sink(self, fn: Callable[[M], Any | Awaitable[Any]], *, name: str | None = None) -> None:
        """Terminal: ``fn(m)``, sync or async."""
        _check_fn("sink", fn)
        self._then(SinkSpec, "sink", name, fn=fn)

    def _then(self, cls: type, opcode: str, name: str | None, *, required: bool = False,
              keyed: bool = False, **fields: Any) -> MessageStream[Any]:
        return self._app._add(cls, opcode, name, inputs=(self._node,), required=required,
                              keyed=keyed, **fields)
