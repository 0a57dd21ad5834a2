"""An Iceberg table written by the output read back as the input of a reprocessing run on Spark
(``IcebergSystem.scan``: through pyiceberg's scan into Arrow, then a DataFrame): the same rows
as pyiceberg reads, one snapshot of them, a filter's, and a keyed stream's rows.

Spark's own Iceberg reader (the iceberg-spark-runtime jar) is not used: Maven Central has none
for the installed Spark 4.3 (runtime/spark/iceberg.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from runtime.spark import SourceError, SparkRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.iceberg import IcebergCatalogSystem
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem, MemorySystem
from samza_dsl.testing import TestRunner

SERDE = KVSerde(StringSerde(), JsonSerde())


def _write(lake: IcebergCatalogSystem, msgs: list[KV[str, Any]]) -> None:
    app = StreamApplication("ice-write")
    events = LocalSystem("local").input("events", serde=SERDE, partitions=2)
    out = app.output(lake.table_output("rows", table="shop.orders",
                                       schema={"key": "string", "value": "long",
                                               "ts": "long"},
                                       columns={"key": "key", "value": "amount",
                                                "ts": "ts"}))
    app.input(events).send_to(out)
    TestRunner(app).add_input(events, msgs).run()


def _reprocess(spark: Any, scan: Any, keyed: bool = False) -> list[Any]:
    app = StreamApplication("ice-read")
    mem = MemorySystem()
    inp = mem.input("orders", serde=SERDE if keyed else None)
    stream = app.input(inp)
    if keyed:
        stream = stream.map(lambda kv: {"key": kv.key, "doubled": 2 * kv.value}, name="double")
    else:
        stream = stream.filter(lambda r: r["value"] % 2 == 0, name="even")
    stream.send_to(app.output(mem.output("out")))
    return SparkRunner(spark).reprocess(app, {"orders": scan}).messages("out")


def test_spark_reads_the_table_the_output_wrote(spark: Any, lake: IcebergCatalogSystem) -> None:
    msgs = [KV(f"o{i}", {"amount": i, "ts": 1_700_000_000_000 + i}) for i in range(80)]
    _write(lake, msgs[:60])
    _write(lake, msgs)  # started afresh over more of the same input: o60..o79 are appended
    through_pyiceberg = lake.scan("shop.orders").to_arrow().to_pylist()
    assert len(through_pyiceberg) == 80
    got = _reprocess(spark, lake.scan("shop.orders", timestamp="ts"))
    assert Counter(r["key"] for r in got) == Counter(
        r["key"] for r in through_pyiceberg if r["value"] % 2 == 0)
    assert all(set(r) == {"key", "value", "ts"} for r in got)
    # the rows a filter keeps, of some columns; a keyed stream takes key and value
    doubled = _reprocess(spark, lake.scan("shop.orders", row_filter="value >= 70",
                                          columns=["key", "value"]), keyed=True)
    assert sorted(r["doubled"] for r in doubled) == [2 * i for i in range(70, 80)]


def test_a_snapshot_and_errors_naming_the_table(spark: Any, lake: IcebergCatalogSystem) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    _write(lake, [KV(f"o{i}", {"amount": 2 * i, "ts": i}) for i in range(10)])
    table = SqlCatalog("lake", uri=lake.catalog_uri).load_table("shop.orders")
    oldest = min(table.snapshots(), key=lambda s: s.sequence_number)
    older = _reprocess(spark, lake.scan("shop.orders", snapshot_id=oldest.snapshot_id))
    assert 0 < len(older) < 10  # the first task's commit only
    with pytest.raises(SourceError, match="Iceberg table shop.nothing .* does not exist"):
        _reprocess(spark, lake.scan("shop.nothing"))
    with pytest.raises(SourceError, match="no timestamp column 'when'"):
        _reprocess(spark, lake.scan("shop.orders", timestamp="when"))
