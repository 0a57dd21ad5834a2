"""StreamApplication: registration of inputs, outputs and tables, operator ids, call sites, config."""

from __future__ import annotations

import dataclasses
import re
import sys

import pytest

from samza_dsl import (
    ConfigError,
    MessageStream,
    OutputStream,
    PlanError,
    SamzaError,
    StreamApplication,
    Table,
)
from samza_dsl.serdes import BytesSerde, JsonSerde, KVSerde, StringSerde
from samza_dsl.spec import ApplicationSpec, MapSpec, stream_node
from samza_dsl.systems import KafkaSystem, MemorySystem

MEM = MemorySystem()
KAFKA = KafkaSystem("kafka", bootstrap_servers="127.0.0.1:9092")
KV_JSON = KVSerde(StringSerde(), JsonSerde())


def here() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


def test_constructor_defaults_and_repr():
    app = StreamApplication("page-views")
    assert app.name == "page-views"
    assert app.app_id == "1"
    assert app.config == {}
    assert repr(app) == "StreamApplication('page-views', app_id='1')"


def test_constructor_takes_app_id_and_validated_config():
    app = StreamApplication("pv", app_id="7", config={"task.max.concurrency": "16"})
    assert app.app_id == "7"
    assert app.config == {"task.max.concurrency": 16}


@pytest.mark.parametrize("name", ["", "has space", "a/b", "ünï", 5])
def test_malformed_application_name_raises(name):
    with pytest.raises(ValueError, match="application name") as info:
        StreamApplication(name)
    assert repr(name) in str(info.value)


@pytest.mark.parametrize("app_id", ["", "x y", 1])
def test_malformed_app_id_raises(app_id):
    with pytest.raises(ValueError, match="app_id") as info:
        StreamApplication("ok", app_id=app_id)
    assert repr(app_id) in str(info.value)


def test_unknown_task_or_job_key_in_constructor_config_names_the_key():
    with pytest.raises(ConfigError, match=re.escape("'task.max.concurency'")) as info:
        StreamApplication("a", config={"task.max.concurency": 4})
    assert "task.max.concurrency" in str(info.value)  # the suggestion
    with pytest.raises(ConfigError, match=re.escape("'job.bogus'")):
        StreamApplication("a", config={"job.bogus": 1})


def test_bad_config_value_in_constructor_names_the_key():
    with pytest.raises(ConfigError, match=re.escape("task.max.concurrency")):
        StreamApplication("a", config={"task.max.concurrency": 0})


# -- inputs, outputs, tables -------------------------------------------------------------------

def test_input_returns_a_stream_rooted_at_the_stream_node():
    app = StreamApplication("a")
    s = app.input(MEM.input("in"))
    assert isinstance(s, MessageStream)
    assert s.node == stream_node("in") == "stream:in"
    assert s.stream_id == "in"
    assert s.op_id is None


def test_keyed_input_only_with_kvserde():
    app = StreamApplication("a")
    assert app.input(MEM.input("k", serde=KV_JSON))._keyed
    assert not app.input(MEM.input("v", serde=JsonSerde()))._keyed
    assert not app.input(MEM.input("n"))._keyed


def test_input_twice_with_the_same_descriptor_is_the_same_stream():
    app = StreamApplication("a")
    d = KAFKA.input("in", serde=KV_JSON, partitions=4)
    assert app.input(d) is app.input(KAFKA.input("in", serde=KV_JSON, partitions=4))


def test_input_and_output_require_descriptors():
    app = StreamApplication("a")
    with pytest.raises(TypeError, match="system.input"):
        app.input("in")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="system.output"):
        app.output(MEM.input("in"))  # type: ignore[arg-type]


def test_output_returns_an_output_stream():
    app = StreamApplication("a")
    d = MEM.output("out", serde=StringSerde())
    out = app.output(d)
    assert isinstance(out, OutputStream)
    assert out.stream_id == "out"
    assert out.descriptor == d
    assert repr(out) == "OutputStream('out')"


def test_one_stream_id_with_two_serdes_raises_naming_stream_and_serdes():
    app = StreamApplication("a")
    app.input(MEM.input("in", serde=JsonSerde()))
    with pytest.raises(PlanError, match="'in'") as info:
        app.input(MEM.input("in", serde=StringSerde()))
    assert "JsonSerde()" in str(info.value) and "StringSerde()" in str(info.value)
    assert "serde" in str(info.value)


def test_one_output_id_with_two_serdes_raises():
    app = StreamApplication("a")
    app.output(MEM.output("out", serde=BytesSerde()))
    with pytest.raises(PlanError, match="'out'.*different serdes"):
        app.output(MEM.output("out", serde=StringSerde()))


@pytest.mark.parametrize("other", [
    KAFKA.input("in", partitions=8),                     # other partitions
    MEM.input("in", partitions=4),                       # other system
    KAFKA.input("in", partitions=4, physical_name="x"),  # other physical stream
    KAFKA.input("in", partitions=4, offset_default="upcoming"),
])
def test_one_stream_id_with_two_descriptors_raises(other):
    app = StreamApplication("a")
    app.input(KAFKA.input("in", partitions=4))
    with pytest.raises(PlanError, match="stream 'in' is registered twice with different "
                                        "descriptors"):
        app.input(other)


def test_input_and_output_of_one_stream_id_must_agree():
    app = StreamApplication("a")
    app.input(KAFKA.input("loop", serde=KV_JSON, partitions=2))
    with pytest.raises(PlanError, match="'loop'"):
        app.output(KAFKA.output("loop", serde=KV_JSON, partitions=3))
    with pytest.raises(PlanError, match="'loop'.*serde"):
        app.output(KAFKA.output("loop", serde=JsonSerde(), partitions=2))


def test_input_and_output_of_the_same_physical_stream_is_allowed():
    # As in Samza, a stream the job both reads and writes is one stream, not a conflict.
    app = StreamApplication("a")
    s = app.input(KAFKA.input("loop", serde=KV_JSON, partitions=2))
    out = app.output(KAFKA.output("loop", serde=KV_JSON, partitions=2))
    s.filter(lambda kv: kv.value["n"] > 0).send_to(out)
    plan = app.plan()
    assert set(plan.input_streams) == {"loop"}
    assert set(plan.output_streams) == {"loop"}
    assert plan.streams["loop"].partitions == 2


def test_input_id_of_an_existing_intermediate_stream_raises():
    app = StreamApplication("a")
    app.input(MEM.input("in")).partition_by(lambda m: m, name="p").sink(print)
    with pytest.raises(PlanError, match=re.escape("'a-1-partition_by-p'")):
        app.input(MEM.input("a-1-partition_by-p"))
    with pytest.raises(PlanError, match=re.escape("'a-1-partition_by-p'")):
        app.output(MEM.output("a-1-partition_by-p"))


@pytest.mark.parametrize("opcode", ["partition_by", "broadcast"])
def test_intermediate_id_clashing_with_a_stream_raises_and_registers_nothing(opcode):
    app = StreamApplication("a")
    s = app.input(MEM.input("in"))
    app.output(MEM.output(f"a-1-{opcode}-x"))
    before = app.spec().operators
    with pytest.raises(PlanError, match=re.escape(f"'a-1-{opcode}-x'")):
        if opcode == "partition_by":
            s.partition_by(lambda m: m, name="x")
        else:
            s.broadcast(name="x")
    assert app.spec().operators == before
    assert app.spec().intermediates == {}


def test_table_registration():
    app = StreamApplication("a")
    t = app.table("profiles", serde=KV_JSON)
    assert isinstance(t, Table)
    assert t.table_id == "profiles"
    assert t.spec.changelog is True
    assert repr(t) == "Table('profiles')"
    assert app.table("profiles", serde=KV_JSON).spec == t.spec
    assert app.table("nolog", serde=KV_JSON, changelog=False).spec.changelog is False


def test_table_errors_name_the_table():
    app = StreamApplication("a")
    app.table("t", serde=KV_JSON)
    with pytest.raises(PlanError, match="'t'.*twice"):
        app.table("t", serde=KV_JSON, changelog=False)
    with pytest.raises(PlanError, match="'bad name'"):
        app.table("bad name", serde=KV_JSON)
    with pytest.raises(TypeError, match="'u'.*KVSerde"):
        app.table("u", serde=JsonSerde())  # type: ignore[arg-type]


# -- operator ids and call sites ---------------------------------------------------------------

def test_operator_ids_use_name_or_a_counter_over_all_operators():
    app = StreamApplication("pv", app_id="3")
    s = app.input(MEM.input("in"))
    a = s.map(str, name="first")
    b = a.filter(bool)
    c = b.flat_map(list, name="Sp_l-it")
    d = c.map(str)
    assert a.op_id == "pv-3-map-first"
    assert b.op_id == "pv-3-filter-1"  # the counter counts named operators too, as Samza's
    assert c.op_id == "pv-3-flat_map-Sp_l-it"
    assert d.op_id == "pv-3-map-3"
    assert [op.op_id for op in app.spec().operators] == [a.op_id, b.op_id, c.op_id, d.op_id]


def test_every_opcode_appears_lower_case_in_its_id():
    from datetime import timedelta

    from samza_dsl import Windows

    app = StreamApplication("x")
    s = app.input(MEM.input("in", serde=KV_JSON))
    t = app.table("t", serde=KV_JSON)
    ids = [
        s.map(str, name="n").op_id,
        s.filter(bool, name="n").op_id,
        s.flat_map(list, name="n").op_id,
        s.async_flat_map(_async_identity, name="n").op_id,
        s.merge(s.map(str), name="n").op_id,
        s.window(Windows.tumbling(timedelta(seconds=1)), name="n").op_id,
        s.join(s.map(str), key=str, other_key=str, combine=max, ttl=timedelta(seconds=1),
               name="n").op_id,
        s.join_table(t, combine=max, name="n").op_id,
    ]
    assert ids == [f"x-1-{op}-n" for op in ("map", "filter", "flat_map", "async_flat_map",
                                           "merge", "window", "join", "join_table")]
    s.partition_by(str, name="n")
    s.broadcast(name="n")
    s.sink(print, name="n")
    s.send_to(t)
    opcodes = {op.opcode for op in app.spec().operators}
    assert {"partition_by", "broadcast", "sink", "send_to"} <= opcodes
    assert "x-1-partition_by-n" in app.spec().intermediates
    assert "x-1-broadcast-n" in app.spec().intermediates
    assert any(op.op_id == "x-1-sink-n" for op in app.spec().operators)


async def _async_identity(m):
    return [m]


@pytest.mark.parametrize("name", ["", "with space", "dot.ted", "slash/", "ü", 7])
def test_malformed_operator_name_raises_naming_it(name):
    app = StreamApplication("a")
    s = app.input(MEM.input("in"))
    with pytest.raises(PlanError, match="malformed") as info:
        s.map(str, name=name)
    assert repr(name) in str(info.value)
    assert app.spec().operators == ()


def test_duplicate_operator_name_raises_naming_the_id_and_first_call_site():
    app = StreamApplication("a")
    s = app.input(MEM.input("in"))
    line = here(); s.map(str, name="dup")  # noqa: E702
    with pytest.raises(PlanError, match=re.escape("'a-1-map-dup'")) as info:
        s.map(str, name="dup")
    assert f"test_application.py:{line}" in str(info.value)
    # another opcode with the same name is another id
    assert s.filter(bool, name="dup").op_id == "a-1-filter-dup"


def test_a_failed_registration_does_not_take_a_counter_value():
    app = StreamApplication("a")
    s = app.input(MEM.input("in"))
    s.map(str, name="dup")
    with pytest.raises(PlanError, match="'a-1-map-dup'"):
        s.map(str, name="dup")
    assert s.map(str).op_id == "a-1-map-1"


def test_user_name_equal_to_a_counter_id_is_a_duplicate():
    app = StreamApplication("a")
    s = app.input(MEM.input("in"))
    assert s.map(str).op_id == "a-1-map-0"
    with pytest.raises(PlanError, match=re.escape("'a-1-map-0'")):
        s.map(str, name="0")


def test_call_site_is_the_users_file_and_line():
    app = StreamApplication("a")
    s = app.input(MEM.input("in"))
    line1, m = here(), s.map(str)
    line2, merged = here(), m.merge(s.filter(bool))  # through merge -> merge_all
    line3, joined = here(), _build_join_elsewhere(merged, s)
    ops = {op.op_id: op for op in app.spec().operators}
    assert ops[m.op_id].call_site == f"test_application.py:{line1}"
    assert ops[merged.op_id].call_site == f"test_application.py:{line2}"
    # the first frame outside samza_dsl is the helper's line, not this test's
    assert ops[joined.op_id].call_site == f"test_application.py:{_JOIN_LINE}"
    assert line3 != _JOIN_LINE


def _build_join_elsewhere(left, right):
    from datetime import timedelta
    return left.join(right, key=str, other_key=str, combine=max, ttl=timedelta(seconds=1), name="j")


_JOIN_LINE = _build_join_elsewhere.__code__.co_firstlineno + 2


# -- spec snapshot -----------------------------------------------------------------------------

def test_spec_is_an_immutable_snapshot():
    app = StreamApplication("a", config={"task.commit.ms": 1000})
    s = app.input(MEM.input("in"))
    s.map(str, name="m")
    snap = app.spec()
    assert isinstance(snap, ApplicationSpec)
    assert snap.job_name == "a-1"
    assert snap.config == {"task.commit.ms": 1000}
    s.filter(bool, name="later")
    assert [op.op_id for op in snap.operators] == ["a-1-map-m"]
    assert len(app.spec().operators) == 2
    op = snap.operator("a-1-map-m")
    assert isinstance(op, MapSpec) and op.inputs == ("stream:in",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.name = "other"  # type: ignore[misc]
    with pytest.raises(KeyError):
        snap.operator("a-1-map-nope")


def test_plan_delegates_to_the_planner_and_validates_its_config():
    app = StreamApplication("a")
    app.input(MEM.input("in", partitions=3)).partition_by(str, name="p").sink(print)
    plan = app.plan()
    assert plan.intermediate_streams["a-1-partition_by-p"].partitions == 3
    assert app.plan(config={"job.intermediate.stream.partitions": "5"}) \
        .intermediate_streams["a-1-partition_by-p"].partitions == 5
    with pytest.raises(ConfigError, match=re.escape("'job.intermediate.partitions'")):
        app.plan(config={"job.intermediate.partitions": 5})
    with pytest.raises(ConfigError, match=re.escape("job.intermediate.stream.partitions")):
        app.plan(config={"job.intermediate.stream.partitions": 0})
    with pytest.raises(ConfigError, match=re.escape("job.intermediate.stream.partitions")):
        app.plan(config={"job.intermediate.stream.partitions": -2})


def test_errors_share_one_hierarchy():
    assert issubclass(PlanError, SamzaError) and issubclass(PlanError, ValueError)
    assert issubclass(ConfigError, SamzaError) and issubclass(ConfigError, ValueError)
