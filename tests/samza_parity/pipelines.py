"""The samza-dsl side of the parity tests: each pipeline here is written against the public API
as the Java application of the same name in ``harness/`` is written against Samza's: the same
streams (ids and partitions), the same steps, the same values out.

Every input and output is keyed: ``KV(str key, JSON value)``. ``build(name, system, partitions)``
gives the application on ``system`` (a ``MemorySystem`` for ``TestRunner``, a ``LocalSystem``
for ``LocalRunner``) with ``partitions`` giving each stream's partition count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from samza_dsl import (
    KV,
    AccumulationMode,
    Context,
    MessageStream,
    StreamApplication,
    Triggers,
    WindowPane,
    Windows,
)
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde

SERDE = KVSerde(StringSerde(), JsonSerde())
#: a tumbling window too long to close while a test runs: its panes do not depend on the clock
WINDOW_SIZE = timedelta(days=1000)
EARLY_COUNT = 3  # the early trigger: repeat(count(3))
JOIN_TTL = timedelta(hours=1)

Builder = Callable[[Any, StreamApplication, Mapping[str, int]], None]
PIPELINES: dict[str, Builder] = {}


def pipeline(fn: Builder) -> Builder:
    PIPELINES[fn.__name__] = fn
    return fn


def build(name: str, system: Any, partitions: Mapping[str, int]) -> StreamApplication:
    """The samza-dsl counterpart of the Java pipeline ``name``."""
    app = StreamApplication(name)
    PIPELINES[name](system, app, partitions)
    return app


def _in(system: Any, app: StreamApplication, partitions: Mapping[str, int],
        stream: str) -> MessageStream[Any]:
    return app.input(system.input(stream, serde=SERDE, partitions=partitions[stream]))


def _out(system: Any, app: StreamApplication, partitions: Mapping[str, int],
         stream: str = "out") -> Any:
    return app.output(system.output(stream, serde=SERDE, partitions=partitions[stream]))


class Count:
    """A stateful step: each key's running count, kept in the task's table "counts"."""

    def init(self, ctx: Context) -> None:
        self.counts = ctx.table("counts")

    def __call__(self, kv: KV[str, Any]) -> KV[str, Any]:
        count = (self.counts.get(kv.key) or 0) + 1
        self.counts.put(kv.key, count)
        return KV(kv.key, [count, kv.value])


@pipeline
def MapChain(system: Any, app: StreamApplication, partitions: Mapping[str, int]) -> None:  # noqa: N802
    def twice(kv: KV[str, Any]) -> list[KV[str, Any]]:
        return [kv, KV(kv.key + "-x", kv.value + 1)] if kv.value % 4 == 0 else [kv]

    (_in(system, app, partitions, "in")
        .filter(lambda kv: kv.value % 3 != 0)
        .map(lambda kv: KV(kv.key, kv.value * 2))
        .flat_map(twice)
        .map(lambda kv: None if kv.value % 7 == 0 else KV(kv.key, f"v{kv.value}"))
        .send_to(_out(system, app, partitions)))


@pipeline
def Merge(system: Any, app: StreamApplication, partitions: Mapping[str, int]) -> None:  # noqa: N802
    first = _in(system, app, partitions, "in1").map(lambda kv: KV(kv.key, f"a{kv.value}"))
    second = _in(system, app, partitions, "in2").map(lambda kv: KV(kv.key, f"b{kv.value}"))
    first.merge(second).send_to(_out(system, app, partitions))


@pipeline
def Broadcast(system: Any, app: StreamApplication, partitions: Mapping[str, int]) -> None:  # noqa: N802
    (_in(system, app, partitions, "in")
        .broadcast(serde=SERDE, name="bc")
        .map(lambda kv: KV(kv.key, kv.value + 1))
        .send_to(_out(system, app, partitions)))


@pipeline
def PartitionByCount(system: Any, app: StreamApplication,  # noqa: N802
                     partitions: Mapping[str, int]) -> None:
    app.table("counts", serde=SERDE, changelog=False)
    (_in(system, app, partitions, "in")
        .partition_by(lambda kv: f"g{kv.value % 5}", lambda kv: kv.value, serde=SERDE,
                      name="by-group")
        .map(Count())
        .send_to(_out(system, app, partitions)))


@pipeline
def TwoPartitionBys(system: Any, app: StreamApplication,  # noqa: N802
                    partitions: Mapping[str, int]) -> None:
    app.table("counts", serde=SERDE, changelog=False)
    (_in(system, app, partitions, "in")
        .partition_by(lambda kv: f"h{kv.value % 4}", lambda kv: kv.value, serde=SERDE,
                      name="first")
        .map(lambda kv: KV(kv.key, kv.value * 10))
        .partition_by(lambda kv: f"g{kv.value % 3}", lambda kv: kv.value, serde=SERDE,
                      name="second")
        .map(Count())
        .send_to(_out(system, app, partitions)))


@pipeline
def AsyncFlatMap(system: Any, app: StreamApplication,  # noqa: N802
                 partitions: Mapping[str, int]) -> None:
    async def later(kv: KV[str, Any]) -> Iterable[KV[str, Any]]:
        # each result after a delay of its own: with task.max.concurrency > 1 a later
        # message may complete first
        await asyncio.sleep(0.003 * (kv.value % 4))
        return [] if kv.value % 5 == 0 else [KV(kv.key, kv.value), KV(kv.key, -kv.value)]

    (_in(system, app, partitions, "in")
        .async_flat_map(later)
        .send_to(_out(system, app, partitions)))


def _window(keyed: bool, mode: AccumulationMode, repartitioned: bool = False,
            repeating: bool = True, fold: bool = False) -> Builder:
    """A tumbling window of ``WINDOW_SIZE`` with the early trigger repeat(count(3)), or
    count(3) once; keyed by the message's key, or global; on the input, or after a
    ``partition_by`` on the message's key; its messages as they are, or folded into the list of
    their values. A pane goes out as ``KV(key, {"firing", "values"})``."""
    def pane(p: WindowPane) -> KV[Any, Any]:
        values = p.message if fold else [kv.value for kv in p.message]
        return KV(p.key.key, {"firing": p.firing.name, "values": values})

    def window(system: Any, app: StreamApplication, partitions: Mapping[str, int]) -> None:
        init, add = ((lambda: []), (lambda kv, acc: [*acc, kv.value])) if fold else (None, None)
        w = (Windows.keyed_tumbling(lambda kv: kv.key, WINDOW_SIZE, init=init, fold=add)
             if keyed else Windows.tumbling(WINDOW_SIZE))
        trigger = Triggers.count(EARLY_COUNT)
        w = w.early_trigger(Triggers.repeat(trigger) if repeating else trigger).accumulation(mode)
        stream = _in(system, app, partitions, "in")
        if repartitioned:
            stream = stream.partition_by(lambda kv: kv.key, lambda kv: kv.value, serde=SERDE,
                                         name="by-key")
        (stream
            .window(w, name="w")
            .map(pane)
            .send_to(_out(system, app, partitions)))
    return window


ACCUMULATING, DISCARDING = AccumulationMode.ACCUMULATING, AccumulationMode.DISCARDING
PIPELINES["KeyedWindowAccumulating"] = _window(True, ACCUMULATING)
PIPELINES["KeyedWindowDiscarding"] = _window(True, DISCARDING)
PIPELINES["GlobalWindowAccumulating"] = _window(False, ACCUMULATING)
PIPELINES["GlobalWindowDiscarding"] = _window(False, DISCARDING)
PIPELINES["RepartitionedWindowAccumulating"] = _window(True, ACCUMULATING, repartitioned=True)
PIPELINES["RepartitionedWindowDiscarding"] = _window(True, DISCARDING, repartitioned=True)
PIPELINES["KeyedFoldWindowAccumulating"] = _window(True, ACCUMULATING, fold=True)
PIPELINES["KeyedFoldWindowDiscarding"] = _window(True, DISCARDING, fold=True)
PIPELINES["KeyedWindowOnce"] = _window(True, DISCARDING, repeating=False)


@pipeline
def StreamJoin(system: Any, app: StreamApplication, partitions: Mapping[str, int]) -> None:  # noqa: N802
    (_in(system, app, partitions, "left")
        .join(_in(system, app, partitions, "right"), key=lambda kv: kv.key,
              other_key=lambda kv: kv.key,
              combine=lambda left, right: KV(left.key, f"{left.value}:{right.value}"),
              ttl=JOIN_TTL, name="j")
        .send_to(_out(system, app, partitions)))


def _lookup(message: KV[str, Any], record: KV[str, Any] | None) -> KV[str, Any]:
    return KV(message.key, f"{message.value}:{'-' if record is None else record.value}")


@pipeline
def TableJoin(system: Any, app: StreamApplication, partitions: Mapping[str, int]) -> None:  # noqa: N802
    table = app.table("t", serde=SERDE, changelog=False)
    stream = _in(system, app, partitions, "in")
    stream.filter(lambda kv: kv.value % 2 == 0).send_to(table)
    (stream.filter(lambda kv: kv.value % 2 != 0)
        .join_table(table, combine=_lookup)
        .send_to(_out(system, app, partitions)))


@pipeline
def SideInputJoin(system: Any, app: StreamApplication,  # noqa: N802
                  partitions: Mapping[str, int]) -> None:
    side = system.input("side", serde=SERDE, partitions=partitions["side"])
    table = app.table("t", serde=SERDE, side_inputs=[side], processor=lambda kv: [kv])
    (_in(system, app, partitions, "in")
        .join_table(table, combine=_lookup)
        .send_to(_out(system, app, partitions)))


@pipeline
def KeyedOutput(system: Any, app: StreamApplication, partitions: Mapping[str, int]) -> None:  # noqa: N802
    (_in(system, app, partitions, "in")
        .map(lambda kv: KV(f"u{kv.value % 7}", kv.value))
        .send_to(_out(system, app, partitions)))


@pipeline
def ChosenPartition(system: Any, app: StreamApplication,  # noqa: N802
                    partitions: Mapping[str, int]) -> None:
    n = partitions["out"]
    (_in(system, app, partitions, "in")
        .map(lambda kv: KV(f"u{kv.value % 7}", kv.value))
        .send_to(_out(system, app, partitions), partition=lambda kv: kv.value % n))
