"""A job run as a process the way a crash test needs it: killed with SIGKILL after a time (or by
the job itself at a fault point), its exit code and what it wrote to stderr."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable


def finish(proc: subprocess.Popen[str], kill_after: float | None,
           timeout: float) -> tuple[int, str]:
    """Wait for ``proc``: SIGKILL it after ``kill_after`` seconds if given, and in any case
    when it has not ended ``timeout`` seconds later; its exit code and stderr."""
    try:
        if kill_after is not None:
            try:
                proc.wait(kill_after)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:  # where it is stuck (with PYTHONFAULTHANDLER set)
            proc.send_signal(signal.SIGABRT)
            try:
                _, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            raise AssertionError(f"the job did not end within {timeout} s; its stderr ends:\n"
                                 f"{err[-6000:]}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


def wait_or_dump(proc: subprocess.Popen[str], timeout: float, output: Callable[[], str],
                 what: str = "the job") -> int:
    """``proc``'s exit code; when it has not exited ``timeout`` seconds on: its stacks (a
    ``samza-dsl`` process prints its threads and its loop's tasks on SIGUSR1), then SIGKILL, and
    an AssertionError with its ``output()``, the stacks last."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(2)
        proc.kill()
        proc.wait()
        raise AssertionError(f"{what} had not exited {timeout} s on; its output, its stacks "
                             f"last:\n{output()[-12_000:]}") from None
