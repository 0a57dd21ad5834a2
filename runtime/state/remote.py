"""Remote tables (``app.remote_table``): the per-task client of a table in a remote service.

What a call goes through, in order (as Samza's ``CachingTable`` over ``AsyncRetriableTable``
over ``AsyncRateLimitedTable`` over ``AsyncRemoteTable``):

1. the task's cache (``CacheSpec``): a fresh hit answers a read at once, with no call and no
   wait, so a ``join_table`` hit completes inline like a local lookup;
2. batching: with ``read_all``/``write_all``, the reads (writes) made in one turn of the event
   loop go out as one call of up to ``batch_size`` keys. A batch of reads goes out as soon as it
   holds an ``OVERLAP``-th of ``task.max.concurrency`` keys (never more than ``batch_size``):
   several batches are then on their way at once, and the task handles one batch's answers
   while the others wait on the service, instead of every message waiting for one batch to be
   answered, handled and refilled (``get_all`` still sends ``batch_size`` keys a call);
3. the rate limit: a token bucket per table, shared by the container's tasks, charged one token
   per key; a container's rate is the job's ``rate_limit`` times its share of the job's tasks;
4. the task's slots: at most ``task.max.concurrency`` calls of a task are in progress at once
   (a message that fans out, e.g. ``get_all`` without ``read_all``, waits for slots);
5. retries (``RetryPolicy``): an error the policy names is retried after an exponential
   backoff with jitter, up to ``max_attempts``; then, or at once for any other error, the call
   raises ``RemoteTableError`` naming the table, the call, the key(s) and the attempts.

Writes of one key from one task reach the service in the order the task made them. A write
that succeeded updates the cache (``write="through"``) or drops the key from it
(``"around"``); a delete drops it.

Calls run on the task's event loop as part of the message that made them (docs/semantics.md
rule 19): ``join_table`` and ``send_to`` return them to the runtime as the message's pending
work; a call from a user function (``ctx.table(name).get(...)``) is started at once and handed
to ``track``, which the task ties to the message being processed, so the message stays in flight
until the call has completed even when the function does not await it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from typing import Any

from runtime.engine.handout import Handout
from samza_dsl.errors import AccessRefused, RemoteTableError
from samza_dsl.kv import KV
from samza_dsl.spec import RemoteTableSpec

__all__ = ["TokenBucket", "RemoteTableClient", "RemoteCall", "MISS", "container_limiter",
           "close_table_functions", "OVERLAP", "CallTracker", "RemoteCallFailure", "settle_calls"]

#: how many batches of reads are on their way at once, at least, when the task has
#: ``task.max.concurrency`` messages in flight: a batch goes out once it holds this fraction of
#: them
OVERLAP = 8


class _Miss:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISS"


#: what ``RemoteTableClient.cached`` returns when the cache cannot answer
MISS: Any = _Miss()


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up. ``reserve(n)`` takes ``n`` tokens
    at once, going into debt when there are too few, and returns how long the caller must wait
    for its turn: callers are served in the order they reserved, and over any span ``T`` at most
    ``burst + rate * T`` tokens are handed out.

    >>> now = [0.0]
    >>> b = TokenBucket(10.0, burst=1.0, clock=lambda: now[0])
    >>> b.reserve(1), b.reserve(1), b.reserve(1)
    (0.0, 0.1, 0.2)
    >>> now[0] = 1.0
    >>> b.reserve(1)
    0.0
    """

    __slots__ = ("rate", "burst", "_tokens", "_last", "_clock")

    def __init__(self, rate: float, *, burst: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not rate > 0:
            raise ValueError(f"a token bucket needs a rate > 0, got {rate!r}")
        self.rate = float(rate)
        #: a twentieth of a second's worth by default: short bursts pass, the rate holds
        self.burst = float(burst) if burst is not None else max(1.0, self.rate / 20.0)
        self._tokens = self.burst
        self._clock = clock
        self._last = clock()

    def reserve(self, n: float = 1.0) -> float:
        now = self._clock()
        tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now
        tokens -= n
        self._tokens = tokens
        return 0.0 if tokens >= 0 else round(-tokens / self.rate, 9)

    async def acquire(self, n: float = 1.0) -> None:
        wait = self.reserve(n)
        if wait > 0:
            await asyncio.sleep(wait)


def container_limiter(shared: dict[str, Any], spec: RemoteTableSpec,
                      share: float) -> TokenBucket | None:
    """The token bucket of ``spec``'s table in a container (``shared`` is the container's, kept
    in its ``TaskEnv``): made by the first task that opens the table, used by all its tasks."""
    if spec.rate_limit is None:
        return None
    key = f"remote-table-limiter:{spec.table_id}"
    bucket: TokenBucket | None = shared.get(key)
    if bucket is None:
        bucket = shared[key] = TokenBucket(spec.rate_limit * max(share, 1e-9))
    return bucket


class RemoteCall:
    """A call a user function made on a remote table: started at once, awaited or not. The task
    waits for it before its message completes; it fails the message only if the function did
    not await it (a function that awaits it sees the error itself)."""

    __slots__ = ("task", "awaited", "table", "what", "key")

    def __init__(self, task: asyncio.Task[Any], table: str | None = None, what: str | None = None,
                 key: Any = None) -> None:
        self.task = task
        self.awaited = False
        #: the table, the call (``get``, ``put``...) and its key or keys: what an error about
        #: a message that waits for the call names
        self.table = table
        self.what = what
        self.key = key

    def __await__(self) -> Generator[Any, None, Any]:
        self.awaited = True
        return self.task.__await__()

    def failure(self) -> BaseException | None:
        """The error to fail the message with, once done: one nobody awaited."""
        if self.awaited or self.task.cancelled():
            return None
        return self.task.exception()


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class _Batch:
    """Keys waiting to go out in one ``read_all``/``write_all`` call."""

    __slots__ = ("items", "futures")

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.futures: list[asyncio.Future[Any]] = []


class RemoteTableClient:
    """A task's handle on a remote table (see the module docstring). ``get``, ``put``,
    ``delete``, ``get_all`` and ``put_all`` are what ``ctx.table(name)`` offers user functions;
    ``cached``, ``read`` and ``write`` are what ``join_table`` and ``send_to`` use."""

    #: operators tell a remote table from a local store by this
    remote = True
    #: each write is a call of its own
    batched_writes = False
    #: keys are the service's to check
    check_key = None
    MISS = MISS

    def __init__(self, spec: RemoteTableSpec, *, task_name: str,
                 limiter: TokenBucket | None, track: Callable[[RemoteCall], None],
                 slots: asyncio.Semaphore | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 concurrency: int | None = None) -> None:
        self.spec = spec
        #: the keys at which a batch of reads goes out
        self._fill = spec.batch_size if concurrency is None else \
            min(spec.batch_size, max(1, concurrency // OVERLAP))
        #: the task's calls in progress, at most ``task.max.concurrency`` (shared by its tables)
        self._slots = slots
        self.name = spec.table_id
        self.task_name = task_name
        self.limiter = limiter
        self._track = track
        self._clock = clock
        self._policy = spec.retry
        cache = spec.cache
        self._ttl = cache.ttl_seconds if cache is not None else 0.0
        self._size = cache.size if cache is not None else 0
        self._write_through = cache is not None and cache.write == "through"
        #: key -> (value, expires at): least recently used first
        self._cache: OrderedDict[Any, tuple[Any, float]] | None = \
            OrderedDict() if cache is not None else None
        #: per key, the write in progress the next write of the key waits for
        self._writing: dict[Any, asyncio.Future[None]] = {}
        self._reads: _Batch | None = None
        self._writes: _Batch | None = None
        #: calls made (each attempt, a batch once), retries, and the cache's hits and misses:
        #: the store metrics ``remote-calls``, ``remote-retries``, ``remote-cache-hits``...
        self.counts = {"calls": 0, "retries": 0, "failures": 0, "cache-hits": 0,
                       "cache-misses": 0}

    def __repr__(self) -> str:
        return f"RemoteTableClient({self.name!r}, task={self.task_name!r})"

    # -- the cache --------------------------------------------------------------------------------

    def cached(self, key: Any) -> Any:
        """The cached value of ``key`` if fresh, else ``MISS`` (always ``MISS`` with no cache)."""
        cache = self._cache
        if cache is None:
            return MISS
        entry = cache.get(key)
        if entry is None or entry[1] < self._clock():
            if entry is not None:
                del cache[key]
            self.counts["cache-misses"] += 1
            return MISS
        cache.move_to_end(key)
        self.counts["cache-hits"] += 1
        return entry[0]

    def _remember(self, key: Any, value: Any) -> None:
        cache = self._cache
        if cache is None:
            return
        if value is None:
            cache.pop(key, None)
            return
        cache[key] = (value, self._clock() + self._ttl)
        cache.move_to_end(key)
        if len(cache) > self._size:
            cache.popitem(last=False)

    # -- calls with rate limit and retries --------------------------------------------------------

    async def _call(self, what: str, keys: Any, credits: int,
                    fn: Callable[[], Awaitable[Any]]) -> Any:
        policy = self._policy
        attempt = 0
        while True:
            attempt += 1
            if self.limiter is not None:
                await self.limiter.acquire(credits)
            self.counts["calls"] += 1
            try:
                if self._slots is None:
                    return await fn()
                async with self._slots:
                    return await fn()
            except asyncio.CancelledError:
                raise
            except (AccessRefused, RemoteTableError):  # final, and named by the function
                self.counts["failures"] += 1
                raise
            except Exception as exc:
                retried = policy is not None and policy.retries(exc)
                if not retried or attempt >= policy.max_attempts:  # type: ignore[union-attr]
                    self.counts["failures"] += 1
                    raise self._error(what, keys, attempt, exc, retried) from exc
                self.counts["retries"] += 1
                await asyncio.sleep(policy.delay(attempt, random.random()))  # type: ignore[union-attr]

    def _error(self, what: str, keys: Any, attempts: int, exc: BaseException,
               retried: bool) -> RemoteTableError:
        if isinstance(keys, list):
            subject = f"keys {_short(keys)} ({len(keys)} keys)"
            key = keys
        else:
            subject = f"key {_short(keys)}"
            key = keys
        if retried:
            why = f"after {attempts} attempts (the retry policy's max_attempts)"
            advice = ("the service keeps failing: check it, or allow more attempts or a longer "
                      "backoff in RetryPolicy")
        elif self._policy is None:
            why = "after 1 attempt (the table has no retry policy)"
            advice = ("check the service, or give app.remote_table(..., retry=RetryPolicy(...)) "
                      "if its errors are transient")
        else:
            why = (f"after {attempts} attempt{'s' if attempts != 1 else ''}: "
                   f"{type(exc).__name__} is not an error the table's retry policy retries")
            advice = ("fix the table function, or name the error in RetryPolicy(retry_on=...) "
                      "if it is transient")
        last = str(exc).rstrip(".")
        return RemoteTableError(
            f"remote table {self.name!r} in task {self.task_name!r}: {what} of {subject} failed "
            f"{why}; last error {type(exc).__name__}: {last}. {advice[0].upper()}{advice[1:]}",
            table=self.name, call=what, key=key, attempts=attempts)

    # -- reads ------------------------------------------------------------------------------------

    async def read(self, key: Any) -> Any:
        """The value of ``key`` from the cache or the service (None: none)."""
        value = self.cached(key) if self._cache is not None else MISS
        if value is not MISS:
            return value
        return await self.fetch(key)

    def fetch(self, key: Any) -> Awaitable[Any]:
        """An awaitable of the value of ``key`` from the service (None: none), kept in the
        cache: what a read does once the cache has missed. With ``read_all`` it is the key's
        future in the batch going out (which fills the cache for all its keys)."""
        if self.spec.read_all is not None:
            return self._batched(key, reading=True)
        return self._fetch_one(key)

    async def _fetch_one(self, key: Any) -> Any:
        read = self.spec.read
        if read is None:
            raise RemoteTableError(f"remote table {self.name!r} has no read function: give "
                                   f"app.remote_table(..., read=...)", table=self.name,
                                   call="read", key=key)
        value = await self._call("read", key, 1, lambda: read(key))
        self._remember(key, value)
        return value

    async def read_many(self, keys: Iterable[Any]) -> dict[Any, Any]:
        keys = list(dict.fromkeys(keys))
        out: dict[Any, Any] = {}
        missing = []
        for k in keys:
            v = self.cached(k) if self._cache is not None else MISS
            if v is MISS:
                missing.append(k)
            elif v is not None:
                out[k] = v
        read_all = self.spec.read_all
        if read_all is not None:
            size = self.spec.batch_size
            for i in range(0, len(missing), size):
                chunk = missing[i:i + size]
                got = await self._call("read_all", chunk, len(chunk),
                                       lambda c=chunk: read_all(c))  # type: ignore[misc]
                got = self._checked_mapping(got, chunk)
                for k in chunk:
                    v = got.get(k)
                    self._remember(k, v)
                    if v is not None:
                        out[k] = v
        elif missing:
            values = await asyncio.gather(*(self.read(k) for k in missing))
            for k, v in zip(missing, values, strict=True):
                if v is not None:
                    out[k] = v
        return out

    def _checked_mapping(self, got: Any, keys: list[Any]) -> Mapping[Any, Any]:
        if got is None:
            return {}
        if not isinstance(got, Mapping):
            raise RemoteTableError(
                f"remote table {self.name!r}: read_all of {len(keys)} keys returned a "
                f"{type(got).__name__}, not a mapping of key to value: return {{key: value}} "
                f"for the keys the service has", table=self.name, call="read_all", key=keys)
        return got

    # -- batching ---------------------------------------------------------------------------------

    def _batched(self, item: Any, *, reading: bool) -> asyncio.Future[Any]:
        """A future of ``item``'s result, in the batch going out at the end of this turn of the
        loop, or at once when it is full (``_fill`` keys)."""
        loop = asyncio.get_running_loop()
        batch = self._reads if reading else self._writes
        if batch is None:
            batch = _Batch()
            if reading:
                self._reads = batch
            else:
                self._writes = batch
            loop.call_soon(self._flush, batch, reading)
        fut: asyncio.Future[Any] = loop.create_future()
        batch.items.append(item)
        batch.futures.append(fut)
        if len(batch.items) >= (self._fill if reading else self.spec.batch_size):
            self._flush(batch, reading)
        return fut

    def _flush(self, batch: _Batch, reading: bool) -> None:
        if reading:
            if self._reads is not batch:
                return  # already sent, when it filled up
            self._reads = None
        else:
            if self._writes is not batch:
                return
            self._writes = None
        asyncio.get_running_loop().create_task(self._send(batch, reading))

    async def _send(self, batch: _Batch, reading: bool) -> None:
        items, futures = batch.items, batch.futures
        try:
            if reading:
                keys = list(dict.fromkeys(items))
                read_all = self.spec.read_all
                got = self._checked_mapping(
                    await self._call("read_all", keys, len(keys),
                                     lambda: read_all(keys)),  # type: ignore[misc]
                    keys)
                results = [got.get(k) for k in items]
                if self._cache is not None:
                    for k in keys:
                        self._remember(k, got.get(k))
            else:
                write_all = self.spec.write_all
                await self._call("write_all", [kv.key for kv in items], len(items),
                                 lambda: write_all(items))  # type: ignore[misc]
                results = [None] * len(items)
        except BaseException as exc:
            for fut in futures:
                if not fut.done():
                    fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for fut, result in zip(futures, results, strict=True):
            if not fut.done():
                fut.set_result(result)

    # -- writes -----------------------------------------------------------------------------------

    async def write(self, key: Any, value: Any) -> None:
        """Write ``value`` (None: delete) for ``key``, after any earlier write of the key from
        this task; then update the cache."""
        previous = self._writing.get(key)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._writing[key] = mine
        try:
            if previous is not None:
                await previous
            if self.spec.write_all is not None:
                await self._batched(KV(key, value), reading=False)
            else:
                write = self.spec.write
                if write is None:
                    raise RemoteTableError(f"remote table {self.name!r} has no write function: "
                                           f"give app.remote_table(..., write=...)",
                                           table=self.name, call="write", key=key)
                await self._call("delete" if value is None else "write", key, 1,
                                 lambda: write(key, value))
            if self._cache is not None:
                self._remember(key, value if self._write_through else None)
        finally:
            mine.set_result(None)
            if self._writing.get(key) is mine:
                del self._writing[key]

    async def write_many(self, entries: Iterable[Any]) -> None:
        pairs = [(k, v) for k, v in entries]  # KV(key, value) or (key, value)
        await asyncio.gather(*(self.write(k, v) for k, v in pairs))

    # -- what user functions call (ctx.table) ----------------------------------------------------

    def _start(self, coro: Awaitable[Any], what: str, key: Any = None) -> RemoteCall:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            close = getattr(coro, "close", None)  # foreign: a coroutine (or any awaitable)
            if close is not None:
                close()
            raise RuntimeError(
                f"remote table {self.name!r}: {what} was called outside the task's event loop "
                f"(a thread of job.container.thread.pool.size?); call it from a function the "
                f"task runs on its loop: an async_flat_map, an async sink, or any operator's "
                f"function without a thread pool") from None
        call = RemoteCall(loop.create_task(coro), self.name, what, key)  # type: ignore[arg-type]
        self._track(call)
        return call

    def get(self, key: Any) -> RemoteCall:
        """``await table.get(key)``: the value of ``key``, or None."""
        return self._start(self.read(key), "get", key)

    def get_all(self, keys: Iterable[Any]) -> RemoteCall:
        """``await table.get_all(keys)``: ``{key: value}`` for the keys that have a value."""
        keys = list(keys)
        return self._start(self.read_many(keys), "get_all", keys)

    def put(self, key: Any, value: Any) -> RemoteCall:
        """``await table.put(key, value)``; a None value deletes."""
        return self._start(self.write(key, value), "put", key)

    def put_all(self, entries: Iterable[KV[Any, Any] | tuple[Any, Any]]) -> RemoteCall:
        """``await table.put_all([KV(key, value), ...])``; None values delete."""
        pairs = list(entries)
        return self._start(self.write_many(pairs), "put_all", [k for k, _ in pairs])

    def delete(self, key: Any) -> RemoteCall:
        """``await table.delete(key)``."""
        return self._start(self.write(key, None), "delete", key)


async def close_table_functions(specs: Iterable[RemoteTableSpec]) -> None:
    """When a container stops: ``await aclose()`` of each object whose methods are a remote
    table's functions (or of a function object that has one), once each, on the container's
    loop: a client session opened on that loop is closed on it."""
    seen: set[int] = set()
    for spec in specs:
        for fn in (spec.read, spec.write, spec.read_all, spec.write_all):
            owner = getattr(fn, "__self__", fn)  # foreign: a user's function
            aclose = getattr(owner, "aclose", None)  # foreign: a user's object
            if fn is None or id(owner) in seen or not callable(aclose):
                continue
            seen.add(id(owner))
            result = aclose()
            if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                await result


class RemoteCallFailure(Exception):
    """A remote-table call a user function made and did not await failed."""

    def __init__(self, table: str, cause: BaseException) -> None:
        super().__init__(f"remote table {table!r}: {cause}")
        self.table = table
        self.cause = cause


async def settle_calls(calls: list[RemoteCall]) -> None:
    """Wait for remote-table calls; one that failed and that nobody awaited fails the message
    (one that was awaited failed its function already, or was handled there)."""
    await asyncio.wait([c.task for c in calls])
    for c in calls:
        exc = c.failure()
        if exc is not None:
            raise RemoteCallFailure(getattr(exc, "table", "?"), exc)  # foreign: any exception


class CallTracker:
    """The remote-table calls a task's user functions made and did not await (rule 19), tied
    to the message they were made for: the one being handed out (``handing_out``), the one whose
    asyncio task is running (``current()`` gives its handout record, or ``control`` while
    outputs of a tick, a watermark or end-of-stream run), or none (a window tick, ``init``):
    those the next commit waits for (``settle_loose``)."""

    __slots__ = ("current", "control", "handing_out", "made", "by_record", "loose")

    def __init__(self, current: Callable[[], Any], control: Any) -> None:
        self.current = current
        self.control = control
        self.handing_out = False
        #: calls made while the message being handed out ran
        self.made: list[RemoteCall] = []
        #: calls of messages completing on their own asyncio task, by id of the handout record
        self.by_record: dict[int, list[RemoteCall]] = {}
        self.loose: list[RemoteCall] = []

    def track(self, call: RemoteCall) -> None:
        """Tie ``call`` to the message it was made for (``RemoteTableClient``'s ``track``)."""
        rec = self.current()
        if rec is None:
            if self.handing_out:
                self.made.append(call)
                return
        elif rec is not self.control and not rec.done:
            self.by_record.setdefault(id(rec), []).append(call)
            return
        # a window tick's output, or an asyncio task a function left running after its
        # message completed: the next commit waits for it
        self.loose.append(call)

    def take(self, pend: list[Awaitable[None]] | None) -> list[Awaitable[None]]:
        """``pend`` with the calls the message being handed out made."""
        calls, self.made = self.made, []
        out = pend if pend is not None else []
        out.append(settle_calls(calls))
        return out

    async def settle_record(self, rec: Handout) -> None:
        """Wait for the calls made for the message of handout record ``rec``."""
        by_record = self.by_record
        calls = by_record.pop(id(rec), None)
        while calls:  # calls the message's functions made and did not await
            await settle_calls(calls)
            calls = by_record.pop(id(rec), None)

    async def settle_loose(self) -> None:
        """Wait for the calls made outside any message (before a commit)."""
        while self.loose:
            calls, self.loose = self.loose, []
            await settle_calls(calls)

    def of(self, rec: Handout) -> list[RemoteCall]:
        """The calls made for the message of handout record ``rec`` not yet settled."""
        return self.by_record.get(id(rec), [])

    def cancel(self) -> None:
        """Cancel the calls that have not completed (the task stops without them)."""
        for call in [*self.made, *self.loose,
                     *(c for calls in self.by_record.values() for c in calls)]:
            call.task.cancel()
