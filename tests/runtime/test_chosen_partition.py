"""``send_to(output, partition=fn)`` and ``partition_key=fn``: the application chooses each
message's output partition (``runtime.engine.wiring.ChosenPartitionRule``), on TestRunner and on the
embedded local system with one and several containers; what cannot hold is refused when the
pipeline is built, and a partition out of range fails the message naming the operator, the
stream and the value."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators import build_operator
from operators.hashing import partition_for
from operators.simple import SendToStreamOperator
from runtime import LocalRunner
from samza_dsl import KV, Context, StreamApplication
from samza_dsl.errors import PlanError, TaskError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem, MemorySystem
from samza_dsl.testing import TestRunner

SERDE = KVSerde(StringSerde(), JsonSerde())


def app_for(system: Any, out_partitions: int, *, upstream: str = "map", **placing: Any
            ) -> StreamApplication:
    app = StreamApplication("chosen")
    stream = app.input(system.input("in", serde=SERDE, partitions=2))
    if upstream == "partition_by":
        stream = stream.partition_by(lambda kv: kv.key, lambda kv: kv.value, serde=SERDE,
                                     name="by-key")
    (stream.map(lambda kv: KV(kv.key, kv.value), name="same")
        .send_to(app.output(system.output("out", serde=SERDE, partitions=out_partitions)),
                 **placing))
    return app


INPUT = {0: [KV(f"k{i % 3}", i) for i in range(12)], 1: [KV(f"j{i % 4}", 100 + i) for i in range(9)]}


def test_partition_places_each_message_and_keeps_its_key() -> None:
    app = app_for(MemorySystem(), 4, partition=lambda kv: kv.value % 4)
    got = TestRunner(app).add_input("in", INPUT).run().partitions("out")
    for p, kvs in got.items():
        assert all(kv.value % 4 == p for kv in kvs)
    # order per input partition is kept in each output partition
    assert [kv.value for kv in got[1] if kv.value < 100] == [1, 5, 9]
    assert sorted(tuple(kv) for kvs in got.values() for kv in kvs) == sorted(
        tuple(kv) for kvs in INPUT.values() for kv in kvs)


def test_partition_key_is_hashed_in_place_of_the_key() -> None:
    app = app_for(MemorySystem(), 5, partition_key=lambda kv: f"g{kv.value % 2}")
    got = TestRunner(app).add_input("in", INPUT).run().partitions("out")
    for p, kvs in got.items():
        assert all(partition_for(f"g{kv.value % 2}".encode(), 5) == p for kv in kvs)


def test_a_none_partition_key_places_the_message_by_its_key() -> None:
    app = app_for(MemorySystem(), 5, partition_key=lambda kv: None)
    got = TestRunner(app).add_input("in", INPUT).run().partitions("out")
    for p, kvs in got.items():
        assert all(partition_for(kv.key.encode(), 5) == p for kv in kvs)


def test_a_partition_out_of_range_fails_naming_operator_stream_and_value() -> None:
    app = app_for(MemorySystem(), 3, partition=lambda kv: kv.value)
    with pytest.raises(TaskError, match=r"send_to 'chosen-1-send_to-1': partition= gave 100 "
                                        r"for stream 'out', which has 3 partitions \(0..2\)"):
        TestRunner(app).add_input("in", {0: [], 1: [KV("a", 100)]}).run()


@pytest.mark.parametrize("bad", [-1, "1", True, None, 1.0])
def test_a_partition_that_is_not_an_int_in_range_fails(bad: Any) -> None:
    app = app_for(MemorySystem(), 3, partition=lambda kv: bad)
    with pytest.raises(TaskError, match=r"send_to 'chosen-1-send_to-1': partition= gave .* "
                                        r"for stream 'out'"):
        TestRunner(app).add_input("in", {0: [KV("a", 1)], 1: []}).run()


def test_an_integer_of_another_type_is_a_partition() -> None:
    class Index:
        def __init__(self, n: int) -> None:
            self.n = n

        def __index__(self) -> int:
            return self.n

    app = app_for(MemorySystem(), 3, partition=lambda kv: Index(2))
    got = TestRunner(app).add_input("in", {0: [KV("a", 1)], 1: []}).run().partitions("out")
    assert got == {0: [], 1: [], 2: [KV("a", 1)]}


def test_a_partition_key_the_key_serde_cannot_write_is_named() -> None:
    app = app_for(MemorySystem(), 3, partition_key=lambda kv: kv.value)
    with pytest.raises(TaskError, match=r"partition_key= gave int 1 for stream 'out', which "
                                        r"the stream's key serializer cannot write"):
        TestRunner(app).add_input("in", {0: [KV("a", 1)], 1: []}).run()


def test_a_keyed_stream_still_takes_only_kv() -> None:
    app = StreamApplication("bare")
    mem = MemorySystem()
    (app.input(mem.input("in")).send_to(app.output(mem.output("out", serde=SERDE, partitions=2)),
                                        partition=lambda m: 0))
    with pytest.raises(TaskError, match="is keyed"):
        TestRunner(app).add_input("in", ["x"]).run()


def test_a_bare_message_goes_where_chosen() -> None:
    app = StreamApplication("bare")
    mem = MemorySystem()
    (app.input(mem.input("in")).send_to(app.output(mem.output("out", partitions=3)),
                                        partition=len))
    got = TestRunner(app).add_input("in", ["", "ab", "c"]).run().partitions("out")
    assert got == {0: [""], 1: ["c"], 2: ["ab"]}


def test_refused_when_the_pipeline_is_built() -> None:
    app, mem = StreamApplication("refused"), MemorySystem()
    stream = app.input(mem.input("in"))
    out = app.output(mem.output("out"))
    with pytest.raises(PlanError, match="not both"):
        stream.send_to(out, partition=lambda m: 0, partition_key=lambda m: m)
    table = app.table("t", serde=SERDE)
    with pytest.raises(PlanError, match="table 't' has no partitions to choose"):
        stream.send_to(table, partition=lambda m: 0)
    with pytest.raises(TypeError, match="send_to partition takes a function"):
        stream.send_to(out, partition=3)  # type: ignore[arg-type]


def test_the_plan_shows_the_placement() -> None:
    app = app_for(MemorySystem(), 3, partition=lambda kv: 0)
    op = app.plan().graph.nodes["chosen-1-send_to-1"]
    assert "placement" in str(op) and "partition" in str(op)
    assert '"placement": "partition"' in app.plan().to_json()


def test_a_partition_function_object_is_initialised_per_task() -> None:
    class ByTask:
        def init(self, ctx: Context) -> None:
            self.task = ctx.task_name

        def __call__(self, kv: KV[str, Any]) -> int:
            return 0 if self.task == "Partition 0" else 1

    app = app_for(MemorySystem(), 2, partition=ByTask())
    got = TestRunner(app).add_input("in", INPUT).run().partitions("out")
    assert sorted(kv.value for kv in got[0]) == [kv.value for kv in INPUT[0]]
    assert sorted(kv.value for kv in got[1]) == [kv.value for kv in INPUT[1]]
    op = build_operator(app.plan().app.operator("chosen-1-send_to-1"))
    assert isinstance(op, SendToStreamOperator) and op.partition_fn is not None


messages = st.dictionaries(st.integers(0, 1), st.lists(
    st.builds(KV, st.sampled_from([f"k{i}" for i in range(6)]), st.integers(0, 10_000)),
    max_size=25), min_size=2, max_size=2)


@settings(max_examples=12, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(parts=messages, out_partitions=st.integers(1, 4), containers=st.integers(1, 2),
       upstream=st.sampled_from(["map", "partition_by"]), data=st.data())
def test_messages_land_in_the_chosen_partitions(parts: dict[int, list[KV[str, int]]],
                                                out_partitions: int, containers: int,
                                                upstream: str, data: st.DataObject) -> None:
    """On TestRunner and on the local system (one container or two), every message is in the
    partition ``partition=`` gave it, once, and in each output partition the messages of one
    input partition keep their order (without a partition_by before the send_to)."""
    # each key in the partition murmur2 of its key gives, as a producer would place it; each
    # value distinct
    drawn = [KV(kv.key, kv.value * 100 + i) for i, kv in enumerate(parts[0] + parts[1])]
    placed = {p: [kv for kv in drawn if partition_for(kv.key.encode(), 2) == p] for p in (0, 1)}
    salt = data.draw(st.integers(0, 3), label="salt")

    def choose(kv: KV[str, int]) -> int:
        return (kv.value + salt) % out_partitions

    app = app_for(MemorySystem(), out_partitions, upstream=upstream, partition=choose)
    runs = {"TestRunner": TestRunner(app).add_input("in", placed).run().partitions("out")}
    with tempfile.TemporaryDirectory() as tmp:
        local_app = app_for(LocalSystem("local"), out_partitions, upstream=upstream,
                            partition=choose)
        local = LocalRunner(local_app, {"job.dir": tmp, "job.container.count": containers,
                                        "job.intermediate.stream.partitions": 3},
                            inputs={"in": placed}).run()
        try:
            runs["LocalRunner"] = local.partitions("out")
        finally:
            local.close()
    everything = sorted(tuple(kv) for kvs in placed.values() for kv in kvs)
    for name, got in runs.items():
        assert set(got) == set(range(out_partitions)), name
        for p, kvs in got.items():
            assert all(choose(kv) == p for kv in kvs), (name, p, kvs)
        assert sorted(tuple(kv) for kvs in got.values() for kv in kvs) == everything, name
        if upstream == "map":
            for p, kvs in got.items():
                for q, sent in placed.items():
                    mine = [kv for kv in sent if choose(kv) == p]
                    assert [kv for kv in kvs if kv in mine] == mine, (name, p, q)
