"""Joins whose keys are not the key their streams are partitioned by (docs/semantics.md rule 2).

A task holds one partition of each input (with ``job.elasticity.factor`` > 1, one key bucket of
it), so a stream-stream join meets two messages only when both sides put their key in the same
partition, and a ``join_table`` lookup finds a key only in the task whose partition the key
belongs to. Samza asks for a ``partitionBy`` first; so does this project.

- ``join_warnings``: what the planner can see. A side of a join whose messages come straight
  (through filters and merges only) from a keyed input, or from a ``partition_by``'s stream, has
  a known partition key: the message's ``KV.key`` (and, after a ``partition_by`` whose key and
  value functions read fields, the field of the value the key was read from). A join key
  function that reads none of these (``samza_dsl.fields.reads``) gives a warning naming the join
  and the fix. Where the planner cannot tell (a ``map`` before the join, a key function with a
  branch), it says nothing, and the run's check (``task.join.partition.check``) tells.
- ``checked_ports``: the join ports the run checks. Exempt are joins with a side read whole by
  every task (a broadcast stream), lookups into a remote table, and lookups into a table every
  task holds whole (written only from broadcast streams).

>>> from samza_dsl import StreamApplication
>>> from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
>>> from samza_dsl.systems import MemorySystem
>>> app, mem = StreamApplication("shop"), MemorySystem()
>>> serde = KVSerde(StringSerde(), JsonSerde())
>>> orders = app.input(mem.input("orders", serde=serde, partitions=4))
>>> payments = app.input(mem.input("payments", serde=serde, partitions=4))
>>> orders.join(payments, key=lambda kv: kv.value["order_id"], other_key=lambda kv: kv.key,
...             combine=lambda o, p: o, ttl=60_000, name="paid").sink(print, name="out")
>>> print(join_warnings(app.plan())[0])  # doctest: +ELLIPSIS
join 'shop-1-join-paid': its left key kv.value['order_id'] is not the key stream 'orders' is
partitioned by (its KV key, kv.key); ... .partition_by(lambda kv: kv.value['order_id'],
name=...) before the join, ...
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from samza_dsl.fields import Path, field_path, reads
from samza_dsl.spec import (
    FilterSpec,
    JoinSpec,
    JoinTableSpec,
    MergeSpec,
    OpSpec,
    PartitionBySpec,
    SendToSpec,
    node_stream_id,
)

if TYPE_CHECKING:
    from .plan import ExecutionPlan

__all__ = ["join_warnings", "checked_ports", "port_roots", "key_text", "fix_text",
           "SIDES"]

SIDES = ("left", "right")
_KEY: Path = (("attr", "key"),)


def port_roots(plan: ExecutionPlan, node: str) -> set[str]:
    """The streams (inputs or intermediate streams) whose messages reach ``node``."""
    sid = node_stream_id(node)
    if sid is not None:
        return {sid}
    out: set[str] = set()
    for upstream in plan.app.operator(node).inputs:
        out |= port_roots(plan, upstream)
    return out


def _broadcast(plan: ExecutionPlan, sid: str) -> bool:
    return plan.streams[sid].kind == "broadcast"


def _whole_table(plan: ExecutionPlan, table_id: str) -> bool:
    """Whether every task holds table ``table_id`` whole: a remote table, or a local one
    written only from broadcast streams."""
    if table_id in plan.app.remote_tables:
        return True
    table = plan.app.tables.get(table_id)
    if table is None or table.side_inputs:
        return False
    writers = [op for op in plan.app.operators
               if isinstance(op, SendToSpec) and op.table_id == table_id]
    roots = [port_roots(plan, op.op_id) for op in writers]
    return bool(writers) and all(_broadcast(plan, s) for r in roots for s in r)


def checked_ports(plan: ExecutionPlan) -> dict[str, tuple[bool, ...]]:
    """Join and join_table op id -> for each port, whether the run checks where its keys
    belong (see the module's docstring)."""
    out: dict[str, tuple[bool, ...]] = {}
    for op in plan.app.operators:
        if isinstance(op, JoinSpec):
            whole = any(all(_broadcast(plan, s) for s in port_roots(plan, node))
                        for node in op.inputs)
            out[op.op_id] = (not whole, not whole)
        elif isinstance(op, JoinTableSpec):
            out[op.op_id] = (not _whole_table(plan, op.table_id),)
    return out


def _partition_key(plan: ExecutionPlan, node: str) -> frozenset[Path] | None:
    """The paths into a message reaching ``node`` whose value is the key its stream is
    partitioned by, or None where the planner cannot tell."""
    sid = node_stream_id(node)
    if sid is None:
        op = plan.app.operator(node)
        if isinstance(op, FilterSpec):
            return _partition_key(plan, op.inputs[0])
        if isinstance(op, MergeSpec):
            found = [_partition_key(plan, n) for n in op.inputs]
            if any(f is None for f in found):
                return None
            return frozenset.intersection(*found)  # type: ignore[arg-type]
        return None
    stream = plan.streams[sid]
    if stream.kind == "input":
        return frozenset({_KEY}) if stream.keyed else None
    inter = plan.app.intermediates.get(sid)
    producer = plan.app.operator(inter.producer) if inter is not None else None
    if not isinstance(producer, PartitionBySpec):
        return None
    paths = {_KEY}
    key = field_path(producer.key_fn)
    value: Path | None = () if producer.value_fn is None else field_path(producer.value_fn)
    if key is not None and value is not None and key[:len(value)] == value:
        paths.add((("attr", "value"), *key[len(value):]))
    return frozenset(paths)


def _arg(fn: Any) -> str:
    """The name a function gives its argument, for showing its reads (``m`` if unknown)."""
    code = getattr(fn, "__code__", None)
    if type(fn) is types.FunctionType and code is not None and code.co_argcount >= 1:
        return str(code.co_varnames[0])
    return "m"


def _path_text(arg: str, path: Path) -> str:
    return arg + "".join(f".{k}" if kind == "attr" else f"[{k!r}]" for kind, k in path)


def key_text(fn: Callable[[Any], Any] | None) -> str | None:
    """What a key function reads, as code (``kv.value['order_id']``), or None if unknown."""
    path = field_path(fn)
    return None if path is None else _path_text(_arg(fn), path)


def _misjoin(plan: ExecutionPlan, node: str, fn: Callable[[Any], Any] | None
             ) -> tuple[str, str, str] | None:
    """(the key function's reads as text, the stream, its partition key as text) where ``fn``
    of messages reaching ``node`` reads nothing the stream is partitioned by; else None."""
    roots = sorted(port_roots(plan, node))
    elastic = plan.config.job.elasticity_factor
    if all(plan.streams[s].partitions == 1 for s in roots) and elastic == 1:
        return None  # one partition: every key is in it
    known = _partition_key(plan, node)
    read = [_KEY] if fn is None else (reads(fn, 1) or [frozenset()])[0]
    if known is None or not read:
        return None
    if any(r == k[:len(r)] for r in read for k in known):
        return None  # it reads the partition key, or something holding it
    arg = _arg(fn)
    path = field_path(fn)
    text = _path_text(arg, path) if path is not None else \
        "computed from " + ", ".join(_path_text(arg, r) for r in sorted(read))
    shown = " or ".join(_path_text(arg, k) for k in sorted(known))
    first = roots[0]
    what = "its KV key" if plan.streams[first].kind == "input" else \
        f"the key of partition_by {first!r}"
    return text, first, f"{what}, {shown}"


def fix_text(op: OpSpec, port: int) -> str:
    """What to do about a join side whose key is not its stream's partition key."""
    fn = _ports(op)[port][2]
    text = key_text(fn)
    call = "partition_by(<the key function>, name=...)" if text is None else \
        f"partition_by(lambda {_arg(fn)}: {text}, name=...)"
    if isinstance(op, JoinSpec):
        side = SIDES[port]
        return (f"Repartition the {side} side by its join key first: .{call} before the "
                f"join, and join on the KV key it gives")
    return (f"Repartition the stream by the lookup key first: .{call} before join_table, or "
            f"key the stream's records by it where they are produced")


def join_warnings(plan: ExecutionPlan) -> list[str]:
    """One line for each join side whose key the planner sees is not its stream's partition
    key (see the module's docstring)."""
    out: list[str] = []
    checked = checked_ports(plan)
    for op in plan.app.operators:
        if op.op_id not in checked or not any(checked[op.op_id]):
            continue
        for port, node, fn in _ports(op):
            found = _misjoin(plan, node, fn)
            if found is None:
                continue
            text, sid, partitioned = found
            rest = (f"{fix_text(op, port)} (the run checks where join keys belong: "
                    f"task.join.partition.check)")
            if isinstance(op, JoinSpec):
                out.append(
                    f"join {op.op_id!r}: its {SIDES[port]} key {text} is not the key stream "
                    f"{sid!r} is partitioned by ({partitioned}); unless the two are always "
                    f"equal, messages of one join key are read by different tasks and most "
                    f"pairs never meet. {rest}")
            else:
                assert isinstance(op, JoinTableSpec)
                out.append(
                    f"join_table {op.op_id!r} on table {op.table_id!r}: its key {text} is not "
                    f"the key stream {sid!r} is partitioned by ({partitioned}); unless the two "
                    f"are always equal, most lookups go to a task whose part of the table "
                    f"lacks the key, and come back None. {rest}")
    return out


def _ports(op: OpSpec) -> list[tuple[int, str, Callable[[Any], Any] | None]]:
    if isinstance(op, JoinSpec):
        return [(0, op.inputs[0], op.key_fn), (1, op.inputs[1], op.other_key_fn)]
    if isinstance(op, JoinTableSpec):
        return [(0, op.inputs[0], op.key_fn)]
    return []
