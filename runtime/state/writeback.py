"""The store interface operators and tables see, the top of every store's layers
(``runtime.state.bytestore``), over its bytes (LMDB's ``runtime.state.lmdb_store``, or memory's
``runtime.state.memory_store``, under the changelog's ``LoggedBytes`` where it has one):
``CachedStore``, with its metrics (``store_samples``), the write-back cache of the dirty entries (``Dirty``, whose ``__getitem__`` and ``__setitem__`` are a store's ``get`` and
``put``), their encoding at a flush (``encode_entries``), the clean cache after it (``settle``),
and the errors of an entry that does not encode or decode, worded the same whichever bytes hold
it.

A store's sizes come from the job's config: ``stores.<name>.object.cache.size`` (decoded
objects kept after a flush or a read, 100,000) and ``stores.<name>.write.batch.size`` (dirty
keys that make ``maybe_flush`` flush, 10,000).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from itertools import islice
from operator import itemgetter, setitem
from typing import Any, cast

from operators.state import ListKey
from runtime.host.metrics import Sample
from runtime.state.bytestore import ByteStore
from samza_dsl.errors import SamzaError, SerdeError
from samza_dsl.jobconfig import JobConfig

__all__ = ["CachedStore", "Entries", "MISSING", "Dirty", "encode_all", "encode_entries", "settle", "evict", "decode_error",
           "store_sizes", "store_samples"]

log = logging.getLogger("samza_dsl.state")

MISSING: Any = object()
_first = itemgetter(0)

Entries = list[tuple[bytes, bytes | None]]


class Dirty(dict[Any, Any]):
    """The dirty entries (a delete is a dirty None), or the clean cache behind them: a missing
    key is looked up with ``__missing__``, an instance's own callable (a slot, so no Python
    frame): the clean cache's ``__getitem__`` for the dirty entries, the store's ``load`` (read
    from its bytes) for the clean cache."""

    __slots__ = ("__missing__",)

    __missing__: Callable[[Any], Any]


def encode_all(encode: Callable[[Any], bytes], objs: list[Any]) -> list[bytes]:
    """``encode`` of each of ``objs``: in one call where the encoder offers ``encode.many``
    (a table's serde that encodes batches, ``runtime.state.codec.table_codec``)."""
    many = getattr(encode, "many", None)  # foreign: a serde's function (``many`` where made so)
    return list(map(encode, objs)) if many is None else cast(list[bytes], many(objs))


def encode_entries(dirty: Mapping[Any, Any], key_encode: Callable[[Any], bytes],
                   value_encode: Callable[[Any], bytes], where: str) -> tuple[Entries, int]:
    """The dirty entries encoded, in their order (None for a delete), and how many of them are
    deletes. One that does not encode raises a ``SerdeError`` (a ``SamzaError`` where the
    serde's error is not one) naming ``where`` (the store) and the entry's key."""
    try:
        keys = encode_all(key_encode, list(dirty))
        given = list(dirty.values())
        present = [v for v in given if v is not None]
        encoded = encode_all(value_encode, present)
        if len(present) == len(given):
            values = cast(list[bytes | None], encoded)
        else:  # deletes among them: None stays None
            it = iter(encoded)
            values = [None if v is None else next(it) for v in given]
    except Exception:
        _encode_error(dirty, key_encode, value_encode, where)
        raise
    return list(zip(keys, values, strict=True)), len(given) - len(present)


def _encode_error(dirty: Mapping[Any, Any], key_encode: Callable[[Any], bytes],
                  value_encode: Callable[[Any], bytes], where: str) -> None:
    """Raises the error naming the first dirty entry the serdes reject."""
    for k, v in dirty.items():
        try:
            key_encode(k)
            if v is not None:
                value_encode(v)
        except Exception as e:
            error = SerdeError if isinstance(e, SerdeError) else SamzaError
            raise error(
                f"{where}: cannot encode the entry for key {k!r} "
                f"({type(e).__name__}: {e}); the store's key and value serdes must accept "
                f"every key and value the job stores") from e


def settle(dirty: dict[Any, Any], clean: dict[Any, Any], cache_writes: bool,
           cache_size: int) -> None:
    """After a flush wrote ``dirty`` out: its entries move to the clean cache (unless
    ``cache_writes`` is False: then a value read before and written since leaves it), and the
    cache is cut down to half of ``cache_size`` (its oldest entries) once past it."""
    if cache_writes:
        clean.update(dirty)
    elif clean:  # a value read before and written since is stale
        pop = clean.pop
        for k in dirty:
            pop(k, None)
    dirty.clear()
    if len(clean) > cache_size:
        evict(clean, cache_size)


def evict(clean: dict[Any, Any], cache_size: int) -> None:
    """Drops the oldest-inserted entries of the clean cache, down to half its size."""
    for k in list(islice(clean, len(clean) - cache_size // 2)):
        del clean[k]


def decode_error(where: str, what: str, e: Exception) -> SerdeError:
    """The error of ``what`` (an entry of the store ``where``) that does not decode."""
    return SerdeError(
        f"{where}: {what} does not decode ({type(e).__name__}: {e}): another serde "
        f"wrote it (an older version of the job?) or it is damaged. Reset the job's state "
        f"(samza-dsl reset) to start it over")


def store_sizes(config: JobConfig, store_name: str,
                cache_size: int | None = None) -> tuple[int, int]:
    """(object cache size, write batch size) of a store, from the job's config (``cache_size``,
    where given, instead of the registry's default when the config sets none)."""
    store = config.store(store_name)
    given = store.given("object_cache_size")
    return (store.object_cache_size if given or cache_size is None else cache_size,
            store.write_batch_size)


class CachedStore:
    """A task's store: the write-back cache, the encoding and the metrics of a store, over
    the ``ByteStore`` ``byte_store`` (docs/architecture.md). ``get`` and ``put`` are the dirty
    entries' own ``__getitem__`` and ``__setitem__`` (``put`` through ``operator.setitem``), a
    key neither dirty nor cached is read from the bytes (``byte_store.get``, bound here) and decoded,
    ``flush`` encodes the dirty entries and hands them to the bytes (``byte_store.write``), and every
    key read or written is checked by the store's codecs as the job's store checks it."""

    __slots__ = ("name", "task", "byte_store", "get", "put", "_dirty", "_clean", "_cache_size",
                 "_write_batch_size", "_kenc", "_kdec", "_venc", "_vdec", "reads", "writes",
                 "deletes", "cache_writes", "check_key", "decode_entry", "where", "_get_bytes", "sweep",
                 "expired", "live_value")

    get: Callable[[Any], Any]
    put: Callable[[Any, Any], None]
    #: never a remote table's client
    remote = False
    #: writes go out in batches (``maybe_flush``, ``flush``)
    batched_writes = True

    def __init__(self, bytes_store: ByteStore, *, name: str, task: str,
                 key_encode: Callable[[Any], bytes], key_decode: Callable[[bytes], Any],
                 value_encode: Callable[[Any], bytes], value_decode: Callable[[bytes], Any],
                 cache_size: int, write_batch_size: int) -> None:
        self.name = name
        self.task = task
        self.byte_store = bytes_store
        #: the store, as errors name it (its bytes say where they are)
        self.where: Callable[[], str] = bytes_store.where
        self._get_bytes = bytes_store.get
        self._kenc, self._kdec = key_encode, key_decode
        self._venc, self._vdec = value_encode, value_decode
        self._cache_size = max(1, cache_size)
        self._write_batch_size = max(1, write_batch_size)
        #: a table's check of a key (``runtime.state.codec.store_key_check``): set by its backend
        self.check_key: Callable[[Any], None] | None = None
        clean = Dirty()
        clean.__missing__ = self._load
        self._clean: dict[Any, Any] = clean
        dirty = Dirty()
        dirty.__missing__ = clean.__getitem__
        self._dirty = dirty
        self.get = dirty.__getitem__
        # a partial of setitem: a third less time a call than the dict's bound __setitem__
        self.put = partial(setitem, dirty)
        #: ``decode_entry(kb, vb)``: what a scan of the bytes gives for an entry it reads
        self.decode_entry = self._entry_decoder()
        #: metrics: keys read from the bytes (a get the object cache answers costs nothing and
        #: is not counted), and values and deletes written to them (a key written twice between
        #: two flushes once)
        self.reads = 0
        self.writes = 0
        self.deletes = 0
        #: whether a flush keeps the values it wrote in the object cache; False for a writer
        #: that keeps its own cache of them (a tumbling window's panes): reads still cache
        self.cache_writes = True
        #: a table with a ttl (``runtime.state.ttl.attach``): deletes its expired entries after a
        #: commit's flush; and how many it deleted
        self.sweep: Callable[[], None] | None = None
        self.expired = 0
        #: with a ttl, a value as the object cache holds it -> as a reader sees it (None: gone);
        #: ``decode_entry`` already gives the latter for the bytes it reads
        self.live_value: Callable[[Any], Any] | None = None

    @property
    def flushes(self) -> int:
        """Writes to the bytes so far."""
        return self.byte_store.flushes

    # -- reading --------------------------------------------------------------------------------

    def _load(self, key: Any) -> Any:
        """A key in neither the dirty entries nor the clean cache: read it, and cache it (a
        miss too)."""
        v = self._read(key)
        clean = self._clean
        clean[key] = v
        if len(clean) > self._cache_size:
            evict(clean, self._cache_size)
        return v

    def peek(self, key: Any) -> Any:
        """``get`` that caches nothing: for a reader that keeps what it reads itself (a
        window's panes), so that reading many keys once leaves no trace in memory."""
        v = self._dirty.get(key, MISSING)
        if v is MISSING:
            v = self._clean.get(key, MISSING)
            if v is MISSING:
                v = self._read(key)
        live_value = self.live_value
        return v if live_value is None else live_value(v)

    def _read(self, key: Any) -> Any:
        """The value of ``key`` in the bytes, decoded (None: none)."""
        vb = self._get_bytes(key, self._kenc(key))
        self.reads += 1
        if vb is None:
            return None
        try:
            return self._vdec(vb)
        except Exception as e:
            raise decode_error(self.where(), f"the value of key {key!r}", e) from e

    def _entry_decoder(self) -> Callable[[bytes, bytes], tuple[Any, Any]]:
        """``decode_entry(kb, vb)``: an entry a scan of the bytes reads, with its key decoded
        (a list as a ``ListKey``, which ``get``, ``put`` and ``delete`` take as the tuple) and
        its value as ``get`` gives it now (a dirty or cached value, else ``vb`` decoded; None:
        deleted). A closure over the store's parts: a scan calls it for every entry."""
        dirty, clean, kdec, vdec = self._dirty, self._clean, self._kdec, self._vdec
        get_dirty, get_clean, where = dirty.get, clean.get, self.where

        def decode_entry(kb: bytes, vb: bytes) -> tuple[Any, Any]:
            try:
                k = kdec(kb)
                if type(k) is list:  # JSON gives a tuple back as a list
                    k = ListKey(k)
                try:
                    v = get_dirty(k, MISSING)
                    if v is MISSING:
                        v = get_clean(k, MISSING)
                except TypeError:  # a key its serde decodes unhashable (a JSON object) is
                    v = MISSING    # never cached: the bytes hold its value
                if v is MISSING:
                    v = vdec(vb)
            except Exception as e:
                raise decode_error(where(), f"the entry of key bytes {kb[:200]!r}",
                                   e) from e
            return k, v
        return decode_entry

    def range(self, start: Any, end: Any) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` pairs with ``start <= key < end`` in ``key_encode`` byte order.

        Flushes first. The bytes are read as the iteration goes, holding no snapshot, so
        writing while iterating is safe: values are current (a key deleted meanwhile is
        skipped, a value put meanwhile is the one yielded); a key inserted meanwhile past the
        iteration's position is yielded only if a flush happened in between."""
        self._flush_dirty()
        return self.byte_store.scan(self._kenc(start), self._kenc(end), self.decode_entry)

    def all(self) -> Iterator[tuple[Any, Any]]:
        """Every ``(key, value)`` pair in ``key_encode`` byte order (see ``range``)."""
        self._flush_dirty()
        return self.byte_store.scan(None, None, self.decode_entry)

    def latest_range(self, lo: bytes | None, hi: bytes | None, limit: int,
                     prefix: str | None = None,
                     scan: Callable[..., Iterator[tuple[Any, Any]]] | None = None
                     ) -> list[tuple[bytes, Any, Any]]:
        """Up to ``limit`` ``(encoded key, key, value)`` with encoded keys in ``[lo, hi)`` (None:
        no bound), in their byte order, as ``get`` sees them now; unlike ``range`` it flushes
        nothing (an interactive query must not change when the store is committed). With
        ``prefix``, only the dirty string keys that start with it are encoded to be placed.
        ``scan``: how the bytes are read (``byte_store.scan``'s signature; by default it)."""
        kenc = self._kenc
        pending: dict[bytes, tuple[Any, Any]] = {}
        dirty = self._dirty
        items = list(dirty.items()) if prefix is None else [
            (k, dirty[k]) for k in list(dirty) if type(k) is str and k.startswith(prefix)]
        live_value = self.live_value
        if live_value is not None:
            items = [(k, None if v is None else live_value(v)) for k, v in items]
        for k, v in items:
            kb = kenc(k)
            if (lo is None or kb >= lo) and (hi is None or kb < hi):
                pending[kb] = (k, v)
        found: dict[bytes, tuple[Any, Any]] = {}
        for k, v in (scan or self.byte_store.scan)(lo, hi, self.decode_entry):
            found[kenc(k)] = (k, v)
            if len(found) >= limit + len(pending):
                break
        found.update(pending)  # a dirty put not yet in the bytes, a dirty delete (None)
        live = [(kb, k, v) for kb, (k, v) in found.items() if v is not None]
        live.sort(key=_first)
        return live[:limit]

    def decode_value(self, vb: bytes) -> Any:
        """``vb`` decoded by the store's value serde (None: expired, in a table with a ttl)."""
        live_value = self.live_value
        return self._vdec(vb) if live_value is None else live_value(self._vdec(vb))

    def decode_key(self, kb: bytes) -> Any:
        """``kb`` decoded by the store's key serde."""
        return self._kdec(kb)

    def encode_key(self, key: Any) -> bytes:
        """``key`` encoded by the store's key serde."""
        return self._kenc(key)

    def delete(self, key: Any) -> None:
        """Deletes ``key`` (a tombstone in the changelog, if any, at the next flush)."""
        self._dirty[key] = None

    def __contains__(self, key: Any) -> bool:
        return self.get(key) is not None

    def __len__(self) -> int:
        """The number of live keys (dirty entries included; no flush)."""
        n = self.byte_store.count()
        clean, kenc, holds = self._clean, self._kenc, self.byte_store.holds
        for k, v in self._dirty.items():
            before = clean.get(k, MISSING)
            present = holds(kenc(k)) if before is MISSING else before is not None
            n += (v is not None) - present
        return n

    def size_bytes(self) -> int:
        """The bytes its bytes hold now."""
        return self.byte_store.size_bytes()

    # -- writing --------------------------------------------------------------------------------

    def maybe_flush(self) -> None:
        """Flushes when ``write_batch_size`` or more keys are dirty (the runtime calls this after
        each processed batch)."""
        if len(self._dirty) >= self._write_batch_size:
            self._flush_dirty()

    def _flush_dirty(self) -> None:
        """Encodes the last value of each dirty key (None for a delete) and writes them to the
        bytes (``byte_store.write``); the entries then move to the clean cache (unless
        ``cache_writes`` is False). An entry that does not encode raises, naming the store and
        its key."""
        dirty = self._dirty
        if not dirty:
            return
        self.byte_store.writable(len(dirty))
        entries, gone = encode_entries(dirty, self._kenc, self._venc, self.where())
        self.deletes += gone
        self.writes += len(entries) - gone
        self.byte_store.write(entries)
        settle(dirty, self._clean, self.cache_writes, self._cache_size)

    # -- committing -----------------------------------------------------------------------------

    def flush(self) -> None:
        """Writes the dirty entries to the bytes (and the changelog, if any) at a commit, and
        notes that the commit began here: ``mark_committed`` marks the store committed only if
        nothing was flushed between the two."""
        self._flush_dirty()
        if self.sweep is not None:
            self.sweep()
        self.byte_store.flushed()

    def mark_committed(self, changelog_offset: int | None) -> None:
        """The runtime's commit is done, its producer flushed: the store holds its changelog
        up to ``changelog_offset`` (None without a changelog)."""
        self.byte_store.mark_committed(changelog_offset)

    def close(self) -> None:
        """Closes the bytes. No flush: dirty entries are dropped (the runtime flushes at
        commit). Idempotent."""
        if self._dirty:
            log.debug("%s: closed with %d unflushed changes, dropped", self.where(),
                      len(self._dirty))
        self.byte_store.close()


def store_samples(task: str, store: CachedStore) -> list[Sample]:
    """The metrics of a task's store: keys read from its bytes (``gets``), values and deletes
    written (``puts``, ``deletes``), and the bytes it holds (0 while it closes)."""
    labels = {"task": task, "store": store.name}
    try:
        size = store.size_bytes()
    except Exception:  # a store closing meanwhile
        size = 0
    return [("store", "gets", labels, store.reads),
            ("store", "puts", labels, store.writes),
            ("store", "deletes", labels, store.deletes),
            ("store", "bytes", labels, size)]
