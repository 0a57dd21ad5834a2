"""The records of a pass as Spark rows: shuffled and sorted in the JVM, fed to Python in Arrow
batches.

A record ``(stream id, sort ms, source partition, offset, clock ms, message)`` bound for task
partition ``p`` is the row ``(p, sid, sort_ms, src, off, clock, k, m)`` of ``SCHEMA``: a ``KV``
as its key and value written apart (``k`` and ``m``; a string key written once per batch), any
other message as ``m`` with ``k`` null. The bytes are data, never code (``ShuffleCodec``:
``SafeSerde``, or the stream's own serde). A pass that needs its records in task partitions
(``shuffle``):

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

import collections
import contextlib
import dataclasses
import functools
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, cast

import msgspec

from runtime.spark.sqltext import sql_string
from samza_dsl.errors import SerdeError
from samza_dsl.kv import KV


def identity(row: Any) -> Any:
    """The row converter of a stream whose rows are its messages as they are."""
    return row

__all__ = ["SCHEMA", "COLUMNS", "ROW", "ORDER", "OFFSET_ORDER", "BATCH", "PassOutput", "encode",
           "records_of", "Records", "LazyMessages", "RowColumns", "DistinctKeys", "narrow_shuffle", "to_batch", "ShuffleCodec", "Encoded", "carried_batch", "chunks",
           "shuffle", "landing_keys", "spark_hash_int", "broadcast_rows", "carried_columns",
           "key_type", "SO_BITS", "FLAT", "Record", "record_stream", "record_partition",
           "record_message"]

SCHEMA = "p int, sid string, sort_ms long, src int, off long, clock long, k binary, m binary"
COLUMNS = ("p", "sid", "sort_ms", "src", "off", "clock", "k", "m")
#: the column of rows a pass carries through as they were read (``carried_batch``)
ROW = "row"
#: the prefix of the columns of a carried batch (``carried_batch``) that hold its rows' fields
FLAT = ROW + "__"
#: a carried record's source partition and offset are the one number ``src << SO_BITS | off``
SO_BITS = 40
#: the order of the records of a task partition, and the order where a window moves per record
ORDER = ("sort_ms", "src", "off", "sid")
OFFSET_ORDER = ("src", "off", "sid")
#: records fed to the operators at once, and rows per Arrow batch written back
BATCH = 4096
#: a record of a pass: (stream id, sort ms, source partition, offset, clock ms, message). A
#: plain tuple, made in bulk (``zip``, ``Records``) and shipped between Spark's workers; other
#: modules read a field by its getter here, or take the record apart into those names
Record = tuple[str, int, int, int, int, Any]
record_stream = operator.itemgetter(0)
record_partition = operator.itemgetter(2)
record_message = operator.itemgetter(5)

#: keys of these types are loaded once per batch and shared by its records (immutable)
_SHARED_KEYS = frozenset({str, int, float, bytes, bool, type(None)})
#: a first byte MessagePack never writes: the bytes after it are the stream's own serde's
_OWN = 0xC1
_OWN_BYTE = bytes((_OWN,))


class Encoded(bytes):
    """A message already in its output's bytes (a JSON line of a JSON Lines output): carried in
    ``m`` as it is, for the JVM to write; never read back as a message."""


class ShuffleCodec:
    """How the passes of a run write the messages they hand to each other: as data, never code.

    Each message (a ``KV``'s key and value apart, in ``k`` and ``m``) is written by ``SafeSerde``
    with the types the application declared (``app.declare_types``) and the types its typed
    serdes make (an input's ``JsonSerde(View)``: its ``View`` values flow on): faithful for
    Python's plain
    values, tuples, sets, datetimes, ``KV`` and ``LateMessage``, which is what ``TestRunner``
    passes on untouched, and what an intermediate stream of the streaming runtime writes by
    default. A value ``SafeSerde`` cannot write (a type not declared) is written by its
    stream's own serde, after a byte MessagePack never begins with, as a deployed job would
    write it into that stream; where the stream has no serde of its own, the run fails with
    ``SafeSerde``'s words and the stream's name. Reading runs no code: MessagePack, or the
    stream's serde. Pickles made elsewhere are read only where a user named ``PickleSerde``.

    It travels to the executors with the plan; each process builds its encoders there."""

    def __init__(self, plan: Any) -> None:
        from runtime.engine.codec import fast_deserializer, fast_serializer
        from samza_dsl.serdes import SafeSerde

        self.plan = plan
        self.safe = SafeSerde({**_serde_types(plan), **(plan.app.types or {})})
        self.encode = fast_serializer(self.safe)
        self.decode = fast_deserializer(self.safe)
        self._own: dict[str, tuple[Any, Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"plan": self.plan}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["plan"])  # type: ignore[misc]

    def own(self, sid: str) -> tuple[Any, Any]:
        """Stream ``sid``'s own (key serde, value serde); None where it has none of its own."""
        got = self._own.get(sid)
        if got is None:
            from samza_dsl.serdes import KVSerde, NoOpSerde, SafeSerde

            stream = self.plan.streams.get(sid)
            serde = stream.descriptor.serde if stream is not None else None

            def mine(x: Any) -> Any:
                return None if x is None or isinstance(x, NoOpSerde | SafeSerde) else x
            got = self._own[sid] = ((mine(serde.key_serde), mine(serde.value_serde))
                                    if isinstance(serde, KVSerde) else (None, mine(serde)))
        return got

    def write(self, sid: str, value: Any, key: bool = False) -> bytes:
        """``value`` (a key with ``key``) of stream ``sid`` as bytes."""
        try:
            return self.encode(value)
        except Exception:  # noqa: S110 - the stream's own serde, or the clear error, below
            pass
        own = self.own(sid)[0 if key else 1]
        if own is None:
            try:
                return self.safe.serialize(value)
            except Exception as exc:
                raise SerdeError(f"stream {sid!r}: {exc}") from None
        return _OWN_BYTE + own.serialize(value)

    def read(self, sid: str, data: bytes, key: bool = False) -> Any:
        """``write``'s inverse."""
        if data[0] == _OWN:
            return self.own(sid)[0 if key else 1].deserialize(data[1:])
        return self.decode(data)

    def key_dumper(self) -> Callable[[str, Any], bytes]:
        """(stream, key) -> its bytes; a string key's kept for the next records with it."""
        write = self.write
        keys: dict[tuple[str, str], bytes] = {}

        def dump_key(sid: str, key: Any) -> bytes:
            if type(key) is not str:
                return write(sid, key, True)
            kb = keys.get((sid, key))
            if kb is None:
                kb = keys[(sid, key)] = write(sid, key, True)
            return kb
        return dump_key

    def key_bytes(self, sid: str, keys: list[Any]) -> list[bytes]:
        """The bytes of stream ``sid``'s ``keys``: where they are all strings, each distinct
        one written once."""
        distinct: set[Any] | None = None
        if keys and type(keys[0]) is str:
            with contextlib.suppress(TypeError):  # (an unhashable key)
                distinct = set(keys)
        if distinct is None or not all(type(k) is str for k in distinct):
            dump_key = self.key_dumper()
            return [dump_key(sid, k) for k in keys]
        write = self.write
        written = {k: write(sid, k, True) for k in distinct}
        return [written[k] for k in keys]

    def dumper(self) -> Callable[[str, Any], tuple[bytes | None, bytes]]:
        """(stream, message) -> its ``(k, m)`` columns of ``SCHEMA``."""
        write, dump_key = self.write, self.key_dumper()

        def dump(sid: str, m: Any) -> tuple[bytes | None, bytes]:
            t = type(m)
            if t is KV:
                return dump_key(sid, m.key), write(sid, m.value)
            if t is Encoded:
                return None, m
            return None, write(sid, m)
        return dump

    def loader(self) -> Callable[[str, bytes | None, bytes | None], Any]:
        """(stream, k, m) -> the message (``dumper``'s inverse); (stream, k, None) -> the key."""
        read = self.read
        keys: dict[tuple[str, bytes], Any] = {}
        shared = _SHARED_KEYS

        def load(sid: str, kb: bytes | None, mb: bytes | None) -> Any:
            if kb is None:
                return read(sid, mb)  # type: ignore[arg-type]
            try:
                key = keys[(sid, kb)]
            except KeyError:
                key = read(sid, kb, True)
                if type(key) in shared:
                    keys[(sid, kb)] = key
            if mb is None:  # the key alone
                return key
            return KV(key, read(sid, mb))
        return load


    def load_keys(self, sid: str, kbs: Any) -> list[Any]:
        """The keys of stream ``sid`` written as ``kbs`` (an Arrow binary array with no null):
        each distinct one read once where the keys are values a message may share (strings,
        numbers...)."""
        load = self.loader()
        encoded = kbs.dictionary_encode()
        distinct = [load(sid, kb, None) for kb in encoded.dictionary.to_pylist()]
        if all(type(k) in _SHARED_KEYS for k in distinct):
            return _distinct_taken(encoded, lambda _values: distinct)
        return [load(sid, kb, None) for kb in kbs.to_pylist()]


def _serde_types(plan: Any) -> dict[str, type]:
    """name -> type of the classes the serdes of ``plan``'s streams and tables decode to
    (``JsonSerde(View)``, ``MsgpackSerde(Order)``...)."""
    from samza_dsl.safe_serde import type_name
    from samza_dsl.serdes import KVSerde

    out: dict[str, type] = {}
    serdes = [st.descriptor.serde for st in plan.streams.values()]
    serdes += [t.serde for t in plan.app.tables.values()]
    for serde in serdes:
        for one in ((serde.key_serde, serde.value_serde) if isinstance(serde, KVSerde)
                    else (serde,)):
            t = one.type if one is not None else None
            if isinstance(t, type) and (issubclass(t, msgspec.Struct)
                                        or dataclasses.is_dataclass(t)
                                        or (issubclass(t, tuple)
                                            and hasattr(t, "_fields"))):  # foreign: a user's class
                out.setdefault(type_name(t), t)
    return out


def encode(codec: ShuffleCodec, items: Iterable[tuple[int, tuple[Any, ...]]]
           ) -> Iterator[tuple[Any, ...]]:
    """``(p, record)`` items -> rows of ``SCHEMA``."""
    dump = codec.dumper()
    for p, (sid, sort_ms, src, off, clock, m) in items:
        yield (p, sid, sort_ms, src, off, clock, *dump(sid, m))


def _items(codec: ShuffleCodec, rows: Iterable[Any]) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """Rows of ``SCHEMA`` -> ``(p, record)`` items."""
    load = codec.loader()
    for row in rows:
        yield row[0], (row[1], row[2], row[3], row[4], row[5], load(row[1], row[6], row[7]))


def _messages(codec: ShuffleCodec, sid: str, rows: Iterable[Any]) -> Iterator[Any]:
    load = codec.loader()
    for row in rows:
        yield load(sid, row[0], row[1])


class RowColumns(NamedTuple):
    """A batch of a source partition's records as columns: their messages, sort ms and clock
    ms (the same list where they are equal), and the first one's offset (row number)."""

    messages: list[Any]
    sort_ms: list[int]
    clock: list[int]
    first: int


class DistinctKeys(NamedTuple):
    """A batch's keys as their distinct values and, for each record, the index of its own."""

    values: list[Any]
    indices: Any  # an Arrow integer array


class Ints(Sequence[int]):
    """A numpy array of ints as a sequence of Python ints: one made where one is asked for,
    all of them for iterating."""

    __slots__ = ("array",)

    def __init__(self, array: Any) -> None:
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, j: Any) -> Any:
        got = self.array[j]
        return got.tolist()

    def __iter__(self) -> Iterator[int]:
        return iter(self.array.tolist())


class LazyMessages(Sequence[Any]):
    """The messages ``KV(key, row)`` of a batch of carried rows whose fields come one column
    each (``carried_batch``), each made when it is asked for: the same dicts ``to_pylist`` of the
    rows' struct makes."""

    __slots__ = ("keys", "fields", "_values")

    def __init__(self, keys: list[Any], fields: Mapping[str, Any]) -> None:
        self.keys = keys
        self.fields = fields  # name -> Arrow array
        self._values: list[tuple[str, list[Any]]] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, j: Any) -> Any:
        if isinstance(j, slice):
            return [self[k] for k in range(*j.indices(len(self)))]
        if self._values is None:
            self._values = [(name, col.to_pylist()) for name, col in self.fields.items()]
        return KV(self.keys[j], {name: values[j] for name, values in self._values})

    def __iter__(self) -> Iterator[Any]:
        import pyarrow as pa

        rows = pa.StructArray.from_arrays(list(self.fields.values()),
                                          names=list(self.fields)).to_pylist()
        return map(KV, self.keys, rows)


class Records(Sequence[tuple[Any, ...]]):
    """The records of an Arrow batch (``records_of``) as columns. A record is the tuple
    ``(stream id, sort ms, source partition, offset, clock ms, message)``; iterating or
    indexing makes it. ``sid`` is the stream of every record where they are all of one.
    Where the messages are ``KV(key, row)`` of carried rows (``LazyMessages``), ``keys`` are
    their keys and ``fields`` the rows' fields as Arrow arrays (name -> array); else None."""

    __slots__ = ("sid", "sids", "sort_ms", "src", "off", "clock", "messages", "keys", "fields")

    def __init__(self, sids: Sequence[str], sort_ms: Sequence[int], src: Sequence[int],
                 off: Sequence[int], clock: Sequence[int], messages: Sequence[Any],
                 sid: str | None = None, *,
                 keys: list[Any] | None = None, fields: Mapping[str, Any] | None = None
                 ) -> None:
        self.sid = sid
        self.sids = sids
        self.sort_ms = sort_ms
        self.src = src
        self.off = off
        self.clock = clock
        self.messages = messages
        self.keys = keys
        self.fields = fields

    def times_ms(self, name: str) -> tuple[list[float], list[int]] | None:
        """Field ``name`` of the rows times 1000.0, each as ``row[name] * 1000.0`` gives it
        (an event time read from the field, in ms), and the indices of the rows where it is
        null; None where the field is not numbers (ints or 32- or 64-bit floats)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        col = None if self.fields is None else self.fields.get(name)
        if col is None:
            return None
        t = col.type
        if not (pa.types.is_integer(t) or pa.types.is_float32(t) or pa.types.is_float64(t)):
            return None
        # an int or a float32 widens to the double Python's ``*`` makes of it (both round
        # to nearest), and the product is the same IEEE product
        doubles = pc.cast(col, pa.float64(), safe=False).fill_null(0.0)
        xs = (doubles.to_numpy() * 1000.0).tolist()
        nulls = pc.indices_nonzero(col.is_null()).to_pylist() if col.null_count else []
        return xs, nulls

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        sids = self.sids if self.sid is None else itertools.repeat(self.sid)
        return zip(sids, self.sort_ms, self.src, self.off, self.clock, self.messages,
                   strict=False)  # (``repeat`` has no end)

    def __getitem__(self, j: int) -> tuple[Any, ...]:  # type: ignore[override]
        return (self.sids[j] if self.sid is None else self.sid, self.sort_ms[j], self.src[j],
                self.off[j], self.clock[j], self.messages[j])

    def counts(self) -> dict[str, int]:
        """Records by stream."""
        if self.sid is not None:
            return {self.sid: len(self.messages)}
        return dict(collections.Counter(self.sids))


def _one_value(column: Any) -> Any:
    """The value every row of an Arrow column holds (None where they differ or none is)."""
    import pyarrow.compute as pc

    if not len(column) or column.null_count:
        return None
    first = column[0]
    return first.as_py() if pc.all(pc.equal(column, first)).as_py() else None


def records_of(codec: ShuffleCodec, batch: Any,
               carried: Mapping[str, Callable[[Any], Any]] | None = None,
               sid: str | None = None) -> Records:
    """The records of an Arrow batch of ``SCHEMA`` rows, in its order. A batch of carried
    rows (``carried_batch``: their fields a column each, ``row__<field>``) has records whose
    messages are ``KV(key, carried[sid](row))``, and its source partitions and offsets in the
    one column ``so``. A batch may lack the columns a pass of one input stream ``sid`` does
    not need (``p``, ``sid``: ``narrow_shuffle``), a carried stream's ``clock`` (then the sort
    ms) and ``m`` (then null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    flat = {f[len(FLAT):]: batch.column(f) for f in batch.schema.names if f.startswith(FLAT)}
    if flat:  # the carried rows' fields one column each (``carried_batch``): their struct again
        keep = [f for f in batch.schema.names if not f.startswith(FLAT)]
        struct = pa.StructArray.from_arrays(list(flat.values()), names=list(flat))
        batch = pa.RecordBatch.from_arrays([*(batch.column(f) for f in keep), struct],
                                           names=[*keep, ROW])
    col = batch.column
    if "sid" in batch.schema.names:
        sid = _one_value(col("sid"))
        sids = [] if sid is not None else col("sid").to_pylist()
    elif sid is None:
        raise ValueError("a batch of records without their streams, and no stream given")
    else:
        sids = []
    names = batch.schema.names
    cols: tuple[Sequence[str], Sequence[int], Sequence[int], Sequence[int], Sequence[int]]
    if "so" in names and not col("so").null_count and not col("sort_ms").null_count:
        # (``carried_batch``) the source partition and offset in one number; these columns
        # made Python ints only where asked for (a window's run looks at a few records)
        sort_ms: Sequence[int] = Ints(col("sort_ms").to_numpy())
        so = col("so").to_numpy()
        clock = sort_ms if "clock" not in names else col("clock").to_pylist()
        cols = (sids, sort_ms, Ints(so >> SO_BITS), Ints(so & ((1 << SO_BITS) - 1)), clock)
    else:
        sort_ms = col("sort_ms").to_pylist()
        clock = sort_ms if "clock" not in names or (
            len(sort_ms) and pc.all(pc.equal(col("sort_ms"), col("clock"))).as_py()) \
            else col("clock").to_pylist()
        cols = (sids, sort_ms, col("src").to_pylist(), col("off").to_pylist(), clock)
    ms = col("m") if "m" in names else pa.nulls(batch.num_rows, pa.binary())
    load = codec.loader()
    if not carried or ROW not in batch.schema.names or ms.null_count == 0:
        each = itertools.repeat(sid) if sid is not None else sids
        return Records(*cols, list(map(load, each, col("k").to_pylist(), ms.to_pylist())),
                       sid=sid)
    # carried rows, decoded here column by column; their keys loaded once a batch
    keys = _carried_keys(codec, sid, batch) if ms.null_count == len(ms) else None
    if keys is not None and flat and carried[sid] is identity:  # (then sid is not None)
        # each message made only where it is asked for; the keys and fields kept as columns
        return Records(*cols, LazyMessages(keys, flat), sid=sid, keys=keys, fields=flat)
    rows = batch.column(ROW).to_pylist()
    if keys is not None:
        convert = carried[sid]
        if convert is identity:
            msgs = list(map(KV, keys, rows))
        else:
            msgs = [KV(k, convert(r)) for k, r in zip(keys, rows, strict=True)]
    else:
        each = itertools.repeat(sid) if sid is not None else sids
        msgs = [load(s, kb, mb) if mb is not None else KV(load(s, kb, None), carried[s](r))
                for s, kb, mb, r in zip(each, col("k").to_pylist(), ms.to_pylist(), rows,
                                        strict=False)]
    return Records(*cols, msgs, sid=sid)


def _carried_keys(codec: ShuffleCodec, sid: str | None, batch: Any) -> list[Any] | None:
    """The keys of a batch of carried records of stream ``sid``: its column ``kc`` as the
    values it holds (``key_type``), or its column ``k`` read by ``codec``; None where the batch
    has no stream or has null key bytes."""
    if sid is None:
        return None
    if "kc" in batch.schema.names:
        column = batch.column("kc")
        if column.null_count:  # (a null is the key None, as its bytes would read)
            return cast(list[Any], column.to_pylist())
        return _distinct_taken(column.dictionary_encode(), lambda values: values)
    column = batch.column("k")
    return None if column.null_count else codec.load_keys(sid, column)


def _distinct_taken(encoded: Any, load: Callable[[list[Any]], list[Any]]) -> list[Any]:
    """The values of a dictionary-encoded Arrow array (no null), each distinct one made once
    by ``load`` (its dictionary's values as Python objects -> the values) and shared."""
    import numpy as np

    values = np.empty(len(encoded.dictionary), dtype=object)
    values[:] = load(encoded.dictionary.to_pylist())
    return cast(list[Any], values[encoded.indices.to_numpy()].tolist())


def carried_batch(codec: ShuffleCodec, partition: int, sid: str,
                  columns: tuple[Any, Any, range, Any, list[Any] | DistinctKeys],
                  rows: Any, schema: Any) -> Any:
    """The records a lone ``partition_by`` in task partition ``partition`` wrote into stream
    ``sid`` (``PassExecutor.rekey``: their target partitions, sort ms, offsets, clock ms and
    keys), whose messages are ``KV(key, the message of row i of Arrow batch rows)`` -> an Arrow
    batch of ``schema`` (``carried_columns`` and a column per field): the keys written by ``codec``, the source partition and
    offset in one number (``SO_BITS``), the rows' fields carried as they were read, a column
    each (``row__<field>``)."""
    import pyarrow as pa

    p, sort_ms, off, clock, keys = columns
    typed = schema.field("kc").type if "kc" in schema.names else None
    if isinstance(keys, DistinctKeys):
        n = len(keys.indices)
        key_column = (pa.array(codec.key_bytes(sid, keys.values), pa.binary()) if typed is None
                      else pa.array(keys.values, typed)).take(keys.indices)
    else:
        n = len(keys)
        key_column = pa.array(codec.key_bytes(sid, keys), pa.binary()) if typed is None \
            else pa.array(keys, typed)
    if n != rows.num_rows:
        raise ValueError(f"a pass that only re-keys its input wrote {n} records for "
                         f"{rows.num_rows} rows")
    if off and off[-1] >> SO_BITS:
        raise ValueError(f"stream {sid!r}: partition {partition} holds more than "
                         f"2**{SO_BITS} records")
    ms = pa.array(sort_ms, pa.int64())
    made = {"p": pa.array(p, pa.int32()), "sort_ms": ms,
            "so": range_array(range(off.start + (partition << SO_BITS),
                                    off.stop + (partition << SO_BITS), off.step)),
            "k" if typed is None else "kc": key_column}
    if "clock" in schema.names:
        made["clock"] = ms if clock is sort_ms else pa.array(clock, pa.int64())
    elif clock is not sort_ms and clock != sort_ms:
        raise ValueError(f"stream {sid!r}: records whose clock is not their time, carried "
                         "without their clock")
    for name, column in zip(rows.schema.names, rows.columns, strict=True):
        made[FLAT + name] = column
    return pa.RecordBatch.from_arrays([made[name] for name in schema.names], schema=schema)


def carried_columns(same_clock: bool, keys: str | None = None) -> str:
    """The columns of a carried batch (``carried_batch``) before the rows' fields: with a
    clock column unless the records' clock is their time (``same_clock``); the keys as bytes
    (``k``), or as the values of Spark type ``keys`` (``kc``: ``key_type``)."""
    return ("p int, sort_ms long, so long, " + ("" if same_clock else "clock long, ")
            + ("k binary" if keys is None else f"kc {keys}"))


def key_type(columns: Any, field: str | None) -> str | None:
    """Where the records' keys are the values of field ``field`` of rows of Arrow schema
    ``columns`` (the key function only reads it): the Spark type that carries them as they
    are, for strings and integers (Spark moves a string or a long at a lower cost than bytes,
    and the keys need no decoding); else None (they go as bytes)."""
    import pyarrow as pa

    if field is None or field not in columns.names:
        return None
    t = columns.field(field).type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_integer(t) and t != pa.uint64():
        return "long"
    return None


def range_array(r: range) -> Any:
    """An Arrow int64 array of ``r``'s numbers (made from a ``range`` item by item, it costs a
    hundred times more)."""
    import numpy as np
    import pyarrow as pa

    return pa.array(np.arange(r.start, r.stop, r.step, dtype=np.int64))


def to_batch(codec: ShuffleCodec, items: Sequence[tuple[int, tuple[Any, ...]]]) -> Any:
    """``(p, record)`` items -> an Arrow batch of ``SCHEMA`` rows."""
    import pyarrow as pa

    p, recs = zip(*items, strict=True)
    sid, sort_ms, src, off, clock, m = zip(*recs, strict=True)
    k, mb = zip(*map(codec.dumper(), sid, m), strict=True)
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

    keys = ", ".join(map(str, landing_keys(n)))
    key = F.expr(f"element_at(array({keys}), `{column}` + 1)")  # one call into the JVM
    return (rows.withColumn("_k", key).repartition(n, "_k")
            .sortWithinPartitions(*order).drop("_k"))


def narrow_shuffle(spark: Any, rows: Any, n: int, order: Sequence[str]) -> Any:
    """``shuffle`` for rows of one stream: its name is dropped before the exchange and each
    row's partition after it (``records_of`` takes the stream from the pass), so that the JVM
    moves, sorts and hands to Python narrower rows."""
    if "so" in rows.columns:  # (``carried_batch``) the source partition and offset in one number
        order = [c for c in order if c not in ("src", "off")]
        order.insert(order.index("sort_ms") + 1 if "sort_ms" in order else 0, "so")
    return shuffle(spark, rows.drop("sid"), n, [c for c in order if c != "sid"]).drop("p")


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

    def __init__(self, spark: Any, codec: ShuffleCodec, name: str, *, df: Any = None,
                 rdd: Any = None, only: str | None = None) -> None:
        self.spark = spark
        self.codec = codec
        self.name = name
        self.df = df
        self.rdd = rdd
        #: the one stream a pass writes, where its rows lack the column ``sid`` (``carried_batch``)
        self.only = only
        #: the name of the stages of the shuffle that feeds the pass (None: no shuffle)
        self.shuffled: str | None = None
        #: the number of Spark partitions of ``df`` where the pass fixes it (a shuffle into
        #: its task partitions), so that writing it needs no look at its plan; else None
        self.partitions: int | None = None

    def rows(self, sids: Iterable[str] | None = None) -> Any:
        """The DataFrame of rows (of streams ``sids``)."""
        if self.df is not None:
            df = self.df
        else:
            df = self.spark.createDataFrame(
                self.rdd.mapPartitions(functools.partial(encode, self.codec)), SCHEMA,
                verifySchema=False)
        if sids is None:
            return df
        if self.only is not None:  # rows of one stream, without the column
            return df if self.only in sids else df.limit(0)
        # as SQL text: one call into the JVM (``runtime.spark.sqltext``)
        return df.where(f"sid IN ({', '.join(map(sql_string, sids))})")

    def items(self, sids: Iterable[str] | None = None) -> Any:
        """The RDD of ``(p, record)`` items (of streams ``sids``)."""
        if self.rdd is not None:
            if sids is None:
                return self.rdd
            wanted = frozenset(sids)
            return self.rdd.filter(lambda item: item[1][0] in wanted)
        return self.rows(sids).rdd.mapPartitions(functools.partial(_items, self.codec))

    def messages(self, sid: str) -> Any:
        """The RDD of the messages of stream ``sid``, in the order the pass wrote them."""
        if self.rdd is not None:
            return self.items([sid]).map(_record_message)
        return self.rows([sid]).select("k", "m").rdd.mapPartitions(
            functools.partial(_messages, self.codec, sid))

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
