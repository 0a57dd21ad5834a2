"""The Iceberg output on TestRunner, on the embedded system under both guarantees, and as a
sink on its own: rows read back through pyiceberg, one snapshot per commit of a task carrying
its input positions, what a restart skips, a commit another writer got ahead of, and errors."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from runtime import LocalRunner
from runtime.connectors.iceberg import IcebergOptions
from runtime.local.system import LocalJob
from runtime.ops.loader import load_app
from samza_dsl import KV, StreamApplication
from samza_dsl.connectors import Committed, SinkContext
from samza_dsl.errors import SamzaError
from samza_dsl.iceberg import IcebergCatalogSystem, IcebergSystem
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem
from samza_dsl.testing import TestRunner

SERDE = KVSerde(StringSerde(), JsonSerde())
SCHEMA = {"id": "string", "n": "long", "twice": "long"}
APP = f"{Path(__file__).with_name('ice_app.py')}:app"


def _app(lake: IcebergCatalogSystem, **kw: Any) -> tuple[StreamApplication, Any]:
    app = StreamApplication("ice-out")
    events = LocalSystem("local").input("events", serde=SERDE, partitions=2)
    kw.setdefault("schema", SCHEMA)
    kw.setdefault("columns", {"id": "key", "n": "n", "twice": lambda kv: kv.value["n"] * 2})
    out = app.output(lake.table_output("rows", table="shop.items", **kw))
    app.input(events).send_to(out)
    return app, events


def _catalog(lake: IcebergCatalogSystem) -> SqlCatalog:
    return SqlCatalog("lake", uri=lake.catalog_uri, warehouse=f"file://{lake.warehouse}")


def _ours(snapshots: list[Any]) -> list[dict[str, str]]:
    return [s.summary.additional_properties for s in snapshots
            if "samza-dsl.job" in s.summary.additional_properties]


def test_rows_round_trip_one_snapshot_per_task_commit_with_its_positions(lake) -> None:
    app, events = _app(lake)
    TestRunner(app).add_input(events, [KV(f"k{i}", {"n": i}) for i in range(100)]).run()
    table = _catalog(lake).load_table("shop.items")
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["n"])
    assert rows == [{"id": f"k{i}", "n": i, "twice": 2 * i} for i in range(100)]
    assert [(f.name, str(f.field_type)) for f in table.schema().fields] == [
        ("id", "string"), ("n", "long"), ("twice", "long")]
    props = _ours(table.snapshots())
    assert len(props) == 2  # one commit of each of the two tasks
    positions = {}
    for p in props:
        assert p["samza-dsl.job"] == "ice-out-1" and p["samza-dsl.output"] == "rows"
        task = p["samza-dsl.task"]
        key = "samza-dsl.positions." + "-".join(task.lower().split())
        positions.update({(s, part): o for s, part, o in json.loads(p[key])})
    assert set(positions) == {("events", 0), ("events", 1)}
    assert sum(o + 1 for o in positions.values()) == 100
    assert lake.scan("shop.items", row_filter="n >= 95").to_arrow().num_rows == 5


def test_a_job_started_afresh_skips_what_the_table_holds(lake) -> None:
    """The table ahead of the checkpoint (here: no checkpoint at all, the same input again):
    the replayed messages' rows are not appended again; only the new ones are."""
    msgs = [KV(f"k{i}", {"n": i}) for i in range(30)]
    for more in (0, 10):
        app, events = _app(lake)
        extra = [KV(f"k{i}", {"n": i}) for i in range(30, 30 + more)]
        TestRunner(app).add_input(events, msgs + extra).run()
    rows = lake.scan("shop.items").to_arrow().column("id").to_pylist()
    assert sorted(rows) == sorted(f"k{i}" for i in range(40))


@pytest.mark.parametrize("guarantee,containers", [("at-least-once", 1), ("exactly-once", 1),
                                                  ("exactly-once", 2)])
def test_runs_on_the_embedded_system_write_each_row_once(
        tmp_path: Path, guarantee: str, containers: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Also with two container processes appending to the table at once (a commit refused
    because the other got ahead is made again)."""
    monkeypatch.setenv("SAMZA_DSL_ICEBERG_LAKE", str(tmp_path / "crash-lake"))
    app = load_app(APP)
    config = {"job.dir": str(tmp_path / "job"), "task.commit.ms": 5,
              "job.processing.guarantee": guarantee, "job.container.count": containers}
    for start in (0, 400):  # a second run goes on from the first's checkpoint
        job = LocalJob(app, config, run=False)
        try:
            job.load("events", [KV(str(i), {"id": i}) for i in range(start, start + 400)])
        finally:
            job.close()
        LocalRunner(app, config).run().close()
    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/crash-lake/catalog.db")
    table = catalog.load_table("lake.events")
    ids = table.scan().to_arrow().column("id").to_pylist()
    assert sorted(ids) == [i for i in range(800) if i % 10 != 9]
    assert len(_ours(table.snapshots())) >= 8  # each of the 4 tasks appended in both runs


def _ctx(offsets: dict[tuple[str, int], int], source: list[Any]) -> SinkContext:
    return SinkContext("job-1", "Partition 0", "rows", "lake", 1, {},
                       source=lambda: source[0], offsets=lambda: offsets)


def test_a_commit_another_writer_got_ahead_of_is_made_again(
        lake, caplog: pytest.LogCaptureFixture) -> None:
    """The sink's table is one version behind the catalog (another process appended): its
    commit fails, the table is read again, and the commit made on it (by the sink: the table
    tells pyiceberg not to retry commits itself)."""
    catalog = _catalog(lake)
    catalog.create_namespace("shop")
    catalog.create_table("shop.items", schema=pa.schema([(c, pa.string() if t == "string"
                                                          else pa.int64())
                                                         for c, t in SCHEMA.items()]),
                         properties={"commit.retry.num-retries": "0"})
    options = lake.table_output("rows", table="shop.items", schema=SCHEMA,
                                columns={"id": "key", "n": "n"}).sink
    assert isinstance(options, IcebergOptions)
    offsets: dict[tuple[str, int], int] = {}
    source: list[Any] = [None]
    sink = options(_ctx(offsets, source))
    sink.open(_ctx(offsets, source))
    sink.recover(Committed())
    for i in range(5):
        source[0] = ("events", 0, i)
        sink.write(0, KV(f"k{i}", {"n": i}))
    other = _catalog(lake).load_table("shop.items")
    other.append(pa.table({"id": ["x"], "n": pa.array([-1], pa.int64()),
                           "twice": pa.array([None], pa.int64())}))
    offsets[("events", 0)] = 4
    with caplog.at_level(logging.INFO, "samza_dsl.connectors.iceberg"):
        record = asyncio.run(sink.prepare(1))  # data files staged, named by no snapshot
        assert sorted(_catalog(lake).load_table("shop.items").scan().to_arrow().column(
            "n").to_pylist()) == [-1]
        asyncio.run(sink.commit(1))  # the checkpoint is durable: the snapshot appends them
    sink.close()
    assert "CommitFailedException" in caplog.text and "trying again" in caplog.text
    table = _catalog(lake).load_table("shop.items")
    assert table.current_snapshot().summary["samza-dsl.commit"] == record["token"]
    assert sorted(table.scan().to_arrow().column("n").to_pylist()) == [-1, 0, 1, 2, 3, 4]
    assert json.loads(table.current_snapshot().summary["samza-dsl.positions.partition-0"]) == [
        ["events", 0, 4]]
    # a restart: what the table holds up to offset 4 is skipped, offset 5 on is written
    again = options(_ctx(offsets, source))
    again.open(_ctx(offsets, source))
    again.recover(Committed())
    for i in range(3, 7):
        source[0] = ("events", 0, i)
        again.write(0, KV(f"k{i}", {"n": i}))
    offsets[("events", 0)] = 6
    asyncio.run(again.prepare(2))
    asyncio.run(again.commit(2))
    again.close()
    assert sorted(lake.scan("shop.items").to_arrow().column("n").to_pylist()) == [
        -1, 0, 1, 2, 3, 4, 5, 6]


def test_a_table_whose_schema_differs_is_one_line_naming_it(lake) -> None:
    _catalog(lake).create_namespace("shop")
    _catalog(lake).create_table("shop.items", schema=pa.schema([("id", pa.string()),
                                                                ("n", pa.string())]))
    app, events = _app(lake)
    with pytest.raises(SamzaError) as info:
        TestRunner(app).add_input(events, [KV("a", {"n": 1})]).run()
    text = str(info.value)
    assert "\n" not in text.strip(), text
    for part in ("shop.items", "Partition", "open", "column 'n' is string in the table, long "
                 "declared", "column 'twice' is declared but not in the table",
                 "declare schema= as the table has it"):
        assert part in text, (part, text)


def test_a_missing_table_without_a_schema_and_a_value_that_does_not_fit(lake) -> None:
    app, events = _app(lake, schema=None)
    with pytest.raises(SamzaError, match="does not exist and no schema= is declared"):
        TestRunner(app).add_input(events, [KV("a", {"n": 1})]).run()
    app, events = _app(lake)
    with pytest.raises(SamzaError) as info:
        TestRunner(app).add_input(events, [KV("a", {"n": "one"})]).run()
    text = str(info.value)
    assert "column 'n' (long) cannot hold 'one'" in text and "prepare" in text, text
    # the table made by the first run is there: without a schema its own is taken
    app, events = _app(lake, schema=None, columns={"id": "key", "n": "n"})
    TestRunner(app).add_input(events, [KV("b", {"n": 2})]).run()
    assert lake.scan("shop.items").to_arrow().to_pylist() == [{"id": "b", "n": 2, "twice": None}]


def test_declarations_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="catalog_uri="):
        IcebergSystem("lake", catalog_uri="lake.db", warehouse="w")
    lake = IcebergSystem("lake", catalog_uri="sqlite:///x.db", warehouse="w")
    with pytest.raises(ValueError, match="'namespace.name'"):
        lake.table_output("o", table="items", schema=SCHEMA)
    with pytest.raises(ValueError, match="not in schema="):
        lake.table_output("o", table="shop.items", schema=SCHEMA, columns={"other": "x"})
    with pytest.raises(ValueError, match="batch_rows"):
        lake.table_output("o", table="shop.items", schema=SCHEMA, batch_rows=0)


def test_a_checkpoint_whose_commit_did_not_run_is_appended_by_recover(lake) -> None:
    """A crash after the checkpoint, before the sink's commit: the files the checkpoint
    recorded are appended at the restart, once; files staged for a checkpoint that was never
    written are named by no snapshot."""
    options = lake.table_output("rows", table="shop.items", schema=SCHEMA,
                                columns={"id": "key", "n": "n"}).sink
    offsets: dict[tuple[str, int], int] = {}
    source: list[Any] = [None]
    sink = options(_ctx(offsets, source))
    sink.open(_ctx(offsets, source))
    sink.recover(Committed())
    for i in range(3):
        sink.write(0, KV(f"k{i}", {"n": i}))
    offsets[("events", 0)] = 2
    record = asyncio.run(sink.prepare(1))  # the checkpoint records this; then the crash
    sink.close()
    assert lake.scan("shop.items").to_arrow().num_rows == 0
    for _ in range(2):  # the restart, and one more: the files go in once
        again = options(_ctx(offsets, source))
        again.open(_ctx(offsets, source))
        again.recover(Committed(1, json.loads(json.dumps(record))))
        again.close()
        assert sorted(lake.scan("shop.items").to_arrow().column("n").to_pylist()) == [0, 1, 2]
    # staged for checkpoint 2, which was never written: the restart gets checkpoint 1 back
    late = options(_ctx(offsets, source))
    late.open(_ctx(offsets, source))
    late.recover(Committed(1, record))
    late.write(0, KV("k3", {"n": 3}))
    offsets[("events", 0)] = 3
    asyncio.run(late.prepare(2))
    late.abort()
    late.close()
    assert sorted(lake.scan("shop.items").to_arrow().column("n").to_pylist()) == [0, 1, 2]
