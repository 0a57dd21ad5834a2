"""Declared aggregations (``aggregate=Aggregate...``): the streaming runtime runs them as folds,
and ``SparkRunner`` runs a ``partition_by("field")`` followed by a declared tumbling window in
Spark SQL (its declared tier), with the same output as its general tier, byte for byte, and as
``TestRunner``. Inputs the declared tier cannot take exactly go to the general tier."""

from __future__ import annotations

import os
from collections import Counter
from datetime import timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_spark_properties import partitioned_events

from runtime.spark import ReprocessError, SparkRunner
from runtime.spark.declared import GENERAL_TIER, SQL_TIER, spark_tiers
from runtime.testing import TestRunner
from samza_dsl import Aggregate, StreamApplication, TaskError, Windows
from samza_dsl.systems import MemorySystem

AGGREGATES = [Aggregate.count(), Aggregate.sum("v"), Aggregate.min("v"), Aggregate.max("v"),
              Aggregate.mean("v")]
SCHEMA = "k string, v bigint, ts double, id string"
EXAMPLES = int(os.environ.get("SAMZA_SPARK_EXAMPLES", "6"))


def pane_row(p: Any) -> tuple[Any, ...]:
    return (p.key.key, p.key.pane_id, p.message, p.firing.value)


def app_of(aggregate: Aggregate | None, *, keyed: bool = True, size_s: float = 10,
           partitions: int = 3, init: Any = None, fold: Any = None,
           window_key: str = "k") -> StreamApplication:
    app = StreamApplication("declared", config={"job.intermediate.stream.partitions": partitions})
    mem = MemorySystem()
    events = app.input(mem.input("events"))
    size = timedelta(seconds=size_s)
    if keyed:
        w = Windows.keyed_tumbling(key=window_key, size=size, event_time="ts", aggregate=aggregate,
                                   init=init, fold=fold)
    else:
        w = Windows.tumbling(size, event_time="ts", aggregate=aggregate, init=init, fold=fold)
    (events.partition_by("k", name="by-k")
        .window(w, name="w")
        .map(pane_row, name="row")
        .send_to(app.output(mem.output("out"))))
    return app


def rows_of(parts: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [m for p in sorted(parts) for m in parts[p]]


def both_tiers(spark: Any, app: Any, rows: list[dict[str, Any]],
               schema: str = SCHEMA) -> tuple[Any, Any]:
    """The run over a DataFrame (the declared tier where it applies) and over the same rows as
    a list (always the general tier)."""
    runner = SparkRunner(spark)
    declared = runner.reprocess(app(), {"events": spark.createDataFrame(rows, schema)})
    general = runner.reprocess(app(), {"events": {0: rows}})
    assert set(general.tiers.values()) == {GENERAL_TIER}
    return declared, general


EDGE_ROWS = [  # ties of the ms rounding, negative times, a None key, big and negative values
    {"k": "a", "v": 3, "ts": 0.0005, "id": "1"},
    {"k": "a", "v": -7, "ts": 0.0015, "id": "2"},
    {"k": None, "v": 1, "ts": 2.5, "id": "3"},
    {"k": "é", "v": 2**62, "ts": -0.0025, "id": "4"},
    {"k": "é", "v": 2**62, "ts": 9.9995, "id": "5"},
    {"k": "b", "v": 0, "ts": -12.3, "id": "6"},
    {"k": "a", "v": 3, "ts": 10.0, "id": "7"},
    {"k": "zz", "v": -1, "ts": 1234.5675, "id": "8"},
]


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "global"])
@pytest.mark.parametrize("aggregate", AGGREGATES, ids=lambda a: a.kind)
def test_the_declared_tier_equals_the_general_tier_and_the_streaming_runtime(
        spark: Any, aggregate: Aggregate, keyed: bool) -> None:
    def app() -> StreamApplication:
        return app_of(aggregate, keyed=keyed)
    # out of event-time order: on Spark past a shuffle, panes close at the end of the pass in
    # both tiers, so no message is late
    declared, general = both_tiers(spark, app, EDGE_ROWS)
    assert set(declared.tiers.values()) == {SQL_TIER}
    assert declared.messages("out") == general.messages("out")
    assert declared.late_counts == general.late_counts == {}
    # in event-time order, the streaming runtime gives the same panes
    in_order = sorted(EDGE_ROWS, key=lambda m: m["ts"])
    streaming = TestRunner(app()).add_input("events", {0: in_order}).run().messages("out")
    # (read back from the JSON Lines files: tuples as lists)
    assert Counter(map(tuple, declared.messages("out"))) == Counter(map(tuple, streaming))
    assert declared.rows_in == general.rows_in == {"events": len(EDGE_ROWS)}
    assert declared.rows_out == general.rows_out
    ops = declared.operators
    assert ops["declared-1-window-w"]["messages-in"] == len(EDGE_ROWS)
    assert ops["declared-1-window-w"]["panes-emitted"] == len(declared.messages("out"))


def test_outputs_of_both_tiers_are_the_same_bytes(spark: Any, tmp_path: Path) -> None:
    rows = [{"k": f"k{i % 7}", "v": i * 3 - 50, "ts": i * 0.37, "id": str(i)} for i in range(400)]
    runner = SparkRunner(spark)
    a = runner.reprocess(app_of(Aggregate.mean("v")), {"events": spark.createDataFrame(rows, SCHEMA)},
                         outputs={"out": str(tmp_path / "declared")})
    b = runner.reprocess(app_of(Aggregate.mean("v")), {"events": {0: rows[:200], 1: rows[200:]}},
                         outputs={"out": str(tmp_path / "general")})
    assert set(a.tiers.values()) == {SQL_TIER} and set(b.tiers.values()) == {GENERAL_TIER}

    def files(d: Path) -> dict[str, bytes]:
        return {f.name: f.read_bytes() for f in sorted(d.iterdir()) if f.name.startswith("part-")}
    assert files(tmp_path / "declared") == files(tmp_path / "general")
    assert sum(len(v) for v in files(tmp_path / "declared").values()) > 0


def _line_app(after: str, partitions: int = 3) -> StreamApplication:
    """A declared count keyed by the partition key, then ``after``: the operators between the
    window and the output."""
    app = StreamApplication("line", config={"job.intermediate.stream.partitions": partitions})
    mem = MemorySystem()
    s = (app.input(mem.input("events"))
         .partition_by("k", name="by-k")
         .window(Windows.keyed_tumbling(key="k", size=timedelta(seconds=2), event_time="ts",
                                        aggregate=Aggregate.count()), name="w"))
    if after in ("flat", "fails"):
        s = (s.filter(lambda p: p.message != 2, name="not-two")
             .flat_map(lambda p: [(p.key.key, p.key.pane_id, i) for i in range(p.message)],
                       name="spread"))
        if after == "fails":
            s = s.map(lambda t: t if t[0] != "k3" else 1 / 0, name="breaks-on-k3")
    elif after == "sink":
        s = s.map(pane_row, name="row")
        s.sink(lambda m: None, name="quiet")
    s.send_to(app.output(mem.output("out")))
    return app


LINE_ROWS = [{"k": f"k{i % 5}", "v": i, "ts": (i * 0.7) % 9, "id": str(i)} for i in range(60)]


@pytest.mark.parametrize("after", ["flat", "sink"])
def test_the_operators_after_a_declared_window_give_the_general_tiers_output(
        spark: Any, after: str, tmp_path: Path) -> None:
    """Where each aggregated row is a whole pane, the operators after the window run over a
    batch of panes and the JVM puts what they write in order: a filter, a flat_map giving
    several outputs per pane (in their order), the same files as the general tier's. A sink
    after the window keeps the pane-by-pane path (its calls are seen)."""
    runner = SparkRunner(spark)
    frame = spark.createDataFrame(LINE_ROWS, SCHEMA)
    declared = runner.reprocess(_line_app(after), {"events": frame},
                                outputs={"out": str(tmp_path / "declared")})
    general = runner.reprocess(_line_app(after), {"events": {0: LINE_ROWS}},
                               outputs={"out": str(tmp_path / "general")})
    assert set(declared.tiers.values()) == {SQL_TIER}

    def files(d: Path) -> dict[str, bytes]:
        return {f.name: f.read_bytes() for f in sorted(d.iterdir()) if f.name.startswith("part-")}
    assert files(tmp_path / "declared") == files(tmp_path / "general")
    assert sum(v.count(b"\n") for v in files(tmp_path / "declared").values()) > 20
    assert declared.rows_out == general.rows_out
    for op in declared.operators:
        if "window" not in op:
            assert declared.operators[op]["messages-in"] == general.operators[op]["messages-in"]
            assert declared.operators[op]["messages-out"] == general.operators[op]["messages-out"]
    streaming = TestRunner(_line_app(after)).add_input(
        "events", {0: sorted(LINE_ROWS, key=lambda m: m["ts"])}).run().messages("out")
    # (read back from the JSON Lines files: tuples as lists)
    assert Counter(map(tuple, declared.messages("out"))) == Counter(map(tuple, streaming))


def test_a_function_failing_after_a_declared_window_names_the_operator_and_the_pane(
        spark: Any) -> None:
    with pytest.raises(ReprocessError, match=r"operator 'line-1-map-breaks-on-k3' failed on "
                                             r"pane \d+ of key 'k3'.*ZeroDivisionError"):
        SparkRunner(spark).reprocess(_line_app("fails"), {
            "events": spark.createDataFrame(LINE_ROWS, SCHEMA)})


def test_fields_spark_sql_cannot_aggregate_exactly_take_the_general_tier(spark: Any) -> None:
    rows = [{"k": "a", "v": 0.1, "ts": 1.0, "id": "1"}, {"k": "a", "v": 0.2, "ts": 2.0, "id": "2"},
            {"k": "a", "v": 0.3, "ts": 3.0, "id": "3"}]
    schema = "k string, v double, ts double, id string"

    def app() -> StreamApplication:
        return app_of(Aggregate.sum("v"))
    declared, general = both_tiers(spark, app, rows, schema)
    assert set(declared.tiers.values()) == {GENERAL_TIER}  # a float sum: exact in Python only
    assert declared.messages("out") == general.messages("out") == [("a", "0", 0.6, "default")]
    # the exact sum, whatever the order: not 0.1 + 0.2 + 0.3 == 0.6000000000000001
    assert float(sum(map(Fraction, (0.1, 0.2, 0.3)))) == 0.6


def test_a_declared_window_after_a_python_partition_key_takes_the_general_tier(spark: Any) -> None:
    app = StreamApplication("fn", config={"job.intermediate.stream.partitions": 2})
    mem = MemorySystem()
    (app.input(mem.input("events"))
        .partition_by(lambda m: m["k"], name="by-k")
        .window(Windows.keyed_tumbling(key="k", size=timedelta(seconds=10), event_time="ts",
                                       aggregate=Aggregate.count()), name="w")
        .map(pane_row, name="row").send_to(app.output(mem.output("out"))))
    tiers = spark_tiers(app.plan())
    assert {t["tier"] for t in tiers.values()} == {GENERAL_TIER}
    assert any("partition_by" in t.get("why", "") for t in tiers.values())
    result = SparkRunner(spark).reprocess(app, {"events": spark.createDataFrame(EDGE_ROWS, SCHEMA)})
    assert set(result.tiers.values()) == {GENERAL_TIER}
    assert sum(m[2] for m in result.messages("out")) == len(EDGE_ROWS)


def test_a_null_field_is_an_error_naming_the_window_and_the_field(spark: Any) -> None:
    rows = [*EDGE_ROWS, {"k": "a", "v": None, "ts": 3.0, "id": "x"}]
    with pytest.raises(ReprocessError, match=r"window 'declared-1-window-w'.*field 'v'"):
        SparkRunner(spark).reprocess(app_of(Aggregate.sum("v")),
                                     {"events": spark.createDataFrame(rows, SCHEMA)})
    with pytest.raises(ReprocessError, match=r"declared-1-window-w.*Aggregate.sum\(v\).*'v'"):
        SparkRunner(spark).reprocess(app_of(Aggregate.sum("v")), {"events": {0: rows}})
    rows = [*EDGE_ROWS, {"k": "a", "v": 1, "ts": None, "id": "x"}]
    with pytest.raises(ReprocessError, match=r"window 'declared-1-window-w'.*field 'ts'"):
        SparkRunner(spark).reprocess(app_of(Aggregate.count()),
                                     {"events": spark.createDataFrame(rows, SCHEMA)})


def test_a_missing_or_non_numeric_field_is_an_error_on_spark(spark: Any) -> None:
    rows = [{"k": "a", "w": 1, "ts": 1.0}]
    with pytest.raises(ReprocessError, match=r"declared-1-window-w.*no field 'v'"):
        SparkRunner(spark).reprocess(app_of(Aggregate.max("v")), {
            "events": spark.createDataFrame(rows, "k string, w bigint, ts double")})
    rows2 = [{"k": "a", "v": "seven", "ts": 1.0}]
    with pytest.raises(ReprocessError, match=r"Aggregate.sum\(v\).*must be a number.*'seven'"):
        SparkRunner(spark).reprocess(app_of(Aggregate.sum("v")), {
            "events": spark.createDataFrame(rows2, "k string, v string, ts double")})


def test_bad_declarations_are_refused_when_made() -> None:
    with pytest.raises(ValueError, match="unknown aggregate 'median'"):
        Aggregate("median", "v")
    with pytest.raises(ValueError, match=r"Aggregate.sum\(field\) needs a field name"):
        Aggregate("sum")
    with pytest.raises(ValueError, match="count.*takes no field"):
        Aggregate("count", "v")
    with pytest.raises(TypeError, match="aggregate= takes an Aggregate"):
        Windows.tumbling(timedelta(seconds=1), aggregate="count")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="aggregate= or init/fold"):
        Windows.tumbling(timedelta(seconds=1), aggregate=Aggregate.count(), init=int,
                         fold=lambda m, n: n + 1)
    with pytest.raises(ValueError, match="field name must be a non-empty string"):
        Windows.keyed_tumbling(key="", size=timedelta(seconds=1))


@pytest.mark.parametrize("value", [True, None, float("nan"), float("inf"), "3"])
def test_a_bad_value_is_an_error_naming_the_aggregate_and_field(value: Any) -> None:
    app = app_of(Aggregate.mean("v"), partitions=1)
    rows = [{"k": "a", "v": 1, "ts": 1.0}, {"k": "a", "v": value, "ts": 2.0}]
    with pytest.raises(TaskError, match=r"declared-1-window-w.*Aggregate.mean\(v\): field 'v'"):
        TestRunner(app).add_input("events", rows).run()


# -- properties ----------------------------------------------------------------------------------

PROPS = settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                        HealthCheck.function_scoped_fixture])


def by_definition(kind: str, values: list[Any]) -> Any:
    """A pane's value as the docs define it, from the list of its values."""
    if kind == "count":
        return len(values)
    if kind in ("min", "max"):
        return min(values) if kind == "min" else max(values)
    exact = sum(map(Fraction, values), Fraction(0))
    if kind == "sum":
        return int(exact) if all(type(v) is int for v in values) else float(exact)
    return float(exact / len(values))


def values_of(parts: dict[int, list[dict[str, Any]]], floats: list[float]) -> dict[int, list[Any]]:
    """The drawn events with some of their values made floats."""
    out: dict[int, list[Any]] = {}
    i = 0
    for p, events in parts.items():
        out[p] = []
        for m in events:
            if floats and i % 3 == 0:
                m = {**m, "v": floats[i % len(floats)]}
            out[p].append(m)
            i += 1
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=partitioned_events(own_keys=False),
       floats=st.lists(st.floats(-1e6, 1e6, allow_nan=False), max_size=4),
       aggregate=st.sampled_from(AGGREGATES), keyed=st.booleans(),
       size_s=st.integers(1, 6), partitions=st.integers(1, 3))
def test_declared_aggregations_equal_the_same_window_folded_by_hand(
        parts: Any, floats: list[float], aggregate: Aggregate, keyed: bool, size_s: int,
        partitions: int) -> None:
    """On the streaming runtime a declared aggregation is the window folded by hand: the same
    panes, fired the same way, each holding the aggregate of its messages as defined."""
    parts = values_of(parts, floats)
    declared = TestRunner(app_of(aggregate, keyed=keyed, size_s=size_s, partitions=partitions)) \
        .add_input("events", parts).run(timeout=30).messages("out")
    by_hand = TestRunner(app_of(None, keyed=keyed, size_s=size_s, partitions=partitions,
                                init=list, fold=lambda kv, acc: [*acc, kv.value["v"]])) \
        .add_input("events", parts).run(timeout=30).messages("out")
    assert Counter(declared) == Counter(
        (k, pane, by_definition(aggregate.kind, vs), f) for k, pane, vs, f in by_hand)


@PROPS
@given(parts=partitioned_events(own_keys=False), aggregate=st.sampled_from(AGGREGATES),
       keyed=st.booleans(), size_s=st.integers(1, 6), partitions=st.integers(1, 4))
def test_the_declared_tier_equals_the_streaming_runtime(
        spark: Any, parts: Any, aggregate: Aggregate, keyed: bool, size_s: int,
        partitions: int) -> None:
    def app() -> StreamApplication:
        return app_of(aggregate, keyed=keyed, size_s=size_s, partitions=partitions)
    rows = rows_of(parts)
    streaming = TestRunner(app()).add_input("events", parts).run(timeout=30).messages("out")
    result = SparkRunner(spark).reprocess(app(), {"events": spark.createDataFrame(rows, SCHEMA)})
    assert set(result.tiers.values()) == {SQL_TIER}
    assert Counter(result.messages("out")) == Counter(streaming)


# Parquet files: the declared tier reads their row groups with Arrow and pre-aggregates them

ARROW_SCHEMA = {"k": "string", "v": "int64", "ts": "float64", "id": "string"}


def parquet_of(rows: list[dict[str, Any]], directory: Path, *, files: int = 3,
               row_group_size: int = 2, types: dict[str, str] | None = None) -> Any:
    """``rows`` written in order over ``files`` Parquet files of small row groups (one input
    whose offset order is the rows' order)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from runtime.spark import FileInput
    schema = pa.schema([(c, getattr(pa, t)()) for c, t in (types or ARROW_SCHEMA).items()])
    directory.mkdir(parents=True, exist_ok=True)
    step = max(1, -(-len(rows) // files))
    for i in range(files):
        chunk = rows[i * step:(i + 1) * step]
        table = pa.Table.from_pylist(chunk, schema=schema)
        pq.write_table(table, directory / f"part-{i:05d}.parquet", row_group_size=row_group_size)
    return FileInput(str(directory), format="parquet")


def part_files(d: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(d.iterdir()) if f.name.startswith("part-")}


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "global"])
@pytest.mark.parametrize("aggregate", AGGREGATES, ids=lambda a: a.kind)
def test_parquet_files_give_the_same_bytes_as_a_dataframe_and_the_general_tier(
        spark: Any, aggregate: Aggregate, keyed: bool, tmp_path: Path) -> None:
    rows = [*EDGE_ROWS, *({"k": f"k{i % 7}", "v": i * 3 - 50, "ts": i * 0.37, "id": str(i)}
                          for i in range(300))]
    runner = SparkRunner(spark)
    out = {name: str(tmp_path / name) for name in ("files", "frame", "general")}
    files = runner.reprocess(app_of(aggregate, keyed=keyed),
                             {"events": parquet_of(rows, tmp_path / "in", row_group_size=16)},
                             outputs={"out": out["files"]})
    frame = runner.reprocess(app_of(aggregate, keyed=keyed),
                             {"events": spark.createDataFrame(rows, SCHEMA)},
                             outputs={"out": out["frame"]})
    general = runner.reprocess(app_of(aggregate, keyed=keyed), {"events": {0: rows}},
                               outputs={"out": out["general"]})
    assert set(files.tiers.values()) == set(frame.tiers.values()) == {SQL_TIER}
    assert set(general.tiers.values()) == {GENERAL_TIER}
    written = part_files(tmp_path / "files")
    assert written == part_files(tmp_path / "frame") == part_files(tmp_path / "general")
    assert sum(v.count(b"\n") for v in written.values()) > 2
    assert files.rows_in == general.rows_in == {"events": len(rows)}
    assert files.rows_out == general.rows_out
    window = files.operators["declared-1-window-w"]
    assert window["messages-in"] == len(rows)
    assert window["panes-emitted"] == sum(v.count(b"\n") for v in written.values())


def test_integer_keys_and_times_from_parquet_files(spark: Any, tmp_path: Path) -> None:
    """Integer columns of every width: keys placed as the general tier places them, integer
    event times in seconds, sums past 2**63."""
    rows = [{"k": (i * 7919) % 5 - 2, "v": 2**62 - i, "ts": i * 3 - 40, "id": str(i)}
            for i in range(200)]
    types = {"k": "int16", "v": "int64", "ts": "int32", "id": "string"}

    def app() -> StreamApplication:
        return app_of(Aggregate.sum("v"), size_s=70)
    files = SparkRunner(spark).reprocess(app(), {"events": parquet_of(
        rows, tmp_path / "in", types=types, row_group_size=9)},
        outputs={"out": str(tmp_path / "files")})
    general = SparkRunner(spark).reprocess(app(), {"events": {0: rows}},
                                           outputs={"out": str(tmp_path / "general")})
    assert set(files.tiers.values()) == {SQL_TIER} and set(general.tiers.values()) == {GENERAL_TIER}
    assert part_files(tmp_path / "files") == part_files(tmp_path / "general")
    assert max(m[2] for m in files.messages("out")) > 2**63


def test_a_parquet_field_the_tier_cannot_aggregate_exactly_takes_the_general_tier(
        spark: Any, tmp_path: Path) -> None:
    rows = [{"k": "a", "v": 0.1, "ts": 1.0, "id": "1"}, {"k": "a", "v": 0.2, "ts": 2.0, "id": "2"},
            {"k": "a", "v": 0.3, "ts": 3.0, "id": "3"}]
    events = parquet_of(rows, tmp_path / "in", types={**ARROW_SCHEMA, "v": "float64"})
    result = SparkRunner(spark).reprocess(app_of(Aggregate.sum("v")), {"events": events})
    assert set(result.tiers.values()) == {GENERAL_TIER}
    assert result.messages("out") == [("a", "0", 0.6, "default")]


@pytest.mark.parametrize("bad", ["ts-none", "ts-nan", "ts-inf", "v-none"])
def test_a_bad_row_in_a_parquet_file_names_the_window_field_row_and_file(
        spark: Any, bad: str, tmp_path: Path) -> None:
    rows = [{"k": f"k{i % 3}", "v": i, "ts": float(i), "id": str(i)} for i in range(20)]
    field, value = {"ts-none": ("ts", None), "ts-nan": ("ts", float("nan")),
                    "ts-inf": ("ts", float("inf")), "v-none": ("v", None)}[bad]
    rows[13][field] = value  # row 13 of 20 over two files of 10: row 3 of the second
    events = parquet_of(rows, tmp_path / "in", files=2, row_group_size=2)
    with pytest.raises(ReprocessError) as info:
        SparkRunner(spark).reprocess(app_of(Aggregate.sum("v")), {"events": events})
    text = str(info.value)
    assert f"window 'declared-1-window-w': field '{field}' is missing" in text
    assert "in row 3 of " in text and "part-00001.parquet" in text
    assert "input 'events'" in text and "filter such rows out" in text


@pytest.mark.parametrize("after", ["flat", "sink"])
def test_the_operators_after_a_declared_window_over_parquet_files(
        spark: Any, after: str, tmp_path: Path) -> None:
    runner = SparkRunner(spark)
    files = runner.reprocess(_line_app(after), {"events": parquet_of(LINE_ROWS, tmp_path / "in")},
                             outputs={"out": str(tmp_path / "files")})
    general = runner.reprocess(_line_app(after), {"events": {0: LINE_ROWS}},
                               outputs={"out": str(tmp_path / "general")})
    assert set(files.tiers.values()) == {SQL_TIER}
    assert part_files(tmp_path / "files") == part_files(tmp_path / "general")
    assert files.rows_out == general.rows_out
    for op in files.operators:
        if "window" not in op:
            assert files.operators[op]["messages-in"] == general.operators[op]["messages-in"]
            assert files.operators[op]["messages-out"] == general.operators[op]["messages-out"]


def test_a_function_failing_after_a_declared_window_over_parquet_files(
        spark: Any, tmp_path: Path) -> None:
    with pytest.raises(ReprocessError, match=r"operator 'line-1-map-breaks-on-k3' failed on "
                                             r"pane \d+ of key 'k3'.*ZeroDivisionError"):
        SparkRunner(spark).reprocess(_line_app("fails"), {
            "events": parquet_of(LINE_ROWS, tmp_path / "in")})


@PROPS
@given(parts=partitioned_events(own_keys=False), aggregate=st.sampled_from(AGGREGATES),
       keyed=st.booleans(), size_s=st.integers(1, 6), partitions=st.integers(1, 4),
       row_group_size=st.integers(1, 5))
def test_the_declared_tier_over_parquet_files_equals_the_streaming_runtime(
        spark: Any, parts: Any, aggregate: Aggregate, keyed: bool, size_s: int,
        partitions: int, row_group_size: int, tmp_path_factory: Any) -> None:
    def app() -> StreamApplication:
        return app_of(aggregate, keyed=keyed, size_s=size_s, partitions=partitions)
    rows = rows_of(parts)
    streaming = TestRunner(app()).add_input("events", parts).run(timeout=30).messages("out")
    events = parquet_of(rows, tmp_path_factory.mktemp("in"), row_group_size=row_group_size)
    result = SparkRunner(spark).reprocess(app(), {"events": events})
    assert set(result.tiers.values()) == {SQL_TIER}
    assert Counter(result.messages("out")) == Counter(streaming)


def test_parquet_files_holding_a_key_as_different_types_take_the_general_tier(
        spark: Any, tmp_path: Path) -> None:
    """One file with string keys, one with integer keys: keys "1" and 1 are different keys, as
    the general tier reads them; the run takes the general tier."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from runtime.spark import FileInput
    d = tmp_path / "in"
    d.mkdir()
    pq.write_table(pa.table({"k": ["1", "2", "1"], "v": [1, 2, 3], "ts": [0.5, 1.5, 2.5]}),
                   d / "part-00000.parquet")
    pq.write_table(pa.table({"k": [1, 2, 1], "v": [4, 5, 6], "ts": [0.5, 1.5, 2.5]}),
                   d / "part-00001.parquet")
    rows = [{"k": k, "v": v, "ts": ts} for k, v, ts in
            [("1", 1, 0.5), ("2", 2, 1.5), ("1", 3, 2.5), (1, 4, 0.5), (2, 5, 1.5), (1, 6, 2.5)]]
    files = SparkRunner(spark).reprocess(app_of(Aggregate.sum("v")),
                                         {"events": FileInput(str(d), format="parquet")})
    general = SparkRunner(spark).reprocess(app_of(Aggregate.sum("v")), {"events": {0: rows}})
    assert set(files.tiers.values()) == {GENERAL_TIER}
    assert Counter(files.messages("out")) == Counter(general.messages("out"))
    assert {(m[0], m[2]) for m in files.messages("out")} == {("1", 4), ("2", 2), (1, 10), (2, 5)}


def test_the_record_timestamp_column_of_parquet_files_is_a_field_too(
        spark: Any, tmp_path: Path) -> None:
    """``FileInput(timestamp="at")`` takes column ``at`` as each record's timestamp; it stays a
    field of the messages, so a window may take its event time from it, on either tier."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from runtime.spark import FileInput
    d = tmp_path / "in"
    d.mkdir()
    rows = [{"k": "a", "v": 1, "ts": 1.0, "at": 1000}, {"k": "b", "v": 2, "ts": 2.0, "at": 2000},
            {"k": "a", "v": 3, "ts": 3.0, "at": 7000}]
    pq.write_table(pa.Table.from_pylist(rows), d / "part-00000.parquet")
    app = StreamApplication("stamped")
    mem = MemorySystem()
    (app.input(mem.input("events")).partition_by("k", name="by-k")
        .window(Windows.keyed_tumbling(key="k", size=timedelta(seconds=5000), event_time="at",
                                       aggregate=Aggregate.sum("v")), name="w")
        .map(pane_row, name="row").send_to(app.output(mem.output("out"))))
    files = SparkRunner(spark).reprocess(app, {"events": FileInput(str(d), format="parquet",
                                                                   timestamp="at")})
    general = SparkRunner(spark).reprocess(app, {"events": {0: rows}})
    assert set(files.tiers.values()) == {SQL_TIER}
    assert files.messages("out") == general.messages("out") == [
        ("a", "0", 1, "default"), ("b", "0", 2, "default"), ("a", "5000000", 3, "default")]


@pytest.mark.parametrize("encoding", ["dictionary", "plain", "overflowing"])
def test_string_keys_however_parquet_encodes_them(spark: Any, encoding: str,
                                                  tmp_path: Path) -> None:
    """String keys are grouped by their dictionary codes where the file has them: a file
    without a dictionary, or one whose dictionary overflowed into plain pages mid-column,
    gives the same panes, and the same as the general tier's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from runtime.spark import FileInput
    rows = [{"k": None if i % 97 == 0 else f"key-{(i * 7919) % 300:04d}-é", "v": i,
             "ts": i * 0.01, "id": str(i)} for i in range(6000)]
    d = tmp_path / "in"
    d.mkdir()
    options = {"dictionary": {}, "plain": {"use_dictionary": False},
               "overflowing": {"dictionary_pagesize_limit": 256}}[encoding]
    table = pa.Table.from_pylist(rows, schema=pa.schema(
        [(c, getattr(pa, t)()) for c, t in ARROW_SCHEMA.items()]))
    pq.write_table(table, d / "part-00000.parquet", row_group_size=2500, **options)
    files = SparkRunner(spark).reprocess(app_of(Aggregate.max("v")),
                                         {"events": FileInput(str(d), format="parquet")},
                                         outputs={"out": str(tmp_path / "files")})
    SparkRunner(spark).reprocess(app_of(Aggregate.max("v")), {"events": {0: rows}},
                                 outputs={"out": str(tmp_path / "general")})
    assert set(files.tiers.values()) == {SQL_TIER}
    assert part_files(tmp_path / "files") == part_files(tmp_path / "general")
    assert len(files.messages("out")) > 300


def test_a_declared_job_is_two_spark_stages_named_by_the_pass_and_its_write(
        spark: Any, tmp_path: Path) -> None:
    """The partials' stage and the stage that merges them, runs the operators after the window
    and writes the JSON Lines output: both named by the pass and the write, in one action."""
    import io

    from runtime.spark.progress import StageProgress
    events = parquet_of(LINE_ROWS, tmp_path / "in")
    target = tmp_path / "out"
    with StageProgress(spark.sparkContext, stream=io.StringIO(), interval=0.05) as progress:
        result = SparkRunner(spark).reprocess(app_of(Aggregate.count()), {"events": events},
                                              outputs={"out": str(target)})
    assert set(result.tiers.values()) == {SQL_TIER}
    name = (f"samza-dsl declared-1: stage-0+stage-1 ({SQL_TIER}), write out to jsonl "
            f"{target}")
    assert [s.name for s in progress.stages] == [name, name], progress.table()
    assert sorted(f.name for f in target.iterdir() if f.name.startswith("part-")) == [
        f"part-{i:05d}" for i in range(3)]  # a file for each task partition, empty ones too
