"""Inputs of a reprocessing run: where rows come from and how a row becomes a message.

Every source becomes an RDD whose Spark partition ``i`` is source partition ``i`` and whose items
are records ``(stream id, sort ms, source partition, offset, clock ms, message)`` (see
``executor``). Rows are read inside executors; the driver only lists files and asks Kafka for
offsets.

A row becomes a message through the stream's serde: for a keyed stream (``KVSerde``) the row must
have ``key`` and ``value`` fields, giving ``KV(key, value)``; for any other stream the row itself
(a JSON value, or a Parquet row as a dict) is the message. A typed ``JsonSerde``/``MsgpackSerde``
converts it into its type, ``StringSerde`` needs a string and ``BytesSerde`` bytes; a row that does
not fit is an error naming the stream, the file and the row.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import msgspec

from runtime.spark.ahead import AheadCheck, ahead_check
from runtime.spark.shuffle import BATCH, Record, RowColumns, identity
from samza_dsl.connectors import SparkInput
from samza_dsl.errors import SamzaError
from samza_dsl.fields import field_path
from samza_dsl.kv import KV
from samza_dsl.serdes import BytesSerde, JsonSerde, KVSerde, MsgpackSerde, Serde, StringSerde

__all__ = ["FileInput", "Source", "resolve_source", "row_converter", "list_files"]

#: the most rows, and about the most bytes in Arrow, a pass reads from Parquet at once where it
#: keeps them as columns (a lone ``partition_by`` that carries them): fewer, larger batches
#: cost less a row, in Python and in the JVM
WIDE_BATCH = 65_536
READ_BYTES = 8 << 20


@dataclass(frozen=True)
class FileInput:
    """A JSON Lines or Parquet input (a file, a directory of part files, or a glob), or a Spark
    DataFrame. ``format`` is ``"jsonl"`` or ``"parquet"`` (by default, from the suffix);
    ``timestamp`` names a column holding the record timestamp in ms since the epoch.

    Example:
        >>> FileInput("exports/views/part-*.parquet", timestamp="ts_ms")
        FileInput(path='exports/views/part-*.parquet', format=None, timestamp='ts_ms')
        >>> # SparkRunner().reprocess(app, {"page-views": FileInput(...)}): read as Parquet
    """

    path: Any
    format: str | None = None
    timestamp: str | None = None


class SourceError(SamzaError):
    """An input that cannot be read, or a row that does not fit its stream's serde.

    Example:
        >>> from samza_dsl import StreamApplication
        >>> from samza_dsl.systems import MemorySystem
        >>> from runtime.spark import SparkRunner, spark_session
        >>> app, mem = StreamApplication("copy"), MemorySystem()
        >>> app.input(mem.input("in")).send_to(app.output(mem.output("out")))
        >>> SparkRunner(spark_session("local[2]")).reprocess(app, {"in": "no/such/file.jsonl"})
        Traceback (most recent call last):
        runtime.spark.sources.SourceError: input 'in': ...
    """


def row_converter(stream_id: str, serde: Serde[Any] | None) -> Callable[[Any], Any]:
    """Row -> message for a stream with ``serde``; raises ``ValueError`` saying what is wrong."""

    def part(what: str, s: Serde[Any] | None) -> Callable[[Any], Any] | None:
        if isinstance(s, JsonSerde | MsgpackSerde) and s.type is not Any:
            t = s.type

            def convert(v: Any) -> Any:
                try:
                    return msgspec.convert(v, t, strict=False)
                except msgspec.ValidationError as exc:
                    raise ValueError(f"the {what} does not fit {s.describe()}: {exc}") from None
            return convert
        if isinstance(s, StringSerde):
            def text(v: Any) -> Any:
                if v is not None and type(v) is not str:
                    raise ValueError(f"the {what} must be a string for {s.describe()}, "
                                     f"got {type(v).__name__} {v!r:.80}")
                return v
            return text
        if isinstance(s, BytesSerde):
            def raw(v: Any) -> Any:
                if v is not None and not isinstance(v, bytes | bytearray):
                    raise ValueError(f"the {what} must be bytes for {s.describe()}, "
                                     f"got {type(v).__name__} {v!r:.80}")
                return v
            return raw
        return None

    if isinstance(serde, KVSerde):
        kconv = part("key", serde.key_serde)
        vconv = part("value", serde.value_serde)

        def keyed(row: Any) -> Any:
            if type(row) is KV:
                k, v = row.key, row.value
            elif isinstance(row, dict) and "key" in row and "value" in row:
                k, v = row["key"], row["value"]
            else:
                raise ValueError(f"stream {stream_id!r} is keyed (KVSerde): a row needs 'key' and "
                                 f"'value' fields, got {row!r:.120}")
            return KV(kconv(k) if kconv else k, vconv(v) if vconv else v)
        return keyed
    conv = part("row", serde)
    return conv if conv is not None else identity


# -- listing files (driver side) --------------------------------------------------------------------

def _local(path: str) -> str | None:
    if path.startswith("file:"):
        rest = path[5:]
        return "/" + rest.lstrip("/") if rest.startswith("/") else rest
    if "://" in path:
        return None
    return path


def list_files(stream_id: str, path: Any) -> list[str]:
    """The data files of ``path`` (a file, a directory or a glob), sorted, as absolute paths (a
    relative path is resolved on the driver); hidden files and ``_SUCCESS`` markers are skipped.
    A missing or unreadable path is a ``SourceError``."""
    import glob

    p = os.fspath(path)
    local = _local(p)
    if local is None:
        return [p]  # another file system: Spark or pyarrow resolves it in the executors
    # resolved here, on the driver: executors run in directories of their own
    local = os.path.abspath(local)
    if any(c in local for c in "*?["):
        found = sorted(glob.glob(local))
    elif os.path.isdir(local):
        found = sorted(os.path.join(local, f) for f in os.listdir(local))
    elif os.path.exists(local):
        found = [local]
    else:
        raise SourceError(f"input {stream_id!r}: {p} does not exist; give an existing file or "
                          f"directory (--input {stream_id}=PATH)")
    files = [f for f in found if os.path.isfile(f)
             and not os.path.basename(f).startswith((".", "_"))]
    if not files and not found:
        raise SourceError(f"input {stream_id!r}: no files match {p}")
    for f in files:
        if not os.access(f, os.R_OK):
            raise SourceError(f"input {stream_id!r}: {f} is not readable; check its permissions")
    return files


def file_format(stream_id: str, files: Sequence[str], given: str | None, path: Any) -> str:
    if given is not None:
        if given not in ("jsonl", "parquet"):
            raise SourceError(f"input {stream_id!r}: format must be 'jsonl' or 'parquet', "
                              f"got {given!r}")
        return given
    kinds = set()
    for f in files:
        low = f.lower()
        if low.endswith(".parquet") or low.endswith(".parq"):
            kinds.add("parquet")
        elif low.endswith((".jsonl", ".json", ".ndjson")):
            kinds.add("jsonl")
    p = os.fspath(path).lower() if not hasattr(path, "rdd") else ""  # foreign: a path or a DataFrame
    if not kinds:
        kinds.add("parquet" if p.rstrip("/").endswith(".parquet") else "jsonl")
    if len(kinds) > 1:
        raise SourceError(f"input {stream_id!r}: {path} mixes JSON Lines and Parquet files; "
                          f"give one format (FileInput(path, format=...))")
    return kinds.pop()


# -- sources ---------------------------------------------------------------------------------------

class Source:
    """An input resolved on the driver: ``rdd(spark)`` reads it in executors.

    ``partitions`` is its count of source partitions, ``names`` says what each is (a file...).
    ``read``, when the source has it, gives the records of source partition ``i`` in an
    executor with no Spark around it: the runner then reads the source straight into Arrow
    batches (``mapInArrow``), where an RDD's rows would cross into the JVM one pickle each."""

    def __init__(self, stream_id: str, partitions: int, names: list[str],
                 build: Callable[[Any], Any],
                 read: Callable[[int], Iterator[Record]] | None = None, *,
                 frame: Callable[[Any], Any] | None = None) -> None:
        self.stream_id = stream_id
        self.partitions = partitions
        self.names = names
        self._build = build
        self._frame = frame
        self.read = read
        #: the input's ``max_event_time_ahead`` check (``runtime.spark.ahead``), or None
        self.ahead: AheadCheck | None = None
        #: the Arrow schema of its rows when each row is its message (``carry``), else None
        self.columns: Any = None
        self.convert: Callable[[Any], Any] | None = None
        #: with ``columns``: the Arrow batches of source partition i with their first rows'
        #: numbers, rows (with the first's number) -> ``RowColumns``, and where it can be made
        #: from the batch's columns alone, (batch, first row) -> ``RowColumns`` without the
        #: messages, or None
        self.arrow_batches: Callable[..., Iterator[tuple[Any, int]]] | None = None
        self.row_columns: Callable[[int, list[Any], int], RowColumns] | None = None
        self.column_times: Callable[[Any, int], RowColumns | None] | None = None
        #: with ``columns``: every record's clock is its sort ms (no timestamp column)
        self.same_clock = False
        #: Parquet files read by Arrow: (file, row group) of each source partition, and each
        #: file's Arrow schema (None for other inputs)
        self.splits: list[tuple[str, int]] | None = None
        self.file_schemas: list[Any] | None = None

    def carry(self, columns: Any, arrow_batches: Callable[..., Iterator[tuple[Any, int]]],
              row_columns: Callable[[int, list[Any], int], RowColumns],
              column_times: Callable[[Any, int], RowColumns | None] | None,
              convert: Callable[[Any], Any], same_clock: bool) -> None:
        """Rows of Arrow schema ``columns`` whose messages are ``convert(row as a dict)``, read by
        ``arrow_batches(i, columns=None, rows=BATCH)`` as Arrow batches (of ``columns`` only,
        if given; up to ``rows`` rows each),
        each with its records' columns from
        ``row_columns(i, rows, first)`` (or ``column_times(batch, first)``): a pass that only
        re-keys them (a lone ``partition_by``) carries the columns through its shuffle as they
        are. ``same_clock``: each record's clock is its sort ms."""
        self.columns = columns
        self.arrow_batches = arrow_batches
        self.row_columns = row_columns
        self.column_times = column_times
        self.convert = convert
        self.same_clock = same_clock

    def rdd(self, spark: Any) -> Any:
        return self._build(spark)

    def frame(self, spark: Any) -> Any:
        """The input as a DataFrame of its columns (a DataFrame input), for the declared tier
        (``runtime.spark.declared``); None for the others (Parquet files: ``splits``)."""
        return self._frame(spark) if self._frame is not None else None


def source_timing(descriptor: Any, start_ms: int) -> Callable[[Any, int | None], tuple[int, int]]:
    """(message, record timestamp or None) -> (sort ms, clock ms)."""
    et = descriptor.event_time  # outputs (read back) have none

    if et is None:
        def plain(m: Any, ts: int | None) -> tuple[int, int]:
            t = start_ms if ts is None else ts
            return t, t
        return plain

    def event(m: Any, ts: int | None) -> tuple[int, int]:
        try:
            ms = int(round(et(m) * 1000))
        except Exception as exc:
            raise EventTimeFailure(f"the input's event_time failed on it: "
                                   f"{type(exc).__name__}: {exc}") from exc
        return ms, ms if ts is None else ts
    return event


class EventTimeFailure(ValueError):
    """An input's ``event_time`` that fails on a record: the record or the function is wrong,
    not the serde."""


def unreadable(where: str, exc: BaseException, serde_hint: str) -> str:
    """What a record that cannot be taken in says: ``where`` names it."""
    if isinstance(exc, EventTimeFailure):
        return f"{where}: {exc}; fix the record or the input's event_time"
    return f"{where} does not fit {serde_hint}: {type(exc).__name__}: {exc}"


def _rows_to_records(stream_id: str, descriptor: Any, start_ms: int, names: list[str],
                     ts_column: str | None, *, messages: bool = False,
                     ahead: AheadCheck | None = None) -> Callable[..., Iterator[Record]]:
    """Rows of source partition ``i`` (from row ``start`` on) -> records, with errors naming
    stream, file and row. With ``messages`` the rows are messages already (a list input).
    ``ahead``: a row whose event time is too far ahead of the wall clock as the partition is
    read goes to its policy (``runtime.spark.ahead``) instead."""
    convert = identity if messages else row_converter(stream_id, descriptor.serde)
    timing = source_timing(descriptor, start_ms)
    keyed = descriptor.keyed

    def records(i: int, rows: Iterator[Any], start: int = 0) -> Iterator[Record]:
        off = -1
        now, limit = ahead.limit_ms() if ahead is not None else (0.0, None)
        for off, row in enumerate(rows, start):  # noqa: B007 - off names the row in an error
            try:
                ts = None
                if ts_column is not None:
                    ts = row.get(ts_column) if isinstance(row, dict) else None
                    if ts is None:
                        raise ValueError(f"the row has no timestamp column {ts_column!r}")
                    ts = int(ts)
                    if keyed:
                        row = {k: v for k, v in row.items() if k != ts_column}
                m = row if convert is identity else convert(row)
                sort_ms, clock = timing(m, ts)
            except Exception as exc:
                from runtime.spark.executor import PassFailure

                text = unreadable(f"input {stream_id!r}: row {off} of {names[i]}", exc,
                                  "the stream")
                if not isinstance(exc, EventTimeFailure):
                    text += "; fix the input or the stream's serde"
                raise PassFailure(text) from exc
            if limit is not None and sort_ms > limit:
                assert ahead is not None
                ahead.take(f"row {off} of {names[i]}", i, off, m, sort_ms, now)
                continue
            yield (stream_id, sort_ms, i, off, clock, m)

    return records


def _record_batches(stream_id: str, descriptor: Any, start_ms: int, names: list[str],
                    ts_column: str | None, ahead: AheadCheck | None = None
                    ) -> tuple[Callable[[int, list[Any], int], list[Record]],
                               Callable[[int, list[Any], int], RowColumns]]:
    """``_rows_to_records`` over a list of rows at once: (source partition, rows, first row's
    number) -> records, their times a column at a time where the rows are the messages as
    they are; a row that fails is named as ``_rows_to_records`` names it. Returned with its
    form as columns (``RowColumns``), for a pass that carries the rows through."""
    records = _rows_to_records(stream_id, descriptor, start_ms, names, ts_column, ahead=ahead)
    convert = row_converter(stream_id, descriptor.serde)
    et = descriptor.event_time
    by_row = ts_column is not None or convert is not identity or ahead is not None

    def batch(i: int, rows: list[Any], start: int = 0) -> list[Record]:
        if by_row:
            return list(records(i, iter(rows), start))
        c = columns(i, rows, start)
        return list(zip(repeat(stream_id), c.sort_ms, repeat(i), range(start, start + len(rows)),
                        c.clock, c.messages, strict=False))  # (``repeat`` has no end)

    def columns(i: int, rows: list[Any], start: int = 0) -> RowColumns:
        if not by_row:
            if et is None:
                t = [start_ms] * len(rows)
                return RowColumns(rows, t, t, start)
            ms = event_ms(et, rows)
            if ms is not None:
                return RowColumns(rows, ms, ms, start)
        recs = list(records(i, iter(rows), start))  # converted; a row that fails, named
        return RowColumns([r[5] for r in recs], [r[1] for r in recs], [r[4] for r in recs],
                          start)
    return batch, columns


def column_times(descriptor: Any, start_ms: int, ts_column: str | None, convert: Any
                 ) -> Callable[[Any, int], RowColumns | None] | None:
    """For rows that are their messages as they are, whose event time is none or a field read
    (``planner.fields.field_path``: ``lambda v: v["ts"]``): (Arrow batch, first row's number)
    -> ``RowColumns`` without the messages (None), their times made from the batch's column
    as ``_record_batches`` makes them from the rows; None for a batch where that does not hold
    (a null, a column of another type). None where the rows or the time are anything else."""
    if ts_column is not None or convert is not identity:
        return None
    et = descriptor.event_time
    if et is None:
        def start(batch: Any, first: int) -> RowColumns | None:
            t = [start_ms] * batch.num_rows
            return RowColumns(None, t, t, first)  # type: ignore[arg-type]
        return start
    path = field_path(et)
    if path is None or len(path) != 1 or path[0][0] != "item" or type(path[0][1]) is not str:
        return None
    name = path[0][1]

    def times(batch: Any, first: int) -> RowColumns | None:
        import numpy as np
        import pyarrow as pa

        if name not in batch.schema.names:
            return None
        col = batch.column(name)
        t = col.type
        if col.null_count or not (pa.types.is_integer(t) or pa.types.is_float32(t)
                                  or pa.types.is_float64(t)):
            return None
        ms = seconds_to_ms(col.to_numpy(zero_copy_only=False).astype(np.float64))
        return None if ms is None else RowColumns(None, ms, ms, first)  # type: ignore[arg-type]
    return times


#: below it, a number of seconds and its product by 1000 are exact doubles
_EXACT_S = 2.0 ** 53 / 1000


def event_ms(et: Callable[[Any], Any], msgs: list[Any]) -> list[int] | None:
    """``round(et(m) * 1000)`` for each message, a batch at a time: numpy rounds half to even,
    as ``round`` does, and for plain ints and floats below ``_EXACT_S`` gives the same ints.
    None where ``et`` fails on a message or gives anything else (the caller then takes the
    messages one by one, and names the one that fails)."""
    import numpy as np

    try:
        secs = [et(m) for m in msgs]
    except Exception:
        return None
    if not secs or not set(map(type, secs)) <= {float, int}:
        return None if secs else []
    try:
        a = np.array(secs, dtype=np.float64)
    except OverflowError:  # an int beyond a double
        return None
    ms = seconds_to_ms(a)
    return None if ms is None else list(ms.tolist())


def seconds_to_ms(a: Any) -> Any:
    """A float64 numpy array of seconds -> their ``round(s * 1000)`` as an int64 array, or
    None where one is not finite or not below ``_EXACT_S`` (then ``round`` may differ)."""
    import numpy as np

    if not len(a):
        return a.astype(np.int64)
    if not np.isfinite(a).all() or np.abs(a).max() >= _EXACT_S:
        return None
    return np.rint(a * 1000.0).astype(np.int64)


def resolve_source(spark: Any, stream_id: str, descriptor: Any, value: Any,
                   start_ms: int, config: Mapping[str, Any] | None = None) -> Source:
    """Check ``value`` (what the caller gave for input ``stream_id``) and describe how to read it
    (``config``: the run's, for an input that connects as its system does: a ``KafkaRange``)."""
    if isinstance(value, SparkInput):  # an input that knows how Spark reads it (KafkaRange)
        return value.spark_source(stream_id, descriptor, start_ms, config)
    if hasattr(value, "rdd") and hasattr(value, "schema"):  # foreign: a DataFrame of Spark's
        value = FileInput(value)
    if isinstance(value, str | os.PathLike):
        value = FileInput(value)
    if isinstance(value, FileInput):
        if hasattr(value.path, "rdd"):  # foreign: a DataFrame of Spark's, or a path
            return _dataframe_source(stream_id, descriptor, value, start_ms)
        return _file_source(spark, stream_id, descriptor, value, start_ms)
    if isinstance(value, Mapping):
        parts = {int(p): list(msgs) for p, msgs in value.items()}
    elif isinstance(value, list | tuple):
        parts = {0: list(value)}
    else:
        raise SourceError(f"input {stream_id!r}: give a path, FileInput, DataFrame, list of "
                          f"messages, {{partition: [messages]}} or KafkaRange, got "
                          f"{type(value).__name__}")
    return _list_source(stream_id, descriptor, parts, start_ms)


def _list_source(stream_id: str, descriptor: Any, parts: dict[int, list[Any]],
                 start_ms: int) -> Source:
    if any(p < 0 for p in parts):
        raise SourceError(f"input {stream_id!r}: partitions are ints >= 0, got {sorted(parts)}")
    n = max(parts) + 1 if parts else 1
    if descriptor.partitions is not None:
        if n > descriptor.partitions:
            raise SourceError(f"input {stream_id!r} has {descriptor.partitions} partitions; no "
                              f"partition {n - 1}")
        n = descriptor.partitions
    if descriptor.keyed:
        for p, msgs in parts.items():
            for i, m in enumerate(msgs):
                if type(m) is not KV:
                    raise SourceError(f"input {stream_id!r} is keyed (KVSerde): message {i} of "
                                      f"partition {p} must be a KV(key, value), got {m!r:.80}")
    names = [f"partition {p}" for p in range(n)]
    check = ahead_check(stream_id, descriptor)
    to_records = _rows_to_records(stream_id, descriptor, start_ms, names, None, messages=True,
                                  ahead=check)
    data = [parts.get(p, []) for p in range(n)]

    def build(spark: Any) -> Any:
        def records(i: int, it: Iterator[list[Any]]) -> Iterator[Record]:
            for msgs in it:
                yield from to_records(i, iter(msgs))
        return spark.sparkContext.parallelize(data, n).mapPartitionsWithIndex(records)

    def read(i: int) -> Iterator[Record]:
        return to_records(i, iter(data[i]))
    src = Source(stream_id, n, names, build, read)
    src.ahead = check
    return src


def _file_source(spark: Any, stream_id: str, descriptor: Any, given: FileInput,
                 start_ms: int) -> Source:
    files = list_files(stream_id, given.path)
    fmt = file_format(stream_id, files, given.format, given.path)
    if fmt == "parquet":
        return _parquet_source(stream_id, descriptor, files, given, start_ms)
    return _jsonl_source(spark, stream_id, descriptor, files, given, start_ms)


class _TooDeep(ValueError):
    """A JSON Lines line nested past ``samza_dsl.json_text.MAX_JSON_DEPTH``."""


def _jsonl_source(spark: Any, stream_id: str, descriptor: Any, files: list[str],
                  given: FileInput, start_ms: int) -> Source:
    """One source partition per Hadoop split of each file (one per file unless it is large)."""
    sc = spark.sparkContext
    splits = [sc.textFile(f, minPartitions=1).getNumPartitions() for f in files]
    names: list[str] = []
    for f, k in zip(files, splits, strict=True):
        names.extend([f] if k == 1 else [f"{f} (split {j} of {k})" for j in range(k)])
    check = ahead_check(stream_id, descriptor)
    to_records = _rows_to_records(stream_id, descriptor, start_ms, names, given.timestamp,
                                  ahead=check)

    def build(spark: Any) -> Any:
        sc = spark.sparkContext
        rdds = [sc.textFile(f, minPartitions=1) for f in files]

        def parse(i: int, lines: Iterator[str]) -> Iterator[Any]:
            from samza_dsl.json_text import MAX_JSON_DEPTH, check_json_depth, explain_json_error

            decoder = msgspec.json.Decoder()  # made here: decoders do not pickle
            for n, line in enumerate(lines):
                if not line.strip():
                    continue
                # the depth limit of samza-dsl load and run, so that all three take the same
                deep = check_json_depth(line.encode("utf-8", "surrogatepass")) \
                    if line.count("[") + line.count("{") > MAX_JSON_DEPTH else None
                try:
                    if deep is not None:
                        raise _TooDeep(deep)
                    yield decoder.decode(line)
                except (msgspec.DecodeError, _TooDeep) as exc:
                    from runtime.spark.executor import PassFailure

                    why = f"a message {deep}" if deep else \
                        f"not JSON ({explain_json_error(line.encode('utf-8', 'replace'), exc)})"
                    raise PassFailure(f"input {stream_id!r}: line {n + 1} of {names[i]} is "
                                      f"{why}: {line[:80]!r}; JSON Lines inputs hold one JSON "
                                      f"value per line") from exc

        union = rdds[0] if len(rdds) == 1 else sc.union(rdds)
        return union.mapPartitionsWithIndex(lambda i, it: to_records(i, parse(i, it)))
    src = Source(stream_id, len(names), names, build)
    src.ahead = check
    return src


def _parquet_source(stream_id: str, descriptor: Any, files: list[str], given: FileInput,
                    start_ms: int) -> Source:
    import pyarrow.parquet as pq

    splits: list[tuple[str, int]] = []
    names: list[str] = []
    schemas: list[Any] = []
    for f in files:
        try:
            pf = pq.ParquetFile(f)
            meta = pf.metadata
            schemas.append(pf.schema_arrow.remove_metadata())
        except Exception as exc:
            raise SourceError(f"input {stream_id!r}: {f} is not a readable Parquet file: "
                              f"{type(exc).__name__}: {exc}") from exc
        groups = max(meta.num_row_groups, 1)
        for g in range(groups):
            splits.append((f, g))
            names.append(f if groups == 1 else f"{f} (row group {g} of {groups})")
    check = ahead_check(stream_id, descriptor)
    to_records, to_columns = _record_batches(stream_id, descriptor, start_ms, names,
                                             given.timestamp, check)

    def batches(i: int, columns: list[str] | None = None, rows: int = BATCH
                ) -> Iterator[tuple[Any, int]]:
        """The Arrow batches of source partition ``i`` (only ``columns``, if given), each with
        its first row's number: a row group is not held whole. A batch holds ``BATCH`` rows,
        or up to ``rows`` where they take no more than about ``READ_BYTES`` in Arrow (as the
        row group's first ``BATCH`` rows do)."""
        import pyarrow.parquet as pq

        if i >= len(splits):
            return
        f, g = splits[i]
        pf = pq.ParquetFile(f)
        if pf.metadata.num_row_groups == 0:
            return
        it = pf.iter_batches(batch_size=BATCH, row_groups=[g], columns=columns)
        head = next(it, None)
        if head is None:
            return
        wide = BATCH
        if rows > BATCH and head.num_rows == BATCH:
            per_row = max(1, head.nbytes // BATCH)
            wide = max(BATCH, min(rows, READ_BYTES // per_row) // BATCH * BATCH)
        if head.num_rows:
            yield head, 0
        if wide > BATCH:  # the row group again, in wider batches, less the head
            it = pf.iter_batches(batch_size=wide, row_groups=[g], columns=columns)
            first = next(it, None)
            if first is None or first.num_rows <= BATCH:
                return
            yield first.slice(BATCH), BATCH
            off = first.num_rows
        else:
            off = head.num_rows
        for batch in it:
            if batch.num_rows:
                yield batch, off
                off += batch.num_rows

    def read(i: int) -> Iterator[Record]:
        for batch, off in batches(i):
            yield from to_records(i, batch.to_pylist(), off)

    def build(spark: Any) -> Any:
        def read_all(i: int, it: Iterator[tuple[str, int]]) -> Iterator[Record]:
            for _split in it:
                yield from read(i)
        return spark.sparkContext.parallelize(splits, max(len(splits), 1)) \
            .mapPartitionsWithIndex(read_all)

    src = Source(stream_id, max(len(splits), 1), names, build, read)
    src.splits, src.file_schemas = splits, schemas
    src.ahead = check
    if not descriptor.keyed and len(set(schemas)) == 1 and check is None:
        # the rows themselves are the messages: a pass can carry them as columns
        convert = row_converter(stream_id, descriptor.serde)
        src.carry(schemas[0], batches, to_columns,
                  column_times(descriptor, start_ms, given.timestamp, convert), convert,
                  given.timestamp is None)
    return src


def _dataframe_source(stream_id: str, descriptor: Any, given: FileInput, start_ms: int) -> Source:
    df = given.path
    missing = [] if not descriptor.keyed else [c for c in ("key", "value") if c not in df.columns]
    if missing:
        raise SourceError(f"input {stream_id!r} is keyed (KVSerde): the DataFrame needs columns "
                          f"'key' and 'value'; it has {', '.join(df.columns)}")
    if given.timestamp is not None and given.timestamp not in df.columns:
        raise SourceError(f"input {stream_id!r}: the DataFrame has no timestamp column "
                          f"{given.timestamp!r}; columns: {', '.join(df.columns)}")
    n = df.rdd.getNumPartitions()
    names = [f"DataFrame partition {i}" for i in range(n)]
    check = ahead_check(stream_id, descriptor)
    to_records = _rows_to_records(stream_id, descriptor, start_ms, names, given.timestamp,
                                  ahead=check)

    def build(spark: Any) -> Any:
        return df.rdd.mapPartitionsWithIndex(
            lambda i, rows: to_records(i, (r.asDict(recursive=True) for r in rows)))
    src = Source(stream_id, n, names, build, frame=lambda spark: df)
    src.ahead = check
    return src
