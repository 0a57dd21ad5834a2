"""A store whose file fails a checksum while the job runs, rebuilt in place.

A read that finds a value failing its checksum (``get``, ``range``, ``all``) means the file was
changed on disk. With a changelog the store is rebuilt in place, with a warning naming the
file, from the changelog's entries up to its last commit (``store.base``) and the entries
flushed since (``store.since``, kept in memory until the next commit, up to ``SINCE_MAX`` of
them: past that the error asks for a restart, which rebuilds the store from the changelog when
it opens, ``runtime.state.restore``), and the read is done again. Without one it is an error
naming the file. After three rebuilds in one run the disk or memory is suspect: an error.
"""

from __future__ import annotations

import logging
from typing import Protocol

from runtime.state.changelog import Changelog
from runtime.state.format import frame
from runtime.state.restore import RestoredStore, rebuild
from samza_dsl.errors import SamzaError

__all__ = ["SINCE_MAX", "RepairedStore", "repair"]

log = logging.getLogger("samza_dsl.state")

#: the most entries flushed since the last commit kept for a rebuild in place
SINCE_MAX = 10_000
#: rebuilds in one run past which the machine, not the file, is suspect
MAX_REPAIRS = 3


class RepairedStore(RestoredStore, Protocol):
    """What a rebuild in place works on: a restored store, its changelog, and what it flushed
    since its last commit (None: more than ``SINCE_MAX`` entries)."""

    changelog: Changelog | None
    since: dict[bytes, bytes | None] | None
    repairs: int


def repair(store: RepairedStore, what: str) -> None:
    """A read found ``what`` failing its checksum: rebuilds ``store`` in place from its
    changelog, or raises without one (see the module docstring)."""
    where = (f"{store.where()}: {what} in {store.data_file()} fails its checksum (the file "
             f"was changed on disk)")
    if store.changelog is None:
        raise SamzaError(
            f"{where}; the store has no changelog, so its state cannot be rebuilt. Stop the "
            f"job and delete the directory {store.path} to start the store empty, or enable "
            f"the store's changelog so a damaged copy can be restored")
    if store.since is None:
        raise SamzaError(
            f"{where}; more than {SINCE_MAX} entries were written since the last commit, "
            f"too many to keep in memory for a rebuild in place. Restart the job: the store "
            f"is rebuilt from its changelog when it opens")
    store.repairs += 1
    if store.repairs > MAX_REPAIRS:
        raise SamzaError(
            f"{where}, again after {store.repairs - 1} rebuilds from the changelog in this "
            f"run: the disk or memory may be failing. Stop the job and check the machine")
    log.warning("%s: rebuilding it from the changelog's offsets [0, %d) and the %d entries "
                "flushed since", where, store.base, len(store.since))
    rebuild(store, store.changelog, store.base)
    if store.since:
        store.write_raw(frame(store.since.items()), uncommit=True)
        store.committed = False
    store.flushes += 1  # scans read their chunk again
