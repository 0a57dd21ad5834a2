"""A task's durable key-value store: LMDB on disk, a write-back cache in front, a changelog behind.
Its layers (``runtime.state.bytestore``) are every store's: ``runtime.state.writeback.CachedStore``
(the write-back cache, encoding and metrics) over the changelog's ``LoggedBytes`` (with a
changelog) over ``LmdbBytes``, the bottom this module gives (``TestRunner``'s and Spark's store,
``runtime.state.memory_store``, has ``MemoryBytes`` there).

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
  changelog offset ("host affinity"), catches up one committed at an earlier offset from the
  changelog's tail, or rebuilds it from the changelog, and compensates changelog entries past
  the checkpoint (``runtime.state.restore``). ``restore_info`` tells what happened.
- **Checksums.** Each LMDB value carries a checksum (``runtime.state.format``). A read that
  finds a value failing it (``get``, ``range``, ``all``, the trim at ``open``) means the file was
  changed on disk: with a changelog the store is rebuilt in place and the read is done again
  (``runtime.state.repair``); without one it is an error naming the file. A store of an older
  format is rebuilt from its changelog, or without one migrated in place
  (``runtime.state.migrate``).
- **Long keys.** A key encoded in more than 478 bytes is held under its first 478 bytes and its
  hash, with the full key in the value (``runtime.state.format``), so any key works and LMDB
  keeps keys in the byte order of their encoding, long or short. Long keys that share their
  first 478 bytes are adjacent in LMDB; ``range`` and ``all`` read such a group whole and give
  it in the order of the full keys. So ``range`` and ``all`` give every key in ``key_encode``
  byte order, as ``InMemoryState`` does. A key decoded as a list (a tuple under ``JsonSerde``)
  is given as an ``operators.state.ListKey``, which ``get``, ``put`` and ``delete`` take as
  the tuple.

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

import json
import logging
import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from operator import itemgetter
from typing import Any

import lmdb

from runtime.host.storage import (
    MappedPages,
    check_file_not_truncated,
    reserve_lock_file,
    storage_error,
)
from runtime.state.bytestore import DecodeEntry, LoggedBytes
from runtime.state.changelog import Changelog, Check, Entries
from runtime.state.format import MAX_KEY as _MAX_KEY
from runtime.state.format import META_KEY as _META_KEY
from runtime.state.format import OLD_VERSIONS as _OLD_VERSIONS
from runtime.state.format import PREFIX as _PREFIX
from runtime.state.format import SHORT_LEN as _SHORT_LEN
from runtime.state.format import VERSION as _FORMAT
from runtime.state.format import ChecksumError as _Corrupt
from runtime.state.format import frame as _frame
from runtime.state.format import full_key as _full_key
from runtime.state.format import lmdb_key as _lmdb_key
from runtime.state.format import unframe as _unframe
from runtime.state.repair import SINCE_MAX as _SINCE_MAX
from runtime.state.repair import repair as _repair
from runtime.state.restore import open_local as _open_local
from runtime.state.restore import open_replica as _open_replica
from runtime.state.restore import restore as _restore
from runtime.state.writeback import CachedStore
from samza_dsl.errors import SamzaError

__all__ = ["LmdbBytes", "LmdbStore", "local_state"]

log = logging.getLogger("samza_dsl.state")

_SCAN_CHUNK = 1024  # entries read per read transaction by range/all
_PAGE = 4096  # what a lookup or a write is counted as mapping in (MappedPages)
_first = itemgetter(0)
# LMDB keys are the encoded keys behind this byte: LMDB cannot store an empty key (str.encode
# of ""); the changelog holds the encoded keys as they are
_P = b"\x00"  # the prefix of every LMDB key (see runtime.state.format)
_GROUP_END = b"\xff" * (_MAX_KEY - _SHORT_LEN)  # after a group's prefix: past all its keys


class LmdbBytes:
    """The bytes of a task's store in LMDB (a ``runtime.state.bytestore.ByteStore``): the
    file, its metadata, restoring it from the changelog (``runtime.state.restore``), its
    repair (``runtime.state.repair``) and a standby's replica of it. See the module
    docstring."""

    __slots__ = ("name", "task", "path", "restore_info", "_map_size", "changelog", "env",
                 "data_db", "meta_db", "_rtxn", "committed", "_commit_flushes", "check", "base",
                 "since", "repairs", "_pages", "flushes")

    def __init__(self, path: str, *, name: str, task: str, changelog: Changelog | None,
                 map_size: int, check: Check | None = None) -> None:
        self.name = name
        self.task = task
        self.path = path
        self.flushes = 0  # write transactions so far
        self.check = check
        self.restore_info: dict[str, Any] = {}
        #: the changelog a restore and a repair read (``LoggedBytes`` appends to it)
        self.changelog = changelog
        self._map_size = map_size
        self.env: Any = None
        self.data_db: Any = None
        self.meta_db: Any = None
        self._rtxn: Any = None
        self.committed = False
        self._commit_flushes = -1  # flushes when flushed() last ran (see mark_committed)
        # with a changelog, LMDB holds the changelog's state at offset base plus the entries
        # flushed since (since): what a rebuild in place after a checksum failure writes back
        # (runtime.state.repair)
        self.base = 0
        self.since: dict[bytes, bytes | None] | None = {}  # None: more than _SINCE_MAX
        self.repairs = 0
        #: the pages of the file that reads and writes mapped in, let go of now and then (a
        #: store much larger than what the job reads again soon need not stay resident)
        self._pages = MappedPages(self.data_file())

    @property
    def position(self) -> int:
        """The changelog offset the store holds the changelog's entries up to (as of its last
        commit or ``replicate``)."""
        return self.base

    def replicate(self, offsets: Sequence[int], entries: list[tuple[bytes, bytes | None]],
                  upto: int) -> None:
        """A standby's step: writes the changelog's ``entries`` (at ``offsets``, all below
        ``upto``) and records the store as holding the changelog up to ``upto``."""
        if self.env is None:
            raise SamzaError(f"{self.where()} is closed")
        if entries:
            if self.check is not None:
                entries = self.check(offsets, entries)
            self.write_raw(_frame(dict(entries).items()), uncommit=True)
            self.restore_info["entries_replayed"] += len(entries)
        self.write_meta(upto, True)
        self.base = upto

    # -- the LMDB file: what restore, repair and migrate work on --------------------------------

    def repair(self, what: str) -> None:
        """A read found ``what`` failing its checksum: rebuilds the store in place from its
        changelog, or raises without one (``runtime.state.repair``)."""
        _repair(self, what)

    def where(self) -> str:
        return f"store {self.name!r} of task {self.task!r} at {self.path}"

    def data_file(self) -> str:
        return os.path.join(self.path, "data.mdb")

    def attach(self) -> None:
        """Opens the LMDB environment and its two databases."""
        # A full, read-only or forbidden disk is a StorageError, which the callers do not take
        # for a corrupt file: nothing is rebuilt or deleted over it.
        try:
            os.makedirs(self.path, exist_ok=True)
        except OSError as e:
            raise storage_error(e, self.path, f"creating the directory of {self.where()}") \
                or SamzaError(f"cannot create the directory of {self.where()}: {e}") from e
        reserve_lock_file(self.path, self.where())
        try:
            env = lmdb.open(self.path, map_size=self._map_size, subdir=True, max_dbs=2,
                            sync=False, metasync=False, readahead=False)
        except lmdb.Error as e:
            fault = storage_error(e, self.path, f"opening {self.where()}")
            if fault is not None:
                raise fault from e
            if "already open" in str(e):  # not corruption: never rebuild over an open store
                raise SamzaError(
                    f"{self.where()}: the directory is already open in this process (another "
                    f"store, or this one not closed); close it before opening it again, or give "
                    f"each (task, store) its own directory") from e
            raise
        try:
            # a truncated file would crash the process (SIGBUS) at its first read through the map
            size = os.path.getsize(self.data_file())
            need = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
            if size < need:
                raise lmdb.CorruptedError(f"{self.data_file()} is truncated: {size} bytes, its "
                                          f"last page ends at {need}")
            self.data_db = env.open_db(b"data")
            self.meta_db = env.open_db(b"meta")
        except BaseException:
            env.close()
            raise
        self.env = self._pages.env = env

    def detach(self) -> None:
        self.end_read()
        if self.env is not None:
            self.env.close()
        self.env = self.data_db = self.meta_db = self._pages.env = None

    def read_meta(self) -> dict[str, Any] | None:
        """The metadata record (None when absent); a sanity read of the data too. Raises
        lmdb.Error or ValueError when unreadable. Its ``version`` may be an older format's."""
        with self.env.begin() as txn:
            raw = txn.get(_META_KEY, db=self.meta_db)
            cur = txn.cursor(self.data_db)
            if cur.first():  # walks the tree to its first and last leaves
                cur.key()
                cur.last()
                cur.key()
        if raw is None:
            return None
        meta = json.loads(raw)
        if (not isinstance(meta, dict) or meta.get("version") not in (*_OLD_VERSIONS, _FORMAT)
                or not isinstance(meta.get("committed"), bool)
                or not (meta.get("changelog_offset") is None
                        or type(meta.get("changelog_offset")) is int)):
            raise ValueError(f"unexpected store metadata {raw[:200]!r}")
        return meta

    def meta_record(self, offset: int | None, committed: bool) -> bytes:
        return json.dumps({"version": _FORMAT, "changelog_offset": offset,
                           "committed": committed}).encode()

    def write_meta(self, offset: int | None, committed: bool) -> None:
        self.end_read()
        with self.env.begin(write=True) as txn:
            txn.put(_META_KEY, self.meta_record(offset, committed), db=self.meta_db)
        self.committed = committed

    # -- reading --------------------------------------------------------------------------------

    def _reader(self) -> Any:
        txn = self._rtxn
        if txn is None:
            if self.env is None:
                raise SamzaError(f"{self.where()} is closed")
            txn = self._rtxn = self.env.begin(db=self.data_db)
        return txn

    def end_read(self) -> None:
        txn = self._rtxn
        if txn is not None:
            self._rtxn = None
            txn.abort()

    def get(self, key: Any, kb: bytes) -> bytes | None:
        """The value bytes of ``key`` (encoded ``kb``) in LMDB (None: none)."""
        lk = _lmdb_key(kb)
        self._pages.read(_PAGE)  # a lookup maps in about a page
        try:
            raw = self._reader().get(lk)
        except lmdb.Error as e:
            fault = storage_error(e, self.data_file(),
                                  f"reading key {key!r:.200} of {self.where()}")
            if fault is not None:  # a disk fault: the file itself may be fine, never delete it
                raise fault from e
            recover = ("stop the job and move the directory aside: the store is rebuilt from its "
                       "changelog at the next start" if self.changelog is not None else
                       "stop the job and restore the directory from a backup; the store has no "
                       "changelog to rebuild it from")
            raise SamzaError(
                f"{self.where()}: reading key {key!r:.200} from {self.data_file()} failed "
                f"({type(e).__name__}: {e}); LMDB finds the file damaged: {recover}") from e
        if raw is None:
            return None
        try:
            stored, vb = _unframe(lk, raw)
        except _Corrupt:
            self.repair(f"the value of key {key!r}")
            return self.get(key, kb)
        if stored != kb:
            raise SamzaError(
                f"{self.where()}: keys {stored[:60]!r}... and {kb[:60]!r}... share their "
                f"blake2b hash; store them under shorter keys")
        return vb

    def scan(self, lo: bytes | None, hi: bytes | None,
             decode_entry: DecodeEntry) -> Iterator[tuple[Any, Any]]:
        """The entries with encoded keys in ``[lo, hi)`` (None: no bound) in their order, read
        in chunks of 1024 (after a write, from LMDB's new state): no snapshot is held, so
        writing while scanning is safe."""
        if lo is not None and hi is not None and lo >= hi:
            return iter(())
        # LMDB keys are in the order of the encoded keys (runtime.state.format): a bound of a
        # short key is exact; one of a long key starts (or ends past) its group, then filters
        if lo is None:
            llo, klo = _P, None
        elif len(lo) <= _PREFIX:
            llo, klo = _P + lo, None
        else:
            llo, klo = _P + lo[:_PREFIX], lo
        if hi is None:
            lhi, khi = None, None
        elif len(hi) <= _PREFIX:
            lhi, khi = _P + hi, None
        else:
            lhi, khi = _P + hi[:_PREFIX] + _GROUP_END + b"\xff", hi
        return self._scan(llo, lhi, klo, khi, decode_entry)

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

    def _scan(self, lo: bytes, hi: bytes | None, klo: bytes | None, khi: bytes | None,
              decode_entry: DecodeEntry) -> Iterator[tuple[Any, Any]]:
        """The entries with LMDB keys in [lo, hi) whose encoded keys are in [klo, khi) (None:
        no bound), in the order of their encoded keys."""
        if hi is not None and lo >= hi:
            return
        pos, inclusive = lo, True
        after: tuple[bytes, bytes] | None = None  # inside a group: (its prefix, last key done)
        while True:
            flushes = self.flushes
            chunk, more, end = self._chunk(pos, inclusive, hi, after)
            for lk, raw in chunk:
                if self.flushes != flushes:  # LMDB changed under the chunk: read it again
                    break
                try:
                    kb, vb = _unframe(lk, raw)
                except _Corrupt:
                    self.repair(f"the value of LMDB key {lk[:60]!r}")
                    break  # rebuilt: read on from the last entry done
                if len(lk) <= _SHORT_LEN:
                    pos, inclusive, after = lk, False, None
                else:  # a group's keys are sorted by full key, not LMDB key: resume by that
                    pos = lk[:_SHORT_LEN]
                    inclusive, after = False, (pos, kb)
                if (klo is not None and kb < klo) or (khi is not None and kb >= khi):
                    continue
                k, v = decode_entry(kb, vb)
                if v is not None:
                    yield k, v
            else:
                if not more:
                    return
                if end is not None:  # it ended with a whole group: read on past the group
                    pos, inclusive, after = end, False, None
            # a full chunk is done, or LMDB changed under it: read on from the last key done

    def _entries(self) -> int:
        return int(self._reader().stat(self.data_db)["entries"])

    def size_bytes(self) -> int:
        """The bytes its LMDB pages hold now (what the data file uses of its map). Safe from
        another thread (a reporter's): it reads in a transaction of its own."""
        env = self.env
        if env is None:
            return 0
        with env.begin(db=self.data_db) as txn:
            st = txn.stat(self.data_db)
        return int(st["psize"]) * int(st["branch_pages"] + st["leaf_pages"]
                                      + st["overflow_pages"])

    def count(self) -> int:
        return self._entries()

    def holds(self, kb: bytes) -> bool:
        return self._reader().get(_lmdb_key(kb)) is not None

    # -- writing --------------------------------------------------------------------------------

    def flushed(self) -> None:
        """The runtime's commit flushed the store here: ``mark_committed`` marks it committed
        only if nothing was written between the two."""
        self._commit_flushes = self.flushes

    def writable(self, changes: int) -> None:
        if self.env is None:
            raise SamzaError(f"{self.where()} is closed: cannot flush {changes} changes")

    def write(self, entries: Entries) -> None:
        """A flush's entries, written to LMDB in one transaction, which marks the store
        uncommitted (``LoggedBytes`` appends them to the changelog)."""
        self.write_raw(_frame(entries), uncommit=self.committed)
        self.committed = False
        if self.changelog is not None:
            since = self.since
            if since is not None:
                since.update(entries)
                if len(since) > _SINCE_MAX:  # too many to hold: a rebuild needs a restart
                    self.since = None

    def write_raw(self, entries: list[tuple[bytes, bytes | None]], uncommit: bool = False) -> None:
        """One write transaction with ``entries`` (sorted by key; None deletes), split in two
        when LMDB finds the transaction too large."""
        self.end_read()
        self.flushes += 1
        db = self.data_db
        try:
            with self.env.begin(write=True) as txn:
                if uncommit:
                    txn.put(_META_KEY, self.meta_record(None, False), db=self.meta_db)
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
            self.write_raw(entries[:half], uncommit)
            self.write_raw(entries[half:])
        except lmdb.MapFullError as e:
            raise SamzaError(
                f"{self.where()}: the LMDB map is full ({self._map_size} bytes); open the "
                f"store with a larger map_size") from e
        self._pages.read(_PAGE * len(entries))  # each write maps in about a page to change

    def mark_committed(self, changelog_offset: int | None) -> None:
        """Records, in one small transaction, that the store holds the changelog up to
        ``changelog_offset`` (the offset the next checkpoint will hold; None without a
        changelog). Call it after ``flush()`` and the producer flush. If the store was flushed
        again in between (``maybe_flush``, ``range``), it stays uncommitted until the next
        commit: its contents may be past that offset."""
        if self.env is None:
            raise SamzaError(f"{self.where()} is closed")
        if self.flushes != self._commit_flushes:
            log.debug("%s: flushed again since the commit's flush: stays uncommitted",
                      self.where())
            return
        self.write_meta(changelog_offset, True)
        if changelog_offset is not None:
            self.base = changelog_offset
            self.since = {}

    def sync(self) -> None:
        """Forces LMDB's writes to disk (the environment is opened without sync, so a power
        loss may lose or damage what was written since the last sync; a process crash does
        not)."""
        if self.env is not None:
            self.env.sync(True)

    def close(self) -> None:
        """Closes the environment. Idempotent."""
        self.detach()


class LmdbStore(CachedStore):
    """One task's store: see the module docstring. Create it with ``LmdbStore.open``. Its
    layers: the write-back cache ``runtime.state.writeback.CachedStore`` over the changelog's
    ``runtime.state.bytestore.LoggedBytes`` (with a changelog) over ``LmdbBytes``."""

    __slots__ = ("lmdb",)

    def __init__(self, lmdb_bytes: LmdbBytes, *, name: str, task: str,
                 key_encode: Callable[[Any], bytes], key_decode: Callable[[bytes], Any],
                 value_encode: Callable[[Any], bytes], value_decode: Callable[[bytes], Any],
                 cache_size: int, write_batch_size: int) -> None:
        changelog = lmdb_bytes.changelog
        super().__init__(lmdb_bytes if changelog is None else LoggedBytes(lmdb_bytes, changelog),
                         name=name, task=task, key_encode=key_encode, key_decode=key_decode,
                         value_encode=value_encode, value_decode=value_decode,
                         cache_size=cache_size, write_batch_size=write_batch_size)
        #: the bottom layer: the LMDB file
        self.lmdb = lmdb_bytes

    # -- opening and restoring ------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, name: str, task: str,
             key_encode: Callable[[Any], bytes], key_decode: Callable[[bytes], Any],
             value_encode: Callable[[Any], bytes], value_decode: Callable[[bytes], Any],
             changelog: Changelog | None = None, checkpointed: int | None = None,
             cache_size: int = 100_000, write_batch_size: int = 10_000,
             map_size: int = 1 << 34,
             check: Check | None = None) -> LmdbStore:
        """Opens (creating or restoring) the store in directory ``path``.

        ``checkpointed`` is the changelog offset the task's checkpoint holds (None: no checkpoint,
        so nothing of the changelog counts yet). ``check(offsets, entries)`` returns the
        entries of a changelog batch to replay (or raises); ``offsets`` are as
        ``Changelog.read`` gives them. See the module docstring for the
        rules; ``restore_info`` records what was done."""
        lmdb_bytes = LmdbBytes(os.fspath(path), name=name, task=task, changelog=changelog,
                               map_size=map_size, check=check)
        t0 = time.perf_counter()
        try:
            if changelog is None:
                _open_local(lmdb_bytes)
            else:
                _restore(lmdb_bytes, changelog, checkpointed if checkpointed is not None else 0)
        except BaseException:
            lmdb_bytes.detach()
            raise
        lmdb_bytes.restore_info["seconds"] = time.perf_counter() - t0
        lmdb_bytes.flushed()  # restore's own writes precede any commit
        return cls(lmdb_bytes, name=name, task=task, key_encode=key_encode,
                   key_decode=key_decode, value_encode=value_encode, value_decode=value_decode,
                   cache_size=cache_size, write_batch_size=write_batch_size)

    @classmethod
    def open_replica(cls, path: str | os.PathLike[str], *, name: str, task: str,
                     key_encode: Callable[[Any], bytes], key_decode: Callable[[bytes], Any],
                     value_encode: Callable[[Any], bytes], value_decode: Callable[[bytes], Any],
                     map_size: int = 1 << 34,
                     check: Check | None = None) -> LmdbStore:
        """Opens the local copy in ``path`` as a standby's replica of the task's store, fed by
        ``replicate`` with the changelog's entries. A copy committed at a changelog offset is
        kept (``position`` is that offset); any other (none, uncommitted, unreadable, of an
        older format) starts empty at offset 0. When the task comes to this container, ``open``
        replays only the changelog's tail past ``position``."""
        lmdb_bytes = LmdbBytes(os.fspath(path), name=name, task=task, changelog=None,
                               map_size=map_size, check=check)
        try:
            lmdb_bytes.base = _open_replica(lmdb_bytes)
        except BaseException:
            lmdb_bytes.detach()
            raise
        lmdb_bytes.restore_info = {"mode": "standby", "entries_replayed": 0,
                                   "from": lmdb_bytes.base}
        return cls(lmdb_bytes, name=name, task=task, key_encode=key_encode,
                   key_decode=key_decode, value_encode=value_encode, value_decode=value_decode,
                   cache_size=1, write_batch_size=1)

    @property
    def position(self) -> int:
        """The changelog offset the store holds the changelog's entries up to (as of its last
        commit or ``replicate``)."""
        return self.lmdb.base

    def replicate(self, offsets: Sequence[int], entries: list[tuple[bytes, bytes | None]],
                  upto: int) -> None:
        """A standby's step: writes the changelog's ``entries`` (at ``offsets``, all below
        ``upto``) and records the store as holding the changelog up to ``upto``."""
        self.lmdb.replicate(offsets, entries, upto)

    @property
    def restore_info(self) -> dict[str, Any]:
        """What opening the store did (see the module docstring)."""
        return self.lmdb.restore_info

    @property
    def path(self) -> str:
        return self.lmdb.path

    @property
    def changelog(self) -> Changelog | None:
        return self.lmdb.changelog

    def sync(self) -> None:
        """Forces LMDB's writes to disk (``LmdbBytes.sync``)."""
        self.lmdb.sync()

    def _entries(self) -> int:
        return self.lmdb._entries()

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
