"""The cycle collector while messages flow: a job's long-lived objects (modules, operators,
stores) are frozen out of its scans, and its first generation collects less often, so that
messages, which die young, cost no full scans of what lives long."""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

__all__ = ["GC_THRESHOLD0", "messages_die_young", "dying_young"]

GC_THRESHOLD0 = 20_000

T = TypeVar("T")


@contextlib.contextmanager
def messages_die_young() -> Iterator[None]:
    """While it lasts, the objects that exist already are frozen out of the cycle collector's
    scans and its first generation collects after ``GC_THRESHOLD0`` allocations: a job's
    long-lived objects need no scans, and its messages die young."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(threshold[0], GC_THRESHOLD0), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def dying_young(fn: Callable[..., Iterator[T]]) -> Callable[..., Iterator[T]]:
    """A generator function (a Spark task's body) run under ``messages_die_young``."""
    @functools.wraps(fn)
    def run(*args: Any) -> Iterator[T]:
        with messages_die_young():
            yield from fn(*args)
    return run
