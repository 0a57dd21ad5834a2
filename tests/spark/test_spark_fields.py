"""Field reads on Spark: where a lone ``partition_by``'s key function and the input's event time
only read a field (``samza_dsl.fields``), the carried pass makes keys, partitions and times from
the Parquet columns, and reads only the columns it needs; where the window after it only reads
some fields of the messages, only those are carried through the shuffle.

None of this changes an output: each run here equals the streaming runtime's (TestRunner) over
the same rows, and the same job written with functions the analysis does not follow (which
carries every field, a row at a time). Batches the columns cannot serve (a null key, a null
time) take the rows, and a row that cannot be read is still named by file and row."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runtime.memory import resolve_partitions
from runtime.spark import SparkRunner
from runtime.spark.runner import _Compiler
from runtime.spark.sources import resolve_source
from runtime.testing import TestRunner
from samza_dsl import StreamApplication, Windows
from samza_dsl.aggregate import Field
from samza_dsl.systems import MemorySystem

T0 = 1_700_000_000.0


def _rows(part: int, n: int, *, null_keys: bool = False, int_keys: bool = False,
          int_ts: bool = False) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        key: Any = (i * 7 + part) % 5 if int_keys else f"k{(i * 7 + part) % 5}"
        out.append({"user": f"u{i * 31 % 17}",
                    "k": None if null_keys and i % 11 == 3 else key,
                    "v": i - 4,
                    "ts": int(T0) + part * 3 + i if int_ts else T0 + part * 3.5 + i * 0.37,
                    "tags": [f"t{j}" for j in range(i % 3)]})
    return out


def _write(tmp: Path, parts: dict[int, list[dict[str, Any]]], schema: pa.Schema | None = None
           ) -> Path:
    d = tmp / "views.parquet"
    d.mkdir()
    for p, rows in parts.items():
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), d / f"part-{p}.parquet",
                       row_group_size=40)
    return d


def _plain_key(m: dict[str, Any]) -> Any:
    return m["k"]


def _plain_ts(m: dict[str, Any]) -> Any:
    return m["ts"]


def _opaque_key(m: dict[str, Any]) -> Any:
    return m["k"] if m else None  # a branch: not followed


def _opaque_ts(m: dict[str, Any]) -> Any:
    return m["ts"] if m else None


def _app(key_fn: Any, event_time: Any, fold: Any, *, late: bool = False) -> StreamApplication:
    app = StreamApplication("fields", config={"job.intermediate.stream.partitions": 3})
    mem = MemorySystem()
    views = app.input(mem.input("views", event_time=event_time))
    out = app.output(mem.output("out"))
    window = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=4), init=lambda: 0,
                                    fold=fold, event_time=lambda kv: kv.value["ts"])
    (views.partition_by(key_fn, name="by-k")
        .window(window, name="w", late_to=app.output(mem.output("late")) if late else None)
        .map(lambda pane: (pane.key.key, pane.key.pane_id, pane.message), name="row")
        .send_to(out))
    return app


def _compiled(spark: Any, app: StreamApplication, path: Path) -> _Compiler:
    desc = app.spec().inputs["views"]
    src = resolve_source(spark, "views", desc, path, 0)
    plan = app.plan(partitions={"views": src.partitions})
    compiled = _Compiler(spark, plan, resolve_partitions(plan), {"views": src}, None)
    compiled.build()
    return compiled


def _streaming(app: StreamApplication, parts: dict[int, list[Any]]) -> Counter[str]:
    runner = TestRunner(app).add_input("views", parts)
    return Counter(repr(m) for m in runner.run(timeout=60).messages("out"))


def _spark(spark: Any, app: StreamApplication, path: Path) -> Counter[str]:
    return Counter(repr(m) for m in SparkRunner(spark).reprocess(app, {"views": path})
                   .messages("out"))


SUM_V = (lambda kv, n: n + kv.value["v"])  # noqa: E731 - reads the field v


@pytest.mark.parametrize("data", ["plain", "null_keys", "int_keys", "int_ts"])
def test_field_reads_make_the_same_panes_from_columns_and_carry_only_what_is_read(
        spark: Any, tmp_path: Path, data: str) -> None:
    opts = {"null_keys": data == "null_keys", "int_keys": data == "int_keys",
            "int_ts": data == "int_ts"}
    parts = {p: _rows(p, 90 + 17 * p, **opts) for p in range(3)}
    path = _write(tmp_path, parts)
    sid = "fields-1-partition_by-by-k"

    fast = _app(_plain_key, _plain_ts, SUM_V)
    compiled = _compiled(spark, fast, path)
    assert compiled.key_fields == {sid: "k"}
    assert compiled.carried_fields == {sid: ["v", "ts"]}  # in the rows' order
    # what crosses the shuffle: the key field as its own type, the fields a column each, the
    # source partition and offset as one number; no stream name, no clock
    schema = compiled.out[sid].df.schema
    assert schema.names == ["p", "sort_ms", "so", "kc", "row__v", "row__ts"]
    assert schema["kc"].dataType.simpleString() == ("bigint" if data == "int_keys" else "string")
    slow = _app(_opaque_key, _opaque_ts, lambda kv, n: n + kv.value["v"] + 0 * len(kv.value))
    compiled = _compiled(spark, slow, path)
    assert compiled.key_fields == {sid: None} and compiled.carried_fields == {sid: None}

    expected = _streaming(_app(_plain_key, _plain_ts, SUM_V), parts)
    assert sum(expected.values()) > 20
    assert _spark(spark, fast, path) == expected
    assert _spark(spark, slow, path) == expected


def test_a_run_says_what_its_carried_pass_read_and_moved(spark: Any, tmp_path: Path) -> None:
    path = _write(tmp_path, {p: _rows(p, 40) for p in range(2)})
    result = SparkRunner(spark).reprocess(_app(_plain_key, _plain_ts, SUM_V), {"views": path})
    text = "read k, v, ts of views; key from column k; carried v, ts"
    assert result.columns == {"stage-0": text}
    assert f"  stage-0: {text}" in result.summary().splitlines()
    every = "user, k, v, ts, tags"
    result = SparkRunner(spark).reprocess(
        _app(_opaque_key, _opaque_ts, lambda kv, n: n + len(kv.value)), {"views": path})
    assert result.columns == {"stage-0": f"read {every} of views; carried {every}"}


def test_declared_fields_and_item_getters_are_read_as_columns(spark: Any, tmp_path: Path) -> None:
    import operator

    parts = {p: _rows(p, 60) for p in range(2)}
    path = _write(tmp_path, parts)
    app = _app(Field("k"), operator.itemgetter("ts"), lambda kv, n: n + 1)
    compiled = _compiled(spark, app, path)
    sid = "fields-1-partition_by-by-k"
    assert compiled.key_fields == {sid: "k"} and compiled.carried_fields == {sid: ["ts"]}
    assert _spark(spark, app, path) == _streaming(_app(Field("k"), operator.itemgetter("ts"),
                                                       lambda kv, n: n + 1), parts)


@pytest.mark.parametrize("reader", ["whole_value", "late_to", "method"])
def test_readers_that_may_read_more_get_every_field(spark: Any, tmp_path: Path,
                                                    reader: str) -> None:
    parts = {p: _rows(p, 50) for p in range(2)}
    path = _write(tmp_path, parts)
    sid = "fields-1-partition_by-by-k"
    if reader == "whole_value":
        fold = (lambda kv, n: n + len(kv.value["tags"]) + len(kv.value))  # noqa: E731
    elif reader == "method":
        fold = (lambda kv, n: n + kv.value.get("nope", 1))  # noqa: E731
    else:
        fold = SUM_V
    app = _app(_plain_key, _plain_ts, fold, late=reader == "late_to")
    compiled = _compiled(spark, app, path)
    assert compiled.carried_fields == {sid: None}
    assert compiled.key_fields == {sid: "k"}  # the key is still read as a column
    assert _spark(spark, app, path) == _streaming(
        _app(_plain_key, _plain_ts, fold, late=reader == "late_to"), parts)


def test_a_row_the_columns_cannot_serve_is_still_named(spark: Any, tmp_path: Path) -> None:
    """A null event time in a row group: that batch takes the rows, and the row is named."""
    parts = {p: _rows(p, 90) for p in range(2)}
    bad = 57  # in part-1's second row group (40 rows each)
    parts[1][bad]["ts"] = None
    path = _write(tmp_path, parts)
    with pytest.raises(Exception) as info:
        SparkRunner(spark).reprocess(_app(_plain_key, _plain_ts, SUM_V), {"views": path})
    msg = str(info.value)
    assert f"row {bad - 40} of " in msg and "part-1.parquet (row group 1 of 3)" in msg, msg
    assert "input 'views'" in msg and "event_time" in msg, msg


def test_a_window_reads_its_keys_and_times_from_columns_where_its_functions_read_fields(
        ) -> None:
    """The window after a carried shuffle takes its keys and event times from the columns
    where its key function reads the message's key and its event-time function a field of the
    value; its fold gets None where it never reads the message."""
    from operators import build_operator
    from operators.base import OperatorContext
    from operators.state import InMemoryState
    from runtime.spark.executor import _column_window
    from samza_dsl.spec import WindowSpec

    def window_op(key_fn: Any, event_time: Any, fold: Any) -> Any:
        w = Windows.keyed_tumbling(key_fn, timedelta(seconds=4), init=lambda: 0, fold=fold,
                                   event_time=event_time)
        op = build_operator(WindowSpec("w", "w", ("stream:in",), "t.py:1", window=w))
        op.init(OperatorContext("task-0", {}, lambda: 0, {"w": InMemoryState()}, None))
        return op

    def ts(kv: Any) -> Any:
        return kv.value["ts"]
    assert _column_window(window_op(lambda kv: kv.key, ts, lambda _kv, n: n + 1)) \
        == ("ts", False)
    assert _column_window(window_op(lambda kv: kv.key, ts, SUM_V)) == ("ts", True)
    assert _column_window(window_op(lambda kv: kv.value["k"], ts, SUM_V)) is None
    assert _column_window(window_op(lambda kv: kv.key, _opaque_ts, SUM_V)) is None


def test_a_null_time_in_the_window_is_named_by_its_operator_and_record(
        spark: Any, tmp_path: Path) -> None:
    """A row whose window time field is null (the input's own time is another field): the
    window's run stops there, and the window's event-time function fails on that message as it
    does on the streaming runtime, named by operator and record."""
    parts = {p: _rows(p, 60) for p in range(2)}
    for p, rows in parts.items():
        for i, row in enumerate(rows):
            row["t2"] = None if (p, i) == (1, 33) else row["ts"]
    path = _write(tmp_path, parts)

    def build() -> StreamApplication:
        app = StreamApplication("fields", config={"job.intermediate.stream.partitions": 3})
        mem = MemorySystem()
        views = app.input(mem.input("views", event_time=_plain_ts))
        window = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=4),
                                        init=lambda: 0, fold=lambda _kv, n: n + 1,
                                        event_time=lambda kv: kv.value["t2"])
        (views.partition_by(_plain_key, name="by-k").window(window, name="w")
            .send_to(app.output(mem.output("out"))))
        return app
    with pytest.raises(Exception) as streaming:
        TestRunner(build()).add_input("views", parts).run(timeout=60)
    with pytest.raises(Exception) as info:
        SparkRunner(spark).reprocess(build(), {"views": path})
    msg = str(info.value)
    assert "'fields-1-window-w'" in msg or "'w'" in msg, msg
    assert "NoneType" in msg and "NoneType" in str(streaming.value), (msg, streaming.value)
    assert "offset" in msg, msg


def test_a_carried_pass_reads_larger_batches_bounded_by_their_bytes(
        spark: Any, tmp_path: Path) -> None:
    """Where a pass keeps the rows as columns it reads up to ``WIDE_BATCH`` rows at once, fewer
    where the row group's columns would hold more than ``READ_BYTES``; every row once, in
    order, each batch with its first row's number."""
    from runtime.spark.shuffle import BATCH
    from runtime.spark.sources import READ_BYTES, WIDE_BATCH

    n = WIDE_BATCH + 1000
    d = tmp_path / "wide.parquet"
    d.mkdir()
    pq.write_table(pa.table({"k": [f"k{i % 7}" for i in range(n)], "ts": list(range(n)),
                             "pad": ["x" * 1000 for _ in range(n)]}),
                   d / "part-0.parquet", row_group_size=n)
    app = _app(_plain_key, _plain_ts, lambda _kv, n: n + 1)
    src = resolve_source(spark, "views", app.spec().inputs["views"], d, 0)
    assert src.arrow_batches is not None
    for columns, most in ((["k", "ts"], WIDE_BATCH), (None, READ_BYTES // 1000)):
        got = list(src.arrow_batches(0, columns, WIDE_BATCH))
        sizes = [b.num_rows for b, _first in got]
        assert sum(sizes) == n and BATCH <= max(sizes) <= most, (columns, sizes)
        assert [first for _b, first in got] == [sum(sizes[:j]) for j in range(len(got))]
        assert pa.concat_arrays([b.column("ts") for b, _ in got]).to_pylist() == list(range(n))
    assert max(b.num_rows for b, _ in src.arrow_batches(0, ["k", "ts"])) == BATCH
