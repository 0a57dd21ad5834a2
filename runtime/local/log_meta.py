"""The local log's metadata keyspace: small values by string key, beside the log's streams in
its LMDB environment (checkpoints, a job's ids for names, the state it keeps there), each value
stored with its checksum (``runtime.local.segments.seal``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import lmdb

from runtime.local.log_env import LogEnvironment
from runtime.local.segments import CHECKED as _CHECKED
from runtime.local.segments import CHECKED_HEAD as _CHECKED_HEAD
from runtime.local.segments import seal
from runtime.local.segments import sealed as _sealed
from samza_dsl.errors import SamzaError

__all__ = ["MetaKeyspace"]

_MAX_META_KEY = 500  # LMDB's key limit is 511 bytes


class MetaKeyspace(LogEnvironment):
    """The metadata of a local log: ``put_meta``, ``get_meta``, ``meta_items``, ``delete_meta``
    and ``assign_ids``, each one transaction."""

    def _meta_key(self, key: str) -> bytes:
        raw = key.encode()
        if not raw or len(raw) > _MAX_META_KEY:
            raise SamzaError(
                f"metadata key {key[:80]!r} for the local log at {self.path} must be 1 to "
                f"{_MAX_META_KEY} bytes of UTF-8, not {len(raw)}"
            )
        return raw

    def put_meta(self, key: str, value: bytes) -> None:
        """Set one metadata key."""
        self.put_meta_many({key: value})

    def put_meta_many(self, items: Mapping[str, bytes]) -> None:
        """Set several metadata keys in one transaction."""
        shared = self._live()
        encoded = [(self._meta_key(k), v) for k, v in items.items()]
        try:
            with self._begin(shared, write=True) as txn:
                for k, v in encoded:
                    txn.put(k, seal(k, v), db=shared.meta)
        except lmdb.Error as e:
            raise self._lmdb_error(e, "writing metadata") from e

    def assign_ids(self, prefix: str, names: Iterable[str]) -> dict[str, int]:
        """Small ints for ``names``, the same for as long as the log lives: each name gets one
        the first time it is asked for (the next after those of ``prefix``), in one write
        transaction, so two processes asking at once never share one."""
        shared = self._live()
        wanted = list(dict.fromkeys(names))
        out: dict[str, int] = {}
        try:
            with self._begin(shared, write=True) as txn:
                known = {}
                cur = txn.cursor(shared.meta)
                pfx = prefix.encode()
                if cur.set_range(pfx):
                    for k, v in cur:
                        if bytes(k[:len(pfx)]) != pfx:
                            break
                        known[bytes(k[len(pfx):]).decode()] = int(
                            self._unsealed_meta(bytes(k), v))
                top = max(known.values(), default=0)
                for name in wanted:
                    if name not in known:
                        top += 1
                        known[name] = top
                        raw = self._meta_key(prefix + name)
                        txn.put(raw, seal(raw, str(top).encode()), db=shared.meta)
                    out[name] = known[name]
        except lmdb.Error as e:
            raise self._lmdb_error(e, f"assigning ids under {prefix!r}") from e
        return out

    def get_meta(self, key: str) -> bytes | None:
        """One metadata value, or None."""
        shared = self._live()
        try:
            with self._begin(shared) as txn:
                raw = self._meta_key(key)
                value = txn.get(raw, db=shared.meta)
                return None if value is None else self._unsealed_meta(raw, value)
        except lmdb.Error as e:
            raise self._lmdb_error(e, f"reading metadata key {key!r}") from e

    def meta_items(self, prefix: str = "") -> dict[str, bytes]:
        """Every metadata key starting with ``prefix``, and its value."""
        shared = self._live()
        pfx = prefix.encode()
        n = len(pfx)
        out: dict[str, bytes] = {}
        try:
            with self._begin(shared) as txn:
                cur = txn.cursor(shared.meta)
                if not (cur.set_range(pfx) if pfx else cur.first()):
                    return out
                for k, v in cur:
                    if bytes(k[:n]) != pfx:
                        break
                    out[bytes(k).decode()] = self._unsealed_meta(bytes(k), v)
        except lmdb.Error as e:
            raise self._lmdb_error(e, f"listing metadata under {prefix!r}") from e
        return out

    def _unsealed_meta(self, key: bytes, value: Any) -> bytes:
        """A metadata value, its checksum verified; one written before checksums, as it is."""
        if not value or value[0] != _CHECKED:
            return bytes(value)
        if not _sealed(value, key):
            name = key.decode(errors="replace")
            what = ("a checkpoint: the job cannot know where it stopped nor trust its state"
                    if name.startswith("checkpoint/") else "state the job keeps there")
            raise SamzaError(
                f"the metadata {name!r} in the local log at {self.path} fails its checksum: its "
                f"bytes changed on disk (a failing disk, a file edited or copied in part); it is "
                f"{what}. Restore the log directory from another copy, or start the job over "
                f"with `samza-dsl reset` (its inputs stay; its stores are rebuilt from them)")
        return bytes(value[_CHECKED_HEAD:])

    def delete_meta(self, prefix: str) -> int:
        """Delete every metadata key starting with ``prefix``; how many there were."""
        shared = self._live()
        pfx = prefix.encode()
        n = len(pfx)
        count = 0
        try:
            with self._begin(shared, write=True) as txn:
                cur = txn.cursor(shared.meta)
                if cur.set_range(pfx) if pfx else cur.first():
                    while bytes(cur.key()[:n]) == pfx and cur.delete():
                        count += 1
        except lmdb.Error as e:
            raise self._lmdb_error(e, f"deleting metadata under {prefix!r}") from e
        return count
