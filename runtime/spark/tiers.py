"""Which tier each stage of a plan takes on Spark (``SparkRunner``).

The declared tier runs a ``partition_by`` of a named field followed by a declared tumbling
window (``aggregate=Aggregate...``, named key and event-time fields, no triggers) as one Spark
SQL aggregation (``runtime.spark.declared``); every other stage takes the general tier, the
operators run over sorted record batches. This module decides from the plan alone, as
``samza-dsl plan`` shows it; a run also checks the input's format and column types.

It also groups the stages into the passes a run makes (``spark_passes``), says how many task
partitions a pass reading a broadcast stream has (``broadcast_tasks``) and tells what a lone
``partition_by`` over Parquet moves through the shuffle: its rows as columns, keyed by a column
where its key function only reads one (``key_field``), with only the fields its readers read
(``message_fields``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from samza_dsl.aggregate import Aggregate, Field
from samza_dsl.errors import PlanError, SamzaError
from samza_dsl.fields import field_path, kv_value_fields, reads
from samza_dsl.spec import (
    FilterSpec,
    FlatMapSpec,
    MapSpec,
    PartitionBySpec,
    SendToSpec,
    SinkSpec,
    WindowSpec,
    stream_node,
)

__all__ = ["SQL_TIER", "GENERAL_TIER", "DeclaredWindow", "declared_windows", "spark_tiers",
           "spark_passes", "carried_streams", "message_fields", "key_field", "carry_text",
           "job_tasks", "broadcast_tasks"]

SQL_TIER = "declared (Spark SQL)"
GENERAL_TIER = "general"

_AFTER = (MapSpec, FilterSpec, FlatMapSpec, SinkSpec, SendToSpec)


@dataclass(frozen=True)
class DeclaredWindow:
    """A ``partition_by`` pass and the declared window pass reading it, run as one."""

    input: str  # the input stream the partition_by reads
    stream: str  # the intermediate stream between them
    partition_op: str
    partition_field: str
    window_op: str
    partition_stage: str
    window_stage: str
    window: Any

    @property
    def aggregate(self) -> Aggregate:
        agg = self.window.aggregate
        if not isinstance(agg, Aggregate):
            raise TypeError(f"window {self.window_op!r} declares no aggregate")
        return agg

    @property
    def key_field(self) -> str | None:
        return self.window.key_fn.name if self.window.key_fn is not None else None

    @property
    def time_field(self) -> str:
        name: str = self.window.event_time.name
        return name


def _window_stage(plan: Any, stage: Any) -> tuple[WindowSpec | None, str]:
    """The declared window heading ``stage`` (None and why not)."""
    app = plan.app
    specs = [app.operator(op) for op in stage.operators]
    if not specs or not isinstance(specs[0], WindowSpec):
        return None, "no declared window"
    spec = specs[0]
    w = spec.window
    if w.aggregate is None:
        return None, "the window's init/fold are Python functions (declare aggregate=)"
    if w.kind not in ("tumbling", "keyed_tumbling"):
        return None, f"{w.kind} windows run in the general tier"
    if not isinstance(w.event_time, Field):
        return None, "the window's event time is not a named field"
    if w.keyed and not isinstance(w.key_fn, Field):
        return None, "the window's key is not a named field"
    if w.early is not None or w.late is not None or spec.late_to is not None:
        return None, "the window has triggers or late_to"
    if stage.tables_read or stage.tables_written:
        return None, "the window's stage uses a table"
    if any(not isinstance(s, _AFTER) for s in specs[1:]):
        return None, "an operator after the window is not map/filter/flat_map/sink/send_to"
    if any(sid not in plan.output_streams for sid in stage.outputs):
        return None, "the window's stage writes an intermediate stream"
    if len(stage.inputs) != 1 or stage.inputs[0] in plan.input_streams:
        return None, "the window does not read one partition_by stream"
    return spec, ""


def declared_windows(plan: Any) -> tuple[dict[str, DeclaredWindow], dict[str, str]]:
    """What the plan lets run in Spark SQL: ``{window stage id: DeclaredWindow}``, and for every
    other stage holding a window why it takes the general tier. The input's format and column
    types are checked when the run starts (``sql_reason``)."""
    app = plan.app
    found: dict[str, DeclaredWindow] = {}
    why: dict[str, str] = {}
    for stage in plan.stages:
        if not any(isinstance(app.operator(op), WindowSpec) for op in stage.operators):
            continue
        spec, reason = _window_stage(plan, stage)
        if spec is None:
            why[stage.stage_id] = reason
            continue
        sid = stage.inputs[0]
        readers = [s for s in plan.stages if sid in s.inputs]
        producers = [s for s in plan.stages if sid in s.outputs]
        if len(readers) != 1 or len(producers) != 1:
            why[stage.stage_id] = f"stream {sid!r} has other readers or writers"
            continue
        prod = producers[0]
        part = app.operator(prod.operators[0]) if len(prod.operators) == 1 else None
        if not isinstance(part, PartitionBySpec) or not isinstance(part.key_fn, Field) \
                or part.value_fn is not None:
            why[stage.stage_id] = ("the stream is not written by a lone partition_by of a named "
                                   "field (partition_by(\"field\"))")
            continue
        source = prod.inputs[0] if len(prod.inputs) == 1 else None
        d = app.inputs.get(source) if source is not None else None
        if source is None or d is None or prod.outputs != (sid,) or prod.tables_read \
                or prod.tables_written:
            why[stage.stage_id] = "the partition_by does not read one input"
            continue
        if d.event_time is not None:
            why[stage.stage_id] = (f"input {source!r} declares event_time: panes close as it "
                                   f"moves, in arrival order (declare it on the window only)")
            continue
        if d.keyed or d.bootstrap:
            why[stage.stage_id] = f"input {source!r} is keyed or a bootstrap input"
            continue
        found[stage.stage_id] = DeclaredWindow(source, sid, part.op_id, part.key_fn.name,
                                               spec.op_id, prod.stage_id, stage.stage_id,
                                               spec.window)
    return found, why


def spark_tiers(plan: Any) -> dict[str, dict[str, str]]:
    """``{stage id: {"tier": ..., "why": ..., "columns": ...}}``: the tier each stage takes on
    Spark, as ``samza-dsl plan`` shows it: ``why`` for a window stage in the general tier, and
    ``columns`` for a lone ``partition_by`` whose rows a run over Parquet carries through the
    shuffle as columns (``carry_text``)."""
    found, why = declared_windows(plan)
    fused = {d.partition_stage: d for d in found.values()}
    try:
        carried = carried_streams(plan)
    except SamzaError:  # no order of passes (the run says why)
        carried = set()
    out: dict[str, dict[str, str]] = {}
    for stage in plan.stages:
        sid = stage.stage_id
        if sid in found or sid in fused:
            out[sid] = {"tier": SQL_TIER}
            continue
        out[sid] = {"tier": GENERAL_TIER, **({"why": why[sid]} if sid in why else {})}
        columns = carry_text(plan, stage, carried)
        if columns:
            out[sid]["columns"] = columns
    return out


def spark_passes(plan: Any) -> list[list[Any]]:
    """The plan's stages as Spark runs them: grouped by shared tables (such stages run as one
    pass, the table being their task's state), in the order of the streams between them."""
    group_of = list(range(len(plan.stages)))

    def find(i: int) -> int:
        while group_of[i] != i:
            i = group_of[i]
        return i

    by_table: dict[str, int] = {}
    for i, s in enumerate(plan.stages):
        for t in (*s.tables_read, *s.tables_written):
            if t in by_table:
                group_of[find(i)] = find(by_table[t])
            else:
                by_table[t] = i
    groups: dict[int, list[Any]] = {}
    for i, s in enumerate(plan.stages):
        groups.setdefault(find(i), []).append(s)
    passes = list(groups.values())
    writes = [set(itertools.chain.from_iterable(s.outputs for s in p)) for p in passes]
    read = [set(itertools.chain.from_iterable(s.inputs for s in p)) for p in passes]
    order: list[int] = []
    done: set[int] = set()
    while len(order) < len(passes):
        ready = [i for i in range(len(passes)) if i not in done
                 and all(j in done or j == i or not (writes[j] & read[i])
                         for j in range(len(passes)))
                 and not (writes[i] & read[i])]
        if not ready:
            stuck = [", ".join(s.stage_id for s in passes[i]) for i in range(len(passes))
                     if i not in done]
            raise SamzaError(f"cannot reprocess {plan.job_name!r} on Spark: stages that share a "
                             f"table also read what they write ({'; '.join(stuck)}); Spark runs "
                             f"a pass after everything it reads is complete")
        order.append(ready[0])
        done.add(ready[0])
    return [passes[i] for i in order]


def job_tasks(plan: Any, counts: dict[str, int]) -> int:
    """The job's tasks, as the streaming runtime makes them (rules 2 and 11): one per
    partition of the widest stream a stage reads, broadcast streams aside (1 where there is
    none)."""
    return max([counts[sid] for s in plan.stages for sid in s.inputs
                if plan.streams[sid].kind != "broadcast"] or [1])


def broadcast_tasks(plan: Any, stages: list[Any], counts: dict[str, int],
                    elasticity: int) -> int | None:
    """The task partitions of a pass of ``stages`` that reads a broadcast stream, each of
    which reads it whole: every task of the job (``job_tasks``), and with
    ``job.elasticity.factor`` X > 1 each of its X virtual tasks (rule 18), whose partition is
    then ``p // X`` for task partition ``p``. None for a pass that reads no broadcast stream.

    Raises:
        PlanError: with X > 1 the pass also reads a partitioned stream (its virtual tasks
            would hold one key bucket of it each, which Spark does not split).
    """
    inputs = list(dict.fromkeys(itertools.chain.from_iterable(s.inputs for s in stages)))
    broadcast = [sid for sid in inputs if plan.streams[sid].kind == "broadcast"]
    if not broadcast:
        return None
    others = [sid for sid in inputs if sid not in broadcast]
    if elasticity > 1 and others:
        raise PlanError(
            f"SparkRunner cannot reprocess {plan.job_name!r} with job.elasticity.factor="
            f"{elasticity}: stage(s) {', '.join(s.stage_id for s in stages)} read broadcast "
            f"stream {broadcast[0]!r} whole in every virtual task and stream {others[0]!r} one "
            f"key bucket in each, and Spark does not split a task by key; reprocess with "
            f"job.elasticity.factor=1 (the streaming runtime gives each virtual task a copy of "
            f"what the broadcast stream causes)")
    return job_tasks(plan, counts) * elasticity


def carried_streams(plan: Any, passes: list[list[Any]] | None = None) -> set[str]:
    """The intermediate streams a lone ``partition_by`` may carry its input's rows into as
    columns: not an output, and every pass reading one reads nothing else. ``passes``: the
    plan's ``spark_passes``, where the caller made them already."""
    if passes is None:
        passes = spark_passes(plan)
    read = [set(itertools.chain.from_iterable(s.inputs for s in p)) for p in passes]
    return {sid for sid in plan.intermediate_streams if sid not in plan.output_streams
            and all(r == {sid} for r in read if sid in r)}


def message_fields(plan: Any, sid: str) -> set[str] | None:
    """The fields of the values of stream ``sid``'s ``KV`` messages (dicts) that its readers
    may read (``samza_dsl.fields``), where that is known: every reader is a window that folds
    (no list panes), sends no late messages on, and whose key, event-time and fold functions
    only read fields of the message's value. Such a window computes the same from messages
    holding those fields alone. None where a reader may read more (or there is none)."""
    node = stream_node(sid)
    readers = [op for op in plan.app.operators if node in op.inputs]
    need: set[str] = set()
    for op in readers:
        if not isinstance(op, WindowSpec) or op.late_to is not None or op.window.fold is None:
            return None
        w = op.window
        for fn, nargs in ((w.key_fn, 1), (w.event_time, 1), (w.fold, 2)):
            if fn is None:
                continue
            paths = reads(fn, nargs)
            got = None if paths is None else kv_value_fields(paths[0])
            if got is None:
                return None
            need |= got
    return need if readers and need else None


def key_field(fn: Any) -> str | None:
    """The one field a key function reads of its message, where reading it is all it does
    (``lambda v: v["country"]``, ``Field("country")``); else None."""
    path = field_path(fn)
    if path is None or len(path) != 1 or path[0][0] != "item":
        return None
    name = path[0][1]
    return name if isinstance(name, str) else None


def carry_text(plan: Any, stage: Any, carried: set[str]) -> str:
    """What a stage that is a lone ``partition_by`` (no value function) of an input that is
    not keyed nor bootstrapped, into a stream of ``carried``, moves through the shuffle when
    the input is Parquet: its key field and the fields its readers read, else ''."""
    if len(stage.operators) != 1 or len(stage.inputs) != 1:
        return ""
    spec = plan.app.operator(stage.operators[0])
    d = plan.app.inputs.get(stage.inputs[0])
    if not isinstance(spec, PartitionBySpec) or spec.value_fn is not None or d is None \
            or d.keyed or d.bootstrap or spec.stream_id not in carried:
        return ""
    key = key_field(spec.key_fn)
    fields = message_fields(plan, spec.stream_id)
    text = "over Parquet: rows carried as columns"
    if key is not None:
        text += f", key from column {key!r}"
    if fields is not None:
        text += f", only {', '.join(map(repr, sorted(fields)))} read after the shuffle"
    return text


