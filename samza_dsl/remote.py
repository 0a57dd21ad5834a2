"""Settings of a remote table (``app.remote_table``): its retry policy and its cache.

As Samza's ``TableRetryPolicy`` and ``CachingTable``, written as plain immutable data: the runtime
(``runtime.state.remote``) reads them.

>>> RetryPolicy(max_attempts=4, backoff=0.01).delays()
[0.01, 0.02, 0.04]
>>> CacheSpec(ttl=60, size=10_000)
CacheSpec(ttl=60.0, size=10000, write='through')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

__all__ = ["RetryPolicy", "CacheSpec", "RemoteCallError"]


def _seconds(value: float | timedelta, what: str) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{what} must be a timedelta or seconds >= 0, got {value!r}")
    return float(value)


class RemoteCallError(Exception):
    """What a table function raises for a failed call when it has nothing more specific: the
    default ``RetryPolicy`` retries it (and ``OSError``, ``TimeoutError``).

    Args:
        message: What failed.
        status: An HTTP status or a service's error code, if any.

    Example:
        >>> error = RemoteCallError("profile service: 503 Service Unavailable", status=503)
        >>> error.status, RetryPolicy().retries(error)  # retried by default
        (503, True)
        >>> RetryPolicy(retry_on=(), retry_if=lambda e: e.status >= 500).retries(error)
        True
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class RetryPolicy:
    """How a remote table retries a failed call: exponential backoff with jitter.

    Attempt ``n`` (from 1) that fails with an error the policy names (``retry_on``, or
    ``retry_if(error)`` true) is followed, after ``min(max_backoff, backoff * multiplier **
    (n - 1))`` seconds less up to ``jitter`` of it (at random), by attempt ``n + 1``, up to
    ``max_attempts`` attempts in all; then the call fails, and with it the task, with an error
    naming the table, the key and the attempts. Other errors fail at once.

    Args:
        max_attempts: Attempts in all, >= 1 (1: no retry).
        backoff: The first delay (seconds or ``timedelta``).
        max_backoff: The largest delay.
        multiplier: How much each delay grows, >= 1.
        jitter: The fraction of a delay taken off at random, in [0, 1]: calls failing together
            do not retry together.
        retry_on: The exception classes that are retried.
        retry_if: A predicate on the exception, e.g. ``lambda e: e.status >= 500``; with it an
            error is retried when it is one of ``retry_on`` or the predicate is true.

    Example:
        >>> p = RetryPolicy(max_attempts=5, backoff=0.1, max_backoff=0.3, jitter=0.0)
        >>> p.delays()
        [0.1, 0.2, 0.3, 0.3]
        >>> p.retries(ConnectionResetError()), p.retries(KeyError("k"))
        (True, False)
        >>> p.delay(2), RetryPolicy(backoff=1.0, jitter=0.5).delay(1, rnd=0.5)  # jitter took 25%
        (0.2, 0.75)
        >>> p.describe()["retry_on"]
        ['RemoteCallError', 'OSError', 'TimeoutError']
    """

    max_attempts: int = 3
    backoff: float | timedelta = 0.05
    max_backoff: float | timedelta = 2.0
    multiplier: float = 2.0
    jitter: float = 0.5
    retry_on: tuple[type[BaseException], ...] = (RemoteCallError, OSError, TimeoutError)
    retry_if: Callable[[BaseException], bool] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) \
                or self.max_attempts < 1:
            raise ValueError(f"RetryPolicy max_attempts must be an int >= 1, got "
                             f"{self.max_attempts!r}")
        object.__setattr__(self, "backoff", _seconds(self.backoff, "RetryPolicy backoff"))
        object.__setattr__(self, "max_backoff",
                           _seconds(self.max_backoff, "RetryPolicy max_backoff"))
        if not isinstance(self.multiplier, int | float) or self.multiplier < 1:
            raise ValueError(f"RetryPolicy multiplier must be >= 1, got {self.multiplier!r}")
        if not isinstance(self.jitter, int | float) or not 0 <= self.jitter <= 1:
            raise ValueError(f"RetryPolicy jitter must be in [0, 1], got {self.jitter!r}")
        retry_on = self.retry_on
        if isinstance(retry_on, type):
            retry_on = (retry_on,)
        if not isinstance(retry_on, tuple) or not all(
                isinstance(t, type) and issubclass(t, BaseException) for t in retry_on):
            raise TypeError(f"RetryPolicy retry_on must be a tuple of exception classes, got "
                            f"{self.retry_on!r}")
        object.__setattr__(self, "retry_on", retry_on)
        if self.retry_if is not None and not callable(self.retry_if):
            raise TypeError(f"RetryPolicy retry_if must be callable, got {self.retry_if!r}")

    def retries(self, error: BaseException) -> bool:
        """Whether ``error`` is one the policy retries."""
        if isinstance(error, self.retry_on):
            return True
        return self.retry_if is not None and bool(self.retry_if(error))

    def delay(self, attempt: int, rnd: float = 0.0) -> float:
        """The wait after failed attempt ``attempt`` (from 1), ``rnd`` in [0, 1) taking the
        jitter off."""
        base = min(float(self.max_backoff),  # type: ignore[arg-type]
                   float(self.backoff) * self.multiplier ** (attempt - 1))  # type: ignore[arg-type]
        return base * (1.0 - self.jitter * rnd)

    def delays(self) -> list[float]:
        """The waits between attempts without jitter (``max_attempts - 1`` of them)."""
        return [round(self.delay(n), 9) for n in range(1, self.max_attempts)]

    def describe(self) -> dict[str, Any]:
        return {"max_attempts": self.max_attempts, "backoff_s": self.backoff,
                "max_backoff_s": self.max_backoff, "multiplier": self.multiplier,
                "jitter": self.jitter, "retry_on": [t.__name__ for t in self.retry_on],
                "retry_if": self.retry_if is not None}


@dataclass(frozen=True)
class CacheSpec:
    """A remote table's cache, per task, as Samza's ``CachingTable``.

    Reads go through it: a hit (younger than ``ttl``) needs no remote call, and completes
    without waiting; a miss reads the remote table and keeps what it read (a key the remote
    table has no value for is not kept). Writes go to the remote table first; then
    ``write="through"`` puts the value in the cache as well, ``write="around"`` drops the key
    from it, so the next read fetches it. A delete drops the key. At most ``size`` keys are
    kept; the least recently used go first.

    Args:
        ttl: How long an entry stays fresh (seconds or ``timedelta``), > 0.
        size: The most keys kept, >= 1.
        write: ``"through"`` or ``"around"``.

    Example:
        >>> from datetime import timedelta
        >>> cache = CacheSpec(ttl=timedelta(minutes=5), size=1000, write="around")
        >>> cache.ttl, cache.ttl_seconds
        (300.0, 300.0)
        >>> cache.describe()  # as the plan shows it
        {'ttl_s': 300.0, 'size': 1000, 'write': 'around'}
    """

    ttl: float | timedelta
    size: int
    write: str = "through"

    def __post_init__(self) -> None:
        ttl = _seconds(self.ttl, "CacheSpec ttl")
        if ttl <= 0:
            raise ValueError(f"CacheSpec ttl must be > 0, got {self.ttl!r}")
        object.__setattr__(self, "ttl", ttl)
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"CacheSpec size must be an int >= 1, got {self.size!r}")
        if self.write not in ("through", "around"):
            raise ValueError(f"CacheSpec write must be 'through' or 'around', got "
                             f"{self.write!r}")

    @property
    def ttl_seconds(self) -> float:
        """``ttl`` in seconds."""
        return float(cast(float, self.ttl))

    def describe(self) -> dict[str, Any]:
        return {"ttl_s": self.ttl, "size": self.size, "write": self.write}
