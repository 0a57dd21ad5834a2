"""PostgreSQL outputs and tables (psycopg 3), built on ``samza_dsl.connectors`` alone.

The output (``PostgresSink``, one per task) writes each task's rows and the input positions they
cover in ONE database transaction per commit of the task:

- ``write`` makes a row of the message (the declared columns) and buffers it; every
  ``batch_rows`` rows the batch goes into the task's open transaction with COPY (insert), or
  COPY into a staging table and ``INSERT ... ON CONFLICT (key) DO UPDATE`` (upsert), on a
  thread of the sink's own, the message waiting for the batch before it where that is still
  under way (back-pressure); ``write_batch`` does the same for a run of messages, its rows
  made in one pass;
- ``prepare`` writes the rest, and the task's input positions (``SinkContext.offsets``: the
  last offset of each input partition the checkpoint being written covers) into the positions
  table ``samza_dsl_positions``, and commits: rows and positions are visible together or not
  at all;
- ``recover`` reads the task's positions back from the database. The database may be ahead of
  the job's checkpoint (a crash after the database's commit, before the checkpoint): the
  restart then replays messages whose rows the database already holds, and the sink skips
  every write caused by an input message at or before the database's position of its
  partition (``SinkContext.source``), until the checkpoint has passed that position. So each
  input message's rows are in the table once, whatever ``job.processing.guarantee`` says.

A lost connection is retried, with the transaction since the last commit written again from
the rows the sink keeps until its commit, for at most ``retry_seconds``; then the task stops
with one line naming the output, the connection and what failed (the checkpoint stays before
the rows: a restart writes them again).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from runtime.connectors.postgres_errors import (
    check_conninfo,
    describe_conninfo,
    driver_error,
    problem,
    refusal,
    refused,
)
from samza_dsl.connectors import Replays, Sink, SinkContext, SinkError, Sources
from samza_dsl.errors import RemoteTableError
from samza_dsl.remote import RemoteCallError

__all__ = ["PostgresSink", "PostgresOptions", "PostgresReader", "POSITIONS_TABLE",
           "describe_conninfo", "check_conninfo"]

_log = logging.getLogger("samza_dsl.connectors.postgres")

POSITIONS_TABLE = "samza_dsl_positions"
#: how long abort and close wait for the sink's thread, cancelling what it waits on meanwhile
_SETTLE_S = 5.0


@dataclass(frozen=True)
class PostgresOptions:
    """What a PostgreSQL output is (``samza_dsl.postgres``).

    Attributes:
        conninfo: The libpq connection string.
        table: The table, possibly schema-qualified (``"shop.orders"``).
        columns: ``{column: field}``: a field of the row (``default_row``) by name, or a
            function of the message.
        key: The key columns (upsert: ``ON CONFLICT (key)``).
        upsert: Update rows whose key is there (else plain inserts).
        batch_rows: Rows per COPY.
        retry_seconds: How long a lost connection is retried before the task stops.
        to_row: Makes a row (a dict) of a message; by default ``default_row``.
    """

    conninfo: str = field(repr=False)  # it may hold a password
    table: str
    columns: Mapping[str, Any] = field(compare=False)
    key: tuple[str, ...] = ()
    upsert: bool = False
    batch_rows: int = 5000
    retry_seconds: float = 30.0
    to_row: Callable[[Any], Any] | None = field(default=None, compare=False)

    def __call__(self, ctx: SinkContext) -> Sink:
        return PostgresSink(self)


def _rows_maker(options: PostgresOptions
                ) -> Callable[[list[Any]], list[tuple[Any, ...]] | None] | None:
    """messages -> their rows in one pass, where the columns are two or more fields of the row
    by name and the rows are the messages as they are (no ``to_row``): for a run of dicts
    holding every field, the tuples made in C; None for any other run (``_row_maker`` makes
    each row then). None where the columns are not such fields."""
    specs = list(options.columns.values())
    if options.to_row is not None or len(specs) < 2 or \
            not all(isinstance(s, str) for s in specs):
        return None
    get = itemgetter(*specs)

    def rows(messages: list[Any]) -> list[tuple[Any, ...]] | None:
        if set(map(type, messages)) != {dict}:
            return None
        try:
            return list(map(get, messages))
        except KeyError:  # a field missing: None there, as _row_maker gives
            return None
    return rows


def _row_maker(options: PostgresOptions) -> Callable[[Any], tuple[Any, ...]]:
    """message -> the row's tuple, in the order of ``options.columns``."""
    from runtime.connectors.files import default_row

    to_row = options.to_row or default_row
    specs = list(options.columns.values())
    if all(isinstance(s, str) for s in specs):
        names = tuple(specs)
        if len(names) == 1:
            only = names[0]
            return lambda m: (to_row(m).get(only),)

        def by_name(m: Any) -> tuple[Any, ...]:
            return tuple(map(to_row(m).get, names))
        return by_name
    def field_of(name: str) -> Callable[[Any, Any], Any]:
        return lambda m, row: row.get(name)

    def made_by(fn: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
        return lambda m, row: fn(m)

    getters = [field_of(s) if isinstance(s, str) else made_by(s) for s in specs]

    def mixed(m: Any) -> tuple[Any, ...]:
        row = to_row(m)
        return tuple(g(m, row) for g in getters)
    return mixed


def _retrieved(done: asyncio.Future[Any]) -> None:
    if not done.cancelled():
        done.exception()


async def _each(waits: list[Any]) -> None:
    for w in waits:
        await w


class PostgresSink(Sink):
    """One task's rows into a PostgreSQL table, exactly once (the module's docstring)."""

    def __init__(self, options: PostgresOptions) -> None:
        self.options = options
        self.row = _row_maker(options)
        self.rows_of = _rows_maker(options)
        #: rows since the last commit not yet sent; those sent in the open transaction
        self.rows: list[tuple[Any, ...]] = []
        self.sent: list[list[tuple[Any, ...]]] = []
        #: per (stream, partition), the last offset whose rows the database holds
        self.positions: dict[tuple[str, int], int] = {}
        #: what the restart must skip: the positions the database holds past the checkpoint
        self.replays = Replays()
        self.conn: Any = None
        #: the batch on its way to the database (awaited by the next batch and by prepare)
        self._inflight: Any = None
        #: the marker of a commit whose outcome a lost connection hid (None: none)
        self._token: int | None = None
        names = list(options.columns)
        self._key_at = [names.index(k) for k in options.key]
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.ctx: SinkContext | None = None
        self.where = ""
        #: abort or close waits for the sink's thread (``_settle``)
        self._stopping = False

    # -- the connector API ---------------------------------------------------------------------

    def open(self, ctx: SinkContext) -> None:
        import psycopg  # noqa: F401 - the extra is there, said at start
        from psycopg import sql

        self.ctx = ctx
        o = self.options
        self.where = (f"PostgreSQL output {ctx.stream_id!r} (table {o.table} at "
                      f"{describe_conninfo(o.conninfo)})")
        table = sql.Identifier(*o.table.split("."))
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in o.columns)
        self._stage = sql.Identifier(f"samza_dsl_stage_{os.getpid()}_{id(self):x}")
        self._copy = sql.SQL("COPY {} ({}) FROM STDIN").format(
            self._stage if o.upsert else table, cols)
        if o.upsert:
            updates = [c for c in o.columns if c not in o.key]
            conflict = sql.SQL(", ").join(sql.Identifier(c) for c in o.key)
            action = sql.SQL("DO NOTHING") if not updates else sql.SQL("DO UPDATE SET ") + \
                sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c))
                                   for c in updates)
            self._merge = sql.SQL("INSERT INTO {t} ({c}) SELECT {c} FROM {s} "
                                  "ON CONFLICT ({k}) ").format(
                t=table, c=cols, s=self._stage, k=conflict) + action
            self._make_stage = sql.SQL(
                "CREATE TEMP TABLE IF NOT EXISTS {s} AS SELECT {c} FROM {t} WITH NO DATA"
            ).format(s=self._stage, c=cols, t=table)
            self._clear_stage = sql.SQL("TRUNCATE {}").format(self._stage)
        self.pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"postgres-{ctx.task_id}")

    def recover(self, committed: Any) -> None:
        assert self.ctx is not None
        ctx = self.ctx
        self._retrying("recover", self._read_positions)
        self.replays = Replays(self.positions)
        if self.replays:
            _log.info("%s, task %s: the database holds rows up to %s", self.where,
                      ctx.task_name, self.replays)

    def write(self, partition: int, message: Any) -> Any:
        if self.replays and self.replays.held(self.ctx.source() if self.ctx is not None else None):
            return None  # its rows are in the database already
        rows = self.rows
        rows.append(self.row(message))
        if len(rows) >= self.options.batch_rows:
            self.rows = []
            return self._send(rows)
        return None

    def write_batch(self, partition: int, messages: list[Any], sources: Sources | None) -> Any:
        messages = self.replays.unheld(messages, sources)
        made = self.rows_of(messages) if self.rows_of is not None else None
        rows = self.rows
        rows += map(self.row, messages) if made is None else made
        size = self.options.batch_rows
        if len(rows) < size:
            return None
        full = len(rows) - len(rows) % size
        self.rows = rows[full:]
        waits = [w for w in (self._send(rows[k:k + size]) for k in range(0, full, size))
                 if w is not None]
        return waits[0] if len(waits) == 1 else (_each(waits) if waits else None)

    def _send(self, rows: list[tuple[Any, ...]]) -> Any:
        """A full batch on its way while the task goes on; what the caller waits for: the
        batch before it, where it is still under way (or failed: raised here)."""
        before, self._inflight = self._inflight, self._run(self._send_batch, rows)
        if before is None:
            return None
        if before.done() and not before.cancelled():
            before.result()  # its error, if any
            return None
        return before

    async def prepare(self, checkpoint_id: int) -> Any:
        assert self.ctx is not None
        covered = dict(self.ctx.offsets())
        rows, self.rows = self.rows, []
        if self._inflight is not None:
            before, self._inflight = self._inflight, None
            await before
        return await self._run(self._commit_sync, rows, covered, checkpoint_id)

    def commit(self, checkpoint_id: int) -> None:
        return None  # the database's commit was the prepare's

    def abort(self) -> None:
        self.rows = []
        if self._inflight is not None:  # the pool runs it before the rollback below
            self._inflight.cancel()  # its outcome is not wanted
            self._inflight = None
        if self.pool is not None:
            self._settle(self.pool.submit(self._rollback), "abort")

    def close(self) -> None:
        if self.pool is not None:
            settled = self._settle(self.pool.submit(self._disconnect), "close")
            self.pool.shutdown(wait=settled)
            self.pool = None
        if self.replays.skipped:
            _log.info("%s: skipped %d rows the database held already", self.where,
                      self.replays.skipped)

    def _settle(self, step: concurrent.futures.Future[Any], name: str) -> bool:
        """Waits for ``step``, queued on the sink's thread behind what it does now. A statement
        that does not return there (a lock another session holds, a database that does not
        answer) is cancelled on the server, and not tried again; after ``_SETTLE_S`` the
        thread is left behind (False), its transaction to the server's rollback."""
        self._stopping = True
        deadline = time.monotonic() + _SETTLE_S
        wait = 0.1  # then cancel: what runs there is dropped anyway
        while True:
            try:
                step.result(timeout=wait)
                self._stopping = False
                return True
            except concurrent.futures.TimeoutError:
                pass
            if time.monotonic() >= deadline:
                _log.warning("%s: %s in task %r: the sink's connection did not answer for %g s; "
                             "it is left behind", self.where, name,
                             self.ctx.task_name if self.ctx else "?", _SETTLE_S)
                return False
            conn, wait = self.conn, 0.5
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.cancel()

    # -- on the sink's thread ----------------------------------------------------------------

    def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        assert self.pool is not None
        done = asyncio.wrap_future(self.pool.submit(self._retrying, fn.__name__, fn, *args))
        # its error goes to whoever awaits it; one the task no longer awaits (it failed
        # already, and abort dropped the batch) is not reported again as never retrieved
        done.add_done_callback(_retrieved)
        return done

    def _connect(self) -> Any:
        import psycopg

        if self._stopping:  # a statement cancelled by abort or close is not sent again
            raise SinkError(f"{self.where}: stopped while a statement waited")
        conn = psycopg.connect(self.options.conninfo)
        if self.options.upsert:
            conn.execute(self._make_stage)
        return conn

    def _disconnect(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _rollback(self) -> None:
        self.sent = []
        if self.conn is None:
            return
        try:
            self.conn.rollback()
        except Exception:
            self._disconnect()

    def _retrying(self, step: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn`` with a connection; a lost connection is made again and the open transaction
        written again, for at most ``retry_seconds``. A refusal (``refused``) is not retried."""
        import psycopg

        o = self.options
        ctx = self.ctx
        task = ctx.task_name if ctx is not None else "?"

        def stop(what: str) -> SinkError:
            return SinkError(f"{self.where} failed in task {task!r}: {what}",
                             stream=ctx.stream_id if ctx else None,
                             task=ctx.task_name if ctx else None, step=step)

        deadline = time.monotonic() + o.retry_seconds
        attempt = 0
        while True:
            attempt += 1
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = self._connect()
                    if fn != self._read_positions:
                        self._resend()
                return fn(*args)
            except psycopg.Error as exc:
                if refused(exc):
                    self._disconnect()
                    self._token = None
                    needs = (f"INSERT{', SELECT and UPDATE' if o.upsert else ''} on table "
                             f"{o.table}, and CREATE on its database's public schema (the "
                             f"positions table {POSITIONS_TABLE})")
                    raise refusal(exc, o.conninfo, ctx.system if ctx else "?",
                                  f"{self.where}, task {task!r}", needs) from None
                if not isinstance(exc, psycopg.OperationalError):
                    said = problem(exc, o.conninfo, o.table, list(o.columns))
                    self._rollback()
                    self._token = None
                    raise stop(said) from None
                self._disconnect()
                if self._stopping:  # cancelled by abort or close: not tried again
                    raise SinkError(f"{self.where}: stopped while a statement waited") from None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise stop(f"the database did not answer for {o.retry_seconds:g} s "
                               f"({attempt} attempts): {driver_error(exc, o.conninfo)}; the "
                               f"checkpoint stays before these rows, so a restart writes them "
                               f"again") from None
                pause = min(left, 0.1 * 2 ** min(attempt, 5) * (0.5 + random.random() / 2))
                _log.warning("%s: %s; trying again in %.2f s", self.where,
                             driver_error(exc, o.conninfo), pause)
                time.sleep(pause)

    def _resend(self) -> None:
        """A new connection: the batches the lost transaction held, again."""
        for batch in self.sent:
            if batch:
                self._copy_rows(batch)

    def _copy_rows(self, rows: Sequence[tuple[Any, ...]]) -> None:
        cur = self.conn.cursor()
        if self.options.upsert:  # the last row of a key wins (ON CONFLICT takes a key once)
            key_at = self._key_at
            rows = list({tuple(r[i] for i in key_at): r for r in rows}.values())
        with cur.copy(self._copy) as copy:
            write_row = copy.write_row
            for r in rows:
                write_row(r)
        if self.options.upsert:
            cur.execute(self._merge)
            cur.execute(self._clear_stage)

    def _send_batch(self, rows: list[tuple[Any, ...]]) -> None:
        self._copy_rows(rows)
        self.sent.append(rows)  # kept until the commit: a new connection sends it again

    def _commit_sync(self, rows: list[tuple[Any, ...]], covered: dict[tuple[str, int], int],
                     checkpoint_id: int) -> int:
        """The last rows, the positions they reach, and the commit: one transaction. Each
        commit also writes a random marker (partition -1 of stream ''): where the connection
        was lost during the commit, the marker read back says whether it happened."""
        if self._token is not None and self._marker() == self._token:
            self.conn.rollback()  # it did: what the new connection sent again is dropped
        else:
            self._token = random.getrandbits(62)
            if rows:
                self._copy_rows(rows)
            self._write_positions(covered, checkpoint_id, self._token)
            self.conn.commit()
        self._token = None
        self.sent = []
        self._advance(covered)
        return checkpoint_id

    def _marker(self) -> int | None:
        assert self.ctx is not None
        ctx = self.ctx
        row = self.conn.execute(
            f"SELECT last_offset FROM {POSITIONS_TABLE} WHERE job = %s AND output = %s "
            f"AND task = %s AND stream = '' AND part = -1",
            (ctx.job_name, ctx.stream_id, ctx.task_name)).fetchone()
        return None if row is None else int(row[0])

    def _write_positions(self, covered: dict[tuple[str, int], int], checkpoint_id: int,
                         token: int) -> None:
        assert self.ctx is not None
        ctx = self.ctx
        merged = dict(self.positions)
        for sp, o in covered.items():
            if o > merged.get(sp, -1):
                merged[sp] = o
        changed = [(s, p, o) for (s, p), o in merged.items() if self.positions.get((s, p)) != o]
        changed.append(("", -1, token))
        if changed:
            self.conn.cursor().executemany(
                f"INSERT INTO {POSITIONS_TABLE} AS p (job, output, task, stream, part, "
                f"last_offset, checkpoint) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                f"ON CONFLICT (job, output, task, stream, part) DO UPDATE SET "
                f"last_offset = CASE WHEN p.part < 0 THEN EXCLUDED.last_offset ELSE "
                f"GREATEST(p.last_offset, EXCLUDED.last_offset) END, "
                f"checkpoint = EXCLUDED.checkpoint",
                [(ctx.job_name, ctx.stream_id, ctx.task_name, s, p, o, checkpoint_id)
                 for s, p, o in changed])

    def _advance(self, covered: dict[tuple[str, int], int]) -> None:
        """After the database's commit: what it holds now."""
        for sp, o in covered.items():
            if o > self.positions.get(sp, -1):
                self.positions[sp] = o
        # the checkpoint has passed what the database held: nothing more to skip there
        self.replays.passed(covered)

    def _read_positions(self) -> None:
        assert self.ctx is not None
        ctx = self.ctx
        conn = self.conn
        with conn.transaction():
            # tasks of several processes make the table at once: one at a time
            conn.execute("SELECT pg_advisory_xact_lock(7230514401)")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {POSITIONS_TABLE} (job text, output text, "
                f"task text, stream text, part int, last_offset bigint, checkpoint bigint, "
                f"PRIMARY KEY (job, output, task, stream, part))")
        rows = conn.execute(
            f"SELECT stream, part, last_offset FROM {POSITIONS_TABLE} "
            f"WHERE job = %s AND output = %s AND task = %s",
            (ctx.job_name, ctx.stream_id, ctx.task_name)).fetchall()
        conn.commit()
        self.positions = {(s, p): o for s, p, o in rows if p >= 0}


class PostgresReader:
    """Reads of a PostgreSQL table by key, for ``app.remote_table`` (``join_table``,
    ``ctx.table(name).get``): ``read`` and ``read_all`` (one ``= ANY`` query per batch), on an
    async connection per process and event loop; a lost connection is a ``RemoteCallError``
    (which the table's ``RetryPolicy`` retries).

    With ``snapshot=True`` the whole table is read once, at the first read of a process, and
    every read answers from it (a table of reference data loaded at start).
    """

    def __init__(self, conninfo: str, table: str, key: str, columns: Sequence[str] | None,
                 snapshot: bool = False, system: str = "postgres") -> None:
        self.conninfo = conninfo
        self.system = system
        self.table = table
        self.key = key
        self.columns = tuple(columns) if columns else None
        self.snapshot = snapshot
        self._conns: dict[tuple[int, int], Any] = {}
        #: queries sent by this process
        self.queries = 0
        self._rows: dict[Any, Any] | None = None
        self._loading: asyncio.Future[None] | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PostgresReader) and (
            self.conninfo, self.table, self.key, self.columns, self.snapshot) == (
            other.conninfo, other.table, other.key, other.columns, other.snapshot)

    def __hash__(self) -> int:
        return hash((self.conninfo, self.table, self.key, self.columns, self.snapshot))

    def _select(self, where: str) -> Any:
        from psycopg import sql

        cols = sql.SQL("*") if self.columns is None else sql.SQL(", ").join(
            sql.Identifier(c) for c in (self.key, *self.columns))
        return sql.SQL("SELECT {} FROM {}").format(
            cols, sql.Identifier(*self.table.split("."))) + sql.SQL(where).format(
            sql.Identifier(self.key))

    async def _conn(self) -> Any:
        import psycopg
        from psycopg.rows import dict_row

        slot = (os.getpid(), id(asyncio.get_running_loop()))
        conn = self._conns.get(slot)
        if conn is None or conn.closed:
            conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True,
                                                         row_factory=dict_row)
            self._conns[slot] = conn
        return conn

    def _value(self, row: dict[str, Any]) -> Any:
        if self.columns is not None and len(self.columns) == 1:
            return row[self.columns[0]]
        return {k: v for k, v in row.items() if k != self.key}

    async def _query(self, query: Any, params: Any) -> list[dict[str, Any]]:
        import psycopg

        where = f"PostgreSQL table {self.table} at {describe_conninfo(self.conninfo)}"
        try:
            conn = await self._conn()
            self.queries += 1
            cur = await conn.execute(query, params)
            rows: list[dict[str, Any]] = await cur.fetchall()
            return rows
        except psycopg.Error as exc:
            if refused(exc):
                raise refusal(exc, self.conninfo, self.system, where,
                              f"SELECT on table {self.table}") from None
            if not isinstance(exc, psycopg.OperationalError):
                cols = [self.key, *(self.columns or ())]
                raise RemoteTableError(
                    f"{where}: {problem(exc, self.conninfo, self.table, cols)}",
                    table=self.table, call="read") from None
            slot = (os.getpid(), id(asyncio.get_running_loop()))
            conn = self._conns.pop(slot, None)
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
            raise RemoteCallError(f"{where}: {driver_error(exc, self.conninfo)}") from None

    async def _load(self) -> dict[Any, Any]:
        if self._rows is None:
            if self._loading is None:
                self._loading = asyncio.get_running_loop().create_future()
                try:
                    rows = await self._query(self._select(""), None)
                    self._rows = {r[self.key]: self._value(r) for r in rows}
                    self._loading.set_result(None)
                except BaseException as exc:
                    self._loading.set_exception(exc)
                    self._loading.exception()  # retrieved: the next read tries again
                    self._loading = None
                    raise
            else:
                await asyncio.shield(self._loading)
        assert self._rows is not None
        return self._rows

    async def read(self, key: Any) -> Any:
        """The row of ``key`` (its columns but the key; one column's value where one is
        named), or None."""
        if self.snapshot:
            return (await self._load()).get(key)
        rows = await self._query(self._select(" WHERE {} = %s"), (key,))
        return self._value(rows[0]) if rows else None

    async def read_all(self, keys: list[Any]) -> dict[Any, Any]:
        """The rows of ``keys`` that the table has, by key: one query."""
        if self.snapshot:
            loaded = await self._load()
            return {k: loaded[k] for k in keys if k in loaded}
        rows = await self._query(self._select(" WHERE {} = ANY(%s)"), (list(keys),))
        return {r[self.key]: self._value(r) for r in rows}

    async def aclose(self) -> None:
        """Close this process's connections of the running loop."""
        for slot, conn in list(self._conns.items()):
            if slot[0] == os.getpid():
                self._conns.pop(slot, None)
                with contextlib.suppress(Exception):
                    await conn.close()
