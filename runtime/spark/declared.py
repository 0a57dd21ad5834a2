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

Parquet files are not read through Spark's reader: each Spark task of a first ``mapInArrow``
reads whole row groups with pyarrow (only the fields the window names), takes event times to
ms a batch at a time with numpy (as the general tier does: half to even), pre-aggregates the
batch by (partition key, window key, pane start) with Arrow's ``group_by``, and places each
distinct partition key (once per Python worker). Spark SQL then merges those partials, one
exchange into their task partitions, and a second ``mapInArrow`` finishes each pane. A row the
window cannot take (an event time that is None, NaN or infinite; a None value) fails the job
with the window, the field, the row and the file named. Files whose columns the declared
tier cannot take (or that hold a key as different types from file to file) take the general
tier, which reads them row by row; a DataFrame input is aggregated by Spark SQL from its own
columns.

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
from runtime.engine.collector import dying_young
from runtime.engine.dag import OperatorFailure
from runtime.engine.wiring import partition_of
from runtime.host.metrics import OpMeter
from runtime.spark.executor import Columns, PassExecutor, PassFailure
from runtime.spark.shuffle import (
    COLUMNS,
    SCHEMA,
    PassOutput,
    ShuffleCodec,
    landing_keys,
    range_array,
    shuffle,
    to_batch,
)
from runtime.spark.sqltext import quoted, struct_type
from runtime.spark.tiers import (
    GENERAL_TIER,
    SQL_TIER,
    DeclaredWindow,
    declared_windows,
    spark_tiers,
)
from samza_dsl.aggregate import Aggregate
from samza_dsl.kv import KV
from samza_dsl.serdes import KVSerde
from samza_dsl.spec import FilterSpec, FlatMapSpec, MapSpec, SendToSpec
from samza_dsl.windows import FiringType, WindowKey, WindowPane

__all__ = ["DeclaredWindow", "declared_windows", "spark_tiers", "SQL_TIER", "GENERAL_TIER",
           "build_declared", "build_declared_arrow", "sql_reason", "arrow_reason"]

_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
_KEYS = ("string", "boolean", *_INTEGRAL)
_TIMES = ("float", "double", *_INTEGRAL)


def _type_of(schema: Any, name: str) -> str | None:
    for f in schema.fields:
        if f.name == name:
            return str(f.dataType.simpleString())
    return None


def _serde_reason(d: DeclaredWindow, plan: Any) -> str:
    """Why the input's rows are not its messages as they are ("" if they are)."""
    serde = plan.app.inputs[d.input].serde
    from runtime.spark.shuffle import identity
    from runtime.spark.sources import row_converter

    if isinstance(serde, KVSerde) or row_converter(d.input, serde) is not identity:
        return f"input {d.input!r} converts its rows (a typed serde)"
    return ""


def _field_reason(d: DeclaredWindow, type_of: Callable[[str], str | None], where: str) -> str:
    """Why the fields of ``d`` are not columns Spark SQL aggregates as Python does ("" if they
    are); ``type_of(name)``: the Spark SQL type of column ``name`` of the input (None: no such
    column), ``where`` says which input."""
    checks: list[tuple[str, tuple[str, ...], str]] = [
        (d.partition_field, _KEYS, "partition key"), (d.time_field, _TIMES, "event time")]
    if d.key_field is not None:
        checks.append((d.key_field, _KEYS, "window key"))
    if d.aggregate.field is not None:
        checks.append((d.aggregate.field, _INTEGRAL, f"{d.aggregate.kind} field"))
    for name, allowed, what in checks:
        t = type_of(name)
        if t is None:
            return f"{where} has no column {name!r}"
        if t not in allowed:
            return f"the {what} {name!r} is {t}"
    return ""


def sql_reason(d: DeclaredWindow, plan: Any, frame: Any) -> str:
    """Why the run cannot take the declared tier with input DataFrame ``frame`` ("" if it
    can): the input must give its rows as they are, and the fields column types Spark SQL
    aggregates as Python does."""
    if frame is None:
        return f"input {d.input!r} is not Parquet or a DataFrame"
    return _serde_reason(d, plan) or _field_reason(
        d, lambda name: _type_of(frame.schema, name), f"input {d.input!r}")


#: Arrow types as Spark SQL reads them from Parquet
_ARROW_TYPES = {"string": "string", "large_string": "string", "bool": "boolean",
                "int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint",
                "uint8": "smallint", "uint16": "int", "uint32": "bigint",
                "float": "float", "double": "double"}


def arrow_reason(d: DeclaredWindow, plan: Any, source: Any) -> str:
    """Why the declared pass of ``d`` cannot read its input's Parquet files with Arrow and
    pre-aggregate them there ("" if it can): as ``sql_reason``, with the columns of every
    file (a column missing from a file, or read as another type, leaves it to Spark)."""
    schemas = source.file_schemas
    if not schemas or not source.splits:
        return f"input {d.input!r} is not Parquet files"
    used = [d.partition_field, d.time_field, d.aggregate.field]
    if d.key_field != d.partition_field:
        used.append(d.key_field)
    named = [f for f in used if f is not None]
    if len(set(named)) < len(named):
        return f"window {d.window_op!r} names a field twice"
    reason = _serde_reason(d, plan)
    key_types: dict[str, set[str]] = {}
    for schema in schemas:
        def type_of(name: str, schema: Any = schema) -> str | None:
            i = schema.get_field_index(name)
            return None if i < 0 else _ARROW_TYPES.get(str(schema.field(i).type),
                                                       str(schema.field(i).type))
        reason = reason or _field_reason(d, type_of, f"a file of input {d.input!r}")
        for name in {d.partition_field, d.key_field} - {None}:
            t = type_of(name or "")
            key_types.setdefault(name or "", set()).add("bigint" if t in _INTEGRAL else str(t))
    for name, types in key_types.items():
        if not reason and len(types) > 1:
            reason = (f"the files of input {d.input!r} hold key field {name!r} as different "
                      f"types ({', '.join(sorted(types))})")
    return reason


#: keys whose placement or order key a task keeps at most, so that its memory does not grow
#: with the number of distinct keys it sees
KEY_CACHE = 1 << 16


def _cap(cache: dict[Any, Any]) -> None:
    """Empties ``cache`` when it holds ``KEY_CACHE`` keys (call it before adding one)."""
    if len(cache) >= KEY_CACHE:
        cache.clear()


def build_declared(spark: Any, plan: Any, d: DeclaredWindow, frame: Any, n: int,
                   counts: Mapping[str, int],
                   tally: Callable[[PassExecutor, dict[str, int]], None],
                   encoded: frozenset[str] = frozenset(),
                   codec: ShuffleCodec | None = None) -> PassOutput:
    """The window pass of ``d`` over input DataFrame ``frame`` in ``n`` task partitions: one row
    of ``SCHEMA`` per output message, Spark partition p holding task partition p's, in the order
    the general tier writes them. ``tally(executor, extra)`` adds a task's counts; ``encoded``:
    the JSON Lines outputs the pass writes as lines (``PassExecutor``); ``codec``: how it
    writes the other messages (``ShuffleCodec``)."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.types import IntegerType, StructField, StructType

    codec = codec or ShuffleCodec(plan)

    w, agg = d.window, d.aggregate
    # the expressions as SQL text: one call into the JVM each, where columns built in Python
    # take one per operator
    ts = f"CAST({quoted(d.time_field)} AS DOUBLE)"
    ms = f"CAST(rint({ts} * CAST(1000.0 AS DOUBLE)) AS BIGINT)"  # half to even, as round()
    start = f"{ms} - pmod({ms}, {w.size_ms}) AS _start"
    pk = f"{quoted(d.partition_field)} AS _pk"
    if d.key_field == d.partition_field:  # one grouping column serves both
        groups, wk = [pk, start], "_pk AS _wk"
    else:
        wk = (f"{quoted(d.key_field)} AS _wk" if d.key_field is not None
              else "CAST(NULL AS STRING) AS _wk")
        groups, wk = [pk, wk, start], "_wk"
    # a missing or None event time is a count short of the rows; NaN and infinities make the
    # largest magnitude NaN or infinite
    aggs = ["count(1) AS _n", f"count({ts}) AS _ts_n", f"max(abs({ts})) AS _ts_max"]
    if agg.field is not None:
        v = quoted(agg.field)
        aggs.append(f"count({v}) AS _v_n")
        if agg.kind in ("sum", "mean"):
            aggs.append(f"sum(CAST({v} AS DECIMAL(38,0))) AS _v")
        else:
            aggs.append(f"{'min' if agg.kind == 'min' else 'max'}({v}) AS _v")
    else:
        aggs.extend(["count(1) AS _v_n", "CAST(NULL AS BIGINT) AS _v"])
    panes = frame.groupBy(*map(F.expr, groups)).agg(*map(F.expr, aggs)).selectExpr(
        "_pk", wk, "_start", "_n",
        "_n - _ts_n + CASE WHEN isnan(_ts_max) OR _ts_max = CAST('Infinity' AS DOUBLE) "
        "THEN 1 ELSE 0 END AS _bad_ts", "_n - _v_n AS _bad_v", "_v")

    line = _one_per_key(plan, d)
    if line is not None:
        return _build_one_per_key(spark, plan, d, line, panes, n, counts, tally, encoded, codec)

    # the task partition of each pane, as partition_by places its key (each distinct key is
    # serialized and hashed once per Python worker)
    placed_schema = StructType([*panes.schema.fields, StructField("p", IntegerType())])
    stream = d.stream

    @dying_young
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

    df = by_task.mapInArrow(_window_run(plan, d, counts, tally, encoded, codec),
                            struct_type(SCHEMA))
    out = PassOutput(spark, codec, f"pass {d.partition_stage}+{d.window_stage} ({SQL_TIER})",
                     df=df)
    out.partitions = n  # the shuffle into the task partitions
    return out


#: how many rows of a row group the pre-aggregation reads at a time (a bound on its memory)
ARROW_BATCH = 1 << 20
_MS_LIMIT = float(2**63)  # event times in ms beyond an int64


def build_declared_arrow(spark: Any, plan: Any, d: DeclaredWindow, source: Any, n: int,
                         counts: Mapping[str, int],
                         tally: Callable[[PassExecutor, dict[str, int]], None],
                         encoded: frozenset[str] = frozenset(),
                         codec: ShuffleCodec | None = None) -> PassOutput:
    """``build_declared`` over Parquet files (``source``: their splits, ``arrow_reason``), in
    two stages where Spark's reader takes three.

    The map side reads the fields of each row group with Arrow and aggregates them there by
    (partition key, window key, pane start) (Arrow's hash aggregation: no Python per row), and
    places each distinct partition key in its task partition, by murmur2 of the serialized
    key as ``partition_by`` does. The exchange moves each partial row to the Spark partition of
    its task partition; Spark SQL merges the partials of each pane there (no second exchange:
    the grouping holds the exchange's key), sorts them by pane start and hands them to the
    same Python step as ``build_declared``. A row whose event time or value is missing, None
    or not a finite number stops the run, naming the file and the row."""
    codec = codec or ShuffleCodec(plan)
    splits: list[tuple[str, int]] = list(source.splits)
    agg = d.aggregate
    kind = agg.kind
    same = d.key_field == d.partition_field
    schema = source.file_schemas[0]

    def spark_type(name: str) -> str:
        t = _ARROW_TYPES[str(schema.field(schema.get_field_index(name)).type)]
        return "bigint" if t in _INTEGRAL else t
    fields = [d.partition_field, d.time_field]
    keys = ["_pk"]
    ddl = [f"_k int, p int, _pk {spark_type(d.partition_field)}"]
    if not same and d.key_field is not None:
        fields.append(d.key_field)
        keys.append("_wk")
        ddl.append(f"_wk {spark_type(d.key_field)}")
    ddl.append("_start bigint, _n bigint")
    if agg.field is not None:
        fields.append(agg.field)
        ddl.append("_v decimal(38,0)" if kind in ("sum", "mean") else "_v bigint")
    fields = list(dict.fromkeys(fields))
    # string keys read as Parquet stores them, dictionary-encoded: no string per row
    key_fields = [k for k in dict.fromkeys((d.partition_field, d.key_field)) if k is not None]
    files = [f for f, g in splits if g == 0]  # each file's first split, in the files' order
    dict_keys = {f: [k for k in key_fields
                     if str(sc.field(sc.get_field_index(k)).type) in ("string", "large_string")]
                 for f, sc in zip(files, source.file_schemas, strict=True)}
    partials_fn = _arrow_partials(plan, d, splits, n, fields, keys, dict_keys)
    tasks = max(1, min(len(splits), spark.sparkContext.defaultParallelism))
    partials = spark.range(len(splits), numPartitions=tasks).mapInArrow(
        partials_fn, struct_type(", ".join(ddl)))
    # merge the partials where the exchange put them: the grouping holds its key (``_k``); one
    # query, where the DataFrame API takes a round trip to the JVM per column and call
    v = "CAST(NULL AS BIGINT)" if agg.field is None else \
        f"{'sum' if kind in ('sum', 'mean') else kind}(_v)"
    wk = "_pk" if same else "_wk" if d.key_field is not None else "CAST(NULL AS STRING)"
    by_task = spark.sql(
        f"SELECT _pk, {wk} AS _wk, _start, sum(_n) AS _n, CAST(0 AS BIGINT) AS _bad_ts, "
        f"CAST(0 AS BIGINT) AS _bad_v, {v} AS _v, p "
        f"FROM (SELECT /*+ REPARTITION({n}, _k) */ * FROM {{partials}}) "
        f"GROUP BY {', '.join(['_k', 'p', *keys, '_start'])} SORT BY _start, _wk",
        partials=partials)
    line = _one_per_key(plan, d)
    run = _window_run(plan, d, counts, tally, encoded, codec) if line is None else \
        _line_run(plan, d, line, counts, tally, encoded, codec)
    df = by_task.mapInArrow(run, struct_type(SCHEMA))
    out = PassOutput(spark, codec, f"pass {d.partition_stage}+{d.window_stage} ({SQL_TIER})",
                     df=df)
    out.partitions = n  # the shuffle into the task partitions
    return out


def _line_run(plan: Any, d: DeclaredWindow, line: list[str], counts: Mapping[str, int],
              tally: Callable[[PassExecutor, dict[str, int]], None], encoded: frozenset[str],
              codec: ShuffleCodec) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """``_window_run`` where each row is a whole pane and the operators after the window form
    ``line`` (``_one_per_key``): the panes of a batch go through the line together
    (``PassExecutor.line``), each start's in the order of their keys."""
    stage_ids = [d.window_stage]
    config = plan.config
    agg = d.aggregate
    op_id, mode, finish, kind = d.window_op, d.window.mode, agg.finish, agg.kind
    accumulator, default = Aggregate.accumulator, FiringType.DEFAULT
    counting = kind == "count"

    @dying_young
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        okeys: dict[Any, bytes] = {}
        total = 0
        keys: list[Any] = []
        starts: list[int] = []
        try:
            ex = PassExecutor(plan, stage_ids, part, counts, config, encoded=encoded)
            run_line, meter = ex.line(line), ex.op_meters[op_id]
            held: list[list[Any]] = [[], [], [], []]  # the rows of the last start seen

            def fire(cols: list[list[Any]]) -> Any:
                """The panes of whole starts (rows sorted by start) through the line."""
                nonlocal total, keys, starts
                keys, starts, ns, values = cols
                kinds = set(map(type, keys))
                if kinds == {str} or kinds == {int}:
                    # Spark sorted the rows by (start, key): strings by their UTF-8 bytes
                    # (code point order) and integers by value, which is ``order_key``'s
                    # order for such keys (``in_key_order``)
                    order = list(range(len(keys)))
                else:
                    _cap(okeys)
                    for k in set(keys):
                        if k not in okeys:
                            okeys[k] = order_key(k)
                    order = sorted(range(len(keys)),
                                   key=lambda i: (starts[i], okeys[keys[i]]))
                if not counting and None in values:  # a sum beyond Spark SQL's decimals
                    i = values.index(None)
                    raise _pane_failure(d, keys[i], starts[i], 0, 0)
                pane_ids = {st: str(st) for st in set(starts)}
                panes = [WindowPane(WindowKey(keys[i], pane_ids[starts[i]]),
                                    ns[i] if counting else
                                    finish(accumulator(kind, ns[i], values[i], values[i])),
                                    default, mode) for i in order]
                rows = sum(ns)
                total += rows
                meter.n_in += rows
                meter.n_out += len(panes)
                return columns_batch(codec, run_line(panes, order))

            for b in batches:
                if not b.num_rows:
                    continue
                cols = [b.column(i).to_pylist() for i in (0, 2, 3, 6)]
                last = cols[1][-1]
                cut = len(cols[1])
                while cut and cols[1][cut - 1] == last:
                    cut -= 1
                if cut:  # the starts before the batch's last are whole
                    done = [h + c[:cut] for h, c in zip(held, cols, strict=True)]
                    held = [c[cut:] for c in cols]
                    out = fire(done)
                    if out is not None:
                        yield out
                else:
                    held = [h + c for h, c in zip(held, cols, strict=True)]
            if held[0]:
                out = fire(held)
                if out is not None:
                    yield out
            _end_line(ex, op_id, part)
        except PassFailure:
            raise
        except Exception as exc:
            raise _line_error(d, exc, starts, keys, f"task partition {part}") from exc
        tally(ex, _read_counts(d, total))

    return run


def columns_batch(codec: ShuffleCodec, c: Columns) -> Any:
    """The records of ``c`` (``PassExecutor.line``) as an Arrow batch of ``SCHEMA`` rows (None
    where there are none)."""
    import pyarrow as pa

    k = len(c.tags)
    if not k:
        return None
    if c.lines is not None:
        ks: list[bytes | None] = [None] * k
        ms: list[bytes] = c.lines
    else:
        ks, ms = [], []
        for key, mb in map(codec.dumper(), itertools.repeat(c.sid), c.messages):
            ks.append(key)
            ms.append(mb)
    return pa.RecordBatch.from_arrays([
        pa.array(c.parts, pa.int32()), pa.array([c.sid] * k, pa.string()),
        pa.array([c.sort_ms] * k, pa.int64()), pa.array([c.src] * k, pa.int32()),
        range_array(c.offsets), pa.array([c.clock_ms] * k, pa.int64()),
        pa.array(ks, pa.binary()), pa.array(ms, pa.binary())], names=list(COLUMNS))


def _arrow_partials(plan: Any, d: DeclaredWindow, splits: list[tuple[str, int]], n: int,
                    fields: list[str], keys: list[str], dict_keys: dict[str, list[str]]
                    ) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The map side of ``build_declared_arrow``: split numbers -> the partial aggregates of
    their row groups (``_k, p, _pk[, _wk], _start, _n[, _v]``). ``dict_keys``: the string key
    fields of each file, read dictionary-encoded (grouped by their codes, decoded after)."""
    agg, stream, op_id = d.aggregate, d.stream, d.window_op
    landing = landing_keys(n)
    names = {d.partition_field: "_pk", d.time_field: "_ts"}
    if len(keys) > 1:
        names[d.key_field or ""] = "_wk"
    if agg.field is not None:
        names[agg.field] = "_v"
    value_agg = {"sum": "sum", "mean": "sum", "min": "min", "max": "max"}.get(agg.kind)

    @dying_young
    def partials(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow.parquet as pq

        rule = partition_of(plan, stream, n, 0)
        placed: dict[Any, int] = {}
        for b in batches:
            for i in b.column(0).to_pylist():
                f, g = splits[i]
                try:
                    pf = pq.ParquetFile(f, read_dictionary=dict_keys.get(f) or None)
                    meta = pf.metadata
                    if g >= meta.num_row_groups:
                        continue
                    row = sum(meta.row_group(j).num_rows for j in range(g))
                    for part in pf.iter_batches(batch_size=ARROW_BATCH, row_groups=[g],
                                                columns=fields, use_threads=False):
                        if part.num_rows:
                            t = _partial_aggregates(d, names, keys, value_agg, part, f, row)
                            yield _placed_partials(t, rule, placed, landing, keys, value_agg)
                        row += part.num_rows
                except PassFailure:
                    raise
                except Exception as exc:
                    raise PassFailure(f"input {d.input!r} into window {op_id!r} (declared "
                                      f"tier): row group {g} of {f} cannot be read: "
                                      f"{type(exc).__name__}: {exc}") from exc

    return partials


def _bad_row(d: DeclaredWindow, what: str, name: str, f: str, row: int) -> PassFailure:
    return PassFailure(
        f"window {d.window_op!r}: field {name!r} is {what} in row {row} of {f} (input "
        f"{d.input!r}); fix the input or filter such rows out before the window")


def _partial_aggregates(d: DeclaredWindow, names: dict[str, str], keys: list[str],
                        value_agg: str | None, part: Any, f: str, row: int) -> Any:
    """For ``_arrow_partials``: the partial aggregates of a batch of rows ``part`` (the first
    is row ``row`` of file ``f``), its columns renamed by ``names``."""
    import numpy as np
    import pyarrow as pa

    agg, size = d.aggregate, d.window.size_ms
    cols = {names[c]: part.column(c) for c in part.schema.names}
    ts = cols.pop("_ts")
    if pa.types.is_integer(ts.type) and not ts.null_count:
        t = ts.to_numpy(zero_copy_only=False).astype(np.int64)
        bad = np.abs(t.astype(np.float64) * 1000.0) >= _MS_LIMIT
        ms = np.where(bad, 0, t) * 1000
    else:  # half to even, as round(); None is NaN here
        x = ts.cast(pa.float64()).to_numpy(zero_copy_only=False) * 1000.0
        bad = ~(np.abs(x) < _MS_LIMIT)
        ms = np.rint(np.where(bad, 0.0, x)).astype(np.int64)
    if bad.any():
        raise _bad_row(d, "missing, None or not a finite number", d.time_field, f,
                       row + int(np.flatnonzero(bad)[0]))
    cols["_start"] = pa.array(ms - ms % size)
    aggs: list[Any] = [([], "count_all")]
    if value_agg is not None:
        v = cols["_v"]
        if v.null_count:
            r = int(np.flatnonzero(v.is_null().to_numpy(zero_copy_only=False))[0])
            raise _bad_row(d, "missing or None", agg.field or "", f, row + r)
        cols["_v"] = v.cast(pa.decimal128(38, 0) if agg.kind in ("sum", "mean")
                            else pa.int64())
        aggs.append(("_v", value_agg))
    coded = {}
    for k in keys:
        c = cols[k]
        if pa.types.is_dictionary(c.type):  # group by the codes
            coded[k] = c.dictionary
            cols[k] = c.indices
        elif pa.types.is_integer(c.type):
            cols[k] = c.cast(pa.int64())
        elif pa.types.is_large_string(c.type):
            cols[k] = c.cast(pa.string())
    t = pa.table(cols).group_by([*keys, "_start"], use_threads=False).aggregate(aggs)
    for k, values in coded.items():
        i = t.schema.get_field_index(k)
        t = t.set_column(i, k, values.take(t.column(i)).cast(pa.string()))
    return t


def _placed_partials(t: Any, rule: Any, placed: dict[Any, int], landing: list[int],
                     keys: list[str], value_agg: str | None) -> Any:
    """For ``_arrow_partials``: the partials ``t`` with the task partition of each partition
    key (by ``rule``, remembered in ``placed``) and its landing key."""
    import pyarrow as pa

    ps = []
    _cap(placed)
    get = placed.get
    for k in t.column("_pk").to_pylist():
        p = get(k)
        if p is None:
            p = placed[k] = rule(KV(k, None))
        ps.append(p)
    arrays = [pa.array([landing[p] for p in ps], pa.int32()), pa.array(ps, pa.int32()),
              *(t.column(k).combine_chunks() for k in keys),
              t.column("_start").combine_chunks(), t.column("count_all").combine_chunks()]
    out = ["_k", "p", *keys, "_start", "_n"]
    if value_agg is not None:
        arrays.append(t.column(f"_v_{value_agg}").combine_chunks())
        out.append("_v")
    return pa.RecordBatch.from_arrays(arrays, names=out)


def _window_run(plan: Any, d: DeclaredWindow, counts: Mapping[str, int],
                tally: Callable[[PassExecutor, dict[str, int]], None], encoded: frozenset[str],
                codec: ShuffleCodec) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The window pass's Python step over the rows of the aggregation in task partition p
    (Spark partition p), sorted by pane start: ``_pk, _wk, _start, _n, _bad_ts, _bad_v, _v,
    p``. It finishes each pane (the rows of a window key merged), fires the panes of each
    start in the order of their keys, runs the operators after the window and writes
    ``SCHEMA``'s rows."""
    w, agg = d.window, d.aggregate
    stage_ids = [d.window_stage]
    config = plan.config
    where = f"stream {d.input!r} into window {d.window_op!r} (declared tier)"
    op_id, mode, finish = d.window_op, w.mode, agg.finish
    kind = agg.kind
    accumulator, combine, default = Aggregate.accumulator, agg.combine, FiringType.DEFAULT

    @dying_young
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        try:
            ex = PassExecutor(plan, stage_ids, part, counts, config, encoded=encoded)
            nexts = ex.wiring.nexts(op_id)
            meter = ex.op_meters[op_id]
            total = 0

            okeys: dict[Any, bytes] = {}  # window key -> order_key (keys are scalars)

            def okey(r: tuple[Any, ...]) -> bytes:
                k = r[1]
                o = okeys.get(k)
                if o is None:
                    _cap(okeys)
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
                        if bad_ts or bad_v or (value is None and kind != "count"):
                            raise _pane_failure(d, wk, start, bad_ts, bad_v)
                        part_acc = accumulator(kind, n_rows, value, value)
                        acc = part_acc if acc is None else combine(acc, part_acc)
                        count += n_rows
                    panes.append(WindowPane(WindowKey(wk, pane_id), finish(acc), default, mode))
                    total += count
                    meter.n_in += count
                meter.n_out += len(panes)
                pane: Any = None
                try:
                    for pane in panes:
                        for nxt in nexts:
                            nxt(pane)
                except OperatorFailure as f:
                    raise _after_failure(d, f, f" on pane {pane_id} of key {pane.key.key!r}"
                                               f" of window {op_id!r}") from f
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
                    yield to_batch(codec, out)
            if pending:
                fire(pending)
            for out in ex.finish_chunks():
                yield to_batch(codec, out)
        except PassFailure:
            raise
        except Exception as exc:
            raise PassFailure(f"{where} in task partition {part}: {type(exc).__name__}: "
                              f"{exc}") from exc
        tally(ex, _read_counts(d, total))

    return run


def _end_line(ex: PassExecutor, op_id: str, part: int) -> None:
    """Ends the operators after a declared window in task partition ``part``: they are maps,
    filters and flat_maps, which write nothing at the end."""
    if ex.finish():
        raise PassFailure(f"window {op_id!r}: an operator after it wrote at the end of the "
                          f"stream of task partition {part}")


def _line_error(d: DeclaredWindow, exc: Exception, starts: list[int], keys: list[Any],
                where: str) -> PassFailure:
    """What failed while a batch of panes went through the operators after window ``d``: an
    operator (``OperatorFailure``, its tag the index of the pane in ``starts`` and ``keys``)
    or the step itself."""
    op_id = d.window_op
    if isinstance(exc, OperatorFailure):
        f = exc
        pane = "" if f.tag is None or f.tag < 0 else \
            f" on pane {starts[f.tag]} of key {keys[f.tag]!r} of window {op_id!r}"
        return _after_failure(d, f, pane)
    return PassFailure(f"stream {d.input!r} into window {op_id!r} (declared tier) in {where}: "
                       f"{type(exc).__name__}: {exc}")


def _after_failure(d: DeclaredWindow, f: OperatorFailure, where: str) -> PassFailure:
    """The error of an operator after the window failing (``where``: on which pane)."""
    if isinstance(f.cause, PassFailure):  # an output's own words: a message not JSON
        return PassFailure(f.cause.detail)
    return PassFailure(f"operator {f.op_id!r} failed{where} (input {d.input!r}, declared "
                       f"tier): {f.reason}; fix the function or the input and run again: "
                       f"nothing was written")


def _pane_failure(d: DeclaredWindow, wk: Any, start: int, bad_ts: int, bad_v: int
                  ) -> PassFailure:
    """The error of a pane whose rows hold a bad event time or value (``bad_ts``, ``bad_v``:
    how many), or whose sum is beyond Spark SQL's decimals (neither)."""
    op_id, kind, field = d.window_op, d.aggregate.kind, d.aggregate.field
    if bad_ts or bad_v:
        bad, name = (bad_ts, d.time_field) if bad_ts else (bad_v, field)
        return PassFailure(
            f"window {op_id!r}: field {name!r} is missing, None or not a finite number in "
            f"{'a' if bad == 1 else 'some'} message(s) of input {d.input!r} (pane {start} of "
            f"key {wk!r}); fix the input or filter such rows out before the window")
    return PassFailure(f"window {op_id!r}: the {kind} of field {field!r} over pane {start} of "
                       f"key {wk!r} is beyond Spark SQL's decimal(38,0)")


def _read_counts(d: DeclaredWindow, rows: int) -> dict[str, int]:
    """What a task of the pass adds for the ``rows`` it aggregated: read from the input, and
    through the ``partition_by`` into its stream, which Spark SQL ran without calling it."""
    return {"in:" + d.input: rows, "out:" + d.stream: rows,
            f"op:{d.partition_op}|messages-in": rows, f"op:{d.partition_op}|messages-out": rows}


def _one_per_key(plan: Any, d: DeclaredWindow) -> list[str] | None:
    """The operators after the window, in order, where the pass may run them over the panes
    of a batch in any order of panes and leave the order of what they write to the JVM's sort
    (None where it may not): the window is keyed by the partition key (so each row of the
    aggregation is one whole pane, merged with no other); the operators after it form one
    line of maps, filters and flat_maps ending in a send_to (no sink, whose calls a user sees,
    and no fan-out); and no stage reads what it writes (only the written order counts, which
    the sort restores)."""
    if d.key_field != d.partition_field:
        return None
    stage = next(s for s in plan.stages if s.stage_id == d.window_stage)
    app, graph = plan.app, plan.dag
    line: list[str] = []
    op = d.window_op
    while True:
        nexts = list(graph.successors(op))
        if len(nexts) != 1 or nexts[0] not in stage.operators:
            break
        op = nexts[0]
        line.append(op)
    if not line or len(line) != len(stage.operators) - 1:
        return None
    specs = [app.operator(o) for o in line]
    if any(not isinstance(sp, MapSpec | FilterSpec | FlatMapSpec) for sp in specs[:-1]) \
            or not isinstance(specs[-1], SendToSpec) or specs[-1].stream_id is None:
        return None
    read = {sid for s in plan.stages for sid in s.inputs}
    return None if specs[-1].stream_id in read else line


#: what the one-per-key pass writes of a pane's records: the task partition, the columns that
#: order them (the pane's start, its key's ``order_key``, the record's place among the pane's
#: records), and ``SCHEMA``'s columns that differ from record to record
_PANE_SCHEMA = ("_t int, _start long, _okey binary, _i int, p int, off long, k binary, "
                "m binary")
_PANE_COLUMNS = ("_t", "_start", "_okey", "_i", "p", "off", "k", "m")


def _check_panes(d: DeclaredWindow, keys: list[Any], starts: list[int], bad_tss: list[Any],
                 bad_vs: list[Any], values: list[Any], counting: bool) -> None:
    """For ``_build_one_per_key``: the error of the first pane of a batch whose rows had a bad
    time or value (a value None, but for a count), if one has."""
    if any(bad_tss) or any(bad_vs) or (not counting and None in values):
        for pk, start, bad_ts, bad_v, value in zip(keys, starts, bad_tss, bad_vs, values,
                                                   strict=True):
            if bad_ts or bad_v or (value is None and not counting):
                raise _pane_failure(d, pk, start, bad_ts, bad_v)


def _build_one_per_key(spark: Any, plan: Any, d: DeclaredWindow, line: list[str], panes: Any,
                       n: int, counts: Mapping[str, int],
                       tally: Callable[[PassExecutor, dict[str, int]], None],
                       encoded: frozenset[str], codec: ShuffleCodec) -> PassOutput:
    """``build_declared`` where each aggregated row is a whole pane and the operators ``line``
    after the window may see the panes in any order (``_one_per_key``): the task that finishes
    the aggregation also places each pane's key, finishes its value and runs the line over
    the panes of each batch (``PassExecutor.line``, an executor per task partition); the JVM
    then moves what they write to its task partitions and sorts it into the order the general
    tier writes it, by pane start, key and place among the pane's outputs. One Python step,
    where the general case has two, and no call per message between the operators."""

    stage_ids = [d.window_stage]
    config = plan.config
    stream = d.stream
    agg = d.aggregate
    op_id, mode, finish, kind = d.window_op, d.window.mode, agg.finish, agg.kind
    accumulator, default = Aggregate.accumulator, FiringType.DEFAULT
    counting = kind == "count"  # a count's pane value is its rows
    rows = panes.select("_pk", "_start", "_n", "_bad_ts", "_bad_v", "_v")

    @dying_young
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        spark_part = ctx.partitionId() if ctx is not None else 0
        rule = partition_of(plan, stream, n, 0)
        placed: dict[Any, tuple[Any, ...]] = {}  # key -> (task partition, order key, task)
        tasks: dict[int, tuple[PassExecutor, Any, OpMeter]] = {}
        total = 0
        keys: list[Any] = []
        starts: list[int] = []

        def place(key: Any) -> tuple[Any, ...]:
            p = rule(KV(key, None))
            task = tasks.get(p)
            if task is None:
                ex = PassExecutor(plan, stage_ids, p, counts, config, encoded=encoded)
                task = tasks[p] = (ex, ex.line(line), ex.op_meters[op_id])
            _cap(placed)
            out = placed[key] = (p, order_key(key), task)
            return out

        try:
            for b in batches:
                if not b.num_rows:
                    continue
                keys, starts, ns, bad_tss, bad_vs, values = (
                    b.column(i).to_pylist() for i in range(6))
                _check_panes(d, keys, starts, bad_tss, bad_vs, values, counting)
                # a batch at a time: each key placed (once per worker), each pane made, then
                # each task partition's panes through its line of operators
                get = placed.get
                got = [get(k) or place(k) for k in keys]
                okeys = [g[1] for g in got]
                vals = ns if counting else [finish(accumulator(kind, c, v, v))
                                            for c, v in zip(ns, values, strict=True)]
                pane_ids = {st: str(st) for st in set(starts)}  # a start's panes share it
                panes_in = [WindowPane(WindowKey(k, pane_ids[st]), v, default, mode)
                            for k, st, v in zip(keys, starts, vals, strict=True)]
                total += sum(ns)
                task_of = [g[0] for g in got]
                written = []
                for p, same in itertools.groupby(sorted(range(len(keys)), key=task_of.__getitem__),
                                                 key=task_of.__getitem__):
                    idx = list(same)
                    _ex, run_line, meter = tasks[p]
                    meter.n_in += sum([ns[i] for i in idx])
                    meter.n_out += len(idx)
                    cols = run_line([panes_in[i] for i in idx], idx)
                    if cols.tags:
                        written.append((p, cols))
                if written:
                    yield _pane_batch(codec, written, starts, okeys)
            for p, (ex, _line, _meter) in sorted(tasks.items()):
                _end_line(ex, op_id, p)
        except PassFailure:
            raise
        except Exception as exc:
            raise _line_error(d, exc, starts, keys, f"Spark partition {spark_part}") from exc
        extra = _read_counts(d, total)
        if not tasks:
            tally(PassExecutor(plan, stage_ids, 0, counts, config, encoded=encoded), extra)
        for ex, _line, _meter in tasks.values():
            tally(ex, extra)
            extra = {}

    return _panes_by_task(spark, plan, d, line,
                          rows.mapInArrow(run, struct_type(_PANE_SCHEMA)), n, codec)


def _panes_by_task(spark: Any, plan: Any, d: DeclaredWindow, line: list[str], written: Any,
                   n: int, codec: ShuffleCodec) -> PassOutput:
    """For ``_build_one_per_key``: the records its tasks wrote (``written``, rows of
    ``_PANE_SCHEMA``) moved to their task partitions and sorted in the general tier's order."""
    # what every record of the line has alike is added here, in the JVM: the stream, the
    # task partition it came from, and the times (a pane's records are written at
    # end-of-stream, with no record being processed)
    sid = plan.app.operator(line[-1]).stream_id
    text = "'" + sid.replace("\\", "\\\\").replace("'", "\\'") + "'"
    by_task = shuffle(spark, written, n, _PANE_COLUMNS[1:4], column="_t").selectExpr(
        "p", f"{text} AS sid", "CAST(0 AS BIGINT) AS sort_ms", "_t AS src", "off",
        "CAST(0 AS BIGINT) AS clock", "k", "m")
    out = PassOutput(spark, codec, f"pass {d.partition_stage}+{d.window_stage} ({SQL_TIER})",
                     df=by_task)
    out.partitions = n  # the shuffle into the task partitions
    return out


def _pane_batch(codec: ShuffleCodec, written: list[tuple[int, Columns]], starts: list[int],
                okeys: list[bytes]) -> Any:
    """The records of a batch's panes (``_PANE_SCHEMA``): ``written`` holds each task
    partition's (``PassExecutor.line``), tagged with the pane's row in the batch."""
    import pyarrow as pa

    tags = [t for _, c in written for t in c.tags]
    places: list[int] = []
    ks: list[bytes | None] = []
    ms: list[bytes] = []
    dump = codec.dumper()
    for _, c in written:
        if len(set(c.tags)) == len(c.tags):  # a record per pane: each the pane's first
            places.extend([0] * len(c.tags))
        else:
            before, i = -1, 0
            for t in c.tags:
                i = i + 1 if t == before else 0
                before = t
                places.append(i)
        if c.lines is not None:
            ks.extend([None] * len(c.lines))
            ms.extend(c.lines)
        else:
            for k, mb in map(dump, itertools.repeat(c.sid), c.messages):
                ks.append(k)
                ms.append(mb)
    offsets = [range_array(c.offsets) for _, c in written]
    return pa.RecordBatch.from_arrays([
        pa.array([p for p, c in written for _ in c.tags], pa.int32()),
        pa.array([starts[t] for t in tags], pa.int64()),
        pa.array([okeys[t] for t in tags], pa.binary()), pa.array(places, pa.int32()),
        pa.array([q for _, c in written for q in c.parts], pa.int32()),
        offsets[0] if len(offsets) == 1 else pa.concat_arrays(offsets),
        pa.array(ks, pa.binary()), pa.array(ms, pa.binary())], names=_PANE_COLUMNS)
