"""Files outputs: Parquet and JSON Lines files in a folder, committed with the job's checkpoint.

Each task writes its own files, ``part-<task>-<seq>.parquet`` (or ``.jsonl``), under a hidden
temporary name until the task's checkpoint covering their rows is written, then renamed: a
reader of the folder sees whole, committed files only, and a crash neither loses rows nor writes
them twice, whatever ``job.processing.guarantee`` says (docs/connectors.md). Files are closed
by size (``max_bytes``), by age (``max_seconds``) and at each commit.

Parquet needs pyarrow (``pip install 'samza-dsl[parquet]'``).

>>> files = FileSystem("files", path="out")
>>> clicks = files.parquet("clicks", schema={"user": "string", "n": "int64"},
...                        max_bytes=64 << 20, max_seconds=timedelta(minutes=5))
>>> clicks.stream_id, clicks.description
('clicks', "parquet files in 'out/clicks'")
>>> files.jsonl("events").sink.folder
'out/events'
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .connectors import SinkOutput, SinkSystem

__all__ = ["FileSystem", "FilesSystem"]


def _seconds(value: timedelta | float | None, what: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
        raise ValueError(f"{what} must be a positive timedelta or seconds, got {value!r}")
    return float(seconds)


@dataclass(frozen=True)
class FilesSystem(SinkSystem):
    """A folder of files outputs; make one with ``FileSystem``. Each output is a subfolder,
    named by its ``physical_name`` (by default its stream id)."""

    path: str = "."

    def _output(self, fmt: str, stream_id: str, physical_name: str | None,
                max_bytes: int, max_seconds: timedelta | float | None,
                to_row: Callable[[Any], Any] | None, **extra: Any) -> SinkOutput:
        from runtime.connectors.files import FileOptions  # I/O lives in the runtime

        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"output {stream_id!r}: max_bytes must be an int >= 1, got "
                             f"{max_bytes!r}")
        if to_row is not None and not callable(to_row):
            raise TypeError(f"output {stream_id!r}: to_row must be callable (message -> dict)")
        folder = os.path.join(self.path, physical_name or stream_id)
        options = FileOptions(folder, fmt, max_bytes,
                              _seconds(max_seconds, f"output {stream_id!r}: max_seconds"),
                              to_row, **extra)
        return SinkOutput(self, stream_id, None, physical_name or stream_id, 1, sink=options,
                          description=f"{fmt} files in {folder!r}")

    def parquet(self, stream_id: str, *, schema: Any = None,
                max_bytes: int = 128 << 20, max_seconds: timedelta | float | None = None,
                to_row: Callable[[Any], Any] | None = None, compression: str = "zstd",
                row_group_rows: int = 65536, physical_name: str | None = None) -> SinkOutput:
        """An output of Parquet files.

        Args:
            stream_id: The stream's id in the application.
            schema: A ``pyarrow.Schema``, or ``{column: type name}`` (``"int64"``,
                ``"string"``, ``"double"``, ``"bool"``...); None: each file's from its first
                row group (declare it where a column may be all None in a row group).
            max_bytes: Close a file once it holds this many bytes (checked after each row
                group).
            max_seconds: Close a file once it has been open this long.
            to_row: ``to_row(message) -> dict``; by default a dict as it is, ``KV(k, dict)``
                as the dict with ``key``, others as ``{"key", "value"}`` or ``{"value"}``.
            compression: The Parquet codec.
            row_group_rows: Rows per row group.
            physical_name: The subfolder's name; by default ``stream_id``.

        Returns:
            The ``SinkOutput``, for ``app.output``.
        """
        if isinstance(row_group_rows, bool) or not isinstance(row_group_rows, int) \
                or row_group_rows < 1:
            raise ValueError(f"output {stream_id!r}: row_group_rows must be an int >= 1")
        return self._output("parquet", stream_id, physical_name, max_bytes, max_seconds, to_row,
                            schema=schema, compression=compression,
                            row_group_rows=row_group_rows)

    def jsonl(self, stream_id: str, *, max_bytes: int = 128 << 20,
              max_seconds: timedelta | float | None = None,
              to_row: Callable[[Any], Any] | None = None,
              physical_name: str | None = None) -> SinkOutput:
        """An output of JSON Lines files: one row per line (see ``parquet`` for the
        arguments)."""
        return self._output("jsonl", stream_id, physical_name, max_bytes, max_seconds, to_row)


def FileSystem(name: str = "files", *, path: str) -> FilesSystem:  # noqa: N802 - factory
    """Files outputs under folder ``path`` (relative: to the job's working directory).

    Args:
        name: The system's name, matching ``[A-Za-z0-9_-]+``.
        path: The folder; each output is a subfolder of it.

    Returns:
        The system; its ``parquet()`` and ``jsonl()`` describe outputs.
    """
    if not isinstance(path, str | os.PathLike) or not str(path):
        raise ValueError(f"FileSystem({name!r}) needs path= a folder, got {path!r}")
    return FilesSystem(name, path=os.fspath(path))

