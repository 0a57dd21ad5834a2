"""An Iceberg table as an input of a reprocessing run (``samza_dsl.iceberg.IcebergScan``).

The driver plans the scan with pyiceberg (the snapshot, the rows a filter keeps, the columns)
and reads it into Arrow, deletes applied as Iceberg says; the Arrow table becomes a Spark
DataFrame, which is read as any DataFrame input (``runtime.spark.sources``): each row is a
message (a keyed stream's rows need ``key`` and ``value`` columns). The table must fit in the
driver's memory.

No Iceberg runtime for Spark is used: Iceberg 1.12.0, the newest on Maven Central, has none
for Spark 4.2 or 4.3 (its runtime for Spark 4.1 fails on Spark 4.3 with
``IncompatibleClassChangeError``), and pyiceberg reads the tables the same.
"""

from __future__ import annotations

from typing import Any

from runtime.spark.sources import FileInput, Source, SourceError, resolve_source

__all__ = ["iceberg_source"]


def iceberg_source(stream_id: str, descriptor: Any, scan: Any, catalog: Any,
                   start_ms: int) -> Source:
    """Input ``stream_id`` read from the Iceberg table of ``scan`` (an ``IcebergScan``) in
    ``catalog`` (a ``CatalogSpec``)."""
    from pyspark.sql import SparkSession

    from runtime.connectors.iceberg import scan_arrow
    from samza_dsl.errors import SamzaError

    try:
        rows = scan_arrow(catalog, scan.table, scan.snapshot_id, scan.row_filter, scan.columns)
    except SamzaError as exc:
        raise SourceError(f"input {stream_id!r}: {exc}") from None
    except Exception as exc:
        raise SourceError(f"input {stream_id!r}: reading Iceberg table {scan.table} "
                          f"({catalog.where()}) failed: {type(exc).__name__}: {exc}") from None
    if scan.timestamp is not None and scan.timestamp not in rows.column_names:
        raise SourceError(f"input {stream_id!r}: Iceberg table {scan.table} has no timestamp "
                          f"column {scan.timestamp!r}; its columns: "
                          f"{', '.join(rows.column_names)}")
    spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    frame = spark.createDataFrame(rows)
    return resolve_source(spark, stream_id, descriptor, FileInput(frame, timestamp=scan.timestamp),
                          start_ms)
