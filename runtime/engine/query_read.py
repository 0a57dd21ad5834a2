"""How a container reads its tasks' stores for an interactive query (``runtime.engine.query``),
on its event loop: the key's value in the task that holds it, or the entries of a range or a
prefix across its tasks, from the latest state or the committed one (``runtime.state.views``),
decoded by the store's serdes.

With ``standby=true``, a key this member's active tasks do not hold is looked for in the
replicas of the standby tasks it keeps (``runtime.kafka.standby``, which the member's task
lifecycle holds as ``standby``: ``runtime.engine.systems.StandbyReads``): committed state at most, whatever ``read`` asked, and the answer
says so (``"standby": true``, ``"read": "committed"``, the replica's changelog offset and the
task checkpoint's)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from runtime.state.ttl import table_ttl
from runtime.state.views import CommittedViews, latest_scan, replica_get

__all__ = ["QueryAnswer", "read_query", "DEFAULT_LIMIT"]

DEFAULT_LIMIT = 100
_MAX_LIMIT = 10_000
_READS = ("latest", "committed")


class QueryAnswer(Exception):
    """A query's answer other than 200: its status and one-line error."""

    def __init__(self, status: int, error: str, **more: Any) -> None:
        super().__init__(error)
        self.status = status
        self.body = {"error": error, **more}


def read_query(container: Any, views: CommittedViews, member: Callable[[], str], store: str,
               params: dict[str, str]) -> dict[str, Any]:
    """The answer to a query of ``store`` with ``params`` (``runtime.engine.query``)."""
    read = params.get("read", "latest")
    if read not in _READS:
        raise QueryAnswer(400, f"read={read!r}: ask read=latest or read=committed")
    asked = params.get("standby", "false").lower()
    if asked not in ("true", "false", "1", "0", ""):
        raise QueryAnswer(400, f"standby={params['standby']!r}: give true or false")
    standby = asked in ("true", "1")
    lifecycle = container.lifecycle
    replicas = lifecycle.standby if standby and lifecycle is not None else None
    plan = container.job.plan
    if store not in plan.stores:
        known = ", ".join(sorted(plan.stores)) or "none"
        raise QueryAnswer(404, f"job {plan.job_name!r} has no store {store!r}; its stores: "
                               f"{known}")
    if standby and "key" not in params:
        raise QueryAnswer(400, "standby=true answers a key (key=K): ask a prefix or a range "
                               "of the members that run the tasks")
    phase, ready, _ = container.health_state()
    on_standby = replicas.holding(store) if replicas is not None else []
    if not ready and not on_standby:
        raise QueryAnswer(503, f"the container is {phase}: its tasks are moving or restoring; "
                               f"try again", moving=True)
    # while tasks move, a standby query reads the replicas only
    held = [(t, t.stores[store]) for t in list(container.tasks) if store in t.stores] \
        if ready else []
    if any(s.remote for _, s in held):
        raise QueryAnswer(400, f"store {store!r} is a remote table: ask its service")
    tasks = sorted(t.name for t, _ in held)
    # the job's tasks with the store: a client that asked every member knows a key is nowhere
    # only once the tasks they answered for are all of them
    every = sum(1 for t in container.job.tasks if store in _stores_of(plan, t))
    base = {"store": store, "read": read, "member": member(), "tasks": tasks,
            "job_tasks": every}
    if standby:
        base["standby_tasks"] = on_standby
    if not held and not on_standby:
        more = " nor standby replica" if standby else ""
        raise QueryAnswer(404, f"this container ({base['member']}) holds no task{more} with "
                               f"store {store!r}; ask another member", tasks=[])
    if "key" not in params:
        return {**base, **_many(views, held, store, read, params)}
    got = _one(views, held, store, read, params) if held else None
    if got is not None and (got["found"] or not on_standby):
        return {**base, **got}
    return {**base, **_on_standby(container, replicas, on_standby, store, read, params, got)}


def _on_standby(container: Any, replicas: Any, tasks: list[str], store: str, read: str,
                params: dict[str, str], active: dict[str, Any] | None) -> dict[str, Any]:
    """A key's committed value in the replicas of this member's standby ``tasks`` (module
    docstring); ``active``: what its active tasks answered (the key is in none)."""
    ttl = table_ttl(container.job.plan, store)
    said = {"standby": True, "read": "committed"}
    if read == "latest":
        said["standby_read"] = ("a standby holds committed state only: this is what the "
                                "task's last checkpoint it has seen covers, at most")
    key: Any = None
    for task in tasks:
        def look(replica: Any) -> tuple[Any, tuple[bool, Any, int]]:
            k, kb = _key(store, replica, params["key"], params.get("key_type", ""))
            return k, replica_get(replica, kb, ttl)
        got = replicas.read(task, store, look)
        if got is None:  # closed since: the task moved
            continue
        (key, (found, value, offset)), checkpoint = got
        if found:
            return {"key": key, "found": True, "value": value, "task": task,
                    "partition": container.job.task(task).partition, **said,
                    "changelog_offset": offset, "checkpoint_changelog_offset": checkpoint}
    if active is not None:
        return {**active, "standby": False}
    return {"key": key, "found": False, "value": None, "task": None, "partition": None,
            **said}


def _stores_of(plan: Any, task: Any) -> set[str]:
    """The stores of a task of the job: every table, and the state of the windows and joins of
    the stages it runs (``runtime.engine.wiring.build_operators``)."""
    ops = {op for stage in task.stages for op in stage.operators}
    return {name for name, spec in plan.stores.items()
            if spec.table is not None or spec.op_id in ops}


def _key(store: str, codec: Any, text: str, key_type: str) -> tuple[Any, bytes]:
    """The key object ``text`` names and its encoding by the store's key serde."""
    tried: list[Any] = []
    if key_type not in ("", "auto", "json", "str"):
        raise QueryAnswer(400, f"key_type={key_type!r}: give json, str or leave it out")
    if key_type in ("", "auto", "json"):
        try:
            parsed = json.loads(text)
        except ValueError:
            if key_type == "json":
                raise QueryAnswer(400, f"key {text!r} is not JSON (key_type=json)") from None
        else:
            if isinstance(parsed, list):
                parsed = tuple(parsed)
            if not isinstance(parsed, dict) and parsed is not None:
                tried.append(parsed)
    if key_type != "json" and text not in tried:
        tried.append(text)
    why = ""
    for key in tried:
        try:
            return key, codec.encode_key(key)
        except Exception as e:
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    raise QueryAnswer(400, f"key {text!r} does not encode with the key serde of store "
                           f"{store!r} ({why}); give a key of the type the store holds")


def _one(views: CommittedViews, held: list[tuple[Any, Any]], store: str, read: str,
         params: dict[str, str]) -> dict[str, Any]:
    key, kb = _key(store, held[0][1], params["key"], params.get("key_type", ""))
    offsets = {}
    for task, s in held:
        if read == "latest":
            value = s.peek(key)
        else:
            vb, offsets[task.name] = views.get(task.name, store, s, kb)
            value = None if vb is None else s.decode_value(vb)
        if value is not None:
            out = {"key": key, "found": True, "value": value, "task": task.name,
                   "partition": task.model.partition}
            if read == "committed":
                out["changelog_offset"] = offsets[task.name]
            return out
    return {"key": key, "found": False, "value": None, "task": None, "partition": None}


def _bound(store: str, codec: Any, params: dict[str, str], name: str) -> bytes | None:
    if name not in params:
        return None
    return _key(store, codec, params[name], params.get("key_type", ""))[1]


def _prefix_bounds(store: str, codec: Any, prefix: str) -> tuple[bytes, bytes]:
    """The byte range holding the encodings of the string keys that start with ``prefix``:
    what the encodings of ``prefix`` and of ``prefix`` + a high character share."""
    try:
        a, b = codec.encode_key(prefix), codec.encode_key(prefix + "\U0010ffff")
    except Exception as e:
        raise QueryAnswer(400, f"prefix {prefix!r}: the key serde of store {store!r} does not "
                               f"take strings ({type(e).__name__}); ask from=&to= instead") \
            from None
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    lo = a[:n]
    hi = lo.rstrip(b"\xff")
    hi = hi[:-1] + bytes([hi[-1] + 1]) if hi else b""
    return lo, hi


def _many(views: CommittedViews, held: list[tuple[Any, Any]], store: str, read: str,
          params: dict[str, str]) -> dict[str, Any]:
    try:
        limit = int(params.get("limit", DEFAULT_LIMIT))
    except ValueError:
        raise QueryAnswer(400, f"limit={params['limit']!r}: give a number") from None
    if not 1 <= limit <= _MAX_LIMIT:
        raise QueryAnswer(400, f"limit={limit}: give 1 to {_MAX_LIMIT}")
    codec = held[0][1]
    prefix = params.get("prefix")
    if prefix is not None:
        lo, hi = _prefix_bounds(store, codec, prefix)
        hi_or_none: bytes | None = hi or None
    elif "from" in params or "to" in params:
        lo_or_none, hi_or_none = _bound(store, codec, params, "from"), _bound(store, codec,
                                                                              params, "to")
        lo = lo_or_none or b""
    else:
        raise QueryAnswer(400, "give key=K, prefix=P, or from=A and/or to=B")
    found: list[tuple[bytes, Any, Any, Any]] = []
    for task, s in held:
        if read == "latest":
            rows = s.latest_range(lo or None, hi_or_none, limit + 1, prefix, latest_scan(s))
            found += [(kb, k, v, task) for kb, k, v in rows]
        else:
            raw, _ = views.scan(task.name, store, s, lo or None, hi_or_none, limit + 1)
            found += [(kb, s.decode_key(kb), v, task) for kb, vb in raw
                      if (v := s.decode_value(vb)) is not None]  # None: expired (a ttl)
    if prefix is not None:
        found = [e for e in found if isinstance(e[1], str) and e[1].startswith(prefix)]
    found.sort(key=lambda e: e[0])
    more = len(found) > limit
    return {"entries": [{"key": k, "value": v, "task": t.name,
                         "partition": t.model.partition}
                        for _, k, v, t in found[:limit]],
            "more": more}
