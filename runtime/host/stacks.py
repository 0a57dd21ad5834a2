"""Where a process waits, on a signal (``kill -USR1 PID``): every thread's stack, printed by
``faulthandler`` even when a thread is stuck in C, then each task of the event loop with the
chain of awaits it waits in, innermost last (a thread's stack shows only the loop's ``select``).
The process goes on. ``samza-dsl`` sets it up for SIGUSR1 (``runtime.ops.cli``), and so does each
container process a local run forks (``runtime.runner``)."""

from __future__ import annotations

import asyncio
import faulthandler
import os
import signal
import sys
import threading
from typing import Any

__all__ = ["stacks_on"]

#: the innermost frames printed of each asyncio task's chain of awaits
_TASK_FRAMES = 8


def stacks_on(signum: int, fd: int | None = None) -> None:
    """Print the stacks on ``signum``: the threads' on ``fd`` (by default stderr's), the tasks'
    on stderr. Not where the caller runs in a process of another's: a thread other than the
    main one, or, without ``fd``, a stderr that is no file (a test's capture)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if fd is None:
        try:
            fd = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
            return
    # set up afresh (a process forked from one that had it set up): faulthandler's handler
    # first, calling on to Python's, which runs on the main thread soon after
    faulthandler.unregister(signum)
    signal.signal(signum, _print_tasks)
    faulthandler.register(signum, file=fd, all_threads=True, chain=True)


def _print_tasks(signum: int, frame: Any) -> None:
    """The tasks of the event loop running on this thread, each with where it waits: composed
    first and written in one piece, so that the containers of a run, sharing one stderr and
    signalled together, do not mix their lines."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no loop runs (yet, or any more)
        return
    tasks = sorted(asyncio.all_tasks(loop), key=lambda t: t.get_name())
    lines = [f"\nasyncio: {len(tasks)} task(s) of the event loop (pid {os.getpid()}):"]
    for task in tasks:
        lines.append(f"- {task.get_name()}:")
        lines.extend(f"    {code.co_filename}, line {line} in {code.co_name}"
                     for code, line in _awaiting(task.get_coro())[-_TASK_FRAMES:])
    text = "\n".join(lines) + "\n"
    sys.stderr.flush()
    try:
        data = text.encode(errors="replace")
        fd = sys.stderr.fileno()
        while data:
            data = data[os.write(fd, data):]
    except (AttributeError, OSError, ValueError):  # no file under it: write through the stream
        sys.stderr.write(text)
        sys.stderr.flush()


def _awaiting(coro: Any) -> list[tuple[Any, int]]:
    """(code, line) of a suspended coroutine and of each it awaits, outermost first."""
    out: list[tuple[Any, int]] = []
    while coro is not None and len(out) < 100:
        frame = (getattr(coro, "cr_frame", None)  # foreign: a Python coroutine
                 or getattr(coro, "gi_frame", None))  # foreign: a Python generator
        if frame is None:
            break
        out.append((frame.f_code, frame.f_lineno))
        coro = (getattr(coro, "cr_await", None)  # foreign: a Python coroutine
                or getattr(coro, "gi_yieldfrom", None))  # foreign: a Python generator
    return out
