"""Turns an ``ApplicationSpec`` into an ``ExecutionPlan``: graph, stages, partitions, config."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from samza_dsl.config import (
    check_guarantee,
    check_scoped_keys,
    check_system_keys,
)
from samza_dsl.errors import ConfigError, PlanError
from samza_dsl.jobconfig import JobConfig
from samza_dsl.spec import (
    ApplicationSpec,
    JoinSpec,
    JoinTableSpec,
    OpSpec,
    SendToSpec,
    WindowSpec,
    late_target,
    node_stream_id,
    stream_node,
    table_node,
)

from .dag import Dag, ordered_components
from .model import Stage, StoreSpec, StreamSpec
from .owners import changelog_setting, check_owners, dead_letter_stream, qualified_changelog
from .partitions import JoinedSet, infer_partitions
from .placement import join_warnings
from .plan import ExecutionPlan
from .validate import validate

__all__ = ["plan", "build_graph"]


def plan(spec: ApplicationSpec, *, partitions: Mapping[str, int] | None = None,
         config: Mapping[str, Any] | None = None) -> ExecutionPlan:
    """Validate ``spec`` and plan it. ``partitions`` gives counts the plan cannot look up."""
    user_config = JobConfig.of(spec, config)
    check_guarantee(user_config)
    validate(spec)
    stages, stage_of = _split_stages(spec)
    streams = _plan_streams(spec, stages, _config_partitions(user_config, partitions or {}),
                            user_config)
    stores = _stores(spec, user_config)
    job_name = user_config.job.job_name
    changelogs = [s.changelog_stream for s in stores.values() if s.changelog_stream]
    check_scoped_keys(user_config, streams=[*streams, *changelogs,
                                            dead_letter_stream(job_name)], stores=stores)
    check_owners(job_name, streams, stores, user_config, _default_system(spec, user_config))
    check_system_keys(user_config, {d.system.name: d.system.factory
                                    for d in [*spec.inputs.values(), *spec.outputs.values()]})
    generated = _generate_config(spec, streams, stores, user_config)
    full_config = user_config.with_keys(generated)
    graph = build_graph(spec, streams, stage_of)
    result = ExecutionPlan(spec, graph, streams, stages, stores, full_config, generated)
    result.warnings.extend(join_warnings(result))
    return result


def _roots(spec: ApplicationSpec) -> dict[str, set[str]]:
    """For each operator, the stream ids (inputs or intermediates) it descends from."""
    roots: dict[str, set[str]] = {}
    for op in spec.operators:  # registration order is topological
        roots[op.op_id] = set().union(*(_node_roots(node, roots) for node in op.inputs))
    return roots


def _split_stages(spec: ApplicationSpec) -> tuple[list[Stage], dict[str, str]]:
    """Stages are the connected parts of the graph between input streams and terminals."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for op in spec.operators:
        find(op.op_id)
        for node in op.inputs:  # a stream's consumers share its stage
            parent[find(node)] = find(op.op_id)

    groups: dict[str, list[OpSpec]] = defaultdict(list)
    for op in spec.operators:
        groups[find(op.op_id)].append(op)

    producers = {sid: i.producer for sid, i in spec.intermediates.items()}
    group_of = {op.op_id: find(op.op_id) for op in spec.operators}
    order = Dag()
    for root in groups:
        order.add_node(root)
    for root, ops in groups.items():
        for op in ops:
            for node in op.inputs:
                sid = node_stream_id(node)
                if sid in producers:
                    order.add_edge(group_of[producers[sid]], root)
    first_index = {root: spec.operators.index(ops[0]) for root, ops in groups.items()}
    # A stage may read an intermediate stream written by itself or by a later stage (e.g. an
    # input joined with its own repartition): order strongly connected stages as one block.
    ordered = [root for block in ordered_components(order, first_index.__getitem__)
               for root in block]

    stages: list[Stage] = []
    stage_of: dict[str, str] = {}
    for i, root in enumerate(ordered):
        ops = groups[root]
        stage_id = f"stage-{i}"
        inputs = tuple(dict.fromkeys(sid for op in ops for node in op.inputs
                                     if (sid := node_stream_id(node)) is not None))
        outputs = tuple(dict.fromkeys(
            [op.stream_id for op in ops if isinstance(op, SendToSpec) and op.stream_id]
            + [op.op_id for op in ops if op.op_id in spec.intermediates]
            + [t for op in ops if (t := late_target(op))]))
        written = tuple(dict.fromkeys(op.table_id for op in ops
                                      if isinstance(op, SendToSpec) and op.table_id))
        read = tuple(dict.fromkeys(op.table_id for op in ops if isinstance(op, JoinTableSpec)))
        stages.append(Stage(stage_id, inputs, tuple(op.op_id for op in ops), outputs, written, read))
        for op in ops:
            stage_of[op.op_id] = stage_id
    return stages, stage_of


def _node_roots(node: str, roots: Mapping[str, set[str]]) -> set[str]:
    sid = node_stream_id(node)
    return {sid} if sid is not None else roots[node]


def _joined_sets(spec: ApplicationSpec) -> list[JoinedSet]:
    roots = _roots(spec)
    sets: list[JoinedSet] = []
    for op in spec.operators:
        if isinstance(op, JoinSpec):
            members = [s for node in op.inputs for s in sorted(_node_roots(node, roots))]
            sets.append(JoinedSet(op.op_id, tuple(dict.fromkeys(members))))
    for table_id in spec.tables:
        writers = [op for op in spec.operators
                   if isinstance(op, SendToSpec) and op.table_id == table_id]
        readers = [op for op in spec.operators
                   if isinstance(op, JoinTableSpec) and op.table_id == table_id]
        if writers and readers:
            members = [s for op in writers + readers for s in sorted(roots[op.op_id])]
            reason = ", ".join(op.op_id for op in readers) + f" (table {table_id!r})"
            sets.append(JoinedSet(reason, tuple(dict.fromkeys(members))))
    return sets


def _plan_streams(spec: ApplicationSpec, stages: list[Stage], given: Mapping[str, int],
                  config: JobConfig) -> dict[str, StreamSpec]:
    all_ids = set(spec.inputs) | set(spec.outputs) | set(spec.intermediates)
    for sid, n in given.items():
        if sid not in all_ids:
            raise PlanError(f"partitions given for unknown stream {sid!r}; streams of "
                            f"{spec.job_name!r}: {', '.join(sorted(all_ids))}")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise PlanError(f"partitions of stream {sid!r} must be an integer >= 1, got {n!r}")
    known: dict[str, int | None] = {}
    for sid, d in [*spec.inputs.items(), *spec.outputs.items()]:
        if d.partitions is not None and sid in given and given[sid] != d.partitions:
            raise PlanError(f"stream {sid!r} has {d.partitions} partitions in its descriptor but "
                            f"{given[sid]} in plan(partitions=...); give one count")
        known[sid] = d.partitions if d.partitions is not None else given.get(sid)
    for sid in spec.intermediates:
        if sid in given:
            known[sid] = given[sid]
    counts = infer_partitions(
        known, {sid: i.broadcast for sid, i in spec.intermediates.items()}, _joined_sets(spec),
        config.job.intermediate_partitions, [*spec.inputs, *spec.outputs])

    default_system = _default_system(spec, config)
    job_name = config.job.job_name
    streams: dict[str, StreamSpec] = {}
    for sid, d in spec.inputs.items():
        streams[sid] = StreamSpec(sid, "input", _system(sid, d.system.name, config),
                                  _physical(sid, d.physical_name, config), counts[sid],
                                  d.effective_serde.describe(), d.keyed, d)
    for sid, d in spec.outputs.items():
        if sid in streams:  # one stream id as both input and output: the same physical stream
            continue
        streams[sid] = StreamSpec(sid, "output", _system(sid, d.system.name, config),
                                  _physical(sid, d.physical_name, config), counts[sid],
                                  d.effective_serde.describe(), d.keyed, d)
    for sid, i in spec.intermediates.items():
        serde = i.serde.describe() if i.serde is not None else "default"
        system = config.stream(sid).system or default_system
        streams[sid] = StreamSpec(sid, "broadcast" if i.broadcast else "intermediate",
                                  system, _physical(sid, _named_for(job_name, spec, sid), config),
                                  counts[sid], serde, i.keyed, i)
    for sid, s in streams.items():
        own = config.stream(sid)
        for prop, said, planned in (
                ("intermediate", own.intermediate, s.kind in ("intermediate", "broadcast")),
                ("broadcast", own.broadcast, s.kind == "broadcast")):
            if own.given(prop) and said != planned:
                raise ConfigError(f"config streams.{sid}.samza.{prop}={said!r} contradicts the "
                                  f"plan: the stream is {'' if planned else 'not '}{prop}; the "
                                  f"planner sets this key, drop it")
    return streams


def _named_for(job_name: str, spec: ApplicationSpec, name: str) -> str:
    """A name the application gave (it starts with ``<app name>-<app_id>``) for the job: under
    a ``job.name``/``job.id`` of its own, the job's streams are its own."""
    prefix = spec.job_name + "-"
    return job_name + name[len(prefix) - 1:] if name.startswith(prefix) else name


def _physical(sid: str, name: str, config: JobConfig) -> str:
    """``streams.<id>.samza.physical.name`` where given, else ``name``."""
    given = config.stream(sid).physical_name
    return str(given) if given else name


def _system(sid: str, system: str, config: JobConfig) -> str:
    """An input's or output's system is its descriptor's: config may repeat it, not change it."""
    given = config.stream(sid).system
    if given and given != system:
        raise ConfigError(f"config streams.{sid}.samza.system={given!r}: stream {sid!r} is on "
                          f"system {system!r}, as its descriptor says; to read or write it on "
                          f"{given!r}, build its descriptor from that system instead")
    return system


def _config_partitions(config: Mapping[str, Any], given: Mapping[str, int]) -> dict[str, int]:
    """``streams.<id>.partitions`` keys, with ``plan(partitions=...)``: one count per stream."""
    out = dict(given)
    for key, value in config.items():
        if not (isinstance(key, str) and key.startswith("streams.")
                and key.endswith(".partitions")) or value is None:
            continue
        sid = key[len("streams."):-len(".partitions")]
        if sid in out and out[sid] != value:
            raise ConfigError(f"stream {sid!r} has {value} partitions in config {key} but "
                              f"{out[sid]} in the partitions given to plan(); give one count")
        out[sid] = int(value)
    return out


def _default_system(spec: ApplicationSpec, config: JobConfig) -> str | None:
    system = config.job.default_system
    if system:
        return str(system)
    for d in spec.inputs.values():
        return d.system.name
    return None


def _stores(spec: ApplicationSpec, config: JobConfig) -> dict[str, StoreSpec]:
    system = config.job.changelog_system or _default_system(spec, config)

    systems = {d.system.name for d in [*spec.inputs.values(), *spec.outputs.values()]}

    job_name = config.job.job_name

    def changelog(store: str, enabled: bool) -> str | None:
        configured = changelog_setting(store, config.store(store).changelog)
        if isinstance(configured, str):
            return qualified_changelog(configured, systems, system)
        if configured is False or (configured is None and not enabled) or system is None:
            return None
        # window/join stores are named by op id, which starts with the application's name
        own = store.startswith(spec.job_name + "-")
        return f"{system}.{_named_for(job_name, spec, store) if own else job_name + '-' + store}" \
               f"-changelog"

    stores: dict[str, StoreSpec] = {}
    for tid, t in spec.tables.items():
        stores[tid] = StoreSpec(tid, "table", None, changelog(tid, t.changelog), t)
    for op in spec.operators:
        if isinstance(op, WindowSpec):
            stores[op.op_id] = StoreSpec(op.op_id, "window", op.op_id, changelog(op.op_id, True))
        elif isinstance(op, JoinSpec):
            for side in ("L", "R"):
                name = f"{op.op_id}-{side}"
                stores[name] = StoreSpec(name, "join", op.op_id, changelog(name, True))
    return stores


def _generate_config(spec: ApplicationSpec, streams: Mapping[str, StreamSpec],
                     stores: Mapping[str, StoreSpec], user: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"job.name": spec.name, "job.id": spec.app_id}
    durations: list[int] = []
    timed = False
    for op in spec.operators:
        if isinstance(op, WindowSpec):
            timed = True
            durations.extend(op.window.durations_ms())
        elif isinstance(op, JoinSpec) and not op.event_time:  # within: the watermark purges
            timed = True
            durations.append(op.ttl_ms)
    if timed and durations:
        out["task.window.ms"] = math.gcd(*durations)
    for sid, s in streams.items():
        if s.system is not None:
            out[f"streams.{sid}.samza.system"] = s.system
        out[f"streams.{sid}.samza.physical.name"] = s.physical_name
        if s.kind in ("intermediate", "broadcast"):
            out[f"streams.{sid}.samza.intermediate"] = True
            out[f"streams.{sid}.partitions"] = s.partitions
        if s.kind == "broadcast":
            out[f"streams.{sid}.samza.broadcast"] = True
    for name, store in stores.items():
        if store.changelog is not None:
            out[f"stores.{name}.changelog"] = store.changelog
    return {k: v for k, v in out.items() if k not in user}


def build_graph(spec: ApplicationSpec, streams: Mapping[str, StreamSpec],
                stage_of: Mapping[str, str]) -> Dag:
    """Stream, table and operator nodes. Edges: data flow (``kind="data"``, with a ``port`` for
    joins), writes to streams and tables, and table lookups (``kind="lookup"``)."""
    g = Dag(spec.job_name)
    for sid, s in streams.items():
        g.add_node(stream_node(sid), kind="stream", role=s.kind, stream_id=sid,
                   partitions=s.partitions, system=s.system)
    for tid, t in spec.tables.items():
        g.add_node(table_node(tid), kind="table", table_id=tid, changelog=t.changelog)
    for tid in spec.remote_tables:
        g.add_node(table_node(tid), kind="table", table_id=tid, changelog=False, remote=True)
    for op in spec.operators:
        g.add_node(op.op_id, kind="operator", opcode=op.opcode, name=op.name,
                   call_site=op.call_site, stage=stage_of[op.op_id], **_flat_details(op))
        for i, node in enumerate(op.inputs):
            port = ("left", "right")[i] if isinstance(op, JoinSpec) else "in"
            g.add_edge(node, op.op_id, kind="data", port=port)
        if isinstance(op, SendToSpec):
            g.add_edge(op.op_id, op.target_node, kind="write", port="out")
        elif op.op_id in spec.intermediates:
            g.add_edge(op.op_id, stream_node(op.op_id), kind="write", port="out")
        elif isinstance(op, JoinTableSpec):
            g.add_edge(table_node(op.table_id), op.op_id, kind="lookup", port="table")
        late_to = late_target(op)
        if late_to:  # its late messages: a second terminal
            g.add_edge(op.op_id, stream_node(late_to), kind="write", port="late")
    return g


def _flat_details(op: OpSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in op.details().items():
        if isinstance(value, dict):
            for k, v in value.items():
                out[f"{key}_{k}"] = v
        else:
            out[key] = value
    return out
