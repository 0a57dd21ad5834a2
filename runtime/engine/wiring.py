"""How a task's operators are wired, from a plan: the one place both the streaming task and the
Spark executor build their operator chains and senders.

- ``build_operators``: a task's operators (each with its own copy of user function objects) and
  the stores of its tables, windows and joins.
- ``Wiring``: the emit chain from each input stream through the operators to the senders. Each
  runner gives a sender factory (how a record reaches a stream: a producer, or Spark's output)
  and may build an operator's emit its own way (threads, async calls on Spark).
- ``PartitionRule`` / ``partition_of``: which partition of a stream a record goes to, written
  once: a ``KV`` goes to its key's partition (murmur2 of the serialized key, as Kafka's producer;
  the partitions of keys seen are kept in a table), anything else stays in the sender's own
  partition; a stream of one partition, or a broadcast stream, takes partition 0. A bare message
  sent to a keyed (``KVSerde``) stream is an error (``not_kv``). Where a ``send_to`` chooses
  the partition (``partition=``, ``partition_key=``), ``ChosenPartitionRule`` applies its
  choice instead, checked against the stream's partition count.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from operators import build_operator
from operators.base import IDENTITY, Operator
from operators.hashing import KeyPartitioner
from runtime.engine.dag import Emit, OperatorFailure, chain, chain_one, fan_out, metered
from runtime.engine.serde_util import default_key_bytes
from runtime.engine.systems import StreamSink
from runtime.host.metrics import OpMeter
from runtime.state.tables import LocalTable
from samza_dsl.kv import KV
from samza_dsl.late import LateMessage
from samza_dsl.serdes import KVSerde
from samza_dsl.spec import (
    BroadcastSpec,
    JoinSpec,
    PartitionBySpec,
    SendToSpec,
    WindowSpec,
    late_target,
    stream_node,
)

__all__ = ["Wiring", "OneToOnePath", "PartitionRule", "ChosenPartitionRule", "partition_of", "build_operators", "task_copy", "not_kv",
           "record_sender", "op_nexts", "operator_emit", "bind_port"]


class PartitionRule:
    """Which partition of ``stream_id`` (``n`` partitions) a record goes to, from a sender in
    partition ``own`` (see the module's docstring)."""

    __slots__ = ("stream_id", "n", "own", "keyed", "fixed", "partitioner", "table")
    #: whether the application chooses the partitions (``ChosenPartitionRule``): then ``fixed``
    #: is None and ``table`` does not place messages; call the rule for each one
    chosen = False

    def __init__(self, stream_id: str, n: int, own: int, key_bytes: Callable[[Any], bytes], *,
                 keyed: bool, broadcast: bool) -> None:
        self.stream_id = stream_id
        self.n = n
        self.own = own % n
        self.keyed = keyed
        #: the one partition every record takes, or None: by key
        self.fixed: int | None = 0 if broadcast or n == 1 else None
        self.partitioner = KeyPartitioner(n, key_bytes)
        #: key -> partition, filled as keys are seen (a hot sender looks keys up here first)
        self.table = self.partitioner.table

    def __call__(self, m: Any) -> int:
        if type(m) is not KV:
            if self.keyed:
                raise not_kv(self.stream_id, m)
            return self.own if self.fixed is None else self.fixed
        if self.fixed is not None:
            return self.fixed
        try:
            return self.table[m.key]
        except TypeError:  # an unhashable key
            return self.partitioner(m.key)


class ChosenPartitionRule(PartitionRule):
    """The partition a ``send_to`` operator ``op_id`` chooses (``send_to(partition=...)`` or
    ``partition_key=...``, ``operators.simple.SendToStreamOperator``): ``partition_fn(m)``
    itself, which must be an int in ``0 <= p < n``, or murmur2 of ``partition_key_fn(m)``
    serialized as the stream's keys are (a None partition key: the message's own rule). A bare
    message sent to a keyed stream is still ``not_kv``."""

    __slots__ = ("op_id", "partition_fn", "partition_key_fn", "key_partitioner")
    chosen = True

    def __init__(self, op_id: str, stream_id: str, n: int, own: int,
                 key_bytes: Callable[[Any], bytes], *, keyed: bool,
                 partition_fn: Callable[[Any], Any] | None,
                 partition_key_fn: Callable[[Any], Any] | None) -> None:
        super().__init__(stream_id, n, own, key_bytes, keyed=keyed, broadcast=False)
        self.fixed = None
        self.op_id = op_id
        self.partition_fn = partition_fn
        self.partition_key_fn = partition_key_fn
        self.key_partitioner = KeyPartitioner(n, key_bytes)

    def __call__(self, m: Any) -> int:
        if self.keyed and type(m) is not KV:
            raise not_kv(self.stream_id, m)
        fn = self.partition_fn
        if fn is not None:
            p = fn(m)
            if type(p) is int and 0 <= p < self.n:
                return p
            return self._checked(p)
        assert self.partition_key_fn is not None
        key = self.partition_key_fn(m)
        if key is None:
            return super().__call__(m)
        try:
            return self.key_partitioner(key)
        except Exception as exc:
            raise TypeError(f"send_to {self.op_id!r}: partition_key= gave {type(key).__name__} "
                            f"{key!r} for stream {self.stream_id!r}, which the stream's key "
                            f"serializer cannot write ({type(exc).__name__}: {exc}); give a "
                            f"key of the stream's key type") from exc

    def _checked(self, p: Any) -> int:
        """``p`` as a partition where it is an integer of another type (numpy's), else the
        error naming the operator, the stream and the value."""
        n = self.n
        if isinstance(p, bool) or not hasattr(p, "__index__"):  # foreign: a user's value
            raise TypeError(f"send_to {self.op_id!r}: partition= gave {type(p).__name__} "
                            f"{p!r} for stream {self.stream_id!r}, not an int in 0..{n - 1}")
        q = p.__index__()
        if 0 <= q < n:
            return int(q)
        raise ValueError(f"send_to {self.op_id!r}: partition= gave {q} for stream "
                         f"{self.stream_id!r}, which has {n} partition{'s' if n > 1 else ''} "
                         f"(0..{n - 1})")


def partition_of(plan: Any, stream_id: str, n: int, own: int, op: Operator | None = None
                 ) -> PartitionRule:
    """The partition rule of ``stream_id`` of ``plan`` with ``n`` partitions, for a sender in
    partition ``own``; keys are serialized by the stream's key serde. ``op``: the operator
    that writes (a ``send_to`` that chooses partitions gets a ``ChosenPartitionRule``)."""
    stream = plan.streams[stream_id]
    serde = stream.descriptor.serde
    key_bytes = serde.key_serde.serialize if isinstance(serde, KVSerde) else default_key_bytes
    partition_fn = None if op is None else op.partition_fn
    partition_key_fn = None if op is None else op.partition_key_fn
    if partition_fn is not None or partition_key_fn is not None:
        assert op is not None
        return ChosenPartitionRule(op.op_id, stream_id, max(n, 1), own, key_bytes,
                                   keyed=bool(stream.keyed), partition_fn=partition_fn,
                                   partition_key_fn=partition_key_fn)
    return PartitionRule(stream_id, max(n, 1), own, key_bytes, keyed=bool(stream.keyed),
                         broadcast=stream.kind == "broadcast")


def build_operators(plan: Any, stages: Sequence[Any], open_store: Callable[[str], Any],
                    open_table: Callable[[str], Any] | None = None,
                    open_remote: Callable[[Any], Any] | None = None
                    ) -> tuple[dict[str, Operator], dict[str, Any], dict[str, Any]]:
    """A task's operators for ``stages``, and its stores: ``open_store(name)`` for the state of
    each window (its op id) and join (``<op id>-L``/``-R``), ``open_table(table id)`` (default
    ``open_store``) for each table, ``open_remote(spec)`` for each remote table (a runner that
    gives none cannot run an application with remote tables). Returns (operators, stores by
    name, tables by id: what ``ctx.table`` gives)."""
    app = plan.app
    table_store = open_table or open_store
    stores: dict[str, Any] = {}
    tables: dict[str, Any] = {}
    operators: dict[str, Operator] = {}
    for table_id in app.tables:
        stores[table_id] = table_store(table_id)
        tables[table_id] = LocalTable(table_id, stores[table_id])
    remote = app.remote_tables
    if remote and open_remote is None:
        raise TypeError(f"this runner cannot call remote tables ({', '.join(sorted(remote))}); "
                        f"run the application with LocalRunner or TestRunner")
    for table_id, spec in remote.items():
        stores[table_id] = tables[table_id] = open_remote(spec)  # type: ignore[misc]
    for stage in stages:
        for op_id in stage.operators:
            spec = app.operator(op_id)
            if isinstance(spec, WindowSpec):
                stores[op_id] = open_store(op_id)
            elif isinstance(spec, JoinSpec):
                for side in ("L", "R"):
                    stores[f"{op_id}-{side}"] = open_store(f"{op_id}-{side}")
            operators[op_id] = build_operator(task_copy(spec))
    return operators, stores, tables


@dataclasses.dataclass(frozen=True)
class OneToOnePath:
    """A stream's one-to-one steps (``Wiring.one_to_one_path``): the functions other than the
    identity, as (op id, function), with their operators; the last operator, which writes
    ``target``."""

    fns: list[tuple[str, Callable[[Any], Any]]]
    ops: list[Operator]
    last: Operator
    target: str


class Wiring:
    """The emit chain of a task's ``operators`` over ``plan``: ``entry(stream)`` hands a
    message of an input stream to the operators that read it, each operator's outputs go on to
    the next ones (``emit``) and to the streams it writes (``sender``).

    ``make_sender(stream id, op id)`` builds the terminal of an operator writing to a stream;
    ``make_emit(op, port, nexts)`` (default ``operator_emit``) builds an operator's emit."""

    def __init__(self, plan: Any, operators: Mapping[str, Operator],
                 make_sender: Callable[[str, str], Emit],
                 make_emit: Callable[[Operator, int, list[Emit]], Emit] | None = None) -> None:
        self.plan = plan
        self.operators = operators
        self._make_sender = make_sender
        self._make_emit = make_emit or operator_emit
        self._emits: dict[tuple[str, int], Emit] = {}
        self._senders: dict[tuple[str, str], Emit] = {}
        self._nexts: dict[str, list[Emit]] = {}

    def entry(self, stream_id: str) -> Emit:
        """Where a message of input or intermediate stream ``stream_id`` goes."""
        node = stream_node(stream_id)
        return fan_out([self.emit(op_id, self.plan.dag.edges[node, op_id]["port"])
                        for op_id in self.plan.next_ops(node) if op_id in self.operators])

    def emit(self, op_id: str, port_name: str) -> Emit:
        """The emit of operator ``op_id`` on ``port_name`` ("right": a join's second input)."""
        port = 1 if port_name == "right" else 0
        key = (op_id, port)
        emit = self._emits.get(key)
        if emit is None:
            op = self.operators[op_id]
            emit = self._emits[key] = self._make_emit(op, port, self.nexts(op_id))
        return emit

    def nexts(self, op_id: str) -> list[Emit]:
        """What an operator's outputs go to: downstream operators, and the streams it writes
        (built once per operator, as its emits and senders are; callers only read the list)."""
        nexts = self._nexts.get(op_id)
        if nexts is None:
            nexts = self._nexts[op_id] = op_nexts(self.plan, op_id, self.operators[op_id].spec,
                                                  self.emit, self.sender)
        return nexts

    def one_to_one_path(self, stream_id: str) -> OneToOnePath | None:
        """The path of ``stream_id``'s messages where each step gives at most one output,
        synchronously (``one_to_one_port``), and the last writes a stream (a ``send_to``, or a
        ``partition_by``'s intermediate stream) and nothing else; None for any other shape."""
        plan = self.plan
        node = stream_node(stream_id)
        fns: list[tuple[str, Callable[[Any], Any]]] = []
        ops: list[Operator] = []
        nexts = [n for n in plan.next_ops(node) if n in self.operators]
        target = last = None
        while len(nexts) == 1:
            op_id = nexts[0]
            op = last = self.operators[op_id]
            one = op.one_to_one_port(1 if plan.dag.edges[node, op_id]["port"] == "right" else 0)
            if one is None:
                return None
            if one is not IDENTITY:
                fns.append((op_id, one))
                ops.append(op)
            node = op_id
            nexts = plan.next_ops(op_id)
            if isinstance(op.spec, SendToSpec | PartitionBySpec) and not nexts:
                target = op.spec.stream_id
                if target in plan.streams:
                    break
                return None  # a table
            if isinstance(op.spec, PartitionBySpec | BroadcastSpec):
                return None
        if target is None or last is None or len(nexts) > 0:
            return None
        return OneToOnePath(fns, ops, last, target)

    def lone_reader(self, stream_id: str) -> Operator | None:
        """The operator reading ``stream_id`` (on its first input), where it is the only one."""
        node = stream_node(stream_id)
        nexts = [n for n in self.plan.next_ops(node) if n in self.operators]
        if len(nexts) != 1 or self.plan.dag.edges[node, nexts[0]]["port"] == "right":
            return None
        return self.operators[nexts[0]]

    def sender(self, stream_id: str, op_id: str) -> Emit:
        """The terminal of ``op_id`` writing to ``stream_id``."""
        key = (stream_id, op_id)
        sender = self._senders.get(key)
        if sender is None:
            sender = self._senders[key] = self._make_sender(stream_id, op_id)
        return sender


def task_copy(spec: Any) -> Any:
    """Each task gets its own copy of every user function object that has an ``init(ctx)``, as
    Samza deserializes one per task: its state (a table, counters) must not be shared between
    tasks. Plain functions, bound methods and objects without ``init`` stay the user's own."""
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        changes = {}
        for f in dataclasses.fields(spec):
            if f.init:
                old = getattr(spec, f.name)  # foreign: any dataclass's field, by its name
                new = task_copy(old)
                if new is not old:
                    changes[f.name] = new
        return dataclasses.replace(spec, **changes) if changes else spec
    if callable(getattr(spec, "init", None)) and not inspect.isfunction(  # foreign: a user's
            spec) and not inspect.ismethod(spec):
        try:
            return copy.deepcopy(spec)
        except Exception:  # something inside cannot be deep-copied (a lock, a client)
            return copy.copy(spec)
    return spec



def not_kv(stream_id: str, m: Any) -> TypeError:
    """The error for a message that is not a ``KV`` sent to a keyed (``KVSerde``) stream: every
    runner raises it, so none guesses a key."""
    text = repr(m)
    if len(text) > 60:
        text = text[:57] + "..."
    return TypeError(f"stream {stream_id!r} is keyed (KVSerde) but was sent a "
                     f"{type(m).__name__} ({text}): send KV(key, value) to it, e.g. "
                     f".map(lambda m: KV(key_of(m), m)) before send_to (KV(None, value) for no "
                     f"key)")



def record_sender(op_id: str, sink: StreamSink, rule: PartitionRule) -> Emit:
    """The terminal for a producer that takes records (``StreamSink`` with an ``encode``): the
    partition, key and value serialization and the buffer append in one frame for a plain
    ``KV``. Anything unusual (a None key or value, a bare message, a key the table cannot hold, a
    serde error) takes the rule and the codec's own path."""
    bufs, kser, vser = sink.append, sink.key, sink.value
    encode = cast(Callable[[Any], Any], sink.encode)  # a sink of records
    parts = rule.table

    def slow(m: Any) -> None:
        try:
            bufs[rule(m)](encode(m))
        except Exception as exc:
            raise OperatorFailure(op_id, exc) from exc

    if kser is None or vser is None or rule.fixed is not None or rule.chosen:
        # the codec writes KV keys its own way; or the application chooses partitions
        def send_records(m: Any) -> None:
            slow(m)
        return send_records

    def send_kv(m: Any) -> None:
        if type(m) is KV:
            k, v = m.key, m.value
            if v is not None and k is not None:  # None: no key, or a tombstone: the codec's
                try:
                    bufs[parts[k]]((kser(k), vser(v), None))
                    return
                except Exception:
                    pass
        slow(m)
    return send_kv


def op_nexts(plan: Any, op_id: str, spec: Any, emit: Callable[[str, str], Emit],
             sender: Callable[[str, str], Emit]) -> list[Emit]:
    """What an operator's outputs go to: ``emit(op id, port)`` of each downstream operator,
    and ``sender(stream id, op id)`` when it writes to a stream."""
    nexts = [emit(n, plan.dag.edges[op_id, n]["port"]) for n in plan.next_ops(op_id)]
    target = spec.stream_id if isinstance(spec, PartitionBySpec | BroadcastSpec | SendToSpec) \
        else None
    if target is not None:
        nexts.append(sender(target, op_id))
    late_to = late_target(spec)
    if late_to is not None:  # a window's (event-time join's) outputs: panes (pairs) go on,
        # late messages to late_to
        serde = plan.streams[late_to].descriptor.serde
        nexts = [_panes_only(e) for e in nexts]
        nexts.append(_late_only(sender(late_to, op_id), isinstance(serde, KVSerde)))
    return nexts


def _panes_only(emit: Emit) -> Emit:
    def panes(m: Any) -> list[Awaitable[None]] | None:
        return None if type(m) is LateMessage else emit(m)
    return panes


def _late_only(send: Emit, keyed: bool) -> Emit:
    """A window's late messages to its ``late_to`` stream: a keyed stream (``KVSerde``) gets
    ``KV(key, LateMessage)``, keyed by the message's own key when it is a ``KV``, else by the
    window key; any other stream the ``LateMessage``."""
    def late(m: Any) -> list[Awaitable[None]] | None:
        if type(m) is not LateMessage:
            return None
        if keyed:
            inner = m.message
            return send(KV(inner.key if type(inner) is KV else m.key, m))
        return send(m)
    return late


def operator_emit(op: Operator, port: int, nexts: list[Emit], meter: OpMeter | None = None
                  ) -> Emit:
    """The emit function of ``op`` on ``port`` followed by ``nexts``: fused when the operator
    gives at most one output on ``port`` (``one_to_one_port``, a join's too), else through its
    ``process``.
    With a ``meter``, the operator's own function is counted and timed (``metered``); an
    operator that passes every message on unchanged costs nothing and is not metered."""
    one = op.one_to_one_port(port)
    if one is not None:
        if meter is not None and one is not IDENTITY:
            one = metered(one, meter, True)
        return chain_one(op.op_id, one, nexts, IDENTITY)
    process = bind_port(op, port) if isinstance(op.spec, JoinSpec) else op.process
    if meter is not None:
        process = metered(process, meter, False)
    return chain(op.op_id, process, nexts)


def bind_port(op: Operator, port: int) -> Callable[[Any], Any]:
    process_port = op.process_port

    def process(m: Any) -> Any:
        return process_port(port, m)
    return process
