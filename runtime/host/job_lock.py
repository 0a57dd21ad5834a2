"""One process per container: ``flock`` locks in ``<job.dir>/locks``.

- ``job.lock``: a job of one container holds it exclusively while it runs; each container of a
  job of several holds it shared (and so does the process that starts them), so containers run
  side by side. ``reset`` takes it exclusively, so it refuses while any of them runs, and a run
  refuses while a reset is under way.
- ``container-<id>.lock``: container ``id`` of a job of several holds it exclusively, so a second
  process for the same container is refused.
- ``count-<n>.lock``: the containers of a job of ``n`` hold it shared. Containers split the tasks
  by their count, so a container refuses to start while one of another count runs (its tasks
  would overlap).

The same files are taken, in the same order and ways, in ``<log>/locks/<job>/`` of each local
log the job uses (``JobLock(..., logs=[...])``): two runs of one job with different job dirs
but one log would otherwise both process every input. The lock is per (log, job): other jobs
on the same log keep their own streams and run side by side.

An exclusive holder writes its PID into the file (in a log's copy also its host and job.dir),
so the refusal can name the process. ``load``
and ``dump`` take no lock: appending to inputs and reading streams are safe while a job runs.
The kernel drops a lock when its process dies, so a crash never leaves a job locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import re
import socket
from collections.abc import Iterator, Sequence

from runtime.host.storage import fork_safe_lock, storage_error
from samza_dsl.errors import SamzaError

__all__ = ["JobLock", "JobLockedError", "lock_dir", "lock_holders", "log_id_lock",
           "log_lock_dir"]


class JobLockedError(SamzaError):
    """Another process holds the lock this one needs."""


def _forget_in_child() -> None:
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


# fds of the locks this process holds: closed (never unlocked) in a forked child, where they
# would keep the parent's lock alive after the parent released it.
_HELD: set[int] = set()
_HELD_LOCK = fork_safe_lock(in_child=_forget_in_child)


def lock_dir(root: str) -> str:
    return os.path.join(root, "locks")


def log_lock_dir(log_path: str, job_name: str) -> str:
    """Where a job's locks live in a local log it uses (see the module doc)."""
    return os.path.join(log_path, "locks", job_name)


@contextlib.contextmanager
def log_id_lock(root: str, exclusive: bool) -> Iterator[None]:
    """A brief, blocking lock around writing (``exclusive``) or checking ``<job.dir>/log.id``
    and the log's copy of it, which containers started together may do at once. A check goes
    on without it when the lock file cannot be created (a read-only job.dir)."""
    path = os.path.join(lock_dir(root), "log-id.lock")
    try:
        os.makedirs(lock_dir(root), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if exclusive:
            raise storage_error(e, path, "creating a lock file") or SamzaError(
                f"cannot create the lock file {path}: {e}; check that job.dir {root} is a "
                f"writable directory") from e
        yield
        return
    with _HELD_LOCK:  # a container forked meanwhile must not keep it
        _HELD.add(fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        with _HELD_LOCK:
            _HELD.discard(fd)
        os.close(fd)


def _holder(path: str) -> tuple[int, str] | None:
    """The live process a lock file names, and what it does."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(200).strip()
    except OSError:
        return None
    m = re.fullmatch(r"(\d+) (.*)", text, re.S)
    if m is None:
        return None
    pid = int(m.group(1))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # a crashed holder's stale note
    except PermissionError:
        pass
    return pid, m.group(2)


def lock_holders(root: str) -> dict[str, tuple[int, str]]:
    """The live processes the lock files of the job in ``root`` name: {file name: (pid, what
    it does)}. Only reads the files (the PID an exclusive holder wrote, checked alive): takes no
    lock, so it never gets in the way of a job that starts or runs."""
    out: dict[str, tuple[int, str]] = {}
    for path in sorted(glob.glob(os.path.join(lock_dir(root), "*.lock"))):
        h = _holder(path)
        if h is not None:
            out[os.path.basename(path)] = h
    return out


class JobLock:
    """The locks one process holds on a job's directory; ``release`` drops them all."""

    def __init__(self, root: str, job_name: str, logs: Sequence[str] = ()) -> None:
        self.root = root = os.path.abspath(root)
        self.job_name = job_name
        self.dir = lock_dir(root)
        #: the lock directories: job.dir's, then one in each local log of the job
        self.dirs = [self.dir, *sorted({log_lock_dir(os.path.abspath(p), job_name)
                                        for p in logs})]
        self._fds: dict[str, int] = {}  # path -> fd
        self._noted: set[str] = set()  # files this process wrote its PID into

    # -- the ways a process takes the job ------------------------------------------------------

    def run(self, container_id: int | None, count: int) -> None:
        """A container starting: the whole job when it is the only one, else its own part."""
        if container_id is None:
            self._take("job.lock", exclusive=True, note="run",
                       doing=f"run job {self.job_name!r}")
            return
        what = f"container {container_id} of {count}"
        doing = f"run {what} of job {self.job_name!r}"
        self._take("job.lock", exclusive=False, note=None, doing=doing)
        self._take(f"count-{count}.lock", exclusive=False, note=None, doing=doing)
        for d in self.dirs:
            for other in glob.glob(os.path.join(d, "count-*.lock")):
                if other != os.path.join(d, f"count-{count}.lock") and self._in_use(other):
                    self.release()
                    raise self._refusal(other, f"{doing} (containers of another "
                                               f"job.container.count run)")
        self._take(f"container-{container_id}.lock", exclusive=True, note=f"run {what}",
                   doing=doing)

    def member(self) -> None:
        """A container of a job whose containers form a Kafka consumer group
        (``job.coordinator=kafka``): the job's directory holds the stores of the tasks it runs,
        so it is one member's, as a job of one container holds it (the group's other members
        run on other hosts, or with job.dirs of their own)."""
        self._take("job.lock", exclusive=True, note="run",
                   doing=f"run job {self.job_name!r} as a member of its consumer group with "
                         f"job.dir {self.root} (each member on a host needs a job.dir of its "
                         f"own)")

    def start_containers(self, count: int) -> None:
        """The process that prepares a run of ``count`` containers and starts them: exclusive
        while it prepares (it moves checkpoints), then shared with the containers."""
        self._take("job.lock", exclusive=True, note=f"start {count} containers",
                   doing=f"start job {self.job_name!r}")

    def share(self) -> None:
        """Turn the exclusive job lock into a shared one (the containers take it too)."""
        for d in self.dirs:
            path = os.path.join(d, "job.lock")
            try:
                fcntl.flock(self._fds[path], fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                self.release()
                raise self._refusal(path, f"start job {self.job_name!r}") from None

    def exclusive(self, note: str, doing: str) -> None:
        """The whole job, for a command that rewrites its state (``reset``)."""
        self._take("job.lock", exclusive=True, note=note, doing=doing)

    # -- plumbing -----------------------------------------------------------------------------

    def _take(self, name: str, *, exclusive: bool, note: str | None, doing: str) -> None:
        # another job.dir's run refused at a log's lock must learn which host and job.dir hold it
        where = None if note is None else (
            f"{note} on host {socket.gethostname()}, job.dir {self.root}")
        for d in self.dirs:
            self._take_in(d, name, exclusive=exclusive, note=note if d == self.dir else where,
                          doing=doing)

    def _take_in(self, in_dir: str, name: str, *, exclusive: bool, note: str | None,
                 doing: str) -> None:
        path = os.path.join(in_dir, name)
        try:
            os.makedirs(in_dir, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            self.release()
            where = (f"job.dir {self.root}" if in_dir == self.dir
                     else f"the local log's directory {os.path.dirname(os.path.dirname(in_dir))}")
            raise storage_error(e, path, f"creating the lock file to {doing}") or SamzaError(
                f"cannot create the lock file {path} to {doing}: {e}; check that {where} is a "
                f"writable directory") from e
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            self.release()
            raise self._refusal(path, doing) from None
        self._fds[path] = fd
        with _HELD_LOCK:
            _HELD.add(fd)
        if note is not None:
            self._noted.add(path)
            # only to name the holder in a refusal: a full disk must not stop the job here
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()} {note}\n".encode(), 0)

    @staticmethod
    def _in_use(path: str) -> bool:
        """Whether some process holds ``path`` (a brief exclusive try, dropped at once)."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def _refusal(self, path: str, doing: str) -> JobLockedError:
        d = os.path.dirname(path)
        holders = []
        for other in [os.path.join(d, "job.lock"),
                      *sorted(glob.glob(os.path.join(d, "container-*.lock")))]:
            h = _holder(other)
            if h is not None:
                holders.append(f"process {h[0]} (`{h[1]}`, lock file {other})")
        who = "; ".join(holders) if holders else f"another process (lock file {path})"
        shared = ""
        if d != self.dir:
            log = os.path.dirname(os.path.dirname(d))
            shared = (f" The local log {log} holds the job's inputs and checkpoints for every "
                      f"job.dir: run the job with the job.dir of that process, or give this run "
                      f"a log of its own (systems.<system>.path).")
        return JobLockedError(
            f"cannot {doing}: it is in use by {who}. One process per container: stop that "
            f"process first (Ctrl-C or SIGTERM lets a job commit and exit) or wait for it to "
            f"finish, then try again.{shared}")

    def release(self) -> None:
        """Drop every lock this object holds. Idempotent."""
        for path, fd in list(self._fds.items()):
            with _HELD_LOCK:
                _HELD.discard(fd)
            with contextlib.suppress(OSError):
                if path in self._noted:
                    os.ftruncate(fd, 0)  # while still held: no one else writes it now
                fcntl.flock(fd, fcntl.LOCK_UN)
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
        self._noted.clear()

    @property
    def held(self) -> bool:
        return bool(self._fds)
