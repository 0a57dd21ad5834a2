"""SparkRunner on real PySpark (local[2]): inputs, outputs, semantics against TestRunner, and
errors that name the stream, the operator and the file."""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark_apps import View

from runtime.spark import FileInput, ReprocessError, SourceError, SparkRunner
from runtime.testing import TestRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import PlanError, SamzaError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem
from samza_dsl.windows import FiringType, Windows

T0 = 1_700_000_000.0


def views(n: int, partitions: int = 2) -> dict[int, list[dict[str, Any]]]:
    return {p: [{"user": f"u{i % 7}", "country": f"c{(i * 3 + p) % 5}", "ts": T0 + i * 0.9 + p}
                for i in range(n)] for p in range(partitions)}


def counts_app(event_time: bool = True, **config: Any) -> StreamApplication:
    app = StreamApplication("pv", config={"job.intermediate.stream.partitions": 3, **config})
    mem = MemorySystem()
    inp = mem.input("views", event_time=(lambda m: m["ts"]) if event_time else None)
    w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                               fold=lambda kv, n: n + 1, event_time=lambda kv: kv.value["ts"])
    (app.input(inp).filter(lambda m: m["user"] != "u0", name="not-u0")
     .partition_by(lambda m: m["country"], name="by-country")
     .window(w, name="w")
     .map(lambda p: {"country": p.key.key, "start": p.key.pane_id, "n": p.message}, name="row")
     .send_to(app.output(mem.output("counts"))))
    return app


def rows(result: list[dict[str, Any]]) -> Counter[str]:
    return Counter(json.dumps(r, sort_keys=True) for r in result)


def write_jsonl(path: Path, items: list[Any]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in items))
    return path


def read_jsonl_dir(path: Path) -> list[Any]:
    out = []
    for f in sorted(path.iterdir()):
        if f.name.startswith(("_", ".")):
            continue
        out.extend(json.loads(line) for line in f.read_text().splitlines() if line.strip())
    return out


# -- semantics --------------------------------------------------------------------------------------

def test_windowed_counts_equal_the_test_runner(spark: Any) -> None:
    parts = views(150, partitions=3)
    expected = TestRunner(counts_app()).add_input("views", parts).run().messages("counts")
    result = SparkRunner(spark).reprocess(counts_app(), {"views": parts})
    assert rows(result.messages("counts")) == rows(expected)
    assert result.rows_in == {"views": 450}
    assert result.rows_out["counts"] == len(expected)
    # every view but u0's crossed the intermediate stream, into its planned 3 partitions
    assert result.rows_out["pv-1-partition_by-by-country"] == sum(
        1 for msgs in parts.values() for m in msgs if m["user"] != "u0")
    assert result.plan.streams["pv-1-partition_by-by-country"].partitions == 3
    assert "counts" in result.summary() and "450" in result.summary()


def fragile_counts_app(fail: str | None, **config: Any) -> StreamApplication:
    """``counts_app``'s shape whose fold fails on view 37 (``fail="fold"``), or whose map
    after the window fails on the pane of c2 that starts at T0 + 20 s (``fail="map"``)."""
    app = StreamApplication("fragile-w", config={"job.intermediate.stream.partitions": 2,
                                                 **config})
    mem = MemorySystem()

    def fold(kv: KV[str, Any], n: int) -> int:
        if fail == "fold" and kv.value["i"] == 37:
            raise ValueError("bad view 37")
        return n + 1

    def row(p: Any) -> tuple[str, str, int]:
        if fail == "map" and (p.key.key, p.key.pane_id) == ("c2", str(int(T0 * 1000) + 20_000)):
            raise ValueError("bad pane")
        return (p.key.key, p.key.pane_id, p.message)
    w = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int, fold=fold,
                               event_time=lambda kv: kv.value["ts"])
    (app.input(mem.input("views", event_time=lambda m: m["ts"]))
     .partition_by(lambda m: m["country"], name="by-country")
     .window(w, name="w")
     .map(row, name="row")
     .send_to(app.output(mem.output("counts"))))
    return app


@pytest.mark.parametrize("fail", [None, "fold", "map"])
def test_a_window_fed_runs_of_records_equals_one_by_one(spark: Any, fail: str | None) -> None:
    """A window that is a pass's only entry takes runs of records in one call; with window
    ticks (``task.window.ms``) it takes them one by one. Both give the same panes, and a
    failing fold or a failing operator after the window names the same record."""
    data = {p: [{"country": f"c{i % 3}", "ts": T0 + i * 0.7 + p * 0.3, "i": i}
                for i in range(100)] for p in range(2)}
    data[1][40:43] = reversed(data[1][40:43])  # some disorder

    def run(**config: Any) -> Any:
        app = fragile_counts_app(fail, **config)
        if fail is None:
            return sorted(SparkRunner(spark).reprocess(app, {"views": data}).messages("counts"))
        with pytest.raises(ReprocessError) as info:
            SparkRunner(spark).reprocess(app, {"views": data})
        return str(info.value)

    runs, one_by_one = run(), run(**{"task.window.ms": 60_000})
    assert runs == one_by_one
    if fail is None:
        assert sum(n for _, _, n in runs) == 200
    else:
        op = "window-w" if fail == "fold" else "map-row"
        assert f"operator 'fragile-w-1-{op}' failed on stream 'fragile-w-1-partition_by" in runs
        assert f"ValueError: bad {'view 37' if fail == 'fold' else 'pane'}" in runs
        assert "offset" in runs and "fix the function" in runs


def test_narrow_operators_and_async_calls_equal_the_test_runner(spark: Any) -> None:
    def build() -> StreamApplication:
        app = StreamApplication("narrow", config={"task.max.concurrency": 8})
        mem = MemorySystem()

        async def lookup(m: int) -> list[int]:
            await asyncio.sleep(0.001 * (m % 3))
            return [m * 10] if m % 4 else []

        (app.input(mem.input("nums")).map(lambda m: m + 1, name="inc")
         .filter(lambda m: m % 5 != 0, name="no-fives")
         .flat_map(lambda m: [m] * (m % 3), name="rep")
         .async_flat_map(lookup, name="lookup")
         .send_to(app.output(mem.output("out"))))
        return app

    parts = {p: list(range(p * 100, p * 100 + 60)) for p in range(3)}
    expected = TestRunner(build()).add_input("nums", parts).run().messages("out")
    got = SparkRunner(spark).reprocess(build(), {"nums": parts}).messages("out")
    assert Counter(got) == Counter(expected) and expected


def test_table_join_reads_what_earlier_records_wrote(spark: Any) -> None:
    """A table filled from one input and read by another, co-partitioned by key: Spark
    orders both by time, so a lookup sees every profile written before it."""
    app = StreamApplication("enrich")
    mem = MemorySystem()
    kv = KVSerde(StringSerde(), JsonSerde())
    profiles = mem.input("profiles", serde=kv, event_time=lambda m: m.value["ts"])
    clicks = mem.input("clicks", serde=kv, event_time=lambda m: m.value["ts"])
    table = app.table("profile", serde=kv)
    app.input(profiles).send_to(table)
    (app.input(clicks).join_table(table, combine=lambda m, rec: KV(
        m.key, {"page": m.value["page"], "name": rec.value["name"] if rec else None}),
        name="with-profile")
     .send_to(app.output(mem.output("enriched", serde=kv))))
    users = [f"user{i}" for i in range(8)]
    prof = [KV(u, {"name": u.upper(), "ts": 100.0 + i}) for i, u in enumerate(users)]
    # each user clicks once before and once after its profile arrives
    clk = [KV(u, {"page": "early", "ts": 99.0 + i}) for i, u in enumerate(users)] + \
          [KV(u, {"page": "late", "ts": 200.0 + i}) for i, u in enumerate(users)]
    out = SparkRunner(spark).reprocess(app, {"profiles": prof, "clicks": clk}).messages("enriched")
    assert sorted((m.key, m.value["page"], m.value["name"]) for m in out) == sorted(
        [(u, "early", None) for u in users] + [(u, "late", u.upper()) for u in users])


def test_processing_time_window_uses_the_timestamp_column(spark: Any, tmp_path: Path) -> None:
    app = StreamApplication("clocked")
    mem = MemorySystem()
    w = Windows.tumbling(timedelta(minutes=1), init=int, fold=lambda m, n: n + 1)
    app.input(mem.input("events")).window(w, name="per-minute").send_to(
        app.output(mem.output("panes")))
    # 3 events in minute 0, 2 in minute 5: the record timestamps (ms) are the clock
    events = [{"id": i, "at": t} for i, t in enumerate([1_000, 20_000, 59_999, 300_000, 301_000])]
    path = write_jsonl(tmp_path / "events.jsonl", events)
    panes = SparkRunner(spark).reprocess(
        app, {"events": FileInput(path, timestamp="at")}).messages("panes")
    assert sorted((p.key.pane_id, p.message) for p in panes) == [("0", 3), ("300000", 2)]
    assert all(p.firing is FiringType.DEFAULT for p in panes)


def test_broadcast_reaches_every_task(spark: Any) -> None:
    app = StreamApplication("bc", config={"job.intermediate.stream.partitions": 3})
    mem = MemorySystem()
    kv = KVSerde(StringSerde(), JsonSerde())
    rules = app.input(mem.input("rules")).broadcast(name="rules-bc")
    events = app.input(mem.input("events", serde=kv)).partition_by(
        lambda m: m.key, lambda m: m.value, name="by-key")
    rules.merge(events).map(lambda m: m if isinstance(m, KV) else KV("rule", m), name="tag") \
        .send_to(app.output(mem.output("seen", serde=kv)))
    result = SparkRunner(spark).reprocess(
        app, {"rules": ["r1", "r2"], "events": [KV(f"k{i}", i) for i in range(9)]})
    seen = result.messages("seen")
    # each of the 3 tasks read both rules
    assert Counter(m.value for m in seen if m.key == "rule") == {"r1": 3, "r2": 3}
    assert sorted(m.value for m in seen if m.key != "rule") == list(range(9))


def broadcast_count_app(elasticity: int) -> StreamApplication:
    """Each message of a 3-partition input, broadcast: every task (each virtual task) reads
    all of them."""
    app = StreamApplication("bcx", config={"job.elasticity.factor": elasticity})
    mem = MemorySystem()
    kv = KVSerde(StringSerde(), JsonSerde())
    app.input(mem.input("events", serde=kv, partitions=3)).broadcast(serde=kv, name="all") \
        .send_to(app.output(mem.output("seen", serde=kv, partitions=1)))
    return app


def test_a_broadcast_stream_reaches_every_task_of_the_job_and_every_virtual_task(
        spark: Any) -> None:
    """Found by the reference model: a pass reading only a broadcast stream ran in one task
    partition (the broadcast stream's one), not in each of the job's tasks (3 here, the widest
    input's partitions: rules 2 and 11), nor in each virtual task (rule 18)."""
    events = {p: [KV(f"k{p}", p)] for p in range(3)}
    for x in (1, 2):
        app = broadcast_count_app(x)
        spark_seen = SparkRunner(spark).reprocess(app, {"events": events}).messages("seen")
        streamed = TestRunner(broadcast_count_app(x)).add_input("events", events).run()
        assert Counter(m.value for m in spark_seen) == {0: 3 * x, 1: 3 * x, 2: 3 * x}
        assert Counter(m.value for m in streamed.messages("seen")) == \
            Counter(m.value for m in spark_seen)


def test_virtual_tasks_reading_a_broadcast_and_a_partitioned_stream_are_refused(
        spark: Any) -> None:
    """Each virtual task reads the broadcast stream whole and one key bucket of the other:
    Spark, which does not split a task by key, refuses it before it runs, in one line."""
    app = StreamApplication("bcm", config={"job.elasticity.factor": 2})
    mem = MemorySystem()
    kv = KVSerde(StringSerde(), JsonSerde())
    rules = app.input(mem.input("rules", serde=kv)).broadcast(serde=kv, name="rules-bc")
    rules.merge(app.input(mem.input("events", serde=kv))) \
        .send_to(app.output(mem.output("seen", serde=kv)))
    with pytest.raises(PlanError, match=r"job.elasticity.factor=2.*'bcm-1-broadcast-rules-bc'"
                                        r".*'events'.*job.elasticity.factor=1") as e:
        SparkRunner(spark).reprocess(app, {"rules": [KV("r", 1)], "events": [KV("k", 2)]})
    assert "\n" not in str(e.value)


# -- files in and out ---------------------------------------------------------------------------

def in_time_order(n: int) -> list[dict[str, Any]]:
    """The views of two partitions in one list, in event-time order (parity holds for input in
    event-time order: docs/semantics.md, "Event time and watermarks")."""
    return sorted((m for msgs in views(n, 2).values() for m in msgs), key=lambda m: m["ts"])


def test_jsonl_in_and_out_and_a_rerun_replaces(spark: Any, tmp_path: Path) -> None:
    data = in_time_order(80)
    inp = tmp_path / "in"
    inp.mkdir()
    write_jsonl(inp / "a.jsonl", data[:90])
    write_jsonl(inp / "b.jsonl", data[90:])
    out = tmp_path / "counts.jsonl"
    runner = SparkRunner(spark)
    first = runner.reprocess(counts_app(), {"views": str(inp)}, outputs={"counts": str(out)})
    written = read_jsonl_dir(out)
    expected = TestRunner(counts_app()).add_input(
        "views", {0: data[:90], 1: data[90:]}).run().messages("counts")
    assert rows(written) == rows(expected)
    assert first.rows_out["counts"] == len(written) and first.rows_in == {"views": 160}
    assert rows(first.messages("counts")) == rows(expected)  # read back from the files
    # a rerun over less input replaces the output, leaving nothing of the first run behind
    write_jsonl(inp / "b.jsonl", [])
    runner.reprocess(counts_app(), {"views": str(inp)}, outputs={"counts": str(out)})
    expected = TestRunner(counts_app()).add_input("views", {0: data[:90]}).run().messages("counts")
    assert rows(read_jsonl_dir(out)) == rows(expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["counts.jsonl", "in"]


def test_parquet_in_and_out(spark: Any, tmp_path: Path) -> None:
    data = in_time_order(100)
    src = tmp_path / "views.parquet"
    src.mkdir()
    pq.write_table(pa.Table.from_pylist(data[:120]), src / "part-0.parquet", row_group_size=50)
    pq.write_table(pa.Table.from_pylist(data[120:]), src / "part-1.parquet")
    out = tmp_path / "counts.parquet"
    result = SparkRunner(spark).reprocess(counts_app(), {"views": str(src)},
                                          outputs={"counts": str(out)})
    got = pq.read_table(out).to_pylist()
    expected = TestRunner(counts_app()).add_input("views", {0: data}).run().messages("counts")
    assert rows(got) == rows(expected)
    assert result.rows_in == {"views": 200}


def test_dataframe_input_with_keyed_rows(spark: Any) -> None:
    app = StreamApplication("df")
    mem = MemorySystem()
    kv = KVSerde(StringSerde(), JsonSerde())
    app.input(mem.input("in", serde=kv)).map(lambda m: KV(m.key, m.value * 2), name="double") \
        .send_to(app.output(mem.output("out", serde=kv)))
    df = spark.createDataFrame([(f"k{i}", i) for i in range(20)], ["key", "value"])
    out = SparkRunner(spark).reprocess(app, {"in": df}).messages("out")
    assert sorted((m.key, m.value) for m in out) == sorted((f"k{i}", 2 * i) for i in range(20))


# -- bad input --------------------------------------------------------------------------------------

def test_a_missing_input_path_names_the_stream_and_path(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"input 'views': .*nowhere\.jsonl does not exist"):
        SparkRunner(spark).reprocess(counts_app(), {"views": str(tmp_path / "nowhere.jsonl")})


def test_an_unknown_stream_id_names_the_streams_there_are(spark: Any) -> None:
    with pytest.raises(SamzaError, match=r"'clicks' is not an input stream of application "
                                         r"'pv'; its inputs: views"):
        SparkRunner(spark).reprocess(counts_app(), {"clicks": [], "views": []})
    with pytest.raises(SamzaError, match=r"'nope' is not an output stream .* outputs: counts"):
        SparkRunner(spark).reprocess(counts_app(), {"views": []}, outputs={"nope": "x"})
    with pytest.raises(SamzaError, match=r"no input was given for it"):
        SparkRunner(spark).reprocess(counts_app(), {})


def test_rows_that_do_not_fit_the_serde_name_stream_file_and_row(spark: Any,
                                                                   tmp_path: Path) -> None:
    app = StreamApplication("typed")
    mem = MemorySystem()
    app.input(mem.input("views", serde=JsonSerde(View))).map(lambda v: v.user, name="user") \
        .send_to(app.output(mem.output("users")))
    path = write_jsonl(tmp_path / "views.jsonl",
                       [{"user": "a", "ts": 1.0}, {"user": "b"}, {"user": "c", "ts": 3.0}])
    with pytest.raises(ReprocessError) as info:
        SparkRunner(spark).reprocess(app, {"views": str(path)})
    msg = str(info.value)
    assert "input 'views'" in msg and "views.jsonl" in msg and "row 1" in msg
    assert "ts" in msg  # what is missing
    path.write_text('{"user": "a", "ts": 1.0}\nnot json\n')
    with pytest.raises(ReprocessError, match=r"line 2 of .*views\.jsonl is not JSON"):
        SparkRunner(spark).reprocess(app, {"views": str(path)})
    # the depth limit of samza-dsl load and run, and a lone surrogate named as such
    deep = "[" * 200 + "]" * 200
    path.write_text(f'{{"user": "a", "ts": 1.0}}\n{{"user": "b", "ts": 2.0, "x": {deep}}}\n')
    with pytest.raises(ReprocessError, match=r"line 2 of .*views\.jsonl is a message nested 201 "
                                             r"levels deep .* more than the 200 levels"):
        SparkRunner(spark).reprocess(app, {"views": str(path)})
    path.write_text('{"user": "a\\ud800", "ts": 1.0}\n')
    with pytest.raises(ReprocessError, match=r"line 1 of .*views\.jsonl is not JSON \(a lone "
                                             r"UTF-16 surrogate \\ud800 at byte 12"):
        SparkRunner(spark).reprocess(app, {"views": str(path)})
    kv = KVSerde(StringSerde(), JsonSerde())
    keyed = StreamApplication("keyed")
    keyed.input(mem.input("kin", serde=kv)).send_to(keyed.output(mem.output("kout", serde=kv)))
    bad = write_jsonl(tmp_path / "kin.jsonl", [{"k": 1}])
    with pytest.raises(ReprocessError, match=r"'kin' is keyed .* needs 'key' and 'value'"):
        SparkRunner(spark).reprocess(keyed, {"kin": str(bad)})


def test_a_failing_user_function_names_operator_stream_and_file_and_writes_nothing(
        spark: Any, tmp_path: Path) -> None:
    def build(fail_on: str | None) -> StreamApplication:
        app = StreamApplication("fragile")
        mem = MemorySystem()

        def check(m: dict[str, Any]) -> dict[str, Any]:
            if m["user"] == fail_on:
                raise ValueError(f"bad user {m['user']}")
            return m
        app.input(mem.input("views")).map(check, name="check").send_to(
            app.output(mem.output("out")))
        return app

    path = write_jsonl(tmp_path / "views.jsonl", [{"user": f"u{i}"} for i in range(10)])
    out = tmp_path / "out.jsonl"
    runner = SparkRunner(spark)
    runner.reprocess(build(None), {"views": str(path)}, outputs={"out": str(out)})
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(ReprocessError) as info:
        runner.reprocess(build("u7"), {"views": str(path)}, outputs={"out": str(out)})
    msg = str(info.value)
    assert "operator 'fragile-1-map-check'" in msg and "stream 'views'" in msg
    assert "views.jsonl, row 7" in msg and "ValueError: bad user u7" in msg
    # the failed run left the previous output as it was, and no temporary directory
    assert sorted(p.name for p in out.iterdir()) == before
    assert len(read_jsonl_dir(out)) == 10
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl", "views.jsonl"]


def test_an_async_call_that_hangs_fails_within_the_callback_timeout(spark: Any) -> None:
    app = StreamApplication("hangs", config={"task.callback.timeout.ms": 300,
                                             "task.max.concurrency": 4})
    mem = MemorySystem()

    async def call(m: int) -> list[int]:
        if m == 5:
            await asyncio.sleep(3600)
        return [m]

    app.input(mem.input("in")).async_flat_map(call, name="call").send_to(
        app.output(mem.output("out")))
    with pytest.raises(ReprocessError, match=r"operator 'hangs-1-async_flat_map-call': an async "
                                             r"call on stream 'in' \(partition 0, row 5\) did "
                                             r"not complete within task.callback.timeout.ms=300"
                                             r".*, waiting in .*call\(\) at .*"
                                             r"test_spark_runner\.py:\d+;"):
        SparkRunner(spark).reprocess(app, {"in": list(range(10))})


def test_an_input_declaring_more_partitions_than_files_is_placed_by_key(
        spark: Any, tmp_path: Path) -> None:
    """One file, an input of 3 partitions: each keyed row goes to its key's partition (murmur2,
    as a Kafka producer would have written it), where a keyed window counts it."""
    from operators.hashing import partition_for

    def build() -> StreamApplication:
        app = StreamApplication("declared")
        mem = MemorySystem()
        kv = KVSerde(StringSerde(), JsonSerde())
        w = Windows.keyed_tumbling(lambda m: m.key, timedelta(seconds=5), init=int,
                                   fold=lambda m, n: n + m.value["n"],
                                   event_time=lambda m: m.value["ts"])
        (app.input(mem.input("scores", serde=kv, partitions=3, event_time=lambda m: m.value["ts"]))
         .window(w, name="w").map(lambda p: (p.key.key, p.key.pane_id, p.message), name="row")
         .send_to(app.output(mem.output("sums"))))
        return app

    items = [{"key": f"k{i % 5}", "value": {"n": i, "ts": 100.0 + i}} for i in range(40)]
    path = write_jsonl(tmp_path / "scores.jsonl", items)
    parts: dict[int, list[KV]] = {p: [] for p in range(3)}
    for it in items:
        parts[partition_for(it["key"].encode(), 3)].append(KV(it["key"], it["value"]))
    expected = TestRunner(build()).add_input("scores", parts).run().messages("sums")
    result = SparkRunner(spark).reprocess(build(), {"scores": str(path)})
    assert Counter(result.messages("sums")) == Counter(expected) and expected


class _TableKeys:
    """Puts each message as a key and emits the table's keys, in the table's order."""

    def init(self, ctx: Any) -> None:
        self.table = ctx.table("t")

    def __call__(self, kv: KV[str, Any]) -> KV[str, Any]:
        self.table.put(tuple(kv.value) if isinstance(kv.value, list) else kv.value, 1)
        return KV(kv.key, [e.key for e in self.table.all()])


def test_tables_order_keys_by_their_serialized_bytes_as_lmdb_does(spark: Any) -> None:
    def build() -> StreamApplication:
        app = StreamApplication("table-order")
        mem = MemorySystem()
        kv = KVSerde(StringSerde(), JsonSerde())
        app.table("t", serde=KVSerde(JsonSerde(), JsonSerde()))
        (app.input(mem.input("nums", serde=kv)).map(_TableKeys(), name="keys")
         .send_to(app.output(mem.output("out", serde=kv))))
        return app
    nums: list[KV[str, Any]] = [KV("k", n) for n in (9, 10, 2, 100)]
    # a tuple key (from a list) comes back a list, as JSON decodes it from LMDB
    nums.append(KV("k", ["a", 1]))
    expected = TestRunner(build()).add_input("nums", nums).run().messages("out")
    got = SparkRunner(spark).reprocess(build(), {"nums": nums}).messages("out")
    # JSON bytes: "10" < "100" < "2" < "9" < "[..."
    assert expected[-1] == KV("k", [10, 100, 2, 9, ["a", 1]])
    assert sorted(map(len, (m.value for m in got))) == [1, 2, 3, 4, 5]
    assert max(got, key=lambda m: len(m.value)) == expected[-1]


def test_a_run_hands_python_batches_bounded_by_rows_and_leaves_the_session_as_it_was(
        spark: Any) -> None:
    """A run sets the Arrow byte limit to its largest value (Spark then does not measure each
    batch after every row) where the session has no value of its own, and unsets it after; a
    value of the user's is kept."""
    from runtime.spark.runner import PASS_SQL_CONF, _pass_settings

    key = "spark.sql.execution.arrow.maxBytesPerBatch"
    assert key in PASS_SQL_CONF and spark.conf.get(key, None) is None
    with _pass_settings(spark):
        assert spark.conf.get(key) == str(2**31 - 1)
    assert spark.conf.get(key, None) is None
    app = StreamApplication("bounded")
    mem = MemorySystem()
    app.input(mem.input("in")).map(lambda m: m + 1).send_to(app.output(mem.output("out")))
    assert sorted(SparkRunner(spark).reprocess(app, {"in": [1, 2, 3]}).messages("out")) == [2, 3, 4]
    assert spark.conf.get(key, None) is None
    spark.conf.set(key, "1048576")
    try:
        with _pass_settings(spark):
            assert spark.conf.get(key) == "1048576"
        assert spark.conf.get(key) == "1048576"
    finally:
        spark.conf.unset(key)
