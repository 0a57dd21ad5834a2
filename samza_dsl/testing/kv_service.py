"""A key-value service over HTTP on 127.0.0.1, and its client: a real remote table for tests,
examples and benchmarks of ``app.remote_table``.

``KVService`` runs an aiohttp server in a thread of its own (its own event loop), so a job's
loop calls it over real sockets. It can be made slow (``latency``, ``slow(key, s)``) and made to
fail (``fail(key, times, status)``), and it logs every request with its time.

``HttpKV(url)`` has the table functions: ``read``, ``write``, ``read_all``, ``write_all`` (one
aiohttp session per event loop; ``aclose()`` closes them, as the runtime does when a container
stops). A 5xx answer or a failed connection raises ``RemoteCallError`` (which the default
``RetryPolicy`` retries); any other unexpected status raises ``ValueError`` (not retried).

Example:
    >>> from samza_dsl import KV, StreamApplication
    >>> from samza_dsl.systems import MemorySystem
    >>> from samza_dsl.testing import TestRunner
    >>> with KVService({"u1": "Ada"}) as service:
    ...     kv = HttpKV(service.url)
    ...     app, mem = StreamApplication("demo"), MemorySystem()
    ...     names = app.remote_table("names", read=kv.read, write=kv.write)
    ...     app.input(mem.input("ids")).map(lambda i: KV(i, None)).join_table(
    ...         names, combine=lambda m, r: r and r.value).send_to(app.output(mem.output("out")))
    ...     TestRunner(app).add_input("ids", ["u1", "u2"]).run().messages("out")
    ['Ada']
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import threading
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any
from urllib.parse import quote

import msgspec
from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

from ..kv import KV
from ..remote import RemoteCallError

__all__ = ["KVService", "HttpKV"]

_encode = msgspec.json.encode
_decode = msgspec.json.decode
_JSON = {"Content-Type": "application/json"}


def _json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=_encode(body), status=status, content_type="application/json")


def _low_descriptors(room: int = 256) -> bool:
    """Whether the descriptors this process opens next are numbered well below select()'s
    FD_SETSIZE (1024), with ``room`` to spare for a service's connections."""
    probe = os.open(os.devnull, os.O_RDONLY)
    os.close(probe)
    return probe + room < 1024


class KVService:
    """See the module docstring.

    Args:
        data: The service's initial entries (str keys, JSON values); kept in ``data``.
        latency: Seconds every request takes before it is answered.

    Attributes:
        data: The entries, as the service holds them.
        log: ``(time.monotonic(), method, keys)`` of every request, as it arrived.
        max_in_flight: The most requests the service was answering at once.
    """

    def __init__(self, data: Mapping[str, Any] | None = None, *, latency: float = 0.0) -> None:
        self.data: dict[str, Any] = dict(data or {})
        self.latency = latency
        self.log: list[tuple[float, str, tuple[str, ...]]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._fails: dict[str, list[int]] = {}
        self._slow: dict[str, float] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.url = ""

    # -- faults -----------------------------------------------------------------------------------

    def fail(self, key: str, times: int = 1, status: int = 500) -> None:
        """The next ``times`` requests that touch ``key`` are answered ``status``."""
        with self._lock:
            self._fails.setdefault(key, []).extend([status] * times)

    def slow(self, key: str, seconds: float) -> None:
        """Requests that touch ``key`` take ``seconds`` more."""
        self._slow[key] = seconds

    def _fault(self, keys: Iterable[str]) -> int | None:
        with self._lock:
            for k in keys:
                pending = self._fails.get(k)
                if pending:
                    return pending.pop(0)
        return None

    # -- the server -------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.method
        key = request.match_info.get("key")
        body: Any = _decode(await request.read()) if request.can_read_body else None
        if key is not None:
            keys: tuple[str, ...] = (key,)
        elif request.path.endswith("/get"):
            keys = tuple(str(k) for k in body["keys"])
        else:
            keys = tuple(str(e[0]) for e in body["entries"])
        self.log.append((time.monotonic(), method, keys))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            delay = self.latency + max((self._slow.get(k, 0.0) for k in keys), default=0.0)
            if delay > 0:  # on a select() loop: microsecond timers (_run)
                await asyncio.sleep(delay)
            status = self._fault(keys)
            if status is not None:
                return _json_response({"error": f"injected {status}"}, status=status)
            data = self.data
            if key is not None:
                if method == "GET":
                    if key not in data:
                        return _json_response({"error": "no such key"}, status=404)
                    return _json_response({"value": data[key]})
                if method == "PUT":
                    data[key] = body["value"]
                else:
                    data.pop(key, None)
                return web.Response(status=204)
            if request.path.endswith("/get"):
                return _json_response(
                    {"entries": [[k, data[str(k)]] for k in body["keys"] if str(k) in data]})
            for k, v in body["entries"]:
                if v is None:
                    data.pop(str(k), None)
                else:
                    data[str(k)] = v
            return web.Response(status=204)
        finally:
            self.in_flight -= 1

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/kv/{key}", self._handle)
        app.router.add_post("/batch/get", self._handle)
        app.router.add_post("/batch/put", self._handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)  # slow requests: cut
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        self._stop = asyncio.Event()
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def _run(self) -> None:
        # select() takes microsecond timeouts, where epoll rounds each up to a whole
        # millisecond: a 5 ms latency stays 5 ms. But select() takes no descriptor numbered
        # FD_SETSIZE (1024) or more: in a process that holds that many, the default selector.
        loop = self._loop = asyncio.SelectorEventLoop(
            selectors.SelectSelector() if _low_descriptors() else selectors.DefaultSelector())
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # startup failed: start() reports it
            self._error = exc
            self._ready.set()
        finally:
            loop.close()

    def start(self) -> KVService:
        """Start serving on a free port of 127.0.0.1 (``url``)."""
        self._thread = threading.Thread(target=self._run, name="kv-service", daemon=True)
        self._thread.start()
        if not self._ready.wait(10) or self._error is not None:
            raise RuntimeError(f"the key-value service did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> KVService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class HttpKV:
    """The table functions of a ``KVService`` at ``url`` (see the module docstring).

    Args:
        url: The service's base URL.
        timeout: Seconds before a request gives up (``asyncio.TimeoutError``, which the default
            ``RetryPolicy`` retries).
    """

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._sessions: dict[asyncio.AbstractEventLoop, ClientSession] = {}

    def _session(self) -> ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            for old in [lp for lp in self._sessions if lp.is_closed()]:
                del self._sessions[old]  # a finished run's loop
            session = self._sessions[loop] = ClientSession(
                connector=TCPConnector(limit=0), timeout=ClientTimeout(total=self.timeout))
        return session

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status >= 500:
            raise RemoteCallError(f"{what}: the service answered {status}", status=status)
        if status >= 300 and status != 404:
            raise ValueError(f"{what}: the service answered {status}")

    def _key_url(self, key: Any) -> str:
        return f"{self.url}/kv/{quote(str(key), safe='')}"

    async def _read(self, key: Any) -> Any:
        """The value of ``key``, or None."""
        async with self._session().get(self._key_url(key)) as resp:
            self._check(resp.status, f"GET {key!r}")
            if resp.status == 404:
                return None
            return _decode(await resp.read())["value"]

    async def _write(self, key: Any, value: Any) -> None:
        """Put ``value`` for ``key``; None deletes it."""
        session = self._session()
        if value is None:
            async with session.delete(self._key_url(key)) as resp:
                self._check(resp.status, f"DELETE {key!r}")
        else:
            async with session.put(self._key_url(key), data=_encode({"value": value}),
                                   headers=_JSON) as resp:
                self._check(resp.status, f"PUT {key!r}")

    async def _read_all(self, keys: list[Any]) -> dict[Any, Any]:
        """``{key: value}`` for the keys the service has."""
        async with self._session().post(f"{self.url}/batch/get", data=_encode({"keys": keys}),
                                        headers=_JSON) as resp:
            self._check(resp.status, f"batch GET of {len(keys)} keys")
            entries = _decode(await resp.read())["entries"]
        by_text = {str(k): k for k in keys}
        return {by_text[str(k)]: v for k, v in entries}

    async def _write_all(self, entries: list[KV[Any, Any]]) -> None:
        """Put each ``KV(key, value)``; a None value deletes its key."""
        body = {"entries": [[k, v] for k, v in entries]}
        async with self._session().post(f"{self.url}/batch/put", data=_encode(body),
                                        headers=_JSON) as resp:
            self._check(resp.status, f"batch PUT of {len(entries)} keys")

    async def read(self, key: Any) -> Any:
        """The value of ``key``, or None."""
        async with _connection_errors("GET", key):
            return await self._read(key)

    async def write(self, key: Any, value: Any) -> None:
        """Put ``value`` for ``key``; None deletes it."""
        async with _connection_errors("PUT", key):
            await self._write(key, value)

    async def read_all(self, keys: list[Any]) -> dict[Any, Any]:
        """``{key: value}`` for the keys the service has."""
        async with _connection_errors("batch GET", keys):
            return await self._read_all(keys)

    async def write_all(self, entries: list[KV[Any, Any]]) -> None:
        """Put each ``KV(key, value)``; a None value deletes its key."""
        async with _connection_errors("batch PUT", [k for k, _ in entries]):
            await self._write_all(entries)

    async def aclose(self) -> None:
        """Close the session of the running loop."""
        session = self._sessions.pop(asyncio.get_running_loop(), None)
        if session is not None:
            await session.close()


@contextlib.asynccontextmanager
async def _connection_errors(what: str, keys: Any) -> AsyncIterator[None]:
    try:
        yield
    except ClientError as exc:
        raise RemoteCallError(f"{what} {keys!r}: {type(exc).__name__}: {exc}") from exc
