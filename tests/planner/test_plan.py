"""ExecutionPlan: the views API.md promises."""

from __future__ import annotations

from datetime import timedelta

import pytest

from planner import ExecutionPlan, Stage, StoreSpec, StreamSpec
from planner.render import FORMATS
from samza_dsl import StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem

MEM = MemorySystem()
KV_JSON = KVSerde(StringSerde(), JsonSerde())


def make_plan() -> ExecutionPlan:
    app = StreamApplication("views", config={"task.max.concurrency": 4})
    t = app.table("profiles", serde=KV_JSON)
    views = app.input(MEM.input("views", serde=KV_JSON, partitions=4))
    app.input(MEM.input("profiles-in", serde=KV_JSON, partitions=4)).send_to(t)
    enriched = views.join_table(t, combine=lambda v, p: v, name="enrich")
    counts = enriched.partition_by(lambda kv: kv.key, name="by-user") \
        .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(minutes=1)), name="count")
    counts.broadcast(name="all").send_to(app.output(MEM.output("counts", partitions=2)))
    return app.plan()


def test_plan_views():
    plan = make_plan()
    assert plan.job_name == "views-1"
    assert set(plan.input_streams) == {"views", "profiles-in"}
    assert set(plan.output_streams) == {"counts"}
    assert set(plan.intermediate_streams) == {"views-1-partition_by-by-user", "views-1-broadcast-all"}
    for views in (plan.input_streams, plan.output_streams, plan.intermediate_streams):
        for sid, s in views.items():
            assert isinstance(s, StreamSpec) and s.stream_id == sid
            assert s.partitions is not None and s.partitions >= 1
    assert plan.input_streams["views"].kind == "input" and plan.input_streams["views"].keyed
    assert plan.output_streams["counts"].kind == "output"
    assert plan.intermediate_streams["views-1-broadcast-all"].partitions == 1
    assert set(plan.tables) == {"profiles"}
    assert all(isinstance(s, StoreSpec) for s in plan.stores.values())
    assert all(isinstance(s, Stage) for s in plan.stages)
    assert plan.config["task.max.concurrency"] == 4
    assert plan.config["task.window.ms"] == 60_000


def test_stage_of_and_next_ops():
    plan = make_plan()
    assert plan.stage_of("views-1-join_table-enrich").inputs == ("views",)
    with pytest.raises(KeyError):
        plan.stage_of("nope")
    assert plan.next_ops("stream:views") == ["views-1-join_table-enrich"]
    assert plan.next_ops("views-1-join_table-enrich") == ["views-1-partition_by-by-user"]
    assert plan.next_ops("views-1-partition_by-by-user") == []  # terminal: writes its stream
    assert plan.next_ops("stream:views-1-partition_by-by-user") == ["views-1-window-count"]


def test_text_views():
    plan = make_plan()
    text = plan.explain()
    assert text == str(plan) == plan.to_text() == plan.render("text")
    assert text.startswith("Plan of views-1: ")
    for op in plan.app.operators:
        assert op.op_id in text and op.call_site in text
    assert repr(plan) == (f"ExecutionPlan('views-1', stages={len(plan.stages)}, "
                          f"streams={len(plan.streams)}, operators={len(plan.app.operators)})")


def test_render_dispatches_every_format():
    plan = make_plan()
    assert FORMATS == ("text", "json", "dot", "mermaid", "svg", "html")
    assert plan.render("json") == plan.to_json()
    assert plan.render("dot") == plan.to_dot()
    assert plan.render("mermaid") == plan.to_mermaid()
    assert plan.render("svg").lstrip().startswith("<?xml") or "<svg" in plan.render("svg")
    assert "<html>" in plan.render("html")
    with pytest.raises(ValueError, match="'png'"):
        plan.render("png")


def test_to_dict_matches_to_json():
    import json

    plan = make_plan()
    assert json.loads(plan.to_json()) == json.loads(json.dumps(plan.to_dict(), default=str))
    assert "\n" not in plan.to_json(indent=None)
