"""Outputs of a reprocessing run, written so that a rerun replaces them and a failed run leaves
the previous output as it was.

Every output is first written to a sibling directory ``<path>.tmp-<run id>``. Only when every
output of the run is written are they swapped in, one rename each (the old output is renamed
aside and then deleted). A run that fails deletes its temporary directories.

- JSON Lines: a directory of ``part-NNNNN`` files, one JSON value per line: a keyed message as
  ``{"key": ..., "value": ...}``, anything else as itself (a ``WindowPane`` as an object).
- Parquet (a path ending in ``.parquet``): a directory of ``part-NNNNN.parquet`` files, a row per
  message: a keyed message as columns ``key`` and ``value``, a dict as its fields, anything else
  as a ``value`` column.
- Kafka (``KafkaOutput``): see ``runtime.spark.kafka``.
"""

from __future__ import annotations

import os
import re
import weakref
from collections.abc import Iterator
from typing import Any

import msgspec

from runtime.spark.outputs import SparkSink
from samza_dsl.errors import SamzaError

__all__ = ["FileOutput", "resolve_output", "OutputError", "text_lines"]


class OutputError(SamzaError):
    """An output that cannot be written."""


class FileOutput(SparkSink):
    """A JSON Lines or Parquet output directory, staged then swapped in."""

    def __init__(self, stream_id: str, path: Any, fmt: str, run_id: str) -> None:
        self.stream_id = stream_id
        p = os.fspath(path)
        self.path = os.path.abspath(p) if "://" not in p and not p.startswith("file:") else p
        self.format = fmt
        self.tmp = f"{self.path}.tmp-{run_id}"
        self.old = f"{self.path}.old-{run_id}"

    def __repr__(self) -> str:
        return f"{self.format} {self.path}"

    def stage(self, spark: Any, messages: Any, lines: Any = None,
              partitions: int | None = None) -> None:
        """Write the RDD ``messages`` to the temporary directory (a Spark action). ``lines``: a
        DataFrame of the messages' JSON lines instead (``text_lines``), written by the JVM, in
        ``partitions`` files where the caller knows how many partitions it has."""
        sid = self.stream_id
        if lines is not None:
            lines.write.text(self.tmp)
            if partitions is None:
                partitions = lines._jdf.rdd().getNumPartitions()
            _name_parts(spark, self.tmp, partitions)
            return
        if self.format == "parquet":
            tmp = self.tmp
            _fs(spark, tmp).mkdirs(_path(spark, tmp))

            def write(i: int, it: Iterator[Any]) -> Iterator[int]:
                import pyarrow as pa
                import pyarrow.parquet as pq

                rows = [_row(sid, m) for m in it]
                if rows:
                    table = pa.Table.from_pylist(rows)
                    target = tmp[5:] if tmp.startswith("file:") else tmp
                    pq.write_table(table, f"{target}/part-{i:05d}.parquet")
                yield len(rows)
            messages.mapPartitionsWithIndex(write).count()
        else:
            def lines(it: Iterator[Any]) -> Iterator[str]:
                from runtime.spark.executor import json_encoder
                from runtime.spark.shuffle import Encoded

                encode = json_encoder(sid)  # made here: encoders do not pickle
                for m in it:  # a pass may have made the line already (``Encoded``)
                    yield (m if type(m) is Encoded else encode(m)).decode()
            messages.mapPartitions(lines).saveAsTextFile(self.tmp)

    def commit(self, spark: Any) -> None:
        fs = _fs(spark, self.path)
        final, tmp, old = (_path(spark, p) for p in (self.path, self.tmp, self.old))
        moved = False
        if fs.exists(final):
            if not fs.rename(final, old):
                raise OutputError(f"output {self.stream_id!r}: cannot move the previous "
                                  f"{self.path} aside; check the directory's permissions")
            moved = True
        if not fs.rename(tmp, final):
            if moved:
                fs.rename(old, final)
            raise OutputError(f"output {self.stream_id!r}: cannot move {self.tmp} to "
                              f"{self.path}; the previous output is kept")
        if moved:
            fs.delete(old, True)

    def abort(self, spark: Any) -> None:
        try:
            fs = _fs(spark, self.tmp)
            fs.delete(_path(spark, self.tmp), True)
        except Exception:  # noqa: S110 - cleaning up after a failure already being raised
            pass


def text_lines(rows: Any, run_now: bool = True) -> Any:
    """The ``m`` column of ``rows`` (messages a pass wrote as their JSON lines:
    ``runtime.spark.executor.json_encoder``) as a DataFrame of one string column ``value``.
    With ``run_now``, over an RDD of the JVM whose shuffles run now: adaptive execution runs
    the stages before a DataFrame's last one when its RDD is made, so they keep the name the
    caller gives (``spark.sparkContext.setCallSite``) and the write is a job of its own.
    Without, as a plan of its own, which the write runs whole (the caller names its stages)."""
    from pyspark.sql import DataFrame

    lines = rows.selectExpr("CAST(m AS STRING) AS value")  # one call (runtime.spark.sqltext)
    if not run_now:
        return lines
    jdf = lines._jdf
    spark = lines.sparkSession
    return DataFrame(spark._jsparkSession.createDataFrame(jdf.javaRDD(), jdf.schema()), spark)


_PART = re.compile(r"part-(\d{5})-.+")


def _name_parts(spark: Any, directory: str, n: int) -> None:
    """Name the files a DataFrame wrote to ``directory`` as ``saveAsTextFile`` names them,
    ``part-NNNNN`` for each of the ``n`` partitions (empty ones too), so that the same run
    gives the same files, wherever it ran. A directory of the driver's own file system is
    renamed by the driver itself, its checksum files (``.NAME.crc``) with each part: a call
    to Hadoop's file system through the JVM costs milliseconds each, and a run writes one a
    partition."""
    local = _local(directory)
    if local is not None:
        named = set()
        for name in os.listdir(local):
            m = _PART.fullmatch(name)
            if m is not None:
                target = f"part-{m.group(1)}"
                os.rename(os.path.join(local, name), os.path.join(local, target))
                crc = os.path.join(local, f".{name}.crc")
                if os.path.exists(crc):
                    os.rename(crc, os.path.join(local, f".{target}.crc"))
                named.add(target)
        for i in range(n):
            if f"part-{i:05d}" not in named:
                open(os.path.join(local, f"part-{i:05d}"), "wb").close()
        return
    fs, d = _fs(spark, directory), _path(spark, directory)
    named = set()
    for status in fs.listStatus(d):
        name = status.getPath().getName()
        m = _PART.fullmatch(name)
        if m is not None:
            target = f"part-{m.group(1)}"
            fs.rename(status.getPath(), _path(spark, f"{directory}/{target}"))
            named.add(target)
    for i in range(n):
        if f"part-{i:05d}" not in named:
            fs.create(_path(spark, f"{directory}/part-{i:05d}")).close()


def _local(p: str) -> str | None:
    """The path on the driver's own file system of ``p`` (a plain path or a ``file:`` URI);
    None for another file system's (``hdfs://``, ``s3a://``)."""
    if p.startswith("file://"):
        return p[len("file://"):]
    if p.startswith("file:"):
        return p[len("file:"):]
    return None if "://" in p else p


#: the JVM's ``org.apache.hadoop.fs.Path`` class, by the JVM view it was looked up in: each
#: part of a dotted name is a call into the JVM
_PATH_CLASS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _path(spark: Any, p: str) -> Any:
    jvm = spark._jvm
    cls = _PATH_CLASS.get(jvm)
    if cls is None:
        cls = _PATH_CLASS[jvm] = jvm.org.apache.hadoop.fs.Path
    return cls(p)


def _fs(spark: Any, p: str) -> Any:
    return _path(spark, p).getFileSystem(spark._jsc.hadoopConfiguration())


def _row(stream_id: str, m: Any) -> dict[str, Any]:
    try:
        b = msgspec.to_builtins(m)
    except (TypeError, msgspec.EncodeError) as exc:
        from runtime.spark.executor import PassFailure

        raise PassFailure(f"output {stream_id!r}: a message cannot be written to Parquet: "
                          f"{exc}: {m!r:.80}") from exc
    return b if isinstance(b, dict) else {"value": b}


def resolve_output(stream_id: str, value: Any, run_id: str) -> Any:
    from runtime.spark.kafka import KafkaOutput

    if isinstance(value, KafkaOutput):
        return value.bind(stream_id)
    if not isinstance(value, str | os.PathLike):
        raise OutputError(f"output {stream_id!r}: give a path or KafkaOutput, got "
                          f"{type(value).__name__}")
    p = os.fspath(value)
    fmt = "parquet" if p.rstrip("/").lower().endswith(".parquet") else "jsonl"
    parent = os.path.dirname(os.path.abspath(p)) if "://" not in p else None
    if parent is not None and not os.path.isdir(parent):
        raise OutputError(f"output {stream_id!r}: the directory {parent} does not exist")
    return FileOutput(stream_id, p, fmt, run_id)
