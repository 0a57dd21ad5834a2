"""Every runner equals the reference model (``samza_dsl.testing.model``, docs/semantics.md rules 7-10).

Hypothesis draws a pipeline (an optional ``merge`` of a second input, map / filter / flat_map, an
optional async step, 0-2 ``partition_by`` hops, an optional ``broadcast`` after them, elasticity
1 or 2) ending in one of (``Case.end``):

- ``window``: an event-time window of any kind, its panes mapped to rows, then, with
  ``post_async``, an async step with a small sleep before the output;
- ``join`` / ``table``: a stream-stream join on processing time (``ttl=``), or a stream-table
  join of a table the same stream fills (even values into the table, odd ones looked up);
- ``etjoin``: the event-time stream-stream join (``within=``, ``how`` inner or left) of even
  values with odd ones, on an input that declares its event time, with no async step before it.
  Where one producer feeds each join instance in a fixed order (as for ``beyond`` windows),
  messages beyond the input's bound are drawn too, and which are late is fixed; elsewhere its
  messages stay within the bound, none is late, and the join's outputs (every pair of a key at
  most ``within`` apart, and with ``left`` each left message that met none) do not depend on the
  order messages reach it. Spark draws it in place of ``join``, which it refuses (a
  reprocessing has no processing time); with ``then_window``, the join's outputs then go to a
  keyed tumbling window counting them per left key in panes of the left message's event time:
  a pair is made when its second message comes, so those times come out of order by up to
  ``within`` (and the inputs' bound), which the window allows (rule 9), and none is late;
- ``count``: a stateful ``map`` keeping each key's running count in a local table with a
  changelog (``ctx.table("counts")``): each key gives 1, 2, ... n over its n messages;
- ``side``: a ``join_table`` against a table filled by a side input (``side_data``: per
  partition, puts of that partition's own keys, a None value deleting). A side input is read
  whole before the task's other inputs, and partition p fills the task reading partition p (with
  elasticity, each virtual task its key bucket's part), so every message is looked up in its
  partition's final table. Drawn with no hop and no broadcast: the messages stay in their
  partition.

Event-time input, each partition within a declared out-of-orderness, some partitions empty. A
merge interleaves its inputs: a window's watermark is the minimum over every partition feeding
it, of either input. After a broadcast every task of the job, and each of its virtual tasks,
reads the whole stream (rules 2, 11 and 18): the model is one window (or join, or count) over
every channel, as after a hop, and each output, late count and late message is there
``Case.copies`` times (the widest partitioned stream's partitions times the elasticity factor).
``TestRunner``, the embedded local system (``LocalRunner`` on a fresh ``job.dir``) and
``SparkRunner`` must give the model's outputs and late counts. Where a single producer feeds each
window instance in a fixed order (no async step before it; no hop or broadcast, or one input
partition and, for a global window, elasticity 1), messages beyond the bound are drawn too:
which are late is then fixed by the rules (whatever is in flight after the window), and so is
the exact content of every pane. Elsewhere the order messages reach a window is not fixed, so
panes are compared on what the rules fix whatever that order (see ``comparable``). Joins,
counts and lookups are compared as multisets, as are panes (an async step after the window
may reorder them).

Environment variables:

- ``SAMZA_DSL_MODEL_EXAMPLES=3000``: a long check, 3,000 examples per streaming runner and 600
  on Spark (about 8 minutes on two cores; docs/semantics.md, "The reference model"). CI runs 60
  and 20.
- ``SAMZA_DSL_MODEL_ALL=1``, or a comma-separated few names of ``KNOWN``: also draws the cases
  the runners get wrong today, and adds the smallest case of each (``SMALLEST``) as an explicit
  example, so the switch finds the difference at once. Without it,
  ``test_the_smallest_cases`` checks that each known difference is still there (and fails once
  it is fixed: then take its name out of ``KNOWN``), and that the fixed ones stay fixed.
- ``MODEL_EXCLUDE``: comma-separated window kinds (``keyed_tumbling``, ``keyed_session``,
  ``tumbling``, ``keyed_hopping``, ``hopping``) left out of the draw, to narrow a failure down
  to the others.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runtime import LocalRunner
from runtime.spark import SparkRunner
from samza_dsl import KV, AccumulationMode, LateMessage, StreamApplication, Triggers, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem, MemorySystem
from samza_dsl.testing import TestRunner
from samza_dsl.testing.model import (
    Advance,
    Arrive,
    ModelPane,
    event_time_ms,
    interleave,
    interval_join,
    run_window,
    stream_join,
    table_join,
)

#: cases that fail on main today (see the module docstring); SAMZA_DSL_MODEL_ALL=1 draws them too
KNOWN: set[str] = set()
_ALL = os.environ.get("SAMZA_DSL_MODEL_ALL", "")
ALL = KNOWN if _ALL == "1" else set(_ALL.split(",")) & KNOWN  # or a comma-separated few
EXCLUDE = os.environ.get("MODEL_EXCLUDE", "").split(",")  # window kinds not to draw
LONG = int(os.environ.get("SAMZA_DSL_MODEL_EXAMPLES", "0"))
STREAMING_EXAMPLES = LONG or 60
SPARK_EXAMPLES = max(LONG // 5, 20) if LONG else 20
RUN_TIMEOUT = 60.0
HOUR = timedelta(hours=1)  # time triggers this long never fire in a test run (see the model)
APP = "model"
WINDOW_ID = f"{APP}-1-window-w"
JOIN_ID = f"{APP}-1-join-j"
SERDE = KVSerde(StringSerde(), JsonSerde())


@dataclass(frozen=True)
class Case:
    data: dict[int, list[tuple[str, int, int]]]  # partition -> (key, event time ms, value)
    ops: tuple[str, ...]  # map, filter, flat_map, async, hop
    end: str  # window, join (stream-stream), etjoin (event time), table (stream-table), count, side
    kind: str
    size_ms: int
    early: str | None
    late: str | None
    lateness_ms: int
    mode: AccumulationMode
    declared: bool  # event time on the input (else only on the window)
    input_bound_ms: int
    window_bound_ms: int
    elasticity: int
    beyond: bool  # some messages beyond the declared bound
    async_order: str = "none"  # the async step's ordering
    async_one: bool = False  # the async steps are async_map, not async_flat_map
    shared_keys: bool = False  # a key in several partitions (only with a hop or a broadcast)
    idle_timeout_ms: int = 0  # on the input
    #: a second input "in2" merged into the first before the ops, partition -> messages
    #: (empty: no merge)
    merged: dict[int, list[tuple[str, int, int]]] = field(default_factory=dict)
    hop_ms: int = 0  # hopping windows
    combine: bool = False  # hopping windows: per-hop accumulators merged by combine
    #: end="side": the side input filling the table, partition -> (key, value; None deletes)
    side_data: dict[int, list[tuple[str, int | None]]] = field(default_factory=dict)
    bcast: bool = False  # a broadcast after the ops (after any hop)
    post_async: bool = False  # end="window": an async step after the window's row map
    within_ms: int = 0  # end="etjoin": how far apart in event time a pair may be
    how: str = "inner"  # end="etjoin": inner or left
    #: end="etjoin": the join's outputs counted per left key in keyed tumbling panes of
    #: ``size_ms`` by the left message's event time (rows ``{"k", "p", "n"}``)
    then_window: bool = False
    #: end="table": the table's ttl on its values' event time (0: none); drawn only where one
    #: task reads the partition's messages in their order (the table's clock is the task's)
    table_ttl_ms: int = 0

    @property
    def global_window(self) -> bool:
        """A window with one pane per time for the whole task (no key)."""
        return self.kind in ("tumbling", "hopping")

    @property
    def hops(self) -> int:
        return self.ops.count("hop")

    @property
    def crossings(self) -> int:
        """Intermediate streams on the way: the hops and the broadcast."""
        return self.hops + self.bcast

    @property
    def tasks(self) -> int:
        """The tasks reading a broadcast stream, each the whole of it (rules 2, 11 and 18):
        one per partition of the widest partitioned stream the job reads (every input here has
        ``len(data)`` partitions, and so has every hop, whose count is the largest of the
        inputs' and outputs'), times the elasticity factor."""
        return len(self.data) * self.elasticity

    @property
    def copies(self) -> int:
        """How many times each output of the model is there: once per task reading the
        broadcast stream, else once."""
        return self.tasks if self.bcast else 1

    @property
    def fixed_order(self) -> bool:
        """One producer feeds each window instance, in an order the rules fix: which messages
        are late, and every pane, are fixed. (With elasticity, the virtual tasks of one
        partition are several producers of an intermediate stream; each key is one's own, so
        only a window's global panes see them interleave.)"""
        return ("async" not in self.ops and not self.merged
                and (self.crossings == 0 or (len(self.data) == 1 and (
                    self.elasticity == 1 or not self.global_window))))

    @property
    def fixed_per_key(self) -> bool:
        """Each key's messages reach the window or join in an order the rules fix."""
        return (not self.shared_keys and ("async" not in self.ops or self.async_order == "key")
                and (not self.global_window or self.fixed_order))


# -- the pipeline, as a runner runs it and as the model sees it ------------------------------------

def apply_op(op: str, kv: KV[str, Any]) -> list[KV[str, Any]]:
    """What each op does to one message (the async step and a hop change nothing)."""
    v = kv.value
    if op == "map":
        return [KV(kv.key, {"t": v["t"], "v": v["v"] * 2 + 1})]
    if op == "filter":
        return [kv] if v["v"] % 3 != 0 else []
    if op == "flat_map":
        return [kv, KV(kv.key, {"t": v["t"], "v": v["v"] + 1000})] if v["v"] % 2 else [kv]
    return [kv]


def side(kv: KV[str, Any]) -> str:
    """Where a message goes at a join: even values left (or into the table), odd ones right."""
    return "left" if kv.value["v"] % 2 == 0 else "right"


def trigger(name: str | None) -> Any:
    return {None: None, "count2": Triggers.count(2), "count1": Triggers.count(1),
            "repeat2": Triggers.repeat(Triggers.count(2)),
            "any3": Triggers.any(Triggers.count(3), Triggers.time_since_first_message(HOUR)),
            "repeat_any": Triggers.repeat(Triggers.any(
                Triggers.count(2), Triggers.time_since_last_message(HOUR))),
            "time": Triggers.time_since_first_message(HOUR)}[name]


def window_of(case: Case) -> Any:
    def et(kv: Any) -> float:
        return kv.value["t"] / 1000.0

    def key(kv: Any) -> str:
        return kv.key

    bound = timedelta(milliseconds=case.window_bound_ms) if case.window_bound_ms else None
    size = timedelta(milliseconds=case.size_ms)
    if case.kind == "tumbling":
        w = Windows.tumbling(size, event_time=et, max_out_of_orderness=bound)
    elif case.kind == "keyed_tumbling":
        w = Windows.keyed_tumbling(key, size, event_time=et, max_out_of_orderness=bound)
    elif case.kind in ("hopping", "keyed_hopping"):
        # a pane's value is the list of its messages: kept per hop, or folded per hop into
        # lists that combine concatenates (then in hop order, compared as a multiset)
        agg: dict[str, Any] = dict(init=list, fold=lambda kv, acc: [*acc, kv],
                                   combine=lambda a, b: a + b) if case.combine else {}
        hop = timedelta(milliseconds=case.hop_ms)
        if case.kind == "hopping":
            w = Windows.hopping(size, hop, event_time=et, max_out_of_orderness=bound, **agg)
        else:
            w = Windows.keyed_hopping(key, size, hop, event_time=et, max_out_of_orderness=bound,
                                      **agg)
    else:
        w = Windows.keyed_session(key, size, event_time=et, max_out_of_orderness=bound)
    if case.early:
        w = w.early_trigger(trigger(case.early))
    if case.late:
        w = w.late_trigger(trigger(case.late))
    if case.lateness_ms:
        w = w.allowed_lateness(timedelta(milliseconds=case.lateness_ms))
    return w.accumulation(case.mode)


def pair(left: Any, right: Any) -> dict[str, Any]:
    return {"l": [left.value["t"], left.value["v"]],
            "r": None if right is None else [right.value["t"], right.value["v"]]}


def keyed_pair(left: Any, right: Any) -> dict[str, Any]:
    """``pair`` with the left message's key, for a window after the join."""
    return {"k": left.key, **pair(left, right)}


def pair_time(o: dict[str, Any]) -> float:
    """A join output's event time in a window after the join: its left message's."""
    return o["l"][0] / 1000.0


def pair_key(o: dict[str, Any]) -> str:
    return o["k"]


def window_rows(case: Case, outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``then_window``'s rows of the join's ``outputs``: each key's count per pane."""
    counts = Counter((o["k"], o["l"][0] - o["l"][0] % case.size_ms) for o in outputs)
    return [{"k": k, "p": str(start), "n": n} for (k, start), n in counts.items()]


def build(case: Case, system: Any, name: str = APP) -> StreamApplication:
    app = StreamApplication(name, config={"job.elasticity.factor": case.elasticity,
                                         "task.max.concurrency": 8})

    def et(kv: Any) -> float:
        return kv.value["t"] / 1000.0

    bound = timedelta(milliseconds=case.input_bound_ms) if case.input_bound_ms else None

    def read(sid: str, partitions: int) -> Any:
        return app.input(system.input(sid, serde=SERDE, partitions=partitions,
                                      event_time=et if case.declared else None,
                                      max_out_of_orderness=bound if case.declared else None,
                                      idle_timeout=timedelta(milliseconds=case.idle_timeout_ms)
                                      if case.idle_timeout_ms else None))
    stream = read("in", len(case.data))
    if case.merged:
        stream = stream.merge(read("in2", len(case.merged)), name="m")
    for i, op in enumerate(case.ops):
        if op == "hop":
            stream = stream.partition_by(lambda kv: kv.key, lambda kv: kv.value, serde=SERDE,
                                         name=f"hop{i}")
        elif op == "async":
            async def slow(kv: Any) -> Any:
                import asyncio
                await asyncio.sleep((kv.value["v"] % 4) * 0.001)
                return kv if case.async_one else [kv]
            stream = (stream.async_map if case.async_one else stream.async_flat_map)(
                slow, name=f"op{i}", ordering=case.async_order)
        elif op == "filter":
            stream = stream.filter(lambda kv, op=op: bool(apply_op(op, kv)), name=f"op{i}")
        elif op == "map":
            stream = stream.map(lambda kv, op=op: apply_op(op, kv)[0], name=f"op{i}")
        else:
            stream = stream.flat_map(lambda kv, op=op: apply_op(op, kv), name=f"op{i}")
    if case.bcast:
        stream = stream.broadcast(serde=SERDE, name="bcast")
    out = app.output(system.output("out", serde=JsonSerde(), partitions=1))
    left = stream.filter(lambda kv: side(kv) == "left", name="left")
    right = stream.filter(lambda kv: side(kv) == "right", name="right")
    if case.end == "join":
        left.join(right, key=lambda kv: kv.key, other_key=lambda kv: kv.key, combine=pair,
                  ttl=HOUR, name="j").send_to(out)
    elif case.end == "etjoin":
        joined = left.join(right, key=lambda kv: kv.key, other_key=lambda kv: kv.key,
                           combine=keyed_pair if case.then_window else pair,
                           within=timedelta(milliseconds=case.within_ms), how=case.how,
                           name="j")
        if case.then_window:
            joined = joined.window(Windows.keyed_tumbling(
                pair_key, timedelta(milliseconds=case.size_ms), init=lambda: 0,
                fold=lambda o, n: n + 1, event_time=pair_time), name="jw").map(
                lambda p: {"k": p.key.key, "p": p.key.pane_id, "n": p.message}, name="jrow")
        joined.send_to(out)
    elif case.end == "table":
        table = app.table("t", serde=SERDE, **({} if not case.table_ttl_ms else {
            "ttl": timedelta(milliseconds=case.table_ttl_ms),
            "ttl_event_time": lambda v: v["t"] / 1000}))
        left.send_to(table)
        right.join_table(table, combine=pair, name="jt").send_to(out)
    elif case.end == "count":
        app.table("counts", serde=SERDE)
        stream.map(RunningCount(), name="count").send_to(out)
    elif case.end == "side":
        table = app.table("side", serde=SERDE, processor=lambda kv: [kv], side_inputs=[
            system.input("side", serde=SERDE, partitions=len(case.data))])
        stream.join_table(table, combine=looked_up, name="js").send_to(out)
    else:
        late_to = app.output(system.output("late", serde=JsonSerde(), partitions=1))
        panes = (stream.window(window_of(case), name="w", late_to=late_to)
                 .map(lambda p: {"k": p.key.key, "p": p.key.pane_id, "f": p.firing.name,
                                 "m": [[kv.value["t"], kv.value["v"]] for kv in p.message]},
                      name="row"))
        if case.post_async:
            async def later(row: dict[str, Any]) -> Any:
                import asyncio
                await asyncio.sleep((len(row["m"]) % 3) * 0.001)
                return row if case.async_one else [row]
            panes = (panes.async_map if case.async_one else panes.async_flat_map)(
                later, name="after")
        panes.send_to(out)
    return app


class RunningCount:
    """A stateful map: each key's running count in the task's table ``counts`` (with a
    changelog), emitted as ``{"k": key, "n": count}``."""

    def init(self, ctx: Any) -> None:
        self.table = ctx.table("counts")

    def __call__(self, kv: KV[str, Any]) -> dict[str, Any]:
        n = (self.table.get(kv.key) or 0) + 1
        self.table.put(kv.key, n)
        return {"k": kv.key, "n": n}


def looked_up(m: KV[str, Any], record: KV[str, Any] | None) -> dict[str, Any]:
    """A message joined with the side table: its (t, v) and the table's value or None."""
    return {"k": m.key, "l": [m.value["t"], m.value["v"]],
            "r": None if record is None else record.value}


def main_inputs(case: Case) -> dict[str, dict[int, list[KV[str, Any]]]]:
    """Each input's messages by partition, but for the side input."""
    out = {"in": case.data} | ({"in2": case.merged} if case.merged else {})
    return {sid: {p: [KV(k, {"t": t, "v": v}) for k, t, v in msgs] for p, msgs in data.items()}
            for sid, data in out.items()}


def inputs(case: Case) -> dict[str, dict[int, list[KV[str, Any]]]]:
    """Each input's messages by partition, the side input's too."""
    side = {"side": {p: [KV(k, v) for k, v in msgs] for p, msgs in case.side_data.items()}}
    return main_inputs(case) | (side if case.end == "side" else {})


def channels_of(case: Case) -> dict[tuple[str, int], list[tuple[list[Any], float | None]]]:
    """Each input partition, ``(stream, partition)``, as a channel: per message, what it causes
    at the end of the pipeline and the partition's progress after it (rule 8)."""
    channels: dict[tuple[str, int], list[tuple[list[Any], float | None]]] = {}
    for sid, parts in main_inputs(case).items():
        for p, msgs in parts.items():
            latest: float | None = None
            handouts: list[tuple[list[Any], float | None]] = []
            for kv in msgs:
                out = [kv]
                for op in case.ops:
                    out = [o for m in out for o in apply_op(op, m)]
                times = [m.value["t"] for m in out] if not case.declared else [kv.value["t"]]
                if times:
                    latest = max(times) if latest is None else max(latest, max(times))
                progress = None if latest is None else latest - (case.input_bound_ms
                                                                 if case.declared else 0)
                handouts.append((out, progress))
            channels[(sid, p)] = handouts
    return channels


def model(case: Case, *, by_event_time: bool = False
          ) -> tuple[list[Any], dict[str, Any], list[Any]]:
    """The model's outputs (panes, join results, counts), late counts and late messages.
    ``by_event_time``: each task gets its messages in event-time order (as Spark hands them
    where the input declares event time). After a broadcast every task (each virtual task)
    reads the whole stream: it is one instance over every channel, as after a hop, whose
    outputs, late counts and late messages are there once per task (``Case.copies``)."""
    outputs, late, late_messages = one_reader(case, by_event_time=by_event_time)
    n = case.copies
    return (outputs * n, {w: {s: c * n for s, c in by.items()} for w, by in late.items()},
            late_messages * n)


def one_reader(case: Case, *, by_event_time: bool = False
               ) -> tuple[list[Any], dict[str, Any], list[Any]]:
    """The model's outputs, late counts and late messages but for the copies a broadcast
    makes."""
    channels = channels_of(case)
    if case.end == "side":
        # partition p of the side input fills the table of the task reading partition p of
        # the inputs, whole before the task reads anything else (a bootstrap input)
        out: list[Any] = []
        for p, puts in sorted(case.side_data.items()):
            arrivals = [("put", KV(k, v)) for k, v in puts] + [
                ("message", m) for (_, q), c in channels.items() if q == p
                for got, _ in c for m in got]
            out.extend(table_join(arrivals, combine=looked_up))
        return out, {}, []
    if case.end != "window":
        # keys are a partition's own, a task's join state is per key: a partition at a time
        arrivals = [m for c in channels.values() for out, _ in c for m in out]
        if by_event_time:
            arrivals.sort(key=lambda m: m.value["t"])
        if case.end == "count":  # a key's running count, 1 to its number of messages
            return [{"k": k, "n": i} for k, n in Counter(m.key for m in arrivals).items()
                    for i in range(1, n + 1)], {}, []
        if case.end == "etjoin":
            joined, late, late_messages = event_time_join(case, channels)
            # a window after the join: none of its outputs is late there (rule 9)
            return (window_rows(case, joined) if case.then_window else joined), late, \
                late_messages
        if case.end == "join":
            return stream_join([(side(m), m, 0) for m in arrivals], key=lambda kv: kv.key,
                               other_key=lambda kv: kv.key, combine=pair,
                               ttl_ms=HOUR.total_seconds() * 1000), {}, []
        return table_join([("put" if side(m) == "left" else "message", m) for m in arrivals],
                          combine=pair, ttl_ms=case.table_ttl_ms or None,
                          event_time=(lambda v: v["t"] / 1000) if case.table_ttl_ms else None
                          ), {}, []
    w = window_of(case)
    last = (f"{APP}-1-broadcast-bcast" if case.bcast else
            f"{APP}-1-partition_by-hop{len(case.ops) - 1 - case.ops[::-1].index('hop')}"
            if case.hops else None)

    def stream(channel: Any) -> str:
        """Where a channel's messages come into the window's task: the last intermediate
        stream, or the input."""
        return last or channel[0]

    if case.crossings:
        # keyed panes: which task holds a key does not change them; after a broadcast, each
        # task holds every key
        instances = [channels]
    else:  # a task per partition number: partition p of each input
        instances = [{n: c for n, c in channels.items() if n[1] == p}
                     for p in sorted({p for _, p in channels})]
    panes: list[ModelPane] = []
    late: Counter[str] = Counter()
    late_messages: list[Any] = []
    for chans in instances:
        steps = interleave(chans, stream=stream)
        if case.kind == "keyed_session":
            steps = in_time_order(w, steps)
        result = run_window(w, steps)
        panes.extend(result.panes)
        late.update(result.late_counts)
        late_messages.extend(m for m, _ in result.late)
    return panes, ({WINDOW_ID: dict(late)} if late else {}), late_messages


def event_time_join(case: Case, channels: dict[Any, Any]
                    ) -> tuple[list[Any], dict[str, Any], list[Any]]:
    """The outputs, late counts and late messages of ``case``'s event-time join:
    ``interval_join`` per task as a window is (``Case.beyond``: one producer feeds each join
    instance in a fixed order, and which messages are late is fixed), else over every channel
    as one instance: nothing of the draw is late then (each message within its input's bound,
    no async step before the join), so which task holds a key, and the order its messages come
    in, change no output."""
    last = (f"{APP}-1-broadcast-bcast" if case.bcast else
            f"{APP}-1-partition_by-hop{len(case.ops) - 1 - case.ops[::-1].index('hop')}"
            if case.hops else None)
    if case.beyond and not case.crossings:  # a task per partition number
        instances = [{n: c for n, c in channels.items() if n[1] == p}
                     for p in sorted({p for _, p in channels})]
    else:
        instances = [channels]
    out: list[Any] = []
    late: list[Any] = []
    for chans in instances:
        steps: list[Any] = [(side(s.message), s.message, s.message.value["t"])
                            if isinstance(s, Arrive) else s for s in interleave(chans)]
        result = interval_join(steps, key=lambda kv: kv.key, other_key=lambda kv: kv.key,
                               combine=keyed_pair if case.then_window else pair,
                               within_ms=case.within_ms, how=case.how)
        out.extend(result.outputs)
        late.extend(m for _, m in result.late)
    assert case.beyond or not late, f"the draw made late messages for the join: {late}"
    counts = {JOIN_ID: {last or "in": len(late)}} if late else {}
    return out, counts, late


def in_time_order(w: Any, steps: list[Arrive | Advance]) -> list[Arrive | Advance]:
    """The steps as a session window takes them (docs/semantics.md, Sessions): a message ahead
    of the window's watermark waits until the watermark passes it, then goes in with the others
    it passed in event-time order (in arrival order at equal times), before the watermark closes
    anything. Where messages come in event-time order but for those beyond the bound, nothing
    changes: each waits only for the watermark its own progress moves."""
    out: list[Arrive | Advance] = []
    held: list[tuple[int, int, Arrive]] = []
    wm = -math.inf
    for seq, step in enumerate(steps):
        if isinstance(step, Arrive):
            t = event_time_ms(w, step.message)
            if t > wm:
                heapq.heappush(held, (t, seq, step))
            else:
                out.append(step)
            continue
        wm = max(wm, step.watermark_ms - w.max_out_of_orderness_ms)
        while held and held[0][0] <= wm:
            out.append(heapq.heappop(held)[2])
        out.append(step)
    out.extend(a for _, _, a in sorted(held))  # end-of-stream releases the rest
    return out


# -- comparing ---------------------------------------------------------------------------------------

Row = tuple[Any, str, str, tuple[tuple[int, int], ...]]


def rows_of(out: list[dict[str, Any]]) -> list[Row]:
    return [(r["k"], r["p"], r["f"], tuple(tuple(x) for x in r["m"])) for r in out]


def model_rows(panes: list[ModelPane]) -> list[Row]:
    return [(p.key, p.pane_id, p.firing.name,
             tuple((kv.value["t"], kv.value["v"]) for kv in p.value)) for p in panes]


def comparable(rows: list[Row], case: Case, fixed: bool) -> dict[str, Counter[Any]]:
    """What the rules fix about the panes. In a fixed order: every pane, exactly. Otherwise:
    ACCUMULATING DEFAULT panes hold every message of their pane (as a multiset); DISCARDING
    panes of a key together hold each of its messages once; and for tumbling windows, where
    count triggers depend only on how many messages a pane has, the size of every pane."""
    if fixed:
        # a session holds its messages in arrival or time order; combine merges hops in order
        if case.kind == "keyed_session" or case.combine:
            rows = [(k, p, f, tuple(sorted(m))) for k, p, f, m in rows]
        return {"panes": Counter(rows)}
    out: dict[str, Counter[Any]] = {}
    if case.mode is AccumulationMode.ACCUMULATING:
        out["default"] = Counter((k, p, tuple(sorted(m))) for k, p, f, m in rows if f == "DEFAULT")
    else:
        union: dict[Any, Counter[Any]] = {}
        for k, _p, _f, m in rows:
            union.setdefault(k, Counter()).update(m)
        out["union"] = Counter({(k, tuple(sorted(c.elements()))): 1 for k, c in union.items()})
    if case.kind != "keyed_session":
        out["sizes"] = Counter((k, p, f, len(m)) for k, p, f, m in rows)
    return out


def late_of(counts: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {w: {s: n for s, n in by.items() if n} for w, by in counts.items() if any(by.values())}


def late_value(m: Any) -> tuple[int, int]:
    """A message ``late_to`` got, as (t, v): a ``LateMessage``, or a map of its fields."""
    inner = m.message if isinstance(m, LateMessage) else m["message"]
    value = inner.value if isinstance(inner, KV) else inner["value"]
    return value["t"], value["v"]


def check(case: Case, messages: Callable[[str], list[Any]],
          late_counts: dict[str, dict[str, int]], fixed: bool, runner: str, *,
          by_event_time: bool = False) -> None:
    expected, late, late_messages = model(case, by_event_time=by_event_time)
    out = messages("out")
    assert late_of(late_counts) == late, f"{runner}: late counts differ from the model"
    if case.end == "window":
        assert Counter(map(late_value, messages("late"))) == Counter(
            (m.value["t"], m.value["v"]) for m in late_messages), \
            f"{runner}: late_to got other messages than the model's late ones"
    if case.end != "window":  # joins, counts: every output, as a multiset
        def key(o: Any) -> str:
            return json.dumps(o, sort_keys=True)
        assert Counter(map(key, out)) == Counter(map(key, expected)), \
            f"{runner}: {case.end} outputs differ from the model"
        return
    assert comparable(rows_of(out), case, fixed) == comparable(model_rows(expected), case, fixed), \
        f"{runner}: panes differ from the model"


# -- drawing cases -----------------------------------------------------------------------------------

@st.composite
def cases(draw: st.DrawFn, *, spark: bool = False, beyond_hops: bool = False) -> Case:
    """A case; with ``beyond_hops``, only those with messages beyond the bound that cross
    1-2 hops from one producer."""
    partitions = 1 if beyond_hops else draw(st.integers(1, 3))
    # Spark refuses a processing-time join: it draws the event-time one in its place
    end = "window" if beyond_hops else draw(st.sampled_from(
        ["window", "window", "window", "etjoin" if spark else "join", "etjoin", "table",
         "count", "side"]))
    kind = draw(st.sampled_from([k for k in ["keyed_tumbling", "keyed_session", "tumbling",
                                             "keyed_hopping", "hopping"]
                                 if k not in EXCLUDE]))
    ops = list(draw(st.lists(st.sampled_from(["map", "filter", "flat_map"]), max_size=3)))
    # a side input fills the table of the task reading its partition: the messages stay there
    hops = 0 if end == "side" else draw(st.integers(1 if beyond_hops else 0, 2))
    for _ in range(hops):
        ops.insert(draw(st.integers(0, len(ops))), "hop")
    # a broadcast, after any hop: every task reads every message
    bcast = end != "side" and not beyond_hops and draw(st.integers(0, 4)) == 0
    # a window's producers trace its event time through no async step (docs/semantics.md):
    # the async step goes before any hop
    async_order = draw(st.sampled_from(["none", "key"]))
    if (end in ("window", "count", "side") or async_order == "key") and not beyond_hops \
            and end != "etjoin" and draw(st.booleans()):
        first_hop = ops.index("hop") if "hop" in ops else len(ops)
        ops.insert(draw(st.integers(0, first_hop)), "async")
    post_async = end == "window" and not beyond_hops and draw(st.integers(0, 3)) == 0
    async_one = ("async" in ops or post_async) and draw(st.booleans())
    elasticity = 1 if beyond_hops else draw(st.sampled_from([1, 2]))
    # one instance: a global pane is a task's own (after a broadcast, each task's holds all)
    if kind in ("tumbling", "hopping") and end == "window" and not bcast:
        partitions, elasticity = 1, 1
    # a key in several partitions meets itself after a hop or a broadcast; a count does not
    # depend on the order a key's messages come in
    shared_keys = (end in ("window", "count") and (hops > 0 or bcast)
                   and draw(st.booleans()))
    # an event-time join reads its sides' event time from their input; its messages stay
    # within the input's bound (no window bound)
    declared = end == "etjoin" or draw(st.booleans())
    input_bound = draw(st.sampled_from([0, 1000, 3000])) if declared else 0
    window_bound = 0 if end == "etjoin" else draw(st.sampled_from([0, 2000]))
    merge = not beyond_hops and draw(st.integers(0, 3)) == 0  # a second input, merged in
    crossings = hops + bcast
    fixed = ("async" not in ops and not merge
             and (crossings == 0 or (partitions == 1 and (
                 elasticity == 1 or kind not in ("tumbling", "hopping")))))
    # on Spark a window moves its watermark per message (so counts beyond the bound late) only
    # where one input partition without declared event time feeds it with no shuffle; after a
    # hop, the virtual tasks of elasticity 2 are two producers, so which is ahead decides
    beyond = (end in ("window", "etjoin") and fixed
              and (not spark or (not declared and crossings == 0))
              and (crossings == 0 or elasticity == 1) and (beyond_hops or draw(st.booleans())))
    bound = input_bound + window_bound

    def messages(tag: str) -> dict[int, list[tuple[str, int, int]]]:
        data: dict[int, list[tuple[str, int, int]]] = {}
        for p in range(partitions):
            n = draw(st.integers(0, 12))  # an empty partition is an idle one
            t, msgs = 0, []
            for i in range(n):
                t += draw(st.integers(0, 12)) * 250
                back = draw(st.integers(0, bound // 250)) * 250 if bound else 0
                if beyond and draw(st.integers(0, 4)) == 0:
                    back = bound + draw(st.integers(1, 40)) * 250
                k = draw(st.integers(0, 2))
                # else a key is a partition's own (of one input)
                key = f"k{k}" if shared_keys else f"k{k}{tag}{p}"
                msgs.append((key, max(0, t - back), draw(st.integers(0, 50)) + 100 * i))
            data[p] = msgs
        return data

    data = messages("p")
    merged = messages("q") if merge else {}
    side_data: dict[int, list[tuple[str, int | None]]] = {}
    if end == "side":
        # partition p's own keys (of either input), several puts of a key, a None deletes
        tags = ["p", "q"] if merge else ["p"]
        for p in range(partitions):
            side_data[p] = [
                (f"k{draw(st.integers(0, 3))}{draw(st.sampled_from(tags))}{p}",
                 None if draw(st.integers(0, 4)) == 0 else draw(st.integers(0, 99)))
                for _ in range(draw(st.integers(0, 6)))]
    late = draw(st.sampled_from([None, "count1", "repeat2"]))
    size_ms = draw(st.sampled_from([2000, 5000]))
    hopping = kind in ("hopping", "keyed_hopping")
    hop_ms = size_ms // draw(st.sampled_from([1, 2, 4])) if hopping else 0
    combine = hopping and draw(st.booleans())
    return Case(data=data, ops=tuple(ops), end=end, kind=kind,
                size_ms=size_ms, hop_ms=hop_ms, combine=combine,
                early=draw(st.sampled_from([None, "count2", "repeat2", "any3", "repeat_any",
                                            "time"])),
                late=late, lateness_ms=draw(st.sampled_from([0, 3000])) if late else 0,
                mode=draw(st.sampled_from(list(AccumulationMode))), declared=declared,
                input_bound_ms=input_bound, window_bound_ms=window_bound, elasticity=elasticity,
                beyond=beyond, async_order=async_order, async_one=async_one,
                shared_keys=shared_keys,
                idle_timeout_ms=draw(st.sampled_from([0, 20])), merged=merged,
                side_data=side_data, bcast=bcast, post_async=post_async,
                within_ms=draw(st.sampled_from([500, 1000, 3000])) if end == "etjoin" else 0,
                how=draw(st.sampled_from(["inner", "left"])) if end == "etjoin" else "inner",
                then_window=end == "etjoin" and draw(st.booleans()),
                table_ttl_ms=draw(st.sampled_from([0, 1000, 3000])) if (
                    end == "table" and partitions == 1 and crossings == 0 and not merge
                    and elasticity == 1 and "async" not in ops) else 0)


# -- the smallest case of each difference the runners have (or had) ---------------------------------

def smallest(data: list[tuple[str, int, int]], **kw: Any) -> Case:
    """A window case on one partition, ``(key, event time ms, value)`` per message; keyed
    tumbling windows of 2 s, no triggers, no bounds unless ``kw`` says otherwise."""
    fields: dict[str, Any] = dict(ops=(), end="window", kind="keyed_tumbling", size_ms=2000,
                                  early=None, late=None, lateness_ms=0,
                                  mode=AccumulationMode.DISCARDING, declared=False,
                                  input_bound_ms=0, window_bound_ms=0, elasticity=1, beyond=False)
    return Case(data={0: data}, **(fields | kw))


#: name (in ``KNOWN`` while the runners differ) -> (the smallest case, the runners it differs on)
SMALLEST: dict[str, tuple[Case, tuple[str, ...]]] = {
    # fixed: a message beyond the bound after a hop from one producer: late, as in one task
    "beyond_after_hop": (smallest([("k0p0", 2000, 1), ("k0p0", 1750, 2)], ops=("hop",),
                                  beyond=True), ("TestRunner", "LocalRunner")),
    # fixed: Spark counts a message beyond the bound late too (one partition, no event time on
    # the input: the window's watermark moves per message, in offset order)
    "spark_beyond": (smallest([("k0p0", 0, 1), ("k0p0", 2000, 2), ("k0p0", 1750, 3)],
                              beyond=True), ("SparkRunner",)),
    # fixed: a message a gap before its key's session, within the window's bound, is not late
    "session_disorder": (smallest([("k0p0", 2000, 1), ("k0p0", 0, 2)], kind="keyed_session",
                                  window_bound_ms=2000),
                         ("TestRunner", "LocalRunner", "SparkRunner")),
    # fixed: within the input's bound, a message that bridges two sessions merges them
    "session_bridge": (smallest([("k0p0", 0, 1), ("k0p0", 3000, 2), ("k0p0", 1500, 3)],
                                kind="keyed_session", declared=True, input_bound_ms=3000),
                       ("TestRunner", "LocalRunner", "SparkRunner")),
    # fixed: with elasticity 2, k0p0 is late although its bucket saw nothing before it
    "beyond_elastic": (smallest([("k1p0", 2000, 1), ("k0p0", 0, 2)], elasticity=2,
                                beyond=True), ("TestRunner", "LocalRunner")),
    # fixed: an EARLY pane in an async step after a window (of a bound, on an input without
    # event time) held back the progress of the messages after it, so t=1750 was not late
    "beyond_async_after": (smallest([("k0p0", 2000, 1), ("k0p0", 5000, 2), ("k0p0", 1750, 3)],
                                    early="count1", window_bound_ms=2000, post_async=True,
                                    beyond=True),
                           ("TestRunner", "LocalRunner", "SparkRunner")),
    # fixed: the same with an idle timeout on an input that declares its event time: the
    # window took the time of a message handed out with something in flight only without one
    "beyond_async_after_idle": (smallest([("k0p0", 0, 0), ("k0p0", 2750, 1), ("k0p0", 3000, 2),
                                          ("k0p0", 1750, 3)], early="count2", declared=True,
                                         input_bound_ms=1000, idle_timeout_ms=20,
                                         post_async=True, beyond=True),
                                ("TestRunner", "LocalRunner")),
    # fixed: after a hop, a producer's watermark waited behind an EARLY pane in the async step
    # after the window, so t=1750 was not late
    "beyond_hop_async_after": (smallest([("k0p0", 2000, 1), ("k0p0", 5000, 2),
                                         ("k0p0", 1750, 3)], ops=("hop",), early="count1",
                                        window_bound_ms=2000, post_async=True, beyond=True),
                               ("TestRunner", "LocalRunner")),
    # fixed: one task runs both stages; a pane in the async step after the window (fed by the
    # hop) held back the progress of the input partition (the task's other input) until it
    # completed, so the hop's watermark did not go ahead of t=3000, which was not late (the
    # first 8 messages are the task's first batch)
    "beyond_hop_async_other_input": (
        smallest([("k0p0", 0, i) for i in range(7)]
                 + [("k0p0", 4000, 7), ("k0p0", 6000, 8), ("k0p0", 3000, 9)],
                 ops=("hop",), window_bound_ms=2000, post_async=True, beyond=True),
        ("TestRunner", "LocalRunner")),
    # fixed: a window after an event-time join took the pair of k0 (made at 2.5 s, of the
    # left message's 0 s) as late: the window's watermark had passed 2 s, the end of its pane,
    # at 2.2 s. It allows the join's within (and the inputs' bound) now (rule 9)
    "window_after_join": (smallest([("k0p0", 0, 0), ("k1p0", 2200, 2), ("k0p0", 2500, 1)],
                                   end="etjoin", declared=True, within_ms=3000,
                                   then_window=True),
                          ("TestRunner", "LocalRunner", "SparkRunner")),
    # fixed: on Spark, a broadcast stream reached one task, not each task of the job (two
    # here) and each of its virtual tasks (two of each): every count is there four times
    "spark_broadcast_tasks": (Case(data={0: [("k0p0", 0, 1)], 1: [("k0p1", 0, 2)]}, ops=(),
                                   end="count", kind="keyed_tumbling", size_ms=2000, early=None,
                                   late=None, lateness_ms=0, mode=AccumulationMode.DISCARDING,
                                   declared=False, input_bound_ms=0, window_bound_ms=0,
                                   elasticity=2, beyond=False, bcast=True),
                              ("TestRunner", "LocalRunner", "SparkRunner")),
}


def run_and_check(case: Case, runner: str, spark: Any = None) -> None:
    """Runs ``case`` on ``runner`` and checks it against the model."""
    # the case places each message in a partition of its own choosing on purpose (a key is one
    # partition's own, so a join's sides still meet), not in the partition murmur2 of its key
    # gives: the join placement check, which holds each partition to a producer's placement
    # (on the local log and in memory alike), is off for this comparison
    unchecked = {"task.join.partition.check": "off"}
    if runner == "TestRunner":
        tested = TestRunner(build(case, MemorySystem()), unchecked)
        for sid, parts in inputs(case).items():
            tested.add_input(sid, parts)
        result = tested.run(timeout=RUN_TIMEOUT)
        check(case, result.messages, result.late_counts, case.fixed_per_key, runner)
    elif runner == "LocalRunner":
        with tempfile.TemporaryDirectory() as tmp:
            local = LocalRunner(build(case, LocalSystem("local")),
                                {"job.dir": tmp, **unchecked}, inputs=inputs(case)).run()
            try:
                check(case, local.messages, local.late_counts, case.fixed_per_key, runner)
            finally:
                local.close()
    else:
        reprocessed = SparkRunner(spark).reprocess(build(case, MemorySystem()), inputs(case))
        # Spark hands each task its records in event-time order where the input declares it
        check(case, reprocessed.messages, reprocessed.late_counts,
              case.fixed_per_key and not case.declared, runner, by_event_time=case.declared)


def with_smallest(test: Any, runner: str) -> Any:
    """``test`` with the smallest case of each known difference switched on as an example."""
    for name in sorted(ALL):
        case, runners = SMALLEST[name]
        if runner in runners:
            test = example(case=case)(test)
    return test


@pytest.mark.parametrize(("name", "runner"), [(name, runner) for name, (_, runners)
                                              in SMALLEST.items() for runner in runners])
def test_the_smallest_cases(name: str, runner: str, request: pytest.FixtureRequest) -> None:
    """A known difference (in ``KNOWN``, not switched on) is still there on its smallest case;
    any other case equals the model."""
    case, _ = SMALLEST[name]
    spark = request.getfixturevalue("spark") if runner == "SparkRunner" else None
    if name not in KNOWN or name in ALL:
        run_and_check(case, runner, spark)
        return
    try:
        run_and_check(case, runner, spark)
    except AssertionError:
        return  # still differs, as KNOWN says
    pytest.fail(f"{runner} now equals the model on the smallest case of {name!r}: take it out "
                f"of KNOWN and out of docs/semantics.md's list of differences")


def test_every_known_difference_has_its_smallest_case() -> None:
    assert set(SMALLEST) >= KNOWN


# -- the tests ---------------------------------------------------------------------------------------

@settings(max_examples=STREAMING_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=cases())
def test_test_runner_equals_the_model(case: Case) -> None:
    run_and_check(case, "TestRunner")


@settings(max_examples=STREAMING_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=cases())
def test_local_system_equals_the_model(case: Case) -> None:
    run_and_check(case, "LocalRunner")


@pytest.mark.timeout(0 if LONG else 300)  # the long mode runs as long as its number asks
@settings(max_examples=SPARK_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=cases(spark=True))
def test_spark_equals_the_model(spark: Any, case: Case) -> None:
    run_and_check(case, "SparkRunner", spark)


test_test_runner_equals_the_model = with_smallest(test_test_runner_equals_the_model, "TestRunner")
test_local_system_equals_the_model = with_smallest(test_local_system_equals_the_model,
                                                   "LocalRunner")
test_spark_equals_the_model = with_smallest(test_spark_equals_the_model, "SparkRunner")


@settings(max_examples=max(STREAMING_EXAMPLES // 3, 20), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=cases(beyond_hops=True), runner=st.sampled_from(["TestRunner", "LocalRunner"]))
def test_messages_beyond_the_bound_across_hops_are_late_as_in_one_task(case: Case,
                                                                        runner: str) -> None:
    """One producer at each hop: the watermark goes ahead of a message behind it, so the
    window finds the same messages late as one task reading the input would."""
    assert case.beyond
    run_and_check(case, runner)


#: a table whose entries expire on their event time: a lookup after a later put moved the
#: table's clock past an entry's ttl misses it
TTL_CASE = smallest([("k0p0", 0, 0), ("k1p0", 500, 2), ("k0p0", 600, 1), ("k1p0", 2000, 4),
                     ("k0p0", 2100, 3), ("k1p0", 2200, 5)], end="table", table_ttl_ms=1000)


@pytest.mark.parametrize("runner", ["TestRunner", "LocalRunner"])
def test_a_table_with_an_event_time_ttl_equals_the_model(runner: str) -> None:
    out, _, _ = one_reader(TTL_CASE)
    assert [o["r"] for o in out] == [[0, 0], None, [2000, 4]]  # k0p0 expired at 2000 ms
    run_and_check(TTL_CASE, runner)
