"""The declared tier of ``SparkRunner``: declared aggregations in Spark SQL.

A window declared with ``aggregate=`` over named fields (``samza_dsl.Aggregate``) needs no
Python per message. Where a job has the shape

    input (Parquet or a DataFrame, no event time declared on it)
      -> partition_by("field")
      -> a tumbling window (keyed or not) with event_time="field", aggregate=..., no triggers
      -> map / filter / flat_map / sink / send_to(output)

the two passes (the ``partition_by`` and the window's) run as one Spark SQL aggregation: the
JVM reads the input's columns and groups by (partition key, window key, pane start) with partial
aggregation (``count``, an exact integer ``sum``, ``min``, ``max``); Python then sees only the
distinct partition keys (to place each in its task partition, by murmur2 of the serialized
key, as ``partition_by`` does) and one row per pane (to finish the aggregate, as
``Aggregate.finish`` does, and to run the operators after the window).

Parity. The general tier reads such an input in offset order: the window's watermark never
moves in the pass (the input declares no event time and the window is past a shuffle), so no
message is late and every pane fires once as DEFAULT at end-of-stream, by pane start and then
``order_key`` of the key (docs/semantics.md rule 8). The declared tier gives those panes in that
order, in the same task partitions, through the same operators: the outputs are the same,
byte for byte. A job of another shape, a window with triggers, lateness or ``late_to``, a
hopping or session window, or a field whose column type Spark SQL cannot aggregate exactly
(``sum``, ``mean``, ``min`` and ``max`` need an integral column; event times a numeric one; keys
strings, integers or booleans) takes the general tier; ``samza-dsl plan`` says which.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from operators.state import order_key
from planner.tiers import GENERAL_TIER, SQL_TIER, DeclaredWindow, declared_windows, spark_tiers
from runtime.dag import _forward
from runtime.spark.executor import PassExecutor, PassFailure
from runtime.spark.meter import IN, OUT, PANES
from runtime.spark.shuffle import SCHEMA, PassOutput, shuffle, to_batch
from runtime.wiring import partition_of
from samza_dsl.aggregate import Aggregate
from samza_dsl.kv import KV
from samza_dsl.serdes import KVSerde
from samza_dsl.windows import FiringType, WindowKey, WindowPane

__all__ = ["DeclaredWindow", "declared_windows", "spark_tiers", "SQL_TIER", "GENERAL_TIER",
           "build_declared", "sql_reason"]

_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
_KEYS = ("string", "boolean", *_INTEGRAL)
_TIMES = ("float", "double", *_INTEGRAL)


def _type_of(schema: Any, name: str) -> str | None:
    for f in schema.fields:
        if f.name == name:
            return str(f.dataType.simpleString())
    return None


def sql_reason(d: DeclaredWindow, plan: Any, frame: Any) -> str:
    """Why the run cannot take the declared tier with input DataFrame ``frame`` ("" if it
    can): the input must give its rows as they are, and the fields column types Spark SQL
    aggregates as Python does."""
    if frame is None:
        return f"input {d.input!r} is not Parquet or a DataFrame"
    serde = plan.app.inputs[d.input].serde
    from runtime.spark.shuffle import identity
    from runtime.spark.sources import row_converter

    if isinstance(serde, KVSerde) or row_converter(d.input, serde) is not identity:
        return f"input {d.input!r} converts its rows (a typed serde)"
    schema = frame.schema
    checks: list[tuple[str, tuple[str, ...], str]] = [
        (d.partition_field, _KEYS, "partition key"), (d.time_field, _TIMES, "event time")]
    if d.key_field is not None:
        checks.append((d.key_field, _KEYS, "window key"))
    if d.aggregate.field is not None:
        checks.append((d.aggregate.field, _INTEGRAL, f"{d.aggregate.kind} field"))
    for name, allowed, what in checks:
        t = _type_of(schema, name)
        if t is None:
            return f"input {d.input!r} has no column {name!r}"
        if t not in allowed:
            return f"the {what} {name!r} is {t}"
    return ""


def _col(name: str) -> Any:
    from pyspark.sql import functions as F  # noqa: N812

    return F.col("`" + name.replace("`", "``") + "`")


def build_declared(spark: Any, plan: Any, d: DeclaredWindow, frame: Any, n: int,
                   counts: Mapping[str, int],
                   tally: Callable[[PassExecutor, dict[str, int]], None],
                   encoded: frozenset[str] = frozenset()) -> PassOutput:
    """The window pass of ``d`` over input DataFrame ``frame`` in ``n`` task partitions: one row
    of ``SCHEMA`` per output message, Spark partition p holding task partition p's, in the order
    the general tier writes them. ``tally(executor, extra)`` adds a task's counts; ``encoded``:
    the JSON Lines outputs the pass writes as lines (``PassExecutor``)."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.types import IntegerType, StructField, StructType

    w, agg = d.window, d.aggregate
    size = w.size_ms
    ts = _col(d.time_field).cast("double")
    ms = F.rint(ts * F.lit(1000.0)).cast("long")  # Java's rint: half to even, as round()
    start = (ms - F.pmod(ms, F.lit(size))).alias("_start")
    pk = _col(d.partition_field).alias("_pk")
    if d.key_field == d.partition_field:  # one grouping column serves both
        groups, wk = [pk, start], F.col("_pk").alias("_wk")
    else:
        wk = (_col(d.key_field) if d.key_field is not None
              else F.lit(None).cast("string")).alias("_wk")
        groups, wk = [pk, wk, start], F.col("_wk")
    # a missing or None event time is a count short of the rows; NaN and infinities make the
    # largest magnitude NaN or infinite
    aggs = [F.count(F.lit(1)).alias("_n"), F.count(ts).alias("_ts_n"),
            F.max(F.abs(ts)).alias("_ts_max")]
    if agg.field is not None:
        v = _col(agg.field)
        aggs.append(F.count(v).alias("_v_n"))
        if agg.kind in ("sum", "mean"):
            aggs.append(F.sum(v.cast("decimal(38,0)")).alias("_v"))
        else:
            aggs.append((F.min(v) if agg.kind == "min" else F.max(v)).alias("_v"))
    else:
        aggs.extend([F.count(F.lit(1)).alias("_v_n"), F.lit(None).cast("long").alias("_v")])
    inf = float("inf")
    panes = frame.groupBy(*groups).agg(*aggs).select(
        "_pk", wk, "_start", "_n", (F.col("_n") - F.col("_ts_n") + F.when(
            F.isnan("_ts_max") | (F.col("_ts_max") == F.lit(inf)), 1).otherwise(0))
        .alias("_bad_ts"), (F.col("_n") - F.col("_v_n")).alias("_bad_v"), "_v")

    # the task partition of each pane, as partition_by places its key (each distinct key is
    # serialized and hashed once per Python worker)
    placed_schema = StructType([*panes.schema.fields, StructField("p", IntegerType())])
    stream = d.stream

    def place(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        rule = partition_of(plan, stream, n, 0)
        seen: dict[Any, int] = {}
        for b in batches:
            ps = []
            for k in b.column(0).to_pylist():
                p = seen.get(k)
                if p is None:
                    p = seen[k] = rule(KV(k, None))
                ps.append(p)
            yield pa.RecordBatch.from_arrays([*b.columns, pa.array(ps, pa.int32())],
                                             names=[*b.schema.names, "p"])
    rows = panes.mapInArrow(place, placed_schema)
    by_task = shuffle(spark, rows, n, ["_start", "_wk"])

    stage_ids = [d.window_stage]
    config = plan.config
    where = f"stream {d.input!r} into window {d.window_op!r} (declared tier)"
    op_id, mode, finish = d.window_op, w.mode, agg.finish
    fields = (d.time_field, agg.field)
    kind = agg.kind
    accumulator, combine, default = Aggregate.accumulator, agg.combine, FiringType.DEFAULT

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        try:
            ex = PassExecutor(plan, stage_ids, part, counts, config, encoded=encoded)
            nexts = ex.wiring.nexts(op_id)
            meter = ex.meters[op_id]
            total = 0

            okeys: dict[Any, bytes] = {}  # window key -> order_key (keys are scalars)

            def okey(r: tuple[Any, ...]) -> bytes:
                k = r[1]
                o = okeys.get(k)
                if o is None:
                    o = okeys[k] = order_key(k)
                return o

            def fire(group: list[tuple[Any, ...]]) -> None:
                """The panes of one start: rows of one window key (from several partition
                keys) merged, in the order of their keys."""
                nonlocal total
                group.sort(key=okey)
                pane_id = str(group[0][2])
                panes = []
                for _, same in itertools.groupby(group, key=okey):
                    acc: Any = None
                    count = 0
                    for _pk, wk, start, n_rows, bad_ts, bad_v, value, _p in same:
                        if bad_ts or bad_v:
                            bad, name = (bad_ts, fields[0]) if bad_ts else (bad_v, fields[1])
                            raise PassFailure(
                                f"window {op_id!r}: field {name!r} is missing, None or not "
                                f"a finite number in {'a' if bad == 1 else 'some'} "
                                f"message(s) of input "
                                f"{d.input!r} (pane {start} of key {wk!r}); fix the input "
                                f"or filter such rows out before the window")
                        if value is None and kind != "count":
                            raise PassFailure(
                                f"window {op_id!r}: the {kind} of field {fields[1]!r} over "
                                f"pane {start} of key {wk!r} is beyond Spark SQL's "
                                f"decimal(38,0)")
                        part_acc = accumulator(kind, n_rows, value, value)
                        acc = part_acc if acc is None else combine(acc, part_acc)
                        count += n_rows
                    panes.append(WindowPane(WindowKey(wk, pane_id), finish(acc), default, mode))
                    total += count
                    meter[IN] += count
                meter[OUT] += len(panes)
                meter[PANES] += len(panes)
                _forward(panes, nexts)
            pending: list[tuple[Any, ...]] = []  # the rows of one pane start
            for b in batches:
                if not b.num_rows:
                    continue
                for r in zip(*(b.column(i).to_pylist() for i in range(b.num_columns)),
                             strict=True):
                    if pending and r[2] != pending[0][2]:
                        fire(pending)
                        pending = []
                    pending.append(r)
                out = ex._take()
                if out:
                    yield to_batch(out)
            if pending:
                fire(pending)
            out = ex.finish()
            if out:
                yield to_batch(out)
        except PassFailure:
            raise
        except Exception as exc:
            raise PassFailure(f"{where} in task partition {part}: {type(exc).__name__}: "
                              f"{exc}") from exc
        tally(ex, {"in:" + d.input: total, "out:" + stream: total,
                   f"op:{d.partition_op}|messages-in": total,
                   f"op:{d.partition_op}|messages-out": total})

    df = by_task.mapInArrow(run, SCHEMA)
    return PassOutput(spark, f"pass {d.partition_stage}+{d.window_stage} ({SQL_TIER})", df=df)
