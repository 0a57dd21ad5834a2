"""Planning: stages split at partition_by/broadcast, generated config (task.window.ms, streams,
stores), and the plan's graph."""

from __future__ import annotations

import math
from datetime import timedelta

import networkx as nx
import pytest

from samza_dsl import StreamApplication, Triggers, Windows
from samza_dsl.config import config_value
from samza_dsl.errors import ConfigError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem, MemorySystem

MEM = MemorySystem()
KAFKA = KafkaSystem("kafka", bootstrap_servers="127.0.0.1:9092")
KV_JSON = KVSerde(StringSerde(), JsonSerde())
S = timedelta(seconds=1)


def join(left, right, name, ttl=S):
    return left.join(right, key=str, other_key=str, combine=lambda a, b: (a, b), ttl=ttl,
                     name=name)


def stage_ops(plan):
    return [list(stage.operators) for stage in plan.stages]


# -- stages --------------------------------------------------------------------------------------

def test_a_linear_pipeline_is_one_stage():
    app = StreamApplication("a")
    m = app.input(MEM.input("in")).map(str)
    m.filter(bool).send_to(app.output(MEM.output("out")))
    plan = app.plan()
    assert len(plan.stages) == 1
    stage = plan.stages[0]
    assert stage.inputs == ("in",) and stage.outputs == ("out",)
    assert list(stage.operators) == [op.op_id for op in app.spec().operators]


@pytest.mark.parametrize("opcode", ["partition_by", "broadcast"])
def test_stages_split_at_partition_by_and_broadcast(opcode):
    app = StreamApplication("a")
    s = app.input(MEM.input("in")).map(str, name="before")
    inter = s.partition_by(str, name="x") if opcode == "partition_by" else s.broadcast(name="x")
    inter.map(str, name="after").send_to(app.output(MEM.output("out")))
    plan = app.plan()
    sid = f"a-1-{opcode}-x"
    assert stage_ops(plan) == [["a-1-map-before", sid], ["a-1-map-after", "a-1-send_to-3"]]
    first, second = plan.stages
    assert (first.inputs, first.outputs) == (("in",), (sid,))
    assert (second.inputs, second.outputs) == ((sid,), ("out",))
    assert plan.stage_of(sid) is first and plan.stage_of("a-1-map-after") is second


def test_stages_are_ordered_producers_first():
    app = StreamApplication("a")
    raw = app.input(MEM.input("raw"))
    # register the consumer side of p2 before anything else reads p1
    p1 = raw.partition_by(str, name="p1")
    p2 = p1.partition_by(str, name="p2")
    p2.sink(print, name="last")
    p1.sink(print, name="mid")
    plan = app.plan()
    index = {op: i for i, stage in enumerate(plan.stages) for op in stage.operators}
    assert index["a-1-partition_by-p1"] < index["a-1-partition_by-p2"] < index["a-1-sink-last"]
    assert index["a-1-partition_by-p1"] < index["a-1-sink-mid"]
    assert [s.stage_id for s in plan.stages] == [f"stage-{i}" for i in range(len(plan.stages))]


def test_unconnected_inputs_are_separate_stages_and_joined_inputs_one():
    app = StreamApplication("a")
    a, b, c = (app.input(MEM.input(s)) for s in "abc")
    join(a, b.map(str), "j").sink(print)
    c.sink(print)
    plan = app.plan()
    assert sorted(sorted(stage.inputs) for stage in plan.stages) == [["a", "b"], ["c"]]


def test_tables_do_not_join_stages_but_are_recorded():
    app = StreamApplication("a")
    t = app.table("t", serde=KV_JSON)
    app.input(MEM.input("w")).send_to(t)
    app.input(MEM.input("r")).join_table(t, combine=max).sink(print)
    plan = app.plan()
    writer, reader = plan.stages
    assert (writer.inputs, writer.tables_written, writer.tables_read) == (("w",), ("t",), ())
    assert (reader.inputs, reader.tables_written, reader.tables_read) == (("r",), (), ("t",))


def test_an_input_joined_with_its_own_repartition_plans():
    # the consumer of the intermediate stream is connected to its producer's stage
    app = StreamApplication("a")
    x = app.input(MEM.input("x", partitions=2))
    p = x.partition_by(str, name="p")
    join(x.map(str), p, "j").send_to(app.output(MEM.output("out")))
    plan = app.plan()
    assert plan.intermediate_streams["a-1-partition_by-p"].partitions == 2
    assert sorted(op for s in plan.stages for op in s.operators) == sorted(
        op.op_id for op in app.spec().operators)


def test_stages_that_read_each_others_streams_plan():
    # stage A (x ...) writes p1, read by stage B, which writes p2, read back by A's join
    app = StreamApplication("a")
    x = app.input(MEM.input("x"))
    p1 = x.partition_by(str, name="p1")
    p2 = p1.map(str).partition_by(str, name="p2")
    join(x.map(str), p2, "j").sink(print)
    plan = app.plan()
    all_ops = [op for s in plan.stages for op in s.operators]
    assert sorted(all_ops) == sorted(op.op_id for op in app.spec().operators)
    assert len(all_ops) == len(set(all_ops))


# -- task.window.ms (docs/semantics.md rule 4) -----------------------------------------------------------

def window_ms(app, **kw):
    return app.plan(**kw).config.get("task.window.ms")


def test_window_ms_is_the_gcd_of_window_sizes_and_join_ttls():
    app = StreamApplication("a")
    a, b = app.input(MEM.input("a")), app.input(MEM.input("b"))
    a.window(Windows.tumbling(timedelta(seconds=10)), name="w").sink(print)
    join(a, b, "j", ttl=timedelta(seconds=4)).sink(print)
    assert window_ms(app) == math.gcd(10_000, 4_000) == 2000


def test_window_ms_counts_every_trigger_duration():
    app = StreamApplication("a")
    w = (Windows.keyed_session(str, timedelta(seconds=30))
         .early_trigger(Triggers.repeat(Triggers.any(
             Triggers.count(10), Triggers.time_since_first_message(timedelta(seconds=9)))))
         .late_trigger(Triggers.time_since_last_message(timedelta(seconds=12))))
    app.input(MEM.input("a")).window(w, name="w").sink(print)
    assert window_ms(app) == math.gcd(30_000, 9_000, 12_000) == 3000


def test_window_ms_of_one_join_is_its_ttl():
    app = StreamApplication("a")
    join(app.input(MEM.input("a")), app.input(MEM.input("b")), "j",
         ttl=timedelta(milliseconds=750)).sink(print)
    assert window_ms(app) == 750


def test_no_window_ms_without_a_window_or_join():
    app = StreamApplication("a")
    app.input(MEM.input("a")).map(str).sink(print)
    plan = app.plan()
    assert "task.window.ms" not in plan.config
    assert config_value(plan.config, "task.window.ms") == -1


def test_event_time_window_size_is_no_timer():
    # an event-time window closes on the watermark; only its time triggers need ticks
    app = StreamApplication("a")
    s = app.input(MEM.input("a"))
    s.window(Windows.tumbling(timedelta(seconds=10), event_time=float), name="w").sink(print)
    assert window_ms(app) is None
    s.window(Windows.tumbling(timedelta(seconds=10), event_time=float)
             .early_trigger(Triggers.time_since_first_message(timedelta(seconds=4))),
             name="w2").sink(print)
    assert window_ms(app) == 4000
    join(s, app.input(MEM.input("b")), "j", ttl=timedelta(seconds=6)).sink(print)
    assert window_ms(app) == 2000


def test_user_window_ms_wins():
    app = StreamApplication("a", config={"task.window.ms": 500})
    app.input(MEM.input("a")).window(Windows.tumbling(timedelta(seconds=10)), name="w") \
        .sink(print)
    plan = app.plan()
    assert plan.config["task.window.ms"] == 500
    assert "task.window.ms" not in plan.generated_config
    assert window_ms(app, config={"task.window.ms": "250"}) == 250


# -- generated config and stores -----------------------------------------------------------------

def test_generated_config_names_the_job_and_streams():
    app = StreamApplication("gen", app_id="2")
    s = app.input(KAFKA.input("in", serde=KV_JSON, partitions=3, physical_name="In"))
    s.partition_by(str, name="p").broadcast(name="b").send_to(
        app.output(KAFKA.output("out", partitions=3)))
    plan = app.plan()
    c = plan.config
    assert (c["job.name"], c["job.id"]) == ("gen", "2")
    assert c["streams.in.samza.physical.name"] == "In"
    assert c["streams.in.samza.system"] == "kafka"
    p, b = "gen-2-partition_by-p", "gen-2-broadcast-b"
    assert c[f"streams.{p}.samza.intermediate"] is True
    assert c[f"streams.{p}.partitions"] == plan.streams[p].partitions == 3
    assert c[f"streams.{b}.samza.broadcast"] is True
    assert c[f"streams.{b}.partitions"] == 1
    assert f"streams.{p}.samza.broadcast" not in c
    assert "streams.in.partitions" not in c  # only intermediate streams are created by the job
    assert plan.config == {**plan.generated_config, **app.config}


def test_user_config_wins_over_generated_config():
    app = StreamApplication("a", config={"job.name": "custom",
                                         "streams.in.samza.physical.name": "in-v2"})
    app.input(MEM.input("in")).sink(print)
    plan = app.plan(config={"task.max.concurrency": 4})
    assert plan.config["job.name"] == "custom" and plan.job_name == "custom-1"
    assert plan.config["streams.in.samza.physical.name"] == "in-v2"
    assert plan.streams["in"].physical_name == "in-v2"
    assert plan.config["task.max.concurrency"] == 4
    assert "job.name" not in plan.generated_config
    assert plan.generated_config["job.id"] == "1"


def test_config_may_not_move_a_described_stream_to_another_system():
    app = StreamApplication("a", config={"streams.in.samza.system": "k2"})
    app.input(MEM.input("in")).sink(print)
    with pytest.raises(ConfigError, match="stream 'in' is on system 'memory'"):
        app.plan()


def test_intermediate_streams_use_the_default_system():
    app = StreamApplication("a", config={"job.default.system": "kafka"})
    app.input(MEM.input("in")).partition_by(str, name="p").sink(print)
    assert app.plan().streams["a-1-partition_by-p"].system == "kafka"
    app2 = StreamApplication("a")
    app2.input(MEM.input("in")).partition_by(str, name="p").sink(print)
    assert app2.plan().streams["a-1-partition_by-p"].system == "memory"


def test_stores_for_tables_windows_and_join_sides():
    app = StreamApplication("st", config={"stores.custom.changelog": "memory.my-log"})
    t = app.table("t", serde=KV_JSON)
    nolog = app.table("nolog", serde=KV_JSON, changelog=False)
    custom = app.table("custom", serde=KV_JSON)
    a, b = app.input(MEM.input("a")), app.input(MEM.input("b"))
    for table in (t, nolog, custom):
        a.send_to(table)
    a.window(Windows.tumbling(S), name="w").sink(print)
    join(a, b, "j").sink(print)
    plan = app.plan()
    assert set(plan.stores) == {"t", "nolog", "custom", "st-1-window-w", "st-1-join-j-L",
                                "st-1-join-j-R"}
    assert set(plan.tables) == {"t", "nolog", "custom"}
    assert plan.stores["st-1-window-w"].kind == "window"
    assert plan.stores["st-1-window-w"].op_id == "st-1-window-w"
    assert {plan.stores[f"st-1-join-j-{s}"].op_id for s in "LR"} == {"st-1-join-j"}
    assert plan.stores["nolog"].changelog is None
    assert "stores.nolog.changelog" not in plan.config
    assert plan.stores["custom"].changelog == "memory.my-log"
    assert plan.config["stores.custom.changelog"] == "memory.my-log"
    for name in ("t", "st-1-window-w", "st-1-join-j-L", "st-1-join-j-R"):
        log = plan.stores[name].changelog
        assert log and log.startswith("memory.") and name in log
        assert plan.config[f"stores.{name}.changelog"] == log
    assert len({plan.stores[n].changelog for n in plan.stores if n != "nolog"}) == 5


def test_changelog_system_from_config():
    app = StreamApplication("a", config={"job.changelog.system": "kafka"})
    app.input(MEM.input("a")).send_to(app.table("t", serde=KV_JSON))
    assert (app.plan().stores["t"].changelog or "").startswith("kafka.")


# -- graph ---------------------------------------------------------------------------------------

def test_graph_nodes_and_edges():
    app = StreamApplication("g")
    t = app.table("t", serde=KV_JSON)
    a, b = app.input(MEM.input("a", partitions=2)), app.input(MEM.input("b", partitions=2))
    j = join(a, b, "j")
    p = j.partition_by(str, name="p")
    p.join_table(t, combine=max, name="jt").send_to(app.output(MEM.output("out")))
    a.send_to(t)
    g = app.plan().graph
    assert isinstance(g, nx.DiGraph)
    assert g.nodes["stream:a"] | {} == {"kind": "stream", "role": "input", "stream_id": "a",
                                        "partitions": 2, "system": "memory"}
    assert g.nodes["stream:out"]["role"] == "output"
    assert g.nodes["stream:g-1-partition_by-p"]["role"] == "intermediate"
    assert g.nodes["stream:g-1-partition_by-p"]["partitions"] == 2
    assert g.nodes["table:t"]["kind"] == "table"
    jn = g.nodes["g-1-join-j"]
    assert (jn["kind"], jn["opcode"], jn["name"], jn["ttl_ms"]) == ("operator", "join", "j", 1000)
    assert jn["call_site"].startswith("test_build.py:")
    assert g.edges["stream:a", "g-1-join-j"] == {"kind": "data", "port": "left"}
    assert g.edges["stream:b", "g-1-join-j"] == {"kind": "data", "port": "right"}
    assert g.edges["g-1-join-j", "g-1-partition_by-p"] == {"kind": "data", "port": "in"}
    assert g.edges["g-1-partition_by-p", "stream:g-1-partition_by-p"]["kind"] == "write"
    assert g.edges["stream:g-1-partition_by-p", "g-1-join_table-jt"]["kind"] == "data"
    assert g.edges["table:t", "g-1-join_table-jt"] == {"kind": "lookup", "port": "table"}
    assert g.edges["g-1-send_to-4", "table:t"]["kind"] == "write"
    assert g.edges["g-1-send_to-3", "stream:out"]["kind"] == "write"
    assert nx.is_directed_acyclic_graph(g)
    assert g.number_of_nodes() == 4 + 1 + 5  # streams, table, operators
