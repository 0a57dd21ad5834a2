"""A store of an older format, without a changelog, rewritten in place in today's format
(``runtime.state.format``): format 1's values get their checksums, and the keys laid out
otherwise now (format 2's long keys, and keys of 479 to 510 bytes) move. A store with a
changelog is rebuilt from it instead (``runtime.state.restore``)."""

from __future__ import annotations

import logging
from itertools import islice
from typing import Any, Protocol

from runtime.state.format import (
    META_KEY,
    SHORT,
    SHORT_LEN,
    VERSION,
    ChecksumError,
    checksummed,
    frame,
    unframe_2,
)

__all__ = ["MigratedStore", "migrate"]

log = logging.getLogger("samza_dsl.state")

CHUNK = 1024  # entries read per cursor


class MigratedStore(Protocol):
    """What migrating works on: an ``LmdbBytes``' LMDB file."""

    env: Any
    data_db: Any
    meta_db: Any
    flushes: int

    def where(self) -> str: ...

    def end_read(self) -> None: ...

    def meta_record(self, offset: int | None, committed: bool) -> bytes: ...

    def repair(self, what: str) -> None: ...


def migrate(store: MigratedStore, meta: dict[str, Any]) -> None:
    """Rewrites ``store`` (of the older format ``meta`` names, without a changelog) in this
    format, in one transaction."""
    store.end_read()
    version = meta["version"]
    n = 0
    moved: list[tuple[bytes, bytes, bytes]] = []  # (old LMDB key, encoded key, value)
    data = store.data_db
    with store.env.begin(write=True) as txn:
        pos, inclusive = SHORT, True
        while True:
            cur = txn.cursor(data)
            if not cur.set_range(pos) or (not inclusive and cur.key() == pos
                                          and not cur.next()):
                break
            chunk = list(islice(cur.iternext(), CHUNK))
            rewritten = []
            for lk, raw in chunk:
                if version == 1:
                    kb, vb = lk[1:], raw
                else:
                    try:
                        kb, vb = unframe_2(lk, raw)
                    except ChecksumError:
                        store.repair(f"the value of LMDB key {lk[:60]!r} (store format "
                                     f"{version})")  # raises: there is no changelog
                        raise
                if len(lk) <= SHORT_LEN and lk[:1] == SHORT:
                    if version == 1:
                        rewritten.append((lk, checksummed(lk, vb)))
                else:
                    moved.append((lk, kb, vb))
            if rewritten:
                txn.cursor(data).putmulti(rewritten)
            n += len(chunk)
            pos, inclusive = chunk[-1][0], False
            if len(chunk) < CHUNK:
                break
        for lk, _, _ in moved:
            txn.delete(lk, b"", data)
        puts = frame((kb, vb) for _, kb, vb in moved)
        if puts:
            txn.cursor(data).putmulti(puts)
        txn.put(META_KEY, store.meta_record(meta["changelog_offset"], meta["committed"]),
                db=store.meta_db)
    store.flushes += 1
    log.info("%s: migrated %d entries from store format %s to %d (%d keys moved)",
             store.where(), n, version, VERSION, len(moved))
