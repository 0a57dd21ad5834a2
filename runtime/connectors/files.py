"""Files committed with the job's checkpoint: Parquet (pyarrow) and JSON Lines outputs.

Built on ``samza_dsl.connectors`` alone. Each task writes its own sequence of files in the
output's folder, ``part-<task>-<seq>.<ext>``; a file is written under a hidden temporary name,
``.part-<task>-<seq>.<ext>.inprogress``, and renamed to its name only once the task's checkpoint
that covers its rows is durable:

- ``write`` adds a row to the open file (opening one when there is none), and closes the file
  once it holds ``max_bytes`` or is ``max_seconds`` old: it then waits, complete and fsynced,
  under its temporary name; ``write_batch`` adds a run's rows the same way (a file's age
  checked once per run);
- ``prepare(checkpoint_id)`` closes the open file too, fsyncs the files and the folder, and
  returns the highest sequence written so far: the checkpoint records it;
- ``commit`` renames the files that checkpoint covers and fsyncs the folder;
- ``recover(committed)``, on the task's next start: a temporary file whose sequence the last
  checkpoint covers is renamed (the crash came between the checkpoint and the rename), any
  other is deleted (its rows were not covered by any checkpoint, so the restart writes them
  again, into files of new sequences).

A reader of the folder sees whole files only, each once, and only files whose rows a
checkpoint covers; a crash at any point neither loses rows nor writes them twice.
"""

from __future__ import annotations

import abc
import contextlib
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from samza_dsl import KV
from samza_dsl.connectors import Committed, Sink, SinkContext, SinkError, Sources

__all__ = ["FileSink", "ParquetSink", "JsonLinesSink", "FileOptions", "default_row"]

_TMP = ".inprogress"


def default_row(message: Any) -> Any:
    """A message as a row: a dict as it is; ``KV(k, dict)`` as the dict with ``key`` added;
    ``KV(k, v)`` as ``{"key": k, "value": v}``; anything else as ``{"value": m}``.

    >>> default_row({"a": 1}), default_row(KV("k", {"a": 1})), default_row(KV("k", 2))
    ({'a': 1}, {'key': 'k', 'a': 1}, {'key': 'k', 'value': 2})
    """
    if type(message) is dict:
        return message
    if isinstance(message, KV):
        if isinstance(message.value, dict):
            return {"key": message.key, **message.value}
        return {"key": message.key, "value": message.value}
    if isinstance(message, Mapping):
        return dict(message)
    return {"value": message}


@dataclass(frozen=True)
class FileOptions:
    """What a files output is: its folder, format and when a file is closed.

    Attributes:
        folder: Where the files land.
        format: ``"parquet"`` or ``"jsonl"``.
        max_bytes: A file is closed once it holds at least this many bytes (Parquet: checked
            after each row group).
        max_seconds: A file is closed once it has been open this long (None: only by size and
            at commits).
        to_row: Makes a row (a dict) of a message; by default ``default_row``.
        schema: Parquet: the files' ``pyarrow.Schema`` (None: inferred from each file's first
            row group).
        compression: Parquet: the codec (``"zstd"``, ``"snappy"``, ``"none"``...).
        row_group_rows: Parquet: rows per row group.
    """

    folder: str
    format: str
    max_bytes: int = 128 * 1024 * 1024
    max_seconds: float | None = None
    to_row: Callable[[Any], Any] | None = field(default=None, compare=False)
    schema: Any = field(default=None, compare=False)
    compression: str = "zstd"
    row_group_rows: int = 65536

    def __call__(self, ctx: SinkContext) -> Sink:
        """The sink of one task (``SinkOutput.sink``)."""
        if self.format == "parquet":
            return ParquetSink(self)
        return JsonLinesSink(self)


def _fsync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileSink(Sink, metaclass=abc.ABCMeta):
    """Rolls files and commits them with the checkpoint; a format gives ``_open_file``,
    ``_add``, ``_spill`` (rows buffered into the file), ``_size`` and ``_close_file``."""

    ext = ""

    def __init__(self, options: FileOptions) -> None:
        self.options = options
        self.folder = options.folder
        self.to_row = options.to_row or default_row
        self.task_id = ""
        #: the sequence of the next file
        self.seq = 0
        #: the open file's sequence (None: none open) and when it was opened
        self.current: int | None = None
        self.opened_at = 0.0
        #: closed and fsynced files not yet covered by a prepare, then those a prepare covers
        self.closed: list[int] = []
        self.prepared: list[int] = []
        #: the highest sequence a prepare covered
        self.high = -1
        self.where = ""

    # -- names -------------------------------------------------------------------------------

    def name(self, seq: int) -> str:
        return f"part-{self.task_id}-{seq:06d}{self.ext}"

    def tmp(self, seq: int) -> str:
        return os.path.join(self.folder, f".{self.name(seq)}{_TMP}")

    def final(self, seq: int) -> str:
        return os.path.join(self.folder, self.name(seq))

    # -- the connector API ---------------------------------------------------------------------

    def open(self, ctx: SinkContext) -> None:
        self.task_id = ctx.task_id
        self.where = f"{self.options.format} files of output {ctx.stream_id!r} in {self.folder}"
        try:
            os.makedirs(self.folder, exist_ok=True)
        except OSError as exc:
            raise SinkError(f"{self.where}: cannot make the folder: {exc}; give the output a "
                            f"folder the job may write", stream=ctx.stream_id,
                            task=ctx.task_name) from exc

    def recover(self, committed: Committed) -> None:
        covered = committed.position if isinstance(committed.position, int) else -1
        pattern = re.compile(rf"^(\.)?part-{re.escape(self.task_id)}-(\d+)"
                             rf"{re.escape(self.ext)}({re.escape(_TMP)})?$")
        final_high = -1
        renamed = False
        for entry in os.listdir(self.folder):
            m = pattern.match(entry)
            if m is None or bool(m.group(1)) != bool(m.group(3)):
                continue
            seq = int(m.group(2))
            if not m.group(3):
                final_high = max(final_high, seq)
            elif seq <= covered:  # the checkpoint holds it: the rename it missed
                os.replace(os.path.join(self.folder, entry), self.final(seq))
                final_high = max(final_high, seq)
                renamed = True
            else:  # no checkpoint holds its rows: they are written again
                os.remove(os.path.join(self.folder, entry))
        if renamed:
            _fsync_dir(self.folder)
        self.high = covered
        # past every file of this task: a job started afresh never overwrites a committed file
        self.seq = max(covered, final_high) + 1

    def write(self, partition: int, message: Any) -> None:
        self._ready()
        self._add(self.to_row(message))

    def write_batch(self, partition: int, messages: list[Any], sources: Sources | None) -> None:
        """The rows of a run of messages, in order: as ``write`` each, the file's age checked
        once."""
        self._ready()
        self._add_rows(self.rows_of(messages))

    def rows_of(self, messages: list[Any]) -> list[Any]:
        """The rows of ``messages``: ``to_row`` of each (a list of dicts is its own rows)."""
        if self.to_row is default_row and set(map(type, messages)) == {dict}:
            return messages
        return list(map(self.to_row, messages))

    def _ready(self) -> None:
        """An open file to add to: a new one where none is open or it is ``max_seconds`` old."""
        if self.current is None:
            self._start()
        elif self.options.max_seconds is not None \
                and time.monotonic() - self.opened_at >= self.options.max_seconds:
            self._roll()
            self._start()

    def _add_rows(self, rows: list[Any]) -> None:
        """``_add`` of each row, a file opened again where one closed by size."""
        for row in rows:
            if self.current is None:
                self._start()
            self._add(row)

    def prepare(self, checkpoint_id: int) -> int:
        if self.current is not None:
            self._roll()
        if self.closed:
            _fsync_dir(self.folder)  # the temporary names outlive a crash
            self.prepared += self.closed
            self.high = self.closed[-1]
            self.closed = []
        return self.high

    def commit(self, checkpoint_id: int) -> None:
        if not self.prepared:
            return
        for seq in self.prepared:
            os.replace(self.tmp(seq), self.final(seq))
        _fsync_dir(self.folder)
        self.prepared = []

    def abort(self) -> None:
        """The task failed: its open file is dropped (``recover`` deletes the rest)."""
        if self.current is not None:
            seq, self.current = self.current, None
            try:
                self._close_file()
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self.tmp(seq))

    def close(self) -> None:
        self.abort()  # a clean end commits first: nothing is open then

    # -- files -------------------------------------------------------------------------------

    def _start(self) -> None:
        self.current = self.seq
        self.seq += 1
        self.opened_at = time.monotonic()
        self._open_file(self.tmp(self.current))

    def _roll(self) -> None:
        """Close the open file: complete and fsynced, under its temporary name."""
        assert self.current is not None
        self._close_file()
        self.closed.append(self.current)
        self.current = None

    def _rolled_by_size(self) -> None:
        if self._size() >= self.options.max_bytes:
            self._roll()

    @abc.abstractmethod
    def _open_file(self, path: str) -> None:
        """What each file format does (JSON Lines, Parquet)."""

    @abc.abstractmethod
    def _add(self, row: Any) -> None:
        """What each file format does (JSON Lines, Parquet)."""

    @abc.abstractmethod
    def _size(self) -> int:
        """What each file format does (JSON Lines, Parquet)."""

    @abc.abstractmethod
    def _close_file(self) -> None:
        """What each file format does (JSON Lines, Parquet)."""


class JsonLinesSink(FileSink):
    """JSON Lines: one row per line, encoded by msgspec."""

    ext = ".jsonl"
    _SPILL = 1 << 20

    def __init__(self, options: FileOptions) -> None:
        super().__init__(options)
        import msgspec

        self._encode = msgspec.json.Encoder().encode
        self._file: Any = None
        self._buf = bytearray()
        self._written = 0

    def _open_file(self, path: str) -> None:
        self._file = open(path, "wb")  # noqa: SIM115 - closed by _close_file
        self._buf.clear()
        self._written = 0

    def _add(self, row: Any) -> None:
        buf = self._buf
        buf += self._encode(row)
        buf += b"\n"
        if len(buf) >= self._SPILL or self._written + len(buf) >= self.options.max_bytes:
            self._spill()
            if self._written >= self.options.max_bytes:
                self._roll()

    def _spill(self) -> None:
        self._file.write(self._buf)
        self._written += len(self._buf)
        self._buf.clear()

    def _size(self) -> int:
        return self._written + len(self._buf)

    def _close_file(self) -> None:
        f = self._file
        try:
            self._spill()
            f.flush()
            os.fsync(f.fileno())
        finally:
            self._file = None
            f.close()


class ParquetSink(FileSink):
    """Parquet through pyarrow's ``ParquetWriter``: rows gathered into row groups of
    ``row_group_rows``; the schema declared, or inferred from a file's first row group."""

    ext = ".parquet"

    def __init__(self, options: FileOptions) -> None:
        super().__init__(options)
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise SinkError("Parquet outputs need pyarrow: pip install 'samza-dsl[parquet]'"
                            ) from exc
        self._pa = pa
        self._pq = pq
        self._schema = _schema(pa, options.schema)
        #: the declared schema's fields as one struct type (``_table``)
        self._struct = pa.struct(list(self._schema)) if self._schema is not None and \
            len(self._schema) else None
        self._rows: list[Any] = []
        self._file: Any = None
        self._writer: Any = None
        self._path = ""

    def _open_file(self, path: str) -> None:
        self._file = open(path, "wb")  # noqa: SIM115 - closed by _close_file
        self._path = path
        self._writer = None
        self._rows = []

    def _add(self, row: Any) -> None:
        rows = self._rows
        rows.append(row)
        if len(rows) >= self.options.row_group_rows:
            self._spill()
            self._rolled_by_size()

    def write(self, partition: int, message: Any) -> None:
        # FileSink.write and _add in one call: a row's whole cost is this function
        if self.current is None or (self.options.max_seconds is not None and
                                    time.monotonic() - self.opened_at >= self.options.max_seconds):
            super().write(partition, message)
            return
        rows = self._rows
        rows.append(self.to_row(message))
        if len(rows) >= self.options.row_group_rows:
            self._spill()
            self._rolled_by_size()

    def _add_rows(self, rows: list[Any]) -> None:
        """The rows into row groups of ``row_group_rows``, as ``_add`` of each would."""
        group = self.options.row_group_rows
        k, n = 0, len(rows)
        while k < n:
            if self.current is None:  # closed by size after a row group
                self._start()
            buf = self._rows
            take = min(n - k, group - len(buf))
            if take == n and not buf:
                self._rows = buf = rows  # the run is the buffer
            else:
                buf += rows[k:k + take]
            k += take
            if len(buf) >= group:
                self._spill()
                self._rolled_by_size()

    def _table(self, rows: list[Any]) -> Any:
        """``pyarrow.Table.from_pylist(rows, schema=...)``; with a declared schema and rows that
        are dicts, the rows converted in C as one struct array of the schema's fields instead
        (the same table: a missing field null, other keys left out)."""
        pa, schema = self._pa, self._schema
        if self._struct is not None and set(map(type, rows)) == {dict}:
            try:
                batch = pa.RecordBatch.from_struct_array(pa.array(rows, type=self._struct))
                return pa.Table.from_batches([batch], schema=schema)
            except (pa.ArrowException, TypeError, ValueError):
                pass  # from_pylist says what does not fit
        return pa.Table.from_pylist(rows, schema=schema)

    def _spill(self) -> None:
        rows, self._rows = self._rows, []
        if not rows:
            return
        pa = self._pa
        try:
            table = self._table(rows)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise SinkError(f"{self.where}: rows do not fit the schema "
                            f"{self._schema or '(inferred)'}: {exc}; declare schema= on the "
                            f"output or fix to_row=") from exc
        if self._writer is None:
            schema = self._schema or table.schema
            self._schema = schema
            self._writer = self._pq.ParquetWriter(self._file, schema,
                                                  compression=self.options.compression)
        self._writer.write_table(table, row_group_size=len(rows))

    def _size(self) -> int:
        return int(self._file.tell())

    def _close_file(self) -> None:
        f = self._file
        try:
            self._spill()
            if self._writer is not None:
                self._writer.close()
            f.flush()
            os.fsync(f.fileno())
        finally:
            self._writer = self._file = None
            f.close()
        if self.options.schema is None:
            self._schema = None  # each file infers its own from its first row group


def _schema(pa: Any, schema: Any) -> Any:
    """A ``pyarrow.Schema`` from one, or from ``{name: pyarrow type or type name}``."""
    if schema is None or isinstance(schema, pa.Schema):
        return schema
    if isinstance(schema, Mapping):
        return pa.schema([(name, t if isinstance(t, pa.DataType) else pa.type_for_alias(t))
                          for name, t in schema.items()])
    raise SinkError(f"schema must be a pyarrow.Schema or {{name: type}}, got {schema!r}")
