"""The LMDB environment a local log (``runtime.local.log``) is open on: one per directory in a
process, shared by every handle on it, checked when it is opened and closed with the last
handle; the transaction each call of the log is; and what LMDB's failures become (a full map,
a failing disk, a file that is not a log).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, Self

import lmdb
import msgspec

from runtime.host.storage import (
    MappedPages,
    check_file_not_truncated,
    check_not_truncated,
    fork_safe_lock,
    reserve_lock_file,
    storage_error,
)
from runtime.local.segments import DECODE_INFO as _DECODE_INFO
from samza_dsl.errors import SamzaError

__all__ = ["LogEnvironment", "SharedEnv"]


class SharedEnv:
    """One open environment, shared by every LocalLog on its directory in this process."""

    __slots__ = ("env", "streams", "log", "meta", "refs", "pid", "ident", "pages")

    def __init__(self, env: Any, streams: Any, log: Any, meta: Any, ident: Any,
                 pages: MappedPages) -> None:
        self.env = env
        self.streams = streams
        self.log = log
        self.meta = meta
        self.refs = 1
        self.pid = os.getpid()
        self.ident = ident
        #: the pages reads mapped in, let go of every 1 MB read (``MappedPages``): a log is mostly
        #: read once, and its pages would otherwise stay in the process's resident set
        self.pages = pages


# realpath -> the environment open on it. LMDB forbids opening one environment twice in a
# process (its fcntl locks belong to the process, so closing one handle would drop the other's).
_REGISTRY: dict[str, SharedEnv] = {}
_REGISTRY_LOCK = fork_safe_lock()
# held while a transaction is open, in any thread: a fork (a container process) waits for it,
# so no transaction of the parent's is open in the copy the child inherits and closes
_TXN_GUARD = fork_safe_lock(reentrant=True)


def _file_ident(real: str) -> tuple[int, int] | None:
    """Which data file the directory holds now: a log deleted and re-created at the same path
    while still open here is a different environment."""
    try:
        st = os.stat(os.path.join(real, "data.mdb"))
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _unreadable(path: str, exc: BaseException) -> SamzaError:
    return SamzaError(
        f"the local log at {path} is not a readable LMDB environment ({type(exc).__name__}: "
        f"{exc}); it is corrupt or is not a local log. Move the directory away or delete it "
        f"(rm -r {path}) to start with an empty log"
    )


class LogEnvironment:
    """A handle on the LMDB environment of a local log: opened (or joined, where this process
    has it open already) on a directory, created if missing; closed with ``close`` or as a
    context manager. ``LocalLog`` is the log over it."""

    def __init__(self, path: str | os.PathLike[str], *, map_size: int = 1 << 36,
                 cap_key: str | None = None) -> None:
        self.path: str = os.path.abspath(os.fspath(path))
        self.map_size = map_size
        #: the config key that sets ``map_size``, named when the log is full
        self.cap_key = cap_key
        self._shared: SharedEnv | None = None
        try:
            os.makedirs(self.path, exist_ok=True)
        except OSError as e:
            raise storage_error(e, self.path, "creating the local log directory") or SamzaError(
                f"cannot create the local log directory {self.path}: {e}; "
                f"choose another path or fix its permissions"
            ) from e
        if not os.path.isdir(self.path):
            raise SamzaError(f"the local log path {self.path} is not a directory; choose a directory")
        self._real = real = os.path.realpath(self.path)
        with _REGISTRY_LOCK:
            shared = _REGISTRY.get(real)
            if shared is not None and shared.pid != os.getpid():
                # Inherited across a fork: unusable here (LMDB handles must not cross a fork), but
                # py-lmdb refuses to open the files again until it is closed. Closing it in the
                # child touches only the child's own reader slots and locks, not the parent's.
                with contextlib.suppress(lmdb.Error):
                    shared.env.close()
                shared = None
            elif shared is not None and shared.ident != _file_ident(real):
                shared = None  # the directory was deleted and re-created: a new environment
            if shared is None:
                shared = self._open(real, map_size)
                _REGISTRY[real] = shared
            else:
                shared.refs += 1
        self._shared = shared

    def _open(self, real: str, map_size: int) -> SharedEnv:
        data_file = os.path.join(self.path, "data.mdb")
        recover = ("move the directory away and start the job over with `samza-dsl reset` "
                   "(its inputs must be loaded again)")
        check_file_not_truncated(data_file, "the local log", recover)
        reserve_lock_file(self.path, "the local log")
        try:
            env = lmdb.open(
                real,
                map_size=map_size,
                subdir=True,
                max_dbs=4,
                sync=False,
                metasync=False,
                lock=True,
                readahead=False,
            )
        except lmdb.Error as e:
            raise storage_error(e, self.path, "opening the local log") or _unreadable(
                self.path, e) from e
        try:
            check_not_truncated(env, data_file, "the local log", recover)
        except BaseException:
            env.close()
            raise
        try:
            streams = env.open_db(b"streams")
            log = env.open_db(b"log")
            meta = env.open_db(b"meta")
            env.reader_check()  # free the reader slots of processes that died mid-read
            with env.begin(buffers=True) as txn:  # a first read: fail now, not mid-job
                cur = txn.cursor(streams)
                for _, value in cur:
                    _DECODE_INFO(value)
                txn.cursor(log).last()
        except (lmdb.Error, msgspec.DecodeError) as e:
            env.close()
            raise storage_error(e, self.path, "opening the local log") or _unreadable(
                self.path, e) from e
        return SharedEnv(env, streams, log, meta, _file_ident(real),
                       MappedPages(os.path.join(real, "data.mdb"), env=env))

    # ------------------------------------------------------------------ plumbing

    def _live(self) -> SharedEnv:
        shared = self._shared
        if shared is None:
            raise SamzaError(f"the local log at {self.path} is closed; open a new LocalLog")
        if shared.pid != os.getpid():
            raise SamzaError(
                f"the local log at {self.path} was opened in process {shared.pid}, before a fork; "
                f"open a new LocalLog in this process (pid {os.getpid()})"
            )
        return shared

    @contextlib.contextmanager
    def _begin(self, shared: SharedEnv, write: bool = False) -> Iterator[Any]:
        """A transaction, committed at the end of the block (aborted on an exception). No
        process forks while one is open in any of its threads (``_TXN_GUARD``)."""
        with _TXN_GUARD:
            try:
                txn = shared.env.begin(write=write, buffers=True)
            except lmdb.MapResizedError:
                # Another process grew the map beyond ours: adopt its size and retry.
                shared.env.set_mapsize(0)
                shared.pages.moved()
                txn = shared.env.begin(write=write, buffers=True)
            with txn:
                yield txn

    def _lmdb_error(self, exc: lmdb.Error, doing: str) -> SamzaError:
        fault = storage_error(exc, self.path, doing)
        if fault is not None:  # the disk, not the file: never advise deleting anything
            return fault
        if isinstance(exc, lmdb.MapFullError):
            size = self._shared.env.info()["map_size"] if self._shared else self.map_size
            how = (f"raise {self.cap_key} (a number of bytes) and restart the job"
                   if self.cap_key else
                   "reopen it with a larger map_size (close every LocalLog on it first)")
            return SamzaError(
                f"the local log at {self.path} reached its size cap (map_size={size} bytes) while "
                f"{doing}; {how}. Retention (streams.<id>.retention.ms or "
                f"streams.<id>.retention.bytes on inputs and outputs) and changelog compaction "
                f"free space inside the log for new appends; or delete streams you no longer need"
            )
        return SamzaError(
            f"LMDB failed while {doing} in the local log at {self.path}: "
            f"{type(exc).__name__}: {exc}. If it persists the file may be corrupt: move the "
            f"directory away or delete it"
        )

    # ------------------------------------------------------------------ lifecycle

    def sync(self) -> None:
        """Flush to disk: durable against power loss too (appends survive a crash of the
        process without it)."""
        shared = self._live()
        try:
            shared.env.sync(True)
        except lmdb.Error as e:
            raise self._lmdb_error(e, "syncing") from e

    def close(self) -> None:
        """Release this handle; the environment closes with the last one in the process."""
        shared, self._shared = self._shared, None
        if shared is None:
            return
        with _REGISTRY_LOCK:
            shared.refs -= 1
            if shared.refs > 0:
                return
            if _REGISTRY.get(self._real) is shared:
                del _REGISTRY[self._real]
        if shared.pid == os.getpid():
            shared.env.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._shared is None else "open"
        return f"{type(self).__name__}({self.path!r}, {state})"
