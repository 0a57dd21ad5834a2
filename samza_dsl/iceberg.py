"""Apache Iceberg: an output that appends each commit of a task as one snapshot of a table,
exactly once, and tables read back as inputs of a reprocessing run on Spark.

Needs pyiceberg with its SQL catalog and pyarrow (``pip install 'samza-dsl[iceberg]'``).
docs/connectors.md has the whole story.

- ``IcebergSystem(name, catalog_uri=..., warehouse=...)``: a pyiceberg SQL catalog (on SQLite:
  ``sqlite:///lake/catalog.db``) and the folder where it makes tables;
- ``.table_output(stream_id, table="ns.name", schema=, columns=)``: an output whose rows are
  appended to the table, one snapshot per commit of each task, carrying the task's input
  positions in the snapshot's summary; a restart reads them back, so each input message's rows
  are in the table once, whatever ``job.processing.guarantee`` says;
- ``.scan(table)``: the table (or one snapshot of it, or the rows a filter keeps) as an input
  of ``SparkRunner.reprocess``, or as a ``pyarrow.Table`` (``to_arrow()``).

>>> lake = IcebergSystem("lake", catalog_uri="sqlite:///lake/catalog.db", warehouse="lake")
>>> out = lake.table_output("order-rows", table="shop.orders",
...                         schema={"id": "string", "amount": "long"},
...                         columns={"id": "key", "amount": "amount"})
>>> out.stream_id, out.description
('order-rows', "Iceberg table shop.orders (catalog 'lake' at sqlite:///lake/catalog.db)")
>>> lake.scan("shop.orders", row_filter="amount > 0").table
'shop.orders'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .connectors import SinkOutput, SinkSystem, SparkInput, batch_and_retry

__all__ = ["IcebergSystem", "IcebergCatalogSystem", "IcebergScan"]


def _catalog(system: IcebergCatalogSystem | IcebergScan) -> Any:
    from runtime.connectors.iceberg import CatalogSpec  # the I/O lives in the runtime

    return CatalogSpec(system.catalog_name, system.catalog_uri, system.warehouse,
                       system.properties)


@dataclass(frozen=True)
class IcebergScan(SparkInput):
    """An Iceberg table read whole (a snapshot of it, the rows a filter keeps, some columns):
    give it as an input of ``SparkRunner.reprocess``, or read it with ``to_arrow()``. Make one
    with ``IcebergSystem(...).scan(table)``.

    Attributes:
        table: ``"namespace.name"``.
        snapshot_id: The snapshot read (None: the current one).
        row_filter: A pyiceberg row filter (``"amount > 0 and id != 'x'"``), or None.
        columns: The columns read (None: all).
        timestamp: A column holding each row's record timestamp, ms since the epoch, as
            ``FileInput``'s ``timestamp`` (None: none).
    """

    catalog_name: str
    catalog_uri: str
    warehouse: str
    table: str
    snapshot_id: int | None = None
    row_filter: str | None = None
    columns: tuple[str, ...] | None = None
    timestamp: str | None = None
    properties: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def to_arrow(self) -> Any:
        """The rows, through pyiceberg's scan, as one ``pyarrow.Table``."""
        from runtime.connectors.iceberg import scan_arrow

        return scan_arrow(_catalog(self), self.table, self.snapshot_id, self.row_filter,
                          self.columns)

    def spark_source(self, stream_id: str, descriptor: Any, start_ms: int,
                     config: Mapping[str, Any] | None = None) -> Any:
        """How a reprocessing run reads the table as input ``stream_id``
        (``runtime.spark.iceberg``)."""
        from runtime.spark.iceberg import iceberg_source

        return iceberg_source(stream_id, descriptor, self, _catalog(self), start_ms)


@dataclass(frozen=True)
class IcebergCatalogSystem(SinkSystem):
    """An Iceberg catalog of pyiceberg's SQL kind; make one with ``IcebergSystem``."""

    catalog_uri: str = ""
    warehouse: str = ""
    catalog_name: str = ""
    properties: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def table_output(self, stream_id: str, *, table: str,
                     schema: Any = None,
                     columns: Mapping[str, str | Callable[[Any], Any]] | None = None,
                     to_row: Callable[[Any], Any] | None = None, batch_rows: int = 10_000,
                     retry: timedelta | float = 30.0,
                     partitions: int | None = None) -> SinkOutput:
        """An output whose messages become rows of ``table``, appended exactly once, one
        snapshot per commit of each task.

        Args:
            stream_id: The stream's id in the application.
            table: ``"namespace.name"``; made from ``schema`` where it is missing.
            schema: The table's columns: ``{column: type}`` (pyarrow's names, ``"int64"``,
                ``"string"``, ``"double"``, or Iceberg's, ``"long"``, ``"boolean"``,
                ``"timestamptz"``), or a ``pyarrow.Schema``. Where the table is there, its
                schema must be this one (the same columns and Iceberg types). None: the table
                must be there, and its schema is taken.
            columns: ``{column: field}``: the field of the message's row (a dict as it is,
                ``KV(k, dict)`` as the dict with ``key``, ``KV(k, v)`` as ``{"key",
                "value"}``) by name, or a function of the message. None: each column from the
                field of its name. A column not given is None.
            to_row: ``to_row(message) -> dict``, the row the fields are taken from.
            batch_rows: Rows buffered per Arrow record batch (a commit's rows are appended
                together, whatever their number).
            retry: How long a commit another writer got ahead of, or a busy catalog, is tried
                again (seconds or ``timedelta``) before the task stops.
            partitions: The stream's partition count (the partition does not matter to the
                table).

        Returns:
            The ``SinkOutput``, for ``app.output``.

        Raises:
            ValueError: a table not named ``namespace.name``, a column of ``columns`` that
                ``schema`` lacks, or ``batch_rows`` or ``retry`` not > 0.
        """
        from runtime.connectors.iceberg import IcebergOptions  # the I/O lives in the runtime

        if not isinstance(table, str) or "." not in table.strip(".") or " " in table:
            raise ValueError(f"output {stream_id!r}: table= must be 'namespace.name', got "
                             f"{table!r}")
        seconds = batch_and_retry(stream_id, batch_rows, retry)
        if columns is not None:
            if not columns:
                raise ValueError(f"output {stream_id!r}: columns= must name at least one "
                                 f"column (or leave it out: each column from its field)")
            for c, f in columns.items():
                if not isinstance(f, str) and not callable(f):
                    raise TypeError(f"output {stream_id!r}: column {c!r} must be a field name "
                                    f"or a function of the message, got {f!r}")
            names = list(schema) if isinstance(schema, Mapping) else \
                list(getattr(schema, "names", None) or columns)
            missing = [c for c in columns if c not in names]
            if missing:
                raise ValueError(f"output {stream_id!r}: columns {missing} are not in "
                                 f"schema= {names}")
        if to_row is not None and not callable(to_row):
            raise TypeError(f"output {stream_id!r}: to_row must be callable (message -> dict)")
        options = IcebergOptions(_catalog(self), table,
                                 dict(schema) if isinstance(schema, Mapping) else schema,
                                 dict(columns) if columns is not None else None, to_row,
                                 batch_rows, seconds)
        return SinkOutput(self, stream_id, None, stream_id,
                          1 if partitions is None else partitions, sink=options,
                          description=options.describe())

    def scan(self, table: str, *, snapshot_id: int | None = None,
             row_filter: str | None = None, columns: list[str] | None = None,
             timestamp: str | None = None) -> IcebergScan:
        """Table ``table`` read whole, as an input of ``SparkRunner.reprocess`` (or a
        ``pyarrow.Table``: ``to_arrow()``): its current snapshot, or ``snapshot_id``; the rows
        ``row_filter`` keeps (pyiceberg's syntax, ``"amount > 0"``); ``columns`` only;
        ``timestamp`` names a column of record timestamps in ms."""
        return IcebergScan(self.catalog_name, self.catalog_uri, self.warehouse, table,
                           snapshot_id, row_filter, tuple(columns) if columns else None,
                           timestamp, self.properties)


def IcebergSystem(name: str = "iceberg", *, catalog_uri: str,  # noqa: N802 - a factory
                  warehouse: str, catalog_name: str | None = None,
                  properties: Mapping[str, str] | None = None) -> IcebergCatalogSystem:
    """An Iceberg catalog of pyiceberg's SQL kind whose tables a job appends to.

    Args:
        name: The system's name, matching ``[A-Za-z0-9_-]+``.
        catalog_uri: The catalog's database, a SQLAlchemy URI: ``sqlite:///lake/catalog.db``
            (relative: to the job's working directory), ``sqlite:////abs/catalog.db``.
        warehouse: Where the catalog makes tables: a folder (made if missing) or a URI.
        catalog_name: The catalog's name in its database (default: ``name``); readers of the
            same tables (pyiceberg, Spark's Iceberg JDBC catalog) name it the same.
        properties: More pyiceberg catalog properties.

    Returns:
        The system: ``table_output``, ``scan``.
    """
    if not isinstance(catalog_uri, str) or "://" not in catalog_uri:
        raise ValueError(f"IcebergSystem({name!r}) needs catalog_uri= a SQLAlchemy URI such as "
                         f"'sqlite:///lake/catalog.db', got {catalog_uri!r}")
    if not isinstance(warehouse, str) or not warehouse:
        raise ValueError(f"IcebergSystem({name!r}) needs warehouse= a folder, got "
                         f"{warehouse!r}")
    return IcebergCatalogSystem(name, catalog_uri=catalog_uri, warehouse=warehouse,
                                catalog_name=catalog_name or name,
                                properties=tuple(sorted((properties or {}).items())))
