"""A lone ``partition_by`` over Parquet carries its input's rows through the shuffle as columns
(``runtime.spark.runner._Compiler._carry``): the values are never pickled, and the reading pass
rebuilds each message from the columns with the stream's serde. The output equals the streaming
runtime's (TestRunner) over the same rows, for plain rows, typed rows (``JsonSerde(Struct)``)
and rows with nulls and lists; a pass that cannot carry (a value function, a reader of two
streams, a keyed input) takes the pickled path and gives the same output."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runtime.memory import resolve_partitions
from runtime.spark import SparkRunner
from runtime.spark.runner import _Compiler
from runtime.spark.sources import resolve_source
from runtime.testing import TestRunner
from samza_dsl import StreamApplication, Windows
from samza_dsl.serdes import JsonSerde
from samza_dsl.systems import MemorySystem

T0 = 1_700_000_000.0


class View(msgspec.Struct):
    k: str | None
    v: int | None
    ts: float
    tags: list[str]


def _rows(part: int, n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        out.append({"k": None if i % 11 == 3 else f"k{(i * 7 + part) % 5}",
                    "v": None if i % 13 == 5 else i - 4,
                    "ts": T0 + part * 3.5 + i * 0.37,
                    "tags": [f"t{j}" for j in range(i % 3)]})
    return out


def _write(tmp: Path, parts: dict[int, list[dict[str, Any]]]) -> Path:
    d = tmp / "views.parquet"
    d.mkdir()
    for p, rows in parts.items():
        pq.write_table(pa.Table.from_pylist(rows), d / f"part-{p}.parquet", row_group_size=40)
    return d


def _get(m: Any, name: str) -> Any:
    return getattr(m, name) if isinstance(m, msgspec.Struct) else m[name]


def _app(typed: bool, shape: str) -> StreamApplication:
    app = StreamApplication("carry", config={"job.intermediate.stream.partitions": 3})
    mem = MemorySystem()
    serde = JsonSerde(View) if typed else None
    views = app.input(mem.input("views", event_time=lambda m: _get(m, "ts"), serde=serde))
    out = app.output(mem.output("out"))
    if shape == "value_fn":
        keyed = views.partition_by(lambda m: _get(m, "k"), lambda m: m, name="by-k")
    else:
        keyed = views.partition_by(lambda m: _get(m, "k"), name="by-k")
    if shape == "two_streams":
        other = views.partition_by(lambda m: _get(m, "v"), name="by-v")
        keyed = keyed.merge(other)
    (keyed
        .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=4), init=lambda: (),
                                       fold=lambda kv, acc: (*acc, (_get(kv.value, "v"),
                                                                    tuple(_get(kv.value, "tags")),
                                                                    type(kv.value).__name__)),
                                       event_time=lambda kv: _get(kv.value, "ts")), name="w")
        .map(lambda pane: (pane.key.key, pane.key.pane_id, sorted(pane.message, key=repr)),
             name="row")
        .send_to(out))
    return app


def _streaming(app: StreamApplication, parts: dict[int, list[Any]]) -> Counter[Any]:
    runner = TestRunner(app).add_input("views", parts)
    return Counter(repr(m) for m in runner.run(timeout=60).messages("out"))


def _carried(spark: Any, app: StreamApplication, path: Path) -> dict[str, Any]:
    """The streams the compiled job carries as columns."""
    desc = app.spec().inputs["views"]
    src = resolve_source(spark, "views", desc, path, 0)
    plan = app.plan(partitions={"views": src.partitions})
    compiled = _Compiler(spark, plan, resolve_partitions(plan), {"views": src}, None)
    compiled.build()
    return compiled.carried


@pytest.mark.parametrize("typed", [False, True])
@pytest.mark.parametrize("shape", ["lone", "value_fn", "two_streams"])
def test_a_lone_partition_by_carries_its_rows_and_gives_the_streaming_output(
        spark: Any, tmp_path: Path, typed: bool, shape: str) -> None:
    parts = {p: _rows(p, 90 + 17 * p) for p in range(3)}
    path = _write(tmp_path, parts)
    carried = _carried(spark, _app(typed, shape), path)
    assert [sid.rsplit("-", 1)[-1] for sid in carried] == (["k"] if shape == "lone" else [])
    given = {p: [msgspec.convert(r, View) if typed else r for r in rows]
             for p, rows in parts.items()}
    expected = _streaming(_app(typed, shape), given)
    got = SparkRunner(spark).reprocess(_app(typed, shape), {"views": path}).messages("out")
    assert Counter(repr(m) for m in got) == expected
    assert sum(len(m[2]) for m in got) == sum(len(r) for r in parts.values()) * (
        2 if shape == "two_streams" else 1)


def test_a_failing_key_function_of_a_carried_partition_by_names_operator_file_and_row(
        spark: Any, tmp_path: Path) -> None:
    """The carried pass runs the key function over a batch at once; a key function that fails
    still names the operator, the stream and the row, and the counts of a run that works are
    every row's."""
    parts = {p: _rows(p, 90) for p in range(2)}
    path = _write(tmp_path, parts)
    bad_row = 57  # in partition 1's file: past its first row group (40 rows)

    def key(m: dict[str, Any]) -> Any:
        if m["ts"] == parts[1][bad_row]["ts"]:
            raise KeyError("no key here")
        return m["k"]

    def build(key_fn: Any) -> StreamApplication:
        app = StreamApplication("carry-fails", config={"job.intermediate.stream.partitions": 3})
        mem = MemorySystem()
        views = app.input(mem.input("views", event_time=lambda m: m["ts"]))
        (views.partition_by(key_fn, name="by-k")
            .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=4),
                                           init=lambda: 0, fold=lambda kv, n: n + 1,
                                           event_time=lambda kv: kv.value["ts"]), name="w")
            .send_to(app.output(mem.output("out"))))
        return app

    assert list(_carried(spark, build(key), path)) == ["carry-fails-1-partition_by-by-k"]
    with pytest.raises(Exception) as info:
        SparkRunner(spark).reprocess(build(key), {"views": path})
    msg = str(info.value)
    assert "operator 'carry-fails-1-partition_by-by-k'" in msg and "stream 'views'" in msg, msg
    # rows are counted within their row group (a source partition of their own)
    assert f"part-1.parquet (row group 1 of 3), row {bad_row - 40}" in msg, msg
    assert "KeyError" in msg and "no key here" in msg, msg

    result = SparkRunner(spark).reprocess(build(lambda m: m["k"]), {"views": path})
    counts = result.operators["carry-fails-1-partition_by-by-k"]
    assert counts["messages-in"] == counts["messages-out"] == 180
    assert sum(pane.message for pane in result.messages("out")) == 180
