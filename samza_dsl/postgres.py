"""PostgreSQL: an output that inserts or upserts rows exactly once, and tables to join with.

Needs psycopg 3 (``pip install 'samza-dsl[postgres]'``). docs/connectors.md has the whole story.

- ``PostgresSystem(name, conninfo=...).output_table(stream_id, table=, columns=, key=,
  upsert=)``: an output whose rows go into ``table``, COPYed in batches; the rows of each
  commit of a task and the input positions they cover are one database transaction, and a
  restart reads the positions back from the database, so each input message's rows are in the
  table once, whatever ``job.processing.guarantee`` says;
- ``.remote_table(app, name, table=, key=)``: a remote table for ``join_table`` that reads by
  key, the reads of a turn batched into one query, with a ``CacheSpec`` as remote tables have;
- ``.side_table(app, name, table=, key=)``: the whole table read once per process at start,
  every lookup answered from it (reference data).

>>> pg = PostgresSystem("pg", conninfo="host=127.0.0.1 port=5432 dbname=shop")
>>> out = pg.output_table("order-rows", table="orders",
...                       columns={"id": "key", "amount": "amount"}, key=["id"], upsert=True)
>>> out.stream_id, out.description
('order-rows', "PostgreSQL table orders at 'host=127.0.0.1 port=5432 dbname=shop'")
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .connectors import SinkOutput, SinkSystem, batch_and_retry
from .remote import CacheSpec, RetryPolicy

if TYPE_CHECKING:
    from .application import StreamApplication
    from .stream import RemoteTable

__all__ = ["PostgresSystem", "PgSystem"]


def _describe(conninfo: str) -> str:
    from runtime.connectors.postgres import describe_conninfo

    return describe_conninfo(conninfo)


@dataclass(frozen=True)
class PgSystem(SinkSystem):
    """A PostgreSQL database; make one with ``PostgresSystem``."""

    #: how to connect; not in the repr (it may hold a password)
    conninfo: str = field(default="", repr=False)

    def output_table(self, stream_id: str, *, table: str,
                     columns: Mapping[str, str | Callable[[Any], Any]],
                     key: Sequence[str] = (), upsert: bool = False, batch_rows: int = 5000,
                     retry: timedelta | float = 30.0, to_row: Callable[[Any], Any] | None = None,
                     partitions: int | None = None) -> SinkOutput:
        """An output whose messages become rows of ``table``, exactly once.

        Args:
            stream_id: The stream's id in the application.
            table: The table (``"orders"``, ``"shop.orders"``); it must exist.
            columns: ``{column: field}``, in the COPY's order: the field of the message's row
                (a dict as it is, ``KV(k, dict)`` as the dict with ``key``, ``KV(k, v)`` as
                ``{"key", "value"}``) by name, or a function of the message. Values are
                adapted by psycopg (wrap JSON in ``psycopg.types.json.Jsonb``).
            key: The key columns: with ``upsert``, ``ON CONFLICT (key) DO UPDATE``.
            upsert: Update the row of a key that is there; else insert.
            batch_rows: Rows per COPY into the task's open transaction.
            retry: How long a lost connection is retried (seconds or ``timedelta``) before
                the task stops with an error naming the output and what failed.
            to_row: ``to_row(message) -> dict``, the row the fields are taken from.
            partitions: The stream's partition count (the partition does not matter to the
                table).

        Returns:
            The ``SinkOutput``, for ``app.output``.

        Raises:
            ValueError: no columns, ``upsert`` without ``key``, a key that is not a column,
                or ``batch_rows`` or ``retry`` not > 0.
        """
        from runtime.connectors.postgres import PostgresOptions  # the I/O lives in the runtime

        if not columns:
            raise ValueError(f"output {stream_id!r}: columns= must name at least one column")
        keys = (key,) if isinstance(key, str) else tuple(key)
        if upsert and not keys:
            raise ValueError(f"output {stream_id!r}: upsert=True needs key= the table's key "
                             f"columns (its primary key or a unique index)")
        missing = [k for k in keys if k not in columns]
        if missing:
            raise ValueError(f"output {stream_id!r}: key column(s) {missing} are not in "
                             f"columns= {list(columns)}")
        seconds = batch_and_retry(stream_id, batch_rows, retry)
        for c, f in columns.items():
            if not isinstance(f, str) and not callable(f):
                raise TypeError(f"output {stream_id!r}: column {c!r} must be a field name or "
                                f"a function of the message, got {f!r}")
        options = PostgresOptions(self.conninfo, table, dict(columns), keys, upsert,
                                  batch_rows, seconds, to_row)
        return SinkOutput(self, stream_id, None, stream_id,
                          1 if partitions is None else partitions, sink=options,
                          description=f"PostgreSQL table {table} at "
                                      f"{_describe(self.conninfo)!r}")

    def remote_table(self, app: StreamApplication, name: str, *, table: str, key: str,
                     columns: Sequence[str] | None = None, cache: CacheSpec | None = None,
                     retry: RetryPolicy | None = None, batch_size: int = 100,
                     rate_limit: float | None = None) -> RemoteTable[Any, Any]:
        """A remote table of the application that reads ``table`` by ``key``: a value is
        the row's other columns as a dict (``columns``: only those; one column: its value).
        The reads of a turn of the event loop go out as one ``WHERE key = ANY(...)`` query of
        up to ``batch_size`` keys; ``cache`` and ``retry`` as in ``app.remote_table`` (a lost
        connection is retried by the default ``RetryPolicy(max_attempts=5, backoff=0.1)``).
        Read only: writes go through ``output_table``."""
        from runtime.connectors.postgres import PostgresReader

        reader = PostgresReader(self.conninfo, table, key, columns, system=self.name)
        return app.remote_table(name, read=reader.read, read_all=reader.read_all,
                                cache=cache, batch_size=batch_size, rate_limit=rate_limit,
                                retry=retry or RetryPolicy(max_attempts=5, backoff=0.1))

    def side_table(self, app: StreamApplication, name: str, *, table: str, key: str,
                   columns: Sequence[str] | None = None,
                   retry: RetryPolicy | None = None) -> RemoteTable[Any, Any]:
        """A table of reference data: every row of ``table`` read once, at the first lookup of
        each process (as a task starts), and every lookup (``join_table``, ``ctx.table``)
        answered from memory. Values as in ``remote_table``. Rows changed later are not
        seen until the job restarts."""
        from runtime.connectors.postgres import PostgresReader

        reader = PostgresReader(self.conninfo, table, key, columns, snapshot=True,
                                system=self.name)
        return app.remote_table(name, read=reader.read, read_all=reader.read_all,
                                batch_size=1 << 30,
                                retry=retry or RetryPolicy(max_attempts=5, backoff=0.1))


def PostgresSystem(name: str = "postgres", *, conninfo: str) -> PgSystem:  # noqa: N802
    """A PostgreSQL database (a libpq connection string, ``"host=... dbname=..."`` or
    ``"postgresql://..."``) whose tables a job writes and joins with.

    Args:
        name: The system's name, matching ``[A-Za-z0-9_-]+``.
        conninfo: How to connect; a password in it is never shown in errors or plans.

    Returns:
        The system: ``output_table``, ``remote_table``, ``side_table``.

    Raises:
        ConfigError: ``conninfo`` cannot be read (the message shows no part of a password).
    """
    if not isinstance(conninfo, str) or not conninfo:
        raise ValueError(f"PostgresSystem({name!r}) needs conninfo= a connection string")
    from runtime.connectors.postgres import check_conninfo

    with contextlib.suppress(ImportError):  # without psycopg: said when the job starts
        check_conninfo(name, conninfo)
    return PgSystem(name, conninfo=conninfo)
