"""A container's endpoint for interactive queries of its tasks' stores (docs/queries.md), on with
``query.enabled``: a thread of its own (``runtime.host.http_thread``) on ``query.host`` (127.0.0.1)
and ``query.port`` (0: any free one; container i of several on port + i) answers

- ``GET /query/<store>?key=K``: the value of one key;
- ``GET /query/<store>?prefix=P`` (string keys) or ``?from=A&to=B`` (keys in ``[A, B)`` in the
  order of their encoding, as ``table.range`` gives them), with ``limit=N`` (100, at most 10,000);

each with ``read=latest`` (the default: what the job's ``get`` gives now, unflushed writes
included) or ``read=committed`` (what the last checkpoint covers, ``runtime.state.views``), and
says which it read; with ``standby=true``, a key none of its active tasks holds is read from its
standby replicas too (committed state: ``runtime.engine.query_read``). A key is text: JSON where it parses as a JSON number, string, list, true or
false and the store's key serde takes that (``key_type=str`` takes the text as it is). Keys and
values are decoded by the store's serdes. Answers are JSON: 200 for a key found
(``"found": true``) and for a key that is not (``"found": false``); 400 for a request that is
wrong (a key the serde rejects, a store in memory asked for committed state); 404 for a store
the job does not have or this container holds no task of; 401 without the token; 503 while the
container's tasks are moving (a rebalance, a restore: "try again"). The reads run on the
container's event loop, one callback each, so they never race the task that writes the store;
the thread waits for at most ``WAIT_S`` for it.

Where ``query.host`` is not a loopback address, ``query.token`` is required and every query
brings it as ``Authorization: Bearer TOKEN``. The container records its address in
``<job.dir>/query/container-<i>.json`` (and a member of a consumer group in its member record
too, which ``samza-dsl status`` reads), where ``samza-dsl query`` finds it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hmac
import ipaddress
import json
import logging
import os
import time
import urllib.parse
from typing import Any

import msgspec

from runtime.engine.query_read import QueryAnswer, read_query
from runtime.host.http_thread import Reply, ThreadServer
from runtime.host.jobdir import job_dir
from runtime.state.backend import StoreBackend
from runtime.state.views import CommittedViews, NoView
from samza_dsl.config import secret_value
from samza_dsl.errors import ConfigError, SamzaError

__all__ = ["QueryEndpoint", "query_file", "is_loopback", "query_json", "WAIT_S"]

_log = logging.getLogger("samza_dsl.query")

#: how long a query waits for the container's loop to read for it
WAIT_S = 5.0


def query_file(root: str, container_index: int) -> str:
    """Where container ``container_index`` of a job whose job.dir is ``root`` records its query
    endpoint's address."""
    return os.path.join(root, "query", f"container-{container_index}.json")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class QueryEndpoint:
    """The query endpoint of ``container`` (module docstring)."""

    def __init__(self, container: Any) -> None:
        self.container = container
        cfg = container.config
        self.index = int(cfg.job.container_id or 0)
        self.host = str(cfg.query.host)
        self.port = int(cfg.query.port) + self.index if cfg.query.port else 0
        self.token: str | None = None
        if cfg.query.token is not None:
            self.token = secret_value("query.token", cfg.query.token)
        if self.token is None and not is_loopback(self.host):
            raise ConfigError(f"query.host={self.host} is not a loopback address: set "
                              f"query.token (env:VAR or file:PATH) so that only who holds it "
                              f"can read the job's stores, or keep query.host=127.0.0.1")
        self.root = job_dir(container.job.plan.job_name, cfg.job)
        self.url: str | None = None
        self.views = CommittedViews()
        self._http: ThreadServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._file: str | None = None
        #: queries answered on the loop, and the loop's seconds they took
        self.answered = 0
        self.loop_s = 0.0

    def start(self) -> str:
        self._loop = asyncio.get_running_loop()
        state = self.container.state
        if isinstance(state, StoreBackend):  # LMDB stores: it keeps views from each commit
            state.views = self.views
        http = ThreadServer(self._reply, name="samza-query", with_headers=True)
        try:
            host, port = http.start(self.host, self.port)
        except OSError as exc:
            raise SamzaError(f"query.port: cannot listen on {self.host}:{self.port}: "
                             f"{exc.strerror or exc}; set query.port to a free port (0 picks "
                             f"one)") from None
        self._http = http
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}"
        self._record()
        _log.info("query endpoint at %s/query/<store>", self.url)
        return self.url

    def _record(self) -> None:
        path = query_file(self.root, self.index)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"url": self.url, "pid": os.getpid(), "container": self.index}, f)
            os.replace(tmp, path)
            self._file = path
        except OSError as exc:  # samza-dsl query cannot find it here; the endpoint serves
            _log.warning("query endpoint: could not record its address in %s: %s", path, exc)

    def close(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            http.close()
        if self._file is not None:
            with contextlib.suppress(OSError):
                os.remove(self._file)
            self._file = None
        state = self.container.state
        if isinstance(state, StoreBackend) and state.views is self.views:
            state.views = None
        self.views.close()

    # -- the server's thread ------------------------------------------------------------------

    def _reply(self, method: str, target: str, headers: dict[str, str]) -> Reply:
        status, body = self.handle(method, target, headers)
        return status, "application/json", _dumps(body) + b"\n"

    def handle(self, method: str, target: str,
               headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """The status and body of a request (``headers`` by lower-case name), from any thread
        but the container's loop, which it waits for (the job page serves ``/query`` so)."""
        path, _, query = target.partition("?")
        if method not in ("GET", "HEAD"):
            return 405, {"error": f"{method} {path}: use GET"}
        if not path.startswith("/query/") or len(path) <= len("/query/"):
            return 404, {"error": f"no {path}: ask /query/<store>?key=K"}
        if self.token is not None:
            given = headers.get("authorization", "")
            scheme, _, token = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                    token.strip().encode(), self.token.encode()):
                return 401, {"error": "this query endpoint needs its token: send "
                                      "Authorization: Bearer TOKEN (query.token)"}
        store = urllib.parse.unquote(path[len("/query/"):])
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(query, keep_blank_values=True).items()}
        loop = self._loop
        if loop is None or loop.is_closed():
            return 503, {"error": "the container is stopping: try again", "store": store}
        done: concurrent.futures.Future[tuple[int, dict[str, Any]]] = concurrent.futures.Future()

        def run() -> None:
            if done.set_running_or_notify_cancel():
                t0 = time.perf_counter()
                try:
                    done.set_result(self.answer(store, params))
                except BaseException as exc:  # said to the client, in one line
                    done.set_exception(exc)
                self.answered += 1
                self.loop_s += time.perf_counter() - t0
        try:
            loop.call_soon_threadsafe(run)
            return done.result(WAIT_S)
        except concurrent.futures.TimeoutError:
            done.cancel()
            return 503, {"error": f"the container's event loop did not read for the query "
                                  f"within {WAIT_S:.0f} s (busy): try again", "store": store}
        except RuntimeError:  # the loop closed
            return 503, {"error": "the container is stopping: try again", "store": store}

    # -- the container's loop -----------------------------------------------------------------

    def answer(self, store: str, params: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """The status and body of a query of ``store`` (on the container's loop)."""
        try:
            return 200, read_query(self.container, self.views, self.member, store, params)
        except QueryAnswer as a:
            return a.status, {**a.body, "store": store}
        except NoView as e:
            return 400, {"error": str(e), "store": store}

    def member(self) -> str:
        status = self.container.lifecycle.status() if self.container.lifecycle else {}
        group = status.get("group") or {}
        return str(group.get("member") or f"container-{self.index}")


def _builtins(obj: Any) -> Any:
    if isinstance(obj, bytes | bytearray | memoryview):
        return bytes(obj).decode("utf-8", "backslashreplace")
    return str(obj)


def query_json(body: Any) -> bytes:
    """An answer's body as JSON (keys and values as the store's serdes decoded them)."""
    return _dumps(body)


def _dumps(body: Any) -> bytes:
    return msgspec.json.encode(msgspec.to_builtins(body, enc_hook=_builtins, str_keys=True))
