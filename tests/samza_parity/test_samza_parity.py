"""Apache Samza itself as the judge: each pipeline of ``pipelines.py`` and its Java counterpart in
``harness/`` run over the same drawn input, on Samza 1.8.0's ``TestRunner`` and on samza-dsl's
``TestRunner`` and embedded local system (``LocalRunner`` on a fresh ``job.dir``); their outputs
must be equal as Samza defines equality for the pipeline's shape (``judges.py``). Where Samza and
samza-dsl differ on purpose, docs/semantics.md says so in its table "Samza itself".

Input: keyed messages on several partitions, each key in the partition murmur2 of its key gives
(as Kafka's producer places it; samza-dsl's join placement check holds inputs to it), with
distinct values, so a value tells where it came from.

Environment variables:

- ``SAMZA_DSL_PARITY_EXAMPLES=500``: a long check, 500 drawn inputs per pipeline of up to 200
  messages (random, not the fixed draw). CI runs a fixed draw of 8 per pipeline.
"""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import LocalRunner
from samza_dsl import KV
from samza_dsl.systems import LocalSystem, MemorySystem
from samza_dsl.testing import TestRunner
from tests.samza_parity import judges
from tests.samza_parity.pipelines import EARLY_COUNT, build
from tests.samza_parity.samza_harness import Message, SamzaHarness

LONG = int(os.environ.get("SAMZA_DSL_PARITY_EXAMPLES", "0"))
EXAMPLES = LONG or 8
MAX_MESSAGES = 200 if LONG else 30
RUN_TIMEOUT = 60.0


@dataclass(frozen=True)
class Shape:
    """A pipeline's streams and how its outputs compare."""

    inputs: tuple[str, ...]
    judge: Callable[[Sequence[Message], Sequence[Message], Any], None]
    config: Mapping[str, Any] = field(default_factory=dict)
    #: the judge's view of the input: None, "key" (values per key), "partition" (values per
    #: input partition), "sides" (values per key, per join side), "origin" (each value's
    #: stream and partition)
    view: str | None = None
    global_window: bool = False
    #: the application chooses each message's partition: the key does not fix it, and the
    #: local system's output is compared partition by partition
    chosen_partition: bool = False


def _window(keyed: bool, accumulating: bool, repartitioned: bool = False,
            repeating: bool = True) -> Shape:
    return Shape(("in",), judges.panes(EARLY_COUNT, accumulating, keyed, repartitioned, repeating),
                 view="key" if keyed else "partition", global_window=not keyed)


SHAPES: dict[str, Shape] = {
    "MapChain": Shape(("in",), judges.sequence),
    "Merge": Shape(("in1", "in2"), judges.tagged),
    "Broadcast": Shape(("in",), judges.multiset),
    "PartitionByCount": Shape(("in",), judges.counts),
    "TwoPartitionBys": Shape(("in",), judges.counts),
    "AsyncFlatMap": Shape(("in",), judges.multiset, {"task.max.concurrency": 4}),
    "KeyedWindowAccumulating": _window(keyed=True, accumulating=True),
    "KeyedWindowDiscarding": _window(keyed=True, accumulating=False),
    "GlobalWindowAccumulating": _window(keyed=False, accumulating=True),
    "GlobalWindowDiscarding": _window(keyed=False, accumulating=False),
    "RepartitionedWindowAccumulating": _window(keyed=True, accumulating=True, repartitioned=True),
    "RepartitionedWindowDiscarding": _window(keyed=True, accumulating=False, repartitioned=True),
    "KeyedFoldWindowAccumulating": _window(keyed=True, accumulating=True),
    "KeyedFoldWindowDiscarding": _window(keyed=True, accumulating=False),
    "KeyedWindowOnce": _window(keyed=True, accumulating=False, repeating=False),
    "StreamJoin": Shape(("left", "right"), judges.join, view="sides"),
    "TableJoin": Shape(("in",), judges.sequence),
    "SideInputJoin": Shape(("in", "side"), judges.sequence),
    "KeyedOutput": Shape(("in",), judges.per_origin, view="origin"),
    "ChosenPartition": Shape(("in",), judges.per_partition, view="origin",
                             chosen_partition=True),
}


@dataclass(frozen=True)
class Case:
    pipeline: str
    partitions: dict[str, int]
    messages: list[Message]  # the input, each in its partition, in order

    def by_partition(self, stream: str) -> dict[int, list[KV[str, Any]]]:
        parts: dict[int, list[KV[str, Any]]] = {p: [] for p in range(self.partitions[stream])}
        for m in self.messages:
            if m.stream == stream:
                parts[m.partition].append(KV(m.key, m.value))
        return parts

    def view(self) -> Any:
        shape = SHAPES[self.pipeline]
        if shape.view == "key":
            return judges.by_key(self.messages)
        if shape.view == "partition":
            per: dict[int, list[Any]] = defaultdict(list)
            for m in self.messages:
                per[m.partition].append(m.value)
            return dict(per)
        if shape.view == "origin":
            return {m.value: (m.stream, m.partition) for m in self.messages}
        if shape.view == "sides":
            return {side: judges.by_key(m for m in self.messages if m.stream == side)
                    for side in ("left", "right")}
        return None


@st.composite
def cases(draw: st.DrawFn, pipeline: str) -> Case:
    shape = SHAPES[pipeline]
    count = draw(st.integers(1, 4))
    # a join's streams and a side input are partitioned alike; a merge's may differ
    partitions = {s: count for s in shape.inputs}
    if pipeline == "Merge":
        partitions["in2"] = draw(st.integers(1, 4))
    # a global window's panes have no key: one partition holds them
    partitions["out"] = 1 if shape.global_window else draw(st.integers(1, 4))
    keys = [f"k{i}" for i in range(draw(st.integers(1, 12)))]
    n = draw(st.integers(0, MAX_MESSAGES))
    values = draw(st.lists(st.integers(0, 20 * MAX_MESSAGES), min_size=n, max_size=n,
                           unique=True))
    streams = [s for s in shape.inputs if s != "side"]
    messages = []
    for value in values:
        stream = draw(st.sampled_from(streams))
        key = draw(st.sampled_from(keys))
        messages.append(Message(stream, judges.dsl_partition(key, partitions[stream]), key,
                                value))
    if "side" in shape.inputs:
        side = []
        for i in range(draw(st.integers(0, 12))):
            key = draw(st.sampled_from(keys))
            side.append(Message("side", judges.dsl_partition(key, count), key, f"s{i}"))
        # Samza cannot start a side input with an empty partition (its in-memory system gives
        # no oldest offset for it: "No starting offset could be obtained for SideInput"): each
        # gets a key of its own that no input message has
        for p in set(range(count)) - {m.partition for m in side}:
            key = next(k for k in (f"pad{i}" for i in range(1000))
                       if judges.dsl_partition(k, count) == p)
            side.append(Message("side", p, key, "pad"))
        messages += side
    return Case(pipeline, partitions, messages)


def run_test_runner(case: Case) -> list[Message]:
    app = build(case.pipeline, MemorySystem(), case.partitions)
    runner = TestRunner(app, dict(SHAPES[case.pipeline].config))
    for stream in SHAPES[case.pipeline].inputs:
        runner.add_input(stream, case.by_partition(stream))
    result = runner.run(timeout=RUN_TIMEOUT)
    return [Message("out", p, kv.key, kv.value)
            for p, kvs in sorted(result.partitions("out").items()) for kv in kvs]


def run_local(case: Case) -> list[Message]:
    """On the embedded local system; its result tells no partition (-1), the partitions being
    checked on TestRunner's and the comparison per key, but where the application chooses
    the partitions (``Shape.chosen_partition``)."""
    shape = SHAPES[case.pipeline]
    with tempfile.TemporaryDirectory() as tmp:
        app = build(case.pipeline, LocalSystem("local"), case.partitions)
        local = LocalRunner(app, {"job.dir": tmp, **shape.config},
                            inputs={s: case.by_partition(s) for s in shape.inputs}).run()
        try:
            if shape.chosen_partition:
                return [Message("out", p, kv.key, kv.value)
                        for p, kvs in sorted(local.partitions("out").items()) for kv in kvs]
            return [Message("out", -1, kv.key, kv.value) for kv in local.messages("out")]
        finally:
            local.close()


def check(case: Case, samza: SamzaHarness) -> None:
    shape = SHAPES[case.pipeline]
    from_samza = samza.run(case.pipeline, case.partitions, case.messages, shape.config)
    out_partitions = case.partitions["out"]
    by_key = not shape.chosen_partition
    if by_key:
        judges.check_placement(from_samza, out_partitions, judges.samza_partition, "Samza")
    for name, run in (("TestRunner", run_test_runner), ("LocalRunner", run_local)):
        from_dsl = run(case)
        if by_key:
            judges.check_placement(from_dsl, out_partitions, judges.dsl_partition, name)
        try:
            shape.judge(from_samza, from_dsl, case.view())
        except AssertionError as e:
            raise AssertionError(
                f"{case.pipeline} on samza-dsl's {name} differs from Samza: {e}\n"
                f"Samza: {from_samza}\n{name}: {from_dsl}") from e


PROPS = settings(max_examples=EXAMPLES, deadline=None, derandomize=not LONG, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.timeout(0 if LONG else 300)
@pytest.mark.parametrize("pipeline", list(SHAPES))
@PROPS
@given(data=st.data())
def test_samza_dsl_equals_samza(pipeline: str, data: st.DataObject,
                                samza: SamzaHarness) -> None:
    check(data.draw(cases(pipeline), label="case"), samza)
