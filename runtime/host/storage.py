"""Storage faults told as they are: a full disk, a read-only file system, a refused permission,
an I/O error or a truncated LMDB file, each naming the path and what to do.

A full or read-only disk loses nothing that was committed, so these messages never advise
deleting anything (unlike a corrupt file, where moving it away may be the only way on).
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import struct
import threading
from collections.abc import Callable
from typing import Any

import lmdb

from samza_dsl.errors import SamzaError

__all__ = ["MappedPages", "StorageError", "check_file_not_truncated", "check_not_truncated",
           "fault_errno", "fork_safe_lock", "reserve_lock_file", "storage_error"]


class StorageError(SamzaError):
    """The disk refused a read or write (full, read-only, permission, I/O error), or an LMDB
    file is shorter than its own metadata says. ``errno`` is the system's code, if any."""

    def __init__(self, message: str, *, path: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.errno = errno


def fork_safe_lock(in_child: Callable[[], None] | None = None, *,
                   reentrant: bool = False) -> Any:
    """A process-wide lock that a fork never copies while another thread holds it.

    The thread that forks takes the lock first, so no other thread is inside it at the fork,
    and both processes let go of it after. Without this a container forked while another
    thread of the parent (one reading a job's outputs, say) held it would wait for it forever,
    with no thread left in the container to release it. ``in_child`` runs in the new process
    while the lock is still held, to tidy what the lock guards. ``reentrant``: a
    ``threading.RLock``, which the thread holding it may take again.
    """
    lock: Any = threading.RLock() if reentrant else threading.Lock()

    def child() -> None:
        if in_child is not None:
            in_child()
        lock.release()

    os.register_at_fork(before=lock.acquire, after_in_parent=lock.release, after_in_child=child)
    return lock


# LMDB reports a system error as the text of strerror (py-lmdb keeps no errno on its
# exceptions): ENOSPC and EIO come as DiskError, EACCES as ReadonlyError, EROFS as plain Error.
_KNOWN = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO,
          errno.EMFILE, errno.ENFILE)
_TEXTS = tuple((os.strerror(code), code) for code in _KNOWN)


def fault_errno(exc: BaseException) -> int | None:
    """The errno of a storage fault in ``exc`` (an OSError or an lmdb.Error), or None."""
    if isinstance(exc, OSError):
        return exc.errno if exc.errno in _KNOWN else None
    if isinstance(exc, lmdb.Error):
        text = str(exc)
        for phrase, code in _TEXTS:
            if phrase in text:
                return code
    return None


def storage_error(exc: BaseException, path: str, doing: str, *, then: str = "") -> StorageError | None:
    """A clear error for a storage fault in ``exc`` while ``doing`` on ``path``, or None when
    ``exc`` is not one. ``then`` says how to go on once the cause is fixed."""
    code = fault_errno(exc)
    if code is None:
        return None
    path = os.path.abspath(path)
    then = then or "then run the command again"
    detail = f"{type(exc).__name__}: {exc}"
    if code in (errno.ENOSPC, errno.EDQUOT):
        what = "no space left on the device" if code == errno.ENOSPC else "disk quota exceeded"
        text = (f"{what} holding {path} while {doing} ({detail}). What was committed before "
                f"is intact. Make room on that file system (`df {path}` shows it) or move the "
                f"job to a larger one, {then}")
    elif code == errno.EROFS:
        text = (f"{path} is on a read-only file system, so {doing} failed ({detail}). Nothing "
                f"was changed. Remount it read-write, or point job.dir (and the system's path) "
                f"at a writable directory, {then}")
    elif code in (errno.EMFILE, errno.ENFILE):
        text = f"too many open files while {doing} on {path} ({detail}). " + _FD_ADVICE.format(
            limits=_fd_limits(), then=then)
    elif code in (errno.EACCES, errno.EPERM):
        text = (f"permission denied on {path} while {doing} ({detail}). Nothing was changed. "
                f"Give the user running samza-dsl (uid {os.geteuid()}) read and write access "
                f"to it, {then}")
    else:
        free = _free_bytes(path)
        if free is not None and free < _NEARLY_FULL:
            # LMDB reports a short write as EIO, and a full disk is what cuts writes short
            code = errno.ENOSPC
            text = (f"no space left on the device holding {path} while {doing}: it has "
                    f"{free} bytes free ({detail}: a write was cut short). What was committed "
                    f"before is intact. Make room on that file system (`df {path}` shows it) or "
                    f"move the job to a larger one, {then}")
        else:
            text = (f"an I/O error on the device holding {path} while {doing} ({detail}). "
                    f"Check the disk (the kernel log, `dmesg`, names the failing device), {then}")
    return StorageError(text, path=path, errno=code)


_FD_ADVICE = ("This process may open {limits}. Raise the limit for the shell that starts "
              "samza-dsl (`ulimit -n N`; past the hard limit as root or in "
              "/etc/security/limits.conf), or give each process fewer tasks and stores (fewer "
              "partitions, or --containers N), {then}")
#: open files an LMDB environment (a task's store, a local log) holds: its data file, its lock
#: file, and the data file again for its metadata writes
FDS_PER_ENV = 3
#: open files of a job besides its LMDB environments: the interpreter's, standard streams,
#: lock files, pipes to containers, the sockets of a job page or a remote table
FDS_BASE = 64


def _fd_limits() -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return f"{soft} files (`ulimit -n`; hard limit {'unlimited' if hard < 0 else hard})"


def ensure_open_files(needed: int, what: str) -> None:
    """Makes room for ``needed`` open files in this process, as servers do: raises the soft
    limit up to the hard one when that is enough, else fails before anything is opened, saying
    how many ``what`` needs, the limit, and how to raise it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or needed <= soft:
        return
    if hard == resource.RLIM_INFINITY or needed <= hard:
        target = hard if hard != resource.RLIM_INFINITY else max(needed * 2, 4096)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return
        except (ValueError, OSError):  # a hard limit above the kernel's nr_open
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
                return
    raise SamzaError(
        f"{what} needs about {needed} open files, more than the limit allows. "
        + _FD_ADVICE.format(limits=_fd_limits(), then="then start it again").replace(
            "`ulimit -n N`", f"`ulimit -n {needed}`"))


_NEARLY_FULL = 64 << 20  # free bytes below which a short write is taken for a full disk


def _free_bytes(path: str) -> int | None:
    """Bytes free to this user on the file system of ``path`` (or of its nearest parent)."""
    p = os.path.abspath(path)
    while True:
        try:
            st = os.statvfs(p)
        except OSError:
            parent = os.path.dirname(p)
            if parent == p:
                return None
            p = parent
            continue
        return st.f_bavail * st.f_frsize


def check_not_truncated(env: Any, data_file: str, what: str, recover: str) -> None:
    """Raises StorageError if ``data_file`` is shorter than the last page LMDB's meta pages
    record. Call it after ``lmdb.open`` and before the first read through the map: a page past
    the end of the file kills the process with SIGBUS when read. ``recover`` says what to do
    without a backup."""
    # The meta first, the size second: another process may commit in between, and it writes a
    # transaction's pages before the meta page that counts them, so the file only grows ahead.
    need = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    try:
        size = os.path.getsize(data_file)
    except OSError as e:
        raise storage_error(e, data_file, f"reading the size of {what}") or SamzaError(
            f"cannot read the size of {data_file} ({what}): {e}") from e
    if size < need:
        raise _truncated(data_file, what, size, need, recover)


def _truncated(data_file: str, what: str, size: int, need: int | None,
               recover: str) -> StorageError:
    short = f"its last page ends at byte {need}" if need is not None else \
        "an LMDB file's first page is longer"
    return StorageError(
        f"{data_file} ({what}) is truncated: it has {size} bytes but {short}, so part of it "
        f"was lost (a copy cut short, a full disk, or power loss "
        f"before a sync). Restore the file from a backup if you have one; otherwise "
        f"{recover} (see docs/operations.md, Storage faults)",
        path=data_file)


# An LMDB meta page (64-bit build): a 16-byte page header (page number, pad, flags), then
# mm_magic, mm_version, mm_address, mm_mapsize, the free and main databases' records (48 bytes
# each; the free one's md_pad holds the page size), mm_last_pg and mm_txnid.
_META = struct.Struct("<QHH4xIIQQI44x48xQQ")
_P_META = 0x08
_MAGIC = 0xBEEFC0DE


def check_file_not_truncated(data_file: str, what: str, recover: str) -> None:
    """Before ``lmdb.open``: raises StorageError if ``data_file`` is shorter than the last page
    its newer meta page records, or than its two meta pages. A file whose first page is no LMDB
    meta page is left to LMDB to judge; an absent or empty one is a new environment."""
    try:
        with open(data_file, "rb") as f:
            first = f.read(_META.size)
            if len(first) < _META.size:
                if first:  # no LMDB file is shorter than its first meta page: a cut copy
                    raise _truncated(data_file, what, os.fstat(f.fileno()).st_size, None,
                                     recover)
                return
            pgno, _, flags, magic, _, _, _, psize, last, txnid = _META.unpack(first)
            if pgno != 0 or not flags & _P_META or magic != _MAGIC or psize < 512:
                return
            need = (last + 1) * psize
            f.seek(psize)
            second = f.read(_META.size)
            # the size after the meta pages: another process that commits meanwhile writes its
            # pages before its meta page, so a size read first could be short of a newer meta
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        return  # a new environment
    except OSError as e:
        raise storage_error(e, data_file, f"reading {what}") or SamzaError(
            f"cannot read {data_file} ({what}): {e}") from e
    if len(second) == _META.size:
        pgno, _, flags, magic, _, _, _, _, last2, txnid2 = _META.unpack(second)
        if pgno == 1 and flags & _P_META and magic == _MAGIC and txnid2 > txnid:
            need = (last2 + 1) * psize  # LMDB uses the meta page of the later transaction
    need = max(need, 2 * psize)
    if size < need:
        raise _truncated(data_file, what, size, need, recover)


_LOCK_FILE_SIZE = 8192  # what LMDB makes for its default 126 reader slots


def reserve_lock_file(directory: str, what: str) -> None:
    """Allocates the disk blocks of LMDB's ``lock.mdb`` in ``directory`` before ``lmdb.open``.
    LMDB writes its reader table through a shared map of that file: on a full disk a page not yet
    allocated kills the process with SIGBUS instead of failing the open. Call it only where no
    LMDB environment of this process has the file open (closing an fd of the file would drop that
    environment's fcntl locks)."""
    path = os.path.join(directory, "lock.mdb")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise storage_error(e, path, f"opening {what}") or SamzaError(
            f"cannot open {path} ({what}): {e}; check that {directory} is a writable "
            f"directory") from e
    try:
        # allocates holes only: the contents another process may be using stay as they are
        os.posix_fallocate(fd, 0, max(os.fstat(fd).st_size, _LOCK_FILE_SIZE))
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise storage_error(e, path, f"opening {what}") or SamzaError(
                f"cannot allocate {path} ({what}): {e}") from e
    finally:
        os.close(fd)


class MappedPages:
    """Lets go of the pages of an LMDB file that reads have mapped into this process.

    LMDB reads through a read-only shared map of its data file, so every page a reader touched
    counts in the process's resident set until the map is closed. For a file read once from
    end to end (a log), that is the whole file. ``read(n)`` counts the bytes read;
    past ``every`` bytes it asks the kernel to drop the map's pages (``madvise`` with
    ``MADV_DONTNEED``, Linux): the pages stay in the page cache, and a read that needs one
    again maps it back from there with the same contents. Nothing is lost or written. Where
    ``/proc/self/maps`` or ``madvise`` is missing it does nothing.

    Where the map lies is read from ``/proc/self/maps`` (a fraction of a millisecond). With
    ``env``, the environment that holds the map, it is read once for that environment and
    used again while the environment is the same object, still open, and its map as large as
    the place found: LMDB maps its file once when it opens and moves the map only when it is
    resized, and the one who resizes calls ``moved()``. A release then costs only the
    ``madvise``, so it comes every 1 MB read: a job's mapped files hold a few MB at most."""

    __slots__ = ("data_file", "every", "_since", "_real", "env", "_found", "_found_env")

    def __init__(self, data_file: str, every: int = 1 << 20, env: Any = None) -> None:
        self.data_file = data_file
        self.every = every
        self._since = 0
        self._real = os.path.realpath(data_file)
        #: the environment whose map this is (None: the map is looked up at every release)
        self.env = env
        self._found: list[tuple[int, int]] | None = None
        self._found_env: Any = None

    def read(self, n: int) -> None:
        self._since += n
        if self._since >= self.every:
            self._since = 0
            self.release()

    def moved(self) -> None:
        """The map may lie elsewhere now (the environment was resized): look for it again."""
        self._found = self._found_env = None

    def _ranges(self) -> list[tuple[int, int]]:
        env = self.env
        if env is None:
            return _maps_of(self._real)
        try:
            size = env.info()["map_size"]
        except lmdb.Error:  # closed: it has no map to let go of
            return []
        found = self._found
        if (found is None or self._found_env is not env
                or sum(end - start for start, end in found) != size):
            found = _maps_of(self._real)
            self._found, self._found_env = found, env
        return found

    def release(self) -> int:
        """Drops the mapped pages of the file now; returns the bytes of map given back to the
        kernel's care (0 where it cannot)."""
        if _MADVISE is None:
            return 0
        released = 0
        for start, end in self._ranges():
            if _MADVISE(start, end - start, _MADV_DONTNEED) == 0:
                released += end - start
        return released


_MADV_DONTNEED = 4


def _load_madvise() -> Any:
    import sys
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_MADVISE = _load_madvise()


def _maps_of(path: str) -> list[tuple[int, int]]:
    """The address ranges of this process's read-only shared maps of the file at ``path``."""
    out = []
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
        for line in lines:
            if line.endswith(path):  # most lines are other files: passed over without a split
                parts = line.split(None, 5)
                # e.g. "7f0a...-7f0b... r--s 00000000 fd:01 1234 /path/data.mdb"
                if len(parts) < 6 or parts[1] != "r--s" or parts[5] != path:
                    continue
                start, _, end = parts[0].partition("-")
                out.append((int(start, 16), int(end, 16)))
    except (OSError, ValueError):
        return []
    return out
