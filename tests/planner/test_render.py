"""Pictures of a plan: JSON, DOT, Mermaid, SVG, HTML and the notebook view.

These tests need Graphviz's `dot`: without it they fail (they never skip)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from datetime import timedelta

import networkx as nx
import pytest

from planner import ExecutionPlan, graph_from_json
from planner.render import GRAPHVIZ_HINT, GraphvizMissing
from samza_dsl import KV, StreamApplication, Triggers, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem, MemorySystem

KAFKA = KafkaSystem("kafka", bootstrap_servers="127.0.0.1:9092")
MEM = MemorySystem()
KV_JSON = KVSerde(StringSerde(), JsonSerde())
SVG_NS = "{http://www.w3.org/2000/svg}"


def rich_plan() -> ExecutionPlan:
    """Every operator kind, a table, an intermediate and a broadcast stream."""
    app = StreamApplication("shop", app_id="2")
    orders = app.input(KAFKA.input("orders", serde=KV_JSON, partitions=4))
    clicks = app.input(KAFKA.input("clicks", serde=KV_JSON))
    users = app.table("users", serde=KV_JSON)
    app.input(KAFKA.input("user-updates", serde=KV_JSON, partitions=4)).send_to(users)
    out = app.output(KAFKA.output("enriched", serde=KV_JSON, partitions=8))

    async def lookup(m):
        return [m]

    by_user = clicks.map(lambda kv: kv, name="parse").filter(lambda kv: kv.value, name="valid") \
        .partition_by(lambda kv: kv.key, lambda kv: kv.value, name="by-user")
    joined = orders.join(by_user, key=lambda kv: kv.key, other_key=lambda kv: kv.key,
                         combine=lambda o, c: KV(o.key, (o.value, c.value)),
                         ttl=timedelta(minutes=10), name="order-clicks")
    enriched = joined.join_table(users, combine=lambda m, u: m, name="with-user")
    windowed = enriched.window(
        Windows.keyed_tumbling(lambda kv: kv.key, timedelta(minutes=5))
        .early_trigger(Triggers.repeat(Triggers.count(100))), name="per-user")
    summary = windowed.flat_map(lambda pane: [pane], name="panes") \
        .async_flat_map(lookup, name="lookup")
    summary.merge(enriched.map(lambda kv: kv, name="raw"), name="both").send_to(out)
    summary.broadcast(name="everyone").sink(print, name="log")
    return app.plan()


@pytest.fixture(scope="module")
def plan() -> ExecutionPlan:
    return rich_plan()


def op_ids(plan):
    return [op.op_id for op in plan.app.operators]


def test_the_fixture_covers_every_opcode(plan):
    from samza_dsl.spec import OPCODES

    assert {op.opcode for op in plan.app.operators} == set(OPCODES)


# -- JSON ----------------------------------------------------------------------------------------

def test_json_lists_every_stream_with_its_partitions(plan):
    d = json.loads(plan.to_json())
    assert set(d["streams"]) == set(plan.streams) == {
        "orders", "clicks", "user-updates", "enriched", "shop-2-partition_by-by-user",
        "shop-2-broadcast-everyone"}
    for sid, s in d["streams"].items():
        assert s["partitions"] == plan.streams[sid].partitions
        assert s["kind"] == plan.streams[sid].kind
    assert d["streams"]["orders"]["partitions"] == 4
    assert d["streams"]["clicks"]["partitions"] is None  # known only at run time
    assert d["streams"]["shop-2-partition_by-by-user"]["partitions"] == 4  # joined with orders
    assert d["streams"]["shop-2-broadcast-everyone"]["partitions"] == 1
    assert d["application"] == {"name": "shop", "app_id": "2", "job": "shop-2"}


def test_json_lists_every_operator(plan):
    d = json.loads(plan.to_json())
    ops = d["operators"]
    assert list(ops) == op_ids(plan)
    for op in plan.app.operators:
        j = ops[op.op_id]
        assert j["id"] == op.op_id and j["opcode"] == op.opcode and j["name"] == op.name
        assert j["call_site"] == op.call_site and re.fullmatch(r"test_render\.py:\d+",
                                                                 j["call_site"])
        assert j["stage"] == plan.stage_of(op.op_id).stage_id
        assert j["inputs"] == list(op.inputs)
        # next ids: the operators that read this operator's output directly
        readers = [o.op_id for o in plan.app.operators if op.op_id in o.inputs]
        assert j["next"] == readers
    assert ops["shop-2-join-order-clicks"]["ttl_ms"] == 600_000
    window = ops["shop-2-window-per-user"]["window"]
    assert window["size_ms"] == 300_000 and window["kind"] == "keyed_tumbling"
    assert window["early_trigger"] == "repeat(count(100))"
    assert ops["shop-2-partition_by-by-user"]["outputs"] == ["stream:shop-2-partition_by-by-user"]
    assert ops["shop-2-partition_by-by-user"]["next"] == []
    assert ops["shop-2-join_table-with-user"]["lookups"] == ["table:users"]
    assert ops["shop-2-async_flat_map-lookup"]["ordering"] == "none"


def test_json_has_stages_tables_stores_and_config(plan):
    d = json.loads(plan.to_json())
    assert [s["id"] for s in d["stages"]] == [s.stage_id for s in plan.stages]
    assert sorted(op for s in d["stages"] for op in s["operators"]) == sorted(op_ids(plan))
    assert d["tables"] == {"users": {"serde": "KVSerde(StringSerde(), JsonSerde())",
                                     "changelog": True}}
    assert set(d["stores"]) == set(plan.stores)
    assert d["config"]["task.window.ms"] == plan.config["task.window.ms"]


def test_graph_from_json_rebuilds_the_graph(plan):
    rebuilt = graph_from_json(plan.to_json())
    assert set(rebuilt.nodes) == set(plan.graph.nodes)
    assert set(rebuilt.edges) == set(plan.graph.edges)
    for u, v, data in plan.graph.edges(data=True):
        assert rebuilt.edges[u, v] == data
    for n, data in plan.graph.nodes(data=True):
        for k in ("kind", "opcode", "role", "partitions", "stage", "call_site"):
            assert rebuilt.nodes[n].get(k) == data.get(k)
    assert nx.is_isomorphic(
        rebuilt, plan.graph,
        node_match=lambda a, b: all(a.get(k) == b.get(k)
                                    for k in ("kind", "opcode", "role", "partitions")),
        edge_match=lambda a, b: (a["kind"], a["port"]) == (b["kind"], b["port"]))
    assert graph_from_json(plan.to_dict()).nodes == rebuilt.nodes


# -- DOT and Mermaid -----------------------------------------------------------------------------

def test_dot_draws_stages_operators_streams_and_tables(plan):
    dot = plan.to_dot()
    assert dot.startswith('digraph "shop-2" {') and dot.rstrip().endswith("}")
    for stage in plan.stages:
        assert f'subgraph "cluster_{stage.stage_id}"' in dot
    for op in plan.app.operators:
        line = re.search(rf'^\s+"{re.escape(op.op_id)}" \[label=.*$', dot, re.M)
        assert line, op.op_id
        assert op.call_site in line.group() and f'id="{op.op_id}"' in line.group()
    for sid in ("orders", "clicks", "user-updates", "enriched"):
        assert re.search(rf'^\s+"stream:{sid}" \[label=', dot, re.M), sid
    assert '"stream:orders" [label="orders\\n4 partitions"' in dot
    assert '"stream:clicks" [label="clicks\\n? partitions"' in dot
    assert '"table:users" [label="table users"' in dot
    # intermediate streams are edges from the producer to each consumer, with the count
    assert ('"shop-2-partition_by-by-user" -> "shop-2-join-order-clicks" '
            '[label="right: shop-2-partition_by-by-user\\n4 partitions"') in dot
    assert ('"shop-2-broadcast-everyone" -> "shop-2-sink-log" '
            '[label="shop-2-broadcast-everyone\\n1 partition"') in dot
    assert '"stream:orders" -> "shop-2-join-order-clicks" [label="left"];' in dot
    assert '"table:users" -> "shop-2-join_table-with-user" [style=dashed];' in dot
    assert "ttl=600000ms" in dot and "keyed_tumbling 300000ms" in dot


def test_mermaid_draws_every_operator_in_its_stage(plan):
    text = plan.to_mermaid()
    lines = text.splitlines()
    assert lines[0] == "flowchart LR"
    for stage in plan.stages:
        head = f'  subgraph {stage.stage_id.replace("-", "_")}["{stage.stage_id}"]'
        start = lines.index(head)
        end = lines.index("  end", start)
        body = "\n".join(lines[start:end])
        for op_id in stage.operators:
            assert op_id in body
    for op_id in op_ids(plan):
        assert op_id in text
    # the join's ports, also where a side is an intermediate stream
    assert '==>|"right: shop-2-partition_by-by-user (4 partitions)"|' in text
    assert "-->|left|" in text and "-.->" in text
    # one arrow per edge, with an intermediate stream drawn once per consumer
    arrows = sum(1 for line in lines if re.search(r" (-->|==>|-\.->)", line))
    assert arrows == plan.graph.number_of_edges() - 2  # 2 intermediates, one consumer each


# -- SVG, HTML, notebook -------------------------------------------------------------------------

def test_svg_is_valid_and_names_every_operator(plan):
    svg = plan.to_svg()
    root = ET.fromstring(svg.encode())
    assert root.tag == f"{SVG_NS}svg"
    titles = {t.text for t in root.iter(f"{SVG_NS}title")}
    ids = {e.get("id") for e in root.iter()}
    for op_id in op_ids(plan):
        assert op_id in titles and op_id in ids
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG_NS}text"))
    assert "shop-2-partition_by-by-user" in texts and "4 partitions" in texts


def test_html_embeds_the_svg(plan):
    page = plan.to_html()
    assert page.startswith("<!DOCTYPE html>")
    start, end = page.index("<svg"), page.index("</svg>") + len("</svg>")
    root = ET.fromstring(page[start:end])
    assert root.tag == f"{SVG_NS}svg"
    ids = {e.get("id") for e in root.iter()}
    assert set(op_ids(plan)) <= ids
    assert "<title>Plan of shop-2</title>" in page
    assert "<h3>Streams</h3>" in page


def test_repr_html_shows_the_svg(plan):
    view = plan._repr_html_()
    assert view.startswith("<div>") and "Plan of shop-2" in view
    root = ET.fromstring(view[view.index("<svg"):view.index("</svg>") + len("</svg>")])
    assert root.tag == f"{SVG_NS}svg"
    assert set(op_ids(plan)) <= {e.get("id") for e in root.iter()}


@pytest.fixture
def no_graphviz(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))


@pytest.mark.parametrize("render", ["to_svg", "to_html"])
def test_missing_graphviz_says_how_to_install_it(plan, no_graphviz, render):
    with pytest.raises(GraphvizMissing) as info:
        getattr(plan, render)()
    text = str(info.value)
    assert "shop-2" in text
    assert "apt-get install graphviz" in text and "brew install graphviz" in text
    assert GRAPHVIZ_HINT in text


def test_notebook_view_falls_back_to_mermaid_without_graphviz(plan, no_graphviz):
    view = plan._repr_html_()
    assert "apt-get install graphviz" in view
    assert "flowchart LR" in view and "<svg" not in view
    # the text renderers need no binary
    assert plan.to_dot() and plan.to_mermaid() and plan.to_json()


def test_graphviz_is_installed_here():
    # the rendering tests above need `dot`; CI installs it (./dev setup)
    import shutil

    assert shutil.which("dot"), "install Graphviz: apt-get install graphviz"


def test_a_hopping_window_shows_its_kind_size_and_hop():
    app = StreamApplication("hops")
    w = Windows.keyed_hopping(lambda kv: kv.key, timedelta(minutes=5), timedelta(minutes=1),
                              init=lambda: 0, fold=lambda kv, n: n + 1,
                              combine=lambda a, b: a + b, event_time=lambda kv: kv.value["ts"])
    (app.input(MEM.input("clicks", serde=KV_JSON)).window(w, name="recent")
     .sink(print, name="log"))
    plan = app.plan()
    op = json.loads(plan.to_json())["operators"]["hops-1-window-recent"]["window"]
    assert op == {"kind": "keyed_hopping", "size_ms": 300_000, "hop_ms": 60_000,
                  "time": "event", "mode": "accumulating", "combine": True}
    label = "keyed_hopping 300000ms hop 60000ms event-time"
    assert label in plan.explain() and label in plan.to_dot()
    assert "keyed_hopping 300000ms hop 60000ms" in plan.to_svg()


def test_bootstrap_and_priority_inputs_show_in_every_format():
    app = StreamApplication("chooser")
    profiles = app.input(KAFKA.input("profiles", serde=KV_JSON, partitions=2, bootstrap=True))
    alerts = app.input(KAFKA.input("alerts", serde=KV_JSON, partitions=2, priority=3))
    clicks = app.input(KAFKA.input("clicks", serde=KV_JSON, partitions=2))
    profiles.merge(alerts, name="m").merge(clicks, name="m2").sink(print, name="log")
    plan = app.plan()
    streams = json.loads(plan.to_json())["streams"]
    assert streams["profiles"]["bootstrap"] is True and "priority" not in streams["profiles"]
    assert streams["alerts"]["priority"] == 3 and "bootstrap" not in streams["alerts"]
    assert "bootstrap" not in streams["clicks"] and "priority" not in streams["clicks"]
    assert '"stream:profiles" [label="profiles\\n2 partitions\\nbootstrap"' in plan.to_dot()
    assert '"stream:alerts" [label="alerts\\n2 partitions\\npriority 3"' in plan.to_dot()
    lines = {line.split()[1]: line for line in plan.explain().splitlines()
             if line.startswith("  input ")}
    assert lines["alerts"].endswith(", priority 3)") and lines["profiles"].endswith(", bootstrap)")
    assert lines["clicks"].endswith("JsonSerde()))")
    svg = plan.to_svg()
    assert ">bootstrap</text>" in svg and ">priority 3</text>" in svg
    page = plan.to_html()
    assert "<th>reading order</th>" in page and "<td>bootstrap</td>" in page \
        and "<td>priority 3</td>" in page
    assert "bootstrap" in plan.to_mermaid()


def side_input_app(partitions: int) -> StreamApplication:
    """Clicks (2 partitions) joined with a table filled from a side input."""
    app = StreamApplication("sides")
    users = app.table("users", serde=KV_JSON, processor=lambda kv: [kv], side_inputs=[
        KAFKA.input("user-updates", serde=KV_JSON, partitions=partitions)])
    (app.input(KAFKA.input("clicks", serde=KV_JSON, partitions=2))
     .join_table(users, combine=lambda m, u: m, name="j").sink(print, name="log"))
    return app


def test_side_inputs_show_in_every_format():
    plan = side_input_app(2).plan()
    d = json.loads(plan.to_json())
    assert d["tables"]["users"] == {"serde": KV_JSON.describe(), "changelog": False,
                                    "side_inputs": ["user-updates"]}
    assert d["streams"]["user-updates"]["side_input_of"] == "users"
    assert d["streams"]["user-updates"]["bootstrap"] is True
    dot = plan.to_dot()
    assert '"table:users" [label="table users\\nside inputs: user-updates"' in dot
    assert ('"stream:user-updates" [label="user-updates\\n2 partitions\\nbootstrap, side input '
            'of users"') in dot
    assert "side input of users" in plan.to_svg() and "side input of users" in plan.to_html()
    assert "side input of users" in plan.explain()


def test_a_side_input_is_partitioned_as_the_inputs_joined_with_its_table():
    from samza_dsl.errors import PlanError

    with pytest.raises(PlanError, match="user-updates"):
        side_input_app(3).plan()
