"""A container's event loop watched from a thread of its own (``LoopWatch``), for what the loop
cannot do while a synchronous call holds its thread: a function of the application that never
returns, a driver stuck in C, a sink's close waiting on its thread.

- The stop signals (SIGINT, SIGTERM) reach the watch first: Python runs a signal's handler
  on the main thread between two bytecodes, and the event loop takes it when it next comes
  round, neither of which happens while that thread is held. The watch passes each signal on
  to the loop (which stops cleanly when it can), and ends the process itself when a second
  stop comes (a repeat within ``REPEAT_S`` of the first is the same stop: ``timeout`` sends
  its signal twice) or when the first stop is ``task.shutdown.ms`` + ``MARGIN_S`` old and the
  loop's thread is held (a free loop stops what is in flight itself then, and closes).
- A heartbeat it posts to the loop tells how long the loop's thread has been held: in a
  bounded run, for half of ``job.bounded.stall.ms`` it warns naming where the thread is held,
  for all of it it ends the process.

Ending the process is the owner's ``give_up`` (one line saying what was abandoned, then
``os._exit``): nothing is committed past the last commit, and no thread is waited for.

``DaemonPool`` runs blocking functions (``job.container.thread.pool.size``) on threads that
never hold the process at its exit, as ``ThreadPoolExecutor``'s do (it joins them): a call
that never returns is left behind once the run has ended; ``leave_stuck_threads`` leaves any
other such thread behind at the end of a command, saying so.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import queue
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["LoopWatch", "DaemonPool", "REPEAT_S", "MARGIN_S", "ABORT_S", "exit_now",
           "leave_stuck_threads"]

_log = logging.getLogger("samza_dsl.run")

#: how often the watch looks (and posts its heartbeat to the loop)
TICK_S = 0.2
#: a stop signal this soon after the first is the same stop (``timeout`` sends it twice, a
#: run of several containers passes the terminal's on)
REPEAT_S = 1.0
#: how long past ``task.shutdown.ms`` the watch leaves the loop to stop by itself
MARGIN_S = 1.0
#: how long a second stop leaves the loop, when it is free, to stop without waiting
ABORT_S = 2.0
#: the loop's thread counts as held once a heartbeat has waited this long
HELD_S = 0.5


def exit_now(line: str, code: int) -> None:
    """``line`` on stderr, what is buffered flushed, and the process ends with ``code`` at
    once: no thread is joined, no atexit handler runs."""
    with contextlib.suppress(Exception):
        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(Exception):
        os.write(2, (line + "\n").encode("utf-8", "replace"))
    os._exit(code)


class LoopWatch:
    """Watches ``loop``, which runs on the thread ``thread_id``, from a daemon thread.

    Args:
        loop: the event loop (its stop signals set up already: ``take_signals`` moves them).
        thread_id: the loop's thread.
        stall_s: the bounded run's ``job.bounded.stall.ms`` in seconds (0: not watched).
        grace_s: ``task.shutdown.ms`` in seconds.
        armed: whether a held loop counts as a stall now (not while the tasks are built).
        describe: where the loop's thread is held, from that thread's innermost frame (""
            when nothing of the job's is on it).
        stop_now: run on the loop on a second stop: stop without waiting (the signal's number).
        give_up: ends the process: ``(kind, text, code)``, kind "interrupted" or "error".
        error_code: the exit code of a stall.
        who: the job (and container) the lines name.
    """

    def __init__(self, loop: Any, thread_id: int, *, stall_s: float, grace_s: float,
                 armed: Callable[[], bool], describe: Callable[[Any], str],
                 stop_now: Callable[[int], None], give_up: Callable[[str, str, int], None],
                 error_code: int, who: str) -> None:
        self.loop = loop
        self.thread_id = thread_id
        self.stall_s = stall_s
        self.grace_s = grace_s
        self.armed = armed
        self.describe = describe
        self.stop_now = stop_now
        self.give_up = give_up
        self.error_code = error_code
        self.who = who
        #: when the heartbeat not yet taken by the loop was posted (None: none waits)
        self._posted: float | None = None
        self._warned = False
        #: the first stop: (its signal, when); the second's deadline to end by itself
        self._first: tuple[int, float] | None = None
        self._second: tuple[int, float] | None = None
        self._done = threading.Event()
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        #: where the signals went before (the loop's wakeup): each is passed on to it
        self._forward = -1
        self._thread = threading.Thread(target=self._run, name="samza-loop-watch", daemon=True)

    def start(self) -> LoopWatch:
        """Take the process's signal wakeup (on the main thread) and start watching."""
        self._forward = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        self._thread.start()
        return self

    def stop(self) -> None:
        """The run ended: the loop takes its signals again, and the watch ends."""
        if self._done.is_set():
            return
        self._done.set()
        with contextlib.suppress(ValueError):  # not the main thread: none were taken
            if signal.set_wakeup_fd(self._forward, warn_on_full_buffer=False) != self._write_fd:
                signal.set_wakeup_fd(-1)  # another took it meanwhile: leave it none
        with contextlib.suppress(OSError):  # a 0 is no signal: it only ends the thread's wait,
            os.write(self._write_fd, b"\0")  # so the run's end does not wait up to a tick
        self._thread.join(timeout=2 * TICK_S + 1)
        for fd in (self._read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- on the watch's thread ---------------------------------------------------------------

    def _run(self) -> None:
        while not self._done.is_set():
            try:
                ready, _, _ = select.select([self._read_fd], [], [], TICK_S)
                data = os.read(self._read_fd, 64) if ready else b""
            except OSError:  # closed by stop()
                return
            now = time.monotonic()
            for sig in data:
                if sig and not self._done.is_set():
                    self._signal(sig, now)
            if not self._done.is_set():
                self._look(now)

    def _signal(self, sig: int, now: float) -> None:
        if self._forward >= 0:  # the loop takes it when it comes round
            with contextlib.suppress(OSError):
                os.write(self._forward, bytes([sig]))
        if sig not in (signal.SIGINT, signal.SIGTERM):
            return
        if self._first is None:
            self._first = (sig, now)
            return
        if now - self._first[1] < REPEAT_S or self._second is not None:
            return
        name = signal.Signals(sig).name
        first = signal.Signals(self._first[0]).name
        held = self.held_for(now)
        if held >= HELD_S:
            self._end_for_stop(sig, f"a second stop ({name}, {now - self._first[1]:.1f} s "
                                    f"after {first})", held)
        self._second = (sig, now + ABORT_S)
        with contextlib.suppress(RuntimeError):  # closed: the run ends anyway
            self.loop.call_soon_threadsafe(self.stop_now, sig)

    def _look(self, now: float) -> None:
        if self._posted is None:
            self._posted = now
            try:
                self.loop.call_soon_threadsafe(self._beat)
            except RuntimeError:  # the loop closed: the run is over
                self._done.set()
                return
        held = self.held_for(now)
        if self._second is not None and now >= self._second[1]:
            sig = self._second[0]
            self._end_for_stop(sig, f"a second stop ({signal.Signals(sig).name}), after "
                                    f"{ABORT_S:g} s more", held)
        if self._first is not None and now - self._first[1] >= self.grace_s + MARGIN_S \
                and held >= MARGIN_S:  # a free loop stops by itself (``_stop_overdue``)
            sig = self._first[0]
            self._end_for_stop(sig, f"the stop ({signal.Signals(sig).name}), "
                                    f"task.shutdown.ms={round(self.grace_s * 1000)} and "
                                    f"{MARGIN_S:g} s later", held)
        if self.stall_s <= 0 or not self.armed():
            return
        if held >= self.stall_s:
            what = self._where(held) or "a call did not return"
            self.give_up("error", (
                f"the run stopped: it made no progress for {held:.1f} s "
                f"(job.bounded.stall.ms={round(self.stall_s * 1000)}) while {what}. Nothing "
                f"past the last commit was committed: a rerun goes on from there. A function "
                f"that blocks holds the whole container: make it return, run it on "
                f"job.container.thread.pool.size threads, or raise job.bounded.stall.ms (-1: "
                f"off) if the wait is meant; see 'A run that waits' in docs/operations.md"),
                self.error_code)
        elif held >= self.stall_s / 2 and not self._warned:
            self._warned = True
            _log.warning("the run has made no progress for %.1f s: %s", held,
                         self._where(held) or "its event loop's thread does not come back")

    def _beat(self) -> None:
        self._posted = None

    def held_for(self, now: float | None = None) -> float:
        """How long the loop's thread has not come back to the loop (0: it is free)."""
        posted = self._posted
        if posted is None:
            return 0.0
        return max(0.0, (time.monotonic() if now is None else now) - posted)

    def _where(self, held: float) -> str:
        """Where the loop's thread is held: ``the event loop's thread was held for 3.1 s in
        ...``."""
        frame = sys._current_frames().get(self.thread_id)
        try:
            where = self.describe(frame) if frame is not None else ""
        except Exception:  # noqa: BLE001 - a description never keeps the process alive
            where = ""
        finally:
            del frame
        return f"the event loop's thread was held for {held:.1f} s in {where}" if where else ""

    def _end_for_stop(self, sig: int, why: str, held: float) -> None:
        what = self._where(held) if held >= HELD_S else ""
        self.give_up("interrupted", (
            f"{self.who} stopped without waiting on {why}: "
            + (what or "its event loop did not finish stopping")
            + ". Nothing past the last commit was committed: the next run resumes after the "
              "last checkpoint"), 128 + sig)


class DaemonPool(concurrent.futures.Executor):
    """Up to ``size`` daemon threads named ``<name>_<i>`` that run what is submitted, started
    as work comes; ``shutdown(wait=False)`` leaves a call that does not return behind."""

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._shut = False
        #: the threads in a call now, by their ident
        self._calling: set[int] = set()

    def submit(self, fn: Callable[..., Any], /, *args: Any,
               **kwargs: Any) -> concurrent.futures.Future[Any]:
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
            self._queue.put((fut, fn, args, kwargs))
            if not self._idle.acquire(timeout=0) and len(self._threads) < self._size:
                t = threading.Thread(target=self._work, daemon=True,
                                     name=f"{self._name}_{len(self._threads)}")
                t.start()
                self._threads.append(t)
            return fut

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.put(None)  # for the next thread
                return
            fut, fn, args, kwargs = item
            del item
            if fut.set_running_or_notify_cancel():
                me = threading.get_ident()
                self._calling.add(me)
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # noqa: BLE001 - the caller's, through the future
                    fut.set_exception(exc)
                else:
                    fut.set_result(result)
                finally:
                    self._calling.discard(me)
            del fut, fn, args, kwargs
            self._idle.release()

    def calling(self) -> list[tuple[str, Any]]:
        """(name, innermost frame) of each thread in a call now."""
        frames = sys._current_frames()
        return [(t.name, frames[t.ident]) for t in list(self._threads)
                if t.ident in self._calling and t.ident in frames]

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shut = True
            while cancel_futures:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
            self._queue.put(None)
        if wait:
            for t in self._threads:
                t.join()


def leave_stuck_threads(name: str, code: int, wait_s: float = 2.0) -> None:
    """At the end of a command: the threads that would keep the process from exiting (not
    daemon threads, still running ``wait_s`` after it ended: a call that never returns) are
    left behind, and the process exits with ``code`` now, saying so in one line naming them
    (``name``: who says it)."""
    others = [t for t in threading.enumerate()
              if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if not others:
        return
    deadline = time.monotonic() + wait_s
    for t in others:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in others if t.is_alive()]
    if stuck:
        exit_now(f"{name}: left {len(stuck)} thread(s) behind that did not end within "
                 f"{wait_s:g} s of the end: {', '.join(stuck)}", code)
