"""Apache Iceberg outputs (pyiceberg, its SQL catalog), built on ``samza_dsl.connectors`` alone.

The output (``IcebergSink``, one per task) appends each commit of its task as ONE snapshot of
the table, whose summary carries the task's input positions:

- ``write`` makes a row of the message (the table's columns) and buffers it, ``write_batch``
  the rows of a run of messages; every ``batch_rows`` rows the buffer becomes an Arrow record
  batch;
- ``prepare`` writes the rows since the last commit as Parquet data files of the table,
  staged: no snapshot names them yet. The checkpoint records their paths, with a commit token
  and the task's input positions (``SinkContext.offsets``: the last offset of each input
  partition the checkpoint covers);
- ``commit``, once the checkpoint is durable, appends the staged files as ONE snapshot whose
  summary properties name the job, the output, the task and the token, and hold the positions
  under ``samza-dsl.positions.<task id>``;
- ``recover`` gets the last checkpoint's record: where its token's snapshot is not in the table
  (a crash between the checkpoint and the append), it appends the recorded files then. Files
  staged for a checkpoint that was never written hold rows the restart writes again; no
  snapshot ever names them (``abort`` deletes them where it can; Iceberg's orphan-file upkeep
  removes any left).

So the table holds exactly the rows of the checkpoints, each once, whatever
``job.processing.guarantee`` says: rows caused by input messages and rows none caused (panes a
watermark, a timer or the end of input fired) alike.

The SQL catalog commits optimistically (a table's metadata pointer moves only from the version
the commit was made on): the tasks of one process commit to a table one at a time, on one
shared ``Table``, and a commit that another process's got ahead of is made again on the table
as it is now, for at most ``retry_seconds``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.connectors.postgres_errors import refused
from samza_dsl.config import connection_secrets, redact
from samza_dsl.connectors import Committed, Replays, Sink, SinkContext, SinkError, Sources
from samza_dsl.errors import AccessRefused

__all__ = ["IcebergSink", "IcebergOptions", "CatalogSpec", "arrow_schema", "load_table",
           "schema_mismatch", "scan_arrow", "table_scan",
           "read_positions", "POSITIONS_KEY", "JOB_KEY", "OUTPUT_KEY", "TASK_KEY"]

_log = logging.getLogger("samza_dsl.connectors.iceberg")

#: snapshot summary properties written with each append
POSITIONS_KEY = "samza-dsl.positions."
JOB_KEY = "samza-dsl.job"
OUTPUT_KEY = "samza-dsl.output"
TASK_KEY = "samza-dsl.task"
CHECKPOINT_KEY = "samza-dsl.checkpoint"
COMMIT_KEY = "samza-dsl.commit"

#: Iceberg's type names, beside pyarrow's aliases (``"int64"``, ``"string"``, ``"double"``...)
_ICEBERG_TYPES = {"long": "int64", "int": "int32", "integer": "int32", "boolean": "bool",
                  "float": "float32", "timestamp": "timestamp[us]", "date": "date32"}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def arrow_schema(schema: Any) -> Any:
    """A ``pyarrow.Schema`` from one, or from ``{column: type}`` (a pyarrow type, one of its
    aliases, or an Iceberg name: ``long``, ``int``, ``boolean``, ``timestamp``,
    ``timestamptz``, ``date``).

    >>> arrow_schema({"id": "long", "name": "string", "at": "timestamptz"})
    id: int64
    name: string
    at: timestamp[us, tz=UTC]
    """
    import pyarrow as pa

    if schema is None or isinstance(schema, pa.Schema):
        return schema
    if not isinstance(schema, Mapping) or not schema:
        raise ValueError(f"schema must be a pyarrow.Schema or {{column: type}}, got {schema!r}")
    fields = []
    for name, t in schema.items():
        if isinstance(t, pa.DataType):
            fields.append(pa.field(name, t))
        elif t == "timestamptz":
            fields.append(pa.field(name, pa.timestamp("us", tz="UTC")))
        else:
            try:
                fields.append(pa.field(name, pa.type_for_alias(_ICEBERG_TYPES.get(t, t))))
            except (ValueError, TypeError, KeyError):
                raise ValueError(f"column {name!r}: unknown type {t!r}; give a pyarrow type or "
                                 f"a name such as 'long', 'int', 'string', 'double', 'boolean', "
                                 f"'timestamptz', 'date'") from None
    return pa.schema(fields)


@dataclass(frozen=True)
class CatalogSpec:
    """Where an Iceberg catalog is: its SQL database and the warehouse folder of its tables.

    Attributes:
        name: The catalog's name (its rows in the database are under it).
        uri: The SQLAlchemy URI of the catalog's database (``sqlite:///lake/catalog.db``).
        warehouse: Where new tables are made: a folder (``lake/warehouse``) or a URI.
        properties: More pyiceberg catalog properties.
    """

    name: str
    uri: str
    warehouse: str
    properties: tuple[tuple[str, str], ...] = ()

    def where(self) -> str:
        """The catalog as errors name it (a password in its URI as ``***``)."""
        uri = self.uri
        if "@" in uri:
            try:
                from sqlalchemy.engine import make_url

                uri = make_url(uri).render_as_string(hide_password=True)
            except Exception:
                uri = "(an unreadable URI)"
        return f"catalog {self.name!r} at {uri}"

    def warehouse_uri(self) -> str:
        w = self.warehouse
        if "://" in w:
            return w
        return "file://" + os.path.abspath(w)

    def open(self) -> Any:
        """The catalog, made once per process (its tasks share it)."""
        key = (os.getpid(), self)
        with _shared_lock:
            catalog = _catalogs.get(key)
            if catalog is None:
                from pyiceberg.catalog.sql import SqlCatalog

                w = self.warehouse
                if "://" not in w:
                    os.makedirs(w, exist_ok=True)
                db = self.uri.partition("sqlite:///")[2]
                if self.uri.startswith("sqlite:///") and os.path.dirname(db) and \
                        not db.startswith(":"):
                    os.makedirs(os.path.dirname(db), exist_ok=True)  # SQLite makes the file only
                catalog = SqlCatalog(self.name, uri=self.uri, warehouse=self.warehouse_uri(),
                                     **dict(self.properties))
                _catalogs[key] = catalog
            return catalog


_shared_lock = threading.Lock()
_catalogs: dict[tuple[int, CatalogSpec], Any] = {}
#: per process, catalog and table: the one ``Table`` its tasks commit on, and its lock
_tables: dict[tuple[int, CatalogSpec, str], tuple[Any, threading.Lock]] = {}


def load_table(spec: CatalogSpec, table: str) -> Any:
    """Table ``table`` (``"namespace.name"``) of the catalog, as it is now.

    Raises:
        pyiceberg.exceptions.NoSuchTableError: there is no such table.
    """
    return spec.open().load_table(table)


def table_scan(spec: CatalogSpec, table: str, snapshot_id: int | None = None,
               row_filter: str | None = None, columns: tuple[str, ...] | None = None) -> Any:
    """A pyiceberg ``DataScan`` of the table: a snapshot of it (by default the current one),
    its rows matching ``row_filter`` (``"n > 3 and key = 'a'"``), only ``columns`` if given.

    Raises:
        SinkError: no such table, or no such snapshot.
    """
    from pyiceberg.exceptions import NoSuchTableError

    try:
        t = load_table(spec, table)
    except NoSuchTableError:
        raise SinkError(f"Iceberg table {table} ({spec.where()}) does not exist; give a table "
                        f"the catalog has") from None
    if snapshot_id is not None and t.metadata.snapshot_by_id(snapshot_id) is None:
        raise SinkError(f"Iceberg table {table} ({spec.where()}) has no snapshot "
                        f"{snapshot_id}; its snapshots: "
                        f"{[s.snapshot_id for s in t.metadata.snapshots][-5:]} (the last 5)")
    kw: dict[str, Any] = {}
    if row_filter is not None:
        kw["row_filter"] = row_filter
    if columns is not None:
        kw["selected_fields"] = columns
    return t.scan(snapshot_id=snapshot_id, **kw)


def scan_arrow(spec: CatalogSpec, table: str, snapshot_id: int | None = None,
               row_filter: str | None = None, columns: tuple[str, ...] | None = None) -> Any:
    """The rows of ``table_scan(...)`` as one ``pyarrow.Table``."""
    return table_scan(spec, table, snapshot_id, row_filter, columns).to_arrow()


def _shared_table(spec: CatalogSpec, table: str,
                  make: Callable[[], Any]) -> tuple[Any, threading.Lock]:
    key = (os.getpid(), spec, table)
    with _shared_lock:
        got = _tables.get(key)
    if got is None:
        made = (make(), threading.Lock())
        with _shared_lock:
            got = _tables.setdefault(key, made)
    return got


def _iceberg_types(schema: Any) -> dict[str, Any]:
    """{column: Iceberg type} of an Iceberg schema or a ``pyarrow.Schema``."""
    import pyarrow as pa
    from pyiceberg.catalog import Catalog

    if isinstance(schema, pa.Schema):
        schema = Catalog._convert_schema_if_needed(schema)
    return {f.name: f.field_type for f in schema.fields}


def schema_mismatch(declared: Any, existing: Any) -> str | None:
    """What differs between a declared ``pyarrow.Schema`` and a table's Iceberg schema (None:
    they match: the same columns, of the same Iceberg types)."""
    want, have = _iceberg_types(declared), _iceberg_types(existing)
    diffs = [f"column {c!r} is {have[c]} in the table, {want[c]} declared"
             for c in want if c in have and have[c] != want[c]]
    diffs += [f"column {c!r} is declared but not in the table" for c in want if c not in have]
    diffs += [f"column {c!r} is in the table but not declared" for c in have if c not in want]
    return "; ".join(diffs) or None


def read_positions(table: Any, job: str, output: str,
                   task_id: str) -> tuple[dict[tuple[str, int], int], str | None]:
    """The input positions of the newest snapshot of the table's current lineage that task
    ``task_id`` of output ``output`` of job ``job`` appended, and that snapshot's commit token
    (``({}, None)``: it appended none)."""
    key = POSITIONS_KEY + task_id
    for snap in _ancestors(table):
        props = snap.summary.additional_properties if snap.summary is not None else {}
        if key in props and props.get(JOB_KEY) == job and props.get(OUTPUT_KEY) == output:
            return ({(s, int(p)): int(o) for s, p, o in json.loads(props[key])},
                    props.get(COMMIT_KEY))
    return {}, None


def _ancestors(table: Any) -> Iterator[Any]:
    meta = table.metadata
    snap = table.current_snapshot()
    while snap is not None:
        yield snap
        parent = snap.parent_snapshot_id
        snap = None if parent is None else meta.snapshot_by_id(parent)


@dataclass(frozen=True)
class IcebergOptions:
    """What an Iceberg output is (``samza_dsl.iceberg``).

    Attributes:
        catalog: Where the catalog is.
        table: ``"namespace.name"``.
        schema: The declared ``pyarrow.Schema`` (None: the existing table's).
        columns: ``{column: field}``: a field of the row (``default_row``) by name, or a
            function of the message; None: each column from the field of its name.
        to_row: Makes a row (a dict) of a message; by default ``default_row``.
        batch_rows: Rows per Arrow record batch of the buffer.
        retry_seconds: How long a commit that another writer got ahead of, or a busy catalog
            database, is tried again before the task stops.
    """

    catalog: CatalogSpec
    table: str
    schema: Any = field(default=None, compare=False)
    columns: Mapping[str, Any] | None = field(default=None, compare=False)
    to_row: Callable[[Any], Any] | None = field(default=None, compare=False)
    batch_rows: int = 10_000
    retry_seconds: float = 30.0

    def __call__(self, ctx: SinkContext) -> Sink:
        return IcebergSink(self)

    def describe(self) -> str:
        return f"Iceberg table {self.table} ({self.catalog.where()})"


class IcebergSink(Sink):
    """One task's rows into an Iceberg table, one snapshot per commit (the module's docstring)."""

    def __init__(self, options: IcebergOptions) -> None:
        self.options = options
        self.ctx: SinkContext | None = None
        self.table: Any = None
        self.lock: threading.Lock | None = None
        self.arrow: Any = None
        #: the table's Iceberg type of each column, as errors name it
        self.types: dict[str, str] = {}
        self.row: Callable[[Any], tuple[Any, ...]] = tuple
        #: rows since the last record batch, and the batches since the last commit
        self.rows: list[tuple[Any, ...]] = []
        self.batches: list[Any] = []
        #: per (stream, partition), the last offset whose rows the table holds
        self.positions: dict[tuple[str, int], int] = {}
        #: what a job started afresh must skip: the positions the table holds (none past the
        #: checkpoint of a job that has one: ``commit`` appends after it)
        self.replays = Replays()
        #: prepared and not yet appended: (data files, snapshot properties, token)
        self.staged: tuple[list[Any], dict[str, str], str] | None = None
        #: the snapshot of this task's last append (None: none yet)
        self.snapshot_id: int | None = None
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.where = options.describe()

    # -- the connector API ---------------------------------------------------------------------

    def open(self, ctx: SinkContext) -> None:
        self.ctx = ctx
        self.where = f"Iceberg output {ctx.stream_id!r} (table {self.options.table}, " \
                     f"{self.options.catalog.where()})"
        try:
            import pyarrow  # noqa: F401 - said at start, with the extra to install
            import pyiceberg  # noqa: F401
        except ImportError as exc:
            raise self._error("open", f"{exc.name} is not installed; install the iceberg "
                                      f"extra: pip install 'samza-dsl[iceberg]'") from None
        self.table, self.lock = _shared_table(self.options.catalog, self.options.table,
                                              self._load_or_create)
        declared = arrow_schema(self.options.schema)
        if declared is not None:
            diff = schema_mismatch(declared, self.table.schema())
            if diff is not None:
                raise self._error("open", f"the table's schema does not match the declared "
                                  f"one: {diff}; declare schema= as the table has it, or write "
                                  f"to a new table")
        self.arrow = self.table.schema().as_arrow()
        self.types = {f.name: str(f.field_type) for f in self.table.schema().fields}
        self.row = self._row_maker()
        self.pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"iceberg-{ctx.task_id}")

    def recover(self, committed: Committed) -> None:
        ctx = self._ctx()
        assert self.lock is not None
        record = committed.position if isinstance(committed.position, dict) else None
        with self.lock:
            self._retrying("recover", self.table.refresh)
            self.positions, _ = read_positions(self.table, ctx.job_name, ctx.stream_id,
                                               ctx.task_id)
            if record is not None and record.get("token") and \
                    self._landed(str(record["token"])) is None:
                # the checkpoint holds files its commit did not append: append them now
                self._finish(record, committed.checkpoint_id)
        self.replays = Replays(self.positions)
        if self.replays and record is None:
            _log.info("%s, task %s: the table holds rows up to %s", self.where, ctx.task_name,
                      self.replays)

    def write(self, partition: int, message: Any) -> None:
        if self.replays and self.replays.held(self.ctx.source() if self.ctx is not None else None):
            return  # its rows are in the table already (a job started afresh)
        self.rows.append(self.row(message))
        if len(self.rows) >= self.options.batch_rows:
            self._batch("write")

    def write_batch(self, partition: int, messages: list[Any], sources: Sources | None) -> None:
        messages = self.replays.unheld(messages, sources)
        self.rows += map(self.row, messages)
        if len(self.rows) >= self.options.batch_rows:
            self._batch("write_batch")

    async def prepare(self, checkpoint_id: int) -> Any:
        ctx = self._ctx()
        covered = dict(ctx.offsets())
        self._batch(f"prepare (checkpoint {checkpoint_id})")
        batches, self.batches = self.batches, []
        self.staged = None
        self.replays.passed(covered)
        if not batches or not any(b.num_rows for b in batches):
            return None
        assert self.pool is not None
        self.staged = await asyncio.wrap_future(self.pool.submit(
            self._stage, batches, covered, checkpoint_id))
        files, props, token = self.staged
        return {"token": token, "files": [f.file_path for f in files], "properties": props}

    async def commit(self, checkpoint_id: int) -> None:
        staged, self.staged = self.staged, None
        if staged is None:
            return
        assert self.pool is not None
        await asyncio.wrap_future(self.pool.submit(self._append, staged, checkpoint_id))

    def abort(self) -> None:
        self.rows = []
        self.batches = []
        staged, self.staged = self.staged, None
        if staged is not None:  # prepared for a checkpoint that was not written: no one's
            for f in staged[0]:
                with contextlib.suppress(Exception):
                    self.table.io.delete(f.file_path)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None

    # -- the table -----------------------------------------------------------------------------

    def _ctx(self) -> SinkContext:
        assert self.ctx is not None, "open() first"
        return self.ctx

    def _error(self, call: str, what: str) -> SinkError:
        ctx = self.ctx
        task = ctx.task_name if ctx is not None else "?"
        what = redact(what, connection_secrets(self.options.catalog.uri))
        return SinkError(f"{self.where}, task {task!r}, {call}: {what}",
                         stream=ctx.stream_id if ctx is not None else None,
                         task=ctx.task_name if ctx is not None else None, step=call)

    def _load_or_create(self) -> Any:
        """The table, made from the declared schema where it is missing."""
        from pyiceberg.exceptions import (
            NamespaceAlreadyExistsError,
            NoSuchTableError,
            TableAlreadyExistsError,
        )
        from sqlalchemy.exc import IntegrityError  # another process made it first, just now

        o = self.options
        catalog = self._retrying("open", o.catalog.open)
        declared = arrow_schema(o.schema)
        try:
            table = self._retrying("open", catalog.load_table, o.table)
        except NoSuchTableError:
            if declared is None:
                raise self._error("open", "the table does not exist and no schema= is "
                                  "declared to make it; declare schema= {column: type}, or "
                                  "make the table first") from None
            namespace = o.table.rpartition(".")[0]
            if not namespace:
                raise self._error("open", "a table is named 'namespace.name'") from None
            with contextlib.suppress(NamespaceAlreadyExistsError, IntegrityError):
                self._retrying("open", catalog.create_namespace, namespace)
            try:
                table = self._retrying("open", catalog.create_table, o.table, schema=declared)
                _log.info("%s: made the table", self.where)
            except (TableAlreadyExistsError, IntegrityError):  # another task's, just now
                table = self._retrying("open", catalog.load_table, o.table)
        return table

    def _row_maker(self) -> Callable[[Any], tuple[Any, ...]]:
        """message -> the row's tuple, in the order of the table's columns (None for a column
        the output does not give)."""
        from runtime.connectors.files import default_row

        names = list(self.arrow.names)
        spec = dict(self.options.columns) if self.options.columns is not None else \
            {n: n for n in names}
        unknown = [c for c in spec if c not in names]
        if unknown:
            raise self._error("open", f"columns= names {unknown}, which the table does not "
                              f"have (its columns: {names}); name only its columns")
        required = [f.name for f in self.arrow if not f.nullable and f.name not in spec]
        if required:
            raise self._error("open", f"columns {required} are required in the table and not "
                              f"given by columns=; give them")
        to_row = self.options.to_row or default_row

        def getter(c: str) -> Callable[[Any, Any], Any]:
            s = spec.get(c)
            if s is None:
                return lambda m, row: None
            if isinstance(s, str):
                return lambda m, row: row.get(s)
            return lambda m, row: s(m)
        getters = [getter(c) for c in names]
        if all(isinstance(spec.get(c), str) for c in names):
            fields = [spec[c] for c in names]
            return lambda m: tuple(map(to_row(m).get, fields))

        def made(m: Any) -> tuple[Any, ...]:
            row = to_row(m)
            return tuple(g(m, row) for g in getters)
        return made

    def _batch(self, call: str) -> None:
        """The buffered rows as one Arrow record batch of the table's schema."""
        import pyarrow as pa

        rows, self.rows = self.rows, []
        if not rows:
            return
        arrays = []
        for f, values in zip(self.arrow, zip(*rows, strict=True), strict=True):
            try:
                arrays.append(pa.array(values, type=f.type))
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                bad = next((v for v in values if not _fits(pa, v, f.type)), None)
                kind = self.types.get(f.name, str(f.type))
                raise self._error(call, f"column {f.name!r} ({kind}) cannot hold "
                                  f"{bad!r:.60} ({_first_line(exc)}); make the output's "
                                  f"columns= give {kind} values") from None
        self.batches.append(pa.RecordBatch.from_arrays(arrays, schema=self.arrow))

    def _stage(self, batches: list[Any], covered: dict[tuple[str, int], int],
               checkpoint_id: int) -> tuple[list[Any], dict[str, str], str]:
        """On the sink's thread: the batches as data files of the table, named by no snapshot
        yet; with the properties and token of the snapshot that will append them."""
        import pyarrow as pa
        from pyiceberg.io.pyarrow import _dataframe_to_data_files

        ctx = self._ctx()
        merged = dict(self.positions)
        for sp, o in covered.items():
            if o > merged.get(sp, -1):
                merged[sp] = o
        token = uuid.uuid4().hex
        props = {JOB_KEY: ctx.job_name, OUTPUT_KEY: ctx.stream_id, TASK_KEY: ctx.task_name,
                 CHECKPOINT_KEY: str(checkpoint_id), COMMIT_KEY: token,
                 POSITIONS_KEY + ctx.task_id: json.dumps(
                     [[s, p, o] for (s, p), o in sorted(merged.items())])}
        data = pa.Table.from_batches(batches, schema=self.arrow)
        try:
            files = list(_dataframe_to_data_files(table_metadata=self.table.metadata, df=data,
                                                  io=self.table.io))
        except Exception as exc:
            raise self._error(f"prepare (checkpoint {checkpoint_id})",
                              f"writing {data.num_rows} rows as data files failed: "
                              f"{_first_line(exc)}; the checkpoint stays before these rows, so "
                              f"a restart writes them again") from None
        return files, props, token

    def _append(self, staged: tuple[list[Any], dict[str, str], str], checkpoint_id: int) -> None:
        """On the sink's thread, after the checkpoint: one snapshot appending the staged files."""
        files, props, token = staged
        assert self.lock is not None
        with self.lock:
            self.snapshot_id = self._retrying(f"commit (checkpoint {checkpoint_id})",
                                              self._commit, files, props, token)
        self.positions = _positions_of(props, self._ctx().task_id)

    def _finish(self, record: dict[str, Any], checkpoint_id: int) -> None:
        """At a restart (the lock held): append the files a checkpoint recorded, which its
        commit did not."""
        from pyiceberg.io.pyarrow import parquet_file_to_data_file

        call = f"recover (checkpoint {checkpoint_id})"
        try:
            files = [parquet_file_to_data_file(self.table.io, self.table.metadata, str(path))
                     for path in record.get("files", [])]
        except Exception as exc:
            raise self._error(call, f"the data files checkpoint {checkpoint_id} recorded "
                              f"cannot be read ({_first_line(exc)}); they were removed from "
                              f"the warehouse, and their rows are lost to the table: reset "
                              f"the job, or restore the files") from None
        props = {str(k): str(v) for k, v in dict(record.get("properties", {})).items()}
        self.snapshot_id = self._retrying(call, self._commit, files, props,
                                          str(record["token"]))
        self.positions = _positions_of(props, self._ctx().task_id)
        _log.info("%s, task %s: appended the %d file(s) of checkpoint %d, which its commit "
                  "had not", self.where, self._ctx().task_name, len(files), checkpoint_id)

    def _commit(self, files: list[Any], props: dict[str, str], token: str) -> int:
        tx = self.table.transaction()
        with tx.update_snapshot(snapshot_properties=props).fast_append() as append:
            for f in files:
                append.append_data_file(f)
        tx.commit_transaction()
        snap = self.table.current_snapshot()
        assert snap is not None and snap.summary is not None
        assert snap.summary.additional_properties.get(COMMIT_KEY) == token
        return int(snap.snapshot_id)

    def _landed(self, token: str) -> int | None:
        """After a commit that failed with an unclear outcome: the snapshot it made, if it
        landed after all."""
        ctx = self._ctx()
        self.table.refresh()
        key = POSITIONS_KEY + ctx.task_id
        for snap in _ancestors(self.table):
            props = snap.summary.additional_properties if snap.summary is not None else {}
            if key in props and props.get(JOB_KEY) == ctx.job_name and \
                    props.get(OUTPUT_KEY) == ctx.stream_id:
                return int(snap.snapshot_id) if props.get(COMMIT_KEY) == token else None
        return None

    def _retrying(self, call: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """``fn``, made again while another writer got ahead of it (the table refreshed first)
        or the catalog's database is busy, for at most ``retry_seconds``."""
        from pyiceberg.exceptions import CommitFailedException
        from sqlalchemy.exc import DBAPIError, OperationalError

        deadline = time.monotonic() + self.options.retry_seconds
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn(*args, **kw)
            except (CommitFailedException, OperationalError) as exc:
                if isinstance(exc, OperationalError) and refused(exc.orig or exc):
                    raise self._refusal(call, exc.orig or exc) from None  # answered: not an outage
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._error(call, f"the catalog refused the commit for "
                                      f"{self.options.retry_seconds:g} s ({attempt} attempts): "
                                      f"{_first_line(exc)}; the checkpoint stays before these "
                                      f"rows, so a restart writes them again") from None
                pause = min(left, 0.02 * 2 ** min(attempt, 6) * (0.5 + random.random()))
                _log.info("%s, %s: %s; trying again in %.2f s", self.where, call,
                          redact(_first_line(exc), connection_secrets(self.options.catalog.uri)),
                          pause)
                time.sleep(pause)
                if fn == self._commit:
                    try:
                        landed = self._landed(args[2])
                    except (CommitFailedException, OperationalError):
                        continue
                    if landed is not None:
                        return landed
            except DBAPIError as exc:  # a statement refused (no permission on the catalog)
                if refused(exc.orig or exc):
                    raise self._refusal(call, exc.orig or exc) from None
                raise

    def _refusal(self, call: str, exc: BaseException) -> AccessRefused:
        """The one line of the catalog's database refusing the job's login or access: the
        system, the user and where the password comes from; never the password."""
        from sqlalchemy.engine import make_url

        uri = self.options.catalog.uri
        try:
            url = make_url(uri)
            user, has_password = url.username, bool(url.password)
        except Exception:
            user, has_password = None, bool(connection_secrets(uri))
        source = ("comes from the catalog URI (IcebergSystem's catalog_uri=)" if has_password
                  else "is not in the catalog URI (IcebergSystem's catalog_uri=): the driver "
                  "looked for it in PGPASSWORD or its password file")
        system = self.ctx.system if self.ctx is not None else "?"
        task = self.ctx.task_name if self.ctx is not None else "?"
        said = redact(_first_line(exc), connection_secrets(uri))
        return AccessRefused(
            f"{self.where}, task {task!r}, {call}: the catalog's database refused user "
            f"{user!r} of Iceberg system {system!r}: {said}; check the user and the password, "
            f"which {source} (a refusal is not retried)", system=system, user=user)



def _positions_of(props: Mapping[str, str], task_id: str) -> dict[tuple[str, int], int]:
    raw = props.get(POSITIONS_KEY + task_id)
    return {} if raw is None else {(s, int(p)): int(o) for s, p, o in json.loads(raw)}


def _fits(pa: Any, value: Any, type_: Any) -> bool:
    try:
        pa.array([value], type=type_)
        return True
    except Exception:
        return False
