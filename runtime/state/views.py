"""What an interactive query reads of a task's store (docs/queries.md): the latest state (what
``get`` gives now: the write-back cache over the bytes) or the committed state (what the last
checkpoint covers).

The committed state of an LMDB store is an LMDB read transaction begun when the store was last
committed (its metadata then says so: a write after a commit marks it uncommitted in the same
transaction), held until the next commit: LMDB's readers see the state as of their start and
never block the writer. It is taken at each commit of the task (``CommittedViews.take``, which
the store backend calls when a query endpoint runs) and at a query that finds the store
committed now. Holding it keeps LMDB from reusing the pages written over since (at most one
commit interval's writes). A store in memory (``TestRunner``) keeps no committed state.

Everything here runs on the container's event loop, as the task that writes the store does:
the query endpoint's thread hands its reads to the loop (``runtime.engine.query``).

A standby's replica of a task's store (``runtime.kafka.standby``) is committed state only: its
thread writes to it the changelog's entries that a checkpoint of the task covers, never more.
``replica_get`` reads a key of it in an LMDB read transaction of its own, beside those writes,
with the changelog offset the replica held then.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

import lmdb

from runtime.state.format import META_KEY, SHORT_LEN, ChecksumError, lmdb_key, unframe
from runtime.state.lmdb_store import LmdbStore
from runtime.state.ttl import HEADER, write_time

__all__ = ["CommittedViews", "NoView", "latest_scan", "replica_get"]


class NoView(Exception):
    """The committed state of a store cannot be read here now (why: its message)."""


class CommittedViews:
    """Each (task, store)'s committed state, as LMDB read transactions (module docstring)."""

    def __init__(self) -> None:
        #: (task, store) -> (the read transaction, the changelog offset it holds up to)
        self._held: dict[tuple[str, str], tuple[Any, int]] = {}

    def take(self, task_name: str, stores: Mapping[str, Any]) -> None:
        """After a commit of ``task_name``: a view of each of its LMDB stores that the commit
        marked committed (one flushed again between the commit's flush and its end is not: its
        last view stays)."""
        for name, store in stores.items():
            self._refresh(task_name, name, store)

    def _refresh(self, task_name: str, name: str, store: Any) -> None:
        if not isinstance(store, LmdbStore):
            return
        lm = store.lmdb
        if lm.env is None or not lm.committed:
            return
        old = self._held.pop((task_name, name), None)
        if old is not None:
            _abort(old[0])
        self._held[(task_name, name)] = (lm.env.begin(db=lm.data_db), int(lm.base))

    def drop(self, task_name: str) -> None:
        """The task left this container: its views go."""
        for key in [k for k in self._held if k[0] == task_name]:
            _abort(self._held.pop(key)[0])

    def close(self) -> None:
        for txn, _ in self._held.values():
            _abort(txn)
        self._held.clear()

    def _view(self, task_name: str, name: str, store: Any) -> tuple[Any, int]:
        if not isinstance(store, LmdbStore):
            raise NoView(f"store {name!r} of task {task_name!r} is held in memory and keeps no "
                         f"committed state; ask read=latest")
        self._refresh(task_name, name, store)
        held = self._held.get((task_name, name))
        if held is None:
            raise NoView(f"store {name!r} of task {task_name!r} has not been committed since "
                         f"the query endpoint started; try again after the next commit "
                         f"(task.commit.ms), or ask read=latest")
        return held

    def get(self, task_name: str, name: str, store: Any, kb: bytes) -> tuple[bytes | None, int]:
        """(the committed value bytes of encoded key ``kb``, or None; the changelog offset the
        view holds up to)."""
        txn, offset = self._view(task_name, name, store)
        lk = lmdb_key(kb)
        try:
            raw = txn.get(lk)
            if raw is None:
                return None, offset
            stored, vb = unframe(lk, raw)
        except (lmdb.Error, ChecksumError) as e:
            self.drop(task_name)
            raise NoView(f"store {name!r} of task {task_name!r}: its committed state cannot be "
                         f"read now ({type(e).__name__}); try again") from None
        return (vb if stored == kb else None), offset

    def scan(self, task_name: str, name: str, store: Any, lo: bytes | None, hi: bytes | None,
             limit: int) -> tuple[list[tuple[bytes, bytes]], int]:
        """(up to ``limit`` committed entries with encoded keys in ``[lo, hi)``, in their byte
        order; the changelog offset)."""
        txn, offset = self._view(task_name, name, store)
        out: list[tuple[bytes, bytes]] = []
        try:
            for kb, vb in _entries(txn, lo, hi):
                out.append((kb, vb))
                if len(out) >= limit and len(lmdb_key(kb)) <= SHORT_LEN:
                    break
        except (lmdb.Error, ChecksumError) as e:
            self.drop(task_name)
            raise NoView(f"store {name!r} of task {task_name!r}: its committed state cannot be "
                         f"read now ({type(e).__name__}); try again") from None
        out.sort(key=lambda e: e[0])
        return out[:limit], offset


def replica_get(store: LmdbStore, kb: bytes, ttl: Any = None) -> tuple[bool, Any, int]:
    """(found, the decoded value, the changelog offset the replica holds up to) of encoded key
    ``kb`` in a standby's replica ``store`` (module docstring). ``ttl``: the table's spec where
    it has a ttl; an expired entry is not found (on event time, expired by the largest write
    time the replica holds, which this reads: a scan of the replica's values)."""
    lm = store.lmdb
    offset = int(lm.base)  # what the data holds at least, while its thread writes a step
    lk = lmdb_key(kb)
    where = f"the standby replica of store {lm.name!r} of task {lm.task!r}"
    try:
        with lm.env.begin(db=lm.data_db) as txn:
            meta = txn.get(META_KEY, db=lm.meta_db)
            if meta is not None:
                record = json.loads(meta)
                if record.get("committed") and isinstance(record.get("changelog_offset"), int):
                    offset = int(record["changelog_offset"])
            raw = txn.get(lk)
            if raw is None:
                return False, None, offset
            stored, vb = unframe(lk, raw)
            if stored != kb:
                return False, None, offset
            now = None
            if ttl is not None and ttl.ttl_event_time is not None:
                now = max((write_time(v) for _, v in _entries(txn, None, None)
                           if len(v) >= HEADER), default=None)
    except (lmdb.Error, ChecksumError, ValueError) as e:
        raise NoView(f"{where} cannot be read now ({type(e).__name__}); try again, or ask the "
                     f"task's active member") from None
    value = store.decode_value(vb)
    if ttl is not None:
        if now is None:
            now = int(time.time() * 1000)
        t, value = value
        if t + int(ttl.ttl_ms) <= now:
            return False, None, offset
    return True, value, offset


def latest_scan(store: Any) -> Any:
    """``scan(lo, hi, decode_entry)`` over the LMDB bytes of ``store`` as they are now, for a
    query's range of its latest state: a cursor of a fresh read transaction, read as far as
    the caller takes it (the bytes' own ``scan`` reads 1,024 entries at a time); ``None`` for
    a store not in LMDB."""
    if not isinstance(store, LmdbStore) or store.lmdb.env is None:
        return None
    lm = store.lmdb

    def scan(lo: bytes | None, hi: bytes | None, decode_entry: Any) -> Iterator[tuple[Any, Any]]:
        with lm.env.begin(db=lm.data_db) as txn:
            for kb, vb in _entries(txn, lo, hi):
                k, v = decode_entry(kb, vb)
                if v is not None:
                    yield k, v
    return scan


def _entries(txn: Any, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    """The entries of ``txn`` with encoded keys in ``[lo, hi)``, in LMDB's order (a group of
    long keys sharing their first bytes comes in the order of their hashes)."""
    cur = txn.cursor()
    if not cur.set_range(lmdb_key(lo)[:SHORT_LEN] if lo is not None else b""):
        return
    for lk, raw in cur:
        kb, vb = unframe(lk, raw)
        if hi is not None and kb >= hi and len(lk) <= SHORT_LEN:
            return
        if (lo is None or kb >= lo) and (hi is None or kb < hi):
            yield kb, vb


def _abort(txn: Any) -> None:
    with contextlib.suppress(lmdb.Error):  # its environment closed already
        txn.abort()
