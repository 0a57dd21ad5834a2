"""Pictures of a plan: JSON, text, DOT, Mermaid, SVG and HTML (through Graphviz).

In DOT and SVG, stages are clusters; input and output streams and tables are nodes; an
intermediate stream is an edge from its partition_by/broadcast operator to each consumer,
labelled with its id and partition count. A window's ``late_to`` stream is a dashed edge
labelled ``late`` (``late: <stream>`` for an intermediate one). Every format says which tier
each stage takes on Spark: ``declared (Spark SQL)`` or ``general`` (with why a window stage is not
declared). That choice is Spark's (``runtime.spark.tiers``, a pure function of the plan); the
renderers import it when they draw, the one call from the planner up into the runtime. A drawing
for a running job (the job page) names instead what runs its stages (``runs_on``: the local
system, Kafka).
"""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING, Any

from samza_dsl.config import shown_value
from samza_dsl.errors import SamzaError
from samza_dsl.spec import node_stream_id, stream_node, table_node

from .dag import Dag

if TYPE_CHECKING:
    import networkx as nx

    from .plan import ExecutionPlan

__all__ = ["plan_to_dict", "plan_to_json", "graph_from_json", "plan_to_text", "plan_to_dot",
           "plan_to_mermaid", "plan_to_svg", "plan_to_html", "render", "FORMATS",
           "GraphvizMissing"]

FORMATS = ("text", "json", "dot", "mermaid", "svg", "html")
GRAPHVIZ_HINT = ("install Graphviz's `dot` program: `apt-get install graphviz` (Debian/Ubuntu), "
                 "`brew install graphviz` (macOS) or `conda install -c conda-forge graphviz`. "
                 "to_dot(), to_mermaid() and to_json() work without it")


class GraphvizMissing(SamzaError):
    """Rendering SVG or HTML needs Graphviz's ``dot`` program."""


def _op_dict(plan: ExecutionPlan, op_id: str) -> dict[str, Any]:
    op = plan.app.operator(op_id)
    g = plan.dag
    out: dict[str, Any] = {
        "id": op.op_id, "opcode": op.opcode, "name": op.name, "stage": g.nodes[op_id]["stage"],
        "inputs": list(op.inputs), "next": plan.next_ops(op_id),
        "outputs": [n for n in g.successors(op_id) if g.edges[op_id, n]["kind"] == "write"],
        "lookups": [n for n in g.predecessors(op_id) if g.edges[n, op_id]["kind"] == "lookup"],
        "call_site": op.call_site,
    }
    out.update(op.details())
    return out


def plan_to_dict(plan: ExecutionPlan) -> dict[str, Any]:
    return {
        "application": {"name": plan.app.name, "app_id": plan.app.app_id, "job": plan.job_name},
        "streams": {sid: s.to_dict() for sid, s in plan.streams.items()},
        "tables": {tid: {"serde": t.serde.describe(), "changelog": t.changelog,
                         **({"side_inputs": list(t.side_inputs)} if t.side_inputs else {})}
                   for tid, t in plan.app.tables.items()},
        "remote_tables": {tid: t.describe() for tid, t in plan.app.remote_tables.items()},
        "stores": {name: s.to_dict() for name, s in plan.stores.items()},
        "operators": {op.op_id: _op_dict(plan, op.op_id) for op in plan.app.operators},
        "stages": [s.to_dict() for s in plan.stages],
        "spark_tiers": _spark_tiers(plan),
        "config": {k: shown_value(k, plan.config[k]) for k in sorted(plan.config)},
        "warnings": list(plan.warnings),
    }


def plan_to_json(plan: ExecutionPlan, *, indent: int | None = 2) -> str:
    return json.dumps(plan_to_dict(plan), indent=indent, default=str)


def graph_from_json(data: str | dict[str, Any]) -> nx.DiGraph:
    """Rebuild the plan's graph (``ExecutionPlan.graph``) from ``to_json()`` output."""
    d = json.loads(data) if isinstance(data, str) else data
    g = Dag(d["application"]["job"])
    for sid, s in d["streams"].items():
        g.add_node(stream_node(sid), kind="stream", role=s["kind"], stream_id=sid,
                   partitions=s["partitions"], system=s["system"])
    for tid, t in d["tables"].items():
        g.add_node(table_node(tid), kind="table", table_id=tid, changelog=t["changelog"])
    for tid in d.get("remote_tables", {}):
        g.add_node(table_node(tid), kind="table", table_id=tid, changelog=False, remote=True)
    for op_id, op in d["operators"].items():
        g.add_node(op_id, kind="operator", opcode=op["opcode"], name=op["name"],
                   call_site=op["call_site"], stage=op["stage"])
        for i, node in enumerate(op["inputs"]):
            port = ("left", "right")[i] if op["opcode"] == "join" else "in"
            g.add_edge(node, op_id, kind="data", port=port)
        for node in op["outputs"]:
            late = op.get("late_to") is not None and node == stream_node(op["late_to"])
            g.add_edge(op_id, node, kind="write", port="late" if late else "out")
        for node in op["lookups"]:
            g.add_edge(node, op_id, kind="lookup", port="table")
    return g.to_networkx()


def remote_table_summary(d: dict[str, Any]) -> str:
    """One line on a remote table: what it does, its rate limit, retries and cache."""
    parts = ["/".join(w for w, on in (("read", d["read"]), ("write", d["write"])) if on)]
    if d.get("batched"):
        parts.append("batched")
    if d.get("rate_limit") is not None:
        parts.append(f"rate {d['rate_limit']:g}/s")
    retry = d.get("retry")
    if retry:
        parts.append(f"retry x{retry['max_attempts']}")
    cache = d.get("cache")
    if cache:
        parts.append(f"cache {cache['size']} keys {cache['ttl_s']:g}s write-{cache['write']}")
    return ", ".join(parts)


# -- text --------------------------------------------------------------------------------------

def _parts(n: int | None) -> str:
    return "? partitions" if n is None else f"{n} partition{'s' if n != 1 else ''}"


def _order(s: Any) -> str:
    """An input's bootstrap, priority and side input, as plans show them (``"bootstrap,
    priority 2"``, ``"bootstrap, side input of users"``)."""
    words = {"bootstrap": "bootstrap", "priority": "priority {}",
             "side_input_of": "side input of {}"}
    return ", ".join(words[k].format(v) for k, v in s.reading_order.items())


def _stream_label(sid: str, s: Any) -> str:
    order = _order(s)
    return sid + "\n" + _parts(s.partitions) + ("\n" + order if order else "")


def _op_label(plan: ExecutionPlan, op_id: str, short: bool = False) -> str:
    op = plan.app.operator(op_id)
    extra = ""
    d = op.details()
    if "ttl_ms" in d:
        extra = f" ttl={d['ttl_ms']}ms"
    elif "within_ms" in d:
        extra = f" within={d['within_ms']}ms {d['how']} event-time"
        if d.get("late_to"):
            extra += f" late_to={d['late_to']}"
    elif "window" in d:
        w = d["window"]
        hop = f" hop {w['hop_ms']}ms" if "hop_ms" in w else ""
        extra = f" {w['kind']} {w.get('size_ms', w.get('gap_ms'))}ms{hop} {w['time']}-time"
        if d.get("join_lag_ms"):
            extra += f" join_lag={d['join_lag_ms']}ms"
        if d.get("late_to"):
            extra += f" late_to={d['late_to']}"
    elif "stream" in d and not (short and op.opcode in ("partition_by", "broadcast")):
        extra = f" -> {d['stream']}"
    elif "table" in d:
        extra = f" table={d['table']}"
    kind = "async_map" if d.get("one_to_one") else op.opcode
    return f"{kind} {op.name or ''}".rstrip() + extra


def _spark_tiers(plan: ExecutionPlan) -> dict[str, dict[str, str]]:
    """The tier each stage takes on Spark, as ``runtime.spark.tiers`` chooses it from the plan."""
    from runtime.spark.tiers import spark_tiers

    return spark_tiers(plan)


def _tier_text(tier: dict[str, str]) -> str:
    """A stage's Spark tier as text: the tier, and why a window stage is not declared."""
    return tier["tier"] + (f" ({tier['why']})" if "why" in tier else "") \
        + (f"; {tier['columns']}" if "columns" in tier else "")


def plan_to_text(plan: ExecutionPlan) -> str:
    lines = [f"Plan of {plan.job_name}: {len(plan.stages)} stage(s), "
             f"{len(plan.app.operators)} operator(s)"]
    if plan.warnings:
        lines.append("Warnings:")
        lines.extend(f"  {w}" for w in plan.warnings)
    lines.append("Streams:")
    for sid, s in plan.streams.items():
        order = _order(s)
        lines.append(f"  {s.kind:<12} {sid} ({_parts(s.partitions)}, system={s.system}, "
                     f"serde={s.serde}{', ' + order if order else ''})")
    if plan.stores:
        lines.append("Stores:")
        for name, store in plan.stores.items():
            log = f"changelog {store.changelog}" if store.changelog else "no changelog"
            lines.append(f"  {store.kind:<12} {name} ({log})")
    if plan.app.remote_tables:
        lines.append("Remote tables:")
        for tid, t in plan.app.remote_tables.items():
            lines.append(f"  remote       {tid} ({remote_table_summary(t.describe())})")
    tiers = _spark_tiers(plan)
    for stage in plan.stages:
        lines.append(f"{stage.stage_id}: {', '.join(stage.inputs)} -> "
                     f"{', '.join(stage.outputs + stage.tables_written) or '(sinks)'}  "
                     f"[Spark: {_tier_text(tiers[stage.stage_id])}]")
        for op_id in stage.operators:
            nxt = plan.next_ops(op_id)
            arrow = f"  => {', '.join(nxt)}" if nxt else ""
            site = plan.app.operator(op_id).call_site
            lines.append(f"  {op_id}  [{_op_label(plan, op_id)}]  @{site}{arrow}")
    gen = {k: v for k, v in plan.config.items() if k.startswith("task.")}
    if gen:
        lines.append("Config: " + ", ".join(f"{k}={v}" for k, v in sorted(gen.items())))
    return "\n".join(lines)


# -- DOT ---------------------------------------------------------------------------------------

def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def plan_to_dot(plan: ExecutionPlan, runs_on: str | None = None) -> str:
    """The plan in DOT; each stage labelled with its Spark tier, or with ``runs on <runs_on>``
    where that is given (the drawing of a running job)."""
    from runtime.spark.tiers import SQL_TIER

    g = plan.dag
    inter = plan.intermediate_streams
    out = [f"digraph {_q(plan.job_name)} {{", "  rankdir=TB;", "  compound=true;",
           '  node [fontname="Helvetica", fontsize=10];', '  edge [fontname="Helvetica", fontsize=9];',
           f"  label={_q('plan of ' + plan.job_name)}; labelloc=t;"]
    for sid, s in plan.streams.items():
        if sid in inter:
            continue
        shape = "cds" if s.kind == "input" else "box3d"
        label = _stream_label(sid, s)
        out.append(f"  {_q(stream_node(sid))} [label={_q(label)}, "
                   f"shape={shape}, style=filled, fillcolor=\"#e8f0fe\"];")
    for tid, t in plan.app.tables.items():
        label = "table " + tid + ("\nside inputs: " + ", ".join(t.side_inputs)
                                  if t.side_inputs else "")
        out.append(f"  {_q(table_node(tid))} [label={_q(label)}, shape=cylinder, "
                   f"style=filled, fillcolor=\"#fef7e0\"];")
    for tid, rt in plan.app.remote_tables.items():
        label = f"remote table {tid}\n{remote_table_summary(rt.describe())}"
        out.append(f"  {_q(table_node(tid))} [label={_q(label)}, shape=cylinder, "
                   f"style=\"filled,dashed\", fillcolor=\"#e6f4ea\"];")
    tiers = _spark_tiers(plan)
    for stage in plan.stages:
        tier = tiers[stage.stage_id]["tier"]
        out.append(f"  subgraph {_q('cluster_' + stage.stage_id)} {{")
        runs = f"runs on {runs_on}" if runs_on else f"Spark: {tier}"
        out.append(f"    label={_q(stage.stage_id + chr(10) + runs)}; style=rounded; "
                   f"color=\"{'#188038' if tier == SQL_TIER else '#888888'}\";")
        for op_id in stage.operators:
            op = plan.app.operator(op_id)
            label = f"{_op_label(plan, op_id, short=True)}\n{op.call_site}"
            out.append(f"    {_q(op_id)} [label={_q(label)}, tooltip={_q(op_id)}, id={_q(op_id)}, "
                       f"shape=box, style=rounded];")
        out.append("  }")
    for u, v, data in g.edges(data=True):
        if node_stream_id(u) in inter:
            continue  # drawn below, from the producer
        if node_stream_id(v) in inter:
            sid = node_stream_id(v) or ""
            for consumer in plan.next_ops(v):
                port = plan.dag.edges[v, consumer]["port"]
                prefix = f"{port}: " if port in ("left", "right") else ""
                if data["port"] == "late":
                    prefix = "late: " + prefix
                label = f"{prefix}{sid}\n{_parts(inter[sid].partitions)}"
                out.append(f"  {_q(u)} -> {_q(consumer)} [label={_q(label)}, decorate=true, "
                           f"style=bold, color=\"#c5221f\", fontcolor=\"#c5221f\"];")
            continue
        attrs = []
        if data["kind"] == "lookup":
            attrs.append("style=dashed")
        if data["port"] in ("left", "right", "late"):
            attrs.append(f"label={_q(data['port'])}")
        if data["port"] == "late":
            attrs.append('style=dashed, color="#e37400", fontcolor="#e37400"')
        out.append(f"  {_q(u)} -> {_q(v)}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";")
    out.append("}")
    return "\n".join(out) + "\n"


# -- Mermaid -----------------------------------------------------------------------------------

def plan_to_mermaid(plan: ExecutionPlan) -> str:
    ids: dict[str, str] = {}

    def nid(node: str) -> str:
        return ids.setdefault(node, f"n{len(ids)}")

    def text(s: str) -> str:
        return '"' + html.escape(s, quote=True).replace("\n", "<br/>") + '"'

    inter = plan.intermediate_streams
    lines = ["flowchart LR"]
    for sid, s in plan.streams.items():
        if sid not in inter:
            label = _stream_label(sid, s)
            lines.append(f"  {nid(stream_node(sid))}[({text(label)})]")
    for tid in plan.app.tables:
        lines.append(f"  {nid(table_node(tid))}[({text('table ' + tid)})]")
    for tid in plan.app.remote_tables:
        lines.append(f"  {nid(table_node(tid))}[({text('remote table ' + tid)})]")
    for stage in plan.stages:
        lines.append(f"  subgraph {stage.stage_id.replace('-', '_')}[{text(stage.stage_id)}]")
        for op_id in stage.operators:
            label = _op_label(plan, op_id) + "\n" + op_id
            lines.append(f"    {nid(op_id)}[{text(label)}]")
        lines.append("  end")
    for u, v, data in plan.dag.edges(data=True):
        if node_stream_id(u) in inter:
            continue
        if node_stream_id(v) in inter:
            sid = node_stream_id(v) or ""
            for consumer in plan.next_ops(v):
                port = plan.dag.edges[v, consumer]["port"]
                prefix = f"{port}: " if port in ("left", "right") else ""
                if data["port"] == "late":
                    prefix = "late: " + prefix
                label = f"{prefix}{sid} ({_parts(inter[sid].partitions)})"
                lines.append(f"  {nid(u)} ==>|{text(label)}| {nid(consumer)}")
        elif data["kind"] == "lookup":
            lines.append(f"  {nid(u)} -.-> {nid(v)}")
        elif data["port"] == "late":
            lines.append(f"  {nid(u)} -.->|late| {nid(v)}")
        elif data["port"] in ("left", "right"):
            lines.append(f"  {nid(u)} -->|{data['port']}| {nid(v)}")
        else:
            lines.append(f"  {nid(u)} --> {nid(v)}")
    return "\n".join(lines) + "\n"


# -- SVG and HTML ------------------------------------------------------------------------------

def plan_to_svg(plan: ExecutionPlan, runs_on: str | None = None) -> str:
    try:
        import graphviz
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise GraphvizMissing(f"the graphviz Python package is missing: pip install graphviz; "
                              f"then {GRAPHVIZ_HINT}") from exc
    try:
        svg = graphviz.Source(plan_to_dot(plan, runs_on)).pipe(format="svg", encoding="utf-8")
    except graphviz.ExecutableNotFound as exc:
        raise GraphvizMissing(f"cannot draw the plan of {plan.job_name!r} as SVG: "
                              f"{GRAPHVIZ_HINT}") from exc
    return str(svg)


def _summary_html(plan: ExecutionPlan) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(sid)}</td><td>{s.kind}</td><td>{s.partitions if s.partitions else '?'}"
        f"</td><td>{html.escape(str(s.system))}</td><td>{html.escape(s.serde)}</td>"
        f"<td>{html.escape(_order(s))}</td></tr>"
        for sid, s in plan.streams.items())
    tiers = _spark_tiers(plan)
    stages = "".join(
        f"<tr><td>{st.stage_id}</td><td>{html.escape(', '.join(st.inputs))}</td>"
        f"<td>{len(st.operators)}</td><td>{html.escape(', '.join(st.outputs + st.tables_written))}"
        f"</td><td>{html.escape(_tier_text(tiers[st.stage_id]))}</td></tr>" for st in plan.stages)
    remote = "".join(
        f"<tr><td>{html.escape(tid)}</td>"
        f"<td>{html.escape(remote_table_summary(t.describe()))}</td></tr>"
        for tid, t in plan.app.remote_tables.items())
    if remote:
        remote = (f"<h3>Remote tables</h3><table><tr><th>table</th><th>calls</th></tr>{remote}"
                  f"</table>")
    return (f"<h3>Streams</h3><table><tr><th>stream</th><th>kind</th><th>partitions</th>"
            f"<th>system</th><th>serde</th><th>reading order</th></tr>{rows}</table>{remote}"
            f"<h3>Stages</h3><table><tr><th>stage</th><th>inputs</th><th>operators</th>"
            f"<th>outputs</th><th>Spark tier</th></tr>{stages}</table>")


def plan_to_html(plan: ExecutionPlan) -> str:
    svg = plan_to_svg(plan)
    svg = svg[svg.find("<svg"):]
    title = html.escape(f"Plan of {plan.job_name}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>"
            f"<style>body{{font-family:sans-serif}} table{{border-collapse:collapse}} "
            f"td,th{{border:1px solid #ccc;padding:2px 8px}}</style></head>"
            f"<body><h2>{title}</h2>{svg}{_summary_html(plan)}"
            f"<h3>Plan</h3><pre>{html.escape(plan_to_text(plan))}</pre></body></html>\n")


def plan_to_notebook_html(plan: ExecutionPlan) -> str:
    """A notebook cell's view: the SVG and the summary; the Mermaid text if Graphviz is missing."""
    try:
        svg = plan_to_svg(plan)
        body = svg[svg.find("<svg"):]
    except GraphvizMissing as exc:
        body = (f"<p><b>{html.escape(str(exc))}</b></p>"
                f"<pre>{html.escape(plan_to_mermaid(plan))}</pre>")
    return f"<div><h4>Plan of {html.escape(plan.job_name)}</h4>{body}{_summary_html(plan)}</div>"


def render(plan: ExecutionPlan, fmt: str) -> str:
    renderers = {"text": plan_to_text, "json": plan_to_json, "dot": plan_to_dot,
                 "mermaid": plan_to_mermaid, "svg": plan_to_svg, "html": plan_to_html}
    if fmt not in renderers:
        raise ValueError(f"unknown plan format {fmt!r}; one of {', '.join(FORMATS)}")
    return renderers[fmt](plan)
