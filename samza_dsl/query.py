"""A small client of a running job's interactive queries (docs/queries.md): the value of a key
of one of its stores, or the entries of a prefix or a range, read from the latest state or the
committed one, from the query endpoints of the job's containers (``query.enabled``).

Each container answers for the tasks it runs; the client asks every endpoint it is given and
takes the answer of the one whose task holds the key. A key found nowhere is ``found: False``
only when every endpoint answered for its tasks; while tasks move between members (a rebalance)
an endpoint answers "moving" and the client raises ``QueryMoving``: try again, the answer is
never a wrong one. ``samza-dsl query`` uses it, with the endpoints it finds in the job's
records.

With ``standby=True``, a key whose active member does not answer (down, frozen, moving) is asked
again of the members that did, with ``standby=true``: a member that keeps a standby replica of
the key's task answers from it, committed state at most (``"standby": True`` and the member).

>>> client = QueryClient(["http://127.0.0.1:1"], timeout=0.5)
>>> try:
...     client.get("counts", 42)
... except QueryError as e:
...     print(str(e)[:47])
no query endpoint answered: http://127.0.0.1:1:
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from samza_dsl.errors import SamzaError

__all__ = ["QueryClient", "QueryError", "QueryMoving"]


class QueryError(SamzaError):
    """A query that cannot be answered: the message says why and what to do."""


class QueryMoving(QueryError):
    """The key's task is moving between members (a rebalance, a restore): try again."""


class QueryClient:
    """Queries the endpoints ``urls`` (``http://HOST:PORT``, one per container) of a job.

    Args:
        urls: the containers' query endpoints.
        token: the job's ``query.token``, where its endpoints need one.
        timeout: seconds to wait for each endpoint.
        standby: a key whose active member does not answer may be read from a member's
            standby replica of its task (committed state; module docstring).
    """

    def __init__(self, urls: Sequence[str], token: str | None = None,
                 timeout: float = 10.0, standby: bool = False) -> None:
        if not urls:
            raise QueryError("no query endpoint to ask: run the job with query.enabled=true")
        self.urls = [u.rstrip("/") for u in urls]
        self.token = token
        self.timeout = timeout
        self.standby = standby
        #: an open connection per endpoint (its server keeps it alive), none while in use
        self._conns: dict[str, http.client.HTTPConnection] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the connections kept open to the endpoints (the next query opens them again)."""
        with self._lock:
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.close()

    def __enter__(self) -> QueryClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def get(self, store: str, key: Any, read: str = "latest") -> dict[str, Any]:
        """The answer for one key: ``{"store", "key", "found", "value", "read", "task",
        "partition", "member"}`` (and ``"standby": True`` from a standby's replica). ``key`` is
        sent as JSON unless it is a string."""
        params = {"read": read, **_key_param("key", key)}
        failed: list[str] = []
        try:
            answers = self._ask_all(store, params, failed)
        except QueryError as e:
            if not self.standby or not failed:
                raise
            return self._from_standbys(store, params, failed, e)
        found = [a for a in answers if a.get("found")]
        if found:
            return found[0]
        return {**answers[0], "member": None, "members": [a.get("member") for a in answers]}

    def _from_standbys(self, store: str, params: dict[str, str], failed: list[str],
                       error: QueryError) -> dict[str, Any]:
        """The key of ``params`` from the standby replicas of the members that answered (not
        ``failed``), or ``error`` again where none holds it and they cover not every task."""
        answers = []
        for url in self.urls:
            if url in failed:
                continue
            status, body = self._ask(url, store, {**params, "standby": "true"})
            if status == 200:
                if body.get("found"):
                    return {**body, "unanswered": failed}
                answers.append(body)
        covered = {t for a in answers for t in (*a.get("tasks", []), *a.get("standby_tasks", []))}
        every = max((int(a.get("job_tasks", 0)) for a in answers), default=1)
        if answers and len(covered) >= every:
            return {**answers[0], "member": None, "unanswered": failed,
                    "members": [a.get("member") for a in answers]}
        raise error

    def prefix(self, store: str, prefix: str, read: str = "latest",
               limit: int = 100) -> dict[str, Any]:
        """The entries whose string keys start with ``prefix``, in key order."""
        return self._entries(store, {"prefix": prefix, "read": read, "limit": str(limit),
                                     "key_type": "str"}, limit)

    def range(self, store: str, start: Any = None, end: Any = None, read: str = "latest",
              limit: int = 100) -> dict[str, Any]:
        """The entries with ``start <= key < end`` (None: no bound) in the order of the store's
        key encoding (as ``table.range`` gives them)."""
        params = {"read": read, "limit": str(limit)}
        if start is not None:
            params.update(_key_param("from", start))
        if end is not None:
            params.update(_key_param("to", end))
        if isinstance(start, str) or isinstance(end, str):
            params["key_type"] = "str"
        return self._entries(store, params, limit)

    def _entries(self, store: str, params: dict[str, str], limit: int) -> dict[str, Any]:
        answers = self._ask_all(store, params)
        entries = [e for a in answers for e in a.get("entries", [])]
        entries.sort(key=lambda e: json.dumps(e["key"], sort_keys=True))
        return {"store": store, "read": params["read"], "entries": entries[:limit],
                "more": len(entries) > limit or any(a.get("more") for a in answers),
                "members": [a.get("member") for a in answers]}

    def _ask_all(self, store: str, params: dict[str, str], failed: list[str] | None = None
                 ) -> list[dict[str, Any]]:
        """Every endpoint's answer; ``failed`` gets the endpoints that did not answer or are
        moving."""
        answers: list[dict[str, Any]] = []
        unreachable: list[str] = []
        moving: list[str] = []
        failed = [] if failed is None else failed
        for url in self.urls:
            status, body = self._ask(url, store, params)
            if status is None or (status == 503 and not body.get("moving")):
                unreachable.append(f"{url}: {body['error']}")  # down, stopping, its loop busy
                failed.append(url)
            elif status == 200:
                answers.append(body)
            elif status == 503 and body.get("moving"):
                moving.append(f"{url}: {body['error']}")
                failed.append(url)
            elif status == 404 and body.get("tasks") == []:
                continue  # a member with no task of the store: the others answer
            else:
                raise QueryError(f"{url}: {body.get('error', status)}")
        if moving:
            raise QueryMoving(f"store {store!r}: tasks are moving between members ("
                              f"{'; '.join(moving)}): try again")
        if unreachable and not answers:
            raise QueryError(f"no query endpoint answered: {'; '.join(unreachable)}")
        if unreachable and not any(a.get("found") for a in answers):
            raise QueryError(f"store {store!r}: not found among the members that answered, and "
                             f"{len(unreachable)} did not ({'; '.join(unreachable)}): the key "
                             f"may be theirs; try again")
        if not answers:
            raise QueryError(f"no member of the job holds a task with store {store!r}")
        covered = {t for a in answers for t in a.get("tasks", [])}
        every = max(int(a.get("job_tasks", 0)) for a in answers)
        if len(covered) < every and not any(a.get("found") for a in answers):
            raise QueryMoving(f"store {store!r}: the members that answered hold {len(covered)} "
                              f"of its {every} tasks; the others are moving between members: "
                              f"try again")
        return answers

    def _ask(self, url: str, store: str, params: dict[str, str]
             ) -> tuple[int | None, dict[str, Any]]:
        path = f"/query/{urllib.parse.quote(store, safe='')}?{urllib.parse.urlencode(params)}"
        split = urllib.parse.urlsplit(url)
        if split.scheme == "http" and split.hostname:
            return self._ask_kept(url, split, path)
        request = urllib.request.Request(url + path)  # noqa: S310 (a URL the job wrote)
        if self.token is not None:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:  # noqa: S310
                return int(resp.status), json.loads(resp.read())
        except urllib.error.HTTPError as e:
            try:
                return int(e.code), json.loads(e.read())
            except ValueError:
                return int(e.code), {"error": f"HTTP {e.code} {e.reason}"}
        except (OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            return None, {"error": f"{getattr(reason, 'strerror', None) or reason}"}


    def _ask_kept(self, url: str, split: urllib.parse.SplitResult, path: str
                  ) -> tuple[int | None, dict[str, Any]]:
        """``_ask`` over the connection kept open to ``url``: one that its server closed
        meanwhile (its idle timeout) is opened again once (a query only reads)."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token is not None else {}
        while True:
            with self._lock:
                conn = self._conns.pop(url, None)
            fresh = conn is None
            if conn is None:
                conn = http.client.HTTPConnection(split.hostname or "", split.port,
                                                  timeout=self.timeout)
            try:
                conn.request("GET", split.path.rstrip("/") + path, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    http.client.CannotSendRequest) as e:
                conn.close()
                if fresh:
                    return None, {"error": f"{getattr(e, 'strerror', None) or e}"}
                continue  # closed by its server while it waited: once more, on a new one
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                return None, {"error": f"{getattr(e, 'strerror', None) or e}"}
            if resp.will_close:
                conn.close()
            else:
                with self._lock:
                    kept = self._conns.setdefault(url, conn)
                if kept is not conn:  # another thread's was put back first
                    conn.close()
            try:
                return int(resp.status), json.loads(data)
            except ValueError:
                return int(resp.status), {"error": f"HTTP {resp.status} {resp.reason}"}


def _key_param(name: str, key: Any) -> dict[str, str]:
    if isinstance(key, str):
        return {name: key, "key_type": "str"}
    return {name: json.dumps(key), "key_type": "json"}
