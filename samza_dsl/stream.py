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
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from .aggregate import field_of
from .errors import PlanError
from .join_time import join_lag, side_time
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
    RemoteTableSpec,
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

__all__ = ["MessageStream", "OutputStream", "Table", "RemoteTable"]

NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
ORDERINGS = ("none", "key")
#: what ``join(..., within=..., how=)`` takes
JOIN_HOWS = ("inner", "left", "outer")


def _check_fn(what: str, fn: Any) -> None:
    if fn is None or not (callable(fn) or callable(getattr(fn, "apply", None))):
        raise TypeError(f"{what} takes a function (or an object with __call__ or apply), "
                        f"got {type(fn).__name__} {fn!r}")


class OutputStream(Generic[M]):
    """An output stream registered with ``app.output``; pass it to ``send_to``.

    Attributes:
        stream_id: The id of the output stream, as its descriptor gives it.

    Example:
        >>> from samza_dsl import StreamApplication
        >>> from samza_dsl.systems import MemorySystem
        >>> app, mem = StreamApplication("demo"), MemorySystem()
        >>> out = app.output(mem.output("counts"))
        >>> out
        OutputStream('counts')
        >>> out.descriptor.system.name
        'memory'
    """

    def __init__(self, app: StreamApplication, stream_id: str) -> None:
        self._app = app
        self.stream_id = stream_id

    @property
    def descriptor(self) -> Any:
        """The ``OutputDescriptor`` this stream was registered with."""
        return self._app._outputs[self.stream_id]

    def __repr__(self) -> str:
        return f"OutputStream({self.stream_id!r})"


class _TableRef(Generic[K, V]):
    """What ``Table`` and ``RemoteTable`` share: the application and the spec they name."""

    spec: Any

    def __init__(self, app: StreamApplication, spec: Any) -> None:
        self._app = app
        self.spec = spec

    @property
    def table_id(self) -> str:
        """The table's name, as given to ``app.table`` (``app.remote_table``) and to
        ``ctx.table(name)``."""
        return str(self.spec.table_id)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.table_id!r})"


class Table(_TableRef[K, V]):
    """A local table registered with ``app.table``: ``send_to`` it, ``join_table`` it, or use it
    from user functions as ``ctx.table(name)``.

    Attributes:
        spec: The table's ``TableSpec`` (id, ``KVSerde``, whether it has a changelog).

    Example:
        >>> from samza_dsl import StreamApplication
        >>> from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
        >>> app = StreamApplication("demo")
        >>> profiles = app.table("profiles", serde=KVSerde(StringSerde(), JsonSerde()))
        >>> profiles.table_id, profiles.spec.changelog
        ('profiles', True)
    """

    spec: TableSpec


class RemoteTable(_TableRef[K, V]):
    """A table in a remote service, registered with ``app.remote_table``: ``join_table`` it,
    ``send_to`` it, or call it from user functions as ``ctx.table(name)`` (each method there is
    async).

    Attributes:
        spec: The table's ``RemoteTableSpec`` (its functions, rate limit, retry policy, cache).

    Example:
        >>> from samza_dsl import StreamApplication
        >>> async def read(key):
        ...     return {"name": key.title()}
        >>> app = StreamApplication("demo")
        >>> app.remote_table("profiles", read=read, rate_limit=500)
        RemoteTable('profiles')
    """

    spec: RemoteTableSpec


class MessageStream(Generic[M]):
    """A stream of messages of type ``M`` inside an application.

    Streams come from ``app.input(...)`` and from the operator methods below; each method adds
    one operator and returns a new stream (or nothing, for a terminal). An operator's ``name``,
    where one is taken, must match ``[A-Za-z0-9_-]+`` and makes its id
    ``"{app.name}-{app_id}-{opcode}-{name}"`` (without a name, a counter stands in for it); ids
    are unique within an application.

    User functions may be plain callables or objects with ``__call__`` or ``apply``, and
    optionally ``init(ctx: Context)`` and ``close()``.

    Attributes:
        op_id: The id of the operator this stream comes out of; None for an input or
            intermediate stream.

    Example:
        >>> from samza_dsl import StreamApplication
        >>> from samza_dsl.systems import MemorySystem
        >>> app, mem = StreamApplication("streams"), MemorySystem()
        >>> words = app.input(mem.input("words"))
        >>> words.stream_id, words.node, words.op_id
        ('words', 'stream:words', None)
        >>> upper = words.map(str.upper, name="upper")
        >>> type(upper).__name__, upper.op_id
        ('MessageStream', 'streams-1-map-upper')
    """

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
        """Transform each message 1:1; a ``None`` result is dropped.

        Args:
            fn: ``fn(m)`` gives the output message, or None to drop ``m``.
            name: The operator's name in its id (``...-map-<name>``); optional.

        Returns:
            The stream of ``fn``'s results.

        Raises:
            TypeError: ``fn`` is not callable.
            PlanError: ``name`` is malformed, or the operator id is already used.

        Example:
            >>> from samza_dsl import StreamApplication
            >>> from samza_dsl.systems import MemorySystem
            >>> from samza_dsl.testing import TestRunner
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> words = mem.input("words")
            >>> app.input(words).map(str.upper).send_to(app.output(mem.output("out")))
            >>> TestRunner(app).add_input(words, ["a", "b"]).run().messages("out")
            ['A', 'B']
        """
        _check_fn("map", fn)
        return self._then(MapSpec, "map", name, fn=fn)

    def filter(self, fn: Callable[[M], bool], *, name: str | None = None) -> MessageStream[M]:
        """Keep the messages for which ``fn`` is true.

        Args:
            fn: ``fn(m)``, true to keep ``m``.
            name: The operator's name in its id (``...-filter-<name>``); optional.

        Returns:
            The stream of the kept messages, keyed if this stream is.

        Raises:
            TypeError: ``fn`` is not callable.
            PlanError: ``name`` is malformed, or the operator id is already used.

        Example:
            >>> from samza_dsl import StreamApplication
            >>> from samza_dsl.systems import MemorySystem
            >>> from samza_dsl.testing import TestRunner
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> nums = mem.input("nums")
            >>> app.input(nums).filter(lambda n: n % 2).send_to(app.output(mem.output("odd")))
            >>> TestRunner(app).add_input(nums, [1, 2, 3]).run().messages("odd")
            [1, 3]
        """
        _check_fn("filter", fn)
        return self._then(FilterSpec, "filter", name, fn=fn, keyed=self._keyed)

    def flat_map(self, fn: Callable[[M], Iterable[OM]], *,
                 name: str | None = None) -> MessageStream[OM]:
        """``fn(m)`` returns zero or more messages.

        A str, bytes, mapping or single ``KV`` result is one message, not a collection of
        them: returning one fails the message with a ``TaskError`` when it runs (return
        ``[kv]`` for one message).

        Args:
            fn: ``fn(m) -> Iterable[OM]``, the messages to emit for ``m`` (None: none).
            name: The operator's name in its id (``...-flat_map-<name>``); optional.

        Returns:
            The stream of every message ``fn`` returned, in order.

        Raises:
            TypeError: ``fn`` is not callable.
            PlanError: ``name`` is malformed, or the operator id is already used.

        Example:
            >>> from samza_dsl import StreamApplication
            >>> from samza_dsl.systems import MemorySystem
            >>> from samza_dsl.testing import TestRunner
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> lines = mem.input("lines")
            >>> app.input(lines).flat_map(str.split).send_to(app.output(mem.output("words")))
            >>> TestRunner(app).add_input(lines, ["to be", "or"]).run().messages("words")
            ['to', 'be', 'or']
        """
        _check_fn("flat_map", fn)
        return self._then(FlatMapSpec, "flat_map", name, fn=fn)

    def async_flat_map(self, fn: Callable[[M], Awaitable[Iterable[OM]] | AsyncIterable[OM]], *,
                       name: str | None = None, ordering: str = "none",
                       key: Callable[[M], Any] | None = None) -> MessageStream[OM]:
        """``async def fn(m) -> Iterable[OM]``. Up to ``task.max.concurrency`` calls are in flight
        per task. ``ordering="key"`` keeps completion order per key (``KV.key``, or ``key(m)``);
        ``"none"`` lets completions overtake each other.

        As for ``flat_map``, a str, bytes, mapping or single ``KV`` result fails the message
        with a ``TaskError`` when it runs.

        Args:
            fn: An ``async def`` returning an iterable of messages (or None for none), an async
                generator, or a plain function returning an awaitable or an iterable.
            name: The operator's name in its id (``...-async_flat_map-<name>``); optional.
            ordering: ``"none"`` (default) or ``"key"``.
            key: With ``ordering="key"``, ``key(m)`` gives the ordering key instead of the
                message's ``KV.key``.

        Returns:
            The stream of every message ``fn`` gave.

        Raises:
            TypeError: ``fn`` or ``key`` is not callable.
            ValueError: ``ordering`` is neither ``"none"`` nor ``"key"``, or ``key`` is given
                without ``ordering="key"``.
            PlanError: ``name`` is malformed, or the operator id is already used.

        Example:
            >>> import asyncio
            >>> from samza_dsl import StreamApplication
            >>> from samza_dsl.systems import MemorySystem
            >>> from samza_dsl.testing import TestRunner
            >>> async def both_cases(word):
            ...     await asyncio.sleep(0)  # e.g. a call to a remote service
            ...     return [word, word.upper()]
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> words = mem.input("words")
            >>> app.input(words).async_flat_map(both_cases, ordering="key", key=len).send_to(
            ...     app.output(mem.output("out")))
            >>> TestRunner(app).add_input(words, ["a", "b"]).run().messages("out")
            ['a', 'A', 'b', 'B']
        """
        return self._async("async_flat_map", fn, name, ordering, key)

    def async_map(self, fn: Callable[[M], Awaitable[OM | None]], *, name: str | None = None,
                  ordering: str = "none", key: Callable[[M], Any] | None = None
                  ) -> MessageStream[OM]:
        """``async def fn(m) -> OM``: one output a message, as ``map`` gives, from an async call.
        It is ``async_flat_map`` with one output: the same concurrency (up to
        ``task.max.concurrency`` calls in flight per task), the same ``ordering`` and the same
        checkpoints (a checkpoint never covers a message whose call has not completed). Also
        reachable as ``map_async``.

        Args:
            fn: An ``async def`` returning the output (None for none), or a plain function
                returning an awaitable of it or the output itself.
            name: The operator's name in its id (``...-async_map-<name>``); optional.
            ordering: ``"none"`` (default) or ``"key"``, as for ``async_flat_map``.
            key: With ``ordering="key"``, ``key(m)`` gives the ordering key instead of the
                message's ``KV.key``.

        Returns:
            The stream of what ``fn`` gave.

        Raises:
            TypeError: ``fn`` or ``key`` is not callable.
            ValueError: ``ordering`` is neither ``"none"`` nor ``"key"``, or ``key`` is given
                without ``ordering="key"``.
            PlanError: ``name`` is malformed, or the operator id is already used.

        Example:
            >>> import asyncio
            >>> from samza_dsl import StreamApplication
            >>> from samza_dsl.systems import MemorySystem
            >>> from samza_dsl.testing import TestRunner
            >>> async def price(word):
            ...     await asyncio.sleep(0)  # e.g. a call to a remote service
            ...     return {"word": word, "price": len(word)}
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> words = mem.input("words")
            >>> app.input(words).async_map(price).send_to(app.output(mem.output("out")))
            >>> TestRunner(app).add_input(words, ["ab", "c"]).run().messages("out")
            [{'word': 'ab', 'price': 2}, {'word': 'c', 'price': 1}]
        """
        return self._async("async_map", fn, name, ordering, key)

    map_async = async_map

    def _async(self, kind: str, fn: Callable[[M], Any], name: str | None, ordering: str,
               key: Callable[[M], Any] | None) -> MessageStream[Any]:
        _check_fn(kind, fn)
        if ordering not in ORDERINGS:
            raise ValueError(f"{kind} ordering must be one of {ORDERINGS}, got {ordering!r}")
        if key is not None:
            _check_fn(f"{kind} key", key)
            if ordering != "key":
                raise ValueError(f"{kind}(key=...) goes with ordering='key'")
        return self._then(AsyncFlatMapSpec, kind, name, fn=fn, ordering=ordering, key_fn=key,
                          one=kind == "async_map")

    # -- combining -------------------------------------------------------------------------------

    def merge(self, *others: MessageStream[M], name: str | None = None) -> MessageStream[M]:
        """The union of this stream and ``others``.

        Args:
            *others: Streams of the same application; merging a stream twice is a no-op.
            name: The operator's name in its id (``...-merge-<name>``); optional.

        Returns:
            One stream of the messages of all of them; keyed if every one of them is.

        Raises:
            TypeError: One of ``others`` is not a ``MessageStream``.
            PlanError: A stream belongs to another application, ``name`` is malformed, or the
                operator id is already used.

        Example:
            >>> from samza_dsl import StreamApplication
            >>> from samza_dsl.systems import MemorySystem
            >>> from samza_dsl.testing import TestRunner
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> a, b = mem.input("a"), mem.input("b")
            >>> app.input(a).merge(app.input(b)).send_to(app.output(mem.output("out")))
            >>> result = TestRunner(app).add_input(a, [1, 2]).add_input(b, [3]).run()
            >>> sorted(result.messages("out"))
            [1, 2, 3]
        """
        return MessageStream.merge_all([self, *others], name=name)

    @staticmethod
    def merge_all(streams: Sequence[MessageStream[Any]], *,
                  name: str | None = None) -> MessageStream[Any]:
        """The union of ``streams``; an empty list raises.

        Args:
            streams: Streams of one application.
            name: The operator's name in its id (``...-merge-<name>``); optional.

        Returns:
            One stream of the messages of all of them; keyed if every one of them is.

        Raises:
            PlanError: ``streams`` is empty, the streams belong to different applications,
                ``name`` is malformed, or the operator id is already used.
            TypeError: An item is not a ``MessageStream``.

        Example:
            >>> from samza_dsl import StreamApplication
            >>> from samza_dsl.systems import MemorySystem
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> parts = [app.input(mem.input(f"part-{i}")) for i in range(3)]
            >>> MessageStream.merge_all(parts, name="all").op_id
            'demo-1-merge-all'
            >>> MessageStream.merge_all([])
            Traceback (most recent call last):
            ...
            samza_dsl.errors.PlanError: merge_all([]) has nothing to merge: pass at least one
            MessageStream
        """
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

    def partition_by(self, key_fn: Callable[[M], K] | str, value_fn: Callable[[M], V] | None = None, *,
                     serde: KVSerde | None = None, name: str) -> MessageStream[KV[K, V]]:
        """Repartition by ``key_fn``: writes ``KV(key_fn(m), value_fn(m))`` to an intermediate
        stream and returns that stream. A None key goes to partition 0; any other key to
        murmur2(serialized key) % partitions.

        The operator is terminal for the sub-graph above it; its id is also the intermediate
        stream's id, and ``job.intermediate.stream.partitions`` (or the planner) sets the
        stream's partition count.

        Args:
            key_fn: ``key_fn(m)`` gives the key; a string names a field of the message
                (``Field``), which the Spark runner can read as a column.
            value_fn: ``value_fn(m)`` gives the value; without it the value is ``m`` itself.
            serde: The intermediate stream's serde; by default ``SafeSerde``.
            name: The operator's name in its id (``...-partition_by-<name>``); required.

        Returns:
            The intermediate stream, which delivers ``KV(key, value)``.

        Raises:
            TypeError: ``key_fn`` or ``value_fn`` is not callable, or ``serde`` is not a
                ``KVSerde``.
            PlanError: ``name`` is missing or malformed, the operator id is already used, or it
                clashes with an input or output stream id.

        Example:
            >>> from samza_dsl import StreamApplication
            >>> from samza_dsl.systems import MemorySystem
            >>> from samza_dsl.testing import TestRunner
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> clicks = mem.input("clicks")
            >>> by_user = app.input(clicks).partition_by(lambda m: m["user"], lambda m: m["page"],
            ...                                          name="by-user")
            >>> by_user.stream_id
            'demo-1-partition_by-by-user'
            >>> by_user.send_to(app.output(mem.output("out")))
            >>> result = TestRunner(app).add_input(clicks, [{"user": "u1", "page": "home"}]).run()
            >>> result.messages("out")
            [KV(key='u1', value='home')]
        """
        key_fn = field_of(key_fn, "partition_by key_fn")
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
        """Write to an intermediate stream of one partition that every task reads.

        The operator is terminal for the sub-graph above it; its id is also the intermediate
        stream's id.

        Args:
            serde: The intermediate stream's serde; by default ``SafeSerde``.
            name: The operator's name in its id (``...-broadcast-<name>``); required.

        Returns:
            The broadcast stream, keyed if this stream is.

        Raises:
            TypeError: ``serde`` is not a ``Serde``.
            PlanError: ``name`` is missing or malformed, the operator id is already used, or it
                clashes with an input or output stream id.

        Example:
            >>> from samza_dsl import StreamApplication
            >>> from samza_dsl.systems import MemorySystem
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> rules = app.input(mem.input("rules")).broadcast(name="rules")
            >>> rules.sink(print)
            >>> app.plan().intermediate_streams["demo-1-broadcast-rules"].partitions
            1
        """
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
        ``late_stream()`` on the returned stream reads.

        Args:
            window: A window spec from ``Windows`` (with its triggers, accumulation mode and
                allowed lateness).
            name: The operator's name in its id (``...-window-<name>``); required, as the id
                names the window's state.
            late_to: Where late messages also go: an ``OutputStream``, an output descriptor, or
                the name (``[A-Za-z0-9_-]+``) of an intermediate stream
                ``"{app.name}-{app_id}-late-{late_to}"``; by default they are only counted.

        Returns:
            The stream of ``WindowPane``s, one per firing of a pane.

        Raises:
            TypeError: ``window`` is not a ``Window``, or ``late_to`` is of another type.
            PlanError: ``name`` is missing or malformed, the operator id is already used, the
                ``late_to`` output belongs to another application, or the ``late_to`` name is
                malformed or its stream already exists.

        Example:
            >>> from datetime import timedelta
            >>> from samza_dsl import StreamApplication, Windows
            >>> from samza_dsl.systems import MemorySystem
            >>> from samza_dsl.testing import TestRunner
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> clicks = mem.input("clicks")  # (user, event time in seconds)
            >>> counts = Windows.keyed_tumbling(lambda m: m[0], timedelta(seconds=10),
            ...                                 init=lambda: 0, fold=lambda m, n: n + 1,
            ...                                 event_time=lambda m: m[1])
            >>> panes = app.input(clicks).window(counts, name="counts")
            >>> panes.map(lambda p: (p.key.key, p.key.pane_id, p.message)).send_to(
            ...     app.output(mem.output("out")))
            >>> runner = TestRunner(app).add_input(clicks, [("a", 1.0), ("b", 2.0), ("a", 3.0),
            ...                                             ("a", 12.0)])
            >>> sorted(runner.run().messages("out"))
            [('a', '0', 2), ('a', '10000', 1), ('b', '0', 1)]
        """
        if not isinstance(window, Window):
            raise TypeError(f"window {name!r} takes a Window from Windows.*, got "
                            f"{type(window).__name__}")
        target, late_sid = self._late_target("window", name, late_to)
        app = self._app
        lag = join_lag(app._intermediates, app._ops, self._node) \
            if window.event_time is not None else 0
        panes = self._then(WindowSpec, "window", name, required=True, window=window,
                           late_to=target, join_lag_ms=lag)
        if late_sid is not None:
            panes._late = self._app._late_intermediate(late_sid, panes.op_id or "")
        return panes

    def _late_target(self, what: str, name: str,
                     late_to: OutputStream[Any] | OutputDescriptor | str | None,
                     ) -> tuple[str | None, str | None]:
        """``late_to`` of a window or an event-time join (``what``): the stream id late
        messages go to, and that id again where it names a new intermediate stream."""
        app = self._app
        if isinstance(late_to, OutputDescriptor):
            late_to = app.output(late_to)
        if isinstance(late_to, OutputStream):
            if late_to._app is not app:
                raise PlanError(f"{what} {name!r}: late_to output {late_to.stream_id!r} belongs "
                                f"to another application")
            return late_to.stream_id, None
        if isinstance(late_to, str):
            if not NAME_RE.match(late_to):
                raise PlanError(f"{what} {name!r}: late_to name {late_to!r} is malformed: it "
                                f"must match [A-Za-z0-9_-]+")
            late_sid = f"{app.name}-{app.app_id}-late-{late_to}"
            if late_sid in app._inputs or late_sid in app._outputs \
                    or late_sid in app._intermediates:
                raise PlanError(f"{what} {name!r}: late_to stream {late_sid!r} already exists; "
                                f"give late_to another name")
            return late_sid, late_sid
        if late_to is not None:
            raise TypeError(f"{what} {name!r}: late_to takes an OutputStream from app.output() "
                            f"or the name of an intermediate stream, got {type(late_to).__name__}")
        return None, None

    def late_stream(self) -> MessageStream[Any]:
        """The late messages (``LateMessage``) of the window or event-time join that returned
        this stream, from its ``late_to=<name>`` intermediate stream.

        Returns:
            The intermediate stream of ``LateMessage``s.

        Raises:
            PlanError: This stream did not come from ``window(..., late_to="<name>")`` or
                ``join(..., within=..., late_to="<name>")``.

        Example:
            >>> from datetime import timedelta
            >>> from samza_dsl import StreamApplication, Windows
            >>> from samza_dsl.systems import MemorySystem
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> w = Windows.tumbling(timedelta(seconds=10), event_time=lambda m: m["ts"])
            >>> panes = app.input(mem.input("clicks")).window(w, name="w", late_to="late")
            >>> panes.late_stream().stream_id
            'demo-1-late-late'
        """
        late = getattr(self, "_late", None)
        if late is None:
            raise PlanError(f"{self._node!r} has no late stream: late_stream() reads the "
                            f"intermediate stream of a window(..., late_to='<name>') or a "
                            f"join(..., within=..., late_to='<name>')")
        return cast(MessageStream[Any], late)

    def join(self, other: MessageStream[OM], *, key: Callable[[M], Any],
             other_key: Callable[[OM], Any], combine: Callable[[M, OM], R], name: str,
             ttl: timedelta | float | None = None, within: timedelta | float | None = None,
             how: str = "inner",
             late_to: OutputStream[Any] | OutputDescriptor | str | None = None,
             ) -> MessageStream[R]:
        """Stream-stream join on a processing-time ``ttl`` (Samza's) or an event-time ``within``.

        With ``ttl`` each side keeps its latest message per key; a message emits
        ``combine(left, right)`` when the other side's entry is younger than ``ttl``
        (processing time). With ``within`` a left message ``l`` and a right message ``r`` of the
        same key whose event times are at most ``within`` apart (either order, inclusive) emit
        ``combine(l, r)`` once, when the second of the two is processed; each side's event time
        is the ``event_time`` declared on the input it reads from, and each side keeps every
        message until the join's watermark passes its event time + ``within``. A message whose
        event time is below the watermark is late: counted, logged, and with ``late_to``
        written to that stream as a ``LateMessage`` (as a window's). ``how="left"`` also emits
        ``combine(l, None)`` for a left message that met no right one by then (``"outer"``:
        ``combine(None, r)`` too).

        Args:
            other: The right side, another stream of the same application.
            key: ``key(m)`` gives a left message's join key.
            other_key: ``other_key(m)`` gives a right message's join key.
            combine: ``combine(left, right)`` gives the output; a None result is dropped.
            name: The operator's name in its id (``...-join-<name>``); required, as the id
                names the join's state.
            ttl: How long (processing time) a message stays joinable: a ``timedelta`` (a
                number is taken as seconds).
            within: How far apart (event time) two messages may be to join: a ``timedelta`` (a
                number is taken as seconds). Exactly one of ``ttl`` and ``within``.
            how: With ``within``: "inner" (default), "left" or "outer".
            late_to: With ``within``: where late messages also go, as ``window``'s
                ``late_to`` (an ``OutputStream``, an output descriptor, or the name of an
                intermediate stream that ``late_stream()`` on the returned stream reads).

        Returns:
            The stream of ``combine``'s results.

        Raises:
            TypeError: ``other`` is not a ``MessageStream``, ``key``, ``other_key`` or
                ``combine`` is not callable, ``ttl`` or ``within`` is neither a
                ``timedelta`` nor a number, both or neither of them is given, or ``how`` or
                ``late_to`` is given with ``ttl``.
            ValueError: ``ttl`` or ``within`` is not positive and finite, or is under 1 ms;
                ``how`` is not "inner", "left" or "outer".
            PlanError: ``other`` belongs to another application or is this stream, ``name``
                is missing or malformed, the operator id is already used, or (``within``) an
                input a side reads from declares no event time.

        Example:
            >>> from datetime import timedelta
            >>> from samza_dsl import StreamApplication
            >>> from samza_dsl.systems import MemorySystem
            >>> from samza_dsl.testing import TestRunner
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> views, clicks = mem.input("views"), mem.input("clicks")
            >>> app.input(views).join(app.input(clicks), key=lambda v: v[0],
            ...                       other_key=lambda c: c[0],
            ...                       combine=lambda v, c: (v[0], v[1], c[1]),
            ...                       ttl=timedelta(minutes=5), name="view-click").send_to(
            ...     app.output(mem.output("out")))
            >>> runner = TestRunner(app).add_input(views, [("u1", "home")])
            >>> runner.add_input(clicks, [("u1", "buy"), ("u2", "buy")]).run().messages("out")
            [('u1', 'home', 'buy')]
        """
        if not isinstance(other, MessageStream):
            raise TypeError(f"join {name!r}: other must be a MessageStream, got {type(other).__name__}")
        if other._app is not self._app:
            raise PlanError(f"join {name!r}: cannot join streams of two applications")
        if other._node == self._node:
            raise PlanError(f"join {name!r}: cannot join stream {self._node!r} with itself; join "
                            f"two different streams (map one side first if you mean a self-join)")
        for what, fn in (("key", key), ("other_key", other_key), ("combine", combine)):
            _check_fn(f"join {what}", fn)
        if (ttl is None) == (within is None):
            raise TypeError(f"join {name!r}: give exactly one of ttl= (processing time, as "
                            f"Samza's join) and within= (event time), got "
                            f"{'both' if ttl is not None else 'neither'}")
        if ttl is not None:
            if how != "inner" or late_to is not None:
                raise TypeError(f"join {name!r}: how= and late_to= go with within= (event "
                                f"time); a ttl= join is an inner join with no late messages")
            ttl_ms = to_ms(ttl, f"join {name!r} ttl")
            return self._app._add(JoinSpec, "join", name, inputs=(self._node, other._node),
                                  required=True, key_fn=key, other_key_fn=other_key,
                                  combine=combine, ttl_ms=ttl_ms)
        assert within is not None
        within_ms = to_ms(within, f"join {name!r} within")
        if how not in JOIN_HOWS:
            raise ValueError(f"join {name!r}: how must be one of {', '.join(map(repr, JOIN_HOWS))}, "
                             f"got {how!r}")
        app = self._app
        sides = tuple(side_time(app._inputs, app._intermediates, app._ops, node, name, side)
                      for node, side in ((self._node, "left"), (other._node, "right")))
        target, late_sid = self._late_target("join", name, late_to)
        out: MessageStream[R] = self._app._add(
            JoinSpec, "join", name, inputs=(self._node, other._node), required=True, key_fn=key,
            other_key_fn=other_key, combine=combine, within_ms=within_ms, how=how,
            late_to=target, sides=sides)
        if late_sid is not None:
            out._late = self._app._late_intermediate(late_sid, out.op_id or "")
        return out

    def join_table(self, table: Table[K, V] | RemoteTable[K, V], *, combine: Callable[[M, KV[K, V] | None], R | None],
                   key: Callable[[M], K] | None = None,
                   name: str | None = None) -> MessageStream[R]:
        """Stream-table join on ``key(m)`` (default: the message's ``KV.key``). ``combine(m, None)``
        is called on a miss; a None result is dropped.

        Args:
            table: A table from ``app.table`` or ``app.remote_table`` of the same
                application. A remote table is read asynchronously: the message is in flight
                (``task.max.concurrency``) until its record arrives, unless its cache has it.
            combine: ``combine(m, record)`` gives the output, where ``record`` is
                ``KV(key, value)`` on a hit and None on a miss (so ``combine`` chooses an inner
                or a left join).
            key: ``key(m)`` gives the lookup key; without it, the message's ``KV.key``.
            name: The operator's name in its id (``...-join_table-<name>``); optional.

        Returns:
            The stream of ``combine``'s results.

        Raises:
            TypeError: ``table`` is not a ``Table``, or ``combine`` or ``key`` is not callable.
            PlanError: ``table`` belongs to another application, ``name`` is malformed, or the
                operator id is already used.

        Example:
            >>> from samza_dsl import KV, StreamApplication
            >>> from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
            >>> from samza_dsl.systems import MemorySystem
            >>> from samza_dsl.testing import TestRunner
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> profiles = app.table("profiles", serde=KVSerde(StringSerde(), JsonSerde()))
            >>> events = app.input(mem.input("events"))
            >>> events.filter(lambda e: e[0] == "profile").map(lambda e: KV(e[1], e[2])).send_to(
            ...     profiles)
            >>> clicks = events.filter(lambda e: e[0] == "click")
            >>> clicks.join_table(profiles, key=lambda e: e[1],
            ...                   combine=lambda e, r: (e[2], r.value if r else None)).send_to(
            ...     app.output(mem.output("out")))
            >>> runner = TestRunner(app).add_input("events", [
            ...     ("profile", "u1", "Ada"), ("click", "u1", "buy"), ("click", "u2", "buy")])
            >>> runner.run().messages("out")
            [('buy', 'Ada'), ('buy', None)]
        """
        if not isinstance(table, _TableRef):
            raise TypeError(f"join_table takes a Table from app.table() or app.remote_table(), "
                            f"got {type(table).__name__}")
        if table._app is not self._app:
            raise PlanError(f"join_table: table {table.table_id!r} belongs to another application")
        _check_fn("join_table combine", combine)
        if key is not None:
            _check_fn("join_table key", key)
        return self._then(JoinTableSpec, "join_table", name, table_id=table.table_id,
                          combine=combine, key_fn=key)

    # -- terminals -------------------------------------------------------------------------------

    def send_to(self, target: OutputStream[Any] | Table[Any, Any] | RemoteTable[Any, Any],
                *, partition: Callable[[M], int] | None = None,
                partition_key: Callable[[M], Any] | None = None) -> None:
        """Send to an output stream (a KV goes as key/value) or into a table (``KV(k, None)``
        deletes ``k``).

        A terminal: the operator's id ends in a counter (``...-send_to-<n>``).

        By default a ``KV`` goes to the partition of its key (murmur2 of the serialized key,
        as Kafka's producer), anything else to the sending task's own partition. The
        application may choose the partition instead, as a Samza application does with the
        partition key of an ``OutgoingMessageEnvelope``:

        - ``partition=fn``: ``fn(m)`` is the partition, an ``int`` with
          ``0 <= p < partitions`` of the output (as the system counts them when the job runs);
          anything else fails the message as any operator's error does (the task stops with a
          ``TaskError`` naming the message's offset), saying the operator, the stream and the
          value.
        - ``partition_key=fn``: the partition is murmur2 of ``fn(m)`` serialized by the
          output's key serde (a stream without a ``KVSerde``: str as UTF-8, bytes as they
          are, anything else as JSON), instead of the message's key, which is still written
          as the record's key; a ``None`` result places the message by its key as usual.

        Args:
            target: An ``OutputStream`` from ``app.output`` or a ``Table`` from ``app.table``
                or ``app.remote_table``, of the same application. A table takes ``KV``
                messages only (anything else fails the message with a ``TaskError`` when it
                runs). A write to a remote table keeps its message in flight until the write
                has completed, so no checkpoint covers it before.
            partition: ``fn(m) -> int``, the output partition of each message; an output
                stream only.
            partition_key: ``fn(m)``, the key each message is partitioned by; an output
                stream only, and not with ``partition``.

        Raises:
            TypeError: ``target`` is neither an ``OutputStream`` nor a ``Table``, or
                ``partition``/``partition_key`` is not a function.
            PlanError: ``target`` belongs to another application; ``partition`` or
                ``partition_key`` with a table, or both together.

        Example:
            >>> from samza_dsl import KV, StreamApplication
            >>> from samza_dsl.systems import MemorySystem
            >>> from samza_dsl.testing import TestRunner
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> words = mem.input("words")
            >>> app.input(words).map(lambda w: KV(w, len(w))).send_to(
            ...     app.output(mem.output("lengths")))
            >>> TestRunner(app).add_input(words, ["hi"]).run().messages("lengths")
            [KV(key='hi', value=2)]

            Each word in the partition of its length:

            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> words = mem.input("words")
            >>> app.input(words).send_to(app.output(mem.output("by-length", partitions=4)),
            ...                          partition=lambda w: len(w) % 4)
            >>> TestRunner(app).add_input(words, ["a", "bb", "cc", "dddd"]).run().partitions(
            ...     "by-length")
            {0: ['dddd'], 1: ['a'], 2: ['bb', 'cc'], 3: []}
        """
        placing: dict[str, Any] = {}
        if partition is not None:
            _check_fn("send_to partition", partition)
            placing["partition_fn"] = partition
        if partition_key is not None:
            _check_fn("send_to partition_key", partition_key)
            placing["partition_key_fn"] = partition_key
        if len(placing) > 1:
            raise PlanError("send_to: give partition= or partition_key=, not both (partition "
                            "chooses the partition itself, partition_key the key it is hashed "
                            "from)")
        if isinstance(target, OutputStream):
            if target._app is not self._app:
                raise PlanError(f"send_to: output {target.stream_id!r} belongs to another application")
            self._then(SendToSpec, "send_to", None, stream_id=target.stream_id, **placing)
        elif isinstance(target, _TableRef):
            if target._app is not self._app:
                raise PlanError(f"send_to: table {target.table_id!r} belongs to another application")
            if placing:
                raise PlanError(f"send_to: table {target.table_id!r} has no partitions to "
                                f"choose: partition= and partition_key= are for output streams")
            self._then(SendToSpec, "send_to", None, table_id=target.table_id)
        else:
            raise TypeError(f"send_to takes an OutputStream from app.output() or a Table from "
                            f"app.table() or app.remote_table(), got {type(target).__name__}")

    def sink(self, fn: Callable[[M], Any | Awaitable[Any]], *, name: str | None = None) -> None:
        """Terminal: ``fn(m)``, sync or async.

        Args:
            fn: ``fn(m)`` for each message; its result is ignored (an awaitable is awaited).
            name: The operator's name in its id (``...-sink-<name>``); optional.

        Raises:
            TypeError: ``fn`` is not callable.
            PlanError: ``name`` is malformed, or the operator id is already used.

        Example:
            >>> from samza_dsl import StreamApplication
            >>> from samza_dsl.systems import MemorySystem
            >>> from samza_dsl.testing import TestRunner
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> words, seen = mem.input("words"), []
            >>> app.input(words).sink(seen.append, name="collect")
            >>> _ = TestRunner(app).add_input(words, ["a", "b"]).run()
            >>> seen
            ['a', 'b']
        """
        _check_fn("sink", fn)
        self._then(SinkSpec, "sink", name, fn=fn)

    def _then(self, cls: type, opcode: str, name: str | None, *, required: bool = False,
              keyed: bool = False, **fields: Any) -> MessageStream[Any]:
        return self._app._add(cls, opcode, name, inputs=(self._node,), required=required,
                              keyed=keyed, **fields)
