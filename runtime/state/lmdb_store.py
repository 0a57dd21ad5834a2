"""A task's durable key-value store: LMDB on disk, a write-back cache in front, a changelog behind.

This is Samza's ``CachedStore`` over a local store with a ``LoggedStore`` changelog, for one
(task, store) pair, with the interface of ``operators.state.InMemoryState`` (``get``, ``put``,
``delete``, ``range``, ``all``).

- **Hot path.** ``get`` and ``put`` are a dict's own ``__getitem__`` and ``__setitem__``: the dict
  holds the *dirty* entries (changed since the last flush; a delete is a dirty ``None``) and its
  ``__missing__`` looks in the clean cache of decoded objects, then in LMDB (a miss caches
  ``None`` too). A dirty hit costs nothing more than a dict lookup. The first ``get`` of a key
  after a flush goes through ``__missing__`` once. Cached values are the objects themselves, as
  with ``InMemoryState``: mutating one without ``put`` changes what ``get`` returns but not what
  is stored.
- **Write-back.** Nothing reaches LMDB or the changelog before ``flush()``, which encodes the last
  value of each dirty key (a tombstone for a delete), appends them to the changelog and writes
  them to LMDB in one transaction. ``maybe_flush()`` (called by the runtime after each batch)
  flushes once ``write_batch_size`` keys are dirty; ``range`` and ``all`` flush first.
- **Commit.** The runtime flushes every store, flushes its producer (the changelog is then
  durable) and calls ``mark_committed(offset)`` with the changelog offset the checkpoint will
  hold, before writing the checkpoint. The store's metadata says "uncommitted" from a flush until
  then, so a crash in between is seen at the next ``open``.
- **Restore.** ``open`` uses the local copy as is when it is committed at the checkpointed
  changelog offset ("host affinity"); otherwise it rebuilds it from the changelog's entries before
  that offset, passing each batch of entries through ``check`` when it is given (the runtime
  decodes them there, so an entry that does not decode meets its serde error policy before it
  reaches the store). Either way it then compensates changelog entries past the checkpoint (written by a
  run that stopped before checkpointing) by appending, for each of their keys, its value in the
  restored store, so replaying the whole changelog gives the restored state. ``restore_info``
  tells what happened.
- **Checksums.** Each LMDB value carries a checksum (``runtime.state.format``). A read that
  finds a value failing it (``get``, ``range``, ``all``, the trim at ``open``) means the file was
  changed on disk: with a changelog the store is rebuilt in place, with a warning naming the
  file, from the changelog's entries up to its last commit and the entries flushed since (kept in
  memory until the next commit, up to 10,000 of them: past that the error asks for a restart,
  which rebuilds the store from the changelog), and the read is done again; without one it is
  an error naming the file. A store of the older format 1 (no checksums) is rebuilt from its changelog, or
  without one migrated in place.
- **Long keys.** A key encoded in more than 478 bytes is held under its first 478 bytes and its
  hash, with the full key in the value (``runtime.state.format``), so any key works and LMDB
  keeps keys in the byte order of their encoding, long or short. Long keys that share their
  first 478 bytes are adjacent in LMDB; ``range`` and ``all`` read such a group whole and give
  it in the order of the full keys. So ``range`` and ``all`` give every key in ``key_encode``
  byte order, as ``InMemoryState`` does. A key decoded as a list (a tuple under ``JsonSerde``)
  is given as an ``operators.state.ListKey``, which ``get``, ``put`` and ``delete`` take as
  the tuple. A store of format 2 (where long keys came after all
  others, in the order of their hash) is rebuilt from its changelog, or without one migrated
  in place.

>>> import shutil, tempfile
>>> from operators.state import decode_key, encode_key
>>> from samza_dsl.serdes import SafeSerde
>>> v = SafeSerde()
>>> d = tempfile.mkdtemp()
>>> s = LmdbStore.open(d, name="counts", task="Partition 0", key_encode=encode_key,
...                    key_decode=decode_key, value_encode=v.serialize, value_decode=v.deserialize)
>>> s.restore_info["mode"]
'fresh'
>>> s.put(("b", 2), 20); s.put(("a", 1), 10); s.delete(("b", 2))
>>> s.get(("a", 1)), s.get(("b", 2))
(10, None)
>>> list(s.all())
[(('a', 1), 10)]
>>> s.mark_committed(None); s.close()
>>> s = LmdbStore.open(d, name="counts", task="Partition 0", key_encode=encode_key,
...                    key_decode=decode_key, value_encode=v.serialize, value_decode=v.deserialize)
>>> s.restore_info["mode"], s.get(("a", 1)), len(s)
('local', 10, 1)
>>> s.close(); shutil.rmtree(d)
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from operator import itemgetter
from typing import Any, Protocol, cast

import lmdb

from operators.state import ListKey as _ListKey
from runtime.state.format import MAX_KEY as _MAX_KEY
from runtime.state.format import PREFIX as _PREFIX
from runtime.state.format import SHORT_LEN as _SHORT_LEN
from runtime.state.format import ChecksumError as _Corrupt
from runtime.state.format import checksummed as _checksummed
from runtime.state.format import frame as _frame
from runtime.state.format import full_key as _full_key
from runtime.state.format import lmdb_key as _lmdb_key
from runtime.state.format import unframe as _unframe
from runtime.state.format import unframe_2 as _unframe_2
from runtime.storage import (
    MappedPages,
    check_file_not_truncated,
    reserve_lock_file,
    storage_error,
)
from samza_dsl.errors import SamzaError, SerdeError

__all__ = ["Changelog", "LmdbStore", "local_state"]

log = logging.getLogger("samza_dsl.state")

_MISSING: Any = object()
_META_KEY = b"state"
_FORMAT = 3  # 3: keys in byte order, however long; 2: long keys in hash order; 1: no checksums
_FORMATS = {1: "values without checksums", 2: "keys of 511 bytes or more in the order of their hash"}
_SCAN_CHUNK = 1024  # entries read per read transaction by range/all
_REPLAY_BATCH = 200_000  # distinct keys folded in memory before a write transaction
#: the most entries flushed since the last commit kept for a rebuild in place (see _repair)
_SINCE_MAX = 10_000
_PAGE = 4096  # what a lookup or a write is counted as mapping in (MappedPages)
_first = itemgetter(0)
# LMDB keys are the encoded keys behind this byte: LMDB cannot store an empty key (str.encode
# of ""); the changelog holds the encoded keys as they are
_P = b"\x00"  # the prefix of every LMDB key (see runtime.state.format)
_GROUP_END = b"\xff" * (_MAX_KEY - _SHORT_LEN)  # after a group's prefix: past all its keys
class Changelog(Protocol):
    """A store's changelog partition, as the runtime gives it to ``LmdbStore.open``."""

    def append(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        """Buffers ``(key, value)`` entries (``(key, None)`` is a tombstone); they are durable
        once the runtime flushes its producer."""
        ...

    def end_offset(self) -> int:
        """The next offset of the partition, counting durable entries only."""
        ...

    def read(self, start: int, end: int
             ) -> Iterator[tuple[int | Sequence[int], list[tuple[bytes, bytes | None]]]]:
        """Batches of the entries with offsets in ``[start, end)``: ``(offset of the batch's
        first entry, entries)`` when their offsets follow on, else ``(each entry's offset,
        entries)`` (a compacted changelog has gaps)."""
        ...


def _encode_all(encode: Callable[[Any], bytes], objs: list[Any]) -> list[bytes]:
    """``encode`` of each of ``objs``: in one call where the encoder offers ``encode.many``
    (a table's serde that encodes batches, ``runtime.state.codec.table_codec``)."""
    many = getattr(encode, "many", None)
    return list(map(encode, objs)) if many is None else cast(list[bytes], many(objs))


class _Dirty(dict[Any, Any]):
    """The dirty entries; a missing key is looked up in the clean cache, then in LMDB."""

    __slots__ = ("clean", "load")

    clean: dict[Any, Any]
    load: Callable[[Any], Any]

    def __missing__(self, key: Any) -> Any:
        v = self.clean.get(key, _MISSING)
        if v is _MISSING:
            return self.load(key)
        return v


class LmdbStore:
    """One task's store: see the module docstring. Create it with ``LmdbStore.open``."""

    __slots__ = ("path", "name", "task", "restore_info", "get", "put", "_dirty", "_clean",
                 "_cache_size", "_write_batch_size", "_map_size", "_kenc", "_kdec", "_venc",
                 "_vdec", "_changelog", "_env", "_data", "_meta", "_rtxn", "_committed",
                 "_flushes", "_commit_flushes", "_check", "_base", "_since", "_repairs",
                 "reads", "writes", "deletes", "cache_writes", "_pages")

    get: Callable[[Any], Any]
    put: Callable[[Any, Any], None]

    def __init__(self, path: str, *, name: str, task: str, key_encode: Callable[[Any], bytes],
                 key_decode: Callable[[bytes], Any], value_encode: Callable[[Any], bytes],
                 value_decode: Callable[[bytes], Any], changelog: Changelog | None,
                 cache_size: int, write_batch_size: int, map_size: int,
                 check: Callable[[int | Sequence[int], list[tuple[bytes, bytes | None]]],
                                 list[tuple[bytes, bytes | None]]] | None = None) -> None:
        self.path = path
        self._check = check
        self.name = name
        self.task = task
        self.restore_info: dict[str, Any] = {}
        self._kenc = key_encode
        self._kdec = key_decode
        self._venc = value_encode
        self._vdec = value_decode
        self._changelog = changelog
        self._cache_size = max(1, cache_size)
        self._write_batch_size = max(1, write_batch_size)
        self._map_size = map_size
        self._clean: dict[Any, Any] = {}
        dirty = _Dirty()
        dirty.clean = self._clean
        dirty.load = self._load
        self._dirty = dirty
        self.get = dirty.__getitem__
        self.put = dirty.__setitem__
        self._env: Any = None
        self._data: Any = None
        self._meta: Any = None
        self._rtxn: Any = None
        self._committed = False
        self._flushes = 0  # flush transactions so far
        self._commit_flushes = -1  # _flushes when flush() last ran (see mark_committed)
        # with a changelog, LMDB holds the changelog's state at offset _base plus the entries
        # flushed since (_since): what a rebuild in place after a checksum failure writes back
        self._base = 0
        self._since: dict[bytes, bytes | None] | None = {}  # None: more than _SINCE_MAX
        self._repairs = 0
        #: metrics: keys read from LMDB (a get the object cache answers costs nothing and is
        #: not counted), and values and deletes written to it (a key written twice between
        #: two flushes once)
        self.reads = 0
        self.writes = 0
        self.deletes = 0
        #: whether a flush keeps the values it wrote in the object cache; False for a writer
        #: that keeps its own cache of them (a tumbling window's panes): reads still cache
        self.cache_writes = True
        #: the pages of the file that reads and writes mapped in, let go of now and then (a
        #: store much larger than what the job reads again soon need not stay resident)
        self._pages = MappedPages(self._data_file())

    # -- opening and restoring ------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, name: str, task: str,
             key_encode: Callable[[Any], bytes], key_decode: Callable[[bytes], Any],
             value_encode: Callable[[Any], bytes], value_decode: Callable[[bytes], Any],
             changelog: Changelog | None = None, checkpointed: int | None = None,
             cache_size: int = 100_000, write_batch_size: int = 10_000,
             map_size: int = 1 << 34,
             check: Callable[[int | Sequence[int], list[tuple[bytes, bytes | None]]],
                             list[tuple[bytes, bytes | None]]] | None = None) -> LmdbStore:
        """Opens (creating or restoring) the store in directory ``path``.

        ``checkpointed`` is the changelog offset the task's checkpoint holds (None: no checkpoint,
        so nothing of the changelog counts yet). ``check(offsets, entries)`` returns the
        entries of a changelog batch to replay (or raises); ``offsets`` are as
        ``Changelog.read`` gives them. See the module docstring for the
        rules; ``restore_info`` records what was done."""
        store = cls(os.fspath(path), name=name, task=task, key_encode=key_encode,
                    key_decode=key_decode, value_encode=value_encode, value_decode=value_decode,
                    changelog=changelog, cache_size=cache_size,
                    write_batch_size=write_batch_size, map_size=map_size, check=check)
        t0 = time.perf_counter()
        try:
            if changelog is None:
                store._open_local()
            else:
                store._restore(changelog, checkpointed if checkpointed is not None else 0)
        except BaseException:
            store._detach()
            raise
        store.restore_info["seconds"] = time.perf_counter() - t0
        store._commit_flushes = store._flushes  # restore's own writes precede any commit
        return store

    @classmethod
    def open_replica(cls, path: str | os.PathLike[str], *, name: str, task: str,
                     key_encode: Callable[[Any], bytes], key_decode: Callable[[bytes], Any],
                     value_encode: Callable[[Any], bytes], value_decode: Callable[[bytes], Any],
                     map_size: int = 1 << 34,
                     check: Callable[[int | Sequence[int], list[tuple[bytes, bytes | None]]],
                                     list[tuple[bytes, bytes | None]]] | None = None
                     ) -> LmdbStore:
        """Opens the local copy in ``path`` as a standby's replica of the task's store, fed by
        ``replicate`` with the changelog's entries. A copy committed at a changelog offset is
        kept (``position`` is that offset); any other (none, uncommitted, unreadable, of an
        older format) starts empty at offset 0. When the task comes to this container, ``open``
        replays only the changelog's tail past ``position``."""
        store = cls(os.fspath(path), name=name, task=task, key_encode=key_encode,
                    key_decode=key_decode, value_encode=value_encode, value_decode=value_decode,
                    changelog=None, cache_size=1, write_batch_size=1, map_size=map_size,
                    check=check)
        try:
            try:
                store._attach()
                meta = store._read_meta()
            except (lmdb.Error, ValueError):
                meta = None
            if meta is None or meta["version"] != _FORMAT or not meta["committed"] \
                    or meta["changelog_offset"] is None:
                store._wipe()
                store._write_meta(0, True)
                meta = {"changelog_offset": 0}
        except BaseException:
            store._detach()
            raise
        store._base = int(meta["changelog_offset"])
        store.restore_info = {"mode": "standby", "entries_replayed": 0, "from": store._base}
        return store

    @property
    def position(self) -> int:
        """The changelog offset the store holds the changelog's entries up to (as of its last
        commit or ``replicate``)."""
        return self._base

    def replicate(self, offsets: Sequence[int], entries: list[tuple[bytes, bytes | None]],
                  upto: int) -> None:
        """A standby's step: writes the changelog's ``entries`` (at ``offsets``, all below
        ``upto``) and records the store as holding the changelog up to ``upto``."""
        if self._env is None:
            raise SamzaError(f"{self._where()} is closed")
        if entries:
            if self._check is not None:
                entries = self._check(offsets, entries)
            self._write_raw(_frame(dict(entries).items()), uncommit=True)
            self.restore_info["entries_replayed"] += len(entries)
        self._write_meta(upto, True)
        self._base = upto

    def _where(self) -> str:
        return f"store {self.name!r} of task {self.task!r} at {self.path}"

    def _data_file(self) -> str:
        return os.path.join(self.path, "data.mdb")

    def _attach(self) -> None:
        """Opens the LMDB environment and its two databases."""
        # A full, read-only or forbidden disk is a StorageError, which the callers do not take
        # for a corrupt file: nothing is rebuilt or deleted over it.
        try:
            os.makedirs(self.path, exist_ok=True)
        except OSError as e:
            raise storage_error(e, self.path, f"creating the directory of {self._where()}") \
                or SamzaError(f"cannot create the directory of {self._where()}: {e}") from e
        reserve_lock_file(self.path, self._where())
        try:
            env = lmdb.open(self.path, map_size=self._map_size, subdir=True, max_dbs=2,
                            sync=False, metasync=False, readahead=False)
        except lmdb.Error as e:
            fault = storage_error(e, self.path, f"opening {self._where()}")
            if fault is not None:
                raise fault from e
            if "already open" in str(e):  # not corruption: never rebuild over an open store
                raise SamzaError(
                    f"{self._where()}: the directory is already open in this process (another "
                    f"store, or this one not closed); close it before opening it again, or give "
                    f"each (task, store) its own directory") from e
            raise
        try:
            # a truncated file would crash the process (SIGBUS) at its first read through the map
            size = os.path.getsize(self._data_file())
            need = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
            if size < need:
                raise lmdb.CorruptedError(f"{self._data_file()} is truncated: {size} bytes, its "
                                          f"last page ends at {need}")
            self._data = env.open_db(b"data")
            self._meta = env.open_db(b"meta")
        except BaseException:
            env.close()
            raise
        self._env = self._pages.env = env

    def _detach(self) -> None:
        self._end_read()
        if self._env is not None:
            self._env.close()
        self._env = self._data = self._meta = self._pages.env = None

    def _read_meta(self) -> dict[str, Any] | None:
        """The metadata record (None when absent); a sanity read of the data too. Raises
        lmdb.Error or ValueError when unreadable. Its ``version`` may be an older format's."""
        with self._env.begin() as txn:
            raw = txn.get(_META_KEY, db=self._meta)
            cur = txn.cursor(self._data)
            if cur.first():  # walks the tree to its first and last leaves
                cur.key()
                cur.last()
                cur.key()
        if raw is None:
            return None
        meta = json.loads(raw)
        if (not isinstance(meta, dict) or meta.get("version") not in (*_FORMATS, _FORMAT)
                or not isinstance(meta.get("committed"), bool)
                or not (meta.get("changelog_offset") is None
                        or type(meta.get("changelog_offset")) is int)):
            raise ValueError(f"unexpected store metadata {raw[:200]!r}")
        return meta

    def _meta_record(self, offset: int | None, committed: bool) -> bytes:
        return json.dumps({"version": _FORMAT, "changelog_offset": offset,
                           "committed": committed}).encode()

    def _write_meta(self, offset: int | None, committed: bool) -> None:
        self._end_read()
        with self._env.begin(write=True) as txn:
            txn.put(_META_KEY, self._meta_record(offset, committed), db=self._meta)
        self._committed = committed

    def _open_local(self) -> None:
        data_file = self._data_file()
        existed = os.path.isfile(data_file) and os.path.getsize(data_file) > 0
        if os.path.isfile(data_file) and not existed:
            log.warning("%s: the local file %s is empty (its contents were lost): the store "
                        "starts empty", self._where(), data_file)
        try:
            self._attach()
            meta = self._read_meta()
        except (lmdb.Error, ValueError) as e:
            self._detach()
            raise SamzaError(
                f"{self._where()}: the local file {data_file} is corrupt or unreadable "
                f"({type(e).__name__}: {e}); the store has no changelog, so its state cannot be "
                f"rebuilt. Delete the directory {self.path} to start the store empty, or enable "
                f"the store's changelog so it can be restored") from e
        mode = "local" if existed else "fresh"
        if meta is None:
            self._write_meta(None, True)
        else:
            if meta["version"] != _FORMAT:
                self._migrate(meta)
            self._committed = meta["committed"]
        self.restore_info = {"mode": mode, "entries_replayed": 0, "trimmed": 0,
                             "reason": ("the local copy is used as is (no changelog)" if existed
                                        else "no local copy yet: starting empty (no changelog)")}
        log.info("%s: %s", self._where(), self.restore_info["reason"])

    def _restore(self, changelog: Changelog, cp: int) -> None:
        data_file = self._data_file()
        level = logging.INFO
        reason = ""
        behind: int | None = None  # a committed local copy behind the checkpoint: its offset
        if not os.path.isfile(data_file):
            reason = f"no local copy ({data_file} does not exist)"
        else:
            try:
                self._attach()
                meta = self._read_meta()
            except (lmdb.Error, ValueError) as e:
                self._detach()
                level = logging.WARNING
                reason = (f"the local copy {data_file} is corrupt or unreadable "
                          f"({type(e).__name__}: {e})")
            else:
                if meta is None:
                    reason = (f"the local copy {data_file} has no store metadata (its creation "
                              f"was interrupted, or another program wrote it)")
                elif meta["version"] != _FORMAT:
                    reason = (f"the local copy {data_file} has the older store format "
                              f"{meta['version']} ({_FORMATS[meta['version']]})")
                elif not meta["committed"]:
                    reason = (f"the local copy {data_file} is uncommitted: a run flushed changes "
                              f"to it and stopped before its next commit")
                elif meta["changelog_offset"] is None:
                    level = logging.WARNING
                    reason = (f"the local copy {data_file} was written without a changelog, and "
                              f"the changelog is the source of truth now: its contents are "
                              f"replaced by the changelog's")
                elif meta["changelog_offset"] < cp:
                    behind = meta["changelog_offset"]
                elif meta["changelog_offset"] != cp:
                    reason = (f"the local copy {data_file} is at changelog offset "
                              f"{meta['changelog_offset']} but the checkpoint holds {cp}")
        if not reason and behind is not None:
            reason = self._catch_up(changelog, behind, cp)
        elif not reason:
            self._committed = True
            self.restore_info = {"mode": "host-affinity", "entries_replayed": 0,
                                 "reason": f"the local copy is committed at the checkpointed "
                                           f"changelog offset {cp} (host affinity)"}
            log.info("%s: using the local copy as is: %s", self._where(),
                     self.restore_info["reason"])
            try:
                self.restore_info["trimmed"] = self._trim(changelog, cp)
            except _Corrupt as e:
                level = logging.WARNING
                reason = (f"the local copy {data_file} holds a value that fails its checksum "
                          f"(LMDB key {e.lkey[:60]!r}): the file was changed on disk")
        if reason:
            log.log(level, "%s: rebuilding from the changelog's offsets [0, %d): %s",
                    self._where(), cp, reason)
            t0 = time.perf_counter()
            replayed = self._rebuild(changelog, cp)
            mode = "rebuilt" if replayed else "fresh"
            self.restore_info = {"mode": mode, "entries_replayed": replayed, "reason": reason}
            log.info("%s: %s: replayed %d changelog entries in %.3f s (%d keys)", self._where(),
                     "rebuilt" if replayed else "starting empty", replayed,
                     time.perf_counter() - t0, self._entries())
            self.restore_info["trimmed"] = self._trim(changelog, cp)
        self._base = cp

    def _catch_up(self, changelog: Changelog, start: int, cp: int) -> str:
        """Brings a local copy committed at changelog offset ``start`` (below ``cp``: a
        standby's, or one an earlier run of the task left here) to ``cp`` by replaying only the
        changelog's tail ``[start, cp)``, committed there. Returns "" when done, else why the
        copy must be rebuilt instead (a value failing its checksum)."""
        t0 = time.perf_counter()
        self._write_meta(start, False)  # a crash while catching up rebuilds it next time
        replayed = self._replay(changelog, cp, start)
        self._write_meta(cp, True)
        self.restore_info = {
            "mode": "tail", "entries_replayed": replayed, "from": start,
            "reason": f"the local copy is committed at changelog offset {start}, behind the "
                      f"checkpointed offset {cp}: only the changelog's tail was replayed"}
        log.info("%s: caught up from changelog offset %d to the checkpointed %d: replayed %d "
                 "changelog entries in %.3f s", self._where(), start, cp, replayed,
                 time.perf_counter() - t0)
        try:
            self.restore_info["trimmed"] = self._trim(changelog, cp)
        except _Corrupt as e:
            return (f"the local copy {self._data_file()} holds a value that fails its checksum "
                    f"(LMDB key {e.lkey[:60]!r}): the file was changed on disk")
        return ""

    def _wipe(self) -> None:
        """Deletes the local copy and opens an empty one."""
        self._detach()
        for f in ("data.mdb", "lock.mdb"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(self.path, f))
        self._attach()

    def _rebuild(self, changelog: Changelog, cp: int) -> int:
        """Replaces the local copy by the changelog's state at offset ``cp``, committed there.
        Returns how many entries were replayed."""
        self._wipe()
        replayed = self._replay(changelog, cp) if cp > 0 else 0
        self._write_meta(cp, True)
        return replayed

    def _replay(self, changelog: Changelog, cp: int, start: int = 0) -> int:
        """Writes the changelog's entries in [start, cp) (last write wins, tombstones
        delete)."""
        pending: dict[bytes, bytes | None] = {}
        n = 0
        check = self._check
        for offset, entries in changelog.read(start, cp):
            n += len(entries)
            pending.update(entries if check is None else check(offset, entries))
            if len(pending) >= _REPLAY_BATCH:
                self._write_raw(_frame(pending.items()))
                pending = {}
        if pending:
            self._write_raw(_frame(pending.items()))
        return n

    def _migrate(self, meta: dict[str, Any]) -> None:
        """Rewrites a store of an older format (no changelog) in this format, in one
        transaction. Format 1's values get their checksums; the keys that are laid out
        otherwise now (format 2's long keys, and keys of 479 to 510 bytes) move."""
        self._end_read()
        version = meta["version"]
        n = 0
        moved: list[tuple[bytes, bytes, bytes]] = []  # (old LMDB key, encoded key, value)
        with self._env.begin(write=True) as txn:
            pos, inclusive = _P, True
            while True:
                cur = txn.cursor(self._data)
                if not cur.set_range(pos) or (not inclusive and cur.key() == pos
                                              and not cur.next()):
                    break
                chunk = list(islice(cur.iternext(), _SCAN_CHUNK))
                rewritten = []
                for lk, raw in chunk:
                    if version == 1:
                        kb, vb = lk[1:], raw
                    else:
                        try:
                            kb, vb = _unframe_2(lk, raw)
                        except _Corrupt:
                            self._repair(f"the value of LMDB key {lk[:60]!r} (store format "
                                         f"{version})")  # raises: there is no changelog
                            raise
                    if len(lk) <= _SHORT_LEN and lk[:1] == _P:
                        if version == 1:
                            rewritten.append((lk, _checksummed(lk, vb)))
                    else:
                        moved.append((lk, kb, vb))
                if rewritten:
                    txn.cursor(self._data).putmulti(rewritten)
                n += len(chunk)
                pos, inclusive = chunk[-1][0], False
                if len(chunk) < _SCAN_CHUNK:
                    break
            for lk, _, _ in moved:
                txn.delete(lk, b"", self._data)
            puts = _frame((kb, vb) for _, kb, vb in moved)
            if puts:
                txn.cursor(self._data).putmulti(puts)
            txn.put(_META_KEY, self._meta_record(meta["changelog_offset"], meta["committed"]),
                    db=self._meta)
        self._flushes += 1
        log.info("%s: migrated %d entries from store format %s to %d (%d keys moved)",
                 self._where(), n, version, _FORMAT, len(moved))

    def _repair(self, what: str) -> None:
        """A read found a value failing its checksum: rebuilds the store in place from the
        changelog (see the module docstring), or raises without one."""
        where = (f"{self._where()}: {what} in {self._data_file()} fails its checksum (the file "
                 f"was changed on disk)")
        if self._changelog is None:
            raise SamzaError(
                f"{where}; the store has no changelog, so its state cannot be rebuilt. Stop the "
                f"job and delete the directory {self.path} to start the store empty, or enable "
                f"the store's changelog so a damaged copy can be restored")
        if self._since is None:
            raise SamzaError(
                f"{where}; more than {_SINCE_MAX} entries were written since the last commit, "
                f"too many to keep in memory for a rebuild in place. Restart the job: the store "
                f"is rebuilt from its changelog when it opens")
        self._repairs += 1
        if self._repairs > 3:
            raise SamzaError(
                f"{where}, again after {self._repairs - 1} rebuilds from the changelog in this "
                f"run: the disk or memory may be failing. Stop the job and check the machine")
        log.warning("%s: rebuilding it from the changelog's offsets [0, %d) and the %d entries "
                    "flushed since", where, self._base, len(self._since))
        self._rebuild(self._changelog, self._base)
        if self._since:
            self._write_raw(_frame(self._since.items()), uncommit=True)
            self._committed = False
        self._flushes += 1  # scans read their chunk again

    def _trim(self, changelog: Changelog, cp: int) -> int:
        """Compensates changelog entries at or past the checkpoint: appends, for each of their
        keys, its value here (a tombstone when absent). Returns how many keys."""
        end = changelog.end_offset()
        if end < cp:
            log.warning("%s: the changelog ends at offset %d, before the checkpointed offset %d: "
                        "it lost entries (was it deleted or truncated?), so a rebuild from it "
                        "would not give this state", self._where(), end, cp)
            return 0
        if end == cp:
            return 0
        keys: dict[bytes, None] = {}
        for _offset, entries in changelog.read(cp, end):
            for k, _ in entries:
                keys[k] = None
        if not keys:
            return 0
        with self._env.begin() as txn:
            get = txn.get
            db = self._data
            compensation: list[tuple[bytes, bytes | None]] = []
            for k in keys:
                lk = _lmdb_key(k)
                raw = get(lk, None, db)
                compensation.append((k, None if raw is None else _unframe(lk, raw)[1]))
        changelog.append(compensation)
        self._write_meta(cp, False)  # durable only after the runtime's next producer flush
        log.info("%s: the changelog has %d entries past the checkpointed offset %d (a run "
                 "stopped before checkpointing): appended the current value of their %d keys",
                 self._where(), end - cp, cp, len(compensation))
        return len(compensation)

    # -- reading --------------------------------------------------------------------------------

    def _reader(self) -> Any:
        txn = self._rtxn
        if txn is None:
            if self._env is None:
                raise SamzaError(f"{self._where()} is closed")
            txn = self._rtxn = self._env.begin(db=self._data)
        return txn

    def _end_read(self) -> None:
        txn = self._rtxn
        if txn is not None:
            self._rtxn = None
            txn.abort()

    def _load(self, key: Any) -> Any:
        """A key in neither the dirty entries nor the clean cache: read it from LMDB, and cache
        it (a miss too)."""
        v = self._read(key)
        clean = self._clean
        clean[key] = v
        if len(clean) > self._cache_size:
            self._evict()
        return v

    def peek(self, key: Any) -> Any:
        """``get`` that caches nothing: for a reader that keeps what it reads itself (a
        window's panes), so that reading many keys once leaves no trace in memory."""
        v = self._dirty.get(key, _MISSING)
        if v is _MISSING:
            v = self._clean.get(key, _MISSING)
            if v is _MISSING:
                return self._read(key)
        return v

    def _read(self, key: Any) -> Any:
        """The value of ``key`` in LMDB (None: none)."""
        kb = self._kenc(key)
        lk = _lmdb_key(kb)
        self.reads += 1
        self._pages.read(_PAGE)  # a lookup maps in about a page
        try:
            raw = self._reader().get(lk)
        except lmdb.Error as e:
            fault = storage_error(e, self._data_file(), f"reading key {key!r:.200} of {self._where()}")
            if fault is not None:  # a disk fault: the file itself may be fine, never delete it
                raise fault from e
            recover = ("stop the job and move the directory aside: the store is rebuilt from its "
                       "changelog at the next start" if self._changelog is not None else
                       "stop the job and restore the directory from a backup; the store has no "
                       "changelog to rebuild it from")
            raise SamzaError(
                f"{self._where()}: reading key {key!r:.200} from {self._data_file()} failed "
                f"({type(e).__name__}: {e}); LMDB finds the file damaged: {recover}") from e
        if raw is None:
            v = None
        else:
            try:
                stored, vb = _unframe(lk, raw)
            except _Corrupt:
                self._repair(f"the value of key {key!r}")
                return self._read(key)
            if stored != kb:
                raise SamzaError(
                    f"{self._where()}: keys {stored[:60]!r}... and {kb[:60]!r}... share their "
                    f"blake2b hash; store them under shorter keys")
            try:
                v = self._vdec(vb)
            except Exception as e:
                raise self._decode_error(f"the value of key {key!r}", e) from e
        return v

    def _evict(self) -> None:
        """Drops the oldest-inserted entries of the clean cache, down to half its size."""
        clean = self._clean
        for k in list(islice(clean, len(clean) - self._cache_size // 2)):
            del clean[k]

    def _decode_error(self, what: str, e: Exception) -> SerdeError:
        return SerdeError(
            f"{self._where()}: {what} does not decode ({type(e).__name__}: {e}): another serde "
            f"wrote it (an older version of the job?) or it is damaged. Reset the job's state "
            f"(samza-dsl reset) to start it over")

    def delete(self, key: Any) -> None:
        """Deletes ``key`` (a tombstone in the changelog at the next flush)."""
        self._dirty[key] = None

    def __contains__(self, key: Any) -> bool:
        return self.get(key) is not None

    def range(self, start: Any, end: Any) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` pairs with ``start <= key < end`` in ``key_encode`` byte order.

        Flushes first. Entries are read from LMDB in chunks of 1024 (after a flush, from LMDB's
        new state), so an iteration holds no snapshot and writing while iterating is safe: values
        are current (a key deleted meanwhile is skipped, a value put meanwhile is the one
        yielded); a key inserted meanwhile past the iteration's position is yielded only if a
        flush happened in between."""
        self._flush_dirty()
        return self._range(self._kenc(start), self._kenc(end))

    def _range(self, lo: bytes, hi: bytes) -> Iterator[tuple[Any, Any]]:
        if lo >= hi:
            return
        # LMDB keys are in the order of the encoded keys (runtime.state.format): a bound of a
        # short key is exact; one of a long key starts (or ends past) its group, then filters
        if len(lo) <= _PREFIX:
            llo, klo = _P + lo, None
        else:
            llo, klo = _P + lo[:_PREFIX], lo
        if len(hi) <= _PREFIX:
            lhi, khi = _P + hi, None
        else:
            lhi, khi = _P + hi[:_PREFIX] + _GROUP_END + b"\xff", hi
        yield from self._scan(llo, lhi, klo, khi)

    def all(self) -> Iterator[tuple[Any, Any]]:
        """Every ``(key, value)`` pair in ``key_encode`` byte order (see ``range``)."""
        self._flush_dirty()
        return self._scan(_P, None, None, None)

    def _chunk(self, pos: bytes, inclusive: bool, hi: bytes | None,
               after: tuple[bytes, bytes] | None
               ) -> tuple[list[tuple[bytes, bytes]], bool, bytes | None]:
        """Up to ``_SCAN_CHUNK`` entries from ``pos`` (and before ``hi``), with each group of
        long keys sorted by full key (a group the chunk ends in is read whole); whether more
        may follow; and where they do when the chunk ends with such a group (else None: after
        its last entry). ``after``: (a group, the last full key done in it) to skip."""
        cur = self._reader().cursor()
        if not cur.set_range(pos):
            return [], False, None
        if not inclusive and cur.key() == pos and not cur.next():
            return [], False, None
        out = list(islice(cur.iternext(), _SCAN_CHUNK))
        self._pages.read(sum(len(k) + len(v) for k, v in out))
        more = len(out) == _SCAN_CHUNK
        if hi is not None and out and out[-1][0] >= hi:
            out = out[:bisect_left(out, hi, key=_first)]
            more = False
        if out and max(map(len, map(_first, out))) > _SHORT_LEN:
            return self._sort_groups(out, more, after)
        return out, more, None

    def _sort_groups(self, chunk: list[tuple[bytes, bytes]], more: bool,
                     after: tuple[bytes, bytes] | None
                     ) -> tuple[list[tuple[bytes, bytes]], bool, bytes | None]:
        """``_chunk``'s answer for a chunk with long keys: each group (long keys sharing their
        first ``PREFIX`` bytes, adjacent in LMDB) in the order of their full keys."""
        end = None
        out: list[tuple[bytes, bytes]] = []
        i, n = 0, len(chunk)
        while i < n:
            lk = chunk[i][0]
            if len(lk) <= _SHORT_LEN:
                out.append(chunk[i])
                i += 1
                continue
            group = lk[:_SHORT_LEN]
            j = i + 1
            while j < n and chunk[j][0].startswith(group):
                j += 1
            members = chunk[i:j]
            if j == n and more:  # the group may go on past the chunk: read it whole
                cur = self._reader().cursor()
                cur.set_range(group)
                members = []
                for entry in cur:
                    if not entry[0].startswith(group):
                        break
                    if len(entry[0]) > _SHORT_LEN:
                        members.append(entry)
                end = group + _GROUP_END
            members.sort(key=_full_key)
            if after is not None and after[0] == group:
                done = after[1]
                members = [m for m in members if _full_key(m) > done]
            out.extend(members)
            i = j
        return out, more, end

    def _scan(self, lo: bytes, hi: bytes | None, klo: bytes | None,
              khi: bytes | None) -> Iterator[tuple[Any, Any]]:
        """The entries with LMDB keys in [lo, hi) whose encoded keys are in [klo, khi) (None:
        no bound), in the order of their encoded keys."""
        if hi is not None and lo >= hi:
            return
        dirty, clean, kdec, vdec = self._dirty, self._clean, self._kdec, self._vdec
        pos, inclusive = lo, True
        after: tuple[bytes, bytes] | None = None  # inside a group: (its prefix, last key done)
        while True:
            flushes = self._flushes
            chunk, more, end = self._chunk(pos, inclusive, hi, after)
            for lk, raw in chunk:
                if self._flushes != flushes:  # LMDB changed under the chunk: read it again
                    break
                try:
                    kb, vb = _unframe(lk, raw)
                except _Corrupt:
                    self._repair(f"the value of LMDB key {lk[:60]!r}")
                    break  # rebuilt: read on from the last entry done
                if len(lk) <= _SHORT_LEN:
                    pos, inclusive, after = lk, False, None
                else:  # a group's keys are sorted by full key, not LMDB key: resume by that
                    pos = lk[:_SHORT_LEN]
                    inclusive, after = False, (pos, kb)
                if (klo is not None and kb < klo) or (khi is not None and kb >= khi):
                    continue
                try:
                    k = kdec(kb)
                    if type(k) is list:  # JSON gives a tuple back as a list: get, put and
                        k = _ListKey(k)  # delete take a ListKey as the tuple
                    try:
                        v = dirty.get(k, _MISSING)
                        if v is _MISSING:
                            v = clean.get(k, _MISSING)
                    except TypeError:  # a key its serde decodes unhashable (a JSON object) is
                        v = _MISSING   # never cached: LMDB holds its value
                    if v is _MISSING:
                        v = vdec(vb)
                except Exception as e:
                    raise self._decode_error(f"the entry of key bytes {kb[:200]!r}", e) from e
                if v is not None:
                    yield k, v
            else:
                if not more:
                    return
                if end is not None:  # it ended with a whole group: read on past the group
                    pos, inclusive, after = end, False, None
            # a full chunk is done, or LMDB changed under it: read on from the last key done

    def _entries(self) -> int:
        return int(self._reader().stat(self._data)["entries"])

    def size_bytes(self) -> int:
        """The bytes its LMDB pages hold now (what the data file uses of its map). Safe from
        another thread (a reporter's): it reads in a transaction of its own."""
        env = self._env
        if env is None:
            return 0
        with env.begin(db=self._data) as txn:
            st = txn.stat(self._data)
        return int(st["psize"]) * int(st["branch_pages"] + st["leaf_pages"]
                                      + st["overflow_pages"])

    def __len__(self) -> int:
        """The number of live keys (dirty entries included; no flush)."""
        txn = self._reader()
        n = int(txn.stat(self._data)["entries"])
        clean, kenc = self._clean, self._kenc
        for k, v in self._dirty.items():
            before = clean.get(k, _MISSING)
            present = ((txn.get(_lmdb_key(kenc(k))) is not None) if before is _MISSING
                       else before is not None)
            n += (v is not None) - present
        return n

    # -- writing --------------------------------------------------------------------------------

    def maybe_flush(self) -> None:
        """Flushes when ``write_batch_size`` or more keys are dirty (the runtime calls this after
        each processed batch)."""
        if len(self._dirty) >= self._write_batch_size:
            self._flush_dirty()

    def flush(self) -> None:
        """Writes the dirty entries to the changelog and to LMDB (see ``_flush_dirty``) and notes
        that the runtime's commit began here: ``mark_committed`` marks the store committed only
        if nothing was flushed between the two."""
        self._flush_dirty()
        self._commit_flushes = self._flushes

    def _flush_dirty(self) -> None:
        """Appends the last value of each dirty key to the changelog (a tombstone for a delete)
        and writes them to LMDB in one transaction, which marks the store uncommitted. The
        entries then move to the clean cache (unless ``cache_writes`` is False)."""
        dirty = self._dirty
        if not dirty:
            return
        if self._env is None:
            raise SamzaError(f"{self._where()} is closed: cannot flush {len(dirty)} changes")
        try:
            keys = _encode_all(self._kenc, list(dirty))
            values: list[bytes | None]
            given = list(dirty.values())
            present = [v for v in given if v is not None]
            encoded = _encode_all(self._venc, present)
            if len(present) == len(given):
                values = cast(list[bytes | None], encoded)
            else:  # deletes among them: None stays None
                it = iter(encoded)
                values = [None if v is None else next(it) for v in given]
        except Exception:
            self._encode_error()
            raise
        entries = list(zip(keys, values, strict=True))
        gone = values.count(None)
        self.deletes += gone
        self.writes += len(values) - gone
        self._write_raw(_frame(entries), uncommit=self._committed)
        self._committed = False
        if self._changelog is not None:
            self._changelog.append(entries)
            since = self._since
            if since is not None:
                since.update(entries)
                if len(since) > _SINCE_MAX:  # too many to hold: a rebuild needs a restart
                    self._since = None
        clean = self._clean
        if self.cache_writes:
            clean.update(dirty)
        elif clean:  # a value read before and written since is stale
            pop = clean.pop
            for k in dirty:
                pop(k, None)
        dirty.clear()
        if len(clean) > self._cache_size:
            self._evict()

    def _encode_error(self) -> None:
        """Raises a SamzaError naming the first dirty entry the serdes reject."""
        for k, v in self._dirty.items():
            try:
                self._kenc(k)
                if v is not None:
                    self._venc(v)
            except Exception as e:
                error = SerdeError if isinstance(e, SerdeError) else SamzaError
                raise error(
                    f"{self._where()}: cannot encode the entry for key {k!r} "
                    f"({type(e).__name__}: {e}); the store's key and value serdes must accept "
                    f"every key and value the job stores") from e

    def _write_raw(self, entries: list[tuple[bytes, bytes | None]], uncommit: bool = False) -> None:
        """One write transaction with ``entries`` (sorted by key; None deletes), split in two
        when LMDB finds the transaction too large."""
        self._end_read()
        self._flushes += 1
        db = self._data
        try:
            with self._env.begin(write=True) as txn:
                if uncommit:
                    txn.put(_META_KEY, self._meta_record(None, False), db=self._meta)
                puts = [e for e in entries if e[1] is not None]
                if puts:
                    txn.cursor(db).putmulti(puts)
                if len(puts) < len(entries):
                    delete = txn.delete
                    for k, v in entries:
                        if v is None:
                            delete(k, b"", db)
        except lmdb.TxnFullError:
            if len(entries) < 2:
                raise
            half = len(entries) // 2
            self._write_raw(entries[:half], uncommit)
            self._write_raw(entries[half:])
        except lmdb.MapFullError as e:
            raise SamzaError(
                f"{self._where()}: the LMDB map is full ({self._map_size} bytes); open the "
                f"store with a larger map_size") from e
        self._pages.read(_PAGE * len(entries))  # each write maps in about a page to change

    def mark_committed(self, changelog_offset: int | None) -> None:
        """Records, in one small transaction, that the store holds the changelog up to
        ``changelog_offset`` (the offset the next checkpoint will hold; None without a
        changelog). Call it after ``flush()`` and the producer flush. If the store was flushed
        again in between (``maybe_flush``, ``range``), it stays uncommitted until the next
        commit: its contents may be past that offset."""
        if self._env is None:
            raise SamzaError(f"{self._where()} is closed")
        if self._flushes != self._commit_flushes:
            log.debug("%s: flushed again since the commit's flush: stays uncommitted",
                      self._where())
            return
        self._write_meta(changelog_offset, True)
        if changelog_offset is not None:
            self._base = changelog_offset
            self._since = {}

    def sync(self) -> None:
        """Forces LMDB's writes to disk (the environment is opened without sync, so a power
        loss may lose or damage what was written since the last sync; a process crash does
        not)."""
        if self._env is not None:
            self._env.sync(True)

    def close(self) -> None:
        """Closes the environment. No flush: dirty entries are dropped (the runtime flushes at
        commit). Idempotent."""
        if self._dirty:
            log.debug("%s: closed with %d unflushed changes, dropped", self._where(),
                      len(self._dirty))
        self._detach()

    def __repr__(self) -> str:
        return (f"LmdbStore({self.name!r}, task={self.task!r}, path={self.path!r}, "
                f"{len(self._dirty)} dirty, {len(self._clean)} cached)")


def local_state(path: str | os.PathLike[str]) -> tuple[int | None, int] | None:
    """What the local copy of a store in directory ``path`` holds, read without opening it for
    writing: the changelog offset its last commit recorded (None for a store without a
    changelog, or whose metadata is unreadable) and how many keys it holds (-1: unreadable).
    None when there is no local copy (no ``data.mdb``, or an empty one)."""
    path = os.fspath(path)
    data_file = os.path.join(path, "data.mdb")
    try:
        if os.path.getsize(data_file) == 0:
            return None
    except OSError:
        return None
    # a truncated file would kill the process (SIGBUS) at its first read through the map
    check_file_not_truncated(data_file, f"the local store at {path}",
                             f"delete the directory {path} to rebuild the store")
    try:
        env = lmdb.open(path, readonly=True, lock=False, subdir=True, max_dbs=2)
    except lmdb.Error:
        return None, -1
    try:
        with env.begin() as txn:
            keys = txn.stat(env.open_db(b"data", txn=txn, create=False))["entries"]
            raw = txn.get(_META_KEY, db=env.open_db(b"meta", txn=txn, create=False))
        meta = json.loads(raw) if raw is not None else {}
        offset = meta.get("changelog_offset") if isinstance(meta, dict) else None
        return (offset if type(offset) is int else None), keys
    except (lmdb.Error, ValueError):
        return None, -1
    finally:
        env.close()
