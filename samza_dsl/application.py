"""``StreamApplication``: registers inputs, outputs, tables and operators, and plans itself.

>>> from samza_dsl.systems import MemorySystem
>>> from samza_dsl.serdes import KVSerde, StringSerde, JsonSerde
>>> app = StreamApplication("page-views", config={"task.max.concurrency": 16})
>>> mem = MemorySystem()
>>> views = app.input(mem.input("views", serde=KVSerde(StringSerde(), JsonSerde())))
>>> out = app.output(mem.output("out"))
>>> views.map(lambda kv: kv.value, name="values").send_to(out)
>>> [op.op_id for op in app.spec().operators]
['page-views-1-map-values', 'page-views-1-send_to-1']
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .config import validate_config
from .errors import PlanError
from .kv import KV
from .remote import CacheSpec, RetryPolicy
from .serdes import KVSerde, Serde
from .spec import (
    ApplicationSpec,
    IntermediateStreamSpec,
    OpSpec,
    RemoteTableSpec,
    TableSpec,
    stream_node,
)
from .stream import NAME_RE, MessageStream, OutputStream, RemoteTable, Table
from .systems import InputDescriptor, OutputDescriptor
from .windows import to_ms

if TYPE_CHECKING:
    from planner import ExecutionPlan

__all__ = ["StreamApplication"]

_APP_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def user_call_site() -> str:
    """``file:line`` of the first frame outside samza_dsl: where the user built the operator."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_PACKAGE_DIR + os.sep):
            return f"{os.path.basename(path)}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown>:0"


class StreamApplication:
    """A stream application: the graph of operators from inputs to outputs.

    Operator ids are ``"{name}-{app_id}-{opcode}-{op name or counter}"``.

    Args:
        name: The application's name, matching ``[A-Za-z0-9_.-]+``; it starts every operator
            id and names the job.
        app_id: The application's instance id, matching ``[A-Za-z0-9_.-]+``; default ``"1"``.
        config: Samza-style configuration (``task.max.concurrency``, ``systems.<name>.*``,
            ...); known keys are checked and converted to their types.

    Attributes:
        name: The application's name.
        app_id: The application's instance id.
        config: The checked configuration (a new dict).

    Raises:
        ValueError: ``name`` or ``app_id`` is not a str matching ``[A-Za-z0-9_.-]+``.
        ConfigError: ``config`` is not a mapping, has an unknown ``task.``/``job.`` key, or
            has a value its key does not take (the message names the key).

    Example:
        >>> app = StreamApplication("page-views", config={"task.max.concurrency": "16"})
        >>> app, app.config["task.max.concurrency"]
        (StreamApplication('page-views', app_id='1'), 16)
        >>> StreamApplication("clicks", config={"task.max.concurency": 4})
        Traceback (most recent call last):
        ...
        samza_dsl.errors.ConfigError: unknown config key 'task.max.concurency' (did you mean
        'task.max.concurrency'?)...
    """

    def __init__(self, name: str, *, app_id: str = "1", config: Mapping[str, Any] | None = None):
        if not isinstance(name, str) or not _APP_NAME.match(name):
            raise ValueError(f"application name must match [A-Za-z0-9_.-]+, got {name!r}")
        if not isinstance(app_id, str) or not _APP_NAME.match(app_id):
            raise ValueError(f"app_id must match [A-Za-z0-9_.-]+, got {app_id!r}")
        self.name = name
        self.app_id = app_id
        self.config = validate_config(config)
        self._inputs: dict[str, InputDescriptor] = {}
        self._outputs: dict[str, OutputDescriptor] = {}
        self._intermediates: dict[str, IntermediateStreamSpec] = {}
        self._tables: dict[str, TableSpec] = {}
        self._remote_tables: dict[str, RemoteTableSpec] = {}
        self._ops: dict[str, OpSpec] = {}
        self._input_streams: dict[str, MessageStream[Any]] = {}
        self._counter = 0
        self._types: dict[str, type] = {}

    def __repr__(self) -> str:
        return f"StreamApplication({self.name!r}, app_id={self.app_id!r})"

    # -- registration ----------------------------------------------------------------------------

    def _check_stream_id(self, descriptor: InputDescriptor | OutputDescriptor, kind: str) -> None:
        sid = descriptor.stream_id
        if sid in self._intermediates:
            raise PlanError(f"stream id {sid!r} is already an intermediate stream of operator "
                            f"{sid!r}; give the {kind} stream another id")
        for registered in (self._inputs.get(sid), self._outputs.get(sid)):
            if registered is None or registered == descriptor:
                continue
            if type(registered) is not type(descriptor) and _same_stream(registered, descriptor):
                continue  # one stream read and written by the job, as Samza allows
            if registered.serde != descriptor.serde:
                raise PlanError(f"stream {sid!r} is registered twice with different serdes "
                                f"({registered.serde!r} and {descriptor.serde!r}); use one serde "
                                f"per stream id")
            raise PlanError(f"stream {sid!r} is registered twice with different descriptors "
                            f"({_describe(registered)} and {_describe(descriptor)}); use one "
                            f"descriptor per stream id")

    def input(self, descriptor: InputDescriptor) -> MessageStream[Any]:
        """Register an input stream; a KVSerde input delivers ``KV``.

        Registering the same descriptor again gives the same stream.

        Args:
            descriptor: A stream descriptor from ``system.input(...)``.

        Returns:
            The input's ``MessageStream``: of ``KV(key, value)`` for a ``KVSerde`` input, of
            values otherwise.

        Raises:
            TypeError: ``descriptor`` is not an input descriptor.
            PlanError: The stream id is already an intermediate stream's, or is registered
                with another serde or descriptor.

        Example:
            >>> from samza_dsl.systems import MemorySystem
            >>> from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> views = mem.input("views", serde=KVSerde(StringSerde(), JsonSerde()))
            >>> stream = app.input(views)
            >>> stream.stream_id, app.input(views) is stream
            ('views', True)
        """
        if not isinstance(descriptor, InputDescriptor):
            raise TypeError(f"app.input takes a descriptor from system.input(...), got "
                            f"{type(descriptor).__name__}")
        self._check_stream_id(descriptor, "input")
        sid = descriptor.stream_id
        if sid in self._inputs:
            return self._input_streams[sid]
        self._inputs[sid] = descriptor
        stream: MessageStream[Any] = MessageStream(self, stream_node(sid), keyed=descriptor.keyed)
        self._input_streams[sid] = stream
        return stream

    def output(self, descriptor: OutputDescriptor) -> OutputStream[Any]:
        """Register an output stream for ``send_to``.

        A stream id may be both an input and an output of the job when both descriptors name
        the same physical stream, as Samza allows.

        Args:
            descriptor: A stream descriptor from ``system.output(...)``.

        Returns:
            An ``OutputStream`` to pass to ``send_to`` (or to ``window(..., late_to=...)``).

        Raises:
            TypeError: ``descriptor`` is not an output descriptor.
            PlanError: The stream id is already an intermediate stream's, or is registered
                with another serde or descriptor.

        Example:
            >>> from samza_dsl.systems import MemorySystem
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> app.output(mem.output("counts", partitions=4))
            OutputStream('counts')
        """
        if not isinstance(descriptor, OutputDescriptor):
            raise TypeError(f"app.output takes a descriptor from system.output(...), got "
                            f"{type(descriptor).__name__}")
        self._check_stream_id(descriptor, "output")
        self._outputs[descriptor.stream_id] = descriptor
        return OutputStream(self, descriptor.stream_id)

    def table(self, name: str, *, serde: KVSerde, changelog: bool | None = None,
              side_inputs: Sequence[InputDescriptor] | None = None,
              processor: Callable[[Any], Iterable[KV[Any, Any]]] | None = None,
              ttl: timedelta | float | None = None,
              ttl_event_time: Callable[[Any], float] | None = None) -> Table[Any, Any]:
        """A local table, one LMDB store per task, backed by a changelog unless ``changelog=False``.

        With ``side_inputs`` (Samza's ``withSideInputs``) the table is filled from those streams:
        ``processor(message)`` gives the ``KV``s to put for each of their messages (a ``None``
        value deletes the key). Partition ``p`` of each side input fills the table of the task
        that owns partition ``p`` of the job's inputs, so a side input is partitioned as the
        inputs joined with the table are. Each side input is read from its oldest offset on
        every start, restarts included, as a bootstrap input (``system.input(...,
        bootstrap=True)``): the task processes its other inputs only once its side-input
        partitions have caught up to their end as of the start. Such a table has no changelog:
        it is restored from its side inputs.

        Registering the same name with the same settings again gives the same table.

        Args:
            name: The table's name, matching ``[A-Za-z0-9_-]+``: ``ctx.table(name)`` in user
                functions, and the store's name (``stores.<name>.*`` config).
            serde: The ``KVSerde`` of the table's keys and values; keys are ordered by their
                serialized bytes.
            changelog: Whether the store is backed by a changelog stream (restored from it
                after a restart); by default yes, unless the table has side inputs.
            side_inputs: Input descriptors (``system.input(...)``) of the streams that fill
                the table; not also inputs of the job.
            processor: With ``side_inputs``, ``processor(message)`` gives an iterable of
                ``KV(key, value)`` to put (value None: delete); ``[]`` for none.
            ttl: How long an entry lives after its write time (a ``timedelta``, or seconds):
                an expired entry is gone for reads at once and is deleted from the store and
                its changelog (a tombstone) at a following commit (docs/joins-and-tables.md). By
                default on processing time: the wall clock when the entry is written.
            ttl_event_time: With ``ttl``, ``ttl_event_time(value)`` gives the event time of
                an entry (seconds) instead: the table's clock is then the largest event time
                written to the task's store, so what expires is the same on every runner and
                on a replay.

        Returns:
            The ``Table``, for ``send_to``, ``join_table`` and ``ctx.table(name)``.

        Raises:
            PlanError: ``name`` is malformed, or is registered with other settings; only one
                of ``side_inputs`` and ``processor`` is given, ``ttl`` is not a positive
                duration or ``ttl_event_time`` is given without it or is not callable, a side input is not read from
                its oldest offset, or ``changelog=True`` is asked of a table with side inputs.
            TypeError: ``serde`` is not a ``KVSerde``, a side input is not an input
                descriptor, or ``processor`` is not callable.

        Example:
            >>> from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
            >>> from samza_dsl.systems import MemorySystem
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> serde = KVSerde(StringSerde(), JsonSerde())
            >>> app.table("profiles", serde=serde, changelog=False)
            Table('profiles')
            >>> users = app.table("users", serde=serde,
            ...                   side_inputs=[mem.input("user-updates", serde=serde)],
            ...                   processor=lambda kv: [kv])
            >>> spec = app.spec()
            >>> spec.tables["users"].side_inputs, spec.inputs["user-updates"].bootstrap
            (('user-updates',), True)
        """
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise PlanError(f"table name must match [A-Za-z0-9_-]+, got {name!r}")
        if not isinstance(serde, KVSerde):
            raise TypeError(f"table {name!r}: serde must be a KVSerde, got {type(serde).__name__}")
        if name in self._remote_tables:
            raise PlanError(f"table {name!r} is already a remote table; give the local table "
                            f"another name")
        sides = self._side_inputs(name, side_inputs, processor, changelog)
        spec = TableSpec(name, serde, not sides if changelog is None else bool(changelog),
                         tuple(d.stream_id for d in sides), *_table_ttl(name, ttl, ttl_event_time))
        if name in self._tables:
            if self._tables[name] != spec:
                raise PlanError(f"table {name!r} is registered twice with different settings")
            return Table(self, self._tables[name])
        self._tables[name] = spec
        table: Table[Any, Any] = Table(self, spec)
        for d in sides:
            (self.input(replace(d, bootstrap=True, side_input_of=name))
             .flat_map(processor, name=f"side-input-{d.stream_id}")  # type: ignore[arg-type]
             .send_to(table))
        return table

    def _side_inputs(self, name: str, side_inputs: Sequence[InputDescriptor] | None,
                     processor: Callable[[Any], Any] | None,
                     changelog: bool | None) -> list[InputDescriptor]:
        """The side inputs of table ``name``, checked."""
        if side_inputs is None and processor is None:
            return []
        if not side_inputs or processor is None:
            raise PlanError(f"table {name!r}: side_inputs=[system.input(...), ...] and "
                            f"processor=fn(message) -> [KV, ...] go together")
        if not callable(processor):
            raise TypeError(f"table {name!r}: processor must be callable, got "
                            f"{type(processor).__name__}")
        if changelog:
            raise PlanError(f"table {name!r} is restored from its side inputs: it has no "
                            f"changelog (drop changelog=True)")
        out = []
        for d in side_inputs:
            if not isinstance(d, InputDescriptor):
                raise TypeError(f"table {name!r}: side_inputs takes descriptors from "
                                f"system.input(...), got {type(d).__name__}")
            if d.offset_default != "oldest":
                raise PlanError(f"table {name!r}: side input {d.stream_id!r} must be read from "
                                f"its oldest offset to fill the table (drop "
                                f"offset_default={d.offset_default!r})")
            if d.stream_id in self._inputs and self._inputs[d.stream_id].side_input_of != name:
                raise PlanError(f"table {name!r}: side input {d.stream_id!r} is already an "
                                f"input of the job; a side input only fills its table")
            out.append(d)
        return out

    def remote_table(self, name: str, *, read: Callable[[Any], Awaitable[Any]] | None = None,
                     write: Callable[[Any, Any], Awaitable[Any]] | None = None,
                     read_all: Callable[[list[Any]], Awaitable[Mapping[Any, Any]]] | None = None,
                     write_all: Callable[[list[KV[Any, Any]]], Awaitable[Any]] | None = None,
                     rate_limit: float | None = None, retry: RetryPolicy | None = None,
                     cache: CacheSpec | None = None, batch_size: int = 100
                     ) -> RemoteTable[Any, Any]:
        """A table in a remote service (a key-value store, a REST API), as Samza's
        ``RemoteTableDescriptor``: ``join_table`` it, ``send_to`` it, or use it from user
        functions as ``ctx.table(name)``, whose ``get``, ``put``, ``get_all``, ``put_all`` and
        ``delete`` are async there.

        Calls run on the task's event loop as part of the message that makes them: the message
        stays in flight until they complete, so they count towards ``task.max.concurrency`` (a
        task has at most that many calls in progress), the checkpoint never covers a message
        whose write has not completed, and ``task.callback.timeout.ms`` applies
        (docs/semantics.md rule 19).

        Args:
            name: The table's name, matching ``[A-Za-z0-9_-]+``; ``ctx.table(name)``.
            read: ``async read(key) -> value or None`` (None: the service has no value).
            write: ``async write(key, value)``; ``value`` None deletes the key.
            read_all: ``async read_all(keys) -> {key: value}`` (absent keys left out): reads
                made in the same turn of the event loop go to it as one batch of up to
                ``batch_size`` keys, and ``get_all`` uses it.
            write_all: ``async write_all([KV(key, value), ...])`` (None values delete):
                writes made in the same turn go to it as one batch, and ``put_all`` uses it.
            rate_limit: Calls per second, counted per key, for the whole job: each container
                gets the share of its tasks, which its tasks share (a token bucket). None: no
                limit.
            retry: The ``RetryPolicy`` of failed calls; None: no retry.
            cache: A ``CacheSpec`` for a read-through cache per task (write-through or
                write-around); None: no cache.
            batch_size: The most keys in one ``read_all``/``write_all`` call. The reads that
                messages make go out sooner: once an eighth of ``task.max.concurrency`` of
                them wait (12 at 100), so that several batches are on their way at once and
                the task handles one batch's answers while the others wait on the service.

        Registering the same name with the same settings again gives the same table.

        Returns:
            The ``RemoteTable``.

        Raises:
            PlanError: ``name`` is malformed, names a local table, or is registered with other
                settings.
            TypeError: A function is not callable, or ``retry``/``cache`` is of the wrong
                type.
            ValueError: ``rate_limit`` or ``batch_size`` is not > 0, or the table has no read
                and no write function.

        Example:
            >>> from samza_dsl.remote import CacheSpec, RetryPolicy
            >>> async def read(user_id):
            ...     return {"user": user_id, "tier": "gold"}
            >>> app = StreamApplication("demo")
            >>> app.remote_table("profiles", read=read, rate_limit=1000,
            ...                  retry=RetryPolicy(max_attempts=5),
            ...                  cache=CacheSpec(ttl=60, size=10_000))
            RemoteTable('profiles')
        """
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise PlanError(f"table name must match [A-Za-z0-9_-]+, got {name!r}")
        if name in self._tables:
            raise PlanError(f"table {name!r} is already a local table; give the remote table "
                            f"another name")
        for what, fn in (("read", read), ("write", write), ("read_all", read_all),
                         ("write_all", write_all)):
            if fn is not None and not callable(fn):
                raise TypeError(f"remote table {name!r}: {what} must be an async function, got "
                                f"{type(fn).__name__}")
        if read is None and write is None and read_all is None and write_all is None:
            raise ValueError(f"remote table {name!r} needs a read or a write function")
        if rate_limit is not None and (isinstance(rate_limit, bool)
                                       or not isinstance(rate_limit, int | float)
                                       or not rate_limit > 0):
            raise ValueError(f"remote table {name!r}: rate_limit must be calls per second > 0, "
                             f"got {rate_limit!r}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError(f"remote table {name!r}: retry must be a RetryPolicy, got "
                            f"{type(retry).__name__}")
        if cache is not None and not isinstance(cache, CacheSpec):
            raise TypeError(f"remote table {name!r}: cache must be a CacheSpec, got "
                            f"{type(cache).__name__}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"remote table {name!r}: batch_size must be an int >= 1, got "
                             f"{batch_size!r}")
        spec = RemoteTableSpec(name, read, write, read_all, write_all,
                               None if rate_limit is None else float(rate_limit), retry, cache,
                               batch_size)
        if self._remote_tables.get(name, spec) != spec:
            raise PlanError(f"remote table {name!r} is registered twice with different "
                            f"settings")
        self._remote_tables[name] = spec
        return RemoteTable(self, spec)

    def _intermediate(self, stream_id: str, serde: Serde[Any] | None, *, broadcast: bool,
                      keyed: bool = True) -> MessageStream[Any]:
        self._intermediates[stream_id] = IntermediateStreamSpec(stream_id, stream_id, serde,
                                                                broadcast)
        return MessageStream(self, stream_node(stream_id), keyed=keyed if broadcast else True)

    def _late_intermediate(self, stream_id: str, producer: str) -> MessageStream[Any]:
        """The intermediate stream a window writes its late messages to (``late_to=<name>``)."""
        self._intermediates[stream_id] = IntermediateStreamSpec(stream_id, producer, None,
                                                                late=True)
        return MessageStream(self, stream_node(stream_id))

    def _add(self, cls: type, opcode: str, name: str | None, *, inputs: tuple[str, ...],
             required: bool = False, keyed: bool = False, **fields: Any) -> MessageStream[Any]:
        if name is None:
            if required:
                raise PlanError(f"{opcode} needs name=...: its id names state or a stream")
            suffix = str(self._counter)
        else:
            if not isinstance(name, str) or not NAME_RE.match(name):
                raise PlanError(f"{opcode} name {name!r} is malformed: it must match "
                                f"[A-Za-z0-9_-]+")
            suffix = name
        op_id = f"{self.name}-{self.app_id}-{opcode}-{suffix}"
        if op_id in self._ops:
            previous = self._ops[op_id]
            raise PlanError(f"operator id {op_id!r} is used twice (first at {previous.call_site}); "
                            f"give the {opcode} a unique name")
        if opcode in ("partition_by", "broadcast") and (op_id in self._inputs
                                                       or op_id in self._outputs):
            # checked before registering, so a failed call leaves no operator without its stream
            raise PlanError(f"intermediate stream {op_id!r} of the {opcode} clashes with an input "
                            f"or output stream of the same id; rename the operator")
        spec = cls(op_id=op_id, name=name, inputs=inputs, call_site=user_call_site(), **fields)
        self._counter += 1  # as Samza's nextOpNum: every registered operator takes a number
        self._ops[op_id] = spec
        return MessageStream(self, op_id, keyed=keyed, op_id=op_id)

    # -- views -----------------------------------------------------------------------------------

    def spec(self) -> ApplicationSpec:
        """An immutable snapshot of the spec graph.

        Returns:
            The ``ApplicationSpec``: the application's inputs, outputs, intermediate streams,
            tables, operators (in registration order), config and declared types, as the
            planner and the runners read them. Later changes to the application do not
            change it.

        Example:
            >>> from samza_dsl.systems import MemorySystem
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> app.input(mem.input("words")).sink(print, name="show")
            >>> spec = app.spec()
            >>> list(spec.inputs), [op.op_id for op in spec.operators]
            (['words'], ['demo-1-sink-show'])
        """
        return ApplicationSpec(self.name, self.app_id, dict(self.config), dict(self._inputs),
                               dict(self._outputs), dict(self._intermediates), dict(self._tables),
                               tuple(self._ops.values()), dict(self._types),
                               dict(self._remote_tables))

    def declare_types(self, *types: type, **named: type) -> None:
        """Declare ``msgspec.Struct`` (or dataclass, NamedTuple) types the job's intermediate
        streams and window and join state may carry, for their default serde (``SafeSerde``):
        an undeclared type there is an error, as decoding builds declared types only. A type is
        known by ``module.QualName``, or by the name it is given as a keyword (keep that name
        stable: stored state and streams refer to it).

        Args:
            *types: Classes, each known by ``module.QualName``.
            **named: Classes, each known by its keyword.

        Raises:
            TypeError: A type is not a ``msgspec.Struct``, dataclass or NamedTuple class, or
                two types of one call have the same name.
            PlanError: A name is already declared for another type.

        Example:
            >>> import msgspec
            >>> class Click(msgspec.Struct):
            ...     user: str
            >>> app = StreamApplication("clicks")
            >>> app.declare_types(Click)
            >>> list(app.spec().types)
            ['samza_dsl.application.Click']
        """
        from .safe_serde import declared_names

        new = {**declared_names(types), **declared_names(named)}
        for name, cls in new.items():
            if self._types.get(name, cls) is not cls:
                raise PlanError(f"type name {name!r} is declared twice: {self._types[name]!r} "
                                f"and {cls!r}; declare one of them under another name")
        self._types.update(new)

    def plan(self, *, partitions: Mapping[str, int] | None = None,
             config: Mapping[str, Any] | None = None) -> ExecutionPlan:
        """Validate and plan: stages, intermediate partition counts, generated config.

        Args:
            partitions: Stream id -> partition count, for streams whose count the plan cannot
                look up.
            config: Configuration on top of the application's own (checked as it is).

        Returns:
            The ``planner.ExecutionPlan``: the graph, the input, output and intermediate
            streams with their partition counts, the stages, the tables and the full config
            (``task.window.ms`` and other generated keys included).

        Raises:
            PlanError: The graph is invalid; the message names the streams and operators at
                fault.
            ConfigError: A configuration key or value is wrong; the message names the key.

        Example:
            >>> from samza_dsl.systems import MemorySystem
            >>> app, mem = StreamApplication("demo"), MemorySystem()
            >>> words = app.input(mem.input("words", partitions=4))
            >>> words.partition_by(len, name="by-length").sink(print)
            >>> plan = app.plan()
            >>> plan.intermediate_streams["demo-1-partition_by-by-length"].partitions
            4
        """
        from planner import plan as make_plan

        return make_plan(self.spec(), partitions=partitions, config=config)


def _same_stream(a: InputDescriptor | OutputDescriptor,
                 b: InputDescriptor | OutputDescriptor) -> bool:
    """An input and an output descriptor of one physical stream."""
    return ((a.system, a.physical_name, a.partitions, a.serde)
            == (b.system, b.physical_name, b.partitions, b.serde))


def _describe(d: InputDescriptor | OutputDescriptor) -> str:
    return (f"{type(d).__name__}(system={d.system.name!r}, physical_name={d.physical_name!r}, "
            f"partitions={d.partitions})")


def _table_ttl(name: str, ttl: timedelta | float | None,
               event_time: Callable[[Any], float] | None
               ) -> tuple[int | None, Callable[[Any], float] | None]:
    """``(ttl_ms, ttl_event_time)`` of table ``name``, checked."""
    if ttl is None:
        if event_time is not None:
            raise PlanError(f"table {name!r}: ttl_event_time= needs ttl= (how long an entry "
                            f"lives after its event time)")
        return None, None
    try:
        ms = to_ms(ttl, f"table {name!r}: ttl")
    except (TypeError, ValueError) as e:
        raise PlanError(f"{e}; give ttl=timedelta(...) of at least 1 ms, or leave it out for "
                        f"entries that never expire") from None
    if event_time is not None and not callable(event_time):
        raise PlanError(f"table {name!r}: ttl_event_time must be a function of a value giving "
                        f"its event time in seconds, got {type(event_time).__name__}")
    return ms, event_time
