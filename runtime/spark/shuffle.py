"""The records of a pass as Spark rows: shuffled and sorted in the JVM, fed to Python in Arrow
batches.

A record ``(stream id, sort ms, source partition, offset, clock ms, message)`` bound for task
partition ``p`` is the row ``(p, sid, sort_ms, src, off, clock, m)`` of ``SCHEMA``, ``m`` the
message pickled (as PySpark's own RDD shuffle carries it: between the run's own processes, never
read from a stream). A pass that needs its records in task partitions (``shuffle``):

1. repartitions them on a key column whose Spark hash lands task partition ``p`` in Spark
   partition ``p`` (``landing_keys``, by Spark's Murmur3 hash, ``spark_hash_int``);
2. sorts each partition in the JVM (``sortWithinPartitions``: by sort time, source partition,
   offset and stream id, or without the time where a window moves its watermark per record);
3. runs the operators in ``mapInArrow``, batch by batch: no Python process holds a partition.

A pass's output (``PassOutput``) stays what made it, rows of a DataFrame or ``(p, record)``
items of an RDD, and becomes the other only where a consumer needs it: a shuffle reads rows, an
output is written from an RDD of messages.
"""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

__all__ = ["SCHEMA", "COLUMNS", "ORDER", "OFFSET_ORDER", "BATCH", "PassOutput", "encode",
           "records_of", "to_batch", "chunks", "shuffle", "landing_keys", "spark_hash_int",
           "broadcast_rows"]

SCHEMA = "p int, sid string, sort_ms long, src int, off long, clock long, m binary"
COLUMNS = ("p", "sid", "sort_ms", "src", "off", "clock", "m")
#: the order of the records of a task partition, and the order where a window moves per record
ORDER = ("sort_ms", "src", "off", "sid")
OFFSET_ORDER = ("src", "off", "sid")
#: records fed to the operators at once, and rows per Arrow batch written back
BATCH = 4096

_PROTOCOL = pickle.HIGHEST_PROTOCOL


def encode(item: tuple[int, tuple[Any, ...]]) -> tuple[Any, ...]:
    """``(p, record)`` -> a row of ``SCHEMA``."""
    p, (sid, sort_ms, src, off, clock, m) = item
    return (p, sid, sort_ms, src, off, clock, pickle.dumps(m, _PROTOCOL))


def _item(row: Any) -> tuple[int, tuple[Any, ...]]:
    """A row of ``SCHEMA`` -> ``(p, record)``."""
    return row[0], (row[1], row[2], row[3], row[4], row[5], pickle.loads(row[6]))  # noqa: S301


def _message(row: Any) -> Any:
    return pickle.loads(row[0])  # noqa: S301 - written by encode in this run


def records_of(batch: Any) -> list[tuple[Any, ...]]:
    """The records of an Arrow batch of ``SCHEMA`` rows, in its order."""
    cols = [batch.column(i).to_pylist() for i in range(1, 7)]
    loads = pickle.loads
    return [(sid, sort_ms, src, off, clock, loads(m))  # noqa: S301
            for sid, sort_ms, src, off, clock, m in zip(*cols, strict=True)]


def to_batch(items: Sequence[tuple[int, tuple[Any, ...]]]) -> Any:
    """``(p, record)`` items -> an Arrow batch of ``SCHEMA`` rows."""
    import pyarrow as pa

    dumps = pickle.dumps
    p = [it[0] for it in items]
    recs = [it[1] for it in items]
    return pa.RecordBatch.from_arrays(
        [pa.array(p, pa.int32()), pa.array([r[0] for r in recs], pa.string()),
         pa.array([r[1] for r in recs], pa.int64()), pa.array([r[2] for r in recs], pa.int32()),
         pa.array([r[3] for r in recs], pa.int64()), pa.array([r[4] for r in recs], pa.int64()),
         pa.array([dumps(r[5], _PROTOCOL) for r in recs], pa.binary())],
        names=list(COLUMNS))


def chunks(items: Iterable[Any], size: int = BATCH) -> Iterator[list[Any]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash(cast(value as int))``: Murmur3 x86 32 of a 4-byte int with seed 42, the
    hash ``repartition(n, col)`` partitions by (``pmod(hash, n)``); a signed 32-bit int."""
    k = (value & _M32) * 0xCC9E2D51 & _M32
    k = _rotl(k, 15) * 0x1B873593 & _M32
    h = _rotl((seed & _M32) ^ k, 13)
    h = (h * 5 + 0xE6546B64) & _M32
    h ^= 4
    h ^= h >> 16
    h = h * 0x85EBCA6B & _M32
    h ^= h >> 13
    h = h * 0xC2B2AE35 & _M32
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


def landing_keys(n: int) -> list[int]:
    """``keys[p]``: the smallest int ``k >= 0`` with ``pmod(spark_hash_int(k), n) == p``: the
    key column value that ``repartition(n, col)`` puts in Spark partition ``p``."""
    found: dict[int, int] = {}
    k = 0
    while len(found) < n:
        found.setdefault(spark_hash_int(k) % n, k)
        k += 1
    return [found[p] for p in range(n)]


def shuffle(spark: Any, rows: Any, n: int, order: Sequence[str]) -> Any:
    """``rows`` (a DataFrame of ``SCHEMA``) in ``n`` Spark partitions, row ``p`` in partition
    ``p``, each sorted by ``order``: an exchange and a sort in the JVM."""
    from pyspark.sql import functions as F  # noqa: N812

    keys = landing_keys(n)
    key = F.element_at(F.array(*[F.lit(k) for k in keys]), F.col("p") + 1)
    return (rows.withColumn("_k", key).repartition(n, "_k")
            .sortWithinPartitions(*order).drop("_k"))


def broadcast_rows(rows: Any, n: int, everywhere: int) -> Any:
    """Rows whose ``p`` is ``everywhere`` (a broadcast stream's) once for each of ``n``
    partitions; the others as they are."""
    from pyspark.sql import functions as F  # noqa: N812

    every = F.sequence(F.lit(0), F.lit(n - 1))
    return rows.withColumn("p", F.explode(F.when(F.col("p") == everywhere, every)
                                          .otherwise(F.array(F.col("p"))))).select(*COLUMNS)


class PassOutput:
    """What a pass writes, as the DataFrame of rows or the RDD of ``(p, record)`` items that
    computed it; the other form on demand."""

    def __init__(self, spark: Any, name: str, *, df: Any = None, rdd: Any = None) -> None:
        self.spark = spark
        self.name = name
        self.df = df
        self.rdd = rdd
        #: the name of the stages of the shuffle that feeds the pass (None: no shuffle)
        self.shuffled: str | None = None

    def rows(self, sids: Iterable[str] | None = None) -> Any:
        """The DataFrame of rows (of streams ``sids``)."""
        from pyspark.sql import functions as F  # noqa: N812

        if self.df is not None:
            df = self.df
        else:
            df = self.spark.createDataFrame(self.rdd.map(encode), SCHEMA, verifySchema=False)
        return df if sids is None else df.where(F.col("sid").isin(list(sids)))

    def items(self, sids: Iterable[str] | None = None) -> Any:
        """The RDD of ``(p, record)`` items (of streams ``sids``)."""
        if self.rdd is not None:
            if sids is None:
                return self.rdd
            wanted = frozenset(sids)
            return self.rdd.filter(lambda item: item[1][0] in wanted)
        return self.rows(sids).rdd.map(_item)

    def messages(self, sid: str) -> Any:
        """The RDD of the messages of stream ``sid``, in the order the pass wrote them."""
        if self.rdd is not None:
            return self.items([sid]).map(_record_message)
        return self.rows([sid]).select("m").rdd.map(_message)

    def persist(self) -> None:
        if self.df is not None:
            self.df = self.df.persist()
        else:
            self.rdd = self.rdd.persist()

    def unpersist(self) -> None:
        (self.df if self.df is not None else self.rdd).unpersist()

    def run(self) -> None:
        """Compute it all (a pass that writes only sinks or tables)."""
        if self.df is not None:
            self.df.write.format("noop").mode("overwrite").save()
        else:
            self.rdd.count()


def _record_message(item: tuple[int, tuple[Any, ...]]) -> Any:
    return item[1][5]
