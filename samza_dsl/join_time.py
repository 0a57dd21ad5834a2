"""The event time of each side of an event-time join (``join(..., within=...)``,
docs/semantics.md rule 9, "Beyond Samza").

A side's event time is the ``event_time`` declared on the input it reads from, applied to the
message as it reaches the join, as the runtime's watermarks take it. Walking back from the side
through the steps before it: a ``partition_by`` without a value function wraps the message in a
``KV`` (the function is applied to its value), ``filter``, ``merge`` and ``broadcast`` keep it as
it is, and past any other step (a ``map``...) the message is taken as it reaches the join, so
such a step must keep what ``event_time`` reads. Every input a side reads from must declare its
event time; a side fed by several reads it with the first one's ``event_time`` and the largest
``max_out_of_orderness`` of them.

>>> from datetime import timedelta
>>> from samza_dsl import StreamApplication
>>> from samza_dsl.systems import MemorySystem
>>> app, mem = StreamApplication("demo"), MemorySystem()
>>> a = app.input(mem.input("a", event_time=lambda m: m["ts"],
...                         max_out_of_orderness=timedelta(seconds=5)))
>>> by_k = a.partition_by(lambda m: m["k"], name="by-k")
>>> side = side_time(app._inputs, app._intermediates, app._ops, by_k._node, "j", "left")
>>> side.input_id, side.unwrap, side.bound_ms
('a', 1, 5000)

What an event-time join adds to the out-of-orderness of what reads its outputs (``join_lag``):
its ``within`` and its inputs' bound.

>>> b = app.input(mem.input("b", event_time=lambda m: m["ts"]))
>>> j = a.join(b, key=lambda m: m["k"], other_key=lambda m: m["k"], combine=lambda l, r: l,
...            name="j", within=timedelta(seconds=60))
>>> join_lag(app._intermediates, app._ops, j._node), join_lag(app._intermediates, app._ops, a._node)
(65000, 0)
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import PlanError
from .spec import (
    IntermediateStreamSpec,
    JoinSpec,
    OpSpec,
    PartitionBySpec,
    SideTime,
    node_stream_id,
)
from .systems import InputDescriptor

__all__ = ["side_time", "join_lag"]

_SAME = frozenset({"filter", "merge", "broadcast"})


def side_time(inputs: Mapping[str, InputDescriptor],
              intermediates: Mapping[str, IntermediateStreamSpec], ops: Mapping[str, OpSpec],
              node: str, join: str, side: str) -> SideTime:
    """How the join ``join`` reads the event time of its ``side`` ("left"/"right") at ``node``,
    in an application of these input streams, intermediate streams and operators (by id).

    Raises:
        PlanError: an input the side reads from declares no event time.
    """
    leaves: list[tuple[str, int]] = []  # (input id, KV wraps to take off), first path first
    seen: set[str] = set()

    def walk(n: str, wraps: int | None) -> None:
        # wraps: the partition_by KVs between here and the join (None: a step in between
        # reshapes the message, which is taken as it reaches the join)
        if n in seen:
            return
        seen.add(n)
        sid = node_stream_id(n)
        if sid is not None:
            if sid in inputs:
                leaves.append((sid, wraps or 0))
                return
            inter = intermediates.get(sid)
            if inter is None:
                return
            if inter.late:
                walk(inter.producer, None)
                return
            producer = ops[inter.producer]
            if isinstance(producer, PartitionBySpec):
                walk(producer.op_id, None if wraps is None or producer.value_fn is not None
                     else wraps + 1)
            else:
                walk(producer.op_id, wraps)
            return
        op = ops.get(n)
        if op is None:
            return
        if op.opcode == "partition_by":  # reached through its stream (above)
            for i in op.inputs:
                walk(i, wraps)
            return
        keep = op.opcode in _SAME
        for i in op.inputs:
            walk(i, wraps if keep else None)

    walk(node, 0)
    undeclared = [sid for sid, _ in leaves if inputs[sid].event_time is None]
    if undeclared or not leaves:
        which = ", ".join(repr(s) for s in undeclared) or "none"
        raise PlanError(f"join {join!r}: its {side} side reads from input(s) {which} without "
                        f"declared event time, and within= joins in event time: declare it on "
                        f"the input, e.g. system.input(..., event_time=lambda m: m['ts'], "
                        f"max_out_of_orderness=timedelta(seconds=5)), or join in processing "
                        f"time with ttl=")
    first, unwrap = leaves[0]
    fn = inputs[first].event_time
    assert fn is not None
    bound = max(inputs[sid].max_out_of_orderness_ms for sid, _ in leaves)
    return SideTime(first, fn, unwrap, bound, join_lag(intermediates, ops, node))


def join_lag(intermediates: Mapping[str, IntermediateStreamSpec], ops: Mapping[str, OpSpec],
             node: str) -> int:
    """How far (ms) behind the latest event time of the inputs the messages at ``node`` may
    carry their event times because of the event-time joins before it: a join's output pairs
    messages up to ``within`` apart, and a ``how="left"``/``"outer"`` join lets an unmatched
    message go once its side's watermark, which stays its inputs' bound behind, has passed
    its time plus ``within``. So each join on the way adds its ``within`` and its inputs'
    bound (and what the joins before it add); over several ways, the largest. 0 with no
    event-time join before ``node``.

    An event-time window or join after such a join allows its messages that much more
    out-of-orderness than declared (docs/semantics.md, rule 9), so that for input in
    event-time order (or within its bound) none of the join's outputs is late, whichever
    input is read first (the module's example).
    """
    seen: set[str] = set()

    def walk(n: str) -> int:
        if n in seen:
            return 0
        seen.add(n)
        sid = node_stream_id(n)
        if sid is not None:
            inter = intermediates.get(sid)
            return 0 if inter is None else walk(inter.producer)
        op = ops.get(n)
        if op is None:
            return 0
        if isinstance(op, JoinSpec) and op.event_time:
            return op.within_ms + max((s.bound_ms + s.lag_ms for s in op.sides), default=0)
        return max((walk(i) for i in op.inputs), default=0)

    return walk(node)
