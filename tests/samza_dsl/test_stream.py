"""MessageStream: each method adds exactly one spec node, wired to its inputs, and returns a new
stream; misuse raises before anything is registered."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from samza_dsl import KV, MessageStream, PlanError, StreamApplication, Triggers, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.spec import (
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
    WindowSpec,
)
from samza_dsl.systems import MemorySystem

MEM = MemorySystem()
KV_JSON = KVSerde(StringSerde(), JsonSerde())


def fresh(serde=None):
    app = StreamApplication("s")
    return app, app.input(MEM.input("in", serde=serde))


def only_new_op(app, before):
    ops = app.spec().operators
    assert ops[:len(before)] == before
    assert len(ops) == len(before) + 1, "exactly one spec node per call"
    return ops[-1]


def upper(m):
    return m.upper()


async def twice(m):
    return [m, m]


@pytest.mark.parametrize("method, spec_type, opcode", [
    ("map", MapSpec, "map"),
    ("filter", FilterSpec, "filter"),
    ("flat_map", FlatMapSpec, "flat_map"),
])
def test_one_to_one_and_one_to_many_add_one_node(method, spec_type, opcode):
    app, s = fresh()
    before = app.spec().operators
    out = getattr(s, method)(upper, name="op")
    op = only_new_op(app, before)
    assert isinstance(op, spec_type) and op.opcode == opcode
    assert op.op_id == out.op_id == out.node == f"s-1-{opcode}-op"
    assert op.inputs == ("stream:in",)
    assert op.fn is upper
    assert op.name == "op"
    assert out is not s and isinstance(out, MessageStream)
    assert out.stream_id is None


def test_filter_keeps_keyedness_map_and_flat_map_do_not():
    app, s = fresh(KV_JSON)
    assert s.filter(bool)._keyed
    assert not s.map(str)._keyed
    assert not s.flat_map(list)._keyed


@pytest.mark.parametrize("method", ["map", "filter", "flat_map", "sink", "async_flat_map"])
@pytest.mark.parametrize("fn", [None, 3, "str"])
def test_non_callable_functions_raise_type_error(method, fn):
    app, s = fresh()
    with pytest.raises(TypeError, match=method):
        getattr(s, method)(fn)
    assert app.spec().operators == ()


def test_objects_with_apply_are_accepted_as_functions():
    class Upper:
        def init(self, ctx):
            pass

        def apply(self, m):
            return m.upper()

    app, s = fresh()
    fn = Upper()
    s.map(fn, name="obj")  # type: ignore[arg-type]
    assert app.spec().operator("s-1-map-obj").fn is fn  # type: ignore[attr-defined]


def test_async_flat_map_records_ordering_and_key():
    app, s = fresh()
    a = s.async_flat_map(twice, name="a")
    b = s.async_flat_map(twice, name="b", ordering="key", key=len)
    ops = {op.op_id: op for op in app.spec().operators}
    oa, ob = ops[a.op_id], ops[b.op_id]
    assert isinstance(oa, AsyncFlatMapSpec) and oa.opcode == "async_flat_map"
    assert (oa.ordering, oa.key_fn, oa.fn) == ("none", None, twice)
    assert (ob.ordering, ob.key_fn) == ("key", len)
    assert oa.details() == {"ordering": "none"}


def test_async_flat_map_rejects_bad_ordering_and_key_without_key_ordering():
    app, s = fresh()
    with pytest.raises(ValueError, match="'sorted'"):
        s.async_flat_map(twice, ordering="sorted")
    with pytest.raises(ValueError, match="ordering='key'"):
        s.async_flat_map(twice, key=len)
    with pytest.raises(TypeError, match="key"):
        s.async_flat_map(twice, ordering="key", key=5)  # type: ignore[arg-type]
    assert app.spec().operators == ()


# -- merge -------------------------------------------------------------------------------------

def test_merge_and_merge_all_union_their_inputs_in_order():
    app = StreamApplication("s")
    a = app.input(MEM.input("a", serde=KV_JSON))
    b = app.input(MEM.input("b", serde=KV_JSON))
    c = a.map(str)
    m1 = a.merge(b, c, name="m1")
    m2 = MessageStream.merge_all([c, b], name="m2")
    ops = {op.op_id: op for op in app.spec().operators}
    assert isinstance(ops[m1.op_id], MergeSpec) and ops[m1.op_id].opcode == "merge"
    assert ops[m1.op_id].inputs == ("stream:a", "stream:b", c.op_id)
    assert ops[m2.op_id].inputs == (c.op_id, "stream:b")
    assert not m1._keyed  # c is not keyed
    assert a.merge(b)._keyed


def test_merging_a_stream_twice_reads_it_once():
    app, s = fresh()
    m = s.merge(s)
    assert app.spec().operator(m.op_id).inputs == ("stream:in",)


def test_merge_of_one_stream_is_allowed():
    app, s = fresh()
    m = MessageStream.merge_all([s])
    assert app.spec().operator(m.op_id).inputs == ("stream:in",)


@pytest.mark.parametrize("empty", [[], (), iter([])])
def test_merge_all_of_nothing_raises(empty):
    with pytest.raises(PlanError, match=re.escape("merge_all([])")):
        MessageStream.merge_all(empty)


def test_merge_rejects_non_streams_and_other_applications():
    app, s = fresh()
    other_app = StreamApplication("other")
    o = other_app.input(MEM.input("x"))
    with pytest.raises(TypeError, match="MessageStream"):
        s.merge("x")  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="'other'"):
        s.merge(o)
    assert app.spec().operators == ()


# -- partition_by and broadcast ----------------------------------------------------------------

def test_partition_by_writes_an_intermediate_stream_and_returns_it():
    app, s = fresh()
    serde = KVSerde(StringSerde(), JsonSerde())
    p = s.partition_by(len, str, serde=serde, name="bykey")
    op = app.spec().operator("s-1-partition_by-bykey")
    assert isinstance(op, PartitionBySpec) and op.opcode == "partition_by"
    assert (op.key_fn, op.value_fn, op.serde) == (len, str, serde)
    assert op.inputs == ("stream:in",)
    # the op id is also the stream id, and the returned stream reads that stream
    assert op.stream_id == op.op_id
    assert p.node == f"stream:{op.op_id}" and p.stream_id == op.op_id
    inter = app.spec().intermediates[op.op_id]
    assert (inter.producer, inter.serde, inter.broadcast, inter.keyed) == (op.op_id, serde,
                                                                           False, True)
    assert p._keyed  # partition_by delivers KV(key, value)
    assert op.details() == {"stream": op.op_id}


def test_partition_by_needs_a_name_callables_and_a_kvserde():
    app, s = fresh()
    with pytest.raises(PlanError, match="partition_by needs name"):
        s.partition_by(len, name=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="key_fn"):
        s.partition_by(None, name="p")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="value_fn"):
        s.partition_by(len, 1, name="p")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'p'.*KVSerde"):
        s.partition_by(len, serde=JsonSerde(), name="p")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        s.partition_by(len)  # type: ignore[call-arg]
    assert app.spec().operators == ()


def test_broadcast_writes_a_one_partition_intermediate_stream():
    app, s = fresh(KV_JSON)
    b = s.broadcast(serde=JsonSerde(), name="all")
    op = app.spec().operator("s-1-broadcast-all")
    assert isinstance(op, BroadcastSpec) and op.opcode == "broadcast"
    assert b.stream_id == op.stream_id == op.op_id
    inter = app.spec().intermediates[op.op_id]
    assert inter.broadcast and inter.serde == JsonSerde()
    assert b._keyed  # keeps the upstream's keyedness
    _, v = fresh()
    assert not v.broadcast(name="b")._keyed


def test_broadcast_needs_a_name_and_a_serde_instance():
    app, s = fresh()
    with pytest.raises(PlanError, match="broadcast needs name"):
        s.broadcast(name=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'b'.*Serde"):
        s.broadcast(serde=JsonSerde, name="b")  # type: ignore[arg-type]
    assert app.spec().operators == ()


# -- window ------------------------------------------------------------------------------------

def test_window_adds_a_window_node_with_its_spec():
    app, s = fresh()
    w = Windows.keyed_tumbling(len, timedelta(seconds=5)).early_trigger(Triggers.count(3))
    out = s.window(w, name="w")
    op = app.spec().operator(out.op_id or "")
    assert isinstance(op, WindowSpec) and op.opcode == "window"
    assert op.window is w
    assert op.details() == {"window": w.describe()}
    assert op.details()["window"]["size_ms"] == 5000


def test_window_needs_a_name_and_a_window():
    app, s = fresh()
    with pytest.raises(PlanError, match="window needs name"):
        s.window(Windows.tumbling(timedelta(seconds=1)), name=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'w'.*Window"):
        s.window(timedelta(seconds=1), name="w")  # type: ignore[arg-type]
    assert app.spec().operators == ()


# -- join --------------------------------------------------------------------------------------

def test_join_adds_a_two_port_node_left_first():
    app = StreamApplication("s")
    left = app.input(MEM.input("l"))
    right = app.input(MEM.input("r")).map(str)
    out = left.join(right, key=len, other_key=str, combine=max, ttl=timedelta(minutes=2),
                    name="j")
    op = app.spec().operator("s-1-join-j")
    assert isinstance(op, JoinSpec) and op.opcode == "join" and out.op_id == op.op_id
    assert op.inputs == ("stream:l", right.op_id)
    assert (op.key_fn, op.other_key_fn, op.combine) == (len, str, max)
    assert op.ttl_ms == 120_000
    assert op.details() == {"ttl_ms": 120_000}


def test_self_join_raises_naming_the_join_and_stream():
    app, s = fresh()
    with pytest.raises(PlanError, match="'j'.*'stream:in'.*itself"):
        s.join(s, key=len, other_key=len, combine=max, ttl=timedelta(seconds=1), name="j")
    m = s.map(str)
    with pytest.raises(PlanError, match="itself"):
        m.join(m, key=len, other_key=len, combine=max, ttl=timedelta(seconds=1), name="j")
    # the same input registered twice is the same stream
    again = app.input(MEM.input("in"))
    with pytest.raises(PlanError, match="itself"):
        s.join(again, key=len, other_key=len, combine=max, ttl=timedelta(seconds=1), name="j")
    assert [op.opcode for op in app.spec().operators] == ["map"]


def test_join_argument_errors():
    app = StreamApplication("s")
    a = app.input(MEM.input("a"))
    b = app.input(MEM.input("b"))
    kw = dict(key=len, other_key=len, combine=max, ttl=timedelta(seconds=1))
    with pytest.raises(PlanError, match="join needs name"):
        a.join(b, name=None, **kw)  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="malformed"):
        a.join(b, name="a b", **kw)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'j'.*MessageStream"):
        a.join("b", name="j", **kw)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="combine"):
        a.join(b, key=len, other_key=len, combine=None, ttl=timedelta(seconds=1),  # type: ignore[arg-type]
               name="j")
    with pytest.raises(ValueError, match="'j' ttl"):
        a.join(b, key=len, other_key=len, combine=max, ttl=timedelta(0), name="j")
    with pytest.raises(ValueError, match="'j' ttl"):
        a.join(b, key=len, other_key=len, combine=max, ttl=timedelta(seconds=-1), name="j")
    with pytest.raises(TypeError, match="'j' ttl"):
        a.join(b, key=len, other_key=len, combine=max, ttl="1s", name="j")  # type: ignore[arg-type]
    other = StreamApplication("o").input(MEM.input("x"))
    with pytest.raises(PlanError, match="two applications"):
        a.join(other, name="j", **kw)  # type: ignore[arg-type]
    assert app.spec().operators == ()


# -- join_table, send_to, sink -----------------------------------------------------------------

def test_join_table_adds_a_lookup_node():
    app, s = fresh(KV_JSON)
    t = app.table("t", serde=KV_JSON)

    def combine(m, record):
        return None if record is None else KV(m.key, record.value)

    out = s.join_table(t, combine=combine)
    keyed_by = s.join_table(t, combine=combine, key=len, name="jt")
    ops = {op.op_id: op for op in app.spec().operators}
    op = ops[out.op_id]
    assert isinstance(op, JoinTableSpec) and op.opcode == "join_table"
    assert (op.table_id, op.combine, op.key_fn, op.inputs) == ("t", combine, None,
                                                               ("stream:in",))
    assert ops[keyed_by.op_id].key_fn is len
    assert op.details() == {"table": "t"}


def test_join_table_errors():
    app, s = fresh()
    t = app.table("t", serde=KV_JSON)
    with pytest.raises(TypeError, match="Table"):
        s.join_table("t", combine=max)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="combine"):
        s.join_table(t, combine=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="key"):
        s.join_table(t, combine=max, key=3)  # type: ignore[arg-type]
    foreign = StreamApplication("o").table("ft", serde=KV_JSON)
    with pytest.raises(PlanError, match="'ft'"):
        s.join_table(foreign, combine=max)
    assert app.spec().operators == ()


def test_send_to_an_output_or_a_table_is_terminal():
    app, s = fresh(KV_JSON)
    out = app.output(MEM.output("out", serde=KV_JSON))
    t = app.table("t", serde=KV_JSON)
    assert s.send_to(out) is None  # type: ignore[func-returns-value]
    assert s.send_to(t) is None  # type: ignore[func-returns-value]
    to_out, to_table = app.spec().operators
    assert isinstance(to_out, SendToSpec) and to_out.opcode == "send_to"
    assert (to_out.stream_id, to_out.table_id, to_out.target_node) == ("out", None, "stream:out")
    assert (to_table.stream_id, to_table.table_id, to_table.target_node) == (None, "t", "table:t")
    assert to_out.details() == {"stream": "out"} and to_table.details() == {"table": "t"}


def test_send_to_errors():
    app, s = fresh()
    other = StreamApplication("o")
    with pytest.raises(TypeError, match="OutputStream"):
        s.send_to(MEM.output("out"))  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="'x'.*another application"):
        s.send_to(other.output(MEM.output("x")))
    with pytest.raises(PlanError, match="'tt'.*another application"):
        s.send_to(other.table("tt", serde=KV_JSON))
    assert app.spec().operators == ()


def test_sink_is_terminal_and_takes_sync_or_async_functions():
    app, s = fresh()

    async def asink(m):
        return None

    assert s.sink(print) is None  # type: ignore[func-returns-value]
    s.sink(asink, name="a")
    first, second = app.spec().operators
    assert isinstance(first, SinkSpec) and first.opcode == "sink" and first.fn is print
    assert second.op_id == "s-1-sink-a" and second.fn is asink


def test_streams_are_immutable_handles_methods_only_add_nodes():
    app, s = fresh()
    a = s.map(str)
    b = s.map(str)
    assert a.op_id != b.op_id
    assert s.node == "stream:in"
    assert repr(a) == f"MessageStream({a.op_id!r})"
    # a branch: two consumers of one stream
    assert [op.inputs for op in app.spec().operators] == [("stream:in",), ("stream:in",)]
