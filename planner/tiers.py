"""Which tier each stage of a plan takes on Spark (``SparkRunner``).

The declared tier runs a ``partition_by`` of a named field followed by a declared tumbling
window (``aggregate=Aggregate...``, named key and event-time fields, no triggers) as one Spark
SQL aggregation (``runtime.spark.declared``); every other stage takes the general tier, the
operators run over sorted record batches. This module decides from the plan alone, as
``samza-dsl plan`` shows it; a run also checks the input's format and column types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from samza_dsl.aggregate import Aggregate, Field
from samza_dsl.spec import (
    FilterSpec,
    FlatMapSpec,
    MapSpec,
    PartitionBySpec,
    SendToSpec,
    SinkSpec,
    WindowSpec,
)

__all__ = ["SQL_TIER", "GENERAL_TIER", "DeclaredWindow", "declared_windows", "spark_tiers"]

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
    """``{stage id: {"tier": ..., "why": ...}}``: the tier each stage takes on Spark, as
    ``samza-dsl plan`` shows it (``why`` for a window stage in the general tier)."""
    found, why = declared_windows(plan)
    fused = {d.partition_stage: d for d in found.values()}
    out: dict[str, dict[str, str]] = {}
    for stage in plan.stages:
        sid = stage.stage_id
        if sid in found or sid in fused:
            out[sid] = {"tier": SQL_TIER}
        else:
            out[sid] = {"tier": GENERAL_TIER, **({"why": why[sid]} if sid in why else {})}
    return out


