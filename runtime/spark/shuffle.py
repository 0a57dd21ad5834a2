"""The records of a pass as Spark rows: shuffled and sorted in the JVM, fed to Python in Arrow
batches.

A record ``(stream id, sort ms, source partition, offset, clock ms, message)`` bound for task
partition ``p`` is the row ``(p, sid, sort_ms, src, off, clock, k, m)`` of ``SCHEMA``: a ``KV``
as its key and value pickled apart (``k`` and ``m``; a key pickled once per batch, and a KV's
pickle costs three times a tuple's), any other message as ``m`` with ``k`` null. Pickle, as
PySpark's own RDD shuffle carries records: between the run's own processes, never read from a
stream. A pass that needs its records in task partitions (``shuffle``):

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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from samza_dsl.kv import KV


def identity(row: Any) -> Any:
    """The row converter of a stream whose rows are its messages as they are."""
    return row

__all__ = ["SCHEMA", "COLUMNS", "ROW", "ORDER", "OFFSET_ORDER", "BATCH", "PassOutput", "encode",
           "records_of", "to_batch", "message_dumper", "Encoded", "carried_batch", "chunks",
           "shuffle", "landing_keys", "spark_hash_int", "broadcast_rows"]

SCHEMA = "p int, sid string, sort_ms long, src int, off long, clock long, k binary, m binary"
COLUMNS = ("p", "sid", "sort_ms", "src", "off", "clock", "k", "m")
#: the column of rows a pass carries through as they were read (``carried_batch``)
ROW = "row"
#: the order of the records of a task partition, and the order where a window moves per record
ORDER = ("sort_ms", "src", "off", "sid")
OFFSET_ORDER = ("src", "off", "sid")
#: records fed to the operators at once, and rows per Arrow batch written back
BATCH = 4096

_PROTOCOL = pickle.HIGHEST_PROTOCOL


#: keys of these types are loaded once per batch and shared by its records (immutable)
_SHARED_KEYS = frozenset({str, int, float, bytes, bool, type(None)})


def _key_dumper() -> Callable[[Any], bytes]:
    """key -> its pickle, kept for the next records with that key."""
    dumps = pickle.dumps
    keys: dict[Any, bytes] = {}

    def dump_key(key: Any) -> bytes:
        try:
            kb = keys.get(key)
            if kb is None:
                kb = keys[key] = dumps(key, _PROTOCOL)
        except TypeError:  # an unhashable key
            kb = dumps(key, _PROTOCOL)
        return kb
    return dump_key


class Encoded(bytes):
    """A message already in its output's bytes (a JSON line of a JSON Lines output): carried in
    ``m`` as it is, for the JVM to write; never read back as a message."""


def message_dumper() -> Callable[[Any], tuple[bytes | None, bytes]]:
    """message -> ``(k, m)``: its columns in ``SCHEMA``."""
    dumps = pickle.dumps
    dump_key = _key_dumper()

    def dump(m: Any) -> tuple[bytes | None, bytes]:
        t = type(m)
        if t is KV:
            return dump_key(m.key), dumps(m.value, _PROTOCOL)
        if t is Encoded:
            return None, m
        return None, dumps(m, _PROTOCOL)
    return dump


def _loader() -> Callable[[bytes | None, bytes | None], Any]:
    """``(k, m)`` -> the message (``message_dumper``'s inverse); ``(k, None)`` -> the key."""
    loads = pickle.loads
    keys: dict[bytes, Any] = {}
    shared = _SHARED_KEYS

    def load(kb: bytes | None, mb: bytes | None) -> Any:
        if kb is None:
            return loads(mb)  # type: ignore[arg-type]  # noqa: S301 - written in this run
        try:
            key = keys[kb]
        except KeyError:
            key = loads(kb)  # noqa: S301
            if type(key) in shared:
                keys[kb] = key
        if mb is None:  # the key alone
            return key
        return KV(key, loads(mb))  # noqa: S301
    return load


def encode(items: Iterable[tuple[int, tuple[Any, ...]]]) -> Iterator[tuple[Any, ...]]:
    """``(p, record)`` items -> rows of ``SCHEMA``."""
    dump = message_dumper()
    for p, (sid, sort_ms, src, off, clock, m) in items:
        yield (p, sid, sort_ms, src, off, clock, *dump(m))


def _items(rows: Iterable[Any]) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """Rows of ``SCHEMA`` -> ``(p, record)`` items."""
    load = _loader()
    for row in rows:
        yield row[0], (row[1], row[2], row[3], row[4], row[5], load(row[6], row[7]))


def _messages(rows: Iterable[Any]) -> Iterator[Any]:
    load = _loader()
    for row in rows:
        yield load(row[0], row[1])


def records_of(batch: Any, carried: Mapping[str, Callable[[Any], Any]] | None = None
               ) -> list[tuple[Any, ...]]:
    """The records of an Arrow batch of ``SCHEMA`` rows, in its order. A batch with a ``row``
    column (``carried_batch``) has records whose messages are ``KV(key, carried[sid](row))``
    where ``m`` is null."""
    cols = [batch.column(i).to_pylist() for i in range(1, 6)]
    ks = batch.column(6).to_pylist()
    ms = batch.column(7)
    if not carried or ROW not in batch.schema.names or ms.null_count == 0:
        return list(zip(*cols, map(_loader(), ks, ms.to_pylist()), strict=True))
    # carried rows, decoded here column by column; their keys loaded once a batch
    load_key = _loader()
    rows = batch.column(ROW).to_pylist()
    sids = cols[0]
    if ms.null_count == len(ms) and len(set(sids)) == 1:
        convert = carried[sids[0]]
        keys = [load_key(kb, None) for kb in ks]
        if convert is identity:
            msgs = list(map(KV, keys, rows))
        else:
            msgs = [KV(k, convert(r)) for k, r in zip(keys, rows, strict=True)]
    else:
        msgs = [load_key(kb, mb) if mb is not None else KV(load_key(kb, None), carried[sid](r))
                for sid, kb, mb, r in zip(sids, ks, ms.to_pylist(), rows, strict=True)]
    return list(zip(*cols, msgs, strict=True))


def carried_batch(partition: int, sid: str,
                  columns: tuple[list[int], list[int], range, list[int], list[Any]],
                  rows: Any, schema: Any) -> Any:
    """The records a lone ``partition_by`` in task partition ``partition`` wrote into stream
    ``sid`` (``PassExecutor.rekey``: their target partitions, sort ms, offsets, clock ms and
    keys), whose messages are ``KV(key, the message of row i of Arrow batch rows)`` -> an Arrow
    batch of ``schema`` (``SCHEMA`` and a ``row`` struct column): the keys pickled, the rows
    carried as they were read, ``m`` null."""
    import pyarrow as pa

    p, sort_ms, off, clock, keys = columns
    n = len(keys)
    if n != rows.num_rows:
        raise ValueError(f"a pass that only re-keys its input wrote {n} records for "
                         f"{rows.num_rows} rows")
    dump_key = _key_dumper()
    return pa.RecordBatch.from_arrays(
        [pa.array(p, pa.int32()), pa.repeat(pa.scalar(sid, pa.string()), n),
         pa.array(sort_ms, pa.int64()), pa.repeat(pa.scalar(partition, pa.int32()), n),
         pa.array(off, pa.int64()), pa.array(clock, pa.int64()),
         pa.array(list(map(dump_key, keys)), pa.binary()), pa.nulls(n, pa.binary()),
         pa.StructArray.from_arrays(rows.columns, fields=list(schema.field(ROW).type))],
        schema=schema)


def to_batch(items: Sequence[tuple[int, tuple[Any, ...]]]) -> Any:
    """``(p, record)`` items -> an Arrow batch of ``SCHEMA`` rows."""
    import pyarrow as pa

    p, recs = zip(*items, strict=True)
    sid, sort_ms, src, off, clock, m = zip(*recs, strict=True)
    k, mb = zip(*map(message_dumper(), m), strict=True)
    return pa.RecordBatch.from_arrays(
        [pa.array(p, pa.int32()), pa.array(sid, pa.string()), pa.array(sort_ms, pa.int64()),
         pa.array(src, pa.int32()), pa.array(off, pa.int64()), pa.array(clock, pa.int64()),
         pa.array(k, pa.binary()), pa.array(mb, pa.binary())],
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


def shuffle(spark: Any, rows: Any, n: int, order: Sequence[str], column: str = "p") -> Any:
    """``rows`` (a DataFrame of ``SCHEMA``) in ``n`` Spark partitions, a row whose ``column``
    is ``p`` in partition ``p``, each sorted by ``order``: an exchange and a sort in the JVM."""
    from pyspark.sql import functions as F  # noqa: N812

    keys = landing_keys(n)
    key = F.element_at(F.array(*[F.lit(k) for k in keys]), F.col(column) + 1)
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
            df = self.spark.createDataFrame(self.rdd.mapPartitions(encode), SCHEMA, verifySchema=False)
        return df if sids is None else df.where(F.col("sid").isin(list(sids)))

    def items(self, sids: Iterable[str] | None = None) -> Any:
        """The RDD of ``(p, record)`` items (of streams ``sids``)."""
        if self.rdd is not None:
            if sids is None:
                return self.rdd
            wanted = frozenset(sids)
            return self.rdd.filter(lambda item: item[1][0] in wanted)
        return self.rows(sids).rdd.mapPartitions(_items)

    def messages(self, sid: str) -> Any:
        """The RDD of the messages of stream ``sid``, in the order the pass wrote them."""
        if self.rdd is not None:
            return self.items([sid]).map(_record_message)
        return self.rows([sid]).select("k", "m").rdd.mapPartitions(_messages)

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
