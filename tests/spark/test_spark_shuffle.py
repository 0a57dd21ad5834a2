"""The general tier's shuffle (``runtime.spark.shuffle``): task partition ``p`` lands in Spark
partition ``p`` by Spark's own hash, each partition sorted in the JVM; the executor fed batch by
batch gives what it gives fed at once; and a job runs under ``spark.executor.pyspark.memory``
smaller than the data of its task partition (no Python process holds a partition)."""

from __future__ import annotations

import datetime as dt
import functools
import os
import pickle
import random
import subprocess
import sys
import textwrap
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runtime.memory import resolve_partitions
from runtime.spark import ReprocessError, SparkRunner
from runtime.spark.executor import PassExecutor
from runtime.spark.meter import IN, OUT, PANES
from runtime.spark.shuffle import (
    COLUMNS,
    ORDER,
    SCHEMA,
    ShuffleCodec,
    encode,
    landing_keys,
    shuffle,
    spark_hash_int,
)
from runtime.testing import TestRunner
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.jobconfig import JobConfig
from samza_dsl.serdes import KVSerde, SafeSerde, Serde
from samza_dsl.systems import MemorySystem
from samza_dsl.windows import AccumulationMode, FiringType, WindowKey, WindowPane

REPO = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "samza-dsl"


def test_spark_hash_int_is_the_hash_spark_partitions_by(spark: Any) -> None:
    values = [*range(-300, 300), 2**31 - 1, -(2**31), 123_456_789, -987_654_321]
    df = spark.createDataFrame([(v,) for v in values], "v int")
    got = {r[0]: r[1] for r in df.selectExpr("v", "hash(v)").collect()}
    assert {v: spark_hash_int(v) for v in values} == got


@pytest.mark.parametrize("n", [1, 3, 8])
def test_each_task_partition_lands_in_its_spark_partition_sorted(spark: Any, n: int) -> None:
    rng = random.Random(n)
    items = [(rng.randrange(n), ("s" + str(rng.randrange(2)), rng.randrange(50), rng.randrange(4),
                                 i, 0, {"i": i})) for i in range(600)]
    codec = ShuffleCodec(_window_app().plan(partitions={"views": 1}))
    rows = spark.createDataFrame(spark.sparkContext.parallelize(items, 5).mapPartitions(
        functools.partial(encode, codec)), SCHEMA)
    placed = shuffle(spark, rows, n, ORDER).rdd.mapPartitionsWithIndex(
        lambda i, it: [(i, tuple(r)) for r in it]).collect()
    assert len(placed) == len(items)
    assert all(i == row[0] for i, row in placed), "a row outside its task partition"
    assert len(landing_keys(n)) == n
    key = [COLUMNS.index(c) for c in ORDER]
    for p in range(n):
        mine = [row for i, row in placed if i == p]
        assert mine == sorted(mine, key=lambda r: [r[k] for k in key])
        assert len(mine) == sum(1 for q, _ in items if q == p)


def _window_app() -> StreamApplication:
    mem = MemorySystem()
    app = StreamApplication("fed", config={"job.intermediate.stream.partitions": 1})
    (app.input(mem.input("views", event_time=lambda m: m["ts"]))
     .partition_by(lambda m: m["k"], name="by-k")
     .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                                    fold=lambda kv, n: n + 1,
                                    event_time=lambda kv: kv.value["ts"]), name="w")
     .map(lambda pane: (pane.key.key, pane.key.pane_id, pane.message), name="row")
     .send_to(app.output(mem.output("counts"))))
    return app


class Point:
    """A plain class: neither SafeSerde nor msgspec can write it; ``PointSerde`` can."""

    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)

    def __hash__(self) -> int:
        return hash((self.x, self.y))


class PointSerde(Serde[Point]):
    def serialize(self, obj: Point) -> bytes:
        return f"{obj.x},{obj.y}".encode()

    def deserialize(self, data: bytes) -> Point:
        x, y = data.decode().split(",")
        return Point(int(x), int(y))


def _point_app(serde: Any) -> StreamApplication:
    mem = MemorySystem()
    app = StreamApplication("points", config={"job.intermediate.stream.partitions": 2})
    (app.input(mem.input("raw"))
     .map(lambda m: Point(m["x"], m["y"]), name="point")
     .partition_by(lambda p: p.x % 3, name="by-x", serde=serde)
     .map(lambda kv: (kv.key, kv.value.x, kv.value.y), name="row")
     .send_to(app.output(mem.output("out"))))
    return app


class _Boom:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(_Boom.target),))

    target = Path()


def test_the_shuffle_writes_data_never_code(tmp_path: Path) -> None:
    app = _point_app(KVSerde(SafeSerde(), PointSerde()))
    codec = ShuffleCodec(app.plan(partitions={"raw": 1}))
    sid = "points-1-partition_by-by-x"
    values = [KV(("a", 1), (1, 2.5, None)), {"s": {1, 2}, "t": (dt.date(2026, 1, 2),)},
              WindowPane(WindowKey("k", "0"), [KV("k", (1,))], FiringType.DEFAULT,
                         AccumulationMode.ACCUMULATING), "x", 2**70, KV("k", Point(1, 2))]
    dump, load = codec.dumper(), codec.loader()
    for v in values:
        k, m = dump(sid, v)
        assert not m.startswith(b"\x80") and (k is None or not k.startswith(b"\x80"))
        assert load(sid, k, m) == v
    # a pickle that would make a directory when loaded is refused as bytes, not run
    _Boom.target = tmp_path / "ran"
    evil = pickle.dumps(_Boom())
    for k, m in ((None, evil), (evil, None), (b"\xa1k", evil)):
        with pytest.raises(Exception):  # noqa: B017, PT011 - any refusal, as long as it runs nothing
            load(sid, k, m)
    assert not _Boom.target.exists()


def test_a_message_no_serde_can_write_fails_naming_the_stream(spark: Any) -> None:
    rows = [{"x": i, "y": -i} for i in range(12)]
    with pytest.raises(ReprocessError, match=r"stream 'points-1-partition_by-by-x'.*Point.*"
                                             r"declare"):
        SparkRunner(spark).reprocess(_point_app(None), {"raw": rows})
    # the stream's own serde writes what SafeSerde cannot, and the output is the streaming one
    own = KVSerde(SafeSerde(), PointSerde())
    got = SparkRunner(spark).reprocess(_point_app(own), {"raw": rows}).messages("out")
    streaming = TestRunner(_point_app(own)).add_input("raw", {0: rows}).run().messages("out")
    assert Counter(got) == Counter(streaming) and len(got) == len(rows)


def test_fed_in_batches_the_executor_writes_what_it_writes_fed_at_once() -> None:
    app = _window_app()
    plan = app.plan(partitions={"views": 1})
    counts = resolve_partitions(plan)
    stage = next(s for s in plan.stages if "views" not in s.inputs)
    sid = stage.inputs[0]
    from samza_dsl import KV

    records = [(sid, 1000 * i, 0, i, 1000 * i, KV(f"k{i % 3}", {"k": f"k{i % 3}", "ts": i * 1.0}))
               for i in range(100)]

    def executor() -> PassExecutor:
        return PassExecutor(plan, [stage.stage_id], 0, counts, plan.config)

    at_once = executor().run(records)
    ex = executor()
    fed = []
    for i in range(0, len(records), 7):
        fed.extend(ex.feed(records[i:i + 7]))
    fed.extend(ex.finish())
    assert fed == at_once
    assert len(at_once) == 3 * 10  # every (key, 10 s pane) of 100 s
    assert sum(rec[5][2] for _, rec in at_once) == 100


def test_the_end_of_the_stream_is_given_in_chunks_in_the_same_order() -> None:
    """``finish_chunks`` makes a window's panes and passes them on a chunk at a time: no list
    holds every pane of the task, and the records are ``finish``'s, in its order, metered
    alike."""
    app = _window_app()
    plan = app.plan(partitions={"views": 1})
    counts = resolve_partitions(plan)
    stage = next(s for s in plan.stages if "views" not in s.inputs)
    sid = stage.inputs[0]
    from samza_dsl import KV

    records = [(sid, 10 * i, 0, i, 10 * i, KV(f"k{i % 997}", {"k": f"k{i % 997}", "ts": i / 100}))
               for i in range(5000)]  # 50 s of event time

    def executor() -> PassExecutor:
        ex = PassExecutor(plan, [stage.stage_id], 0, counts, plan.config)
        ex.feed(records)
        return ex

    whole, chunked = executor(), executor()
    at_once = whole.finish()
    chunks = list(chunked.finish_chunks(100))
    assert [r for c in chunks for r in c] == at_once
    assert len(at_once) > 900  # the open panes, every key's
    assert len(chunks) >= len(at_once) // 100 and max(map(len, chunks)) <= 200
    def counted(ex: PassExecutor) -> dict[str, tuple[int, int, int]]:
        return {op: (m[IN], m[OUT], m[PANES]) for op, m in ex.meters.items()}
    assert counted(whole) == counted(chunked)


@pytest.mark.parametrize("batch", [1, 7, 1000])
def test_runs_into_a_window_write_what_records_one_by_one_write(batch: int) -> None:
    """A window that is its pass's only entry takes runs of records in one call
    (``Operator.process_run``); window ticks make the executor hand them one by one. The
    records written are the same, with the times they are stamped with (a pane fired at the
    end of the stream: the last record's; one fired by a record: that record's)."""
    app = _window_app()
    plan = app.plan(partitions={"views": 1})
    counts = resolve_partitions(plan)
    stage = next(s for s in plan.stages if "views" not in s.inputs)
    sid = stage.inputs[0]
    from samza_dsl import KV

    times = [i * 0.7 for i in range(120)]
    times[50:53] = reversed(times[50:53])  # disorder inside a pane
    times[80] = 20.0  # a late record: its pane closed
    records = [(sid, round(t * 1000), i % 2, i, 5 * i, KV(f"k{i % 3}", {"k": f"k{i % 3}",
                                                                      "ts": t}))
               for i, t in enumerate(times)]

    def fed(config: dict[str, Any]) -> tuple[list[Any], list[int]]:
        ex = PassExecutor(plan, [stage.stage_id], 0, counts,
                          JobConfig.validated({**plan.config, **config}))
        out = []
        for i in range(0, len(records), batch):
            out.extend(ex.feed(records[i:i + batch]))
        out.extend(ex.finish())
        return out, ex.meters[next(o for o in ex.operators if "window" in o)][:2]

    runs, one_by_one = fed({}), fed({"task.window.ms": 3_600_000})
    assert runs == one_by_one
    written, (messages_in, _) = runs
    assert messages_in == 120
    assert {rec[1] for _, rec in written} > {records[-1][1]}  # some fired by records


_PADDED = '''
"""Padded documents: their bytes per key and 10 s of event time, after a repartition into one
partition, so one task partition holds every document."""
from datetime import timedelta

from samza_dsl import StreamApplication, Windows
from samza_dsl.serdes import JsonSerde
from samza_dsl.systems import MemorySystem


def doc_time(d):
    return d["ts"]


def doc_key(d):
    return d["k"]


def kv_key(kv):
    return kv.key


def kv_time(kv):
    return kv.value["ts"]


def zero():
    return 0


def add(kv, n):
    return n + len(kv.value["pad"])


def row(pane):
    return {"k": pane.key.key, "start": pane.key.pane_id, "bytes": pane.message}


mem = MemorySystem()
app = StreamApplication("padded", config={"job.intermediate.stream.partitions": 1})
(app.input(mem.input("docs", serde=JsonSerde(), event_time=doc_time))
 .partition_by(doc_key, name="by-key")
 .window(Windows.keyed_tumbling(kv_key, timedelta(seconds=10), init=zero, fold=add, event_time=kv_time),
         name="bytes")
 .map(row, name="row")
 .send_to(app.output(mem.output("sizes"))))
'''


def test_a_task_partition_larger_than_the_python_workers_memory(tmp_path: Path) -> None:
    """560 MB of documents in one task partition, Python workers limited to 500 MB of address
    space: each worker holds a batch at a time (it failed with MemoryError while a pass held
    its partition in a list)."""
    limit_mb, rows, pad = 500, 140_000, 4000
    assert rows * pad > limit_mb * 1024 * 1024
    (tmp_path / "padded.py").write_text(textwrap.dedent(_PADDED))
    table = pa.table({"k": [f"k{i % 10}" for i in range(rows)],
                      "ts": [1_700_000_000 + i * 0.01 for i in range(rows)],
                      "pad": [f"{i:08d}" * (pad // 8) for i in range(rows)]})
    pq.write_table(table, tmp_path / "docs.parquet", row_group_size=5000)
    del table
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([str(CLI), "reprocess", "padded.py:app", "--no-progress",
                           "--input", "docs=docs.parquet", "--output", "sizes=sizes.jsonl",
                           "--conf", f"spark.executor.pyspark.memory={limit_mb}m"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    written = [json.loads(line) for f in sorted((tmp_path / "sizes.jsonl").iterdir())
               if f.name.startswith("part-") for line in f.read_text().splitlines()]
    expected: Counter[tuple[str, int]] = Counter()
    for i in range(rows):
        start = int(round((1_700_000_000 + i * 0.01) * 1000)) // 10_000 * 10_000
        expected[(f"k{i % 10}", start)] += pad
    assert Counter({(w["k"], int(w["start"])): w["bytes"] for w in written}) == expected
    assert len(written) == len(expected)
