"""How a store's local copy is opened: as it is, caught up, or rebuilt from the changelog.

This is Samza's restore of a logged store (its ``TaskRestoreManager``), for ``LmdbStore.open``
and ``LmdbStore.open_replica``:

- Without a changelog the local copy is used as it is (``open_local``; an older format is
  migrated in place, ``runtime.state.migrate``), or the store starts empty.
- With one (``restore``), a local copy committed at the checkpointed changelog offset is used as
  it is ("host affinity"); one committed at an earlier offset replays only the changelog's tail
  (``catch_up``); any other is rebuilt from the changelog's entries before that offset
  (``rebuild``), passing each batch through the store's ``check`` when it has one. Either way,
  changelog entries past the checkpoint (written by a run that stopped before checkpointing) are
  then compensated by appending, for each of their keys, its value in the restored store, so
  replaying the whole changelog gives the restored state (``trim``).

``store.restore_info`` tells what happened.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import Any, Protocol

import lmdb

from runtime.state.changelog import Changelog, Check, Entries
from runtime.state.format import OLD_VERSIONS, VERSION, ChecksumError, frame, lmdb_key, unframe
from runtime.state.migrate import MigratedStore, migrate
from samza_dsl.errors import SamzaError

__all__ = ["RestoredStore", "open_local", "restore", "open_replica", "rebuild"]

log = logging.getLogger("samza_dsl.state")

REPLAY_BATCH = 200_000  # distinct keys folded in memory before a write transaction


class RestoredStore(MigratedStore, Protocol):
    """What restoring works on: an ``LmdbBytes``' LMDB file and the changelog offset it holds."""

    path: str
    restore_info: dict[str, Any]
    committed: bool
    base: int
    check: Check | None

    def data_file(self) -> str: ...

    def attach(self) -> None: ...

    def detach(self) -> None: ...

    def read_meta(self) -> dict[str, Any] | None: ...

    def write_meta(self, offset: int | None, committed: bool) -> None: ...

    def write_raw(self, entries: Entries, uncommit: bool = False) -> None: ...


def open_local(store: RestoredStore) -> None:
    """Opens a store without a changelog: its local copy as it is, or empty."""
    data_file = store.data_file()
    existed = os.path.isfile(data_file) and os.path.getsize(data_file) > 0
    if os.path.isfile(data_file) and not existed:
        log.warning("%s: the local file %s is empty (its contents were lost): the store "
                    "starts empty", store.where(), data_file)
    try:
        store.attach()
        meta = store.read_meta()
    except (lmdb.Error, ValueError) as e:
        store.detach()
        raise SamzaError(
            f"{store.where()}: the local file {data_file} is corrupt or unreadable "
            f"({type(e).__name__}: {e}); the store has no changelog, so its state cannot be "
            f"rebuilt. Delete the directory {store.path} to start the store empty, or enable "
            f"the store's changelog so it can be restored") from e
    mode = "local" if existed else "fresh"
    if meta is None:
        store.write_meta(None, True)
    else:
        if meta["version"] != VERSION:
            migrate(store, meta)
        store.committed = meta["committed"]
    store.restore_info = {"mode": mode, "entries_replayed": 0, "trimmed": 0,
                          "reason": ("the local copy is used as is (no changelog)" if existed
                                     else "no local copy yet: starting empty (no changelog)")}
    log.info("%s: %s", store.where(), store.restore_info["reason"])


def _why_rebuild(store: RestoredStore, cp: int) -> tuple[str, int, int | None]:
    """Why the local copy cannot be used as it is at changelog offset ``cp`` ("" if it can),
    the level to log that at, and the offset of a committed copy behind ``cp`` (else None)."""
    data_file = store.data_file()
    if not os.path.isfile(data_file):
        return f"no local copy ({data_file} does not exist)", logging.INFO, None
    try:
        store.attach()
        meta = store.read_meta()
    except (lmdb.Error, ValueError) as e:
        store.detach()
        return (f"the local copy {data_file} is corrupt or unreadable "
                f"({type(e).__name__}: {e})"), logging.WARNING, None
    if meta is None:
        return (f"the local copy {data_file} has no store metadata (its creation was "
                f"interrupted, or another program wrote it)"), logging.INFO, None
    if meta["version"] != VERSION:
        return (f"the local copy {data_file} has the older store format "
                f"{meta['version']} ({OLD_VERSIONS[meta['version']]})"), logging.INFO, None
    if not meta["committed"]:
        return (f"the local copy {data_file} is uncommitted: a run flushed changes to it and "
                f"stopped before its next commit"), logging.INFO, None
    if meta["changelog_offset"] is None:
        return (f"the local copy {data_file} was written without a changelog, and the "
                f"changelog is the source of truth now: its contents are replaced by the "
                f"changelog's"), logging.WARNING, None
    if meta["changelog_offset"] < cp:
        return "", logging.INFO, meta["changelog_offset"]
    if meta["changelog_offset"] != cp:
        return (f"the local copy {data_file} is at changelog offset "
                f"{meta['changelog_offset']} but the checkpoint holds {cp}"), logging.INFO, None
    return "", logging.INFO, None


def restore(store: RestoredStore, changelog: Changelog, cp: int) -> None:
    """Opens a store with a changelog whose checkpoint holds changelog offset ``cp``."""
    reason, level, behind = _why_rebuild(store, cp)
    if not reason and behind is not None:
        reason = catch_up(store, changelog, behind, cp)
    elif not reason:
        store.committed = True
        store.restore_info = {"mode": "host-affinity", "entries_replayed": 0,
                              "reason": f"the local copy is committed at the checkpointed "
                                        f"changelog offset {cp} (host affinity)"}
        log.info("%s: using the local copy as is: %s", store.where(),
                 store.restore_info["reason"])
        try:
            store.restore_info["trimmed"] = trim(store, changelog, cp)
        except ChecksumError as e:
            level = logging.WARNING
            reason = (f"the local copy {store.data_file()} holds a value that fails its "
                      f"checksum (LMDB key {e.lkey[:60]!r}): the file was changed on disk")
    if reason:
        log.log(level, "%s: rebuilding from the changelog's offsets [0, %d): %s",
                store.where(), cp, reason)
        t0 = time.perf_counter()
        replayed = rebuild(store, changelog, cp)
        mode = "rebuilt" if replayed else "fresh"
        store.restore_info = {"mode": mode, "entries_replayed": replayed, "reason": reason}
        log.info("%s: %s: replayed %d changelog entries in %.3f s (%d keys)", store.where(),
                 "rebuilt" if replayed else "starting empty", replayed,
                 time.perf_counter() - t0, _keys(store))
        store.restore_info["trimmed"] = trim(store, changelog, cp)
    store.base = cp


def _keys(store: RestoredStore) -> int:
    """How many entries the store's LMDB file holds."""
    with store.env.begin(db=store.data_db) as txn:
        return int(txn.stat(store.data_db)["entries"])


def catch_up(store: RestoredStore, changelog: Changelog, start: int, cp: int) -> str:
    """Brings a local copy committed at changelog offset ``start`` (below ``cp``: a standby's,
    or one an earlier run of the task left here) to ``cp`` by replaying only the changelog's
    tail ``[start, cp)``, committed there. Returns "" when done, else why the copy must be
    rebuilt instead (a value failing its checksum)."""
    t0 = time.perf_counter()
    store.write_meta(start, False)  # a crash while catching up rebuilds it next time
    replayed = replay(store, changelog, cp, start)
    store.write_meta(cp, True)
    store.restore_info = {
        "mode": "tail", "entries_replayed": replayed, "from": start,
        "reason": f"the local copy is committed at changelog offset {start}, behind the "
                  f"checkpointed offset {cp}: only the changelog's tail was replayed"}
    log.info("%s: caught up from changelog offset %d to the checkpointed %d: replayed %d "
             "changelog entries in %.3f s", store.where(), start, cp, replayed,
             time.perf_counter() - t0)
    try:
        store.restore_info["trimmed"] = trim(store, changelog, cp)
    except ChecksumError as e:
        return (f"the local copy {store.data_file()} holds a value that fails its checksum "
                f"(LMDB key {e.lkey[:60]!r}): the file was changed on disk")
    return ""


def open_replica(store: RestoredStore) -> int:
    """Opens the local copy as a standby's replica: a copy committed at a changelog offset is
    kept; any other (none, uncommitted, unreadable, of an older format) starts empty at offset
    0. Returns that offset."""
    try:
        store.attach()
        meta = store.read_meta()
    except (lmdb.Error, ValueError):
        meta = None
    if meta is None or meta["version"] != VERSION or not meta["committed"] \
            or meta["changelog_offset"] is None:
        wipe(store)
        store.write_meta(0, True)
        return 0
    return int(meta["changelog_offset"])


def wipe(store: RestoredStore) -> None:
    """Deletes the local copy and opens an empty one."""
    store.detach()
    for f in ("data.mdb", "lock.mdb"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(store.path, f))
    store.attach()


def rebuild(store: RestoredStore, changelog: Changelog, cp: int) -> int:
    """Replaces the local copy by the changelog's state at offset ``cp``, committed there.
    Returns how many entries were replayed."""
    wipe(store)
    replayed = replay(store, changelog, cp) if cp > 0 else 0
    store.write_meta(cp, True)
    return replayed


def replay(store: RestoredStore, changelog: Changelog, cp: int, start: int = 0) -> int:
    """Writes the changelog's entries in [start, cp) (last write wins, tombstones delete)."""
    pending: dict[bytes, bytes | None] = {}
    n = 0
    check = store.check
    for offset, entries in changelog.read(start, cp):
        n += len(entries)
        pending.update(entries if check is None else check(offset, entries))
        if len(pending) >= REPLAY_BATCH:
            store.write_raw(frame(pending.items()))
            pending = {}
    if pending:
        store.write_raw(frame(pending.items()))
    return n


def trim(store: RestoredStore, changelog: Changelog, cp: int) -> int:
    """Compensates changelog entries at or past the checkpoint: appends, for each of their
    keys, its value here (a tombstone when absent). Returns how many keys."""
    end = changelog.end_offset()
    if end < cp:
        log.warning("%s: the changelog ends at offset %d, before the checkpointed offset %d: "
                    "it lost entries (was it deleted or truncated?), so a rebuild from it "
                    "would not give this state", store.where(), end, cp)
        return 0
    if end == cp:
        return 0
    keys: dict[bytes, None] = {}
    for _offset, entries in changelog.read(cp, end):
        for k, _ in entries:
            keys[k] = None
    if not keys:
        return 0
    with store.env.begin() as txn:
        get = txn.get
        db = store.data_db
        compensation: Entries = []
        for k in keys:
            lk = lmdb_key(k)
            raw = get(lk, None, db)
            compensation.append((k, None if raw is None else unframe(lk, raw)[1]))
    changelog.append(compensation)
    store.write_meta(cp, False)  # durable only after the runtime's next producer flush
    log.info("%s: the changelog has %d entries past the checkpointed offset %d (a run "
             "stopped before checkpointing): appended the current value of their %d keys",
             store.where(), end - cp, cp, len(compensation))
    return len(compensation)
