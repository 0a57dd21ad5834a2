"""Property tests of the planner over random valid applications.

The strategy builds random chains of map/filter/flat_map/merge/partition_by/broadcast/window/join/
join_table/send_to over several inputs with random known or unknown partition counts. It keeps
joined inputs consistent (it never joins two classes of streams whose known counts differ), so
every generated plan is valid. The expected partition counts and ``task.window.ms`` are worked out
here from docs/semantics.md rules 2 and 4, from the graph, without the planner's helpers."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import networkx as nx
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from planner import ExecutionPlan, graph_from_json
from samza_dsl import MessageStream, StreamApplication, Triggers, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem

MEM = MemorySystem()
KV_JSON = KVSerde(StringSerde(), JsonSerde())
PARTITIONS = st.one_of(st.none(), st.integers(1, 8))
SECONDS = st.sampled_from([1, 2, 3, 4, 5, 6, 10, 15, 30, 60])
TRIGGER_MS = st.sampled_from([250, 500, 1000, 1500, 2000, 3000, 7000])

# joins, tables and repartitions are drawn more often: partition inference is about them
OPS = ["map", "filter", "flat_map", "merge", "partition_by", "partition_by", "broadcast",
       "window", "join", "join", "join", "join_table", "join_table", "send_to_output",
       "send_to_table", "send_to_table", "sink", "repartition_join", "repartition_join"]


def _key(m: Any) -> Any:
    return m


def _combine(a: Any, b: Any) -> Any:
    return (a, b)


class UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, items: list[str]) -> None:
        for a, b in zip(items, items[1:], strict=False):
            self.parent[self.find(a)] = self.find(b)


@dataclass
class Model:
    """What the strategy knows about the application it built."""

    app: StreamApplication
    input_counts: dict[str, int | None] = field(default_factory=dict)
    output_counts: dict[str, int | None] = field(default_factory=dict)
    broadcasts: set[str] = field(default_factory=set)
    durations_ms: list[int] = field(default_factory=list)  # rule 4, as the strategy chose them
    timed: bool = False
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class Entry:
    stream: MessageStream[Any]
    roots: frozenset[str]  # input and intermediate stream ids this stream descends from


@st.composite
def applications(draw: st.DrawFn) -> Model:
    config: dict[str, Any] = {}
    if draw(st.booleans()):
        config["job.intermediate.stream.partitions"] = draw(st.integers(1, 6))
    if draw(st.integers(0, 4)) == 0:
        config["task.window.ms"] = draw(st.integers(1, 5000))
    app = StreamApplication("prop", config=config)
    model = Model(app, config=config)

    # the strategy's own co-partitioning bookkeeping: classes of joined streams and their counts
    uf = UnionFind()
    known: dict[str, int | None] = {}

    def compatible(roots: set[str]) -> bool:
        classes = {uf.find(r) for r in roots if r not in model.broadcasts}
        counts = {known[s] for s in uf.parent if uf.find(s) in classes
                  and known.get(s) is not None}
        return len(counts) <= 1

    def unite(roots: set[str]) -> None:
        uf.union(sorted(r for r in roots if r not in model.broadcasts))

    pool: list[Entry] = []
    for i in range(draw(st.integers(1, 4))):
        sid = f"in{i}"
        n = draw(PARTITIONS)
        model.input_counts[sid] = known[sid] = n
        uf.find(sid)
        pool.append(Entry(app.input(MEM.input(sid, serde=KV_JSON, partitions=n)),
                          frozenset({sid})))
    tables: list[Any] = []

    def pick() -> Entry:
        return draw(st.sampled_from(pool))

    def table() -> Any:
        if tables and draw(st.booleans()):
            return draw(st.sampled_from(tables))
        t = app.table(f"t{len(tables)}", serde=KV_JSON)
        tables.append(t)
        uf.find(f"table:{t.table_id}")
        return t

    for step in range(draw(st.integers(1, 14))):
        op = draw(st.sampled_from(OPS))
        name = f"s{step}"
        if op in ("map", "filter", "flat_map"):
            e = pick()
            pool.append(Entry(getattr(e.stream, op)(_key, name=name), e.roots))
        elif op == "merge":
            es = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
            merged = MessageStream.merge_all([e.stream for e in es], name=name)
            pool.append(Entry(merged, frozenset().union(*(e.roots for e in es))))
        elif op in ("partition_by", "broadcast", "repartition_join"):
            e = pick()
            if op != "broadcast":
                s = e.stream.partition_by(_key, name=name)
            else:
                s = e.stream.broadcast(name=name)
                model.broadcasts.add(s.stream_id or "")
            sid = s.stream_id or ""
            known[sid] = None
            uf.find(sid)
            entry = Entry(s, frozenset({sid}))
            pool.append(entry)
            others = [o for o in pool[:-1] if compatible(set(o.roots))]
            if op == "repartition_join" and others:  # the usual pattern: repartition, then join
                other = draw(st.sampled_from(others))
                left, right = (entry, other) if draw(st.booleans()) else (other, entry)
                ttl = draw(SECONDS)
                unite(set(left.roots | right.roots))
                model.durations_ms.append(ttl * 1000)
                model.timed = True
                joined = left.stream.join(right.stream, key=_key, other_key=_key,
                                          combine=_combine, ttl=timedelta(seconds=ttl),
                                          name=f"{name}j")
                pool.append(Entry(joined, left.roots | right.roots))
        elif op == "window":
            e = pick()
            size = draw(SECONDS)
            event = draw(st.booleans())
            w = draw(st.sampled_from([Windows.tumbling(timedelta(seconds=size),
                                                       event_time=float if event else None),
                                      Windows.keyed_tumbling(_key, timedelta(seconds=size),
                                                             event_time=float if event else None),
                                      Windows.keyed_session(_key, timedelta(seconds=size),
                                                            event_time=float if event else None)]))
            durations = [] if event else [size * 1000]
            kind = draw(st.sampled_from(["none", "count", "first", "any", "repeat"]))
            if kind != "none":
                d = draw(TRIGGER_MS)
                trigger = {"count": Triggers.count(3),
                           "first": Triggers.time_since_first_message(timedelta(milliseconds=d)),
                           "any": Triggers.any(Triggers.count(2), Triggers.time_since_last_message(
                               timedelta(milliseconds=d))),
                           "repeat": Triggers.repeat(Triggers.time_since_first_message(
                               timedelta(milliseconds=d)))}[kind]
                durations += [] if kind == "count" else [d]
                w = w.early_trigger(trigger)
            model.durations_ms += durations
            model.timed = True
            pool.append(Entry(e.stream.window(w, name=name), e.roots))
        elif op == "join":
            a = pick()
            # the other side: any other stream whose classes agree on a known count
            others = [e for e in pool if e.stream.node != a.stream.node
                      and compatible(set(a.roots | e.roots))]
            if not others:
                continue
            b = draw(st.sampled_from(others))
            ttl = draw(SECONDS)
            unite(set(a.roots | b.roots))
            model.durations_ms.append(ttl * 1000)
            model.timed = True
            joined = a.stream.join(b.stream, key=_key, other_key=_key, combine=_combine,
                                   ttl=timedelta(seconds=ttl), name=name)
            pool.append(Entry(joined, a.roots | b.roots))
        elif op in ("join_table", "send_to_table"):
            e, t = pick(), table()
            group = set(e.roots) | {f"table:{t.table_id}"}
            if not compatible(group):
                continue
            unite(group)
            if op == "join_table":
                pool.append(Entry(e.stream.join_table(t, combine=_combine, name=name), e.roots))
            else:
                e.stream.send_to(t)
        elif op == "send_to_output":
            sid = f"out{len(model.output_counts)}"
            n = draw(PARTITIONS)
            model.output_counts[sid] = n
            pick().stream.send_to(app.output(MEM.output(sid, serde=KV_JSON, partitions=n)))
        else:
            pick().stream.sink(print)

    # every input and intermediate stream needs a consumer (rule 3)
    spec = app.spec()
    consumed = {node for op in spec.operators for node in op.inputs}
    for e in pool:
        if e.stream.stream_id is not None and e.stream.node not in consumed:
            e.stream.sink(print)
    return model


# -- the rules, worked out from the graph --------------------------------------------------------

def roots_of(g: nx.DiGraph, op: str) -> set[str]:
    """Input and intermediate stream ids upstream of ``op`` along data edges."""
    out: set[str] = set()
    todo, seen = [op], {op}
    while todo:
        node = todo.pop()
        for pred in g.predecessors(node):
            if g.edges[pred, node]["kind"] != "data" or pred in seen:
                continue
            seen.add(pred)
            if g.nodes[pred]["kind"] == "stream":
                out.add(g.nodes[pred]["stream_id"])
            else:
                todo.append(pred)
    return out


def joined_sets(g: nx.DiGraph) -> list[set[str]]:
    """Streams meeting at each join, and at each table both written and joined (rule 2a),
    without broadcast streams."""
    sets = []
    ops = [n for n, d in g.nodes(data=True) if d["kind"] == "operator"]
    for op in ops:
        if g.nodes[op]["opcode"] == "join":
            sets.append(roots_of(g, op))
    for t in (n for n, d in g.nodes(data=True) if d["kind"] == "table"):
        writers = [u for u in g.predecessors(t) if g.edges[u, t]["kind"] == "write"]
        readers = [v for v in g.successors(t) if g.edges[t, v]["kind"] == "lookup"]
        if writers and readers:
            sets.append(set().union(*(roots_of(g, o) for o in writers + readers)))
    broadcast = {d["stream_id"] for _, d in g.nodes(data=True) if d.get("role") == "broadcast"}
    return [s - broadcast for s in sets]


def expected_partitions(model: Model, g: nx.DiGraph) -> dict[str, int]:
    """Rule 2 for every intermediate stream."""
    uf = UnionFind()
    for s in joined_sets(g):
        uf.union(sorted(s))
    counts = {**model.input_counts}
    known_sizes = [n for n in [*model.input_counts.values(), *model.output_counts.values()]
                   if n is not None]
    default = model.config.get("job.intermediate.stream.partitions") or max(known_sizes,
                                                                             default=1)
    out = {}
    for _node, d in g.nodes(data=True):
        if d.get("role") not in ("intermediate", "broadcast"):
            continue
        sid = d["stream_id"]
        if d["role"] == "broadcast":
            out[sid] = 1
            continue
        cls = uf.find(sid)
        joined_known = {n for s, n in counts.items() if n is not None and s in uf.parent
                        and uf.find(s) == cls}
        assert len(joined_known) <= 1, "the strategy made an invalid plan"
        out[sid] = joined_known.pop() if joined_known else default
    return out


def plan_of(model: Model) -> ExecutionPlan:
    for op in model.app.spec().operators:  # shown only when an example fails
        note(f"{op.op_id} <- {', '.join(op.inputs)}")
    plan = model.app.plan()
    note(plan.explain())
    return plan


PROPS = settings(max_examples=100, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@PROPS
@given(applications())
def test_every_operator_lands_in_exactly_one_stage(model):
    plan = plan_of(model)
    ops = [op.op_id for op in plan.app.operators]
    placed = [op for stage in plan.stages for op in stage.operators]
    assert sorted(placed) == sorted(ops)
    assert len(placed) == len(set(placed))
    for op in ops:
        assert sum(op in stage.operators for stage in plan.stages) == 1
    # a stage is connected: operator-to-operator data edges stay inside it
    g = plan.graph
    for u, v, d in g.edges(data=True):
        if d["kind"] == "data" and g.nodes[u]["kind"] == "operator":
            assert plan.stage_of(u) is plan.stage_of(v)
    # a stage's inputs are exactly the streams its operators read
    for stage in plan.stages:
        read = {g.nodes[u]["stream_id"] for op in stage.operators for u in g.predecessors(op)
                if g.nodes[u]["kind"] == "stream"}
        assert set(stage.inputs) == read


@PROPS
@given(applications())
def test_intermediate_partitions_follow_the_rules(model):
    plan = plan_of(model)
    expected = expected_partitions(model, plan.graph)
    actual = {sid: s.partitions for sid, s in plan.intermediate_streams.items()}
    assert actual == expected
    for sid, s in plan.intermediate_streams.items():
        assert s.partitions is not None and s.partitions >= 1
        assert plan.config[f"streams.{sid}.partitions"] == s.partitions
    for sid in model.broadcasts:
        assert plan.streams[sid].partitions == 1


@PROPS
@given(applications())
def test_every_joined_set_is_co_partitioned(model):
    plan = plan_of(model)
    for members in joined_sets(plan.graph):
        counts = {plan.streams[s].partitions for s in members} - {None}
        assert len(counts) <= 1, members


@PROPS
@given(applications())
def test_window_ms_is_the_gcd_of_trigger_durations_and_ttls(model):
    plan = plan_of(model)
    if "task.window.ms" in model.config:
        assert plan.config["task.window.ms"] == model.config["task.window.ms"]
    elif model.timed and model.durations_ms:
        assert plan.config["task.window.ms"] == math.gcd(*model.durations_ms)
    else:
        assert "task.window.ms" not in plan.config


def _node_match(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a.get(k) == b.get(k) for k in ("kind", "opcode", "role", "partitions"))


def _edge_match(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (a.get("kind"), a.get("port")) == (b.get("kind"), b.get("port"))


@PROPS
@given(applications())
def test_graph_survives_a_json_round_trip(model):
    plan = plan_of(model)
    rebuilt = graph_from_json(plan.to_json())
    assert nx.is_isomorphic(rebuilt, plan.graph, node_match=_node_match, edge_match=_edge_match)
    # the text renderers draw every operator
    dot, mermaid = plan.to_dot(), plan.to_mermaid()
    for op in plan.app.operators:
        assert f'"{op.op_id}"' in dot and op.op_id in mermaid
